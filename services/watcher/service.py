"""The watcher: lists and watches CloneSets, their pods and their PVCs, and appends an ObjectObserved event
to ``CloneSet/<ns>/<name>/observed`` for every real change (see docs/services.md, "watcher").

- One loop per kind. Each resumes its watch from the last resourceVersion it saw (bookmarks included),
  relists on 410 Gone and diffs the list against its cache (so a relist emits only what changed, and
  DELETED for what vanished), and reconnects with backoff when the stream is cut. Watch lines are decoded
  once, into plain dicts (watcher/watch_stream.py).
- A real change ignores resourceVersion and managedFields. The cache is rebuilt from the event store at
  start, so a restart emits only what changed while the watcher was down.
- Event ids are uuid5(uid, resourceVersion[, DELETED]): re-emitting after a crash stores nothing new.
- A CloneSet observation whose only change is pod counts that the managedFields say rollbook's executor
  wrote is queued like any other; the appender drops it only when those counts are a recent StatusPlanned
  of the CloneSet that rollbook had yet to write (one read of its decisions stream): a field manager's
  name is whatever the writer claims, so counts rollbook did not plan are stored.
- Appends are batched: a watch event's observations are queued (the cache updated at once) and one
  task appends everything queued while its previous append ran, all streams in one append (the store's
  ``append_unversioned``: one lock and one commit), each stream's events in watch order. A burst of watch
  events is one append per ``MAX_BATCH`` observations, not one per event or per stream. A MODIFIED that
  a later observation of the same object in the same cycle supersedes is not stored
  (objects.latest_per_object; no round can fold a state inside one append), except for the workloads
  rollbook drives (each status written under its name is checked against its plans) and CloneSets
  rollbook only shadows, whose shadow trail compares every observed state. The queue is bounded (a
  watch waits while ``MAX_QUEUED`` observations wait for the store), an append that fails is retried
  until the store takes it (never skipped), and on shutdown everything queued is appended before the
  watches stop. A crash loses only the queue, which the next start recovers: it rebuilds the cache from
  the store and relists, emitting what the store lacks.
- SidecarSets are optional: on a cluster without the Kruise SidecarSet CRD their list answers 404. The
  watcher then logs ``resource_not_served``, reports the kind as not served (``rollbook_kind_served`` 0,
  ``/readyz`` details) and tries again every minute, without holding back readiness or the other kinds.
- A required kind the API server refuses to list or watch (CloneSets whose CRD is missing, 404, or whose
  conversion webhook cannot be reached, 500) is reported by name with the API server's reason: the log
  line ``resource_failing`` (once per new reason), ``/readyz`` details ``kinds_failing``, and readiness,
  which stays 503 with that reason until the kind lists again.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp
import msgspec
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.infra.leader import run_while_leading
from services.infra.metrics import EVENTS_APPENDED, KIND_SERVED, OBSERVATIONS, STORE_APPENDS, WATCH_RESTARTS
from services.infra.pacing import wait_for_pace
from services.infra.redaction_key import RedactionKeyError, load_policy
from services.infra.retry import Stopped, retry_until_stopped
from services.infra.runtime import ServiceRuntime, calm_cyclic_collector, configure_logging, run_until_stopped
from services.infra.settings import Settings
from services.infra.store import AppendResult, EventStore
from services.kinds import registry
from services.kinds.base import Kind
from services.kinds.recorded.rules import SPEC_MANAGERS, RecordScope, spec_managers
from services.model.events import Envelope, ObjectObserved, ObservationRejected, StatusPlanned
from services.model.redaction import MARK, RedactionPolicy
from services.model.shadow import shadowed
from services.model.sidecarset_streams import (
    SIDECARSET_GROUP,
    SIDECARSET_KIND,
    SIDECARSET_PLURAL,
    SIDECARSET_VERSION,
)
from services.model.streams import (
    CLONESET_GROUP,
    CLONESET_PLURAL,
    CLONESET_VERSION,
    STATUS_FIELD_MANAGER,
    revision_correlation,
)
from services.watcher.objects import (
    carried_plan,
    comparable,
    latest_per_object,
    observation,
    own_status_write,
    too_deep,
    within_ceiling,
)
from services.watcher.recorder import Recorder
from services.watcher.sidecarsets import SidecarSetRoutes
from services.watcher.watch_stream import TooDeep, parse_list, watch_events

log = structlog.get_logger("watcher")

WATCH_TIMEOUT_SECONDS = 240  # the server ends each watch after this; we resume from the last version
_BACKOFF_MAX = 10.0
REBUILD_PAGE = 200
# The workloads rollbook drives: each of their observed states is stored (objects.latest_per_object).
_DRIVEN_KINDS = frozenset(kind.name for kind in registry.DRIVEN)
# Observations waiting for the store beyond which a watch waits for the appends to catch up.
MAX_QUEUED = 2000
# Observations in one append at most (one statement; keeps its transaction, and the lock, short).
MAX_BATCH = 500
# The StatusPlanned events of a workload an own status write's counts are compared with, newest first: a
# genuine write carries out one of them (the planner may have planned again since). One found further back
# is stored: a row too many, never a change lost.
RECENT_PLANNED = 8
_STATUS_PLANNED = ("StatusPlanned",)
# How often to look again for a kind the API server does not serve (its CRD may be installed later).
NOT_SERVED_RETRY_SECONDS = 60.0

ListFunc = Callable[..., Awaitable[Any]]
# (kind, namespace, name) of the workload an object's observations go to (services/kinds/registry.py).
WorkloadKey = tuple[str, str, str]


@dataclass
class Known:
    """What the watcher last emitted for one object."""

    kind: str
    workload: WorkloadKey
    comparable: dict[str, Any]
    obj: dict[str, Any]


class OwnWrite(NamedTuple):
    """An observation whose only change is pod counts that rollbook's executor wrote, by the object's
    managedFields (``Watcher._own_pod_counts``). The appender stores it unless the store shows rollbook
    planned those counts (``Watcher._planned_writes``)."""

    kind: str
    decisions: str  # the workload's decisions stream, where its StatusPlanned events are
    status: dict[str, Any]  # as observed
    changed: frozenset[str]  # the status fields changed since the state seen before
    fields: frozenset[str]  # the kind's pod counts (``Kind.pod_counts``)


@dataclass
class KindWatch:
    kind: str
    list_func: ListFunc
    # An optional kind (a CRD the cluster may lack) answering 404 is reported not served instead of
    # holding back readiness; a required one is retried with backoff like any other error.
    optional: bool = False
    served: bool | None = None  # None until the first list answered
    resource_version: str | None = None
    initial_list_done: asyncio.Event = field(default_factory=asyncio.Event)


def observed_stream_of(workload: WorkloadKey) -> str:
    return registry.KINDS[workload[0]].observed_stream(workload[1], workload[2])


def correlation_of(kind: str, obj: dict[str, Any], workload: WorkloadKey) -> str | None:
    """The revision an observation shows: a workload's ``status.updateRevision``, a pod's revision label."""
    workload_kind = registry.KINDS[workload[0]]
    if kind == workload_kind.name:
        revision = (obj.get("status") or {}).get("updateRevision")
    elif kind == "Pod":
        revision = ((obj.get("metadata") or {}).get("labels") or {}).get(workload_kind.revision_label)
    else:
        revision = None
    return revision_correlation(workload[1], workload[2], revision) if revision else None


class Watcher:
    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        api: client.ApiClient,
        policy: RedactionPolicy | None = None,
    ) -> None:
        self.settings = settings
        # Applied to every object as it arrives, before it is diffed, cached or stored (docs/events.md,
        # "Redaction"): nothing after this point sees a secret value.
        self.policy = policy if policy is not None else load_policy(settings)
        self.store = store
        self.api = api
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        apps = client.AppsV1Api(api)

        def list_clonesets(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object(
                CLONESET_GROUP, CLONESET_VERSION, CLONESET_PLURAL, **kwargs
            )

        def list_sidecarsets(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object(
                SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, **kwargs
            )

        self.kinds = [
            KindWatch(registry.CLONESET.name, list_clonesets),
            KindWatch("Pod", core.list_pod_for_all_namespaces),
            KindWatch("PersistentVolumeClaim", core.list_persistent_volume_claim_for_all_namespaces),
            KindWatch(SIDECARSET_KIND, list_sidecarsets, optional=True),
        ]
        # The flight recorder (docs/kinds.md): the recorded kinds' own resources are watched only when it is
        # on; their pods come with the Pod watch.
        self.scope = RecordScope.parse(settings.record)
        self.routed: tuple[Kind, ...] = tuple(
            k for k in registry.KINDS.values() if k.route is not None and (k.driven or self.scope.on)
        )
        if self.scope.on:
            apis = {"core": core, "apps": apps}
            for kind in registry.RECORDED:
                for watched in kind.watches:
                    # a recorded kind's resources are core or apps/v1 (a CRD's would need its group here)
                    list_func = getattr(apis[watched.api], watched.method)
                    self.kinds.append(KindWatch(watched.kind, list_func, optional=watched.optional))
        # Observed streams of the recorded workloads (the opt-in said yes), and what was seen of workloads
        # whose opt-in is not known yet (a pod listed before its labelled Deployment): observed stream ->
        # uid -> (kind, object), emitted once the workload shows it is recorded.
        self.recorded: set[str] = set()
        self.held: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        self.recorder = Recorder(store)
        self.dirty: set[str] = set()  # recorded workloads' observed streams with observations to fold
        self._record_wake = asyncio.Event()
        self.not_served_retry_seconds = NOT_SERVED_RETRY_SECONDS
        self.known: dict[str, Known] = {}  # uid -> last emitted state
        # Observed streams of CloneSets labelled rollbook.io/manage=shadow: their shadow trail compares
        # every observed state, so each is stored (no superseded observation is dropped).
        self.shadowed_streams: set[str] = set()
        # SidecarSets and the pods they injected into -> SidecarSet//<name>/observed (watcher/sidecarsets.py)
        self.sidecarsets = SidecarSetRoutes()
        self._emit_lock = asyncio.Lock()
        # Queued observations that are rollbook's own status write by their managedFields (event id ->
        # what the appender checks against the planned statuses before it drops one).
        self._own_writes: dict[uuid.UUID, OwnWrite] = {}
        # Decisions stream -> the version of the StatusPlanned rollbook's last status write carried out:
        # the executor writes each plan once, in order, so the next genuine write carries out a later one.
        self._written_plans: dict[str, int] = {}
        self._queued: list[Envelope] = []  # observations diffed, not yet appended, in watch order
        self._wake = asyncio.Event()  # something was queued
        self._append_started: float | None = None  # monotonic time the last append cycle began (pacing)
        self._idle = asyncio.Event()  # nothing queued or being appended
        self._idle.set()
        self.appends = 0  # store appends made
        self.stopping: asyncio.Event | None = None  # set by the service: ends retries on shutdown
        self.failing: dict[str, str] = {}  # required kind -> why the API server refuses it
        self.health_changed = asyncio.Event()  # a kind listed, failed or recovered

    # --- start: rebuild what was already observed ----------------------------------------------------

    async def rebuild(self) -> int:
        count = 0
        # Small pages: decoding is CPU work that holds the event loop, and the Lease must be renewed
        # meanwhile (observations of a 1.2 MB object made 5000-row pages block for seconds).
        async for batch in self.store.read_all_batches(0, REBUILD_PAGE):
            for stored in batch:
                envelope = stored.envelope
                payload = envelope.payload
                if not isinstance(payload, ObjectObserved):
                    continue
                count += 1
                if MARK not in payload.object:
                    # Recorded before redaction: cached (and re-emitted, e.g. as DELETED) redacted.
                    payload = msgspec.structs.replace(
                        payload, object=self.policy.redact_object(payload.kind, payload.object) or {}
                    )
                    envelope = msgspec.structs.replace(envelope, payload=payload)
                if registry.kind_of_stream(envelope.stream) is registry.SIDECARSET:
                    self.sidecarsets.rebuild(envelope)
                    continue
                self._track_shadowed(payload.kind, payload.object, stored.envelope.stream, payload.change)
                found = registry.workload_of(envelope.stream)
                if found is not None and not found[0].driven:
                    self._track_recorded(found[0], payload, envelope.stream)
                if payload.change == "DELETED":
                    self.known.pop(payload.uid, None)
                    continue
                if found is not None and (found[0].driven or envelope.stream in self.recorded):
                    workload = (found[0].name, found[1], found[2])
                    self.known[payload.uid] = Known(
                        payload.kind, workload, comparable(payload.object), payload.object
                    )
        self.dirty |= self.recorded  # catch every recorded trail up with what was observed while down
        self._record_wake.set()
        log.info("cache_rebuilt", observations=count, objects=len(self.known))
        return count

    def _track_recorded(self, kind: Kind, payload: ObjectObserved, stream: str) -> None:
        if payload.kind != kind.name:
            return
        labels = (payload.object.get("metadata") or {}).get("labels") or {}
        if payload.change != "DELETED" and self.scope.records(payload.namespace, labels):
            self.recorded.add(stream)
        else:
            self.recorded.discard(stream)

    # --- routing -------------------------------------------------------------------------------------

    def workload_of(self, kind: str, obj: dict[str, Any]) -> tuple[WorkloadKey | None, bool]:
        """The workload an object's observations go to, and whether that is decided: (None, True) for an
        object of no workload rollbook observes, (key, False) for one of a workload whose opt-in to the
        recorder is not known yet (held until it is)."""
        found = registry.route(kind, obj, self.routed)
        if found is None:
            return None, True
        workload_kind, (namespace, name) = found
        key = (workload_kind.name, namespace, name)
        if workload_kind.driven:
            return key, True
        stream = workload_kind.observed_stream(namespace, name)
        if kind == workload_kind.name:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            return (key, True) if self.scope.records(namespace, labels) else (None, True)
        decided = self.scope.records(namespace, None)
        if decided is None:
            return (key, True) if stream in self.recorded else (key, False)
        return (key, True) if decided else (None, True)

    # --- emitting ------------------------------------------------------------------------------------

    def _observation(
        self, kind: str, obj: dict[str, Any], change: str, workload: WorkloadKey, *, born: bool = False
    ) -> Envelope:
        stream = observed_stream_of(workload)
        self._track_shadowed(kind, obj, stream, change)
        return observation(
            kind, obj, change, stream=stream, correlation_id=correlation_of(kind, obj, workload), born=born
        )

    def _track_shadowed(self, kind: str, obj: dict[str, Any], stream: str, change: str) -> None:
        if kind != registry.CLONESET.name:
            return
        if change != "DELETED" and shadowed(obj, shadow_all=False):
            self.shadowed_streams.add(stream)
        else:
            self.shadowed_streams.discard(stream)

    def _recorded(self, stream: str, batch: list[Envelope]) -> list[Envelope]:
        """What of one stream's batch is stored: all of it for a shadowed CloneSet (shadow mode, or the
        label), else without the observations a later one of the same object supersedes."""
        if self.settings.shadow or stream in self.shadowed_streams:
            return batch
        kept = latest_per_object(batch, every_state=_DRIVEN_KINDS)
        if len(kept) < len(batch):
            kept_ids = {event.event_id for event in kept}
            for event in batch:
                if event.event_id not in kept_ids and isinstance(event.payload, ObjectObserved):
                    _count_observation(event.payload.kind, "superseded")
        return kept

    def _diff(self, kind: str, obj: dict[str, Any], change: str, *, born: bool = False) -> list[Envelope]:
        """The observations to emit for one watch/list item: none when nothing really changed; a recorded
        workload's first observation brings what was held for it. ``born``: the item is the watch's ADDED
        (what was held is emitted as listed: it was not recorded as it came)."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        known = self.known.get(uid)
        if change == "DELETED":
            self._forget_held(uid)
            if known is None:
                _count_observation(kind, "ignored")
                return []
            del self.known[uid]
            _count_observation(kind, "emitted")
            if known.workload[0] == kind and not registry.KINDS[kind].driven:
                self.recorded.discard(observed_stream_of(known.workload))
            return [self._mark_dirty(self._observation(kind, obj, "DELETED", known.workload))]
        workload, decided = self.workload_of(kind, obj)
        if not decided and workload is not None:
            self.held.setdefault(observed_stream_of(workload), {})[uid] = (kind, obj)
            _count_observation(kind, "held")
            return []
        if workload is None:
            if known is not None:
                del self.known[uid]
                if not registry.KINDS[known.workload[0]].driven:
                    # no longer recorded (its label removed): the trail stops here, nothing was deleted
                    self.recorded.discard(observed_stream_of(known.workload))
                    return []
                # released by its controller: for that workload it is gone
                return [self._observation(kind, obj, "DELETED", known.workload)]
            _count_observation(kind, "ignored")
            return []
        if kind == workload[0] and not registry.KINDS[kind].driven:
            obj = {**obj, SPEC_MANAGERS: spec_managers(obj)}  # managedFields are not stored
        view = comparable(obj)
        if known is not None and known.comparable == view:
            _count_observation(kind, "ignored")
            return []
        own = None if known is None else self._own_pod_counts(kind, workload, known.comparable, view, obj)
        self.known[uid] = Known(kind, workload, view, obj)
        emitted = "MODIFIED" if known is not None else "ADDED"
        events = [self._observation(kind, obj, emitted, workload, born=born and known is None)]
        if own is not None:
            # rollbook's own status write of pod counts (a readiness flap), by the managedFields: queued,
            # and not stored if the appender finds those counts planned. The next observation is new
            # against this one either way, so another writer setting the counts back is a change.
            self._own_writes[events[0].event_id] = own
        else:
            _count_observation(kind, "emitted")
        stream = observed_stream_of(workload)
        if kind == workload[0] and not registry.KINDS[kind].driven and stream not in self.recorded:
            self.recorded.add(stream)
            for held_kind, held in self.held.pop(stream, {}).values():
                events += self._diff(held_kind, held, "ADDED")
        return [self._mark_dirty(e) for e in events]

    def _own_pod_counts(
        self,
        kind: str,
        workload: WorkloadKey,
        before: dict[str, Any],
        after: dict[str, Any],
        obj: dict[str, Any],
    ) -> OwnWrite | None:
        """A driven workload's own object that changed only in the pod counts of its status (the kind's
        ``pod_counts``), written by rollbook's executor by its managedFields (``own_status_write``), outside
        shadow mode. A shadowed CloneSet's status is OpenKruise's decision, compared by the shadow trail:
        always stored."""
        workload_kind = registry.KINDS[workload[0]]
        counted = workload_kind.pod_counts
        if kind != workload_kind.name or counted is None or self.settings.shadow:
            return None
        if observed_stream_of(workload) in self.shadowed_streams:
            return None
        # Judged on both states: neither may be one whose counts the rules read back.
        fields = counted(before) & counted(after)
        changed = own_status_write(before, after, obj, fields)
        if not changed:
            return None
        decisions = workload_kind.decisions_stream(workload[1], workload[2])
        return OwnWrite(kind, decisions, after["status"], changed, fields)

    def _forget_held(self, uid: str) -> None:
        for objects in self.held.values():
            objects.pop(uid, None)

    def _mark_dirty(self, event: Envelope) -> Envelope:
        if event.stream in self.recorded:
            self.dirty.add(event.stream)
        return event

    async def record_dirty(self) -> None:
        """The recorder: until cancelled, fold the recorded workloads' new observations (once stored) into
        their trails (services/watcher/recorder.py)."""
        while True:
            await self._record_wake.wait()
            self._record_wake.clear()
            await self._idle.wait()  # what was queued is stored first
            streams, self.dirty = sorted(self.dirty), set()
            for stream in streams:
                try:
                    await self.recorder.record(stream)
                except Exception as error:  # the next wake-up tries again from the store
                    log.warning("record_failed", stream=stream, error=repr(error))
                    self.dirty.add(stream)
                    await asyncio.sleep(1.0)
                    self._record_wake.set()

    async def _emit(self, events: list[Envelope]) -> None:
        """Queue observations for the appender (``append_queued``; see the module docstring); waits only
        while the queue is full."""
        self._queued.extend(events)
        self._idle.clear()
        self._wake.set()
        if len(self._queued) >= MAX_QUEUED:
            await self._idle.wait()

    async def append_queued(self) -> None:
        """The appender: until cancelled, append whatever is queued, one cycle per burst."""
        while True:
            await self._wake.wait()
            # What arrives while it waits goes in the same append.
            await wait_for_pace(self._append_started, self.settings.pace_interval)
            self._append_started = time.monotonic()
            self._wake.clear()
            while self._queued:
                batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
                await self._append(batch)
            self._idle.set()

    async def _append(self, events: list[Envelope]) -> None:
        by_stream: dict[str, list[Envelope]] = {}
        for event in events:
            by_stream.setdefault(event.stream, []).append(event)
        kept = {e.event_id for stream, batch in by_stream.items() for e in self._recorded(stream, batch)}
        own: dict[uuid.UUID, OwnWrite] = {}
        for event in events:
            write = self._own_writes.pop(event.event_id, None)
            if write is not None and event.event_id in kept:
                own[event.event_id] = write
        if own:
            kept -= await self._planned_writes(own)
        stored = [self._within_ceiling(e) for e in events if e.event_id in kept]
        if stored:
            # One append for every stream (one lock and one commit in the store), in watch order, so each
            # stream's observations keep theirs.
            await self._append_batch(stored)

    async def _planned_writes(self, own: dict[uuid.UUID, OwnWrite]) -> set[uuid.UUID]:
        """Of rollbook's own status writes by their managedFields (``own``, by event id, in watch order),
        those that carried out a status rollbook planned (``carried_plan``): one of the latest
        ``RECENT_PLANNED`` StatusPlanned of the workload's decisions stream, newer than the one its
        previous write carried out; one read per workload. The executor writes only a stored StatusPlanned,
        each once and in planned order, so a genuine write finds its plan here. A manager's name is
        whatever the writer claims: counts rollbook did not plan, or set back to a plan written before,
        are stored as any change is, and so is every write while the store cannot be read."""
        planned: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for stream in sorted({write.decisions for write in own.values()}):
            try:
                latest = await self.store.read_stream_latest(stream, _STATUS_PLANNED, RECENT_PLANNED)
            except Exception as error:  # in doubt, stored: a row too many is safe, a change lost is not
                log.warning("planned_status_unread", stream=stream, error=repr(error))
                latest = []
            planned[stream] = [
                (e.envelope.stream_version, e.envelope.payload.status)
                for e in latest
                if isinstance(e.envelope.payload, StatusPlanned)
            ]
        found: set[uuid.UUID] = set()
        for event_id, write in own.items():
            after = self._written_plans.get(write.decisions, 0)
            version = carried_plan(write.status, write.changed, write.fields, planned[write.decisions], after)
            if version is not None:
                self._written_plans[write.decisions] = version
                found.add(event_id)
                _count_observation(write.kind, "own_status")
                continue
            _count_observation(write.kind, "emitted")
            log.warning(
                "status_write_not_planned",
                stream=write.decisions,
                fields=sorted(write.changed),
                detail=f"pod counts written under the name {STATUS_FIELD_MANAGER} are not those of a recent "
                "StatusPlanned rollbook has yet to write: stored as a change",
            )
        return found

    def _too_deep(self, kind: str, obj: TooDeep, change: str) -> list[Envelope]:
        """The ObservationRejected for an object nesting deeper than max_object_depth: on its workload's
        stream (nothing when it belongs to none). What the watcher knew of it stays as it was: the
        object is not observed until a change brings it back within the limit."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        known = self.known.get(uid)
        workload = known.workload if known is not None else self.workload_of(kind, obj)[0]
        _count_observation(kind, "rejected")
        log.error(
            "observation_rejected",
            kind=kind,
            name=str((obj.get("metadata") or {}).get("name", "")),
            depth=obj.depth,
            depth_limit=self.settings.max_object_depth,
        )
        if workload is None:
            return []
        stream = observed_stream_of(workload)
        observed = observation(
            kind, obj, change, stream=stream, correlation_id=correlation_of(kind, obj, workload)
        )
        return [
            too_deep(
                observed, obj.depth, obj.size, self.settings.max_event_bytes, self.settings.max_object_depth
            )
        ]

    def _within_ceiling(self, observed: Envelope) -> Envelope:
        event = within_ceiling(observed, self.settings.max_event_bytes)
        if event is not observed:
            rejected: ObservationRejected = event.payload  # type: ignore[assignment]
            _count_observation(rejected.kind, "rejected")
            log.error(
                "observation_rejected",
                stream=event.stream,
                kind=rejected.kind,
                name=rejected.name,
                size_bytes=rejected.size_bytes,
                limit_bytes=rejected.limit_bytes,
            )
        return event

    async def _append_until_stored(self, events: list[Envelope]) -> list[AppendResult]:
        results = await retry_until_stopped(
            lambda: self.store.append_unversioned(events),
            what="watcher_append",
            stopping=self.stopping,
        )
        self.appends += 1
        STORE_APPENDS.labels("watcher").inc()
        return results

    async def _append_batch(self, batch: list[Envelope]) -> None:
        # Retried here until the store takes it: a Postgres restart is waited out, never skipped.
        try:
            results = await self._append_until_stored(batch)
        except Exception:
            streams: dict[str, list[Envelope]] = {}
            for event in batch:
                streams.setdefault(event.stream, []).append(event)
            if len(streams) == 1:
                raise
            # A row the store refuses fails the whole append: store every other stream's observations
            # on their own first, so only the refused row's stream is held back (and raises, as before).
            results = []
            for events in streams.values():
                results.extend(await self._append_until_stored(events))
        appended: dict[str, int] = {}
        for result in results:
            for event in result.events:
                appended[event.type] = appended.get(event.type, 0) + 1
                if not isinstance(event.payload, ObjectObserved):
                    continue
                log.info(
                    "observed",
                    stream=result.stream,
                    kind=event.payload.kind,
                    name=event.payload.name,
                    change=event.payload.change,
                    correlation_id=event.correlation_id,
                )
        for event_type, count in appended.items():
            EVENTS_APPENDED.labels("watcher", event_type).inc(count)
        if self.dirty:
            self._record_wake.set()

    # --- list and watch ------------------------------------------------------------------------------

    async def relist(self, kind_watch: KindWatch) -> str:
        response = await kind_watch.list_func(_preload_content=False)
        api_version, list_metadata, items = parse_list(
            await kube.raw_body(response), self.settings.max_object_depth
        )
        kind = kind_watch.kind
        seen: set[str] = set()
        async with self._emit_lock:
            events: list[Envelope] = []
            for raw in items:
                raw.setdefault("kind", kind)
                raw.setdefault("apiVersion", api_version)
                # A too-deep object is recorded only as rejected; every other one is redacted first.
                item = raw if isinstance(raw, TooDeep) else await self._redacted(kind, raw)
                if item is None:  # never recorded (a Secret)
                    continue
                seen.add(str((item.get("metadata") or {}).get("uid", "")))
                if isinstance(item, TooDeep):
                    events.extend(self._too_deep(kind, item, "ADDED"))
                    continue
                events.extend(self._diff(kind, item, "ADDED"))
                events.extend(self.sidecarsets.diff(kind, item, "ADDED"))
            for uid, known in list(self.known.items()):
                if known.kind == kind and uid not in seen:
                    events.extend(self._diff(kind, known.obj, "DELETED"))
            events.extend(self.sidecarsets.vanished(kind, seen))
            if events:
                await self._emit(events)
        if kind_watch.served is False:
            log.info("resource_served", kind=kind)
        kind_watch.served = True
        KIND_SERVED.labels("watcher", kind).set(1)
        if self.failing.pop(kind, None) is not None:
            log.info("resource_recovered", kind=kind)
        kind_watch.initial_list_done.set()
        self.health_changed.set()
        return str(list_metadata.get("resourceVersion", ""))

    async def run_kind(self, kind_watch: KindWatch) -> None:
        backoff = 0.2
        while True:
            try:
                if kind_watch.resource_version is None:
                    kind_watch.resource_version = await self.relist(kind_watch)
                events = watch_events(
                    kind_watch.list_func,
                    resource_version=kind_watch.resource_version,
                    timeout_seconds=WATCH_TIMEOUT_SECONDS,
                    max_depth=self.settings.max_object_depth,
                )
                try:
                    async for change, obj in events:
                        await self._on_watch_event(kind_watch, change, obj)
                        backoff = 0.2
                finally:
                    await events.aclose()
                WATCH_RESTARTS.labels(kind_watch.kind, "timeout").inc()
            except ApiException as error:
                if error.status == 404 and kind_watch.optional:
                    self._not_served(kind_watch)
                    kind_watch.resource_version = None  # list again when it is back
                    await asyncio.sleep(self.not_served_retry_seconds)
                    continue
                if error.status == 410:
                    log.info("watch_expired_relisting", kind=kind_watch.kind)
                    WATCH_RESTARTS.labels(kind_watch.kind, "gone").inc()
                    kind_watch.resource_version = None
                    continue
                WATCH_RESTARTS.labels(kind_watch.kind, f"http_{error.status}").inc()
                self._failing(kind_watch, error)
                backoff = await _sleep_backoff(backoff)
            except (TimeoutError, aiohttp.ClientError, ConnectionError) as error:
                WATCH_RESTARTS.labels(kind_watch.kind, "cut").inc()
                log.warning("watch_cut", kind=kind_watch.kind, error=repr(error))
                backoff = await _sleep_backoff(backoff)

    def _failing(self, kind_watch: KindWatch, error: ApiException) -> None:
        """A required kind the API server refuses: its name and the server's reason, logged once per new
        reason and kept for /readyz until it lists again."""
        why = failure_reason(kind_watch.kind, error)
        if self.failing.get(kind_watch.kind) != why:
            log.warning("resource_failing", kind=kind_watch.kind, status=error.status, reason=why)
        self.failing[kind_watch.kind] = why
        kind_watch.resource_version = None  # list again once it answers: what changed meanwhile is diffed
        self.health_changed.set()

    def _not_served(self, kind_watch: KindWatch) -> None:
        if kind_watch.served is not False:
            log.warning(
                "resource_not_served",
                kind=kind_watch.kind,
                detail=f"the API server answers 404 for {kind_watch.kind} (is its CRD installed?); "
                f"nothing of this kind is observed; looking again every {self.not_served_retry_seconds:g}s",
            )
        kind_watch.served = False
        KIND_SERVED.labels("watcher", kind_watch.kind).set(0)
        kind_watch.initial_list_done.set()  # known to be absent: not a reason to hold back readiness
        self.health_changed.set()

    def not_served(self) -> list[str]:
        """Kinds the API server does not serve (reported in /readyz details)."""
        return [k.kind for k in self.kinds if k.served is False]

    async def _redacted(self, kind: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """``redact_object``; for a workload kind in a worker thread: its template hash is FNV-1 in pure
        Python (about 0.2-0.7 s per MB), which on the event loop would hold back Lease renewals (a 1.2 MB
        CloneSet beside a 3 MB one cost the watcher its Lease). The thread yields the GIL every few ms."""
        if kind in _HASHED_KINDS:
            return await asyncio.to_thread(self.policy.redact_object, kind, obj)
        return self.policy.redact_object(kind, obj)

    async def _on_watch_event(self, kind_watch: KindWatch, change: str, obj: dict[str, Any]) -> None:
        """One watch event (``watch_stream.watch_events``): ADDED, MODIFIED, DELETED or BOOKMARK."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if change in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("kind", kind_watch.kind)
            if isinstance(obj, TooDeep):
                async with self._emit_lock:
                    rejected = self._too_deep(kind_watch.kind, obj, change)
                    if rejected:
                        await self._emit(rejected)
            else:
                redacted = await self._redacted(kind_watch.kind, obj)
                if redacted is not None:  # None: never recorded (a Secret)
                    async with self._emit_lock:
                        events = self._diff(kind_watch.kind, redacted, change, born=change == "ADDED")
                        events.extend(self.sidecarsets.diff(kind_watch.kind, redacted, change))
                        if events:
                            await self._emit(events)
        if version:
            kind_watch.resource_version = str(version)


