"""Builders of one workload's audit trail written through the real event store (the way the services write
it), shared by the view tests and the CLI tests."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from services.infra.store import EventStore
from services.kinds.cloneset.rules.inplace import condition
from services.kinds.registry import CLONESET, SIDECARSET
from services.model import sidecarset_streams
from services.model.events import (
    Event,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionFailed,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    RevisionCreated,
    RolloutCompleted,
    RolloutStarted,
    new_event,
)
from services.model.sidecarset_streams import (
    SIDECARSET_ACTION_ANNOTATION,
    SIDECARSET_INPLACE_STATE_ANNOTATION,
    SIDECARSET_KIND,
    UPDATE_SIDECAR_ACTION,
)

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
OLD, NEW = "web-111", "web-222"


def _taken(at: float | None) -> dict[str, Any]:
    if at is None:
        return {}
    return {"started_at": T0 + timedelta(seconds=at), "executor": "executor-a"}


class Trail:
    """Appends one workload's events in the order given, with occurred_at = T0 + seconds."""

    def __init__(self, store: EventStore, name: str = "web") -> None:
        self.store = store
        self.namespace = f"ns{uuid.uuid4().hex[:10]}"
        self.name = name
        self.rollout = f"{self.namespace}/{name}@{NEW}#1"  # as this rollbook numbers its first rollout

    async def _append(self, stream: str, payload: Event, at: float, correlation: str | None = None) -> None:
        version = await self.store.stream_version(stream) + 1
        event = new_event(
            payload,
            stream=stream,
            stream_version=version,
            occurred_at=T0 + timedelta(seconds=at),
            correlation_id=correlation,
        )
        await self.store.append([event], expected_version=version - 1)

    async def decide(self, payload: Event, at: float) -> None:
        await self._append(CLONESET.decisions_stream(self.namespace, self.name), payload, at, self.rollout)

    async def observe_cloneset(self, replicas: int, at: float) -> None:
        obj = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": {"replicas": replicas}}
        await self._observe("CloneSet", self.name, obj, "MODIFIED", at)

    async def observe_pod(
        self, pod: str, at: float, *, ready: bool = True, deleted: bool = False, terminating: bool = False
    ) -> None:
        metadata: dict[str, Any] = {"name": pod, "namespace": self.namespace}
        if terminating:
            metadata["deletionTimestamp"] = "2026-11-30T12:00:00Z"
        # As the watcher sees a pod: Running (services/model/availability.py counts only Running pods).
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        await self._observe(
            "Pod", pod, {"metadata": metadata, "status": status}, "DELETED" if deleted else "MODIFIED", at
        )

    async def _observe(self, kind: str, name: str, obj: dict[str, Any], change: str, at: float) -> None:
        payload = ObjectObserved(
            kind=kind, namespace=self.namespace, name=name, uid=f"uid-{name}",
            resource_version=str(uuid.uuid4().int % 10**9), change=change,  # type: ignore[arg-type]
            object=obj,
        )  # fmt: skip
        await self._append(CLONESET.observed_stream(self.namespace, self.name), payload, at)

    async def request(self, action: str, pod: str, at: float, details: dict[str, Any] | None = None) -> str:
        """A request; ``details`` as the planner records them (default: a markNotReady writes the
        InPlaceUpdateReady=False condition, as the grace-period path's and older trails' do)."""
        action_id = str(uuid.uuid4())
        if details is None:
            details = {"action": action, "pod": pod}
            if action == "markNotReady":
                details["condition"] = inplace_not_ready(at)
        await self.decide(
            PodActionRequested(
                action_id=action_id,
                action=action,
                namespace=self.namespace,
                pod=pod,
                rollout_id=self.rollout,
                revision=NEW,
                details=details,
            ),  # fmt: skip
            at,
        )
        return action_id

    async def start(self, action_id: str, at: float, executor: str = "executor-a") -> None:
        """An executor took the action (PodActionStarted, on the actions stream like its outcome)."""
        payload = PodActionStarted(action_id=action_id, executor=executor)
        await self._append(CLONESET.actions_stream(self.namespace, self.name), payload, at, self.rollout)

    async def succeed(self, action_id: str, at: float, *, taken: float | None = None) -> None:
        """The outcome; ``taken``: when the executor took the action, as today's outcomes carry it (None:
        as outcomes were recorded before they carried it)."""
        payload = PodActionSucceeded(action_id=action_id, **_taken(taken))
        await self._append(CLONESET.actions_stream(self.namespace, self.name), payload, at, self.rollout)

    async def fail(self, action_id: str, reason: str, at: float, *, taken: float | None = None) -> None:
        payload = PodActionFailed(action_id=action_id, reason=reason, **_taken(taken))
        await self._append(CLONESET.actions_stream(self.namespace, self.name), payload, at, self.rollout)

    async def start_rollout(self, at: float, max_unavailable: int = 1, replicas: int = 3) -> None:
        await self.decide(RevisionCreated(name=NEW, revision=2, hash="222", template=_template("web:2")), at)
        strategy = {"type": "InPlaceIfPossible", "maxUnavailable": max_unavailable}
        await self.decide(
            RolloutStarted(
                rollout_id=self.rollout,
                from_revision=OLD,
                to_revision=NEW,
                strategy=strategy,
                replicas=replicas,
            ),  # fmt: skip
            at,
        )
        await self.decide(
            PartitionStepPlanned(
                rollout_id=self.rollout,
                partition=0,
                replicas=replicas,
                expected_updated=replicas,
                max_unavailable=max_unavailable,
                max_surge=0,
            ),  # fmt: skip
            at,
        )

    async def complete(self, at: float) -> None:
        await self.decide(RolloutCompleted(rollout_id=self.rollout, revision=NEW), at)

    async def update_in_place(self, pod: str, at: float, grace: float = 2.0, restart: float = 1.0) -> None:
        """The planner's in-place flow: markNotReady, the grace period, the image patch, markReady."""
        mark = await self.request("markNotReady", pod, at)
        await self.succeed(mark, at + 0.1)
        await self.observe_pod(pod, at + 0.2, ready=False)
        update = await self.request("updateInPlace", pod, at + grace)
        await self.succeed(update, at + grace + 0.1)
        await self.observe_pod(pod, at + grace + restart, ready=False)
        ready = await self.request("markReady", pod, at + grace + restart + 0.1)
        await self.succeed(ready, at + grace + restart + 0.2)
        await self.observe_pod(pod, at + grace + restart + 0.3, ready=True)

    async def three_ready_pods(self) -> None:
        await self.observe_cloneset(3, 0)
        for index in range(3):
            await self.observe_pod(f"{self.name}-{index}", 0.5 + index / 10)


