"""The watcher's SidecarSet half: routes SidecarSets and the pods they injected into to
``SidecarSet//<name>/observed`` (docs/sidecarset.md, "Upgrade in place").

- A SidecarSet goes to its own observed stream; a pod goes to the observed stream of every SidecarSet
  its ``kruise.io/sidecarset-injected-list`` names, whoever owns it (a CloneSet's pod goes to its
  CloneSet's stream as well; a bare pod such as the seed's ``test-pod`` only here). The routing is a
  function of the pod alone, so it needs no SidecarSet cache and cannot race SidecarSet creation.
- Only real changes are appended (compared without resourceVersion and managedFields); a pod whose
  injected-list stops naming a SidecarSet is DELETED for it; a relist emits DELETED for what vanished.
- Ids are ``uuid5(stream, uid, resourceVersion[, DELETED])``: the same pod version observed for two
  SidecarSets is two events, and re-emitting after a crash stores nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.kinds.registry import SIDECARSET
from services.kinds.sidecarset import sidecarset_of
from services.model.events import Envelope, ObjectObserved
from services.model.sidecarset import injected_sidecarsets, pod_sidecar_revisions
from services.model.sidecarset_streams import SIDECARSET_KIND, revision_correlation, revision_name
from services.watcher.objects import comparable, observation


@dataclass
class Routed:
    kind: str
    streams: frozenset[str]
    comparable: dict[str, Any]
    obj: dict[str, Any]


def streams_of(kind: str, obj: dict[str, Any]) -> frozenset[str]:
    """The SidecarSet observed streams an object belongs to (none for other kinds)."""
    if kind == SIDECARSET_KIND:
        name = (obj.get("metadata") or {}).get("name")
        return frozenset({SIDECARSET.observed_stream("", str(name))}) if name else frozenset()
    if kind == "Pod":
        return frozenset(SIDECARSET.observed_stream("", n) for n in injected_sidecarsets(obj))
    return frozenset()


def _correlation(kind: str, obj: dict[str, Any], stream: str) -> str | None:
    name = sidecarset_of(stream)
    if name is None:
        return None
    if kind == SIDECARSET_KIND:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        hash_ = annotations.get("kruise.io/sidecarset-hash")
    else:
        recorded = pod_sidecar_revisions(obj).get(name)
        hash_ = recorded.hash if recorded else None
    return revision_correlation(name, revision_name(name, hash_)) if hash_ else None


class SidecarSetRoutes:
    """What the watcher last emitted to SidecarSet streams, per object uid."""

    def __init__(self) -> None:
        self.known: dict[str, Routed] = {}

    def rebuild(self, envelope: Envelope) -> None:
        """Fold one stored observation of a SidecarSet stream (at watcher start)."""
        observed = envelope.payload
        if not isinstance(observed, ObjectObserved):
            return
        routed = self.known.get(observed.uid)
        streams = set(routed.streams) if routed else set()
        if observed.change == "DELETED":
            streams.discard(envelope.stream)
        else:
            streams.add(envelope.stream)
        if streams:
            self.known[observed.uid] = Routed(
                observed.kind, frozenset(streams), comparable(observed.object), observed.object
            )
        else:
            self.known.pop(observed.uid, None)

    def _event(self, kind: str, obj: dict[str, Any], change: str, stream: str) -> Envelope:
        return observation(
            kind,
            obj,
            change,
            stream=stream,
            correlation_id=_correlation(kind, obj, stream),
            id_scope=(stream,),
        )

    def diff(self, kind: str, obj: dict[str, Any], change: str) -> list[Envelope]:
        """The observations to append to SidecarSet streams for one watch or list item."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        known = self.known.get(uid)
        if change == "DELETED":
            if known is None:
                return []
            del self.known[uid]
            return [self._event(kind, obj, "DELETED", s) for s in sorted(known.streams)]
        streams = streams_of(kind, obj)
        if not streams and known is None:
            return []  # most pods: no SidecarSet injected into them
        old = known.streams if known else frozenset()
        events = [self._event(kind, obj, "DELETED", s) for s in sorted(old - streams)]
        view = comparable(obj)
        changed = known is None or known.comparable != view
        for stream in sorted(streams):
            if stream not in old:
                events.append(self._event(kind, obj, "ADDED", stream))
            elif changed:
                events.append(self._event(kind, obj, "MODIFIED", stream))
        if streams:
            self.known[uid] = Routed(kind, streams, view, obj)
        else:
            self.known.pop(uid, None)
        return events

    def vanished(self, kind: str, seen: set[str]) -> list[Envelope]:
        """DELETED for objects of ``kind`` a relist no longer returns."""
        events: list[Envelope] = []
        for uid, routed in list(self.known.items()):
            if routed.kind != kind or uid in seen:
                continue
            events.extend(self.diff(kind, routed.obj, "DELETED"))
        return events
