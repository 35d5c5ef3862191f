"""Native sidecars (init containers with ``restartPolicy: Always``) in the SidecarSet in-place upgrade round
(services.kinds.sidecarset.rules.upgrade), as tables: what is patched, what is waited for, which pods are
matched, and the same partition / maxUnavailable / paused / selector controls as ordinary sidecars."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.kinds.sidecarset.rules.upgrade import mid_upgrade, plan_sidecarset, upgrade_complete
from services.model import sidecarset as ss
from services.model.sidecarset_streams import SIDECARSET_INPLACE_STATE_ANNOTATION

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
OLD, NEW = "envoy:1.30", "envoy:1.31"


def image_id(image: str) -> str:
    return f"docker.io/library/{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def sidecarset(
    proxy: str = NEW, *, agent: str | None = None, setup: str | None = None, **strategy: Any
) -> dict[str, Any]:
    """A SidecarSet with the native sidecar ``proxy``; ``agent`` adds an ordinary sidecar, ``setup`` a plain
    init container."""
    init = [{"name": "proxy", "image": proxy, "restartPolicy": "Always"}]
    if setup is not None:
        init.append({"name": "setup", "image": setup})
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}},
        "containers": [{"name": "agent", "image": agent}] if agent else [],
        "initContainers": init,
        "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 1, "partition": 0, **strategy},
    }
    return {
        "apiVersion": ss.API_VERSION,
        "kind": "SidecarSet",
        "metadata": {"name": "mesh", "generation": 2},
        "spec": spec,
    }


def status_of(
    name: str, image: str, *, ready: bool, restarts: int = 0, running: bool = True
) -> dict[str, Any]:
    state = {"running": {"startedAt": "2026-12-06T11:00:00Z"}} if running else {"waiting": {}}
    return {
        "name": name,
        "image": image,
        "imageID": image_id(image) if running else "",
        "ready": ready,
        "started": running,
        "restartCount": restarts,
        "state": state,
    }


def pod(
    name: str, *, injected_from: dict[str, Any] | None = None, age: int = 0, ready: bool = True
) -> dict[str, Any]:
    """A pod as the webhook injected it (default: the old images), its native sidecar running."""
    base = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
    }
    source = ss.parse_sidecarset(injected_from or sidecarset(OLD, agent=None))
    injected, records = ss.inject(base, [source], now=NOW - timedelta(hours=1))
    assert records, "the pod must be injected"
    injected["metadata"]["uid"] = f"uid-{name}"
    stamp = (NOW - timedelta(minutes=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    injected["metadata"]["creationTimestamp"] = stamp
    injected["spec"]["nodeName"] = "node-1"
    native = {c["name"] for c in source.native_sidecars}
    injected["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": stamp}
        ],
        "initContainerStatuses": [
            status_of(c["name"], c["image"], ready=ready)
            if c["name"] in native
            else {**status_of(c["name"], c["image"], ready=True), "state": {"terminated": {"exitCode": 0}}}
            for c in injected["spec"]["initContainers"]
        ],
        "containerStatuses": [
            status_of(c["name"], c["image"], ready=ready) for c in injected["spec"]["containers"]
        ],
    }
    return injected


def apply(pod_obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The pod after the executor's strategic merge patch (both container lists merge by name)."""
    result = copy.deepcopy(pod_obj)
    result["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    for field in ("containers", "initContainers"):
        for change in (patch.get("spec") or {}).get(field) or []:
            for c in result["spec"][field]:
                if c["name"] == change["name"]:
                    c["image"] = change["image"]
    return result


def kubelet_restarts(pod_obj: dict[str, Any], *, ready: bool) -> dict[str, Any]:
    """What the kubelet reports once it restarted the native sidecars whose image changed (the restartable
    init containers, never the completed plain ones)."""
    result = copy.deepcopy(pod_obj)
    specs = {c["name"]: c for c in result["spec"]["initContainers"]}
    for status in result["status"]["initContainerStatuses"]:
        spec = specs[status["name"]]
        if spec.get("restartPolicy") == "Always" and status["image"] != spec["image"]:
            status.update(
                status_of(spec["name"], spec["image"], ready=ready, restarts=status["restartCount"] + 1)
            )
    result["status"]["conditions"][0]["status"] = "True" if ready else "False"
    return result


def names(upgrades: list[Any]) -> list[str]:
    return [u.pod for u in upgrades]


def test_native_sidecar_image_is_patched_in_init_containers_and_its_image_id_recorded() -> None:
    p = pod("a")
    [upgrade] = plan_sidecarset(sidecarset(NEW), [p], NOW).upgrades
    assert upgrade.images == {"proxy": NEW}
    assert upgrade.patch["spec"] == {"initContainers": [{"name": "proxy", "image": NEW}]}
    state = json.loads(upgrade.patch["metadata"]["annotations"][SIDECARSET_INPLACE_STATE_ANNOTATION])
    # The image id the sidecar runs now, read from status.initContainerStatuses: completion is a new one.
    assert state["mesh"]["lastContainerStatuses"] == {"proxy": {"imageID": image_id(OLD)}}
    entry = json.loads(upgrade.patch["metadata"]["annotations"][ss.HASH_ANNOTATION])["mesh"]
    assert entry["hash"] == ss.parse_sidecarset(sidecarset(NEW)).hash
    assert entry["sidecarList"] == ["proxy"]


@pytest.mark.parametrize(
    ("description", "injected", "target", "containers", "init_containers", "waited"),
    [
        (
            "ordinary and native sidecar both change: one patch, both restarted and waited for",
            sidecarset(OLD, agent="agent:1"),
            sidecarset(NEW, agent="agent:2"),
            [{"name": "agent", "image": "agent:2"}],
            [{"name": "proxy", "image": NEW}],
            {"agent", "proxy"},
        ),
        (
            "only the ordinary sidecar changes: the native one is left alone",
            sidecarset(OLD, agent="agent:1"),
            sidecarset(OLD, agent="agent:2"),
            [{"name": "agent", "image": "agent:2"}],
            None,
            {"agent"},
        ),
        (
            "a plain init container's image changes beside the native sidecar: set in the spec (the API "
            "server allows it), not waited for (the kubelet does not run a completed init container again)",
            sidecarset(OLD, setup="setup:1"),
            sidecarset(NEW, setup="setup:2"),
            None,
            [{"name": "proxy", "image": NEW}, {"name": "setup", "image": "setup:2"}],
            {"proxy"},
        ),
    ],
)
def test_what_one_upgrade_patches_and_waits_for(
    description: str,
    injected: dict[str, Any],
    target: dict[str, Any],
    containers: list[dict[str, Any]] | None,
    init_containers: list[dict[str, Any]] | None,
    waited: set[str],
) -> None:
    [upgrade] = plan_sidecarset(target, [pod("a", injected_from=injected)], NOW).upgrades
    assert upgrade.patch["spec"].get("containers") == containers, description
    assert upgrade.patch["spec"].get("initContainers") == init_containers, description
    state = json.loads(upgrade.patch["metadata"]["annotations"][SIDECARSET_INPLACE_STATE_ANNOTATION])
    assert set(state["mesh"]["lastContainerStatuses"]) == waited, description


@pytest.mark.parametrize(
    ("description", "change"),
    [
        ("args", {"args": ["--concurrency", "2"]}),
        ("env", {"env": [{"name": "LOG", "value": "debug"}]}),
        ("resources", {"resources": {"requests": {"cpu": "100m"}}}),
        ("a readiness probe", {"readinessProbe": {"tcpSocket": {"port": 15021}}}),
        ("restartPolicy removed: no longer a sidecar", {"restartPolicy": None}),
    ],
)
def test_any_other_change_to_a_native_sidecar_waits_for_recreation(
    description: str, change: dict[str, Any]
) -> None:
    """Only the image changes in place (the API server refuses any other init container change on a running
    pod); as for ordinary sidecars, such pods are not upgradable and keep their spec until recreated."""
    target = sidecarset(NEW, maxUnavailable=5)
    proxy = target["spec"]["initContainers"][0]
    proxy.update({k: v for k, v in change.items() if v is not None})
    for key in [k for k, v in change.items() if v is None]:
        proxy.pop(key)
    result = plan_sidecarset(target, [pod("a"), pod("b")], NOW)
    assert result.upgrades == [], description
    assert result.not_upgradable == ["default/a", "default/b"], description


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ({}, ["p0"]),
        ({"paused": True}, []),
        ({"type": "NotUpdate"}, []),
        ({"partition": 3}, ["p0"]),
        ({"partition": 4}, []),
        ({"partition": "50%", "maxUnavailable": 4}, ["p0", "p1"]),
        ({"maxUnavailable": 2}, ["p0", "p1"]),
        ({"maxUnavailable": "100%"}, ["p0", "p1", "p2", "p3"]),
        ({"maxUnavailable": 0}, []),
        ({"selector": {"matchLabels": {"canary": "true"}}, "maxUnavailable": 4}, ["p2"]),
    ],
)
def test_native_sidecars_follow_the_ordinary_controls(strategy: dict[str, Any], expected: list[str]) -> None:
    pods = [pod(f"p{i}", age=i) for i in range(4)]
    pods[2]["metadata"]["labels"]["canary"] = "true"
    result = plan_sidecarset(sidecarset(NEW, **strategy), pods, NOW)
    assert names(result.upgrades) == expected


