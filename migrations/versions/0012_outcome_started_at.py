"""``pod_actions.started`` reads the terminal outcome's ``started_at`` too (columns in docs/sql.md).

Revision ID: 0012_outcome_started_at
Revises: 0011_workload_action_target
Create Date: 2026-12-02

The executor no longer appends ``PodActionStarted`` for an action it completes within one delivery: the
terminal event (``PodActionSucceeded`` / ``PodActionFailed``) carries ``started_at``, when the executor took
the action, and ``executor`` (docs/events.md). It still appends ``PodActionStarted`` for an action that
has to wait (an API retry, a hand-back to the bus), and trails recorded earlier hold one for every action
taken. So ``started`` (and ``queued``, computed from it) is now the earliest of the action's
``PodActionStarted`` time and its outcome's ``started_at``, whichever are recorded; with neither it still
falls back to ``requested``. An action's first taking is the earlier one: a ``PodActionStarted`` is the
first taker's, an outcome's ``started_at`` the taking that completed it.

The column list is unchanged, so the view is replaced in place. The downgrade restores 0007's definition
exactly, built from that migration's own text.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0012_outcome_started_at"
down_revision: str | None = "0011_workload_action_target"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TOOK_0005 = """
            SELECT min(s.occurred_at) AS started
            FROM events AS s
            WHERE s.type = 'PodActionStarted'
              AND s.payload->>'action_id' = coalesce(before.action_id, a.action_id)
"""
# An outcome recorded before outcomes carried ``started_at`` has none: min() skips it.
_TOOK_0012 = """
            SELECT min(CASE s.type WHEN 'PodActionStarted' THEN s.occurred_at
                                   ELSE (s.payload->>'started_at')::timestamptz END) AS started
            FROM events AS s
            WHERE s.type IN ('PodActionStarted', 'PodActionSucceeded', 'PodActionFailed')
              AND s.payload->>'action_id' = coalesce(before.action_id, a.action_id)
"""

COMMENT = (
    "pod actions as an operator sees them, taken by rollbook or observed (driven_by);"
    " started from PodActionStarted or the outcome started_at"
)


def _migration(file: str) -> ModuleType:
    """An earlier migration module, whose view text this one builds on or restores verbatim."""
    path = Path(__file__).with_name(file)
    spec = importlib.util.spec_from_file_location(f"rollbook_migration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path.name}, whose view 0012 redefines")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pod_actions_0007() -> tuple[str, str]:
    """The view and its comment as 0007_shadow_trail defined them (their latest definition)."""
    module = _migration("0007_shadow_trail.py")
    sql = f"{module._rollbook_pod_actions()} UNION ALL {module.OBSERVED_POD_ACTIONS}"
    return sql, str(module.COMMENTS["pod_actions"])


def upgrade() -> None:
    sql, _ = _pod_actions_0007()
    if sql.count(_TOOK_0005) != 1:  # not an assert: `python -O` would let a wrong view through
        raise RuntimeError("0007's pod_actions no longer reads PodActionStarted as 0012 expects")
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql.replace(_TOOK_0005, _TOOK_0012)}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{COMMENT}'")


def downgrade() -> None:
    sql, comment = _pod_actions_0007()
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{comment}'")
