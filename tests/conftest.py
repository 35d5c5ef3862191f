"""Shared test fixtures. Real servers only: Postgres and NATS from ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL
when set (CI points them at the machine's), otherwise embedded ones started for the session.

Fixtures live in plugin modules under tests/plugins/, one per concern.
"""

pytest_plugins: list[str] = []
