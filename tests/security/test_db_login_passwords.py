"""deploy/'s migration Job gives the duty logins their passwords from the Secrets' URLs
(`rollbook db upgrade --set-passwords`), so `kubectl apply -k` yields logins that work without anyone
typing ALTER ROLE; and it cannot be turned into a way to set another login's password."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.db_roles import role_name
from tests.plugins.database import fresh_database, password_inline
from tests.plugins.servers import ServerUrls

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]
REPO_ROOT = Path(__file__).resolve().parents[2]


def _url(server: str, database: str, login: str, password: str) -> str:
    parts = urlsplit(asyncpg_url(server))
    netloc = f"{quote(login, safe='')}:{quote(password, safe='')}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(("postgresql", netloc, f"/{database}", "", ""))


def _matches(verifier: str, password: str) -> bool:
    """Does a stored SCRAM-SHA-256 verifier accept ``password`` (RFC 5802: StoredKey = H(ClientKey))?"""
    method, rest = verifier.split("$", 1)
    iterations_salt, keys = rest.split("$")
    iterations, salt = iterations_salt.split(":")
    stored_key = keys.split(":")[0]
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    return method == "SCRAM-SHA-256" and hashlib.sha256(client_key).digest() == base64.b64decode(stored_key)


async def _verifier(server: str, role: str) -> str | None:
    admin = await asyncpg.connect(asyncpg_url(server))
    try:
        value: str | None = await admin.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", role)
        return value
    finally:
        await admin.close()


def _upgrade(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment.update(env, ROLLBOOK_NATS_URL=os.environ.get("ROLLBOOK_NATS_URL", "nats://127.0.0.1:4222"))
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", "db", "upgrade", "--set-passwords"],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


async def test_the_migration_sets_each_duty_logins_password_from_its_url(server_urls: ServerUrls) -> None:
    server = server_urls.database_url
    async with fresh_database(server, prefix="rollbook_pw") as admin_url:
        database = urlsplit(admin_url).path.lstrip("/")
        passwords = {duty: secrets.token_urlsafe(18) + "/:@" for duty in ("writer", "reader", "webhook")}
        urls = {d: _url(server, database, role_name(database, d), pw) for d, pw in passwords.items()}  # type: ignore[arg-type]
        env = {
            "ROLLBOOK_DATABASE_OWNER_URL": admin_url,
            "ROLLBOOK_DATABASE_URL": urls["writer"],
            "ROLLBOOK_DATABASE_READER_URL": urls["reader"],
            "ROLLBOOK_DATABASE_WEBHOOK_URL": urls["webhook"],
        }
        done = await asyncio.to_thread(_upgrade, env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "passwords set: " in done.stdout
        for duty, password in passwords.items():
            assert password not in done.stdout + done.stderr  # never printed
            verifier = await _verifier(server, role_name(database, duty))  # type: ignore[arg-type]
            assert verifier is not None and _matches(verifier, password), duty
            assert not _matches(verifier, password + "x")

        # Run again with a new Secret (a rotated password): the login follows it.
        rotated = secrets.token_urlsafe(18)
        env["ROLLBOOK_DATABASE_URL"] = _url(server, database, role_name(database, "writer"), rotated)
        again = await asyncio.to_thread(_upgrade, env)
        assert again.returncode == 0, again.stdout + again.stderr
        verifier = await _verifier(server, role_name(database, "writer"))
        assert verifier is not None and _matches(verifier, rotated)


async def test_a_url_naming_another_login_changes_no_password(server_urls: ServerUrls) -> None:
    server = server_urls.database_url
    async with fresh_database(server, prefix="rollbook_pw") as admin_url:
        database = urlsplit(admin_url).path.lstrip("/")
        superuser = urlsplit(asyncpg_url(server)).username or "postgres"
        before = await _verifier(server, superuser)
        reader = secrets.token_urlsafe(18)
        env = {
            # The owner's URL with its password in it, so that the refusal below is not the one of a URL
            # that names no password: the superuser with another password is still another login's.
            "ROLLBOOK_DATABASE_OWNER_URL": password_inline(admin_url, default="the-owner-s-own"),
            # A Secret edited to name the superuser: the migration must not set its password.
            "ROLLBOOK_DATABASE_URL": _url(server, database, superuser, "attacker-chosen"),
            "ROLLBOOK_DATABASE_READER_URL": _url(server, database, role_name(database, "reader"), reader),
        }
        refused = await asyncio.to_thread(_upgrade, env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.startswith(f"rollbook: the writer's URL logs in as {superuser!r}")
        assert "Traceback" not in refused.stderr
        assert await _verifier(server, superuser) == before
        # Nothing at all was changed: the reader's valid URL was not applied either.
        verifier = await _verifier(server, role_name(database, "reader"))
        assert verifier is None or not _matches(verifier, reader)


async def test_the_one_superuser_url_in_every_secret_migrates_and_changes_no_password(
    server_urls: ServerUrls,
) -> None:
    """The simcluster page's set-up: one superuser's URL, its password in it, in all four Secrets. The
    migration Job runs as it and sets no password: none of the URLs names a duty login, and the one they
    name is the migration's own, with its own password (an attacker's Secret naming it with another
    password is refused above)."""
    server = server_urls.database_url
    async with fresh_database(server, prefix="rollbook_pw") as admin_url:
        superuser = urlsplit(asyncpg_url(server)).username or "postgres"
        before = await _verifier(server, superuser)
        one = password_inline(admin_url, default="ignored-by-a-trusting-server")
        env = {
            "ROLLBOOK_DATABASE_OWNER_URL": one,
            "ROLLBOOK_DATABASE_URL": one,
            "ROLLBOOK_DATABASE_READER_URL": one,
            "ROLLBOOK_DATABASE_WEBHOOK_URL": one,
        }
        done = await asyncio.to_thread(_upgrade, env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "passwords set: none" in done.stdout
        assert "warning: the writer, reader, webhook URL(s) log in as the owner's login" in done.stderr
        assert await _verifier(server, superuser) == before
