"""How a planning round reads: the rollbook files one CloneSet round passes through (``next_step`` on a
state halfway through an in-place rollout, as bench/planner.py builds it) and how often it goes back to a
file it had already left. A round that reads top-down (the kind's folder, then the shared core) has few
returns.

    .venv/bin/python bench/call_path.py [--size 50] [--files]

Two readings of the same round. "Read once": each function taken the first time it is called, as a reader
following the round meets it; "as run": every call and return, loops included. For each: the files, and
the returns (a step into a file seen earlier in the sequence, consecutive repeats folded). ``--files``
prints the read-once sequence.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.planner import rollout_state  # noqa: E402
from services.planner.kinds import CLONESET, Round, next_step  # noqa: E402

SERVICES = str(ROOT / "services") + "/"


def traced(run: Callable[[], Any]) -> tuple[list[str], list[str]]:
    """The rollbook files of the functions ``run()`` calls, each function at its first call (read once),
    and the files the running frame is in, call after call and return after return (as run)."""
    read_once: list[str] = []
    as_run: list[str] = []
    seen: set[Any] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        running = frame if event == "call" else frame.f_back  # after a return, the caller runs
        if running is None or not running.f_code.co_filename.startswith(SERVICES):
            return
        name = running.f_code.co_filename[len(SERVICES) :]
        as_run.append(name)
        if event == "call" and frame.f_code not in seen:
            seen.add(frame.f_code)
            read_once.append(name)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return folded(read_once), folded(as_run)


def folded(path: list[str]) -> list[str]:
    result: list[str] = []
    for name in path:
        if not result or result[-1] != name:
            result.append(name)
    return result


def returns(path: list[str]) -> int:
    """Steps into a file the sequence had already left."""
    seen: set[str] = set()
    count = 0
    for name in path:
        count += name in seen
        seen.add(name)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--files", action="store_true", help="print the read-once sequence of files")
    args = parser.parse_args()
    recorder, _ = rollout_state(args.size)
    state = recorder.state
    step: list[Any] = []
    read_once, as_run = traced(lambda: step.append(next_step(CLONESET, state)))
    assert isinstance(step[0], Round), "the round decides something"
    print(f"planning round (next_step, a CloneSet of {args.size} pods mid-rollout)")
    print(f"  read once: {len(set(read_once))} files, {returns(read_once)} returns to a file already left")
    print(f"  as run:    {len(set(as_run))} files, {returns(as_run)} returns to a file already left")
    if args.files:
        for name in read_once:
            print(f"    {name}")


if __name__ == "__main__":
    main()
