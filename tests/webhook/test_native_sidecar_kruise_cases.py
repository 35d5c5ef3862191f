"""OpenKruise master's unit cases for native sidecars (init containers with ``restartPolicy: Always``), as
tables over rollbook's own rules: the hashes (``pkg/control/sidecarcontrol/hash_test.go``), injection of
native sidecar init containers by two SidecarSets (``pkg/webhook/pod/mutating/sidecarset_test.go``,
TestInjectInitContainer) and which injected names count as sidecars for in-place upgrades (``buildSidecars``:
"only insert k8s native sidecar container for in-place update"). The admission case OpenKruise refuses
(a RollingUpdate with native sidecars) is accepted here: tests/webhook/test_sidecarset_admission_wording.py.
The resourcesPolicy cases on native sidecars are in tests/webhook/test_kruise19_rules.py."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from services.model import sidecarset as ss
from tests.webhook.test_injection_rules import make_sidecarset

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def kruise_hash_case(init: dict[str, Any] | None) -> dict[str, Any]:
    """hash_test.go's SidecarSet: one container ``container1`` on ``test-image``, optionally one init
    container on the same image (named ``init1``: OpenKruise's case reuses ``container1``, a name rollbook's
    validation refuses as a duplicate)."""
    spec: dict[str, Any] = {"containers": [{"name": "container1", "image": "test-image"}]}
    if init is not None:
        spec["initContainers"] = [{"name": "init1", "image": "test-image", **init}]
    return make_sidecarset("test-sidecar-set", **spec)


def hashes(obj: dict[str, Any]) -> tuple[str, str]:
    parsed = ss.parse_sidecarset(obj)
    return parsed.hash, parsed.hash_without_image


# (case as OpenKruise names it, init container, whether both hashes differ from the containers-only case)
HASH_CASES = [
    ("containers", None, False),
    ("containers and initContainers", {}, False),  # a plain init container does not count
    ("containers and initContainers with restartPolicy=Always", {"restartPolicy": "Always"}, True),
]


@pytest.mark.parametrize(("case", "init", "differs"), HASH_CASES, ids=[c[0] for c in HASH_CASES])
def test_hash_counts_init_containers_only_with_a_native_sidecar(
    case: str, init: dict[str, Any] | None, differs: bool
) -> None:
    base_hash, base_without = hashes(kruise_hash_case(None))
    obj = kruise_hash_case(init)
    hash_, without = hashes(obj)
    assert (hash_ != base_hash, without != base_without) == (differs, differs), case
    # A new container image gives a new hash and keeps the without-image hash (TestSidecarSetHash and
    # TestSidecarSetHashWithoutImage change Containers[0].Image).
    changed = copy.deepcopy(obj)
    changed["spec"]["containers"][0]["image"] = "new-image"
    new_hash, new_without = hashes(changed)
    assert new_hash != hash_ and new_without == without, case
    # The same holds for the native sidecar's image: that is what makes it upgradable in place.
    if init is not None and init.get("restartPolicy") == "Always":
        changed["spec"]["initContainers"][0]["image"] = "new-image"
        assert hashes(changed)[0] not in {hash_, new_hash} and hashes(changed)[1] == without


def kruise_pod() -> dict[str, Any]:
    """pod1 of sidecarset_test.go: init container ``init-0``, app ``nginx`` with env hello1/hello2 and two
    mounts."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "test-pod", "namespace": "default", "labels": {"app": "suxing-test"}},
        "spec": {
            "initContainers": [{"name": "init-0", "image": "busybox:1.0.0"}],
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx:1.15.1",
                    "env": [{"name": "hello1", "value": "world1"}, {"name": "hello2", "value": "world2"}],
                    "volumeMounts": [
                        {"name": "volume-a", "mountPath": "/a/b"},
                        {"name": "volume-b", "mountPath": "/e/f"},
                    ],
                }
            ],
            "volumes": [{"name": "volume-a"}, {"name": "volume-b"}],
        },
    }


def init_sidecarset(name: str, init_name: str, **init_fields: Any) -> dict[str, Any]:
    """sidecarSetWithInitContainer: one init container (``dns-e-image:1.0``, mounting ``volume-1``, taking
    ``hello2`` from ``nginx``), renamed and made a native sidecar as TestInjectInitContainer does."""
    init = {
        "name": init_name,
        "image": "dns-e-image:1.0",
        "restartPolicy": "Always",
        "volumeMounts": [{"name": "volume-1", "mountPath": "/v1"}],
        "transferEnv": [{"sourceContainerName": "nginx", "envName": "hello2"}],
        **init_fields,
    }
    return make_sidecarset(
        name,
        selector={"matchLabels": {"app": "suxing-test"}},
        initContainers=[init],
        volumes=[{"name": "volume-1", "emptyDir": {}}],
    )


