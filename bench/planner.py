"""Time to plan one round for CloneSets of 1,000 / 10,000 / 50,000 pods, mid-rollout; then the planner
service's whole round (fold, expectations, decision input and its hash, decide, decision events) at 500
to 5,000 pods.

    .venv/bin/python bench/planner.py [--sizes 1000,10000,50000] [--round-sizes 500,1000,2000,5000]
                                      [--repeat 5]

First table: per size and update type, the best wall and CPU time of ``plan()`` on a decoded input (CPU
time is the fairer figure on a shared machine), the per-pod cost (so the growth is visible: flat per-pod
cost = linear) and the time of ``plan_json`` (decode + plan + encode) for reference. Goal: 10,000 pods in
at most 50 ms, growth no faster than n log n.

Second table: a CloneSet's state folded from the events the services record (half of an in-place
rollout done, maxUnavailable 10%), and the CPU time of each part of one planner round on it, as
``services/planner/service.py`` runs it after its catch-up read: folding a burst of events, the
expectations check (``blocked_until``), ``next_step`` (the whole round) and its parts (``encode_input``: the
whole input encoded; ``input_sha256``: the hash as a round computes it, 10 pods changed since the last);
then the expectations check a wake-up runs while the round's actions are not in effect yet. Per-pod cost
flat across sizes = linear; the last line is the growth of ``next_step`` from the smallest to the largest
size as an exponent (1.0 = linear, 2.0 = quadratic).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from services.kinds.cloneset.rules.decisions import decisions_for  # noqa: E402
from services.kinds.cloneset.rules.plan import plan, plan_json  # noqa: E402
from services.kinds.cloneset.rules.workload_state import WorkloadState  # noqa: E402
from services.model.events import (  # noqa: E402
    Envelope,
    ObjectObserved,
    PodActionRequested,
    PodActionSucceeded,
    RevisionCreated,
    RoundPlanned,
    new_event,
)
from services.model.rounds import encode_input  # noqa: E402
from services.model.streams import ACTION_ID_ANNOTATION  # noqa: E402
from services.planner.kinds import CLONESET, Round, next_step  # noqa: E402
from tests.planner.builders import cloneset, plan_input, revision_record, running_pod, with_image  # noqa: E402

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def instance_id(n: int) -> str:
    chars = []
    for _ in range(5):
        n, r = divmod(n, len(ALPHABET))
        chars.append(ALPHABET[r])
    return "".join(chars)


def state(size: int, update_type: str) -> tuple[object, bytes]:
    v1 = cloneset(replicas=size, strategy={"type": update_type, "maxUnavailable": "20%", "partition": "10%"})
    v2 = with_image(v1, "nginx:mainline")
    v2["status"] = {"currentRevision": revision_record(v1, 1)["metadata"]["name"]}
    template_v1, template_v2 = running_pod(v1, "bbbbb"), running_pod(v2, "bbbbb")
    pods = []
    for i in range(size):
        ident = instance_id(i)
        base = template_v2 if i % 2 else template_v1  # half updated: mid-rollout
        pod = msgspec.json.decode(msgspec.json.encode(base).replace(b"bbbbb", ident.encode()))
        pod["spec"]["nodeName"] = f"node-{i % 97}"
        if i % 50 == 0:
            pod["status"]["conditions"][0]["status"] = "False"  # a few not ready
        pods.append(pod)
    revs = [revision_record(v1, 1), revision_record(v2, 2)]
    request = plan_input(v2, pods, revs)
    raw = msgspec.json.encode(
        {"cloneSet": v2, "pods": pods, "pvcs": [], "revisions": revs, "now": "2026-11-30T12:00:00Z"}
    )
    return request, raw


def best(fn: object, repeat: int, clock: object = time.perf_counter) -> float:
    """Best of ``repeat`` runs; the machine is shared, so the minimum is the least disturbed figure."""
    times = []
    for _ in range(repeat):
        start = clock()  # type: ignore[operator]
        fn()  # type: ignore[operator]
        times.append(clock() - start)  # type: ignore[operator]
    return min(times)


# --- one planning round of the planner service, on a folded state --------------------------------------

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NAMESPACE, NAME = "default", "sample"


class Recorder:
    """Folds events into a CloneSet's state as the planner service does (stream versions in order)."""

    def __init__(self) -> None:
        self.state = WorkloadState(NAMESPACE, NAME)
        self.observed, self.actions, self.decisions = self.state.streams
        self.clock = T0

    def tick(self) -> datetime:
        self.clock += timedelta(milliseconds=10)
        return self.clock

    def emit(self, payload: Any, stream: str, causation_id: Any = None) -> None:
        version = self.state.versions.get(stream, 0) + 1
        envelope = new_event(
            payload, stream=stream, stream_version=version, occurred_at=self.tick(), causation_id=causation_id
        )
        self.state.fold(envelope)

    def observe(self, kind: str, obj: dict[str, Any], change: str = "MODIFIED") -> None:
        metadata = obj["metadata"]
        self.emit(
            ObjectObserved(
                kind=kind,
                namespace=NAMESPACE,
                name=metadata["name"],
                uid=metadata.get("uid", ""),
                resource_version=str(self.state.versions.get(self.observed, 0) + 1),
                change=change,  # type: ignore[arg-type]
                object=obj,
            ),
            self.observed,
        )

    def record(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            self.state.fold(envelope)


def rollout_state(size: int, updated_every: int = 2) -> tuple[Recorder, list[dict[str, Any]]]:
    """A CloneSet of ``size`` pods halfway through an in-place rollout (maxUnavailable 10%), folded from the
    events the services record: the revisions, the CloneSet, each pod's createPod request, outcome and
    observation (its annotation naming the action), then a round recorded, as after a wave of the rollout
    had settled (every ``updated_every``-th pod updated: 2 = halfway, 1 = done). Returns the recorder and
    the pods."""
    strategy = {
        "type": "InPlaceIfPossible",
        "maxUnavailable": "10%",
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0},
    }
    v1 = cloneset(replicas=size, strategy=strategy)
    v2 = with_image(v1, "nginx:mainline")
    old, new = revision_record(v1, 1), revision_record(v2, 2)
    recorder = Recorder()
    for revision in (old, new):
        recorder.emit(
            RevisionCreated(
                name=revision["metadata"]["name"],
                revision=revision["revision"],
                hash="",
                template={},
                object=revision,
            ),
            recorder.decisions,
        )
    v2["status"] = {
        "currentRevision": old["metadata"]["name"],
        "updateRevision": new["metadata"]["name"],
        "observedGeneration": 2,
    }
    recorder.observe("CloneSet", v2)
    template_old, template_new = running_pod(v1, "bbbbb"), running_pod(v2, "bbbbb")
    pods = []
    for i in range(size):
        base = template_new if i % updated_every == updated_every - 1 else template_old
        pod = msgspec.json.decode(msgspec.json.encode(base).replace(b"bbbbb", instance_id(i).encode()))
        pod["spec"]["nodeName"] = f"node-{i % 97}"
        action_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"create-{i}"))
        pod["metadata"].setdefault("annotations", {})[ACTION_ID_ANNOTATION] = action_id
        recorder.emit(
            PodActionRequested(
                action_id=action_id, action="createPod", namespace=NAMESPACE, pod=pod["metadata"]["name"]
            ),
            recorder.decisions,
            causation_id=uuid.uuid5(uuid.NAMESPACE_URL, f"round-{i // 100}"),
        )
        recorder.emit(PodActionSucceeded(action_id=action_id), recorder.actions)
        recorder.observe("Pod", pod, "ADDED")
        pods.append(pod)
    recorder.state.pending()  # every request is in effect: settled once, as the planner's rounds did
    recorder.emit(
        RoundPlanned(through=recorder.state.through(), now=recorder.clock, input_sha256=""),
        recorder.decisions,
    )
    return recorder, pods


