"""Start-up time of the `rollbook` command: `--help`, `plan`, `inject` and `--version`, each a fresh process.

    .venv/bin/python bench/cli_startup.py [--repeat 7]

Prints, per command, the best and the median wall time of a whole process (start, import, run, exit), the
ceiling measured in the same run (a bare `python -c pass` with the same interpreter: no CLI can start
faster) and the ratio to it, the best CPU time (user + system, what the command costs whatever else the
machine runs) with its ratio to the ceiling's, and which heavy packages the command imported (none is the
point: they are imported where used). Goal: under 0.3 s for `--help`, `plan` and `inject`, judged on CPU
time, since on a shared machine the wall time mostly measures the other processes.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.planner.builders import cloneset, revision_record, running_pod, with_image  # noqa: E402

SEED = REPO_ROOT / "tests" / "fixtures" / "seed"
GOAL_SECONDS = 0.3
# Packages a command must import only when it uses them (services/cli/main.py's docstring).
HEAVY = ("kubernetes_asyncio", "alembic", "sqlalchemy", "nats", "asyncpg", "aiohttp")
# Runs the CLI in-process after the interpreter starts, then reports the heavy packages it imported.
PROBE = """
import sys
sys.argv = ["rollbook", *sys.argv[1:]]
from services.cli.main import main
try:
    main()
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY_PACKAGES))
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
""".replace("HEAVY_PACKAGES", repr(HEAVY))


def plan_state(directory: Path) -> Path:
    """A mid-rollout CloneSet of 10 pods as `rollbook plan -f` takes it."""
    v1 = cloneset(replicas=10, strategy={"type": "InPlaceIfPossible", "maxUnavailable": 2})
    v2 = with_image(v1, "nginx:mainline")
    v2["status"] = {"currentRevision": revision_record(v1, 1)["metadata"]["name"]}
    pods = [running_pod(v1, f"p{i:04d}") for i in range(10)]
    state = {
        "cloneSet": v2,
        "pods": pods,
        "pvcs": [],
        "revisions": [revision_record(v1, 1), revision_record(v2, 2)],
        "now": "2026-11-30T12:00:00Z",
    }
    path = directory / "state.json"
    path.write_text(json.dumps(state))
    return path


def timed(argv: list[str], repeat: int) -> tuple[float, float, float]:
    """(best wall, median wall, best CPU) seconds of ``argv`` as a fresh process (CPU = the child's user +
    system time: what the command costs, whatever else the shared machine runs); fails loudly if the
    command fails."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.decode()}")
    return min(walls), statistics.median(walls), min(cpus)


def heavy_imports(arguments: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *arguments], cwd=REPO_ROOT, capture_output=True, text=True
    )
    found = [line for line in result.stderr.splitlines() if line.startswith("HEAVY=")]
    return found[-1].removeprefix("HEAVY=") or "none" if found else f"probe failed: {result.stderr[-200:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per command (best and median shown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        state = plan_state(Path(scratch))
        commands: list[tuple[str, list[str]]] = [
            ("--help", ["--help"]),
            ("--version", ["--version"]),
            ("plan -f state.json", ["plan", "-f", str(state)]),
            (
                "inject -f pod.yaml",
                [
                    "inject",
                    "-f",
                    str(SEED / "pod-test-pod.yaml"),
                    "--sidecarset",
                    str(SEED / "sidecarset-test-sidecarset.yaml"),
                    "--timestamp",
                    "2026-11-30T12:00:00",
                ],
            ),  # fmt: skip
        ]
        ceiling, ceiling_median, ceiling_cpu = timed([sys.executable, "-c", "pass"], args.repeat)
        print(f"rollbook start-up, {args.repeat} runs each (goal: < {GOAL_SECONDS} s)")
        print(
            f"{'command':24} {'best s':>7} {'median s':>8} {'x ceiling':>9} {'CPU s':>6} {'x ceiling':>9}"
            "  heavy packages imported"
        )
        print(
            f"{'python -c pass (ceiling)':24} {ceiling:7.3f} {ceiling_median:8.3f} {1.0:9.1f}"
            f" {ceiling_cpu:6.3f} {1.0:9.1f}  -"
        )
        for label, arguments in commands:
            best, median, cpu = timed([sys.executable, "-m", "services.cli.main", *arguments], args.repeat)
            # CPU decides: on the shared machine wall time mostly measures the other processes.
            verdict = "" if cpu < GOAL_SECONDS else f"  (over the {GOAL_SECONDS} s goal)"
            print(
                f"{label:24} {best:7.3f} {median:8.3f} {best / ceiling:9.1f} {cpu:6.3f}"
                f" {cpu / max(ceiling_cpu, 1e-3):9.1f}  {heavy_imports(arguments)}{verdict}"
            )


if __name__ == "__main__":
    main()
