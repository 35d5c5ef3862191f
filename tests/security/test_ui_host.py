"""`rollbook ui` against a DNS-rebinding page and against a network reader: a request naming another
host (a name an attacker's DNS points at 127.0.0.1) is refused; beyond the loopback the API routes need
the API token, while the page itself (no recorded data) loads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from aiohttp import web

from services.cli.ui import allowed_hosts, host_allowed, is_loopback, make_app
from services.infra.api_auth import FileToken
from services.infra.database import asyncpg_url
from services.infra.store import EventStore

on_session_loop = pytest.mark.asyncio(loop_scope="session")


def test_only_address_literals_and_named_hosts_are_served() -> None:
    hosts = allowed_hosts("127.0.0.1", ["rollbook.internal"])
    for header in ("127.0.0.1:8090", "localhost:8090", "[::1]:8090", "10.0.0.7", "rollbook.internal:80"):
        assert host_allowed(header, hosts), header
    for header in ("attacker.example:8090", "127.0.0.1.nip.io:8090", "", "localhost.attacker.example"):
        assert not host_allowed(header, hosts), header
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and is_loopback("127.0.0.1")


@pytest_asyncio.fixture(loop_scope="session")
async def ui_url(
    event_store: EventStore, database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[str, str]]:
    check = FileToken(tmp_path / "api-token")
    pool = await asyncpg.create_pool(asyncpg_url(database_url), min_size=1, max_size=2)
    runner = web.AppRunner(make_app(pool, event_store, hosts=allowed_hosts("0.0.0.0"), check=check))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", check.token
    finally:
        await runner.cleanup()
        await pool.close()


async def _get(url: str, headers: dict[str, str]) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=headers) as response:
            return response.status, await response.text(), response.headers.get("Content-Security-Policy", "")


@on_session_loop
async def test_a_rebound_name_is_refused(ui_url: tuple[str, str]) -> None:
    url, token = ui_url
    auth = {"Authorization": f"Bearer {token}"}
    status, _, _ = await _get(url + "/api/rollouts", {**auth, "Host": "attacker.example:8090"})
    assert status == 403
    status, _, _ = await _get(url + "/", {"Host": "attacker.example"})
    assert status == 403
    status, _, csp = await _get(url + "/api/rollouts", auth)
    assert status == 200
    assert "script-src 'self'" in csp


@on_session_loop
async def test_beyond_the_loopback_the_api_needs_the_token(ui_url: tuple[str, str]) -> None:
    url, token = ui_url
    status, body, _ = await _get(url + "/", {})
    assert status == 200 and "timeline.js" in body  # the page itself carries no trail data
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
        status, body, _ = await _get(url + "/api/rollouts", headers)
        assert status == 401, (headers, body)
    status, _, _ = await _get(url + "/api/rollout?id=x", {"Authorization": f"Bearer {token}"})
    assert status == 404  # through the guard, to the handler
