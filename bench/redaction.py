# ruff: noqa: E501  (the objects are written as the API returns them, one field per line where it fits)
"""What redaction costs the watcher per observation (services/model/redaction.py, docs/events.md).

    .venv/bin/python bench/redaction.py [--objects 2000] [--env 8] [--repeat 5]

For a pod and a CloneSet shaped as the API server returns them (``--env`` literal env values per
container, two containers plus an init container, the last-applied annotation on the CloneSet), prints the
best of ``--repeat`` runs of: the redaction of one object (µs), and in the same run the ceiling it is
compared with: decoding the object's watch line (what the watcher does to every watch event anyway) and
encoding the recorded observation. Pure CPU, one process, no server.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from services.model.redaction import RedactionPolicy  # noqa: E402


def _container(name: str, env: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": f"registry.example.com/team/{name}:1.2.3",
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(env)]
        + [{"name": "DB_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _pod_spec(env: int) -> dict[str, Any]:
    return {
        "containers": [_container("app", env), _container("proxy", env)],
        "initContainers": [_container("migrate", env)],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-x7k2p"}}],
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
    }


def pod(env: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-x7k2p",
            "namespace": "team-a",
            "uid": "3b2f6c1e-8d7a-4f52-9c1b-2a6e0d9f4b71",
            "resourceVersion": "123456",
            "labels": {"app": "web", "controller-revision-hash": "web-7656fc4998", "apps.kruise.io/instance-id": "x7k2p"},
            "annotations": {"rollbook.io/action-id": "5f0c2a34-61b5-5d8e-9a57-8b7e0b3c9d12", "owner": "team-a"},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web", "uid": "u", "controller": True}],
        },
        "spec": _pod_spec(env) | {"nodeName": "node-3"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-06T05:00:00Z"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled", "InPlaceUpdateReady")],
            "containerStatuses": [{"name": n, "ready": True, "restartCount": 0, "image": "i", "imageID": "sha256:abc", "containerID": "containerd://1"} for n in ("app", "proxy")],
        },
    }  # fmt: skip


def cloneset(env: int) -> dict[str, Any]:
    obj = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "team-a", "uid": "u", "resourceVersion": "1", "generation": 3, "labels": {"app": "web"}},
        "spec": {
            "replicas": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": _pod_spec(env)},
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": "20%", "partition": 0},
        },
        "status": {"replicas": 10, "readyReplicas": 10, "updatedReplicas": 10, "updateRevision": "web-7656fc4998"},
    }  # fmt: skip
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(obj)}
    return obj


def best_us(work: Callable[[], object], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(count):
            work()
        best = min(best, time.perf_counter() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=2000, help="observations per timed run")
    parser.add_argument("--env", type=int, default=8, help="literal env values per container")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs; the best is printed")
    args = parser.parse_args()
    policy = RedactionPolicy(b"k" * 32)
    encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder()
    print(
        f"per observation, best of {args.repeat} runs of {args.objects}; {args.env} env values per container"
    )
    for kind, obj in (("Pod", pod(args.env)), ("CloneSet", cloneset(args.env))):
        line = encoder.encode({"type": "MODIFIED", "object": obj})
        redacted = policy.redact_object(kind, copy.deepcopy(obj))
        redact = best_us(
            lambda obj=obj, kind=kind: policy.redact_object(kind, obj), args.objects, args.repeat
        )
        decode = best_us(lambda line=line: decoder.decode(line), args.objects, args.repeat)
        encode = best_us(lambda redacted=redacted: encoder.encode(redacted), args.objects, args.repeat)
        print(
            f"{kind:9} {len(line):6,} bytes  redaction {redact:8.1f} us   decode (ceiling) {decode:7.1f} us"
            f"   encode {encode:7.1f} us   redaction / decode {redact / decode:5.1f}x"
        )


if __name__ == "__main__":
    main()
