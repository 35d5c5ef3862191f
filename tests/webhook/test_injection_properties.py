"""Properties of injection over generated pods and SidecarSets: every sidecar present once, app containers
kept in order, injecting twice changes nothing, and the JSONPatch reproduces the injected pod."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.model import sidecarset as ss

NOW = datetime(2026, 11, 30, tzinfo=UTC)
NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h"])
PATHS = st.sampled_from(["/data", "/logs", "/cache", "/etc/conf"])


@st.composite
def mounts(draw: st.DrawFn) -> list[dict[str, Any]]:
    paths = draw(st.lists(PATHS, unique=True, max_size=3))
    return [{"name": "v" + p.replace("/", "-"), "mountPath": p} for p in paths]


@st.composite
def app_pod(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, unique=True, min_size=1, max_size=4))
    containers = [
        {
            "name": f"app-{n}",
            "image": "nginx:1",
            "volumeMounts": draw(mounts()),
            "env": [{"name": "TZ", "value": n}],
        }
        for n in names
    ]
    init = [
        {"name": f"init-{n}", "image": "busybox:1"} for n in draw(st.lists(NAMES, unique=True, max_size=2))
    ]
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": spec,
    }


@st.composite
def sidecarsets(draw: st.DrawFn) -> list[ss.SidecarSet]:
    count = draw(st.integers(min_value=1, max_value=3))
    used: set[str] = set()
    result = []
    for i in range(count):
        containers = []
        for n in draw(st.lists(NAMES, unique=True, max_size=3)):
            name = f"sc{i}-{n}"
            used.add(name)
            containers.append(
                {
                    "name": name,
                    "image": "agent:1",
                    "podInjectPolicy": draw(st.sampled_from([ss.BEFORE_APP, ss.AFTER_APP])),
                    "shareVolumePolicy": {"type": draw(st.sampled_from(["enabled", "disabled"]))},
                    "volumeMounts": draw(mounts()),
                    "transferEnv": [{"sourceContainerName": f"app-{draw(NAMES)}", "envName": "TZ"}],
                }
            )
        init = [
            {"name": f"sc{i}-init-{n}", "image": "busybox:1"}
            for n in draw(st.lists(NAMES, unique=True, max_size=2))
        ]
        if not containers and not init:
            init = [{"name": f"sc{i}-init-only", "image": "busybox:1"}]
        obj = {
            "apiVersion": ss.API_VERSION,
            "kind": "SidecarSet",
            "metadata": {"name": draw(st.sampled_from(["zeta", "alpha", "mid", "beta"])) + str(i)},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "containers": containers,
                "initContainers": init,
                "volumes": [{"name": "v-logs", "emptyDir": {}}],
            },
        }
        result.append(ss.parse_sidecarset(obj))
    return result


@settings(max_examples=150, deadline=None)
@given(pod=app_pod(), sets=sidecarsets())
def test_injection_properties(pod: dict[str, Any], sets: list[ss.SidecarSet]) -> None:
    injected, records = ss.inject(pod, sets, now=NOW)
    containers = [c["name"] for c in injected["spec"]["containers"]]
    init = [c["name"] for c in injected["spec"].get("initContainers") or []]
    assert len(containers) == len(set(containers)) and len(init) == len(set(init))
    expected_sidecars = {c["name"] for s in sets for c in s.containers}
    assert expected_sidecars <= set(containers)
    apps = [c["name"] for c in pod["spec"]["containers"]]
    assert [n for n in containers if n in apps] == apps  # app containers keep their order
    own_init = [c["name"] for c in pod["spec"].get("initContainers") or []]
    assert [n for n in init if n in own_init] == own_init
    injected_init = [n for n in init if n not in own_init]
    assert sorted(injected_init) == sorted(c["name"] for s in sets for c in s.init_containers)
    assert [n for n in injected_init] == sorted(injected_init)  # all AfterAppContainer: sorted by name
    for container in injected["spec"]["containers"]:
        paths = [m["mountPath"] for m in container.get("volumeMounts") or []]
        assert len(paths) == len(set(paths)), container  # the API server refuses duplicate mount paths
    volume_names = [v["name"] for v in injected["spec"].get("volumes") or []]
    assert len(volume_names) == len(set(volume_names))
    assert sorted(r.sidecarset for r in records) == [r.sidecarset for r in records]
    assert ss.apply_patch(pod, ss.json_patch(pod, injected)) == injected
    again, _ = ss.inject(injected, sets, now=NOW)
    assert again == injected  # a second admission (reinvocation, re-created pod) changes nothing
