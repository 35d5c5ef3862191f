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
import importlib.util
from collections.abc import Callable

import pytest

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

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


if importlib.util.find_spec("uvloop") is not None:  # not on Windows, where it does not build

    def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, LoopFactory]:
        """The services run on uvloop (services/cli/runtime.py): the code they run is tested on it."""
        import uvloop

        return {"uvloop": uvloop.new_event_loop}


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
