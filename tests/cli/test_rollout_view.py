"""Why a rollout waits and how it ended (services/cli/rollout_view.py): table tests over CloneSets and pods
shaped as the API server returns them."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.cli.rollout_view import Outcome, PodAction, RolloutView, outcome, waiting_reasons

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OLD, NEW = "sample-1111111111", "sample-2222222222"


def cloneset(
    replicas: int = 4,
    strategy: dict[str, Any] | None = None,
    generation: int = 2,
    observed: int = 2,
    rejected: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": observed, "updateRevision": NEW, "currentRevision": OLD}
    if rejected:
        status["conditions"] = [
            {"type": "Rejected", "status": "True", "reason": "InvalidSpec", "message": rejected}
        ]
    return {
        "metadata": {"namespace": "default", "name": "sample", "generation": generation},
        "spec": {"replicas": replicas, "updateStrategy": strategy or {"maxUnavailable": 1}},
        "status": status,
    }


def pod(
    name: str,
    revision: str = NEW,
    ready: bool = True,
    in_place_ready: bool | None = None,
    terminating: bool = False,
    lifecycle: str | None = None,
    grace_marked: datetime | None = None,
    restarts: int = 0,
) -> dict[str, Any]:
    labels = {"controller-revision-hash": revision}
    if lifecycle:
        labels["lifecycle.apps.kruise.io/state"] = lifecycle
    annotations = {}
    if grace_marked:
        grace = {"revision": NEW, "graceSeconds": 10, "markedAt": grace_marked.isoformat()}
        annotations["apps.kruise.io/inplace-update-grace"] = json.dumps(grace)
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if in_place_ready is not None:
        conditions.append({"type": "InPlaceUpdateReady", "status": str(in_place_ready)})
    metadata: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if terminating:
        metadata["deletionTimestamp"] = NOW.isoformat()
    return {
        "metadata": metadata,
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def view(
    cs: dict[str, Any],
    pods: list[dict[str, Any]],
    actions: tuple[PodAction, ...] = (),
    outcome_: str = "in progress",
) -> RolloutView:
    return RolloutView.read(cs, pods, list(actions), None, f"default/sample@{NEW}", outcome_, NOW)


ALL_NEW = [pod(f"p{i}") for i in range(4)]
HALF = [pod("p0"), pod("p1"), pod("p2", OLD), pod("p3", OLD)]

CASES = [
    # (id, cloneset, pods, reasons (each a prefix), outcome)
    ("finished", cloneset(), ALL_NEW, [], Outcome.FINISHED),
    (
        "rejected",
        cloneset(
            strategy={"partition": "abc%"}, rejected="spec.updateStrategy.partition: invalid value 'abc%'"
        ),
        HALF,
        ["spec rejected: spec.updateStrategy.partition: invalid value 'abc%'"],
        Outcome.REJECTED,
    ),
    (
        "partition reached",
        cloneset(strategy={"partition": 2, "maxUnavailable": 1}),
        HALF,
        ["partition reached: 2 pods kept at the old revision"],
        Outcome.FINISHED,
    ),
    (
        "paused",
        cloneset(strategy={"paused": True, "maxUnavailable": 1}),
        HALF,
        ["paused"],
        None,
    ),
    (
        "pods not ready, budget used",
        cloneset(),
        [pod("p0"), pod("p1", ready=False), pod("p2", OLD), pod("p3", OLD)],
        ["pods not ready: p1", "maxUnavailable in use: 1 of 1 allowed"],
        None,
    ),
    (
        "in-place grace period",
        cloneset(),
        [
            pod("p0"),
            pod("p1"),
            pod("p2", OLD, in_place_ready=False, grace_marked=NOW - timedelta(seconds=4)),
            pod("p3", OLD),
        ],
        ["grace period: p2 marked not ready, updated in 6s", "maxUnavailable in use: 1 of 1 allowed"],
        None,
    ),  # fmt: skip
    (
        "lifecycle hook",
        cloneset(),
        [pod("p0"), pod("p1"), pod("p2", OLD, lifecycle="PreparingUpdate"), pod("p3", OLD)],
        # Held Ready by its hook, and unavailable meanwhile as OpenKruise counts it: the budget is used.
        ["lifecycle hook: p2 is PreparingUpdate", "maxUnavailable in use: 1 of 1 allowed"],
        None,
    ),
    (
        "new spec not planned yet",
        cloneset(generation=3, observed=2),
        ALL_NEW,
        ["spec generation 3 not planned yet"],
        None,
    ),
    (
        "a pod missing (recreate)",
        cloneset(strategy={"type": "ReCreate", "maxUnavailable": 1}),
        [pod("p0"), pod("p1"), pod("p2", OLD, terminating=True), pod("p3", OLD)],
        ["maxUnavailable in use: 1 of 1 allowed"],
        None,
    ),
]


@pytest.mark.parametrize(
    ("cs", "pods", "reasons", "ended"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_why_it_waits_and_how_it_ended(
    cs: dict[str, Any], pods: list[dict[str, Any]], reasons: list[str], ended: Outcome | None
) -> None:
    shown = view(cs, pods)
    said = waiting_reasons(shown)
    assert len(said) == len(reasons), said
    for line, prefix in zip(said, reasons, strict=True):
        assert line.startswith(prefix), (line, prefix)
    assert outcome(shown) == ended


def test_a_failed_or_superseded_rollout_ends_the_watch() -> None:
    assert outcome(view(cloneset(), HALF, outcome_="superseded")) == Outcome.FAILED
    assert outcome(view(cloneset(), HALF, outcome_="failed")) == Outcome.FAILED


def test_a_status_of_an_earlier_spec_is_not_judged() -> None:
    """`apply` of a fixed spec then `get -w` at once: the status still says the rejected generation's
    Rejected condition (or its rollout superseded) until the planner catches up; the watch waits for it."""
    stale = cloneset(generation=5, observed=4, rejected="spec.updateStrategy.partition: invalid")
    assert outcome(view(stale, ALL_NEW)) is None
    said = waiting_reasons(view(stale, ALL_NEW))
    assert said[0] == "spec generation 5 not planned yet (status at 4)", said
    assert outcome(view(cloneset(generation=5, observed=4), HALF, outcome_="superseded")) is None
    # once the status reflects the spec it is judged: still rejected, or finished
    assert outcome(view(cloneset(generation=5, observed=5, rejected="bad"), ALL_NEW)) == Outcome.REJECTED
    assert outcome(view(cloneset(generation=5, observed=5), ALL_NEW)) == Outcome.FINISHED


def test_pods_show_how_and_in_which_batch_they_were_updated() -> None:
    def action(pod_name: str, kind: str, at: int, finished: int | None) -> PodAction:
        return PodAction(
            pod=pod_name,
            action=kind,
            rollout_id=f"default/sample@{NEW}",
            requested=NOW + timedelta(seconds=at),
            finished=None if finished is None else NOW + timedelta(seconds=finished),
            outcome="succeeded" if finished is not None else "pending",
            in_place=kind == "updateInPlace",
        )

    actions = (
        # A lifecycle-label patch of a pod the partition keeps is not an update batch of this rollout.
        action("p4", "patchPod", -2, -1),
        action("p0", "updateInPlace", 0, 3),
        action("p1", "recreatePod", 5, 6),
        action("p2", "updateInPlace", 5, None),
        PodAction("p3", "updateInPlace", "default/sample@sample-0000000000", NOW, NOW, "succeeded", True),
    )
    pods = [pod("p0", restarts=1), pod("p1"), pod("p2", ready=False), pod("p3", OLD)]
    rows = {row.name: row for row in view(cloneset(), pods, actions).pods}
    assert (rows["p0"].how, rows["p0"].batch, rows["p0"].out_of_service_seconds, rows["p0"].restarts) == (
        "in place", 1, 3.0, 1
    )  # fmt: skip
    assert (rows["p1"].how, rows["p1"].batch) == ("recreated", 2)
    assert (rows["p2"].how, rows["p2"].batch) == ("in place", 2)
    assert rows["p2"].out_of_service_seconds is not None  # still out: counted up to now
    assert (rows["p3"].how, rows["p3"].batch) == ("", None)  # an earlier rollout's action is not this one's
    assert [r.updated for r in rows.values()] == [True, True, True, False]


def test_recreate_batches_count_from_one() -> None:
    """A ReCreate rollout deletes each old pod in one round and creates its successor in the next: the
    deletions (of pods no longer listed) opened batches of their own, numbering the new pods 2, 4, 6."""

    def action(pod_name: str, kind: str, at: int) -> PodAction:
        requested = NOW + timedelta(seconds=at)
        return PodAction(pod_name, kind, f"default/sample@{NEW}", requested, requested, "succeeded", False)

    actions = tuple(
        a
        for batch in range(3)
        for a in (
            action(f"old{batch}", "deletePod", 10 * batch),
            action(f"new{batch}", "createPod", 10 * batch + 5),
        )
    )
    pods = [pod(f"new{batch}") for batch in range(3)]
    rows = view(cloneset(replicas=3), pods, actions).pods
    assert [(row.name, row.how, row.batch) for row in rows] == [
        ("new0", "created", 1), ("new1", "created", 2), ("new2", "created", 3)
    ]  # fmt: skip


def test_a_new_cloneset_is_not_shown_above_max_unavailable() -> None:
    from services.cli.rollout_view import unavailable_text

    starting = [pod(f"p{i}", ready=False) for i in range(5)]
    fresh = view(cloneset(replicas=5, strategy={"maxUnavailable": 1}), starting)
    assert "allowed" not in unavailable_text(fresh) and "5 unavailable" in unavailable_text(fresh)
    assert unavailable_text(view(cloneset(), HALF)) == "0 in use of 1 allowed"  # an update: as before


def test_the_last_frame_never_says_in_progress_under_finished() -> None:
    from services.cli.rollout_view import rollout_state
    from services.cli.watch import render

    done = view(cloneset(), ALL_NEW, outcome_="in progress")  # the trail has not recorded the end yet
    assert outcome(done) == Outcome.FINISHED
    assert rollout_state(done, Outcome.FINISHED).startswith("finished")
    assert rollout_state(done, None) == "in progress"  # while it goes on, the trail's word
    assert rollout_state(view(cloneset(), ALL_NEW, outcome_="succeeded"), Outcome.FINISHED) == "succeeded"
    from rich.console import Console

    out = Console(width=200, record=True, file=io.StringIO())
    out.print(render(done, Outcome.FINISHED))
    text = out.export_text()
    assert "in progress" not in text and "finished (exit 0)" in text, text


# --- a recorded Deployment (docs/kinds.md): read by its kind's rules, followed until `rollout status` ends --


def _rs(hash_: str, number: int, replicas: int) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "metadata": {
            "namespace": "ops",
            "name": f"web-{hash_}",
            "labels": {"pod-template-hash": hash_},
            "annotations": {"deployment.kubernetes.io/revision": str(number)},
        },
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    }


def _deployment(*, updated: int, available: int, total: int = 3, **extra: Any) -> dict[str, Any]:
    conditions = extra.pop("conditions", [])
    return {
        "kind": "Deployment",
        "metadata": {
            "namespace": "ops",
            "name": "web",
            "generation": 2,
            "annotations": {"deployment.kubernetes.io/revision": "2"},
        },
        "spec": {"replicas": 3, "strategy": {"type": "RollingUpdate"}, **extra},
        "status": {
            "observedGeneration": 2,
            "replicas": total,
            "updatedReplicas": updated,
            "availableReplicas": available,
            "conditions": conditions,
        },
    }


def _pod(name: str, hash_: str, *, ready: bool = True) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {
        "metadata": {"namespace": "ops", "name": name, "labels": {"pod-template-hash": hash_}},
        "status": {"phase": "Running", "conditions": [condition]},
    }


def recorded(
    deployment: dict[str, Any], revisions: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> RolloutView:
    from services.kinds.registry import KINDS

    actions = [PodAction("web-b-1", "createPod", "ops/web@web-b#1", NOW, None, "succeeded", False)]
    return RolloutView.read_recorded(
        KINDS["Deployment"], deployment, revisions, pods, actions, "ops/web@web-b#1", "in progress", NOW
    )


def test_a_recorded_deployment_mid_rollout_waits_for_its_new_replicaset() -> None:
    shown = recorded(
        _deployment(updated=1, available=3, total=4),
        [_rs("a", 1, 3), _rs("b", 2, 1)],
        [_pod("web-a-1", "a"), _pod("web-a-2", "a"), _pod("web-a-3", "a"), _pod("web-b-1", "b", ready=False)],
    )
    assert (shown.kind, shown.update_revision, shown.current_revision) == ("Deployment", "b", "a")
    # The step: the new ReplicaSet's 1 of 3; maxUnavailable 25% of 3 rounds down to 0.
    assert (shown.partition, shown.target_updated, shown.max_unavailable) == (2, 1, 0)
    assert [(p.name, p.updated, p.how) for p in shown.pods][-1] == ("web-b-1", True, "created")
    assert waiting_reasons(shown) == ["pods not ready: web-b-1"]
    assert outcome(shown) is None  # four pods live, three wanted: the old ones are still going


def test_a_recorded_deployment_ends_as_rollout_status_says() -> None:
    done = recorded(
        _deployment(updated=3, available=3),
        [_rs("a", 1, 0), _rs("b", 2, 3)],
        [_pod("web-b-1", "b"), _pod("web-b-2", "b"), _pod("web-b-3", "b")],
    )
    assert (done.partition, done.updated, outcome(done)) == (0, 3, Outcome.FINISHED)
    stuck = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    past = recorded(
        _deployment(updated=1, available=3, total=4, conditions=[stuck]),
        [_rs("a", 1, 3), _rs("b", 2, 1)],
        [_pod("web-a-1", "a"), _pod("web-a-2", "a"), _pod("web-a-3", "a"), _pod("web-b-1", "b", ready=False)],
    )
    assert outcome(past) == Outcome.FAILED  # past its progress deadline: exit 4
    paused = recorded(
        _deployment(updated=1, available=3, total=4, paused=True),
        [_rs("a", 1, 3), _rs("b", 2, 1)],
        [_pod("web-a-1", "a"), _pod("web-a-2", "a"), _pod("web-a-3", "a"), _pod("web-b-1", "b")],
    )
    assert waiting_reasons(paused)[0] == "paused (spec.paused: true)" and outcome(paused) is None