def test_rollout_in_batches_waits_for_each_restarted_sidecar() -> None:
    """4 pods, partition 2, maxUnavailable 1: one pod at a time, the next only once the kubelet restarted
    the previous pod's native sidecar on the new image and it is ready; two pods keep the old image."""
    spec = sidecarset(NEW, partition=2)
    pods = {f"p{i}": pod(f"p{i}", age=i) for i in range(4)}
    first = plan_sidecarset(spec, pods.values(), NOW)
    assert names(first.upgrades) == ["p0"] and first.expected_updated == 2
    pods["p0"] = apply(pods["p0"], first.upgrades[0].patch)
    # Patched, not restarted yet: the sidecar is ready on the old image id, so the pod is mid-upgrade.
    assert mid_upgrade("mesh", pods["p0"]) and not upgrade_complete("mesh", pods["p0"])
    assert plan_sidecarset(spec, pods.values(), NOW).upgrades == []
    pods["p0"] = kubelet_restarts(pods["p0"], ready=False)
    assert upgrade_complete("mesh", pods["p0"]) and not mid_upgrade("mesh", pods["p0"])
    assert plan_sidecarset(spec, pods.values(), NOW).upgrades == []  # restarted, not ready: busy
    pods["p0"] = kubelet_restarts(pods["p0"], ready=True)
    second = plan_sidecarset(spec, pods.values(), NOW)
    assert names(second.upgrades) == ["p1"]
    pods["p1"] = kubelet_restarts(apply(pods["p1"], second.upgrades[0].patch), ready=True)
    done = plan_sidecarset(spec, pods.values(), NOW)
    assert done.upgrades == [] and done.candidates == ["default/p2", "default/p3"]
    assert done.status["updatedPods"] == 2 and done.status["updatedReadyPods"] == 2
    assert [p["spec"]["initContainers"][0]["image"] for p in pods.values()] == [NEW, NEW, OLD, OLD]


