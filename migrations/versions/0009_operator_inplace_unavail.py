"""``unavailability``: a pod whose InPlaceUpdateReady condition is False is unavailable, as everywhere else.

Revision ID: 0009_operator_inplace_unavail
Revises: 0008_parity_hook_waits
Create Date: 2026-12-01

One definition of "unavailable" for the views, ``rollbook replay`` and ``rollbook what-if``
(services/model/availability.py): a pod is available when it is not terminating, Ready is True and
InPlaceUpdateReady is not False; a workload's unavailable pods are ``replicas - available``. The views
read Ready alone, so the moment between an in-place update's markNotReady (InPlaceUpdateReady=False) and
the kubelet turning Ready to False counted the pod as available there and as unavailable in the planner
and in what-if. The view is replaced with the 0003 text plus that condition (same columns, so
``max_unavailable_exceeded`` on top of it is kept); the downgrade puts the 0003 text back.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0009_operator_inplace_unavail"
down_revision: str | None = "0008_parity_hook_waits"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_READY = "WHERE c->>'type' = 'Ready' AND c->>'status' = 'True'))::int AS available"
_READY_AND_NOT_IN_PLACE = (
    "WHERE c->>'type' = 'Ready' AND c->>'status' = 'True')"
    " AND NOT EXISTS (SELECT 1"
    " FROM jsonb_array_elements(coalesce(e.payload->'object'->'status'->'conditions', '[]')) AS c"
    " WHERE c->>'type' = 'InPlaceUpdateReady' AND c->>'status' = 'False'))::int AS available"
)


def _unavailability_0003() -> str:
    """The 0003 migration's text of the view (this one changes one condition of it)."""
    path = Path(__file__).with_name("0003_sidecarset_audit_views.py")
    spec = importlib.util.spec_from_file_location("rollbook_migration_0003_sidecarset_audit_views", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sql: str = module.VIEWS["unavailability"]
    assert sql.count(_READY) == 1, "the 0003 view no longer has the Ready condition this migration extends"
    return sql


def upgrade() -> None:
    sql = _unavailability_0003().replace(_READY, _READY_AND_NOT_IN_PLACE)
    op.execute(f"CREATE OR REPLACE VIEW unavailability AS {sql}")


def downgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW unavailability AS {_unavailability_0003()}")
