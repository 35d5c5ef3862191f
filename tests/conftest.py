"""Shared test fixtures. Real servers only: Postgres and NATS from ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL
when set (CI points them at the machine's), otherwise embedded ones started for the session.

Fixtures live in plugin modules under tests/plugins/, one per concern:
- servers.py: `server_urls` (which Postgres/NATS servers)
- database.py: `database_url` (a fresh migrated database per session), `event_store`
- nats.py: `settings` (Settings with unique stream/subject names), `bus`
- simcluster.py: `simcluster` (a running SimCluster, zero delays), `k8s_client`, `make_simcluster`
- stack.py: `stack_settings`, `stack` (the four services as subprocesses), `wait_for`
"""

import asyncio
from collections.abc import Callable

import pytest

from services.cli.runtime import event_loop_factory

LoopFactory = Callable[[], asyncio.AbstractEventLoop]
SERVICES_LOOP = event_loop_factory()  # the loop the services run on: uvloop's where it is installed

pytest_plugins: list[str] = [
    "tests.plugins.servers",
    "tests.plugins.database",
    "tests.plugins.nats",
    "tests.plugins.simcluster",
    "tests.plugins.stack",
]

# Fixtures that reach a server (Postgres, NATS, simcluster or the services). A test whose fixture closure
# has none of them, and that is not marked `servers` (it starts a server itself), is marked `pure`:
# `scripts/test -m pure` runs the fast lane with nothing running.
SERVER_FIXTURES = frozenset({"server_urls", "make_simcluster", "stack", "server_data_dir"})


if SERVICES_LOOP is not None:  # else pytest-asyncio's default, asyncio's loop, as the services use then

    def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, LoopFactory]:
        """The code the services run is tested on the loop they run it on (services/cli/runtime.py)."""
        assert SERVICES_LOOP is not None
        return {"uvloop": SERVICES_LOOP}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVER_FIXTURES or item.get_closest_marker("servers") or item.get_closest_marker("e2e"):
            continue
        item.add_marker(pytest.mark.pure)
    # The slow tests first (the chaos slice takes minutes): with pytest-xdist workers (scripts/test's lanes,
    # which hand out whole modules in this order) one starts on them while the others share the rest,
    # instead of one being left with them at the end.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
