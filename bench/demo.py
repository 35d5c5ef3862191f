"""How long `rollbook demo` takes from nothing running to everything stopped (the goal: under 60 s).

    .venv/bin/python bench/demo.py [--runs N] [--configured]

Each run is `python -m services.cli.main demo` in a fresh data dir: embedded Postgres and NATS (initdb
included), or with --configured the servers of ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL. Prints each
run's wall time and the per-step times the demo reports, then min / median / max.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"✓ (.+?) \((\d+\.\d)s, total (\d+\.\d)s\)", re.S)


def run_once(configured: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="rollbook-demo-bench-") as data_dir:
        env = dict(os.environ, ROLLBOOK_DATA_DIR=data_dir, COLUMNS="200")
        if not configured:
            env = {k: v for k, v in env.items() if k not in ("ROLLBOOK_DATABASE_URL", "ROLLBOOK_NATS_URL")}
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "demo"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        wall = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"demo failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    for text, step, _total in STEP.findall(result.stdout):
        print(f"    {float(step):5.1f}s  {' '.join(text.split())[:90]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--configured", action="store_true", help="use ROLLBOOK_DATABASE_URL/NATS_URL")
    args = parser.parse_args()
    walls = []
    for index in range(args.runs):
        print(f"run {index + 1}:")
        walls.append(run_once(args.configured))
        print(f"  wall {walls[-1]:.1f}s")
    mode = "configured servers" if args.configured else "embedded servers"
    print(
        f"rollbook demo ({mode}), {len(walls)} run(s): min {min(walls):.1f}s, "
        f"median {statistics.median(walls):.1f}s, max {max(walls):.1f}s (goal < 60s)"
    )


if __name__ == "__main__":
    main()