def round_figures(size: int, repeat: int) -> dict[str, float]:
    """CPU ms of the parts of one round at ``size`` pods, best of ``repeat``: the fold of a burst of new
    events, the expectations check (``blocked_until``) with nothing pending, the round itself (``next_step``:
    decision input, its hash, decide, decisions, envelopes) and each of its parts; then, with the round's
    actions requested and not yet in effect, the expectations check a wake-up runs while it waits; and a
    round that decides nothing (the rollout done); and the expectations check of a wake-up during a scale-out
    from 0, every pod's create requested and not seen yet."""
    recorder, pods = rollout_state(size)
    state = recorder.state
    bursts = []
    for r in range(repeat):  # a burst as one round folds it: pods seen changing, outcomes
        events = []
        for pod in pods[r * 10 : r * 10 + 10]:
            changed = dict(pod, metadata=dict(pod["metadata"], resourceVersion=f"r{r}"))
            events.append(changed)
        bursts.append(events)
    figures: dict[str, float] = {}

    def fold() -> None:
        for pod in bursts.pop():
            recorder.observe("Pod", pod)

    figures["fold 10 events"] = best(fold, repeat, time.process_time)
    figures["blocked_until"] = best(lambda: CLONESET.blocked_until(state), repeat, time.process_time)
    plan_input = state.plan_input()
    figures["plan_input"] = best(state.plan_input, repeat, time.process_time)
    figures["encode_input"] = best(lambda: encode_input(plan_input), repeat, time.process_time)
    # The hash a recorded round computes (``input_sha256``): only the pods observed changing since the last
    # round are encoded again; here 10 pods of a new observation each time, as after a burst.
    CLONESET.input_sha256(state, plan_input)
    changed_inputs = []
    for r in range(repeat):
        pods_now = list(plan_input.pods)
        for i in range(r * 10, r * 10 + 10):
            pods_now[i] = dict(pods_now[i], metadata=dict(pods_now[i]["metadata"], resourceVersion=f"h{r}"))
        changed_inputs.append(msgspec.structs.replace(plan_input, pods=pods_now))
    figures["input_sha256"] = best(
        lambda: CLONESET.input_sha256(state, changed_inputs.pop()), repeat, time.process_time
    )
    figures["plan"] = best(lambda: plan(plan_input), repeat, time.process_time)
    result = plan(plan_input)
    figures["decisions_for"] = best(lambda: decisions_for(state, result), repeat, time.process_time)
    figures["next_step"] = best(lambda: next_step(CLONESET, state), repeat, time.process_time)
    step = next_step(CLONESET, state)
    assert isinstance(step, Round), step
    figures["actions"] = sum(isinstance(d, PodActionRequested) for d in step.decisions)
    recorder.record(step.envelopes)
    pending = state.pending()
    figures["pending"] = len(pending)
    figures["blocked_until, waiting"] = best(lambda: CLONESET.blocked_until(state), repeat, time.process_time)
    # A round that decides nothing (every pod updated, the status already recorded): what a wake-up costs
    # once the rollout is over, or between its steps.
    recorder, _ = rollout_state(size, updated_every=1)
    state = recorder.state
    step = next_step(CLONESET, state)
    assert isinstance(step, Round), step
    recorder.record(step.envelopes)
    assert not isinstance(next_step(CLONESET, state), Round)
    figures["next_step, idle"] = best(lambda: next_step(CLONESET, state), repeat, time.process_time)
    # A scale-out from 0: one round requests every pod, and each wake-up until they are all seen walks the
    # creates not seen yet.
    recorder = Recorder()
    recorder.observe("CloneSet", cloneset(replicas=size))
    for i in range(size):
        action_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"create-{i}"))
        request = PodActionRequested(
            action_id=action_id, action="createPod", namespace=NAMESPACE, pod=f"p{i}"
        )
        recorder.emit(request, recorder.decisions, causation_id=uuid.uuid5(uuid.NAMESPACE_URL, "round"))
    state = recorder.state
    assert len(state.pending()) == size
    figures["blocked_until, scale-out"] = best(
        lambda: CLONESET.blocked_until(state), repeat, time.process_time
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--round-sizes", default="500,1000,2000,5000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'pods':>7} {'type':<18} {'plan ms':>9} {'cpu ms':>8} {'us/pod':>8} {'cpu us/pod':>10} "
        f"{'plan_json ms':>13} {'actions':>8}"
    )
    for size in (int(s) for s in args.sizes.split(",") if s):
        for update_type in ("ReCreate", "InPlaceIfPossible"):
            request, raw = state(size, update_type)
            result = plan(request)  # type: ignore[arg-type]
            seconds = best(lambda r=request: plan(r), args.repeat)  # type: ignore[misc]
            cpu = best(lambda r=request: plan(r), args.repeat, time.process_time)  # type: ignore[misc]
            json_seconds = best(lambda d=raw: plan_json(d), max(1, args.repeat // 2))  # type: ignore[misc]
            print(
                f"{size:>7} {update_type:<18} {seconds * 1000:>9.1f} {cpu * 1000:>8.1f} "
                f"{seconds / size * 1e6:>8.2f} {cpu / size * 1e6:>10.2f} "
                f"{json_seconds * 1000:>13.1f} {len(result.actions):>8}"
            )
    round_sizes = [int(s) for s in args.round_sizes.split(",") if s]
    if round_sizes:
        print_rounds(round_sizes, args.repeat)


ROUND_PARTS = (
    "fold 10 events",
    "blocked_until",
    "next_step",
    "plan_input",
    "encode_input",
    "input_sha256",
    "plan",
    "decisions_for",
    "blocked_until, waiting",
    "next_step, idle",
    "blocked_until, scale-out",
)


def print_rounds(sizes: list[int], repeat: int) -> None:
    print(f"\none planner round, CPU ms (best of {repeat}); load average {os.getloadavg()[0]:.1f}")
    print(f"{'pods':>6} " + " ".join(f"{p:>14}" for p in ROUND_PARTS) + f" {'actions':>8} {'pending':>8}")
    rows = {}
    for size in sizes:
        figures = round_figures(size, repeat)
        rows[size] = figures
        cells = " ".join(f"{1000 * figures[p]:>14.2f}" for p in ROUND_PARTS)
        print(f"{size:>6} {cells} {int(figures['actions']):>8} {int(figures['pending']):>8}", flush=True)
    for size in sizes:
        per_pod = 1e6 * rows[size]["next_step"] / size
        print(f"{size:>6} pods: next_step {per_pod:.1f} us of CPU per pod")
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        exponent = math.log(rows[large]["next_step"] / rows[small]["next_step"]) / math.log(large / small)
        print(
            f"next_step grows as pods^{exponent:.2f} from {small} to {large} pods (1 = linear, 2 = quadratic)"
        )


if __name__ == "__main__":
    main()
