"""The executor: carries out pod actions and status writes through kubernetes-asyncio, once in effect,
and reports every outcome as an event (docs/services.md, "executor").

- All executors share the durable consumer ``executor``: JetStream hands each action to one of them.
  Each executor carries out up to ``settings.executor_concurrency`` actions at once, one pod's actions
  in order and never overlapping (``services.infra.keyed.KeyedRunner`` keyed by the pod). Across
  executors the order holds too: an action first waits until the actions its round planned earlier for
  the same pod have a terminal outcome (``earlier_actions_pending``), or the pod carries the id of one,
  whose outcome a failover lost (``_found_on_pod``); if one of those went back to the bus
  from this executor, it goes back too, at once (waiting would hold the pod's turn its redelivery needs),
  except on its last delivery: then it waits, as the earlier one's redelivery may land on another
  executor (``services.executor.handed_back``).
- Once in effect: every create or patch writes the action id in the ``rollbook.io/action-id`` annotation
  in the same API call; deletes carry a uid precondition. Before acting, the executor looks for the
  action's terminal event in the store and then at the object: an action already applied (a redelivery,
  or another executor's) is acknowledged and reported ``already_applied``, never repeated. A patch of an
  existing pod is a JSON patch testing each value it changes as it was in the pod it was computed from
  (the action id annotation among them): a status write (the kubelet's) does not conflict with it, any
  change to a field it writes makes it refused (422), which means re-read and retry. A mark is one
  write through pods/status with the pod's uid as precondition instead (``_mark``). An in-place update
  with a not-ready condition (no grace period) is two writes after one read: the condition alone through
  pods/status, then the patch with the action id computed from the pod that write returned
  (``_patch_pod``); a mark after this executor's create or spec patch of the pod is computed from that
  write's answer (``_mark_from_written``). An action naming the resourceVersion the planner computed it
  from makes its first write at that version with no read before it; a conflict there means the pod
  changed since (possibly this action, applied by an earlier delivery), and the read decides as above
  (services/model/pod_writes.py).
- Taking an action (after the terminal-event check, before any API call), the executor notes the time;
  the outcome carries it (``started_at``) and the executor's name, so the trail shows how long the action
  waited on the bus without a row of its own. Only an action that has to wait appends PodActionStarted,
  when it starts to: before its first API retry, or before it goes back to the bus; an operator sees it
  in hand during an outage. Its id is derived from the action id: a redelivery, or a second executor
  taking the same action, stores nothing new (the first taker's record stands).
- The terminal event (PodActionSucceeded or PodActionFailed) has a deterministic id derived from the
  action id, so it is stored once whoever writes it. A failure that may pass (API unavailable) is
  retried by the bus; on the last delivery it is reported failed with retryable=true instead.
- CloneSet and SidecarSet status goes through the status subresource, from ordered durables
  ``executor-status-p<N>``, one per bus partition: one status write in flight at a time per partition
  across every executor, so each workload's statuses land in the order they were planned, and
  different partitions write in parallel.
"""

from __future__ import annotations

import asyncio
import copy
import os
import socket
import time
import uuid
from collections.abc import Hashable, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import aiohttp
import msgspec
import nats.js.errors
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from nats.aio.msg import Msg

from services.executor.api_retry import call_with_retries
from services.executor.authority import refusal
from services.executor.handed_back import HandedBack
from services.executor.kube_events import KubeEventWriter
from services.executor.pods import (
    CONFLICT_RETRIES,
    MERGE_PATCH,
    ActionFailed,
    patch_applied,
    read_target_pod,
)
from services.executor.real_values import TemplateMovedOn, restore_cloneset_action
from services.executor.resize import ResizeDiscovery, apply_resize
from services.executor.settled import Settled, found_on_pod
from services.executor.sidecarset import apply_sidecar_upgrade, write_sidecarset_status
from services.infra import kube
from services.infra.bus import (
    BODY_HEADER,
    BODY_IN_STORE,
    DEFAULT_RETRY_BACKOFF,
    Bus,
    Unacceptable,
    carried_payload,
)
from services.infra.consumer_service import ConsumerSpec, serve_consumers
from services.infra.group_commit import GroupCommit
from services.infra.metrics import (
    ACTIONS_APPLIED,
    ACTIONS_FAILED,
    BEFORE_ACTING_PREPARED,
    EVENTS_APPENDED,
    EVENTS_HANDLED,
    EXECUTOR_REFUSED,
    KUBE_EVENTS,
    STATUS_WRITES,
)
from services.infra.nats_auth import EXECUTOR
from services.infra.redaction_key import RedactionKeyError, load_policy
from services.infra.runtime import ServiceRuntime, calm_cyclic_collector, configure_logging
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds import registry
from services.kinds.cloneset import actions as cs
from services.kinds.registry import CLONESET, SIDECARSET, InvalidAction, RequestedAction, requested_action
from services.kinds.sidecarset.actions import UpdateSidecarInPlace
from services.model.actions import ActionKind
from services.model.cloneset import INSTANCE_ID_LABEL
from services.model.events import (
    Envelope,
    PodActionFailed,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    StatusPlanned,
    decode,
    new_event,
)
from services.model.kube_events import EVENT_DECISION_TYPES
from services.model.pod_writes import (
    JSON_PATCH,
    Written,
    has_condition,
    json_patch_from,
    mark_from_written,
)
from services.model.redaction import contains_digest, scrub
from services.model.sidecarset_streams import UPDATE_SIDECAR_ACTION
from services.model.streams import (
    ACTION_ID_ANNOTATION,
    CLONESET_GROUP,
    CLONESET_PLURAL,
    CLONESET_VERSION,
    STATUS_FIELD_MANAGER,
    derived_id,
)

log = structlog.get_logger("executor")

