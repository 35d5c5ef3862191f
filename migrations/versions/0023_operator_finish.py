"""pod_actions fast again with numbered rollout ids: a rollout key the indexes can reach.

Revision ID: 0023_operator_finish
Revises: 0018_rollout_sequence
Create Date: 2026-12-06

Since 0018 the views read a rollout id through ``rollout_of`` (an id recorded before rollouts were
numbered gets its sequence), which no index can hold: pod_actions' joins of an in-place update to its
markNotReady and markReady (same rollout) scanned every request of the log instead of one rollout's. The
part of an id before ``#`` is the same in the recorded id and in the id ``rollout_of`` gives (it only
appends ``#<n>``), so:

- ``events_rollout_key_idx`` indexes that part of the recorded id (requests and partition steps);
- ``action_outcomes`` and ``pod_actions`` show it as a last column, ``rollout_key``, and pod_actions'
  joins match it before the full id (the full id still decides);
- ``events_action_outcome_idx`` indexes the action id of PodActionStarted / Succeeded / Failed, the
  three kinds pod_actions' "started" lookup reads (events_action_id_idx, which also holds the requests,
  cannot serve a query that does not name them).

A query for one rollout is fast when it also names its key: ``WHERE rollout_key = split_part($1, '#', 1)
AND rollout_id = $1``. Stored rows are untouched; the views keep their columns, types and order, with
``rollout_key`` added at the end. The downgrade recreates the views as they were and drops the indexes.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0023_operator_finish"
down_revision: str | None = "0019_recorded_kinds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (
    "CREATE INDEX IF NOT EXISTS events_rollout_key_idx"
    " ON events (split_part(payload ->> 'rollout_id', '#', 1))"
    " WHERE type IN ('PodActionRequested', 'PartitionStepPlanned')",
    "CREATE INDEX IF NOT EXISTS events_action_outcome_idx ON events ((payload ->> 'action_id'))"
    " WHERE type IN ('PodActionStarted', 'PodActionSucceeded', 'PodActionFailed')",
)

# What is added to the deparsed views (pg_get_viewdef), and where.
_OUTCOMES_KEY = "split_part((e.payload ->> 'rollout_id'::text), '#'::text, 1) AS rollout_key"
_OUTCOMES_END = 'e.global_position AS "position"\n   FROM (events e'
_ACTIONS_EDITS = (
    ("(b.rollout_id = a.rollout_id)", "(b.rollout_key = a.rollout_key) AND (b.rollout_id = a.rollout_id)"),
    ("(m.rollout_id = a.rollout_id)", "(m.rollout_key = a.rollout_key) AND (m.rollout_id = a.rollout_id)"),
    ("'rollbook'::text AS driven_by\n", "'rollbook'::text AS driven_by,\n    a.rollout_key\n"),
    (
        "'observed'::text AS driven_by\n",
        "'observed'::text AS driven_by,\n"
        "    split_part((o.payload ->> 'rollout_id'::text), '#'::text, 1) AS rollout_key\n",
    ),
)


def _definition(name: str) -> str:
    sql = op.get_bind().execute(text(f"SELECT pg_get_viewdef('{name}'::regclass)")).scalar_one()
    return str(sql).rstrip().rstrip(";")


def _edited(sql: str, edits: Sequence[tuple[str, str]], name: str) -> str:
    for old, new in edits:
        if sql.count(old) != 1:
            raise RuntimeError(f"view {name}: expected one {old!r} in its definition")
        sql = sql.replace(old, new)
    return sql


def upgrade() -> None:
    for statement in INDEXES:
        op.execute(statement)
    outcomes = _edited(
        _definition("action_outcomes"),
        [(_OUTCOMES_END, _OUTCOMES_END.replace('"position"\n', f'"position",\n    {_OUTCOMES_KEY}\n'))],
        "action_outcomes",
    )
    op.execute(f"CREATE OR REPLACE VIEW action_outcomes AS {outcomes}")
    actions = _edited(_definition("pod_actions"), _ACTIONS_EDITS, "pod_actions")
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {actions}")
    op.execute("ANALYZE events")


def downgrade() -> None:
    # A view cannot lose a column in place: the two and the view on action_outcomes are made again.
    unchecked = _definition("actions_without_one_terminal")
    outcomes = _definition("action_outcomes").replace(f",\n    {_OUTCOMES_KEY}", "")
    actions = _definition("pod_actions")
    for old, new in _ACTIONS_EDITS:
        actions = actions.replace(new, old)
    rows = op.get_bind().execute(
        text(
            "SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class AS c"
            " WHERE c.relname IN ('action_outcomes', 'pod_actions', 'actions_without_one_terminal')"
        )
    )
    comments = {str(name): comment for name, comment in rows}
    # Who owns and may read them (the database roles of 0016), given back to the views made again.
    owners = dict(
        op.get_bind()
        .execute(
            text(
                "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class AS c"
                " WHERE c.relname IN ('action_outcomes', 'pod_actions', 'actions_without_one_terminal')"
            )
        )
        .all()
    )
    grants = (
        op.get_bind()
        .execute(
            text(
                "SELECT table_name, grantee, privilege_type FROM information_schema.role_table_grants"
                " WHERE table_name IN ('action_outcomes', 'pod_actions', 'actions_without_one_terminal')"
                " AND grantee <> grantor"
            )
        )
        .all()
    )
    op.execute("DROP VIEW pod_actions")
    op.execute("DROP VIEW actions_without_one_terminal")
    op.execute("DROP VIEW action_outcomes")
    op.execute(f"CREATE VIEW action_outcomes AS {outcomes}")
    op.execute(f"CREATE VIEW actions_without_one_terminal AS {unchecked}")
    op.execute(f"CREATE VIEW pod_actions AS {actions}")
    for name, owner in owners.items():
        op.execute(f'ALTER VIEW {name} OWNER TO "{owner}"')
    for name, grantee, privilege in grants:
        op.execute(f'GRANT {privilege} ON {name} TO "{grantee}"')
    for name, comment in comments.items():
        if comment is not None:
            quoted = str(comment).replace("'", "''")
            op.execute(f"COMMENT ON VIEW {name} IS '{quoted}'")
    op.execute("DROP INDEX IF EXISTS events_action_outcome_idx")
    op.execute("DROP INDEX IF EXISTS events_rollout_key_idx")
