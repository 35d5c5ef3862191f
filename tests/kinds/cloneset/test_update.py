"""Update rules: partition, maxUnavailable, maxSurge, paused, ReCreate, in place, grace period, status."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.progress import rollout_progress
from tests.kinds.cloneset.test_scale import CLAIM
from tests.planner.builders import (
    IDS,
    cloneset,
    plan_input,
    pvcs_for,
    revision_record,
    running_pod,
    with_image,
)
from tests.planner.simulate import Cluster


def rolled_cluster(strategy: dict[str, Any], replicas: int = 5, **kw: Any) -> tuple[Cluster, dict[str, Any]]:
    """A settled cluster at v1; returns it with the v2 CloneSet (image change) applied."""
    v1 = cloneset(strategy=strategy, replicas=replicas, **kw)  # type: ignore[arg-type]
    cluster = Cluster(v1)
    cluster.run()
    v2 = with_image(cluster.cloneset, "nginx:mainline")
    cluster.cloneset = v2
    return cluster, v2


def updated_count(cluster: Cluster) -> int:
    target = cluster.cloneset["status"]["updateRevision"].rsplit("-", 1)[1]
    return cluster.revision_counts().get(target, 0)


def test_seed_example_partition_2_of_5_updates_3() -> None:
    cluster, _ = rolled_cluster({"partition": 2, "maxUnavailable": "20%", "maxSurge": 0, "type": "ReCreate"})
    cluster.run()
    status = cluster.cloneset["status"]
    assert updated_count(cluster) == 3 and len(cluster.pods) == 5
    assert status["expectedUpdatedReplicas"] == 3 and status["updatedReadyReplicas"] == 3
    assert status["currentRevision"] != status["updateRevision"]  # the partition holds 2 pods back
    progress = rollout_progress(cluster.cloneset, status)
    assert progress.partition_reached and not progress.complete
    # Lowering the partition lets the last two move; then currentRevision becomes the update revision.
    cluster.cloneset["spec"]["updateStrategy"]["partition"] = 0
    cluster.run()
    status = cluster.cloneset["status"]
    assert updated_count(cluster) == 5 and status["currentRevision"] == status["updateRevision"]
    assert rollout_progress(cluster.cloneset, status).complete


def test_seed_example_first_round_marks_one_pod_for_recreation() -> None:
    v1 = cloneset(strategy={"partition": 2})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    pods[4]["metadata"]["creationTimestamp"] = "2026-11-30T11:30:00Z"  # ql7bn is the newest
    v2 = with_image(v1, "nginx:mainline")
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert [(type(a).__name__, a.pod) for a in result.actions] == [("RecreatePod", "sample-ql7bn")]
    assert result.partition == 2 and result.expected_updated_replicas == 3


def test_percent_partition_rounds_kept_pods_up() -> None:
    cluster, _ = rolled_cluster({"partition": "50%", "maxUnavailable": 2})
    cluster.run()
    assert updated_count(cluster) == 2  # ceil(2.5) = 3 kept


def test_never_more_unavailable_than_max_unavailable() -> None:
    cluster, _ = rolled_cluster({"maxUnavailable": 2}, replicas=6)
    for _ in range(60):
        cluster.step()
        assert cluster.available() >= 6 - 2 - 1  # a pod may be between delete and create
        busy = sum(
            1 for p in cluster.pods.values() if "apps.kruise.io/specified-delete" in p["metadata"]["labels"]
        )
        assert busy <= 2
    assert updated_count(cluster) == 6


def test_paused_stops_updates_but_not_scaling() -> None:
    cluster, v2 = rolled_cluster({"paused": True})
    result = cluster.step()
    assert result.actions == []
    v2["spec"]["replicas"] = 6
    result = cluster.step()
    assert [type(a).__name__ for a in result.actions] == ["CreatePod"]


def test_max_surge_recreate_creates_new_pod_before_deleting_old() -> None:
    cluster, _ = rolled_cluster({"maxSurge": 1, "maxUnavailable": 0})
    first = cluster.step()
    assert [type(a).__name__ for a in first.actions] == ["CreatePod"]
    for _ in range(80):
        cluster.step()
        assert cluster.available() >= 5 - 1  # the new pod is not yet ready only while it is the 6th
        assert len(cluster.pods) <= 6
    assert updated_count(cluster) == 5 and len(cluster.pods) == 5


def test_in_place_image_change_keeps_pod_and_pvcs() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible", "maxUnavailable": 1}, claims=[CLAIM])
    pods = [running_pod(v1, i) for i in IDS[:5]]
    pvcs = [p for i in IDS[:5] for p in pvcs_for(v1, i)]
    v2 = with_image(v1, "nginx:mainline")
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)], pvcs))
    # No grace period: one action, the InPlaceUpdateReady=False condition written before the patch.
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace"]
    (update,) = result.actions
    assert isinstance(update, model.UpdateInPlace) and update.change == "Rebuild"
    assert update.not_ready is not None and update.not_ready["type"] == "InPlaceUpdateReady"
    assert update.not_ready["status"] == "False" and update.not_ready["reason"] == "StartInPlaceUpdate"
    patch = update.patch
    assert patch["spec"]["containers"] == [{"name": "nginx", "image": "nginx:mainline"}]
    assert patch["metadata"]["labels"]["controller-revision-hash"] == result.update_revision.rsplit("-", 1)[1]  # type: ignore[union-attr]
    state = json.loads(patch["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"])
    assert state["revision"] == result.update_revision
    assert state["lastContainerStatuses"]["nginx"]["imageID"] == "sha256:nginx:alpine"
    cluster = Cluster(v2, pods, [revision_record(v1, 1)], pvcs)
    uids = {p["metadata"]["uid"] for p in cluster.pods.values()}
    cluster.run()
    assert {p["metadata"]["uid"] for p in cluster.pods.values()} == uids  # no pod recreated
    assert set(cluster.pvcs) == {p["metadata"]["name"] for p in pvcs}
    assert updated_count(cluster) == 5
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 1 for p in cluster.pods.values())


def test_grace_period_marks_not_ready_first_and_patches_image_after_it() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = with_image(v1, "nginx:mainline")
    cluster = Cluster(v2, pods, [revision_record(v1, 1)], tick_seconds=4)
    first = cluster.step()
    assert [type(a).__name__ for a in first.actions] == ["MarkNotReady"]
    assert first.requeue_after_seconds == 10
    marked = first.actions[0].pod
    assert cluster.pods[marked]["spec"]["containers"][0]["image"] == "nginx:alpine"
    second = cluster.step()  # 4 s later: still waiting
    assert second.actions == [] and second.requeue_after_seconds == 6
    cluster.step()  # 8 s
    third = cluster.step()  # 12 s: grace over
    assert [(type(a).__name__, a.pod) for a in third.actions] == [("UpdateInPlace", marked)]
    cluster.run()
    assert updated_count(cluster) == 5


def test_in_place_if_possible_recreates_when_env_changes() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible"})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["RecreatePod"]


def test_extended_mode_updates_env_in_place_and_probes_without_restart() -> None:
    extended = {"rollbook.io/inplace-mode": "extended"}
    v1 = cloneset(strategy={"type": "InPlaceOnly"}, annotations=extended)
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert result.rejected is None
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace"]
    update = result.actions[0]
    assert isinstance(update, model.UpdateInPlace) and update.change == "Rebuild"
    assert update.not_ready is not None  # a restart: the pod leaves service first
    assert update.patch["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    v3 = copy.deepcopy(v1)
    v3["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 80}}
    result = plan(plan_input(v3, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace"]
    assert result.actions[0].change == "Dynamic"  # type: ignore[union-attr]
    assert result.actions[0].not_ready is None  # type: ignore[union-attr]  # no restart: stays in service


def test_in_place_only_rejects_a_change_that_needs_recreation_and_touches_nothing() -> None:
    v1 = cloneset(strategy={"type": "InPlaceOnly"})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert result.rejected is not None
    assert result.rejected.field == "spec.template.spec.containers[0].env"
    assert "InPlaceOnly" in result.rejected.reason
    assert result.actions == [] and result.revisions == []


def test_metadata_only_change_is_dynamic_no_restart() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible"})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["metadata"]["annotations"] = {"tracking-number": "two"}
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace"]
    update = result.actions[0]
    assert isinstance(update, model.UpdateInPlace)
    assert update.patch["metadata"]["annotations"]["tracking-number"] == "two"
    assert "spec" not in update.patch and update.restart_containers == []


def test_kruise_2369_in_place_with_max_surge_creates_no_surge_pods() -> None:
    for change in ("image", "annotation"):
        v1 = cloneset(strategy={"type": "InPlaceIfPossible", "maxSurge": 3})
        cluster = Cluster(v1)
        cluster.run()
        v2 = (
            with_image(cluster.cloneset, "nginx:mainline")
            if change == "image"
            else copy.deepcopy(cluster.cloneset)
        )
        if change == "annotation":
            v2["spec"]["template"]["metadata"]["annotations"] = {"tracking-number": "two"}
        cluster.cloneset = v2
        names = set(cluster.pods)
        cluster.run()
        created = [a for p in cluster.history for a in p.actions if isinstance(a, model.CreatePod)]
        assert len(created) == 5  # only the initial creation; the update created nothing
        assert set(cluster.pods) == names and updated_count(cluster) == 5


def test_status_counts_and_revisions() -> None:
    v1 = cloneset(strategy={"partition": 2})
    pods = [running_pod(v1, i) for i in IDS[:4]] + [running_pod(v1, IDS[4], ready=False)]
    v1["status"] = {"currentRevision": revision_record(v1, 1)["metadata"]["name"]}
    result = plan(plan_input(v1, pods, [revision_record(v1, 1)]))
    status = result.status
    assert status is not None
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (5, 4, 4)
    assert (status["updatedReplicas"], status["updatedReadyReplicas"]) == (5, 4)
    assert status["expectedUpdatedReplicas"] == 3 and status["observedGeneration"] == 1
    assert status["currentRevision"] == status["updateRevision"] == result.update_revision


def test_revision_label_fits_63_chars_for_any_name_and_long_form_is_read() -> None:
    name = "a" * 253
    cs = cloneset(name=name)
    result = plan(plan_input(cs, []))
    pod = next(a for a in result.actions if isinstance(a, model.CreatePod)).object
    assert all(len(v) <= 63 for v in pod["metadata"]["labels"].values())
    assert len(result.update_revision or "") <= 253
    # A pod labelled with OpenKruise's long form counts as being at the revision.
    v1 = cloneset()
    pods = [running_pod(v1, i) for i in IDS[:5]]
    for pod in pods:
        pod["metadata"]["labels"]["controller-revision-hash"] = revision_record(v1, 1)["metadata"]["name"]
    result = plan(plan_input(v1, pods, [revision_record(v1, 1)]))
    assert result.status is not None and result.status["updatedReplicas"] == 5


def test_rollback_reuses_and_renumbers_the_old_revision_and_history_is_pruned() -> None:
    v1 = cloneset()
    v2 = with_image(v1, "nginx:2")
    records = [revision_record(v1, 1), revision_record(v2, 2)]
    result = plan(plan_input(v1, [], records))
    assert result.update_revision == records[0]["metadata"]["name"]
    assert [r["revision"] for r in result.revisions] == [3]
    images = [with_image(v1, f"nginx:{n}") for n in range(3, 10)]
    many = [revision_record(c, n) for n, c in enumerate([v1, v2, *images], start=1)]
    limited = cloneset(revisionHistoryLimit=2)
    limited["spec"]["template"] = images[-1]["spec"]["template"]
    result = plan(plan_input(limited, [], many))
    assert len(result.revisions_to_delete) == len(many) - 1 - 2
    assert records[0]["metadata"]["name"] in result.revisions_to_delete


def test_grace_period_is_measured_to_the_microsecond_and_never_cut_short() -> None:
    # Marked at 12:00:00.900. OpenKruise writes updateTimestamp in whole seconds; truncated (12:00:00) it
    # would let the image patch go out at 12:00:02.0, 1.1 s into a 2 s grace period. rollbook rounds the
    # start up to 12:00:01, so the patch goes out at 12:00:03, never early.
    v1 = cloneset(
        strategy={"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 2}}, replicas=1
    )
    pods = [running_pod(v1, i) for i in IDS[:1]]
    v2 = with_image(v1, "nginx:mainline")
    revs = [revision_record(v1, 1)]
    first = plan(plan_input(v2, pods, revs, now="2026-11-30T12:00:00.900000Z"))
    mark = first.actions[0]
    assert isinstance(mark, model.MarkNotReady) and mark.patch is not None
    marked_pod = copy.deepcopy(pods[0])
    marked_pod["metadata"].setdefault("annotations", {}).update(mark.patch["metadata"]["annotations"])
    marked_pod["metadata"]["labels"].update(mark.patch["metadata"]["labels"])
    state = json.loads(marked_pod["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"])
    assert state["updateTimestamp"] == "2026-11-30T12:00:01Z"
    conditions = [c for c in marked_pod["status"]["conditions"] if c["type"] != "InPlaceUpdateReady"]
    marked_pod["status"]["conditions"] = [*conditions, mark.condition]
    early = plan(plan_input(v2, [marked_pod], revs, now="2026-11-30T12:00:02.900000Z"))
    assert [type(a).__name__ for a in early.actions] == []
    assert early.requeue_after_seconds == 1
    due = plan(plan_input(v2, [marked_pod], revs, now="2026-11-30T12:00:03.000000Z"))
    assert [type(a).__name__ for a in due.actions] == ["UpdateInPlace"]


def _env_change(v1: dict[str, Any]) -> dict[str, Any]:
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    return v2


def _probe_change(v1: dict[str, Any]) -> dict[str, Any]:
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 80}}
    return v2


@pytest.mark.parametrize(
    ("strategy", "extended", "change", "expected"),
    [
        # a restart, no grace period: one action, the not-ready condition in it (OpenKruise: one reconcile)
        ({"type": "InPlaceIfPossible"}, False, "image", [("UpdateInPlace", "InPlaceUpdateReady")]),
        ({"type": "InPlaceOnly"}, True, "env", [("UpdateInPlace", "InPlaceUpdateReady")]),
        # a grace period: marked not ready now (with the grace record), patched when it runs out
        (
            {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}},
            False,
            "image",
            [("MarkNotReady", "InPlaceUpdateReady")],
        ),
        # no restart: the pod stays in service, no condition
        ({"type": "InPlaceOnly"}, True, "probe", [("UpdateInPlace", None)]),
        # not in place: recreated, no condition
        ({"type": "InPlaceIfPossible"}, False, "env", [("RecreatePod", None)]),
        ({"type": "ReCreate"}, False, "image", [("RecreatePod", None)]),
    ],
)
def test_an_update_is_one_action_per_pod_with_its_not_ready_condition_where_it_restarts(
    strategy: dict[str, Any], extended: bool, change: str, expected: list[tuple[str, str | None]]
) -> None:
    annotations = {"rollbook.io/inplace-mode": "extended"} if extended else None
    v1 = cloneset(strategy={**strategy, "maxUnavailable": 1}, annotations=annotations)
    pods = [running_pod(v1, i) for i in IDS[:5]]
    changed = {"image": lambda c: with_image(c, "nginx:mainline"), "env": _env_change, "probe": _probe_change}
    result = plan(plan_input(changed[change](v1), pods, [revision_record(v1, 1)]))
    assert result.rejected is None

    def condition_of(action: model.Action) -> str | None:
        if isinstance(action, model.UpdateInPlace):
            return None if action.not_ready is None else str(action.not_ready["type"])
        if isinstance(action, model.MarkNotReady):
            return str(action.condition["type"])
        return None

    assert [(type(a).__name__, condition_of(a)) for a in result.actions] == expected
    for action in result.actions:  # the condition written is the one OpenKruise writes to start an update
        if isinstance(action, model.UpdateInPlace) and action.not_ready is not None:
            assert (
                action.not_ready["status"] == "False" and action.not_ready["reason"] == "StartInPlaceUpdate"
            )
