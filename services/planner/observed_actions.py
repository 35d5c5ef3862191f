"""What happened to a pod between two consecutive observations of it: the pod actions someone else took
(docs/shadow.md, "Observed pod actions"). Pure: two views in, a list of changes out.

A view keeps what tells actions apart: the uid (a new uid under a known name is a new pod), the revision
label, the containers' images, whether the pod is Ready / in service, and whether it is terminating.

- none -> present: ``createPod`` (``recreatePod`` if an earlier pod had the name), then ``becameReady``
  if it is Ready;
- present -> terminating or gone: ``deletePod``, once (at the first sign of it);
- present -> another uid: ``deletePod`` of the old pod (unless already terminating), then as above;
- same pod, revision label or images changed: ``updateInPlace``, then ``becameReady`` if Ready now and
  not before;
- same pod, in service -> not (Ready or InPlaceUpdateReady False), no update: ``leftService`` (not recorded:
  it marks when an in-place update starts);
- same pod, not Ready -> Ready: ``becameReady``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.model.actions import BECAME_READY, ActionKind
from services.model.availability import READY_CONDITION, pod_available
from services.planner.names import REVISION_LABEL


@dataclass(frozen=True)
class PodView:
    uid: str
    revision: str | None
    images: tuple[tuple[str, str], ...]  # (container, image) of spec.containers
    ready: bool  # Ready condition True
    in_service: bool  # available (services/model/availability.py): not terminating, Ready, gate not False
    terminating: bool


@dataclass(frozen=True)
class Change:
    action: str  # createPod, recreatePod, deletePod, updateInPlace, becameReady, leftService
    uid: str
    revision: str | None = None  # the pod's revision after the change
    from_revision: str | None = None
    images: tuple[tuple[str, str], ...] = ()
    from_images: tuple[tuple[str, str], ...] = ()


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def pod_view(obj: dict[str, Any]) -> PodView:
    metadata = obj.get("metadata") or {}
    containers = (obj.get("spec") or {}).get("containers") or []
    return PodView(
        uid=str(metadata.get("uid", "")),
        revision=(metadata.get("labels") or {}).get(REVISION_LABEL),
        images=tuple((str(c.get("name", "")), str(c.get("image", ""))) for c in containers),
        ready=_condition(obj, READY_CONDITION) == "True",
        in_service=pod_available(obj),
        terminating=bool(metadata.get("deletionTimestamp")),
    )


def _appeared(after: PodView, *, name_used: bool) -> list[Change]:
    changes = [
        Change(
            ActionKind.RECREATE_POD if name_used else ActionKind.CREATE_POD,
            after.uid,
            after.revision,
            images=after.images,
        )
    ]
    if after.terminating:
        changes.append(Change(ActionKind.DELETE_POD, after.uid, after.revision))
    elif after.ready:
        changes.append(Change(BECAME_READY, after.uid, after.revision))
    return changes


def changes(before: PodView | None, after: PodView | None, *, name_used: bool = False) -> list[Change]:
    """The changes from ``before`` to ``after`` (None: no pod under that name). ``name_used``: an earlier
    pod had this name (its replacement is a recreate)."""
    if after is None:
        if before is None or before.terminating:
            return []
        return [Change(ActionKind.DELETE_POD, before.uid, before.revision)]
    if before is None:
        return _appeared(after, name_used=name_used)
    if before.uid != after.uid:
        gone = [] if before.terminating else [Change(ActionKind.DELETE_POD, before.uid, before.revision)]
        return gone + _appeared(after, name_used=True)
    if after.terminating:
        return [] if before.terminating else [Change(ActionKind.DELETE_POD, after.uid, after.revision)]
    result: list[Change] = []
    if before.revision != after.revision or before.images != after.images:
        result.append(
            Change(
                ActionKind.UPDATE_IN_PLACE,
                after.uid,
                after.revision,
                before.revision,
                images=after.images,
                from_images=before.images,
            )
        )
    elif before.in_service and not after.in_service:
        result.append(Change("leftService", after.uid, after.revision))
    if after.ready and not before.ready:
        result.append(Change(BECAME_READY, after.uid, after.revision))
    return result
