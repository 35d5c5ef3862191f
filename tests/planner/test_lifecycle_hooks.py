"""CloneSet lifecycle hooks (spec.lifecycle preDelete / inPlaceUpdate / preNormal) as OpenKruise runs them:
pkg/controller/cloneset/sync/cloneset_scale.go (``Scale``, ``managePreparingDelete``, ``deletePods``),
cloneset_update.go (``updatePod``, ``refreshPodState``) and pkg/util/lifecycle/lifecycle_utils.go."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.decisions import _hook_transitions
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model.events import PodHookHeld, PodHookReleased
from tests.planner.builders import IDS, cloneset, plan_input, revision_record, running_pod, with_image
from tests.planner.simulate import Cluster

LIFECYCLE = "lifecycle.apps.kruise.io/state"
HOOK_LABEL = "example.io/hook"
PRE_DELETE = {"preDelete": {"labelsHandler": {HOOK_LABEL: "true"}}}


def _hooked_pods(cs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    pods = [running_pod(cs, i) for i in IDS[:count]]
    for pod in pods:
        pod["metadata"]["labels"][HOOK_LABEL] = "true"
    return pods


def _kinds(result: model.Plan) -> list[tuple[str, str]]:
    return [(type(a).__name__, a.pod) for a in result.actions]


def _state_of(action: Any) -> str:
    return str(action.patch["metadata"]["labels"][LIFECYCLE])


def test_pre_delete_hook_holds_a_named_pod_until_released() -> None:
    cs = cloneset(replicas=3, scale={"podsToDelete": [f"sample-{IDS[0]}"]}, lifecycle=PRE_DELETE)
    pods = _hooked_pods(cs, 3)
    first = plan(plan_input(cs, pods))
    assert _kinds(first) == [("PatchPod", f"sample-{IDS[0]}")]
    assert _state_of(first.actions[0]) == "PreparingDelete"
    assert [(h.pod, h.hook) for h in first.hook_holds] == []  # observed Normal this round
    pods[0]["metadata"]["labels"][LIFECYCLE] = "PreparingDelete"
    # Held: nothing is created (the replacement waits for the pod to go), nothing deleted.
    waiting = plan(plan_input(cs, pods))
    assert waiting.actions == []
    assert [(h.pod, h.hook, h.state) for h in waiting.hook_holds] == [
        (f"sample-{IDS[0]}", "preDelete", "PreparingDelete")
    ]
    assert waiting.status is not None and waiting.status["availableReplicas"] == 2
    # excludePreparingDelete (the v1alpha1 CloneSet label): the replacement is created while it waits.
    excluding = copy.deepcopy(cs)
    excluding["metadata"]["labels"] = {"apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"}
    assert [type(a).__name__ for a in plan(plan_input(excluding, pods)).actions] == ["CreatePod"]
    # Released (the user removes the hook label): deleted with its PVCs, no ready limit.
    del pods[0]["metadata"]["labels"][HOOK_LABEL]
    released = plan(plan_input(cs, pods))
    assert _kinds(released) == [("DeletePod", f"sample-{IDS[0]}")]
    assert released.hook_holds == []


def test_scale_in_moves_a_hooked_pod_to_preparing_delete_and_waits() -> None:
    cs = cloneset(replicas=2, lifecycle=PRE_DELETE)
    pods = _hooked_pods(cs, 3)
    first = plan(plan_input(cs, pods))
    assert [type(a).__name__ for a in first.actions] == ["PatchPod"]
    chosen = first.actions[0].pod
    for pod in pods:
        if pod["metadata"]["name"] == chosen:
            pod["metadata"]["labels"][LIFECYCLE] = "PreparingDelete"
    assert plan(plan_input(cs, pods)).actions == []  # no second pod chosen while one waits


def test_preparing_delete_pod_taken_back_when_replicas_rise_again() -> None:
    cs = cloneset(replicas=4, lifecycle=PRE_DELETE)
    pods = _hooked_pods(cs, 4)
    pods[3]["metadata"]["labels"][LIFECYCLE] = "PreparingDelete"
    result = plan(plan_input(cs, pods))
    assert _kinds(result) == [("PatchPod", f"sample-{IDS[3]}")]
    assert _state_of(result.actions[0]) == "PreparingNormal"
    # Not with markPodNotReady (taking back would lose the readiness key).
    marking = copy.deepcopy(cs)
    marking["spec"]["lifecycle"]["preDelete"]["markPodNotReady"] = True
    assert [type(a).__name__ for a in plan(plan_input(marking, pods)).actions] != ["PatchPod"]


def test_in_place_hook_with_mark_pod_not_ready_full_flow() -> None:
    hook = {"labelsHandler": {HOOK_LABEL: "true"}, "markPodNotReady": True}
    strategy = {"type": "InPlaceIfPossible", "maxUnavailable": 1}
    v1 = cloneset(replicas=1, strategy=strategy, lifecycle={"inPlaceUpdate": hook})
    v1["spec"]["template"]["metadata"]["labels"][HOOK_LABEL] = "true"
    cluster = Cluster(v1)
    cluster.run()
    (name,) = cluster.pods
    pod = cluster.pods[name]
    assert {"conditionType": "KruisePodReady"} in pod["spec"]["readinessGates"]
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["KruisePodReady"] == "True"
    v2 = with_image(cluster.cloneset, "nginx:mainline")
    v2["spec"]["template"]["metadata"]["labels"] = dict(v1["spec"]["template"]["metadata"]["labels"])
    cluster.cloneset = v2
    first = cluster.step()
    assert [type(a).__name__ for a in first.actions] == ["MarkNotReady"]
    mark = first.actions[0]
    assert isinstance(mark, model.MarkNotReady)
    assert mark.condition["type"] == "KruisePodReady" and mark.condition["status"] == "False"
    assert json.loads(mark.condition["message"]) == [{"userAgent": "Lifecycle", "key": "preUpdateHook"}]
    assert pod["metadata"]["labels"][LIFECYCLE] == "PreparingUpdate"
    for _ in range(3):  # still hooked: it waits, image untouched
        held = cluster.step()
        assert held.actions == [] and [h.hook for h in held.hook_holds] == ["inPlaceUpdate"]
    assert pod["spec"]["containers"][0]["image"] == "nginx:alpine"
    del pod["metadata"]["labels"][HOOK_LABEL]  # the user's traffic drain is done
    states = []
    for _ in range(20):
        result = cluster.step()
        states.append(pod["metadata"]["labels"][LIFECYCLE])
        if pod["metadata"]["labels"][LIFECYCLE] == "Updated" and not result.actions:
            break
    assert pod["spec"]["containers"][0]["image"] == "nginx:mainline"
    assert "Updating" in states and states[-1] == "Updated"
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert (
        conditions["KruisePodReady"]["status"] == "True" and conditions["KruisePodReady"]["message"] == "[]"
    )
    # Updated waits for the hook to be all-hooked again (the user puts the label back) -> Normal.
    pod["metadata"]["labels"][HOOK_LABEL] = "true"
    back = cluster.step()
    assert [_state_of(a) for a in back.actions] == ["Normal"]


def test_pre_normal_hook_keeps_a_new_pod_preparing_normal_until_all_hooked() -> None:
    cs = cloneset(replicas=1, lifecycle={"preNormal": {"labelsHandler": {"example.io/ready": "true"}}})
    pod = running_pod(cs, IDS[0])
    pod["metadata"]["labels"][LIFECYCLE] = "PreparingNormal"
    result = plan(plan_input(cs, [pod]))
    assert result.actions == [] and [h.hook for h in result.hook_holds] == ["preNormal"]
    assert result.status is not None and result.status["availableReplicas"] == 0
    pod["metadata"]["labels"]["example.io/ready"] = "true"
    result = plan(plan_input(cs, [pod]))
    assert [_state_of(a) for a in result.actions] == ["Normal"]


def test_updated_pod_chosen_again_re_arms_the_hook_in_one_patch() -> None:
    hook = {"labelsHandler": {HOOK_LABEL: "true"}, "finalizersHandler": ["example.io/drain"]}
    v1 = cloneset(replicas=1, strategy={"type": "InPlaceIfPossible"}, lifecycle={"inPlaceUpdate": hook})
    pod = running_pod(v1, IDS[0])
    pod["metadata"]["labels"][LIFECYCLE] = "Updated"
    v2 = with_image(v1, "nginx:mainline")
    result = plan(plan_input(v2, [pod], [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["PatchPod"]
    patch = result.actions[0].patch  # type: ignore[union-attr]
    assert patch["metadata"]["labels"] == {LIFECYCLE: "PreparingUpdate", HOOK_LABEL: "true"}
    assert patch["metadata"]["finalizers"] == ["example.io/drain"]


def holding(holds: list[model.HookHold]) -> model.Plan:
    """A plan of a round in which lifecycle hooks hold ``holds`` (and nothing else happens)."""
    return model.Plan(
        update_revision=None,
        current_revision=None,
        partition=None,
        actions=[],
        status=None,
        requeue_after_seconds=None,
        rejected=None,
        hook_holds=holds,
    )


def test_hook_waits_are_recorded_as_held_and_released_events() -> None:
    state = WorkloadState("default", "sample")
    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    held_plan = holding([model.HookHold(pod="sample-a", hook="preDelete", state="PreparingDelete")])
    events = _hook_transitions(state, held_plan, t0)
    assert events == [PodHookHeld(pod="sample-a", hook="preDelete", state="PreparingDelete")]
    state.hook_holds[("sample-a", "preDelete")] = ("PreparingDelete", t0)
    assert _hook_transitions(state, held_plan, t0 + timedelta(seconds=5)) == []  # still held: nothing new
    released = _hook_transitions(state, holding([]), t0 + timedelta(seconds=42))
    assert released == [
        PodHookReleased(
            pod="sample-a", hook="preDelete", state="PreparingDelete", held_since=t0, held_seconds=42.0
        )
    ]
