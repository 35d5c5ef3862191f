"""A CloneSet's pod actions as the executor reads them: one Struct per action kind, decoded from
``PodActionRequested.details`` (``services.kinds.registry.requested_action``).

Each encodes to exactly the details the planner writes (services/kinds/cloneset/rules/decisions.py
``_action``: the plan's action as its JSON has it, then the uids and the observed resourceVersion it adds),
same keys in the same order, so nothing recorded changes (tests/kinds/test_actions.py checks it byte for
byte). A field the executor does not read is ``UNSET`` when absent, so a details dict decodes and encodes back
unchanged whatever it holds of them."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from services.model.actions import ActionKind


class _PodAction(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="action", rename="camel", omit_defaults=True
):
    pod: str | UnsetType = UNSET
    reason: str | UnsetType = UNSET


class CreatePVC(_PodAction, frozen=True, kw_only=True, tag=ActionKind.CREATE_PVC.value):
    """A claim on its own (planners before CloneSet rules 11)."""

    pvc: str | UnsetType = UNSET
    object: dict[str, Any]


class CreatePod(_PodAction, frozen=True, kw_only=True, tag=ActionKind.CREATE_POD.value):
    revision: str | UnsetType = UNSET
    instance_id: str | UnsetType = UNSET
    object: dict[str, Any]
    pvcs: list[dict[str, Any]] = []  # the claims to create before the pod


class DeletePod(_PodAction, frozen=True, kw_only=True, tag=ActionKind.DELETE_POD.value):
    with_pvcs: bool = msgspec.field(name="withPVCs")
    pvcs: list[str] = []
    uid: str | None | UnsetType = UNSET
    pvc_uids: dict[str, str | None] | UnsetType = UNSET


class DeletePVC(_PodAction, frozen=True, kw_only=True, tag=ActionKind.DELETE_PVC.value):
    pvc: str
    uid: str | None | UnsetType = UNSET


class RecreatePod(_PodAction, frozen=True, kw_only=True, tag=ActionKind.RECREATE_POD.value):
    revision: str | UnsetType = UNSET
    patch: dict[str, Any]
    uid: str | None | UnsetType = UNSET
    resource_version: str | UnsetType = UNSET


class UpdateInPlace(_PodAction, frozen=True, kw_only=True, tag=ActionKind.UPDATE_IN_PLACE.value):
    revision: str | UnsetType = UNSET
    patch: dict[str, Any]
    change: str | UnsetType = UNSET
    restart_containers: list[str] | UnsetType = UNSET
    not_ready: dict[str, Any] | None = None  # the condition written first (no grace period)
    uid: str | None | UnsetType = UNSET
    resource_version: str | UnsetType = UNSET


class ResizePod(_PodAction, frozen=True, kw_only=True, tag=ActionKind.RESIZE.value):
    revision: str | UnsetType = UNSET
    resources: dict[str, Any]  # container name -> resources
    restart_containers: list[str] | UnsetType = UNSET
    uid: str | None | UnsetType = UNSET
    resource_version: str | UnsetType = UNSET


class MarkNotReady(_PodAction, frozen=True, kw_only=True, tag=ActionKind.MARK_NOT_READY.value):
    condition: dict[str, Any]
    patch: dict[str, Any] | None = None
    revision: str | UnsetType = UNSET
    uid: str | None | UnsetType = UNSET
    resource_version: str | UnsetType = UNSET


class MarkReady(_PodAction, frozen=True, kw_only=True, tag=ActionKind.MARK_READY.value):
    condition: dict[str, Any]
    patch: dict[str, Any] | None = None
    uid: str | None | UnsetType = UNSET
    resource_version: str | UnsetType = UNSET


class PatchPod(_PodAction, frozen=True, kw_only=True, tag=ActionKind.PATCH_POD.value):
    patch: dict[str, Any]
    uid: str | None | UnsetType = UNSET
    resource_version: str | UnsetType = UNSET


class SetPodsToDelete(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The CloneSet's own ``spec.scaleStrategy.podsToDelete`` (the request targets the workload)."""

    pods_to_delete: list[str]


# Actions patching an existing pod's spec or metadata (the executor's ``_patch_pod``), and its marks.
Patch = UpdateInPlace | RecreatePod | PatchPod
Mark = MarkNotReady | MarkReady
Action = CreatePVC | CreatePod | DeletePod | DeletePVC | Patch | ResizePod | Mark | SetPodsToDelete

ACTIONS: dict[str, type[Action]] = {
    ActionKind.CREATE_PVC: CreatePVC,
    ActionKind.CREATE_POD: CreatePod,
    ActionKind.DELETE_POD: DeletePod,
    ActionKind.DELETE_PVC: DeletePVC,
    ActionKind.RECREATE_POD: RecreatePod,
    ActionKind.UPDATE_IN_PLACE: UpdateInPlace,
    ActionKind.RESIZE: ResizePod,
    ActionKind.MARK_NOT_READY: MarkNotReady,
    ActionKind.MARK_READY: MarkReady,
    ActionKind.PATCH_POD: PatchPod,
    ActionKind.SET_PODS_TO_DELETE: SetPodsToDelete,
}


def uid_of(action: Action) -> str | None:
    """The incarnation of the object the action targets (its precondition), None when it names none."""
    uid = getattr(action, "uid", None)
    return uid if isinstance(uid, str) and uid else None


def observed_version(action: Action) -> str | None:
    """The resourceVersion the planner computed the action from (services/model/pod_writes.py), if named."""
    version = getattr(action, "resource_version", None)
    return version if isinstance(version, str) and version else None
