"""Database URLs: the libpq forms an operator writes, a primary and its standbys in one URL included, reach
the store as SQLAlchemy and asyncpg take them."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from services.infra.database import sqlalchemy_url
from services.infra.embedded import _free_port
from services.infra.store import EventStore
from tests.infra.store_helpers import batch, unique_stream


@pytest.mark.parametrize(
    ("url", "converted"),
    [
        ("postgresql://u@db:5432/app", "postgresql+asyncpg://u@db:5432/app"),
        ("postgres://u:pw@db/app?sslmode=require", "postgresql+asyncpg://u:pw@db/app?sslmode=require"),
        ("postgresql+asyncpg://u@db/app", "postgresql+asyncpg://u@db/app"),
        (
            "postgresql://u@pg-a:5432,pg-b:5433/app?target_session_attrs=read-write",
            "postgresql+asyncpg://u@/app?host=pg-a:5432&host=pg-b:5433&target_session_attrs=read-write",
        ),
        ("postgresql://pg-a,pg-b/app", "postgresql+asyncpg:///app?host=pg-a&host=pg-b"),
    ],
)
def test_urls_take_the_drivers_form(url: str, converted: str) -> None:
    assert sqlalchemy_url(url) == converted


def test_something_else_than_postgres_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not a Postgres URL"):
        sqlalchemy_url("mysql://u@db/app")


async def test_a_multi_host_url_reaches_the_writable_server_past_one_that_is_down(database_url: str) -> None:
    """A failover's URL: the first server listed is gone, the store writes to the next one."""
    parts = urlsplit(database_url)
    hosts = f"127.0.0.1:{_free_port()},{parts.netloc.rpartition('@')[2]}"
    user = parts.netloc.rpartition("@")[0]
    query = "&".join(q for q in (parts.query, "target_session_attrs=read-write") if q)
    url = f"{parts.scheme}://{user}@{hosts}{parts.path}?{query}"
    store = await EventStore.connect(url)
    try:
        stream = unique_stream()
        await store.append(batch(stream, 1, 2), expected_version=0)
        assert [e.envelope.stream_version for e in await store.read_stream(stream, 1, 10)] == [1, 2]
    finally:
        await store.close()