def inplace_not_ready(at: float) -> dict[str, Any]:
    """The InPlaceUpdateReady=False condition an in-place update writes (planner inplace.condition)."""
    return condition(False, "StartInPlaceUpdate", (T0 + timedelta(seconds=at)).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _template(image: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": image}]}}


SIDECAR_OLD, SIDECAR_NEW = "centos:6.7", "centos:7"


class SidecarSetTrail:
    """One SidecarSet's trail on its own streams (``SidecarSet//<name>/observed|decisions|actions``), the
    way the watcher, the SidecarSet planner and the executor write it; occurred_at = T0 + seconds.

    Pods are ``<namespace>/<name>`` keys: a SidecarSet's pods span namespaces."""

    def __init__(self, store: EventStore, *, native: bool = False) -> None:
        self.store = store
        self.native = native  # the sidecar is a native one: an init container with restartPolicy Always
        self.name = f"ss{uuid.uuid4().hex[:10]}"
        self.old = f"{self.name}-1111111111"
        self.new = f"{self.name}-2222222222"
        self.rollout = sidecarset_streams.rollout_id(self.name, self.new, 1)
        self.restarts: dict[str, int] = {}  # pod key -> how many times its sidecar was restarted
        self.annotations: dict[str, dict[str, str]] = {}  # pod key -> annotations

    async def _append(self, stream: str, payload: Event, at: float, correlation: str | None = None) -> None:
        version = await self.store.stream_version(stream) + 1
        event = new_event(
            payload,
            stream=stream,
            stream_version=version,
            occurred_at=T0 + timedelta(seconds=at),
            correlation_id=correlation,
        )
        await self.store.append([event], expected_version=version - 1)

    async def decide(self, payload: Event, at: float) -> None:
        await self._append(SIDECARSET.decisions_stream("", self.name), payload, at, self.rollout)

    async def observe_sidecarset(self, at: float) -> None:
        payload = ObjectObserved(
            kind=SIDECARSET_KIND, namespace="", name=self.name, uid=f"uid-{self.name}",
            resource_version=str(uuid.uuid4().int % 10**9), change="MODIFIED",
            object={"metadata": {"name": self.name}, "spec": {"containers": [{"name": "tools"}]}},
        )  # fmt: skip
        await self._append(SIDECARSET.observed_stream("", self.name), payload, at)

    async def observe_pod(self, pod: str, at: float, *, ready: bool = True, image: str = SIDECAR_OLD) -> None:
        """The pod as the watcher sees it: Running, Ready or not, its sidecar's image and image id (a new
        id per restart of the sidecar)."""
        namespace, name = pod.split("/")
        image_id = f"{image}@sha256:{pod}-{self.restarts.get(pod, 0)}"
        tools = {"name": "tools", "image": image, "imageID": image_id, "ready": ready}
        app = {"name": "app", "image": "nginx:1.15.1", "imageID": "nginx@sha256:1", "ready": True}
        obj = {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{pod}",
                         "annotations": dict(self.annotations.get(pod, {}))},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                **({"initContainerStatuses": [tools], "containerStatuses": [app]} if self.native
                   else {"containerStatuses": [tools, app]}),
            },
        }  # fmt: skip
        payload = ObjectObserved(
            kind="Pod", namespace=namespace, name=name, uid=f"uid-{pod}",
            resource_version=str(uuid.uuid4().int % 10**9), change="MODIFIED", object=obj,
        )  # fmt: skip
        await self._append(SIDECARSET.observed_stream("", self.name), payload, at)

    async def start_rollout(self, at: float, pods: int, max_unavailable: int = 1, partition: int = 0) -> None:
        template = {"containers": [{"name": "tools", "image": SIDECAR_NEW}]}
        await self.decide(RevisionCreated(name=self.new, revision=2, hash="2" * 64, template=template), at)
        strategy = {"type": "RollingUpdate", "maxUnavailable": max_unavailable, "partition": partition}
        await self.decide(
            RolloutStarted(
                rollout_id=self.rollout, from_revision=self.old, to_revision=self.new, strategy=strategy,
                replicas=pods,
            ),
            at,
        )  # fmt: skip
        await self.decide(
            PartitionStepPlanned(
                rollout_id=self.rollout, partition=partition, replicas=pods,
                expected_updated=pods - partition, max_unavailable=max_unavailable, max_surge=0,
            ),
            at,
        )  # fmt: skip

    async def request_upgrade(self, pod: str, at: float) -> str:
        """The planner's ``updateSidecarInPlace``, its patch recording the sidecar's image id before it."""
        namespace, name = pod.split("/")
        action_id = str(uuid.uuid4())
        before = {"tools": {"imageID": f"{SIDECAR_OLD}@sha256:{pod}-{self.restarts.get(pod, 0)}"}}
        state = {self.name: {"revision": "2" * 64, "lastContainerStatuses": before}}
        patch = {
            "metadata": {
                "annotations": {SIDECARSET_INPLACE_STATE_ANNOTATION: json.dumps(state, sort_keys=True)}
            },
            "spec": {
                "initContainers" if self.native else "containers": [{"name": "tools", "image": SIDECAR_NEW}]
            },
        }
        await self.decide(
            PodActionRequested(
                action_id=action_id, action=UPDATE_SIDECAR_ACTION, namespace=namespace, pod=name,
                rollout_id=self.rollout, revision=self.new,
                details={"uid": f"uid-{pod}", "sidecarSet": self.name, "fromRevision": self.old,
                         "images": {"tools": SIDECAR_NEW}, "patch": patch},
            ),
            at,
        )  # fmt: skip
        return action_id

    async def patched(self, pod: str, action_id: str, at: float) -> None:
        """The executor's patch succeeded: the pod carries the action id and the new image in its spec,
        still running (and Ready with) the old sidecar until the kubelet restarts it."""
        await self._append(
            SIDECARSET.actions_stream("", self.name), PodActionSucceeded(action_id=action_id), at,
            self.rollout,
        )  # fmt: skip
        self.annotations.setdefault(pod, {})[SIDECARSET_ACTION_ANNOTATION] = action_id
        await self.observe_pod(pod, at + 0.05)

    async def fail(self, action_id: str, reason: str, at: float) -> None:
        payload = PodActionFailed(action_id=action_id, reason=reason)
        await self._append(SIDECARSET.actions_stream("", self.name), payload, at, self.rollout)

    async def restart_sidecar(self, pod: str, at: float, *, comes_back: bool = True) -> None:
        """The kubelet restarts the sidecar on the new image: not ready, then (unless it crash-loops) ready
        again ``1`` s later."""
        self.restarts[pod] = self.restarts.get(pod, 0) + 1
        await self.observe_pod(pod, at, ready=False, image=SIDECAR_NEW)
        if comes_back:
            await self.observe_pod(pod, at + 1, image=SIDECAR_NEW)

    async def upgrade(self, pod: str, at: float) -> str:
        """One whole upgrade: requested at ``at``, patched at +0.1, restarted at +0.5, ready at +1.5."""
        action_id = await self.request_upgrade(pod, at)
        await self.patched(pod, action_id, at + 0.1)
        await self.restart_sidecar(pod, at + 0.5)
        return action_id

    async def complete(self, at: float) -> None:
        await self.decide(RolloutCompleted(rollout_id=self.rollout, revision=self.new), at)
