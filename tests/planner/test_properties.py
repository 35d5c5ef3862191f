"""Property tests: for arbitrary valid specs and pods, plans keep the budgets, are deterministic, converge."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.kinds.cloneset import POD_COUNTS
from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import encode_plan, plan
from services.kinds.cloneset.rules.podstate import PodViews
from services.model import intorpercent
from tests.planner.builders import cloneset, revision_record, running_pod, with_image
from tests.planner.simulate import Cluster

int_or_percent = st.one_of(st.integers(0, 6), st.integers(0, 100).map(lambda n: f"{n}%"))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    replicas = draw(st.integers(0, 8))
    strategy: dict[str, Any] = {
        "type": draw(st.sampled_from(["ReCreate", "InPlaceIfPossible", "InPlaceOnly"])),
        "partition": draw(int_or_percent),
        "maxUnavailable": draw(st.one_of(st.integers(1, 4), st.sampled_from(["20%", "50%", "100%"]))),
    }
    if strategy["type"] != "InPlaceOnly":
        strategy["maxSurge"] = draw(st.one_of(st.integers(0, 3), st.sampled_from(["0%", "25%"])))
    if draw(st.booleans()):
        strategy["inPlaceUpdateStrategy"] = {"gracePeriodSeconds": draw(st.sampled_from([0, 5, 20]))}
    v1 = cloneset(replicas=draw(st.integers(0, 8)))
    v2 = with_image(v1, "nginx:2") if draw(st.booleans()) else copy.deepcopy(v1)
    v2["spec"]["replicas"] = replicas
    v2["spec"]["updateStrategy"] = strategy
    ids = draw(
        st.lists(
            st.sampled_from(
                ["b2222", "c3333", "d4444", "f5555", "g6666", "h7777", "j8888", "k9999", "l2b2b", "m3c3c"]
            ),
            max_size=8,
            unique=True,
        )
    )
    pods = []
    for instance in ids:
        at = v1 if draw(st.booleans()) else v2
        pods.append(
            running_pod(
                at,
                instance,
                ready=draw(st.booleans()),
                phase=draw(st.sampled_from(["Running", "Running", "Pending"])),
            )
        )
    same = v1["spec"]["template"] == v2["spec"]["template"]
    return v2, pods, [revision_record(v1, 1)] if same else [revision_record(v1, 1), revision_record(v2, 2)]


def _cluster(scenario: Any) -> Cluster:
    cs, pods, revs = scenario
    cs = copy.deepcopy(cs)
    cs["status"] = {"currentRevision": revs[0]["metadata"]["name"]}
    return Cluster(cs, pods, revs)


FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(scenarios())
def test_plan_is_deterministic(scenario: Any) -> None:
    cluster = _cluster(scenario)
    first = encode_plan(plan(cluster.plan_input()))
    assert first == encode_plan(plan(cluster.plan_input()))


@FAST
@given(scenarios())
def test_converges_within_budgets(scenario: Any) -> None:
    cluster = _cluster(scenario)
    spec = cluster.cloneset["spec"]
    replicas = spec["replicas"]
    strategy = spec["updateStrategy"]
    partition = intorpercent.partition_count(strategy["partition"], replicas)
    max_surge = intorpercent.scaled(strategy.get("maxSurge", 0), replicas, True)
    max_unavailable = intorpercent.scaled(strategy["maxUnavailable"], replicas, max_surge == 0)
    old_start = {
        p
        for p, pod in cluster.pods.items()
        if pod["metadata"]["labels"]["controller-revision-hash"] != scenario[2][-1]["metadata"]["name"][-10:]
    }
    updated_ever: set[str] = set()
    for _ in range(1, 300):
        settled_before = cluster.settled()
        before_available = cluster.kruise_available()
        before_pods = len(cluster.pods)
        result = plan(cluster.plan_input())
        cluster.history.append(result)
        cluster.apply(result)
        after_available = cluster.kruise_available()
        cluster.now += cluster.tick_seconds
        cluster.kubelet()
        if result.rejected is not None:
            assert strategy["type"] == "InPlaceOnly"
            return
        touched = [a for a in result.actions if isinstance(a, model.RecreatePod | model.UpdateInPlace)]
        updated_ever |= {a.pod for a in touched if a.pod in old_start}
        # maxSurge: never more pods than replicas + maxSurge when we create.
        if any(isinstance(a, model.CreatePod) for a in result.actions):
            assert len(cluster.pods) <= max(replicas + max_surge, before_pods)
        # maxUnavailable: availability, as OpenKruise counts it, never drops below replicas - maxUnavailable
        # because of a plan.
        assert after_available >= min(before_available, replicas - max_unavailable)
        if (
            not result.actions
            and result.requeue_after_seconds is None
            and settled_before
            and len(cluster.pods) == replicas
        ):
            break
    else:
        raise AssertionError("did not converge")
    # Never more old pods updated than replicas - partition.
    assert len(updated_ever) <= max(replicas - partition, 0)
    assert len(cluster.pods) == replicas
    target = cluster.cloneset["status"]["updateRevision"].rsplit("-", 1)[1]
    updated = sum(
        1 for p in cluster.pods.values() if p["metadata"]["labels"]["controller-revision-hash"] == target
    )
    assert updated >= replicas - partition, [
        (h.step, [(type(a).__name__, a.pod) for a in h.actions], h.requeue_after_seconds)
        for h in cluster.history
    ]


@FAST
@given(scenarios(), st.fixed_dictionaries({field: st.integers(0, 9) for field in sorted(POD_COUNTS)}))
def test_a_plan_reads_no_pod_count_back_from_the_observed_status(
    scenario: Any, counts: dict[str, int]
) -> None:
    """The watcher does not store a CloneSet observation whose only change is in these counts when
    rollbook's executor wrote them (its own status write after a readiness flap): the plan must be the same
    whatever they say."""
    cluster = _cluster(scenario)
    first = plan(cluster.plan_input())
    if first.rejected is not None:
        return  # reported back as observed; the watcher stores counts while Rejected (kinds/cloneset)
    cluster.cloneset["status"].update(counts)
    assert encode_plan(plan(cluster.plan_input())) == encode_plan(first)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from(["", "abc", "-1", "10%", "120%", "1.5%", "x%"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "name", "key"]), children, max_size=3)
    ),
    max_leaves=6,
)
SPEC_PATHS = [
    ("replicas",),
    ("selector",),
    ("selector", "matchLabels"),
    ("selector", "matchExpressions"),
    ("template",),
    ("template", "metadata"),
    ("template", "metadata", "labels"),
    ("template", "spec"),
    ("template", "spec", "containers"),
    ("updateStrategy",),
    ("updateStrategy", "type"),
    ("updateStrategy", "partition"),
    ("updateStrategy", "maxUnavailable"),
    ("updateStrategy", "maxSurge"),
    ("updateStrategy", "paused"),
    ("updateStrategy", "inPlaceUpdateStrategy"),
    ("updateStrategy", "priorityStrategy"),
    ("scaleStrategy",),
    ("scaleStrategy", "podsToDelete"),
    ("scaleStrategy", "maxUnavailable"),
    ("volumeClaimTemplates",),
    ("minReadySeconds",),
    ("revisionHistoryLimit",),
    ("status", "currentRevision"),
    ("status", "collisionCount"),
    ("status", "conditions"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SPEC_PATHS), json_values), min_size=1, max_size=3))
def test_arbitrary_spec_values_never_raise(mutations: list[tuple[tuple[str, ...], Any]]) -> None:
    import msgspec

    from services.kinds.cloneset.rules.plan import plan_json

    cs = cloneset(strategy={"type": "InPlaceIfPossible"})
    pods = [running_pod(cs, "b2222"), running_pod(cs, "c3333")]
    cs["status"] = {"currentRevision": "sample-x", "collisionCount": 0, "conditions": []}
    for path, value in mutations:
        target: Any = cs["status"] if path[0] == "status" else cs["spec"]
        path = path[1:] if path[0] == "status" else path
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = value
    out = msgspec.json.decode(
        plan_json(
            msgspec.json.encode(
                {
                    "cloneSet": cs,
                    "pods": pods,
                    "revisions": [revision_record(cloneset(), 1)],
                    "now": "2026-11-30T12:00:00Z",
                }
            )
        )
    )
    assert out["rejected"] is None or out["rejected"]["field"]


@FAST
@given(scenarios(), st.randoms(use_true_random=False))
def test_plan_does_not_depend_on_input_order(scenario: Any, random: Any) -> None:
    cluster = _cluster(scenario)
    request = cluster.plan_input()
    shuffled = copy.deepcopy(request)
    random.shuffle(shuffled.pods)
    random.shuffle(shuffled.revisions)
    assert encode_plan(plan(request)) == encode_plan(plan(shuffled))


events = st.lists(
    st.one_of(
        st.tuples(st.just("image"), st.sampled_from(["nginx:1", "nginx:2", "nginx:3"])),
        st.tuples(st.just("replicas"), st.integers(0, 7)),
        st.tuples(st.just("partition"), int_or_percent),
        st.tuples(st.just("paused"), st.booleans()),
        st.tuples(st.just("evict"), st.integers(0, 9)),
        st.tuples(st.just("podsToDelete"), st.integers(0, 9)),
        st.tuples(st.just("wait"), st.integers(1, 3)),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["ReCreate", "InPlaceIfPossible", "InPlaceOnly"]),
    st.sampled_from([0, 0, 15]),
    st.sampled_from([0, 1]),
    events,
)
def test_converges_after_changes_in_flight(
    update_type: str, grace: int, surge: int, changes: list[Any]
) -> None:
    """Spec changes, evictions and podsToDelete arriving mid-rollout still converge; PVCs stay in step."""
    strategy: dict[str, Any] = {
        "type": update_type,
        "maxUnavailable": 1,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": grace},
    }
    if update_type != "InPlaceOnly":
        strategy["maxSurge"] = surge
    claims = [{"metadata": {"name": "data"}, "spec": {}}]
    cluster = Cluster(cloneset(replicas=4, strategy=strategy, claims=claims))
    cluster.run()
    for kind, value in changes:
        spec = cluster.cloneset["spec"]
        if kind == "image":
            cluster.cloneset = with_image(cluster.cloneset, value)
        elif kind == "replicas":
            spec["replicas"] = value
        elif kind == "partition":
            spec["updateStrategy"]["partition"] = value
        elif kind == "paused":
            spec["updateStrategy"]["paused"] = value
        elif kind == "evict" and cluster.pods:
            cluster.pods.pop(sorted(cluster.pods)[value % len(cluster.pods)])
        elif kind == "podsToDelete" and cluster.pods:
            spec.setdefault("scaleStrategy", {})["podsToDelete"] = [
                sorted(cluster.pods)[value % len(cluster.pods)]
            ]
        for _ in range(value if kind == "wait" else 1):
            cluster.step()
    cluster.cloneset["spec"]["updateStrategy"]["paused"] = False
    cluster.run(max_steps=400)
    spec = cluster.cloneset["spec"]
    if cluster.history[-1].rejected is not None:
        return
    replicas = spec["replicas"]
    assert len(cluster.pods) == replicas
    partition = intorpercent.partition_count(spec["updateStrategy"].get("partition"), replicas)
    status = cluster.cloneset["status"]
    assert status["updatedReplicas"] >= replicas - partition
    # Every pod has exactly its own PVC; no PVC of a pod the planner deleted is left behind.
    assert sorted(cluster.pvcs) == sorted(f"data-{name}" for name in cluster.pods) or any(
        k == "evict" for k, _ in changes
    )
    for name in cluster.pods:
        assert f"data-{name}" in cluster.pvcs


@FAST
@given(scenarios())
def test_pod_views_kept_between_rounds_plan_the_same_as_reading_every_pod(scenario: Any) -> None:
    # The planner keeps a workload's pod views from round to round, for the pods that are still the same
    # objects (a pod observed again is a new object). Here each round passes the pods unchanged since the
    # last round as the same objects, the changed ones as new objects: the plans must be the ones made by
    # reading every pod afresh, round after round.
    cluster = _cluster(scenario)
    views = PodViews()
    passed: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # name -> (snapshot, object passed)
    for _ in range(60):
        fresh = cluster.plan_input()
        objects = []
        for pod in fresh.pods:
            name = pod["metadata"]["name"]
            before = passed.get(name)
            if before is None or before[0] != pod:
                before = (copy.deepcopy(pod), copy.deepcopy(pod))
                passed[name] = before
            objects.append(before[1])
        kept = msgspec.structs.replace(fresh, pods=objects)
        expected = plan(fresh)
        assert encode_plan(plan(kept, views=views)) == encode_plan(expected)
        if expected.rejected is not None:
            return
        cluster.history.append(expected)
        cluster.apply(expected)
        cluster.now += cluster.tick_seconds
        cluster.kubelet()
