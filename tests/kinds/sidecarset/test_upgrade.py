"""The SidecarSet in-place upgrade round (services.kinds.sidecarset.rules.upgrade): OpenKruise's in-place
sidecar upgrade rules as tables, and properties over random pods (maxUnavailable, partition, determinism)."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from services.kinds.sidecarset.rules.upgrade import plan_sidecarset, upgrade_complete
from services.model import sidecarset as ss
from services.model.sidecarset_streams import SIDECARSET_INPLACE_STATE_ANNOTATION
from tests.e2e.cluster import SEED

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD, NEW = "centos:6.7", "centos:7"


def sidecarset(image: str = NEW, **strategy: Any) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((SEED / "sidecarset-test-sidecarset.yaml").read_text())
    obj["metadata"]["generation"] = 3
    obj["spec"]["containers"][0]["image"] = image
    obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "maxUnavailable": 1, "partition": 0, **strategy}
    return obj


def image_id(image: str) -> str:
    return f"docker.io/library/{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def pod(
    name: str,
    *,
    injected_from: dict[str, Any] | None = None,
    ready: bool = True,
    age: int = 0,
    namespace: str = "default",
    running_images: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the webhook injected it from ``injected_from`` (default: the old image), running."""
    base = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "nginx"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.15.1"}]},
    }
    source = ss.parse_sidecarset(injected_from or sidecarset(OLD))
    injected, records = ss.inject(base, [source], now=NOW - timedelta(hours=1))
    assert records, "the pod must be injected"
    injected["metadata"]["uid"] = f"uid-{namespace}-{name}"
    injected["metadata"]["creationTimestamp"] = (NOW - timedelta(minutes=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    injected["spec"]["nodeName"] = "node-1"
    images = running_images or {c["name"]: c["image"] for c in injected["spec"]["containers"]}
    injected["status"] = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": (NOW - timedelta(minutes=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ],
        "containerStatuses": [
            {"name": n, "image": i, "imageID": image_id(i), "ready": ready, "restartCount": 0}
            for n, i in images.items()
        ],
    }
    return injected


def apply(pod_obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The pod after the executor's strategic merge patch (containers merge by name), before the kubelet."""
    result = copy.deepcopy(pod_obj)
    result["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    for change in (patch.get("spec") or {}).get("containers") or []:
        for c in result["spec"]["containers"]:
            if c["name"] == change["name"]:
                c["image"] = change["image"]
    return result


def restart_sidecars(pod_obj: dict[str, Any], *, ready: bool) -> dict[str, Any]:
    """What the kubelet reports after restarting changed containers (ready or still starting)."""
    result = copy.deepcopy(pod_obj)
    specs = {c["name"]: c["image"] for c in result["spec"]["containers"]}
    for status in result["status"]["containerStatuses"]:
        if status["image"] != specs[status["name"]]:
            status.update(
                image=specs[status["name"]], imageID=image_id(specs[status["name"]]), restartCount=1
            )
            status["ready"] = ready
    result["status"]["conditions"][0]["status"] = "True" if ready else "False"
    return result


def names(pods: list[Any]) -> list[str]:
    return [p.pod for p in pods]


# --- tables --------------------------------------------------------------------------------------------


def test_worked_example_four_pods_partition_50_percent_max_unavailable_1() -> None:
    """OpenKruise's example: P = 2; round 1 upgrades 1 pod; after it is complete and ready round 2 upgrades 1;
    then |W| - P = 0 and two pods stay old."""
    pods = {f"p{i}": pod(f"p{i}", age=i) for i in range(4)}
    spec = sidecarset(NEW, partition="50%")
    first = plan_sidecarset(spec, pods.values(), NOW)
    assert (first.partition, first.max_unavailable, first.expected_updated) == (2, 1, 2)
    # Update order: all ready, so the most recently ready first.
    assert first.candidates == ["default/p0", "default/p1", "default/p2", "default/p3"]
    assert names(first.upgrades) == ["p0"]
    upgrade = first.upgrades[0]
    assert upgrade.images == {"tools": NEW}
    pods["p0"] = apply(pods["p0"], upgrade.patch)
    waiting = plan_sidecarset(spec, pods.values(), NOW)
    assert waiting.upgrades == []  # p0 is updated but its sidecar has not restarted yet: busy
    assert waiting.status["updatedPods"] == 1 and waiting.status["updatedReadyPods"] == 0
    pods["p0"] = restart_sidecars(pods["p0"], ready=False)
    assert plan_sidecarset(spec, pods.values(), NOW).upgrades == []  # restarted, not ready yet
    pods["p0"] = restart_sidecars(pods["p0"], ready=True)
    second = plan_sidecarset(spec, pods.values(), NOW)
    assert names(second.upgrades) == ["p1"]
    pods["p1"] = restart_sidecars(apply(pods["p1"], second.upgrades[0].patch), ready=True)
    done = plan_sidecarset(spec, pods.values(), NOW)
    assert done.upgrades == [] and done.candidates == ["default/p2", "default/p3"]
    assert done.status == {
        "matchedPods": 4,
        "updatedPods": 2,
        "readyPods": 4,
        "updatedReadyPods": 2,
        "observedGeneration": 3,
        "latestRevision": done.revisions.latest.name,
        "collisionCount": 0,
    }


def test_g4_order_most_recently_ready_first_then_not_ready_first() -> None:
    pods = [pod("a", age=5), pod("b", age=1), pod("c", age=3, ready=False)]
    result = plan_sidecarset(sidecarset(NEW, maxUnavailable=3), pods, NOW)
    assert result.candidates == ["default/c", "default/b", "default/a"]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ({"paused": True}, []),
        ({"type": "NotUpdate"}, []),
        ({"partition": 4}, []),
        ({"partition": 3}, ["p0"]),
        ({"partition": "100%"}, []),
        ({"partition": "99%"}, ["p0"]),  # a percent below 100% always lets one pod update
        ({"maxUnavailable": 2}, ["p0", "p1"]),
        ({"maxUnavailable": "50%"}, ["p0", "p1"]),
        ({"maxUnavailable": "30%"}, ["p0", "p1"]),  # 1.2 rounded up
        ({"maxUnavailable": 0}, []),
        ({"maxUnavailable": "100%"}, ["p0", "p1", "p2", "p3"]),
    ],
)
def test_strategy_table(strategy: dict[str, Any], expected: list[str]) -> None:
    pods = [pod(f"p{i}", age=i) for i in range(4)]
    result = plan_sidecarset(sidecarset(NEW, **strategy), pods, NOW)
    assert names(result.upgrades) == expected
    assert result.status["matchedPods"] == 4 and result.status["updatedPods"] == 0


def test_not_ready_candidates_are_taken_for_free() -> None:
    pods = [pod("a", age=1), pod("b", age=2, ready=False), pod("c", age=3), pod("d", age=4, ready=False)]
    result = plan_sidecarset(sidecarset(NEW), pods, NOW)
    assert sorted(names(result.upgrades)) == ["a", "b", "d"]


def test_busy_updated_pods_use_up_max_unavailable() -> None:
    spec = sidecarset(NEW, maxUnavailable=2)
    updated_not_ready = pod("u", injected_from=sidecarset(NEW), ready=False)
    pods = [updated_not_ready, pod("a", age=1), pod("b", age=2), pod("c", age=3, ready=False)]
    result = plan_sidecarset(spec, pods, NOW)
    assert names(result.upgrades) == ["c", "a"]  # c is free; a takes the one slot u leaves


def test_only_image_changes_roll_other_changes_wait_for_recreation() -> None:
    changed_command = sidecarset(OLD)
    changed_command["spec"]["containers"][0]["command"] = ["sleep", "1d"]
    pods = [pod("old-spec", injected_from=sidecarset(OLD)), pod("other-spec", injected_from=changed_command)]
    result = plan_sidecarset(sidecarset(NEW, maxUnavailable=5), pods, NOW)
    assert names(result.upgrades) == ["old-spec"]
    assert result.not_upgradable == ["default/other-spec"]
    # A change that is not an image change upgrades nobody in place.
    command_only = sidecarset(OLD, maxUnavailable=5)
    command_only["spec"]["containers"][0]["command"] = ["sleep", "2d"]
    nothing = plan_sidecarset(command_only, pods, NOW)
    assert nothing.upgrades == [] and nothing.not_upgradable == ["default/old-spec", "default/other-spec"]


def test_matched_pods_are_the_injected_active_in_scope_ones_with_their_sidecars() -> None:
    keep = pod("keep")
    never_injected = copy.deepcopy(keep)
    never_injected["metadata"]["name"] = "never"
    del never_injected["metadata"]["annotations"][ss.INJECTED_LIST_ANNOTATION]
    lost_sidecar = copy.deepcopy(keep)
    lost_sidecar["metadata"]["name"] = "lost"
    lost_sidecar["spec"]["containers"] = [
        c for c in lost_sidecar["spec"]["containers"] if c["name"] != "tools"
    ]
    deleting = copy.deepcopy(keep)
    deleting["metadata"]["name"] = "deleting"
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    succeeded = copy.deepcopy(keep)
    succeeded["metadata"]["name"] = "done"
    succeeded["status"]["phase"] = "Succeeded"
    relabelled = copy.deepcopy(keep)
    relabelled["metadata"]["name"] = "relabelled"
    relabelled["metadata"]["labels"] = {"other": "x"}
    cluster_wide = sidecarset(OLD)
    del cluster_wide["spec"]["namespace"]
    # Injected while the SidecarSet was cluster-wide; now it is scoped to default.
    elsewhere = pod("elsewhere", namespace="team-a", injected_from=cluster_wide)
    pods = [keep, never_injected, lost_sidecar, deleting, succeeded, relabelled, elsewhere]
    result = plan_sidecarset(sidecarset(NEW, maxUnavailable=9), pods, NOW)
    assert [m.key for m in result.matched] == ["default/keep"]
    assert names(result.upgrades) == ["keep"]


def test_update_selector_limits_the_candidates() -> None:
    pods = [pod("a", labels={"app": "nginx", "canary": "yes"}), pod("b")]
    result = plan_sidecarset(
        sidecarset(NEW, maxUnavailable=5, selector={"matchLabels": {"canary": "yes"}}), pods, NOW
    )
    assert names(result.upgrades) == ["a"]


def test_patch_touches_only_sidecar_images_and_this_sidecarsets_entries() -> None:
    other = sidecarset(OLD)
    other["metadata"]["name"] = "logging"
    other["spec"]["containers"][0]["name"] = "log-agent"
    target = pod("p", injected_from=sidecarset(OLD))
    both, _ = ss.inject(
        {k: v for k, v in target.items() if k != "status"}, [ss.parse_sidecarset(other)], now=NOW
    )
    both["status"] = target["status"]
    result = plan_sidecarset(sidecarset(NEW), [both], NOW)
    patch = result.upgrades[0].patch
    assert patch["spec"] == {"containers": [{"name": "tools", "image": NEW}]}
    annotations = patch["metadata"]["annotations"]
    # The without-image hash is untouched.
    assert set(annotations) == {ss.HASH_ANNOTATION, SIDECARSET_INPLACE_STATE_ANNOTATION}
    hashes = json.loads(annotations[ss.HASH_ANNOTATION])
    assert hashes["test-sidecarset"]["hash"] == ss.parse_sidecarset(sidecarset(NEW)).hash
    assert hashes["logging"] == json.loads(both["metadata"]["annotations"][ss.HASH_ANNOTATION])["logging"]
    state = json.loads(annotations[SIDECARSET_INPLACE_STATE_ANNOTATION])["test-sidecarset"]
    assert state["lastContainerStatuses"] == {"tools": {"imageID": image_id(OLD)}}


def test_upgrade_is_complete_when_the_sidecar_runs_a_new_image_id() -> None:
    target = pod("p")
    result = plan_sidecarset(sidecarset(NEW), [target], NOW)
    patched = apply(target, result.upgrades[0].patch)
    assert not upgrade_complete("test-sidecarset", patched)
    assert upgrade_complete("test-sidecarset", restart_sidecars(patched, ready=False))
    assert upgrade_complete("test-sidecarset", target)  # never upgraded in place


def test_invalid_sidecarset_is_an_error_naming_the_field() -> None:
    bad = sidecarset(NEW, maxUnavailable="lots")
    with pytest.raises(ss.SidecarSetError) as error:
        plan_sidecarset(bad, [pod("p")], NOW)
    assert error.value.field == "spec.updateStrategy.maxUnavailable"


# --- properties ----------------------------------------------------------------------------------------

int_or_percent = st.one_of(st.integers(0, 10), st.integers(0, 100).map(lambda n: f"{n}%"))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = sidecarset(
        NEW,
        partition=draw(int_or_percent),
        maxUnavailable=draw(int_or_percent),
        paused=draw(st.booleans()),
    )
    pods = []
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["old", "old", "updated", "upgrading", "other-spec"]))
        ready = draw(st.booleans())
        age = draw(st.integers(0, 5))
        if kind == "old":
            pods.append(pod(f"p{i}", ready=ready, age=age))
        elif kind == "updated":
            pods.append(pod(f"p{i}", injected_from=sidecarset(NEW), ready=ready, age=age))
        elif kind == "upgrading":  # patched, sidecar not restarted yet
            old = pod(f"p{i}", ready=ready, age=age)
            pods.append(
                apply(
                    old, plan_sidecarset(sidecarset(NEW, maxUnavailable="100%"), [old], NOW).upgrades[0].patch
                )
            )
        else:
            other = sidecarset(OLD)
            other["spec"]["containers"][0]["args"] = ["x"]
            pods.append(pod(f"p{i}", injected_from=other, ready=ready, age=age))
    return spec, pods


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_one_round_respects_max_unavailable_and_partition_and_is_deterministic(
    scenario: tuple[dict[str, Any], list[dict[str, Any]]], rng: Any
) -> None:
    spec, pods = scenario
    result = plan_sidecarset(spec, pods, NOW)
    shuffled = list(pods)
    rng.shuffle(shuffled)
    assert plan_sidecarset(spec, shuffled, NOW) == result  # a function of the set of pods, not their order
    matched = {m.key: m for m in result.matched}
    upgraded = [f"{u.namespace}/{u.pod}" for u in result.upgrades]
    assert set(upgraded) <= set(result.candidates)
    assert len(set(upgraded)) == len(upgraded)
    if result.paused:
        assert upgraded == []
    busy_before = sum(
        1 for m in matched.values() if m.updated and not (m.upgrade_complete and m.running_ready)
    )
    ready_taken = sum(1 for key in upgraded if matched[key].running_ready)
    # A ready pod is only made unavailable while fewer than maxUnavailable matched pods are.
    assert busy_before + ready_taken <= max(result.max_unavailable, busy_before)
    updated_before = sum(1 for m in matched.values() if m.updated)
    assert updated_before + len(upgraded) <= max(len(matched) - result.partition, updated_before)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 7),
    int_or_percent,
    st.integers(1, 3),
    st.lists(st.booleans(), min_size=7, max_size=7),
    st.randoms(use_true_random=False),
)
def test_a_whole_rollout_never_exceeds_max_unavailable_and_stops_at_the_partition(
    count: int, partition: Any, max_unavailable: int, not_ready: list[bool], rng: Any
) -> None:
    """Rounds until nothing moves, the kubelet finishing upgrades in random order between rounds: at every
    moment at most maxUnavailable pods are unavailable because of the upgrade; the end state has exactly
    |M| - P pods updated."""
    spec = sidecarset(NEW, partition=partition, maxUnavailable=max_unavailable)
    pods = {f"p{i}": pod(f"p{i}", age=i) for i in range(count)}
    in_flight: list[str] = []
    for _ in range(4 * count + 4):
        result = plan_sidecarset(spec, pods.values(), NOW)
        for upgrade in result.upgrades:
            pods[upgrade.pod] = apply(pods[upgrade.pod], upgrade.patch)
            in_flight.append(upgrade.pod)
        assert len(in_flight) <= max_unavailable
        if not result.upgrades and not in_flight:
            break
        if in_flight:  # the kubelet finishes one of them (maybe not ready at first)
            name = in_flight[rng.randrange(len(in_flight))]
            pending_ready = (
                not_ready[int(name[1:])] and pods[name]["status"]["conditions"][0]["status"] == "True"
            )
            pods[name] = restart_sidecars(pods[name], ready=not pending_ready)
            if not pending_ready:
                in_flight.remove(name)
    final = plan_sidecarset(spec, pods.values(), NOW)
    assert final.upgrades == [] and not in_flight
    assert final.status["updatedPods"] == count - final.partition
    assert final.status["updatedReadyPods"] == count - final.partition


