"""How the watcher records an object, for CloneSet and SidecarSet streams alike: what counts as a real
change, what is stored, and the ``ObjectObserved`` event with its deterministic id."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from services.model.events import Envelope, ObjectObserved, new_event
from services.model.streams import derived_id


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without fields whose change alone is not a real change."""
    result = copy.deepcopy(obj)
    metadata = result.get("metadata") or {}
    metadata.pop("resourceVersion", None)
    metadata.pop("managedFields", None)
    return result


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
) -> Envelope:
    """``ObjectObserved`` for one object version, id ``uuid5(*id_scope, uid, resourceVersion[, DELETED])``
    so re-emitting it after a crash stores nothing new; the store assigns the stream version."""
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
        ),
        stream=stream,
        stream_version=1,  # the store assigns the real version (append without expected_version)
        occurred_at=datetime.now(UTC),
        event_id=derived_id("observed", *id_scope, *key),
        correlation_id=correlation_id,
    )