def failure_reason(kind: str, error: ApiException) -> str:
    """Why the API server refuses ``kind``: its Status message (e.g. a conversion webhook's failure), or
    for a 404 that the resource is not served."""
    message = ""
    try:
        body = json.loads(error.body) if error.body else {}
        message = str(body.get("message") or "") if isinstance(body, dict) else ""
    except (TypeError, ValueError):
        message = ""
    if error.status == 404:
        return f"the API server does not serve {kind} (HTTP 404; is its CRD installed?)"
    return f"HTTP {error.status}: {message or error.reason}"


# Kinds whose redaction hashes a template (services/model/redaction.py: templateFnv, sidecarsetHash).
_HASHED_KINDS = frozenset({"CloneSet", "SidecarSet"})
_observation_counters: dict[tuple[str, str], Any] = {}


def _count_observation(kind: str, outcome: str) -> None:
    """``OBSERVATIONS`` + 1, its labelled child looked up once per (kind, outcome): ``labels()`` takes a
    lock and builds its key on every call, and every watch event counts one outcome."""
    counter = _observation_counters.get((kind, outcome))
    if counter is None:
        counter = _observation_counters[(kind, outcome)] = OBSERVATIONS.labels(kind, outcome)
    counter.inc()


async def _sleep_backoff(backoff: float) -> float:
    await asyncio.sleep(backoff * (0.5 + random.random()))
    return min(backoff * 2, _BACKOFF_MAX)


