"""The hash-chain trigger with one index lookup per row instead of two, when it can; same hashes.

Revision ID: 0006_fast_hash_chain
Revises: 0005_pod_action_started
Create Date: 2026-11-30

0004's ``events_chain()`` runs two queries per inserted row: the stream's previous row (for stream_hash)
and the last row in global order (for chain_hash). Measured on the append path (docs/events.md,
"Benchmark"), those two lookups were over half of what the chain costs the database per row.

The row that holds the previous chain_hash very often is the stream's previous version too: a batch of
one stream (``append``, the planner's rounds, a COPY of a stream's history) inserts version v right after
v-1. So this version reads the last row in global order once, with its stream and stream_version, and
takes its stream_hash as the previous one of the stream when it is that stream at stream_version - 1.
Correct because versions are integers: if (stream, v-1) exists it is the stream's highest version below v,
which is what 0004's query returns. In every other case (another stream was written in between, or the
versions have a gap) it asks the index as before. The hashes are exactly those of 0004
(services/model/hashchain.py verifies both alike): nothing is re-chained, no data changes.

Rows skipped by ON CONFLICT DO NOTHING pass through the trigger too but are never inserted; both lookups
read the table (rows inserted earlier in the same statement are visible to them), so a skipped row is
never taken as a previous one: no state is carried from one trigger call to the next.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006_fast_hash_chain"
down_revision: str | None = "0005_pod_action_started"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ZERO = "'\\x" + "00" * 32 + "'::bytea"

# 0004's content expression, unchanged (the hash input must stay the same).
_CONTENT = r"""
    convert_to(concat_ws(E'\x1f',
        NEW.event_id::text, NEW.stream, NEW.stream_version::text, NEW.type, NEW.schema_version::text,
        (extract(epoch FROM NEW.occurred_at) * 1000000)::bigint::text,
        (extract(epoch FROM NEW.recorded_at) * 1000000)::bigint::text,
        coalesce(NEW.causation_id::text, ''), coalesce(NEW.correlation_id, ''), NEW.payload::text), 'UTF8')
"""

_STREAM_LOOKUP = """
            SELECT e.stream_hash INTO previous_stream FROM events e
             WHERE e.stream = NEW.stream AND e.stream_version < NEW.stream_version
             ORDER BY e.stream_version DESC LIMIT 1;
"""

_FAST = f"""
CREATE OR REPLACE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    last_stream text;
    last_version integer;
    last_stream_hash bytea;
    previous_stream bytea;
    previous_chain bytea;
BEGIN
    SELECT e.stream, e.stream_version, e.stream_hash, e.chain_hash
      INTO last_stream, last_version, last_stream_hash, previous_chain
      FROM events e ORDER BY e.global_position DESC LIMIT 1;
    IF last_stream = NEW.stream AND last_version = NEW.stream_version - 1 THEN
        previous_stream := last_stream_hash;
    ELSE
        {_STREAM_LOOKUP}
    END IF;
    NEW.stream_hash := sha256(coalesce(previous_stream, {_ZERO}) || {_CONTENT});
    NEW.chain_hash := sha256(coalesce(previous_chain, {_ZERO})
                             || int8send(NEW.global_position) || NEW.stream_hash);
    RETURN NEW;
END
$$
"""

# 0004's function exactly, for the downgrade.
_PREVIOUS = f"""
CREATE OR REPLACE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    previous_stream bytea;
    previous_chain bytea;
BEGIN
    {_STREAM_LOOKUP}
    SELECT e.chain_hash INTO previous_chain FROM events e
     ORDER BY e.global_position DESC LIMIT 1;
    NEW.stream_hash := sha256(coalesce(previous_stream, {_ZERO}) || {_CONTENT});
    NEW.chain_hash := sha256(coalesce(previous_chain, {_ZERO})
                             || int8send(NEW.global_position) || NEW.stream_hash);
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.execute(_FAST)


def downgrade() -> None:
    op.execute(_PREVIOUS)