def test_a_crash_looping_native_sidecar_can_be_fixed_forward() -> None:
    """A native sidecar that does not come back ready on its new image keeps the pod busy (the rollout
    stalls at maxUnavailable) but is not mid-upgrade, so a good image is rolled to it first."""
    pods = [pod("a", age=0), pod("b", age=1)]
    [bad] = plan_sidecarset(sidecarset("envoy:broken"), pods, NOW).upgrades
    pods[0] = apply(pods[0], bad.patch)
    proxy = pods[0]["status"]["initContainerStatuses"][0]
    proxy.update(ready=False, restartCount=3, state={"waiting": {"reason": "CrashLoopBackOff"}})
    pods[0]["status"]["conditions"][0]["status"] = "False"
    assert plan_sidecarset(sidecarset("envoy:broken"), pods, NOW).upgrades == []
    fixed = plan_sidecarset(sidecarset(NEW), pods, NOW)
    # a first and for free (it is unavailable already), then b in the slot maxUnavailable leaves.
    assert names(fixed.upgrades) == ["a", "b"]


def test_a_pod_without_the_native_sidecar_is_not_matched() -> None:
    p = pod("a")
    p["spec"]["initContainers"] = []
    result = plan_sidecarset(sidecarset(NEW), [p, pod("b")], NOW)
    assert result.status["matchedPods"] == 1 and names(result.upgrades) == ["b"]
