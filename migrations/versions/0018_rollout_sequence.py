"""Every rollout its own id: the views number rollouts recorded before rollout ids carried a sequence.

Revision ID: 0018_rollout_sequence
Revises: 0017_signed_merkle_log
Create Date: 2026-12-06

Since CloneSet rules 14 and SidecarSet rules 4 a rollout id is ``<ns>/<name>@<revision>#<sequence>``, the
sequence being the number of ``RolloutStarted`` events of its stream so far (docs/events.md, "Rollout
ids"). Events recorded before carry ``<ns>/<name>@<revision>``, so a rollback to an earlier revision or a
second roll to the same one shared its id with the first. Stored rows are never rewritten (the hash chain
covers them): the function ``rollout_of(stream, position, id)`` gives such an id the sequence it has at
its position in its stream, exactly as the planner numbers rollouts now, and returns a numbered id as it
is. Every view that reads a payload's ``rollout_id`` reads it through that function.

The views are rewritten from their stored definitions (``pg_get_viewdef``), so whatever migration last
defined each is kept; the column lists and types are unchanged (CREATE OR REPLACE keeps GRANTs). The
downgrade restores the plain ``rollout_id`` reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0018_rollout_sequence"
down_revision: str | None = "0017_signed_merkle_log"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# rollout_of is inlined into the views (a SQL function of one expression, no subquery): a numbered id,
# every row since rules 14, costs a strpos; only an id recorded before goes through rollout_sequence_of,
# which counts its stream's RolloutStarted events up to it (events_type_stream_idx).
FUNCTION = """
CREATE OR REPLACE FUNCTION rollout_sequence_of(stream text, at_position bigint) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT count(*) FROM events AS started
    WHERE started.type = 'RolloutStarted' AND started.stream = rollout_sequence_of.stream
      AND started.global_position <= at_position
$$
"""
INLINED = """
CREATE OR REPLACE FUNCTION rollout_of(stream text, at_position bigint, rollout_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN rollout_id IS NULL OR strpos(rollout_id, '#') > 0 THEN rollout_id
        ELSE rollout_id || '#' || rollout_sequence_of(stream, at_position)
    END
$$
"""
COMMENT = (
    "COMMENT ON FUNCTION rollout_of(text, bigint, text) IS 'the rollout id of an event: a numbered id as"
    " recorded, an id recorded before rollouts were numbered with its sequence in its stream'"
)

# The deparsed read of a payload's rollout id (its table alias is left out where the deparser finds it
# unambiguous), and what replaces it.
_PLAIN = re.compile(r"\(((?:\w+\.)?)payload ->> 'rollout_id'::text\)")
_NUMBERED = re.compile(
    r"rollout_of\(((?:\w+\.)?)stream, \1global_position, \(\1payload ->> 'rollout_id'::text\)\)"
)


def _views() -> list[tuple[str, str]]:
    rows = op.get_bind().execute(
        text(
            "SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'v' AND n.nspname = current_schema() ORDER BY c.oid"
        )
    )
    return [(str(name), str(sql)) for name, sql in rows]


def _rewrite(pattern: re.Pattern[str], replacement: str) -> None:
    for name, sql in _views():
        new = pattern.sub(replacement, sql)
        if new != sql:
            op.execute(f"CREATE OR REPLACE VIEW {name} AS {new}")


def upgrade() -> None:
    op.execute(FUNCTION)
    op.execute(INLINED)
    op.execute(COMMENT)
    _rewrite(_PLAIN, r"rollout_of(\1stream, \1global_position, (\1payload ->> 'rollout_id'::text))")


def downgrade() -> None:
    _rewrite(_NUMBERED, r"(\1payload ->> 'rollout_id'::text)")
    op.execute("DROP FUNCTION rollout_of(text, bigint, text)")
    op.execute("DROP FUNCTION rollout_sequence_of(text, bigint)")
