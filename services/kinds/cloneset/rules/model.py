"""The planner's wire contract (docs/plan.md): ``PlanInput`` in, ``Plan`` out, camelCase JSON.

Kubernetes objects stay plain dicts, exactly as the API returns them. Actions are a tagged union on the
``action`` field, listed in the order they must be carried out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from services.model.actions import ActionKind


class PlanInput(msgspec.Struct, kw_only=True, rename="camel"):
    clone_set: dict[str, Any]
    pods: list[dict[str, Any]] = []
    pvcs: list[dict[str, Any]] = []
    revisions: list[dict[str, Any]] = []
    now: datetime


class _Action(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="action", rename="camel", omit_defaults=True
):
    pod: str
    reason: str = ""  # why, in words, for the audit trail


class CreatePVC(_Action, frozen=True, kw_only=True, tag=ActionKind.CREATE_PVC.value):
    """One claim on its own: what planners before CloneSet rules 11 requested ahead of each createPod.
    Kept so their plans and trails still read; the planner now puts a new pod's claims in its createPod."""

    pvc: str
    object: dict[str, Any]


class CreatePod(_Action, frozen=True, kw_only=True, tag=ActionKind.CREATE_POD.value):
    revision: str
    instance_id: str
    object: dict[str, Any]
    # The pod's claims (volumeClaimTemplates) that do not exist yet, created before the pod in the same
    # action (OpenKruise's createPods creates an instance's PVCs, then its pod, in one reconcile).
    pvcs: list[dict[str, Any]] = []


class DeletePod(_Action, frozen=True, kw_only=True, tag=ActionKind.DELETE_POD.value):
    with_pvcs: bool = msgspec.field(name="withPVCs")
    pvcs: list[str] = []  # the PVCs to delete with it (when withPVCs)


class DeletePVC(_Action, frozen=True, kw_only=True, tag=ActionKind.DELETE_PVC.value):
    pvc: str


class RecreatePod(_Action, frozen=True, kw_only=True, tag=ActionKind.RECREATE_POD.value):
    revision: str
    patch: dict[str, Any]  # marks the pod apps.kruise.io/specified-delete; later rounds delete and replace it


class UpdateInPlace(_Action, frozen=True, kw_only=True, tag=ActionKind.UPDATE_IN_PLACE.value):
    revision: str
    patch: dict[str, Any]  # strategic merge patch for the pod
    change: str = ""  # Dynamic or Rebuild
    restart_containers: list[str] = []
    # The InPlaceUpdateReady=False condition to write through pods/status first, in the same action (an
    # update with no grace period, as OpenKruise writes the condition then the spec in one reconcile).
    # None: no condition (no restart, or the grace-period path wrote it with the grace record). Older
    # trails have a separate markNotReady before the updateInPlace instead.
    not_ready: dict[str, Any] | None = None


class ResizePod(_Action, frozen=True, kw_only=True, tag=ActionKind.RESIZE.value):
    """Container resources written through ``pods/resize`` (after the in-place update's start patch)."""

    revision: str
    resources: dict[str, Any]  # container name -> resources (requests/limits), as the template sets them
    restart_containers: list[str] = []  # containers whose resizePolicy makes the kubelet restart them


class MarkNotReady(_Action, frozen=True, kw_only=True, tag=ActionKind.MARK_NOT_READY.value):
    # the pod condition to write (status subresource): InPlaceUpdateReady or KruisePodReady
    condition: dict[str, Any]
    patch: dict[str, Any] | None = None  # metadata patch written with it (the grace-period record)
    revision: str = ""


class MarkReady(_Action, frozen=True, kw_only=True, tag=ActionKind.MARK_READY.value):
    # the pod condition to write (status subresource): InPlaceUpdateReady or KruisePodReady
    condition: dict[str, Any]
    patch: dict[str, Any] | None = None


class PatchPod(_Action, frozen=True, kw_only=True, tag=ActionKind.PATCH_POD.value):
    patch: dict[str, Any]  # strategic merge patch of the pod's metadata (lifecycle state, grace record)


Action = (
    CreatePVC
    | CreatePod
    | DeletePod
    | DeletePVC
    | RecreatePod
    | UpdateInPlace
    | ResizePod
    | MarkNotReady
    | MarkReady
    | PatchPod
)


class HookHold(msgspec.Struct, frozen=True, kw_only=True):
    """A pod a lifecycle hook holds this round (it waits for the hook to be released)."""

    pod: str
    hook: str  # preDelete | inPlaceUpdate | preNormal
    state: str  # its lifecycle.apps.kruise.io/state


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    field: str
    reason: str


class Plan(msgspec.Struct, kw_only=True, rename="camel"):
    update_revision: str | None
    current_revision: str | None
    partition: int | None  # resolved pod count kept at the old revision
    actions: list[Action]
    status: dict[str, Any] | None
    requeue_after_seconds: int | None
    rejected: Rejection | None
    step: str = "none"  # scale | update | none | rejected: what this round did
    revisions: list[dict[str, Any]] = []  # ControllerRevisions to record (new, or re-numbered on rollback)
    revisions_to_delete: list[str] = []  # history beyond revisionHistoryLimit
    pods_to_delete: list[str] | None = (
        None  # the pruned scaleStrategy.podsToDelete to write, None = unchanged
    )
    max_unavailable: int | None = None
    max_surge: int | None = None
    expected_updated_replicas: int | None = None
    hook_holds: list[HookHold] = []  # pods held by a lifecycle hook, by pod name


def action_kind(action: Action) -> ActionKind:
    """The kind of a plan action (its ``action`` tag)."""
    return ActionKind(str(action.__struct_config__.tag))
