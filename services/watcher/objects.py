"""How the watcher records an object, for CloneSet and SidecarSet streams alike: what counts as a real
change, what is stored, which observations of one append are superseded, and the ``ObjectObserved`` event
with its deterministic id."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from services.model.availability import pod_available
from services.model.events import Envelope, ObjectObserved, ObservationRejected, encode, new_event
from services.model.sidecarset_streams import SIDECARSET_ACTION_ANNOTATION
from services.model.streams import ACTION_ID_ANNOTATION, STATUS_FIELD_MANAGER, derived_id

# Metadata whose change alone is not a real change: the version itself, and the bulky bookkeeping of
# which manager owns which field.
_NOT_A_CHANGE = ("resourceVersion", "managedFields")


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without fields whose change alone is not a real change. A shallow view sharing the
    object's nested values (a deep copy was two thirds of the watcher's CPU): neither is mutated after."""
    metadata = obj.get("metadata") or {}
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k not in _NOT_A_CHANGE}}


def own_status_write(
    before: dict[str, Any], after: dict[str, Any], obj: dict[str, Any], fields: frozenset[str]
) -> frozenset[str]:
    """The status fields ``after`` (``comparable`` of ``obj``, as it arrived with its managedFields) changed
    since ``before`` (the last state seen) when they are only some of these ``fields``, each set by
    rollbook's executor by ``obj``'s managedFields: owned by ``STATUS_FIELD_MANAGER`` through the status
    subresource and by no other manager. Empty when the change is anything else. The API server moves a
    field to whoever wrote it last, so another controller's write of the same count (OpenKruise's, before
    a handover) is not rollbook's. A field removed is nobody's: such a change is not rollbook's write
    either. The manager's name is whatever the writer claims: ``carried_plan`` says whether the values
    are ones rollbook planned."""
    if not fields or before == after:
        return frozenset()
    old, new = before.get("status"), after.get("status")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return frozenset()
    if {k: v for k, v in before.items() if k != "status"} != {
        k: v for k, v in after.items() if k != "status"
    }:
        return frozenset()
    changed = frozenset(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if not changed <= fields or not changed <= set(new):
        return frozenset()
    ours: set[str] = set()
    theirs: set[str] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if not isinstance(entry, dict):
            continue
        status_fields = (entry.get("fieldsV1") or {}).get("f:status") or {}
        owned = (
            {key.removeprefix("f:") for key in status_fields} if isinstance(status_fields, dict) else set()
        )
        if entry.get("manager") == STATUS_FIELD_MANAGER and entry.get("subresource") == "status":
            ours |= owned
        else:
            theirs |= owned
    return changed if changed <= ours and not changed & theirs else frozenset()


def carried_plan(
    status: dict[str, Any],
    changed: frozenset[str],
    fields: frozenset[str],
    planned: Iterable[tuple[int, Any]],
    after: int = 0,
) -> int | None:
    """The plan an own status write carried out: the stream version of the oldest of ``planned`` ((stream
    version, status) of a workload's latest StatusPlanned events) newer than ``after`` (the plan rollbook's
    previous write carried out) whose counts ``status`` shows; None when there is none. A plan matches
    when it carries every ``changed`` field and each of the counted ``fields`` it carries has the value
    ``status`` shows, of the same JSON type: the executor merges a planned status whole, so its write
    leaves all of that plan's counts. Counts mixed from several plans, counts rollbook never planned, and
    a plan written before (the executor writes each once, in planned order) are someone else's write,
    whatever name it claims. The oldest match leaves the newer plans to the writes still to come."""
    found: int | None = None
    for version, candidate in planned:
        if version <= after or (found is not None and version >= found):
            continue
        if not isinstance(candidate, dict) or not changed <= candidate.keys():
            continue
        if all(_same(status.get(k), candidate[k]) for k in fields & candidate.keys()):
            found = version
    return found


def _same(a: object, b: object) -> bool:
    """Equal as JSON: ``True`` is not ``1``, nor ``1.0``."""
    return type(a) is type(b) and a == b


def stripped(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as recorded: managedFields dropped (bulky bookkeeping of field owners)."""
    result = dict(obj)
    metadata = dict(result.get("metadata") or {})
    metadata.pop("managedFields", None)
    result["metadata"] = metadata
    return result


def observation(
    kind: str,
    obj: dict[str, Any],
    change: str,
    *,
    stream: str,
    correlation_id: str | None,
    id_scope: tuple[str, ...] = (),
    born: bool = False,
) -> Envelope:
    """``ObjectObserved`` for one object version, id ``uuid5(*id_scope, uid, resourceVersion[, DELETED])``
    so re-emitting it after a crash stores nothing new; the store assigns the stream version. ``born``: it
    is the watch's ADDED of the object (``ObjectObserved.born``)."""
    metadata = obj.get("metadata") or {}
    uid = str(metadata.get("uid", ""))
    version = str(metadata.get("resourceVersion", ""))
    key: tuple[str, ...] = (uid, version, "DELETED") if change == "DELETED" else (uid, version)
    return new_event(
        ObjectObserved(
            kind=kind,
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name", "")),
            uid=uid,
            resource_version=version,
            change=change,  # type: ignore[arg-type]
            object=stripped(obj),
            born=True if born else msgspec.UNSET,
        ),
        stream=stream,
        stream_version=1,  # the store assigns the real version (append without expected_version)
        occurred_at=datetime.now(UTC),
        event_id=derived_id("observed", *id_scope, *key),
        correlation_id=correlation_id,
    )


def within_ceiling(event: Envelope, limit_bytes: int) -> Envelope:
    """``event`` when it is an observation no larger than ``limit_bytes`` encoded (or not an observation);
    otherwise the ``ObservationRejected`` recorded in its place: same id, stream and correlation, so a
    re-emission stores nothing new either."""
    payload = event.payload
    if not isinstance(payload, ObjectObserved):
        return event
    size = len(encode(event))
    if size <= limit_bytes:
        return event
    return new_event(
        ObservationRejected(
            kind=payload.kind,
            namespace=payload.namespace,
            name=payload.name,
            uid=payload.uid,
            resource_version=payload.resource_version,
            change=payload.change,
            size_bytes=size,
            limit_bytes=limit_bytes,
            reason=(
                f"the observation of {payload.kind} {payload.namespace}/{payload.name} is {size} bytes, "
                f"over the {limit_bytes}-byte event ceiling (ROLLBOOK_MAX_EVENT_BYTES); not observed"
            ),
        ),
        stream=event.stream,
        stream_version=event.stream_version,
        occurred_at=event.occurred_at,
        event_id=event.event_id,
        causation_id=event.causation_id,
        correlation_id=event.correlation_id,
    )


def too_deep(event: Envelope, depth: int, size_bytes: int, limit_bytes: int, depth_limit: int) -> Envelope:
    """The ``ObservationRejected`` recorded instead of ``event``, the observation of an object nesting
    ``depth`` levels (its recorded form cut below ``depth_limit``): same id, stream and correlation."""
    payload = event.payload
    assert isinstance(payload, ObjectObserved)
    return new_event(
        ObservationRejected(
            kind=payload.kind,
            namespace=payload.namespace,
            name=payload.name,
            uid=payload.uid,
            resource_version=payload.resource_version,
            change=payload.change,
            size_bytes=size_bytes,
            limit_bytes=limit_bytes,
            reason=(
                f"{payload.kind} {payload.namespace}/{payload.name} nests {depth} levels deep, over the "
                f"{depth_limit}-level limit (ROLLBOOK_MAX_OBJECT_DEPTH); not observed"
            ),
            depth=depth,
            depth_limit=depth_limit,
        ),
        stream=event.stream,
        stream_version=event.stream_version,
        occurred_at=event.occurred_at,
        event_id=event.event_id,
        causation_id=event.causation_id,
        correlation_id=event.correlation_id,
    )


def latest_per_object(events: Sequence[Envelope], every_state: Collection[str] = ()) -> list[Envelope]:
    """One stream's observations of one append without those a later one of the same object (same uid)
    supersedes: a ``MODIFIED`` followed in the batch by another observation of its object that carries
    the same facts (``carried_facts``) is dropped, everything else is kept in order (docs/services.md,
    "watcher", "Superseded observations"). Objects of the kinds in ``every_state`` keep every state: the
    workloads rollbook drives, whose status writes under rollbook's name are each checked against its
    plans (``Watcher._planned_writes``), so a forged one followed by any write of the object in the same
    cycle must still reach that check; they are few (rollbook's own writes are dropped by it).

    The batch is stored in one transaction, so no planning round can read the dropped state: a round
    folds the store as of a commit, and the object's latest state as of that commit is the survivor.
    ``ADDED`` and ``DELETED`` are always kept (the trail shows every object appear and go), and so is a
    state whose action ids or availability differ from the next one's: an action id another workload's
    expectations wait for (several SidecarSets share a pod) and a moment a pod was unavailable (the
    audit trail's maxUnavailable views count every stored state) are never folded away."""
    next_of: dict[int, int] = {}
    latest: dict[str, int] = {}
    for index in range(len(events) - 1, -1, -1):
        payload = events[index].payload
        if isinstance(payload, ObjectObserved):
            if payload.uid in latest:
                next_of[index] = latest[payload.uid]
            latest[payload.uid] = index
    kept: list[Envelope] = []
    for index, event in enumerate(events):
        payload = event.payload
        successor = next_of.get(index)
        if (
            isinstance(payload, ObjectObserved)
            and payload.change == "MODIFIED"
            and payload.kind not in every_state
            and successor is not None
            and carried_facts(payload) == carried_facts(events[successor].payload)
        ):
            continue
        kept.append(event)
    return kept


def carried_facts(payload: object) -> tuple[object, ...]:
    """What an observation must not lose to a later one: the action ids on the object (rollbook's and
    the SidecarSets') and, for a pod, whether it is available."""
    if not isinstance(payload, ObjectObserved):
        return ()
    obj = payload.object
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    available = pod_available(obj) if payload.kind == "Pod" else None
    return (
        annotations.get(ACTION_ID_ANNOTATION),
        annotations.get(SIDECARSET_ACTION_ANNOTATION),
        available,
    )
