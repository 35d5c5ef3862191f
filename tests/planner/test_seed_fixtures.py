"""The seed's CloneSet YAML, applied unchanged, plans as the seed describes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.model import PlanInput
from services.kinds.cloneset.rules.plan import plan
from tests.planner.simulate import Cluster

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed"


def _load(name: str) -> dict[str, Any]:
    cloneset: dict[str, Any] = yaml.safe_load((SEED / name).read_text())
    return cloneset


def _input(cloneset: dict[str, Any]) -> PlanInput:
    raw = {"cloneSet": cloneset, "now": "2026-11-30T12:00:00Z"}
    return msgspec.json.decode(msgspec.json.encode(raw), type=PlanInput)


def test_seed_sample_creates_five_pods() -> None:
    result = plan(_input(_load("cloneset-sample.yaml")))
    assert result.rejected is None
    creates = [a for a in result.actions if isinstance(a, model.CreatePod)]
    assert len(creates) == 5
    assert all(a.object["metadata"]["namespace"] == "default" for a in creates)


def test_seed_sample_data_creates_a_bound_claim_per_pod_in_ops() -> None:
    cloneset = _load("cloneset-sample-data.yaml")
    result = plan(_input(cloneset))
    pods = [a for a in result.actions if isinstance(a, model.CreatePod)]
    assert len(pods) == len(result.actions) == 5
    for pod in pods:
        [claim] = pod.pvcs
        assert claim["metadata"]["name"] == f"cephfs-pvc-demo-sample-data-{pod.instance_id}"
        assert claim["metadata"]["namespace"] == "ops"
        assert claim["spec"]["storageClassName"] == "ceph-storageclass"
        mounts = pod.object["spec"]["containers"][0]["volumeMounts"]
        assert mounts == [{"name": "cephfs-pvc-demo", "mountPath": "/usr/share/nginx/html"}]
    cluster = Cluster(cloneset)
    cluster.run()
    assert len(cluster.pods) == len(cluster.pvcs) == 5
