"""The embedded Postgres's database, logins and password file: what both the embedded servers
(services/infra/embedded.py) and the finding of a running stack (services/infra/stack.py) name."""

from __future__ import annotations

from pathlib import Path

from services.infra.db_roles import Duty, role_name

# The database the embedded Postgres serves rollbook from (services/infra/embedded.py creates it).
EMBEDDED_DATABASE = "rollbook"

# The libpq password file of an embedded Postgres, under the data dir (services/infra/embedded.py).
PASSFILE = "pgpass"
# The login of each duty on the embedded Postgres: the superuser runs migrations (acting as the owner role).
EMBEDDED_LOGINS: dict[Duty, str] = {
    "owner": "postgres",
    "writer": role_name(EMBEDDED_DATABASE, "writer"),
    "reader": role_name(EMBEDDED_DATABASE, "reader"),
    "webhook": role_name(EMBEDDED_DATABASE, "webhook"),
}


def embedded_url(data_path: Path, port: int, duty: Duty, database: str = EMBEDDED_DATABASE) -> str:
    """The URL of ``duty``'s login on the embedded Postgres: no password in it, the data dir's passfile
    named instead (libpq, psql and asyncpg all read ``?passfile=``)."""
    passfile = data_path.resolve() / PASSFILE
    return f"postgresql://{EMBEDDED_LOGINS[duty]}@127.0.0.1:{port}/{database}?passfile={passfile}"
