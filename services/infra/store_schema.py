"""SQLAlchemy Core description of the ``events`` table, for queries written with Core.

The schema itself is owned by Alembic (migrations/versions/); this mirrors it and must be
kept in step with it (tests/infra/test_store_migrations.py compares the two).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Integer, LargeBinary, MetaData, Table, Text, Uuid
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

events_table = Table(
    "events",
    metadata,
    Column("global_position", BigInteger, primary_key=True),
    Column("event_id", Uuid, nullable=False, unique=True),
    Column("stream", Text, nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("causation_id", Uuid, nullable=True),
    Column("correlation_id", Text, nullable=True),
    Column("payload", JSONB, nullable=False),
    # Tamper evidence (migrations/versions/0004_event_hash_chain.py), set by a trigger, never by writers.
    Column("stream_hash", LargeBinary, nullable=False),
    Column("chain_hash", LargeBinary, nullable=False),
)

event_checkpoints_table = Table(
    "event_checkpoints",
    metadata,
    Column("global_position", BigInteger, primary_key=True),
    Column("chain_hash", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