def test_inject_native_sidecar_init_containers_of_two_sidecarsets() -> None:
    """TestInjectInitContainer "inject initContainers-1": each SidecarSet's hash entries name its native
    sidecar in ``sidecarList`` and the injected list names both. OpenKruise's ``hot-init`` (HotUpgrade)
    becomes two init containers and a working-container annotation there; rollbook injects HotUpgrade as
    ColdUpgrade (docs/sidecarset.md), so it is one init container here: 3 init containers, not 4."""
    first = init_sidecarset("sidecarset-1", "init-1")
    second = init_sidecarset(
        "sidecarset-2",
        "hot-init",
        upgradeStrategy={"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:v1"},
    )
    parsed = [ss.parse_sidecarset(first), ss.parse_sidecarset(second)]
    injected, records = ss.inject(kruise_pod(), parsed, now=NOW)
    annotations = injected["metadata"]["annotations"]
    assert annotations[ss.INJECTED_LIST_ANNOTATION] == "sidecarset-1,sidecarset-2"
    for key in (ss.HASH_ANNOTATION, ss.HASH_WITHOUT_IMAGE_ANNOTATION):
        entries = json.loads(annotations[key])
        assert entries["sidecarset-1"]["sidecarList"] == ["init-1"]
        assert entries["sidecarset-2"]["sidecarList"] == ["hot-init"]
    assert json.loads(annotations[ss.HASH_ANNOTATION])["sidecarset-1"]["hash"] == parsed[0].hash
    # The pod's own init container first, then the injected ones sorted by name (AfterAppContainer).
    assert [c["name"] for c in injected["spec"]["initContainers"]] == ["init-0", "hot-init", "init-1"]
    assert [v["name"] for v in injected["spec"]["volumes"]] == ["volume-a", "volume-b", "volume-1"]
    assert sorted(r.sidecarset for r in records) == ["sidecarset-1", "sidecarset-2"]


@pytest.mark.parametrize(
    ("description", "init_containers", "sidecar_list"),
    [
        (
            "a native sidecar is a sidecar of the pod (upgraded in place)",
            [{"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"}],
            ["agent", "proxy"],
        ),
        (
            "a plain init container is not (it runs once, at creation)",
            [{"name": "setup", "image": "busybox:1"}],
            ["agent"],
        ),
        (
            "both: only the native one",
            [
                {"name": "setup", "image": "busybox:1"},
                {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"},
            ],
            ["agent", "proxy"],
        ),
    ],
)
def test_sidecar_list_names_native_sidecars_only(
    description: str, init_containers: list[dict[str, Any]], sidecar_list: list[str]
) -> None:
    obj = make_sidecarset(
        "mesh",
        selector={"matchLabels": {"app": "suxing-test"}},
        containers=[{"name": "agent", "image": "agent:1"}],
        initContainers=init_containers,
    )
    injected, _ = ss.inject(kruise_pod(), [ss.parse_sidecarset(obj)], now=NOW)
    entry = json.loads(injected["metadata"]["annotations"][ss.HASH_ANNOTATION])["mesh"]
    assert entry["sidecarList"] == sidecar_list, description


def test_native_sidecar_injection_keeps_transfer_env_share_volumes_and_order() -> None:
    """buildSidecars treats a native sidecar init container as any sidecar: transferEnv copies ``hello2``
    from ``nginx``, shareVolumePolicy adds the app's mounts after its own, and BeforeAppContainer puts it
    before the pod's own init containers."""
    obj = init_sidecarset(
        "mesh", "proxy", podInjectPolicy="BeforeAppContainer", shareVolumePolicy={"type": "enabled"}
    )
    injected, _ = ss.inject(kruise_pod(), [ss.parse_sidecarset(obj)], now=NOW)
    proxy, pod_init = injected["spec"]["initContainers"]
    assert (proxy["name"], pod_init["name"]) == ("proxy", "init-0")
    assert proxy["restartPolicy"] == "Always"
    assert {"name": "hello2", "value": "world2"} in proxy["env"]
    assert [m["mountPath"] for m in proxy["volumeMounts"]] == ["/v1", "/a/b", "/e/f"]
    assert "transferEnv" not in proxy and "shareVolumePolicy" not in proxy
