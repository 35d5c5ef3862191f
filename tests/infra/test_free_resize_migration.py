"""Migration 0033: a pod in a resize that restarts nothing (Updating, Ready, its in-place state naming the
resize) is in service for the SQL as for the planner; the downgrade puts 0032's rule back."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from services.infra.database import asyncpg_url
from tests.infra.test_store_migrations import _alembic
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

LIFECYCLE = "lifecycle.apps.kruise.io/state"
STATE = "apps.kruise.io/inplace-update-state"


def _pod(state: dict[str, Any], *, lifecycle: str = "Updating", in_place: str = "True") -> str:
    return json.dumps(
        {
            "metadata": {
                "name": "web-a",
                "labels": {LIFECYCLE: lifecycle},
                "annotations": {STATE: json.dumps(state)},
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T00:00:00Z"},
                    {"type": "InPlaceUpdateReady", "status": in_place},
                ],
            },
        }
    )


RESIZING = _pod({"revision": "web-2", "rollbookResize": {"app": {"requests": {"cpu": "200m"}}}})
RESIZING_WITH_RESTART = _pod({"revision": "web-2", "rollbookResize": {"app": {}}}, in_place="False")
UPDATING = _pod({"revision": "web-2", "updateResources": False})


async def _in_service(url: str) -> tuple[bool, bool, bool]:
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        return tuple(  # type: ignore[return-value]
            [
                await conn.fetchval("SELECT pod_in_service($1::jsonb)", pod)
                for pod in (RESIZING, RESIZING_WITH_RESTART, UPDATING)
            ]
        )
    finally:
        await conn.close()


async def _definition(url: str) -> str:
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        return str(await conn.fetchval("SELECT pg_get_functiondef('pod_in_service(jsonb)'::regprocedure)"))
    finally:
        await conn.close()


async def test_a_resize_that_restarts_nothing_is_in_service_from_0033_on(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0032_openkruise_availability")
        before = await _definition(url)
        assert await _in_service(url) == (False, False, False)
        _alembic(url, "upgrade", "0033_free_resize_in_service")
        assert await _in_service(url) == (True, False, False)
        _alembic(url, "downgrade", "0032_openkruise_availability")
        assert await _in_service(url) == (False, False, False)
        assert await _definition(url) == before
