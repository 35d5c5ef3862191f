"""Shared test fixtures. Real servers only: Postgres and NATS from ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL
when set (CI points them at the machine's), otherwise embedded ones started for the session.

Fixtures live in plugin modules under tests/plugins/, one per concern:
- servers.py: `server_urls` (which Postgres/NATS servers)
- database.py: `database_url` (a fresh migrated database per session), `event_store`
- nats.py: `settings` (Settings with unique stream/subject names), `bus`
- simcluster.py: `simcluster` (a running SimCluster, zero delays), `k8s_client`, `make_simcluster`
"""

pytest_plugins: list[str] = [
    "tests.plugins.servers",
    "tests.plugins.database",
    "tests.plugins.nats",
    "tests.plugins.simcluster",
]
