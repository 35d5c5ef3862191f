"""The services run a rollout end to end logged in as the writer role, and /history and the audit views
answer as the reader: the grants of migration 0016 are all they need, and no service holds the owner's
or a superuser's login."""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.db_roles import Duty, role_sql
from services.infra.settings import Settings
from tests.e2e.cluster import Cluster, image_of, is_ready, seed_cloneset, with_image
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "sample"


async def _login_urls(database_url: str) -> dict[str, str]:
    admin = await asyncpg.connect(asyncpg_url(database_url))
    parts = urlsplit(asyncpg_url(database_url))
    urls = {}
    duties: tuple[Duty, ...] = ("writer", "reader")
    try:
        for duty in duties:
            role = await admin.fetchval(f"SELECT {role_sql(duty)}")
            password = secrets.token_urlsafe(24)
            await admin.execute(f"ALTER ROLE \"{role}\" PASSWORD '{password}'")
            netloc = f"{quote(role)}:{password}@{parts.hostname}:{parts.port or 5432}"
            urls[duty] = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    finally:
        await admin.close()
    return urls


async def test_a_rollout_end_to_end_as_the_writer(
    stack: Stack, stack_settings: Settings, cluster: Cluster
) -> None:
    urls = await _login_urls(stack_settings.database_url)
    await stack.start(
        "auditor",
        "watcher",
        "planner",
        "executor",
        env={"ROLLBOOK_DATABASE_URL": urls["writer"], "ROLLBOOK_DATABASE_READER_URL": urls["reader"]},
    )
    await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml"))

    async def updated(count: int, image: str) -> bool:
        pods = await cluster.pods(NAME)
        ready = [p for p in pods.values() if is_ready(p) and image_of(p) == image]
        return len(pods) == count and len(ready) == count

    await wait_for(lambda: updated(5, "nginx:alpine"), within=60, what="5 ready pods")
    await cluster.patch_cloneset(NAME, with_image(seed_cloneset("cloneset-sample.yaml"), "nginx:mainline"))
    await wait_for(lambda: updated(5, "nginx:mainline"), within=90, what="5 pods on the new image")

    reader = await asyncpg.connect(urls["reader"])
    try:
        finished = await reader.fetchval(
            "SELECT count(*) FROM pod_actions WHERE pod_namespace = $1 AND outcome IS NOT NULL",
            cluster.namespace,
        )
        assert finished >= 5
        # Every connection the services hold is the writer's or the reader's login: none is a superuser's.
        logins = {
            row[0]
            for row in await reader.fetch(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            )
        }
        writer, reader_role = (urlsplit(urls[d]).username for d in ("writer", "reader"))
        assert writer in logins and logins <= {writer, reader_role}
    finally:
        await reader.close()
    history = await stack.get_json("auditor", "/history?after=0&limit=5")
    assert len(history["events"] if isinstance(history, dict) else history) > 0
    assert stack.dead() == []
