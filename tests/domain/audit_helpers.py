"""Builders of one workload's audit trail written through the real event store (the way the services write
it), shared by the view tests and the CLI tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from services.domain.events import (
    Event,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionFailed,
    PodActionRequested,
    PodActionSucceeded,
    RevisionCreated,
    RolloutCompleted,
    RolloutStarted,
    new_event,
)
from services.domain.store import EventStore
from services.domain.streams import actions_stream, decisions_stream, observed_stream

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
OLD, NEW = "web-111", "web-222"


class Trail:
    """Appends one workload's events in the order given, with occurred_at = T0 + seconds."""

    def __init__(self, store: EventStore, name: str = "web") -> None:
        self.store = store
        self.namespace = f"ns{uuid.uuid4().hex[:10]}"
        self.name = name
        self.rollout = f"{self.namespace}/{name}@{NEW}"

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
        await self._append(decisions_stream(self.namespace, self.name), payload, at, self.rollout)

    async def observe_cloneset(self, replicas: int, at: float) -> None:
        obj = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": {"replicas": replicas}}
        await self._observe("CloneSet", self.name, obj, "MODIFIED", at)

    async def observe_pod(
        self, pod: str, at: float, *, ready: bool = True, deleted: bool = False, terminating: bool = False
    ) -> None:
        metadata: dict[str, Any] = {"name": pod, "namespace": self.namespace}
        if terminating:
            metadata["deletionTimestamp"] = "2026-11-30T12:00:00Z"
        status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        await self._observe(
            "Pod", pod, {"metadata": metadata, "status": status}, "DELETED" if deleted else "MODIFIED", at
        )

    async def _observe(self, kind: str, name: str, obj: dict[str, Any], change: str, at: float) -> None:
        payload = ObjectObserved(
            kind=kind, namespace=self.namespace, name=name, uid=f"uid-{name}",
            resource_version=str(uuid.uuid4().int % 10**9), change=change,  # type: ignore[arg-type]
            object=obj,
        )  # fmt: skip
        await self._append(observed_stream(self.namespace, self.name), payload, at)

    async def request(self, action: str, pod: str, at: float) -> str:
        action_id = str(uuid.uuid4())
        await self.decide(
            PodActionRequested(
                action_id=action_id,
                action=action,
                namespace=self.namespace,
                pod=pod,
                rollout_id=self.rollout,
                revision=NEW,
            ),  # fmt: skip
            at,
        )
        return action_id

    async def succeed(self, action_id: str, at: float) -> None:
        await self._append(
            actions_stream(self.namespace, self.name),
            PodActionSucceeded(action_id=action_id),
            at,
            self.rollout,
        )

    async def fail(self, action_id: str, reason: str, at: float) -> None:
        payload = PodActionFailed(action_id=action_id, reason=reason)
        await self._append(actions_stream(self.namespace, self.name), payload, at, self.rollout)

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


def _template(image: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": image}]}}
