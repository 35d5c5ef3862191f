"""Time to plan one round for CloneSets of 1,000 / 10,000 / 50,000 pods, mid-rollout.

    .venv/bin/python bench/planner.py [--sizes 1000,10000,50000] [--repeat 5]

Prints, per size and update type, the best wall and CPU time of ``plan()`` on a decoded input (CPU time
is the fairer figure on a shared machine), the per-pod cost
(so the growth is visible: flat per-pod cost = linear) and the time of ``plan_json`` (decode + plan +
encode) for reference. Goal: 10,000 pods in at most 50 ms, growth no faster than n log n.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from services.planner.plan import plan, plan_json  # noqa: E402
from tests.planner.builders import cloneset, plan_input, revision_record, running_pod, with_image  # noqa: E402

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def instance_id(n: int) -> str:
    chars = []
    for _ in range(5):
        n, r = divmod(n, len(ALPHABET))
        chars.append(ALPHABET[r])
    return "".join(chars)


def state(size: int, update_type: str) -> tuple[object, bytes]:
    v1 = cloneset(replicas=size, strategy={"type": update_type, "maxUnavailable": "20%", "partition": "10%"})
    v2 = with_image(v1, "nginx:mainline")
    v2["status"] = {"currentRevision": revision_record(v1, 1)["metadata"]["name"]}
    template_v1, template_v2 = running_pod(v1, "bbbbb"), running_pod(v2, "bbbbb")
    pods = []
    for i in range(size):
        ident = instance_id(i)
        base = template_v2 if i % 2 else template_v1  # half updated: mid-rollout
        pod = msgspec.json.decode(msgspec.json.encode(base).replace(b"bbbbb", ident.encode()))
        pod["spec"]["nodeName"] = f"node-{i % 97}"
        if i % 50 == 0:
            pod["status"]["conditions"][0]["status"] = "False"  # a few not ready
        pods.append(pod)
    revs = [revision_record(v1, 1), revision_record(v2, 2)]
    request = plan_input(v2, pods, revs)
    raw = msgspec.json.encode(
        {"cloneSet": v2, "pods": pods, "pvcs": [], "revisions": revs, "now": "2026-11-30T12:00:00Z"}
    )
    return request, raw


def best(fn: object, repeat: int, clock: object = time.perf_counter) -> float:
    """Best of ``repeat`` runs; the machine is shared, so the minimum is the least disturbed figure."""
    times = []
    for _ in range(repeat):
        start = clock()  # type: ignore[operator]
        fn()  # type: ignore[operator]
        times.append(clock() - start)  # type: ignore[operator]
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'pods':>7} {'type':<18} {'plan ms':>9} {'cpu ms':>8} {'us/pod':>8} {'cpu us/pod':>10} "
        f"{'plan_json ms':>13} {'actions':>8}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        for update_type in ("ReCreate", "InPlaceIfPossible"):
            request, raw = state(size, update_type)
            result = plan(request)  # type: ignore[arg-type]
            seconds = best(lambda r=request: plan(r), args.repeat)  # type: ignore[misc]
            cpu = best(lambda r=request: plan(r), args.repeat, time.process_time)  # type: ignore[misc]
            json_seconds = best(lambda d=raw: plan_json(d), max(1, args.repeat // 2))  # type: ignore[misc]
            print(
                f"{size:>7} {update_type:<18} {seconds * 1000:>9.1f} {cpu * 1000:>8.1f} "
                f"{seconds / size * 1e6:>8.2f} {cpu / size * 1e6:>10.2f} "
                f"{json_seconds * 1000:>13.1f} {len(result.actions):>8}"
            )


if __name__ == "__main__":
    main()
