"""What the shadow trail costs per observation, against its ceiling: the planner's own work on the same
observed states (fold + plan), which the trail cannot go below since it plans every observed state.

    .venv/bin/python bench/shadow.py [--pods 10,50,200] [--repeat 3]

For each size, a CloneSet of that many pods is created and rolled out in place one pod at a time, as
OpenKruise would (tests/planner/kruise_observations.py): 7 observations per pod plus the CloneSet's. The
trail (services/planner/shadow_trail.py) folds every observation; the ceiling folds the same observations
into a WorkloadState and runs the planner (``plan``) once per observation. Prints the best wall time of
each, the time per observation and the ratio ceiling / trail (1.0 = the trail adds nothing to planning every
state).
Planning every observed state makes a rollout's cost grow with pods x observations (n^2 for a rollout of
n pods): the per-observation figure shows that growth.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.kinds.cloneset.rules.decisions import RULES_VERSION  # noqa: E402
from services.kinds.cloneset.rules.plan import plan  # noqa: E402
from services.kinds.cloneset.rules.workload_state import WorkloadState  # noqa: E402
from services.model.events import Envelope  # noqa: E402
from services.planner.shadow_trail import ShadowTrail  # noqa: E402
from tests.planner.kruise_observations import KruiseLog  # noqa: E402

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def instance(n: int) -> str:
    chars = []
    for _ in range(5):
        n, r = divmod(n, len(ALPHABET))
        chars.append(ALPHABET[r])
    return "".join(chars)


def observations(pods: int) -> list[Envelope]:
    log = KruiseLog(replicas=pods, maxUnavailable=1)
    log.write_status()
    names = []
    for n in range(pods):
        names.append(log.create_pod(instance(n), ready=False))
        log.set_ready(names[-1])
    log.write_status()
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    for name in reversed(names):
        log.start_in_place(name)
        log.patch_in_place(name)
        log.set_ready(name)
        log.write_status()
    return log.envelopes


def trail(envelopes: list[Envelope]) -> int:
    shadow = ShadowTrail("default", "web", True, RULES_VERSION)
    return sum(len(shadow.step(e)) for e in envelopes)


def ceiling(envelopes: list[Envelope]) -> int:
    state = WorkloadState("default", "web")
    planned = 0
    for envelope in envelopes:
        state.fold(envelope)
        if state.cloneset is not None and state.now is not None:
            plan(state.plan_input())
            planned += 1
    return planned


def best(work: object, envelopes: list[Envelope], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work(envelopes)  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="10,50,200", help="comma-separated CloneSet sizes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    header = ("pods", "observations", "events", "trail s", "ms/obs", "ceiling s", "ratio")
    print("{:>6} {:>12} {:>7} {:>9} {:>8} {:>10} {:>6}".format(*header))
    for pods in (int(p) for p in args.pods.split(",")):
        envelopes = observations(pods)
        events = trail(envelopes)
        spent = best(trail, envelopes, args.repeat)
        floor = best(ceiling, envelopes, args.repeat)
        print(
            f"{pods:>6} {len(envelopes):>12} {events:>7} {spent:>9.3f} {1000 * spent / len(envelopes):>8.3f}"
            f" {floor:>10.3f} {floor / spent:>6.2f}"
        )


if __name__ == "__main__":
    main()
