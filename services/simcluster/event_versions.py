"""events.k8s.io/v1 Events, served as a view of the core/v1 Events simcluster stores (as the API server
stores one Event resource and serves it in both groups): what the executor writes through events.k8s.io
is what `kubectl describe` lists through core/v1, and the other way round. Field renames as Kubernetes'
own conversion (regarding <-> involvedObject, note <-> message, deprecated* <-> the core fields)."""

from __future__ import annotations

from typing import Any

from .resources import EVENTS, ResourceType

Obj = dict[str, Any]

EVENTS_V1 = ResourceType("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",))

# events.k8s.io/v1 field -> core/v1 field (both ways)
_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_KEPT = ("metadata", "eventTime", "series", "reason", "type", "action", "related", "reportingInstance")


def to_core(event: Obj) -> Obj:
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    for key in _KEPT:
        if key in event:
            out[key] = event[key]
    for new, old in _RENAMED.items():
        if new in event:
            out[old] = event[new]
    out.setdefault("involvedObject", {})
    return out


def to_events_v1(event: Obj) -> Obj:
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for key in _KEPT:
        if key in event:
            out[key] = event[key]
    for new, old in _RENAMED.items():
        if old in event:
            out[new] = event[old]
    if "eventTime" not in out:
        out["eventTime"] = None
    return out


async def convert(objs: list[Obj], api_version: str) -> list[Obj]:
    """The view's conversion: to the stored core/v1 shape, or back to events.k8s.io/v1."""
    if api_version == EVENTS.api_version:
        return [to_core(o) for o in objs]
    return [to_events_v1(o) for o in objs]
