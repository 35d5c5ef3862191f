"""Trails recorded by an earlier rollbook verify under this one: every round of CloneSet histories recorded
(by services/replay/simulation.py, through the planner's code path) under rules v2 before the planner was
reorganised into kind planners replays to the same decisions. A change to the planner that alters what
it decides fails here unless it bumps RULES_VERSION (then the rounds are reported as not re-verifiable)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from services.model.events import Envelope
from services.planner.cloneset_decisions import RULES_VERSION
from services.replay.verify import verify_workload

TRAILS = Path(__file__).resolve().parents[1] / "fixtures" / "trails"


def load(path: Path) -> tuple[str, list[Envelope]]:
    recorded = json.loads(gzip.decompress(path.read_bytes()))
    events = msgspec.convert(recorded["events"], list[Envelope])
    return recorded["workload"], events


@pytest.mark.parametrize("path", sorted(TRAILS.glob("rules-v*.json.gz")), ids=lambda p: p.name)
def test_a_trail_recorded_before_verifies(path: Path) -> None:
    workload, events = load(path)
    namespace, name = workload.split("/")
    report = verify_workload(namespace, name, events)
    recorded_rules = int(path.name.split("-")[1].removeprefix("v"))
    if recorded_rules == RULES_VERSION:
        assert report.clean and report.rounds > 10 and report.decisions > 30, report.divergence
        assert report.skipped == {}
    else:  # older rules: not re-verifiable, never a false divergence
        assert report.clean and report.rounds == 0 and report.unverifiable > 0
