"""The Job controller (kube-controller-manager's job controller, NonIndexed completion mode): runs up to
``parallelism`` pods until ``completions`` have succeeded; counts failed pods (and, for
``restartPolicy: OnFailure``, container restarts) against ``backoffLimit``; ``activeDeadlineSeconds``;
``suspend``; ``ttlSecondsAfterFinished``. Status: ``active``, ``ready``, ``succeeded``, ``failed``,
``startTime``, ``completionTime`` and the ``Complete`` / ``Failed`` / ``Suspended`` conditions
(``kubectl wait --for=condition=complete``).

Finished pods are counted once, as upstream's job-tracking finalizer (``batch.kubernetes.io/job-tracking``)
does: a pod's count is added to the status and its finalizer removed in the same step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..errors import ApiError
from ..resources import JOBS, PODS
from ..store import Key, Obj, WatchEvent, key_of
from .base import (
    Controller,
    controlled,
    event_owner_keys,
    find_condition,
    iso,
    owner_key,
    parse_time,
    pod_active,
    pod_from_template,
    pod_ready,
    put_condition,
)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


@dataclass(frozen=True)
class JobDecision:
    create: int  # pods to start
    delete: int  # active pods to remove (parallelism lowered, or the job finished)
    finished: str | None  # "Complete" or "Failed"
    reason: str = ""
    message: str = ""


def decide(
    spec: dict[str, Any], active: int, succeeded: int, failed: int, started: datetime | None, now: datetime
) -> JobDecision:
    """What a sync of a NonIndexed Job does, from the counts (syncJob's manageJob and its failure checks)."""
    parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
    completions = spec.get("completions")
    backoff_limit = int(spec.get("backoffLimit", 6) if spec.get("backoffLimit") is not None else 6)
    deadline = spec.get("activeDeadlineSeconds")
    if failed > backoff_limit:
        return JobDecision(
            0, active, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        )
    if deadline is not None and started is not None and now >= started + timedelta(seconds=int(deadline)):
        return JobDecision(
            0, active, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
        )
    if completions is not None and succeeded >= int(completions):
        return JobDecision(0, active, "Complete")
    if completions is None and succeeded > 0 and active == 0:
        return JobDecision(0, 0, "Complete")  # a work queue: done when one succeeded and none run
    if spec.get("suspend"):
        return JobDecision(0, active, None)
    if completions is None:
        wanted = parallelism if succeeded == 0 else 0
    else:
        wanted = min(parallelism, int(completions) - succeeded)
    wanted = max(wanted, 0)
    if active < wanted:
        return JobDecision(wanted - active, 0, None)
    if active > wanted:
        return JobDecision(0, active - wanted, None)
    return JobDecision(0, 0, None)


def restarts_on_failure(pod: Obj) -> int:
    if (pod.get("spec") or {}).get("restartPolicy") != "OnFailure":
        return 0
    return sum(
        int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


class JobController(Controller):
    name = "job-controller"
    watches = (JOBS, PODS)

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        if event.resource is JOBS:
            return [key_of(event.obj)]
        return event_owner_keys(event, "Job")

    async def sync(self, key: Key) -> float | None:
        job = self.store.find(JOBS, *key)
        if job is None:
            self._release_orphans(key)
            return None
        if job["metadata"].get("deletionTimestamp"):
            return None
        now = self.now()
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        conditions = status.get("conditions") or []
        done = next(
            (
                c["type"]
                for c in conditions
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        pods = controlled(self.store, job, PODS)
        # Count finished pods once: add them to the status and release them in the same step.
        succeeded, failed = int(status.get("succeeded") or 0), int(status.get("failed") or 0)
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            finalizers = pod["metadata"].get("finalizers") or []
            finished = phase in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp")
            if not finished or TRACKING_FINALIZER not in finalizers:
                continue
            if phase == "Succeeded":
                succeeded += 1
            elif phase == "Failed" or done is None:  # deleted while running: failed, unless the job is over
                failed += 1
            released = dict(pod["metadata"], finalizers=[f for f in finalizers if f != TRACKING_FINALIZER])
            with contextlib.suppress(ApiError):
                self.store.update(PODS, key[0], pod["metadata"]["name"], dict(pod, metadata=released))
        status["succeeded"], status["failed"] = succeeded, failed
        if done is not None:
            self._write(job, status, [p for p in controlled(self.store, job, PODS) if pod_active(p)])
            return self._ttl(job, now)
        pods = controlled(self.store, job, PODS)
        active = [p for p in pods if pod_active(p)]
        started = parse_time(status.get("startTime"))
        if started is None and not spec.get("suspend"):
            started = now
            status["startTime"] = iso(now)
        restarts = sum(restarts_on_failure(p) for p in active)
        decision = decide(spec, len(active), succeeded, failed + restarts, started, now)
        if decision.delete:
            for pod in sorted(
                active, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True
            )[: decision.delete]:
                self.delete_pod(pod)
        created_error: ApiError | None = None
        template = spec.get("template") or {}
        for _ in range(decision.create):
            body = pod_from_template(template, job)
            body["metadata"]["finalizers"] = [*body["metadata"].get("finalizers", []), TRACKING_FINALIZER]
            try:
                await self.create(PODS, key[0], body)
            except ApiError as exc:
                created_error = exc
                break
        if decision.finished is not None:
            conditions = put_condition(
                conditions,
                {
                    "type": decision.finished,
                    "status": "True",
                    "reason": decision.reason or None,
                    "message": decision.message or None,
                    "lastProbeTime": iso(now),
                    "lastTransitionTime": iso(now),
                },
            )
            conditions = [{k: v for k, v in c.items() if v is not None} for c in conditions]
            if decision.finished == "Complete":
                status["completionTime"] = iso(now)
        suspended = bool(spec.get("suspend")) and decision.finished is None
        current = find_condition(conditions, "Suspended")
        if suspended or current is not None:
            conditions = put_condition(
                conditions,
                {
                    "type": "Suspended",
                    "status": "True" if suspended else "False",
                    "reason": "JobSuspended" if suspended else "JobResumed",
                    "message": "Job suspended" if suspended else "Job resumed",
                    "lastProbeTime": iso(now),
                    "lastTransitionTime": iso(now),
                },
            )
        if conditions:
            status["conditions"] = conditions
        job = self.store.find(JOBS, *key) or job
        self._write(job, status, [p for p in controlled(self.store, job, PODS) if pod_active(p)])
        if decision.finished is not None:
            return self._ttl(job, now)
        if created_error is not None:
            return 1.0
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and started is not None:
            return max((started + timedelta(seconds=int(deadline)) - now).total_seconds(), 0.0) + 0.01
        return None

    def _release_orphans(self, key: Key) -> None:
        """The pods of a Job that is gone keep no tracking finalizer (the garbage collector removes them)."""
        pods, _, _, _ = self.store.list(PODS, key[0])
        for pod in pods:
            finalizers = pod["metadata"].get("finalizers") or []
            if TRACKING_FINALIZER in finalizers and owner_key(pod, "Job") == key:
                released = dict(
                    pod["metadata"], finalizers=[f for f in finalizers if f != TRACKING_FINALIZER]
                )
                with contextlib.suppress(ApiError):
                    self.store.update(PODS, key[0], pod["metadata"]["name"], dict(pod, metadata=released))

    def _write(self, job: Obj, status: dict[str, Any], active: list[Obj]) -> None:
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if pod_ready(p))
        status["terminating"] = sum(
            1 for p in controlled(self.store, job, PODS) if p["metadata"].get("deletionTimestamp")
        )
        for zero in ("active", "succeeded", "failed", "terminating"):
            if not status.get(zero):
                status.pop(zero, None)  # omitempty
        self.write_status(JOBS, job, status)

    def _ttl(self, job: Obj, now: datetime) -> float | None:
        """The TTL-after-finished controller: delete a finished Job (and, in the background, its pods)."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        conditions = (job.get("status") or {}).get("conditions") or []
        finished = max(
            (
                parse_time(c.get("lastTransitionTime")) or now
                for c in conditions
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            default=None,
        )
        if finished is None:
            return None
        left = (finished + timedelta(seconds=int(ttl)) - now).total_seconds()
        if left > 0:
            return left
        meta = job["metadata"]
        with contextlib.suppress(ApiError):
            self.store.delete(JOBS, meta["namespace"], meta["name"], propagation="Background")
        return None
