"""``action_outcomes.pod`` names the CloneSet of a ``setPodsToDelete`` as before (docs/sql.md).

Revision ID: 0011_workload_action_target
Revises: 0010_parity_progress_deadline
Create Date: 2026-12-01

``PodActionRequested`` schema v2 names the workload an action acts on itself (``setPodsToDelete``: the
CloneSet) in ``workload`` and leaves ``pod`` empty; v1 rows named the CloneSet in ``pod``. The view reads
either, so its ``pod`` column (and ``pod_actions``', built on it) says the same for old and new rows. The
column list is unchanged, so the view is replaced in place and the views built on it stay.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0011_workload_action_target"
down_revision: str | None = "0010_parity_progress_deadline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_POD_V1 = "e.payload->>'pod' AS pod,"
_POD_V2 = "coalesce(e.payload->>'workload', e.payload->>'pod') AS pod,"


def _action_outcomes_0003() -> str:
    """The view as 0003_sidecarset_audit_views defined it (its latest definition)."""
    path = Path(__file__).with_name("0003_sidecarset_audit_views.py")
    spec = importlib.util.spec_from_file_location("rollbook_migration_0003_sidecarset_audit_views", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path.name}, whose view 0011 redefines")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sql: str = module.VIEWS["action_outcomes"]
    if sql.count(_POD_V1) != 1:  # not an assert: `python -O` would let a wrong view through
        raise RuntimeError(f"{path.name}'s action_outcomes no longer reads the pod as 0011 expects")
    return sql


def upgrade() -> None:
    sql = _action_outcomes_0003().replace(_POD_V1, _POD_V2)
    op.execute(f"CREATE OR REPLACE VIEW action_outcomes AS {sql}")


def downgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW action_outcomes AS {_action_outcomes_0003()}")
