"""``pod_actions`` folds into an in-place update only the ``markNotReady`` that took its pod out of service
for it (columns in docs/sql.md).

Revision ID: 0013_inplace_mark_of_its_own
Revises: 0012_outcome_started_at
Create Date: 2026-12-02

An in-place update's row starts at its ``markNotReady`` step, found as the latest earlier ``markNotReady``
of the same pod and rollout. Since CloneSet rules v10 an update with no grace period has none: its
``updateInPlace`` writes the ``InPlaceUpdateReady=False`` condition itself (``details.notReady``). A
``markNotReady`` is also how an ``inPlaceUpdate`` lifecycle hook with ``markPodNotReady`` takes the pod out
of ``KruisePodReady`` when it enters PreparingUpdate, before the update; so such an update's row took its
``requested``, ``started``, ``queued`` and ``duration`` from the hook's mark. Now the step is looked up
only for an ``updateInPlace`` without ``notReady``, and only among marks that write the
``InPlaceUpdateReady`` condition (``details.condition.type``): the grace-period path's, and older trails'.

The column list is unchanged, so the view is replaced in place. The downgrade restores 0012's definition
exactly, built from that migration's own text.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0013_inplace_mark_of_its_own"
down_revision: str | None = "0012_outcome_started_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE_0005 = """
            WHERE a.action = 'updateInPlace' AND b.action = 'markNotReady'
"""
_BEFORE_0013 = """
            WHERE a.action = 'updateInPlace' AND b.action = 'markNotReady'
              AND a.details->'notReady' IS NULL
              AND b.details->'condition'->>'type' = 'InPlaceUpdateReady'
"""


def _migration(file: str) -> ModuleType:
    """An earlier migration module, whose view text this one builds on or restores verbatim."""
    path = Path(__file__).with_name(file)
    spec = importlib.util.spec_from_file_location(f"rollbook_migration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path.name}, whose view 0013 redefines")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pod_actions_0012() -> tuple[str, str]:
    """The view and its comment as 0012_outcome_started_at defined them (their latest definition)."""
    module = _migration("0012_outcome_started_at.py")
    sql, _ = module._pod_actions_0007()
    return sql.replace(module._TOOK_0005, module._TOOK_0012), str(module.COMMENT)


def upgrade() -> None:
    sql, comment = _pod_actions_0012()
    if sql.count(_BEFORE_0005) != 1:  # not an assert: `python -O` would let a wrong view through
        raise RuntimeError("0012's pod_actions no longer finds the markNotReady step as 0013 expects")
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql.replace(_BEFORE_0005, _BEFORE_0013)}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{comment}'")


def downgrade() -> None:
    sql, comment = _pod_actions_0012()
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{comment}'")
