"""The audit views cover the recorded kinds: Deployments and StatefulSets rollbook records but never drives.

Revision ID: 0019_recorded_kinds
Revises: 0018_rollout_sequence
Create Date: 2026-12-06

The flight recorder (docs/kinds.md) folds a recorded workload's observations into
``<Kind>/<ns>/<name>/recorded``: the same ``RevisionCreated``, ``RolloutStarted``, ``RolloutCompleted``,
``PartitionStepPlanned`` and ``PodActionObserved`` events as a CloneSet's shadow trail. ``revisions``,
``pod_actions`` and ``progress_deadlines`` select by event type, so they list them already. This migration:

- ``rollouts`` and ``partition_steps``: a recorded stream's events are ``driven_by`` ``observed`` and stand
  at the position of the observation that showed them, as a shadow trail's do (any kind's ``/recorded``
  stream: a new recorded kind needs no migration);
- ``unavailability``: a recorded workload's pods and the workload itself (its ``spec.replicas``) on its
  ``/observed`` stream are counted as a CloneSet's are.

The views are rewritten from their stored definitions (``pg_get_viewdef``), so whatever migration last
defined each is kept; the column lists and types are unchanged (CREATE OR REPLACE keeps GRANTs).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0019_recorded_kinds"
down_revision: str | None = "0018_rollout_sequence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the deparser writes them. A shadow trail's stream, and a shadow trail's or any recorded trail's.
_SHADOW = "stream ~~ 'CloneSet/%/shadow'::text"
_OBSERVED_TRAIL = "stream ~ '^(CloneSet/[^/]*/[^/]*/shadow|[^/]+/[^/]*/[^/]*/recorded)$'::text"
# unavailability: the workload object whose spec.replicas is the total; the streams it reads.
_CLONESET_REPLICAS = "((e.payload ->> 'kind'::text) = 'CloneSet'::text)"
_WORKLOAD_REPLICAS = "((e.payload ->> 'kind'::text) = split_part(e.stream, '/'::text, 1))"
_SIDECARSET_STREAMS = "(e.stream ~~ 'SidecarSet/%/observed'::text))"
_RECORDED_STREAMS = (
    "(e.stream ~~ 'SidecarSet/%/observed'::text))"
    " OR (((e.payload ->> 'kind'::text) = ANY (ARRAY['Pod'::text, split_part(e.stream, '/'::text, 1)]))"
    " AND (e.stream ~ '^[^/]+/[^/]*/[^/]*/observed$'::text)"
    " AND (split_part(e.stream, '/'::text, 1) <> ALL (ARRAY['CloneSet'::text, 'SidecarSet'::text])))"
)


def _definition(name: str) -> str:
    return str(op.get_bind().execute(text(f"SELECT pg_get_viewdef('{name}'::regclass)")).scalar_one())


def _replace(name: str, pairs: list[tuple[str, str]]) -> None:
    sql = _definition(name)
    for old, new in pairs:
        assert old in sql, f"the view {name} no longer reads {old!r}, which this migration rewrites"
        sql = sql.replace(old, new)
    op.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")


def upgrade() -> None:
    for name in ("rollouts", "partition_steps"):
        _replace(name, [(_SHADOW, _OBSERVED_TRAIL)])
    _replace(
        "unavailability", [(_CLONESET_REPLICAS, _WORKLOAD_REPLICAS), (_SIDECARSET_STREAMS, _RECORDED_STREAMS)]
    )


def downgrade() -> None:
    for name in ("rollouts", "partition_steps"):
        _replace(name, [(_OBSERVED_TRAIL, _SHADOW)])
    _replace(
        "unavailability", [(_RECORDED_STREAMS, _SIDECARSET_STREAMS), (_WORKLOAD_REPLICAS, _CLONESET_REPLICAS)]
    )