DURABLE = "executor"
# An action held by an executor that died is handed to another after this. A live executor tells
# JetStream every action in hand is in progress (services/infra/bus.py, a third of this apart), so an
# action may take longer; should one still be redelivered while it runs (the in-progress signal lost),
# that is harmless: the action id on the object makes it apply once.
ACK_WAIT = 5.0
INPUT_TYPES = ("PodActionRequested",)
# Status writes replace the whole status, so they must land in the order they were planned: executors
# share ordered durables for them, one per bus partition (a workload's events all share one partition),
# so one write is in flight at a time per partition across all executors. On the shared action durable
# two executors could write a workload's statuses N and N+1 in the wrong order, and the CloneSet would
# keep reporting the older one, since the planner does not plan an unchanged status again.
STATUS_DURABLE_PREFIX = "executor-status-p"
# The single ordered status durable of earlier versions (all partitions, one write at a time in total).
LEGACY_STATUS_DURABLE = "executor-status"
STATUS_TYPES = ("StatusPlanned",)
# The Kubernetes Events of rollout decisions (services/model/kube_events.py): shared by every executor.
EVENTS_DURABLE = "executor-kube-events"
# How often an action waiting for an earlier action on its pod (taken by another executor) looks again,
# and how long it waits before handing its message back to the bus (that one may have been lost with
# its executor: it is redelivered after ACK_WAIT; or it may be waiting out Retry-After answers there).
EARLIER_ACTION_POLL = 0.02
EARLIER_ACTION_WAIT = 20.0
# After this long without an outcome, the waiting action looks at the pod (then every EARLIER_ON_POD_POLL):
# an earlier action whose id it carries was carried out, its outcome lost (``settled.found_on_pod``). Not at
# once: the relay puts a lost outcome back from the bus within a second or two, as itself; recorded here
# first (another body, at another version) it would keep the lost events after it from coming back.
EARLIER_ON_POD_AFTER = 5.0
EARLIER_ON_POD_POLL = 1.0
# How long an action given back to the bus makes the later actions of its pod go back too: by then the bus
# has handed it out again (the longest redelivery delay, or ACK_WAIT if an executor holding it died),
# to this executor or another one, so the entry no longer says where it is.
HANDED_BACK_TTL = max(DEFAULT_RETRY_BACKOFF) + ACK_WAIT


# How long the store's answers read for a fetched batch of requests (``Executor.prepare``) stand in for
# the query each action makes before acting: a message queued longer behind its pod asks again.
PREPARED_FRESH_SECONDS = 1.0

# Everything the before-acting query reads of a request: one message's answer is never another's.
PreparedKey = tuple[uuid.UUID, str, int, uuid.UUID | None, str | None, uuid.UUID, str, str]


def prepared_key(envelope: Envelope, outcome: uuid.UUID, pod: str, carried: str) -> PreparedKey:
    return (
        envelope.event_id,
        envelope.stream,
        envelope.stream_version,
        envelope.causation_id,
        envelope.correlation_id,
        outcome,
        pod,
        carried,
    )


MAX_STORE_CONNECTIONS = 16
# Pods whose last create or spec patch by this executor is remembered for the mark after it (those in flight).
WRITTEN_CAPACITY = 10_000


class EarlierActionPending(Exception):
    """An action planned before this one for the same pod has no outcome yet; retried by the bus."""


def store_connections(settings: Settings) -> int:
    """The executor's Postgres connections, all kept open: no overflow connections, which the pool opens
    for a burst (64 actions checking the store at once) and closes right after, each a connect, a type
    introspection and a Postgres backend (about 3% of the executor's CPU per action when the pool had 5).
    A query holds a connection for about a millisecond and no executor path holds two at once, so
    ``MAX_STORE_CONNECTIONS`` serve hundreds of actions a second; more would only add backends."""
    return max(1, min(MAX_STORE_CONNECTIONS, settings.executor_concurrency + settings.bus_partitions))


def status_durable(partition: int) -> str:
    return f"{STATUS_DURABLE_PREFIX}{partition}"


def pod_key(envelope: Envelope) -> Hashable:
    """What a pod action must be ordered with: the pod (or the CloneSet, for setPodsToDelete)."""
    payload = envelope.payload
    if isinstance(payload, PodActionRequested):
        kind = CLONESET.name if payload.action == ActionKind.SET_PODS_TO_DELETE else "Pod"
        return (kind, payload.namespace, payload.target)
    return ("event", envelope.event_id)


def outcome_id(action_id: str) -> Any:
    return derived_id("outcome", action_id)


def started_id(action_id: str) -> Any:
    return derived_id("started", action_id)


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _with_action(obj: dict[str, Any], action_id: str) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    metadata = result.setdefault("metadata", {})
    annotations = metadata.get("annotations") or {}
    metadata["annotations"] = {**annotations, ACTION_ID_ANNOTATION: action_id}
    metadata.pop("resourceVersion", None)
    return result


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