async def run(settings: Settings) -> None:
    configure_logging(settings, "watcher")
    try:
        load_policy(settings)  # nothing is recorded (or restored) without the redaction key
    except RedactionKeyError as error:
        log.error("redaction_key_unreadable", detail=str(error))
        raise SystemExit(2) from None
    calm_cyclic_collector()  # each watch event's decoded object would set off collections (runtime.py)
    async with ServiceRuntime(settings, "watcher") as runtime:
        store = await EventStore.connect(settings.database_url)
        api = await kube.api_client(settings)
        try:
            # One watcher publishes at a time; others stand by (docs/services.md, "Running several replicas").
            await run_while_leading(
                runtime, settings, "watcher", lambda: watch_until_stopped(runtime, store, api)
            )
        finally:
            await api.close()
            await store.close()


async def watch_until_stopped(runtime: ServiceRuntime, store: EventStore, api: client.ApiClient) -> None:
    """The watcher's work: rebuild the cache from the store (so it starts from what the store holds now,
    also after standing by), then watch every kind until the service stops."""
    watcher = Watcher(runtime.settings, store, api)
    watcher.stopping = runtime.stopping
    try:
        await retry_until_stopped(watcher.rebuild, what="watcher_rebuild", stopping=runtime.stopping)
    except Stopped:
        return
    tasks = [asyncio.create_task(watcher.run_kind(k), name=f"watch-{k.kind}") for k in watcher.kinds]
    appender = asyncio.create_task(watcher.append_queued(), name="watcher-appender")
    if watcher.scope.on:
        tasks.append(asyncio.create_task(watcher.record_dirty(), name="watcher-recorder"))
    runtime.add_detail("kinds_not_served", watcher.not_served)
    runtime.add_detail("kinds_failing", lambda: dict(watcher.failing))
    ready = asyncio.create_task(_track_readiness(runtime, watcher))
    # The store losing what this watcher appended (an asynchronous failover) stops it: its successor
    # relists, and records what the cluster is now.
    watching = asyncio.create_task(store.watch_appends(runtime.stopping), name="store-failover-watch")
    try:
        await run_until_stopped(runtime, *tasks, appender, watching)
    finally:
        ready.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Store what the watches queued, unless the appender ended (it gives up once the service stops
        # while the store is down: the next start relists and emits what the store lacks).
        idle = asyncio.create_task(watcher._idle.wait())
        try:
            await asyncio.wait([idle, appender], return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            appender.cancel()
            await asyncio.gather(idle, appender, return_exceptions=True)
        if watcher._queued:
            log.warning("observations_not_stored_on_stop", queued=len(watcher._queued))


async def _track_readiness(runtime: ServiceRuntime, watcher: Watcher) -> None:
    """Ready once every kind has listed (or is known not served), and while no required kind fails."""
    announced = False
    while not runtime.stopping.is_set():
        watcher.health_changed.clear()
        if watcher.failing:
            failing = "; ".join(f"{kind}: {why}" for kind, why in sorted(watcher.failing.items()))
            runtime.set_ready(False, f"cannot observe {failing}")
        elif all(k.initial_list_done.is_set() for k in watcher.kinds):
            runtime.set_ready()
            if not announced:
                log.info("ready", kinds_not_served=watcher.not_served())
                announced = True
        await watcher.health_changed.wait()
