"""Print a digest of every plan of a scripted rollout (run under several hash seeds)."""

from __future__ import annotations

import hashlib

from services.kinds.cloneset.rules.plan import encode_plan
from tests.planner.builders import cloneset, with_image
from tests.planner.simulate import Cluster


def main() -> None:
    strategy = {"type": "InPlaceIfPossible", "maxSurge": 1, "maxUnavailable": 2}
    cluster = Cluster(cloneset(strategy=strategy, claims=[{"metadata": {"name": "data"}, "spec": {}}]))
    cluster.run()
    cluster.cloneset = with_image(cluster.cloneset, "nginx:2")
    cluster.cloneset["spec"]["scaleStrategy"] = {"podsToDelete": [sorted(cluster.pods)[0]]}
    cluster.run()
    print(hashlib.sha256(b"".join(encode_plan(p) for p in cluster.history)).hexdigest(), len(cluster.history))


if __name__ == "__main__":
    main()