class Executor:
    def __init__(self, settings: Settings, store: EventStore, api: client.ApiClient) -> None:
        self.settings = settings
        self.store = store
        self.reports = GroupCommit(store)
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        # Restores the values the trail records as digests (executor/real_values.py).
        self.policy = load_policy(settings)
        self.name = f"{socket.gethostname()}/{os.getpid()}"
        # Pod actions this process gave back to the bus (a failure that may pass), until it takes them
        # again, their outcome is seen, or HANDED_BACK_TTL passes.
        self.handed_back = HandedBack(HANDED_BACK_TTL)
        # Actions whose terminal outcome this process stored or found stored: a later action of the same
        # pod need not ask the store about them (services/executor/settled.py).
        self.settled = Settled()
        # Per pod, what this executor's last create or spec patch of it returned, for the mark that follows
        # (``_mark_from_written``); the oldest are forgotten past WRITTEN_CAPACITY.
        self.written: dict[tuple[str, str], Written] = {}
        # The Kubernetes Event each rollout decision means (services/executor/kube_events.py).
        self.kube_events = KubeEventWriter(api, settings.kube_event_interval, self.name)
        # Whether the cluster serves pods/resize, discovered on the first resize (executor/resize.py).
        self.resize_discovery = ResizeDiscovery()
        # The store's before-acting answers read for a fetched batch (``prepare``), by (event id, payload
        # carried): when read, and the answer. Each is used once, and only while fresh.
        self.prepared: dict[PreparedKey, tuple[float, tuple[bool, list[str], bool | None]]] = {}

    # --- bus -----------------------------------------------------------------------------------------

    def consumers(self) -> list[ConsumerSpec]:
        """The pod actions, shared out among executors, many at once; the status writes, in order per
        partition."""
        concurrency = max(1, self.settings.executor_concurrency)
        actions = ConsumerSpec(
            DURABLE,
            INPUT_TYPES,
            self.handle,
            batch=min(concurrency, 64),
            ack_wait=ACK_WAIT,
            concurrency=concurrency,
            order_key=pod_key,
            prepare=self.prepare,
        )
        statuses = [
            ConsumerSpec(
                status_durable(p),
                STATUS_TYPES,
                self.handle,
                batch=1,
                ack_wait=ACK_WAIT,
                ordered=True,
                partition=p,
            )
            for p in range(self.settings.bus_partitions)
        ]
        events = ConsumerSpec(
            EVENTS_DURABLE, EVENT_DECISION_TYPES, self.handle_kube_event, batch=16, ack_wait=ACK_WAIT
        )
        return [actions, *statuses, events]

    async def prepare(self, msgs: Sequence[Msg]) -> None:
        """Read the store's before-acting answer of every pod action among ``msgs`` (fetched together) in
        one statement, for ``_before_acting`` to take instead of a query per action. The answers are the
        same statement's, per request: the store stays the authority, only read once for the batch."""
        now = time.monotonic()
        for key in [k for k, (at, _) in self.prepared.items() if now - at > PREPARED_FRESH_SECONDS]:
            del self.prepared[key]  # fetched but never handled here (given back on a stop)
        requests: list[tuple[Envelope, uuid.UUID, str, str | None]] = []
        for msg in msgs:
            if (msg.headers or {}).get(BODY_HEADER) == BODY_IN_STORE:
                continue  # read from the store by the consumer: checked by its own query
            try:
                envelope = decode(msg.data)
            except Exception:  # the consumer dead-letters it with the reason
                continue
            payload = envelope.payload
            carried = carried_payload(msg.headers, msg.data)
            if isinstance(payload, PodActionRequested) and carried:
                requests.append((envelope, outcome_id(payload.action_id), payload.pod, carried))
        if len(requests) < 2:
            return  # one action's own query costs the same
        answers = await self.store.before_acting_many(requests)
        read = time.monotonic()
        keys = [prepared_key(envelope, outcome, pod, text or "") for envelope, outcome, pod, text in requests]
        twice = {key for key in keys if keys.count(key) > 1}
        for key, answer in zip(keys, answers, strict=True):
            # A message fetched twice with everything the query reads the same gets the same answer; but
            # never hand one message's answer to another: a key seen twice in a batch asks alone.
            if key not in twice:
                self.prepared[key] = (read, answer)
        BEFORE_ACTING_PREPARED.inc(len(requests) - sum(keys.count(k) for k in twice))

    async def handle_kube_event(self, envelope: Envelope, msg: Msg) -> None:
        EVENTS_HANDLED.labels("executor", envelope.type).inc()
        outcome = await call_with_retries(lambda: self.kube_events.handle(envelope), what="kube event")
        KUBE_EVENTS.labels(outcome).inc()

    async def handle(self, envelope: Envelope, msg: Msg) -> None:
        EVENTS_HANDLED.labels("executor", envelope.type).inc()
        structlog.contextvars.bind_contextvars(correlation_id=envelope.correlation_id)
        try:
            # What the message says the planner stored, checked against the store before anything is done
            # (services/executor/authority.py): the payload as it travelled, or "" for an event the bus
            # carried by reference, whose body the consumer read from the store itself.
            carried = carried_payload(msg.headers, msg.data)
            reason = refusal(envelope.type, envelope.stream, True)
            if reason is not None:
                self._refuse(envelope, reason)
            payload = envelope.payload
            if isinstance(payload, PodActionRequested):
                last_try = msg.metadata.num_delivered >= self.settings.max_deliver
                try:
                    await self.execute(envelope, payload, last_try=last_try, carried=carried)
                except Unacceptable:
                    raise
                except Exception:
                    # the bus hands it back after a delay
                    self.handed_back.add(payload.action_id, time.monotonic())
                    raise
                self.handed_back.discard([payload.action_id])
            elif isinstance(payload, StatusPlanned):
                if carried:
                    await self._check_stored_status(envelope, carried)
                await call_with_retries(lambda: self.write_status(envelope, payload), what="status")
        finally:
            structlog.contextvars.unbind_contextvars("correlation_id")

    def _refuse(self, envelope: Envelope, reason: str) -> NoReturn:
        """Count and log the refusal (once: it is dead-lettered, never delivered again), then raise it for
        the consumer to dead-letter with the reason."""
        EXECUTOR_REFUSED.labels(envelope.type).inc()
        log.error(
            "executor_refused",
            event_id=str(envelope.event_id),
            type=envelope.type,
            stream=envelope.stream,
            reason=reason,
        )
        raise Unacceptable(reason)

    async def _check_stored_status(self, envelope: Envelope, carried: str) -> None:
        stored = await self.store.status_stored_as_carried(envelope, carried)
        reason = refusal(envelope.type, envelope.stream, stored)
        if reason is not None:
            self._refuse(envelope, reason)

    # --- actions -------------------------------------------------------------------------------------

    async def execute(
        self,
        envelope: Envelope,
        request: PodActionRequested,
        *,
        last_try: bool = False,
        carried: str | None = None,
    ) -> None:
        """Carry out one action. ``carried``: the payload the bus message carried (JSON text): the action is
        refused unless that exact event is stored (``""``: the body was read from the store; None: not
        from the bus at all, a direct call)."""
        reported, earlier, stored = await self._before_acting(envelope, request, carried or None)
        if carried:
            reason = refusal(envelope.type, envelope.stream, stored)
            if reason is not None:
                self._refuse(envelope, reason)
        if reported:
            self.settled.add([request.action_id])
            log.info(
                "action_already_reported",
                action=request.action,
                pod=request.target,
                action_id=request.action_id,
            )
            return
        action = self._typed(envelope, request)
        try:
            await self._wait_for_earlier_actions(envelope, request, earlier, last_try=last_try)
        except EarlierActionPending as waiting:
            if not last_try:
                raise  # the bus hands it back later
            # Never taken: its earlier actions never settled, so no ``started_at``.
            await self._report_failure(envelope, request, ActionFailed(str(waiting), retryable=True), None)
            return
        taken = Taken(self, envelope, request.action_id)
        revealed: dict[str, str] = {}  # digest -> real value written: never repeated in a reason
        try:
            # The values the trail holds as digests, restored from the live objects (or ActionFailed).
            written, revealed = await call_with_retries(
                lambda: self.with_real_values(request, _workload_or_none(envelope.stream)),
                what=request.action,
                before_retry=taken.record,
            )
            if written is not request:
                action = self._typed(envelope, written)
            # Transient API answers are retried here, quickly, before the bus's slower redelivery.
            uid, already = await call_with_retries(
                lambda: self.apply(written, action), what=request.action, before_retry=taken.record
            )
        except ActionFailed as failure:
            failure = ActionFailed(scrub(failure.reason, revealed), retryable=failure.retryable)
            await self._report_failure(envelope, request, failure, taken.at)
            return
        except ApiException as error:
            reason = scrub(_api_reason(error), revealed)
            if error.status is not None and 400 <= error.status < 500 and error.status not in (408, 429):
                await self._report_failure(envelope, request, ActionFailed(reason), taken.at)
                return
            if last_try:
                await self._report_failure(envelope, request, ActionFailed(reason, retryable=True), taken.at)
                return
            await taken.record()
            raise  # the bus retries it later
        except (TimeoutError, OSError, aiohttp.ClientError) as error:
            if last_try:
                await self._report_failure(
                    envelope, request, ActionFailed(repr(error), retryable=True), taken.at
                )
                return
            await taken.record()
            raise
        ACTIONS_APPLIED.labels(request.action, str(already).lower()).inc()
        log.info(
            "action_applied",
            action=request.action,
            pod=request.target,
            action_id=request.action_id,
            already_applied=already,
        )
        await self._report(
            envelope,
            PodActionSucceeded(
                action_id=request.action_id,
                pod_uid=uid,
                already_applied=already,
                started_at=taken.at,
                executor=self.name,
            ),
        )

    def _typed(self, envelope: Envelope, request: PodActionRequested) -> RequestedAction:
        """The request's typed action (its kind's actions.py); a request no kind reads (an unknown
        action, details not of its shape) is refused: dead-lettered with the reason, never carried out."""
        try:
            return requested_action(request)
        except InvalidAction as invalid:
            self._refuse(envelope, str(invalid))

    async def apply(
        self, request: PodActionRequested, action: RequestedAction | None = None
    ) -> tuple[str | None, bool]:
        """Carry out one action (``action``: its typed details, decoded here when not given); returns (uid
        of the object, whether it had already been applied)."""
        if action is None:
            action = requested_action(request)
        namespace = request.namespace
        action_id = request.action_id
        match action:
            case UpdateSidecarInPlace():  # SidecarSet in-place upgrade (executor/sidecarset.py)
                return await apply_sidecar_upgrade(self.core, request, action)
            case cs.CreatePod():
                await self._create_claims(request, action)
                return await self._create(
                    "Pod",
                    namespace,
                    _with_action(action.object, action_id),
                    action_id,
                    self.core.create_namespaced_pod,
                    self.core.read_namespaced_pod,
                )
            case cs.CreatePVC():
                return await self._create(
                    "PersistentVolumeClaim",
                    namespace,
                    _with_action(action.object, action_id),
                    action_id,
                    self.core.create_namespaced_persistent_volume_claim,
                    self.core.read_namespaced_persistent_volume_claim,
                )
            case cs.DeletePod():
                uid = cs.uid_of(action)
                already = await self._delete(self.core.delete_namespaced_pod, request.pod, namespace, uid)
                if action.with_pvcs:
                    uids = action.pvc_uids or {}
                    for pvc in action.pvcs:
                        await self._delete(
                            self.core.delete_namespaced_persistent_volume_claim, pvc, namespace, uids.get(pvc)
                        )
                return uid, already
            case cs.DeletePVC():
                uid = cs.uid_of(action)
                already = await self._delete(
                    self.core.delete_namespaced_persistent_volume_claim, action.pvc, namespace, uid
                )
                return uid, already
            case cs.UpdateInPlace():
                return await self._patch_pod(request, action, action.not_ready)
            case cs.RecreatePod() | cs.PatchPod():
                return await self._patch_pod(request, action)
            case cs.ResizePod():  # pods/resize (executor/resize.py)
                return await apply_resize(self.core, self.resize_discovery, request, action)
            case cs.MarkNotReady() | cs.MarkReady():
                return await self._mark(request, action)
            case cs.SetPodsToDelete():
                return await self._set_pods_to_delete(request, action)

    async def with_real_values(
        self, request: PodActionRequested, workload: tuple[str, str] | None
    ) -> tuple[PodActionRequested, dict[str, str]]:
        """The request with the values redaction replaced by digests restored from the live objects
        (executor/real_values.py), and what it restored (digest -> value); the request itself when it
        holds none; ActionFailed when the template has moved on. The details go whole to the redaction
        walk (a digest may be anywhere in them); the restored request is typed again by ``execute``."""
        if request.action == UPDATE_SIDECAR_ACTION or not contains_digest(request.details):
            return request, {}
        if workload is None:
            raise ActionFailed(
                "the action carries redacted values and names no CloneSet to restore them from"
            )
        try:
            details, digests = await restore_cloneset_action(
                self.policy,
                self.api,
                workload[0],
                workload[1],
                request.pod,
                request.revision,
                request.details,
            )
        except TemplateMovedOn as moved:
            raise ActionFailed(str(moved)) from None
        return msgspec.structs.replace(request, details=details), digests

    async def _create(
        self, kind: str, namespace: str, body: dict[str, Any], action_id: str, create: Any, read: Any
    ) -> tuple[str | None, bool]:
        name = body["metadata"]["name"]
        try:
            # The answer as raw JSON: building the client's model of a pod costs more CPU than the call.
            created = await kube.raw_json(await create(namespace, body, _preload_content=False))
            if kind == "Pod":
                self._remember(namespace, name, Written(created, created=True))
            return (created.get("metadata") or {}).get("uid"), False
        except ApiException as error:
            if error.status != 409:
                raise
        existing = await kube.raw_json(await read(name, namespace, _preload_content=False))
        if _annotations(existing).get(ACTION_ID_ANNOTATION) == action_id:
            return (existing.get("metadata") or {}).get("uid"), True
        raise ActionFailed(f"{kind} {namespace}/{name} already exists (created by someone else)")

    async def _create_claims(self, request: PodActionRequested, action: cs.CreatePod) -> None:
        """The claims a createPod names, before its pod (OpenKruise createOnePod: each claim of the instance
        not existing yet, then the pod). One already there is fine when it belongs to this instance: an
        earlier delivery of this action made it, or it was kept from an earlier pod of this instance id
        (or made by an earlier try that failed at the pod), and its controller is this claim's owner (or
        it has none). A claim being deleted is not: the pod would start on a claim about to go. A claim
        accepted from before gets this action's id too, as a created one carries it: the expectation
        waits for the id on each claim, so an older observation of the name does not satisfy it."""
        instance_id = action.instance_id or None
        create: Any = self.core.create_namespaced_persistent_volume_claim  # takes the raw dict too
        for claim in action.pvcs:
            body = _with_action(claim, request.action_id)
            name = body["metadata"]["name"]
            try:
                await kube.raw_body(await create(request.namespace, body, _preload_content=False))
                continue
            except ApiException as error:
                if error.status != 409:
                    raise
            existing = await kube.raw_json(
                await self.core.read_namespaced_persistent_volume_claim(
                    name, request.namespace, _preload_content=False
                )
            )
            metadata = existing.get("metadata") or {}
            ours = _annotations(existing).get(ACTION_ID_ANNOTATION) == request.action_id
            if not ours and (metadata.get("labels") or {}).get(INSTANCE_ID_LABEL) != instance_id:
                raise ActionFailed(
                    f"PersistentVolumeClaim {request.namespace}/{name} already exists (not of this instance)"
                )
            owner, wanted = kube.controller_owner(existing), kube.controller_owner(body)
            if owner is not None and owner.get("uid") != (wanted or {}).get("uid"):
                raise ActionFailed(
                    f"PersistentVolumeClaim {request.namespace}/{name} is controlled by another owner"
                    f" ({owner.get('kind')} {owner.get('name')}, uid {owner.get('uid')})"
                )
            if metadata.get("deletionTimestamp"):
                raise ActionFailed(
                    f"PersistentVolumeClaim {request.namespace}/{name} is being deleted", retryable=True
                )
            if not ours:
                await self._claim_for_action(request, name, metadata)

    async def _claim_for_action(
        self, request: PodActionRequested, name: str, metadata: dict[str, Any]
    ) -> None:
        """This action's id onto a claim it found (a merge patch, with the resourceVersion it was checked
        at: a claim changed since, such as one whose deletion started, is checked again on a retry)."""
        body = {
            "metadata": {
                "annotations": {ACTION_ID_ANNOTATION: request.action_id},
                "resourceVersion": metadata.get("resourceVersion"),
            }
        }
        try:
            await kube.raw_body(
                await self.core.patch_namespaced_persistent_volume_claim(
                    name,
                    request.namespace,
                    body,
                    _content_type=MERGE_PATCH,  # type: ignore[call-arg]
                    _preload_content=False,
                )
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise
            raise ActionFailed(
                f"PersistentVolumeClaim {request.namespace}/{name} changed while taken for the pod",
                retryable=True,
            ) from error

    async def _delete(self, delete: Any, name: str, namespace: str, uid: str | None) -> bool:
        """Delete exactly the incarnation ``uid``; True when it was gone already."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            # The answer (the object as deleted) is not needed: read off the connection, not decoded.
            await kube.raw_body(await delete(name, namespace, body=options, _preload_content=False))
            return False
        except ApiException as error:
            if error.status == 404:
                return True
            if error.status == 409 and uid:  # precondition failed: a different object has the name now
                return True
            raise

    async def _patch_pod(
        self, request: PodActionRequested, action: cs.Patch, not_ready: dict[str, Any] | None = None
    ) -> tuple[str | None, bool]:
        """Patch as a JSON patch with tests computed from the pod (``_write_patch_from``); after a refused
        test (the pod changed in a field the patch writes), re-read and try again.

        With ``not_ready`` (an in-place update with no grace period) the condition goes first, through
        pods/status, then the spec patch computed from the pod as that write returned it (no second read;
        the kubelet's status write answering the condition does not conflict with it). The condition
        write carries only the condition and the uid precondition, not the action id: a crash between the
        two writes leaves the action not applied, and its redelivery finds the condition in place (nothing
        to write again) and writes the patch once. The action counts as applied when the pod carries its
        id or the in-place update state its patch writes (``patch_applied``), checked on the pod as read
        and on the pod as the condition write returned it.

        An action naming the version it was computed from (``details.resourceVersion``) first tries
        without the read (``_patch_observed``); a pod changed since goes the way above."""
        patch, uid = action.patch, cs.uid_of(action)
        unread = await self._patch_observed(request, patch, not_ready, uid, cs.observed_version(action))
        if unread is not None:
            return unread
        pod = await read_target_pod(self.core, request, uid)
        for _ in range(CONFLICT_RETRIES):
            metadata = pod.get("metadata") or {}
            if patch_applied(pod, request.action_id, patch):
                return metadata.get("uid"), True
            if not_ready and not has_condition(pod, not_ready):
                pod = await self._write_condition(request, metadata.get("uid"), not_ready)
                metadata = pod.get("metadata") or {}
                # Another executor, delivered the same action, may have applied it since the read.
                if patch_applied(pod, request.action_id, patch):
                    return metadata.get("uid"), True
            try:
                await self._write_patch_from(request, patch, pod)
                return metadata.get("uid"), False
            except ApiException as error:
                if error.status not in (409, 422):
                    raise
                computed_from = metadata.get("resourceVersion")
                pod = await read_target_pod(self.core, request, uid)
                if computed_from and (pod.get("metadata") or {}).get("resourceVersion") == computed_from:
                    raise  # the pod is as the patch was computed from: the API refuses the patch itself
                log.info("conflict_retry", pod=request.target, action=request.action)
        raise ActionFailed("kept conflicting with other writers", retryable=True)

    async def _patch_observed(
        self,
        request: PodActionRequested,
        patch: dict[str, Any],
        not_ready: dict[str, Any] | None,
        uid: str | None,
        version: str | None,
    ) -> tuple[str | None, bool] | None:
        """The first write at the version the planner computed the action from, with no read before it
        (services/model/pod_writes.py): the condition (``not_ready``) or else the patch names it as
        precondition, so it lands only on the pod exactly as the planner saw it, on which this action is
        not applied yet (applying it moves the version) and the condition is missing (the planner names a
        version only then). After the condition, the spec patch is computed from the pod that write
        returned. The answer of the action (uid, not already applied); None when the action names no
        version or the pod is not at it any more (409; 404 or 422, gone or replaced; or a test of the
        spec patch refused): then the read decides, as for an action without one (applied already, a
        condition in place, gone)."""
        if not version or not uid:
            return None  # planned by rules before 13, or from a pod observed without a version
        try:
            if not_ready:
                written = await self._write_condition(request, uid, not_ready, resource_version=version)
                await self._write_patch_from(request, patch, written)
            else:
                await self._write_patch(request, patch, version)
        except ApiException as error:
            if error.status not in (404, 409, 422):
                raise
            # Changed since the planner saw it (after a condition write: in a field the patch writes).
            log.info("observed_version_conflict", pod=request.target, action=request.action)
            return None
        return uid, False

    async def _write_patch(
        self, request: PodActionRequested, patch: dict[str, Any], resource_version: str | None
    ) -> None:
        """The action's patch with its id, at ``resource_version``."""
        body = _merge(
            patch,
            {
                "metadata": {
                    "annotations": {ACTION_ID_ANNOTATION: request.action_id},
                    "resourceVersion": resource_version,
                }
            },
        )
        # The answer is not read: neither built into the client's model nor decoded.
        await kube.patch_namespaced_pod(self.api, request.pod, request.namespace, body, answer=False)

    async def _write_patch_from(
        self, request: PodActionRequested, patch: dict[str, Any], pod: dict[str, Any]
    ) -> None:
        """The action's patch with its id, as a JSON patch computed from ``pod`` with a test of each value
        it changes as ``pod`` has it (services/model/pod_writes.py ``json_patch_from``): refused (422)
        when the pod changed since in a field it writes, the action id among them, so it lands once; a
        status write does not stand in its way, as a resourceVersion precondition would."""
        with_id = _merge(patch, {"metadata": {"annotations": {ACTION_ID_ANNOTATION: request.action_id}}})
        operations = json_patch_from(pod, with_id)
        written = await kube.patch_namespaced_pod(
            self.api, request.pod, request.namespace, operations, content_type=JSON_PATCH
        )
        self._remember(request.namespace, request.pod, Written(written))

    def _remember(self, namespace: str, pod: str, written: Written) -> None:
        """What this executor's write of ``pod`` returned, for the mark after it (``_mark_from_written``)."""
        key = (namespace, pod)
        self.written.pop(key, None)  # to the end: the oldest go first
        self.written[key] = written
        if len(self.written) > WRITTEN_CAPACITY:
            del self.written[next(iter(self.written))]

    async def _write_condition(
        self,
        request: PodActionRequested,
        uid: str | None,
        condition: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """One pod condition through pods/status (conditions merge by type, so only this one changes),
        with the pod's uid as precondition (a replaced pod is refused, 422), and ``resource_version`` as
        well when given (409 unless the pod is still at it); the pod as written."""
        metadata: dict[str, Any] = {"uid": uid}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        body = {"metadata": metadata, "status": {"conditions": [condition]}}
        return await kube.patch_namespaced_pod_status(self.api, request.pod, request.namespace, body)

    async def _mark(self, request: PodActionRequested, action: cs.Mark) -> tuple[str | None, bool]:
        """The condition, the labels and the action id in one write, through the status subresource (which
        for pods takes labels, annotations and finalizers too; Kubernetes resets only spec,
        deletionTimestamp and ownerReferences there). One write, not two: each is exposed to the API's
        errors, and the mark lands whole or not at all, so a retry has nothing half done to find.

        A mark naming the version it was computed from (``details.resourceVersion``) is first written at
        that version, with no read: it lands only on the pod as the planner saw it, so on a pod this mark
        (or any later action) has not written yet and that lacks the condition (the planner names a
        version only then). Otherwise, or on a conflict (the pod changed since: a redelivery finds its own
        write there), the pod is read: its action id means applied already, else the mark is written with
        no resourceVersion precondition: nothing in the patch is computed from the pod as read, and the
        kubelet answers the condition with a status write of its own, which such a precondition would
        meet as a conflict again. The uid is one instead (as in the kubelet's own status patches): a pod
        replaced since the read is refused (422, uid is immutable), not marked."""
        patch = action.patch or {}
        if set(patch) - {"metadata"}:
            raise ActionFailed(
                f"a mark's patch may change only metadata, not {sorted(set(patch) - {'metadata'})}"
            )
        condition = action.condition
        version = cs.observed_version(action)
        uid = cs.uid_of(action)
        if version and uid and await self._mark_from_written(request, uid, condition, patch):
            return uid, False
        if version and uid:
            try:
                await self._write_mark(request, patch, uid, condition, resource_version=version)
                return uid, False
            except ApiException as error:
                if error.status not in (404, 409, 422):
                    raise
                log.info("observed_version_conflict", pod=request.target, action=request.action)
        pod = await read_target_pod(self.core, request, uid)
        metadata = pod.get("metadata") or {}
        if _annotations(pod).get(ACTION_ID_ANNOTATION) == request.action_id:
            return metadata.get("uid"), True
        missing = condition if condition and not has_condition(pod, condition) else None
        await self._write_mark(request, patch, metadata.get("uid"), missing)
        return metadata.get("uid"), False

    async def _mark_from_written(
        self,
        request: PodActionRequested,
        uid: str,
        condition: dict[str, Any] | None,
        patch: dict[str, Any] | None = None,
    ) -> bool:
        """A mark (its condition, action id and labels or annotations), written as a JSON patch computed from
        the pod this executor's last create or spec patch of it returned (``mark_from_written``), not at
        the version the planner saw: the kubelet's status writes since (the containers started or
        restarted) do not conflict with it, while any action applied since (this mark's earlier
        delivery included) or a replaced pod refuses it (422). Whether it was written; False (nothing
        written) when the pod is not remembered or the patch was refused: then the mark goes the way it
        went without."""
        written = self.written.pop((request.namespace, request.pod), None)
        operations = mark_from_written(written, uid, condition, request.action_id, patch) if written else None
        if operations is None:
            return False
        try:
            await kube.patch_namespaced_pod_status(
                self.api, request.pod, request.namespace, operations, content_type=JSON_PATCH, answer=False
            )
        except ApiException as error:
            if error.status not in (404, 409, 422):
                raise
            log.info("written_state_conflict", pod=request.target, action=request.action)
            return False
        return True

    async def _write_mark(
        self,
        request: PodActionRequested,
        patch: dict[str, Any],
        uid: str | None,
        condition: dict[str, Any] | None,
        *,
        resource_version: str | None = None,
    ) -> None:
        """A mark's one write through pods/status: its patch, the action id and ``condition`` (when
        given), with ``uid`` as precondition, and ``resource_version`` as well when given."""
        metadata: dict[str, Any] = {"uid": uid, "annotations": {ACTION_ID_ANNOTATION: request.action_id}}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        body = _merge(patch, {"metadata": metadata})
        if condition:
            # Conditions merge by type (strategic merge patch), so only this one changes.
            body["status"] = {"conditions": [condition]}
        await kube.patch_namespaced_pod_status(self.api, request.pod, request.namespace, body, answer=False)

    async def _set_pods_to_delete(
        self, request: PodActionRequested, action: cs.SetPodsToDelete
    ) -> tuple[str | None, bool]:
        name = request.target  # the CloneSet
        current = await self.custom.get_namespaced_custom_object(
            CLONESET_GROUP, CLONESET_VERSION, request.namespace, CLONESET_PLURAL, name
        )
        if _annotations(current).get(ACTION_ID_ANNOTATION) == request.action_id:
            return (current.get("metadata") or {}).get("uid"), True
        body = {
            "metadata": {"annotations": {ACTION_ID_ANNOTATION: request.action_id}},
            "spec": {"scaleStrategy": {"podsToDelete": action.pods_to_delete}},
        }
        await self.custom.patch_namespaced_custom_object(
            CLONESET_GROUP,
            CLONESET_VERSION,
            request.namespace,
            CLONESET_PLURAL,
            name,
            body,
            _content_type=MERGE_PATCH,  # type: ignore[call-arg]
        )
        return (current.get("metadata") or {}).get("uid"), False

    # --- status --------------------------------------------------------------------------------------

    async def write_status(self, envelope: Envelope, planned: StatusPlanned) -> None:
        # Statuses arrive in planned order (the ordered status durables), so each one is simply written,
        # unless a later one is planned already: that one follows on the same durable and replaces it.
        if await self.status_superseded(envelope):
            STATUS_WRITES.labels("superseded").inc()
            return
        STATUS_WRITES.labels("written").inc()
        if registry.kind_of_stream(envelope.stream) is SIDECARSET:
            if not await write_sidecarset_status(self.custom, planned):
                log.info("status_target_gone", name=planned.name)
            return
        try:
            # The CloneSet as written is not read: not decoded.
            await kube.raw_body(
                await self.custom.patch_namespaced_custom_object_status(
                    CLONESET_GROUP,
                    CLONESET_VERSION,
                    planned.namespace,
                    CLONESET_PLURAL,
                    planned.name,
                    {"status": planned.status},
                    field_manager=STATUS_FIELD_MANAGER,
                    _content_type=MERGE_PATCH,  # type: ignore[call-arg]
                    _preload_content=False,
                )
            )
        except ApiException as error:
            if error.status == 404:
                log.info("status_target_gone", name=planned.name)
                return
            raise

    # --- outcomes ------------------------------------------------------------------------------------

    async def status_superseded(self, envelope: Envelope) -> bool:
        """A later StatusPlanned of the same workload is in the store (so on its way to us, in order)."""
        return await self.store.later_status_planned(envelope.stream, envelope.stream_version)

    async def _wait_for_earlier_actions(
        self, envelope: Envelope, request: PodActionRequested, earlier: list[str], *, last_try: bool = False
    ) -> None:
        """Hold this action until the actions its round planned before it for the same pod (``earlier``)
        have a terminal outcome (in older trails a PVC before its pod, or a markNotReady before its
        updateInPlace), whichever executor took them, or the pod shows them carried out
        (``_found_on_pod``)."""
        started = time.monotonic()
        deadline, next_look = started + EARLIER_ACTION_WAIT, started + EARLIER_ON_POD_AFTER
        pending = earlier
        while True:
            settled = pending
            pending = await self._without_outcome(pending)
            self.handed_back.discard(a for a in settled if a not in pending)  # ran somewhere: not ours
            if not pending:
                return
            handed_back = self.handed_back.among(pending, time.monotonic())
            if handed_back and not last_try:
                # Its redelivery would queue behind this action (one pod's actions run in order here), so
                # waiting would only hold it up: give this one back to the bus instead, to follow it. Not
                # on the last delivery: the redelivery may have gone to another executor, so wait for it.
                raise EarlierActionPending(
                    f"earlier actions on {request.pod} went back to the bus: {handed_back}"
                )
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + EARLIER_ON_POD_POLL
                pending = await self._found_on_pod(envelope, request, [*earlier, request.action_id], pending)
                if not pending:
                    return
            if time.monotonic() > deadline:
                raise EarlierActionPending(f"earlier actions on {request.pod} have no outcome: {pending}")
            await asyncio.sleep(EARLIER_ACTION_POLL)

    async def _found_on_pod(
        self,
        envelope: Envelope,
        request: PodActionRequested,
        round_actions: list[str],
        pending: list[str],
    ) -> list[str]:
        """Those of ``pending`` still to wait for, given the action id on the pod (``found_on_pod``). The
        one the pod names gets its outcome, as a redelivery would report it (``already_applied``; no
        ``started_at``: not taken here): a later delivery of it then finds it reported instead of
        applying it again over the actions after it."""
        if not request.pod or not isinstance(request.workload, msgspec.UnsetType):
            return pending  # a workload's action: its earlier ones are on the workload, not a pod
        try:
            pod = await kube.read_namespaced_pod(self.api, request.pod, request.namespace)
        except (ApiException, TimeoutError, OSError, aiohttp.ClientError) as error:
            log.info("earlier_actions_pod_unread", pod=request.target, error=repr(error))
            return pending  # gone, or the API away: the store's outcomes decide, as before
        found, still = found_on_pod(round_actions, pending, _annotations(pod).get(ACTION_ID_ANNOTATION))
        if found is not None:
            log.warning(
                "earlier_action_found_on_pod", pod=request.target, action_id=found, waiting=request.action_id
            )
            uid = (pod.get("metadata") or {}).get("uid")
            # Caused by the found action's own request, not the waiting one's (the audit names the pod of
            # a lost outcome from its cause).
            cause = (
                envelope.event_id
                if found == request.action_id
                else await self.store.action_request(envelope, found)
            )
            await self._report(
                envelope,
                PodActionSucceeded(action_id=found, pod_uid=uid, already_applied=True, executor=self.name),
                causation_id=cause,
            )
        return still

    async def _before_acting(
        self, envelope: Envelope, request: PodActionRequested, carried: str | None = None
    ) -> tuple[bool, list[str], bool | None]:
        """One query: whether the action's terminal event is stored already, the action ids its round
        planned before it for the same pod, and, given the payload the message ``carried``, whether this
        very event is stored as it came (None: no event with its id is stored). A round is one append
        (RoundPlanned, then its decisions, each caused by the round), so those are the requests between
        the round's version and this one's. Read with its batch (``prepare``) if that answer is fresh."""
        if carried is not None:
            key = prepared_key(envelope, outcome_id(request.action_id), request.pod, carried)
            prepared = self.prepared.pop(key, None)
            if prepared is not None and time.monotonic() - prepared[0] <= PREPARED_FRESH_SECONDS:
                return prepared[1]
        return await self.store.before_acting(envelope, outcome_id(request.action_id), request.pod, carried)

    async def earlier_actions_pending(self, envelope: Envelope, request: PodActionRequested) -> list[str]:
        """Action ids of the same round, for the same pod, planned before this one, with no outcome yet."""
        return await self._without_outcome((await self._before_acting(envelope, request))[1])

    async def _without_outcome(self, action_ids: list[str]) -> list[str]:
        if not action_ids:
            return []
        action_ids = self.settled.unknown(action_ids)
        if not action_ids:
            return []
        outcomes = {outcome_id(a): a for a in action_ids}
        recorded = await self.store.stored_ids(list(outcomes))
        self.settled.add(a for o, a in outcomes.items() if o in recorded)
        return [a for o, a in outcomes.items() if o not in recorded]

    async def _report_failure(
        self,
        envelope: Envelope,
        request: PodActionRequested,
        failure: ActionFailed,
        started_at: datetime | None,
    ) -> None:
        ACTIONS_FAILED.labels(request.action, "retryable" if failure.retryable else "permanent").inc()
        log.warning(
            "action_failed",
            action=request.action,
            pod=request.target,
            action_id=request.action_id,
            reason=failure.reason,
        )
        await self._report(
            envelope,
            PodActionFailed(
                action_id=request.action_id,
                reason=failure.reason,
                retryable=failure.retryable,
                started_at=started_at,
                executor=self.name,
            ),
        )

    async def _report(
        self,
        envelope: Envelope,
        outcome: PodActionStarted | PodActionSucceeded | PodActionFailed,
        occurred_at: datetime | None = None,
        causation_id: uuid.UUID | None = None,
    ) -> None:
        """Append to the actions stream of the request's workload, with an id derived from the action id
        (stored once, whoever writes it and however often); ``occurred_at`` defaults to now,
        ``causation_id`` to the request's event id."""
        workload = registry.workload_of(envelope.stream)
        if workload is None:
            raise ValueError(f"not a workload's stream: {envelope.stream!r}")
        kind, namespace, name = workload
        stream = kind.actions_stream(namespace, name)
        event = new_event(
            outcome,
            stream=stream,
            stream_version=1,  # the store assigns the version: executors write this stream concurrently
            occurred_at=occurred_at or _now(),
            event_id=(
                started_id(outcome.action_id)
                if isinstance(outcome, PodActionStarted)
                else outcome_id(outcome.action_id)
            ),
            causation_id=causation_id or envelope.event_id,
            correlation_id=envelope.correlation_id,
        )
        # Concurrent actions report to their workloads' streams: one append per burst for all, not a race.
        if await self.reports.append(event):
            EVENTS_APPENDED.labels("executor", event.type).inc()
        if not isinstance(outcome, PodActionStarted):
            self.settled.add([outcome.action_id])  # stored now (by this append or an earlier one)


class Taken:
    """One delivery's taking of an action: when (``at``, the outcome's ``started_at``), and its
    PodActionStarted, appended once, only if the action has to wait (``record``)."""

    def __init__(self, executor: Executor, envelope: Envelope, action_id: str) -> None:
        self.at = _now()
        self._executor = executor
        self._envelope = envelope
        self._action_id = action_id
        self._recorded = False

    async def record(self) -> None:
        """Append PodActionStarted at the taking's time, once per delivery (its derived id makes it once
        per action across deliveries and executors)."""
        if self._recorded:
            return
        self._recorded = True
        started = PodActionStarted(action_id=self._action_id, executor=self._executor.name)
        try:
            await self._executor._report(self._envelope, started, occurred_at=self.at)
        except Exception as error:
            # Only informational (the outcome carries ``started_at``): a store outage here must not become
            # the action's failure, nor stop its API retries.
            self._recorded = False
            log.warning("action_taken_not_recorded", action_id=self._action_id, error=repr(error))


def _workload_or_none(stream: str) -> tuple[str, str] | None:
    """The CloneSet whose template a redacted action's values are restored from."""
    return CLONESET.workload_of(stream)


def _api_reason(error: ApiException) -> str:
    body = error.body[:500] if isinstance(error.body, str) else ""
    return f"HTTP {error.status} {error.reason}: {body}".strip()


def _now() -> datetime:
    return datetime.now(UTC)


async def run(settings: Settings) -> None:
    configure_logging(settings, "executor")
    try:
        load_policy(settings)  # nothing is recorded (or restored) without the redaction key
    except RedactionKeyError as error:
        log.error("redaction_key_unreadable", detail=str(error))
        raise SystemExit(2) from None
    calm_cyclic_collector()  # each message decodes into many containers, none in a cycle (runtime.py)
    async with ServiceRuntime(settings, "executor") as runtime:
        store = await EventStore.connect(
            settings.database_url, pool_size=store_connections(settings), max_overflow=0
        )
        bus = await Bus.connect(settings, name="rollbook-executor", identity=EXECUTOR)
        bus.bodies = store.read_event  # events larger than a bus message are read from the store
        api = await kube.api_client(settings)
        try:
            executor = Executor(settings, store, api)
            await bus.ensure_stream()
            try:  # replaced by the partitioned status durables; left alone it would only pile up lag
                await bus.js.delete_consumer(bus.stream, LEGACY_STATUS_DURABLE)
            except nats.js.errors.NotFoundError:
                pass
            await serve_consumers(
                runtime, bus, service="executor", consumers=executor.consumers(), store=store
            )
        finally:
            await api.close()
            await bus.close()
            await store.close()
