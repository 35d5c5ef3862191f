"""SidecarSet upgrade round: how long the pure decision takes for N matched pods.

    python -m bench.sidecarset_round [N ...]     # default 100 1000 5000

Pods are built the way the webhook injects them (the seed's test-sidecarset), all running and ready, half
already updated; the SidecarSet's image changed, partition 10%, maxUnavailable 10%. Prints the median and
p99 of ``plan_sidecarset`` over repeated rounds, and of the canonical input encoding + hash the planner
service adds per round.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from services.kinds.sidecarset.rules.upgrade import plan_sidecarset
from services.model import sidecarset as ss

SEED = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "seed" / "sidecarset-test-sidecarset.yaml"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def sidecarset(image: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(SEED.read_text())
    obj["spec"]["containers"][0]["image"] = image
    obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "partition": "10%", "maxUnavailable": "10%"}
    return obj


def pods(count: int) -> list[dict[str, Any]]:
    old, new = ss.parse_sidecarset(sidecarset("centos:6.7")), ss.parse_sidecarset(sidecarset("centos:7"))
    result = []
    for i in range(count):
        base = {
            "metadata": {"name": f"web-{i}", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.15.1"}]},
        }
        pod, _ = ss.inject(base, [new if i % 2 else old], now=NOW)
        stamp = (NOW - timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["metadata"].update(uid=f"uid-{i}", creationTimestamp=stamp)
        pod["spec"]["nodeName"] = f"node-{i % 50}"
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": c["image"] + "@sha256:x",
                    "restartCount": 0,
                }
                for c in pod["spec"]["containers"]
            ],
        }
        result.append(copy.deepcopy(pod))
    return result


def measure(count: int) -> None:
    spec, matched = sidecarset("centos:7"), pods(count)
    encoder = msgspec.json.Encoder(order="sorted")
    rounds = max(5, min(200, 20000 // count))
    decide, encode = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        result = plan_sidecarset(spec, matched, NOW)
        decide.append(time.perf_counter() - started)
        started = time.perf_counter()
        hashlib.sha256(
            encoder.encode({"sidecarSet": spec, "pods": matched, "now": NOW.isoformat()})
        ).hexdigest()
        encode.append(time.perf_counter() - started)
    decide.sort()
    encode.sort()

    def p99(values: list[float]) -> float:
        return values[min(len(values) - 1, int(len(values) * 0.99))] * 1000

    print(
        f"{count:>6} matched pods: plan_sidecarset p50 {statistics.median(decide) * 1000:7.2f} ms"
        f"  p99 {p99(decide):7.2f} ms | input encode+sha256 p50 {statistics.median(encode) * 1000:6.2f} ms"
        f"  ({len(result.upgrades)} upgrades, {rounds} rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("counts", type=int, nargs="*", default=[100, 1000, 5000], help="matched pods")
    for count in parser.parse_args().counts:
        measure(count)


if __name__ == "__main__":
    main()
