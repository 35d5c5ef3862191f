"""A pod in a resize that restarts nothing is in service.

rollbook resizes a pod in place through ``pods/resize`` without restarting anything when every container's
resize policy allows it: the pod stays Ready (InPlaceUpdateReady is not written False) and in its
Services, though its lifecycle state is ``Updating`` until the kubelet has actuated the resize. 0032 held
it unavailable for that state, as OpenKruise's ``IsPodAvailable`` holds every ``Updating`` pod, so
``max_unavailable_exceeded`` listed every such rollout. Now, as services/model/availability.py has it
(planner rules v16), ``pod_in_service`` also takes an ``Updating`` pod whose in-place state annotation (the
first present of ``apps.kruise.io/inplace-update-state`` and ``inplace-update-state``, a JSON string)
names rollbook's ``"rollbookResize"`` key, read as text so a state that is not JSON cannot fail a query.

Only the function's body changes (CREATE OR REPLACE keeps the views built on it); the downgrade puts back
0032's.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from services.infra.database import migration_module

revision: str = "0033_free_resize_in_service"
down_revision: str | None = "0032_openkruise_availability"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As services/model/availability.py has them (written out: a migration's SQL must not change after it ran).
LIFECYCLE_STATE_LABEL = "lifecycle.apps.kruise.io/state"
INPLACE_STATE_ANNOTATIONS = ("apps.kruise.io/inplace-update-state", "inplace-update-state")
RESIZE_STATE_KEY = "rollbookResize"

_ANNOTATIONS = "pod -> 'metadata' -> 'annotations'"
# The first state annotation present and not JSON null, as Python's ``annotations.get`` reads them.
_STATE = (
    "coalesce("
    + ", ".join(f"nullif({_ANNOTATIONS} -> '{name}', 'null'::jsonb)" for name in INPLACE_STATE_ANNOTATIONS)
    + ")"
)
_LIFECYCLE = f"pod -> 'metadata' -> 'labels' ->> '{LIFECYCLE_STATE_LABEL}'"
_RESIZING = (
    f"coalesce(jsonb_typeof({_STATE}) = 'string' AND strpos({_STATE} #>> '{{}}', '\"{RESIZE_STATE_KEY}\"') > 0,"
    " false)"
)
SIGNATURE = "pod_in_service(pod jsonb)"
COMMENT = (
    "a pod is available at minReadySeconds 0: not terminating, lifecycle state empty or Normal (or Updating"
    " in a resize that restarts nothing), Running, Ready, InPlaceUpdateReady absent or True"
    " (services/model/availability.py)"
)


def _before() -> object:
    return migration_module("0032_openkruise_availability.py")


def upgrade() -> None:
    before = _before()
    body: str = before.FUNCTIONS[SIGNATURE]  # type: ignore[attr-defined]
    old = f"AND coalesce(pod -> 'metadata' -> 'labels' ->> '{LIFECYCLE_STATE_LABEL}', '') IN ('', 'Normal')"
    assert body.count(old) == 1, "0032's pod_in_service no longer reads the lifecycle state this way"
    new = (
        f"AND (coalesce({_LIFECYCLE}, '') IN ('', 'Normal')\n"
        f"        OR ({_LIFECYCLE} = 'Updating' AND {_RESIZING}))"
    )
    op.execute(f"CREATE OR REPLACE FUNCTION {SIGNATURE} {body.replace(old, new)}")
    op.execute(f"COMMENT ON FUNCTION pod_in_service(jsonb) IS '{COMMENT}'")


def downgrade() -> None:
    before = _before()
    op.execute(f"CREATE OR REPLACE FUNCTION {SIGNATURE} {before.FUNCTIONS[SIGNATURE]}")  # type: ignore[attr-defined]
    comment = before.COMMENTS["pod_in_service(jsonb)"].replace("'", "''")  # type: ignore[attr-defined]
    op.execute(f"COMMENT ON FUNCTION pod_in_service(jsonb) IS '{comment}'")