def test_the_walk_stops_at_the_first_ready_pod_beyond_max_unavailable() -> None:
    """With a priority order putting a not-ready pod after ready ones, it waits (OpenKruise's break)."""
    pods = [
        pod("first", labels={"app": "nginx", "prio": "high"}),
        pod("second", labels={"app": "nginx", "prio": "high"}, age=1),
        pod("late-not-ready", ready=False),
    ]
    weight = {"weightPriority": [{"weight": 10, "matchSelector": {"matchLabels": {"prio": "high"}}}]}
    result = plan_sidecarset(sidecarset(NEW, priorityStrategy=weight), pods, NOW)
    assert result.candidates == ["default/first", "default/second", "default/late-not-ready"]
    assert names(result.upgrades) == ["first"]


def test_a_crash_looping_sidecar_can_be_fixed_forward_a_ready_one_mid_upgrade_waits() -> None:
    bad = sidecarset("centos:crash", maxUnavailable=5)
    crashing = pod("crashing")
    crashing = apply(crashing, plan_sidecarset(bad, [crashing], NOW).upgrades[0].patch)
    crashing = restart_sidecars(crashing, ready=False)
    for status in crashing["status"]["containerStatuses"]:
        if status["name"] == "tools":
            status["imageID"] = ""  # not running: CrashLoopBackOff
    waiting = pod("waiting")  # patched, its ready sidecar not restarted yet
    waiting = apply(waiting, plan_sidecarset(bad, [waiting], NOW).upgrades[0].patch)
    fixed = plan_sidecarset(sidecarset(NEW, maxUnavailable=5), [crashing, waiting], NOW)
    assert names(fixed.upgrades) == ["crashing"]
    assert fixed.candidates == ["default/crashing"]
    assert fixed.upgrades[0].images == {"tools": NEW}
