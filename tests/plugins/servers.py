"""Which Postgres and NATS servers the tests use.

ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL when set (CI sets them to the machine's servers); otherwise
embedded servers started once for the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class ServerUrls:
    database_url: str  # a database on the server the tests may use to CREATE DATABASE
    nats_url: str


@pytest.fixture(scope="session")
def server_urls() -> Iterator[ServerUrls]:
    database_url = os.environ.get("ROLLBOOK_DATABASE_URL", "")
    nats_url = os.environ.get("ROLLBOOK_NATS_URL", "")
    if not database_url or not nats_url:
        # TODO(bus helper): start embedded Postgres / nats-server here for whichever is missing.
        database_url = database_url or "postgresql://root@127.0.0.1:5432/test"
        nats_url = nats_url or "nats://127.0.0.1:4222"
    yield ServerUrls(database_url=database_url, nats_url=nats_url)
