"""Trails recorded by an earlier rollbook verify under this one: every round of CloneSet histories recorded
(by services/replay/simulation.py, through the planner's code path) under rules v2 before the planner was
reorganised into kind planners, and under rules v7 before PodActionRequested's schema 2 (its v1 payloads
read through the upcaster), replays to the same decisions. A change to the planner that alters what
it decides fails here unless it bumps RULES_VERSION (then the rounds are reported as not re-verifiable)."""

from __future__ import annotations

import gzip
import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from services.kinds.cloneset.rules.decisions import RULES_VERSION
from services.model.events import Envelope
from services.model.upcasting import DEFAULT_DECODER
from services.replay.verify import verify_workload

TRAILS = Path(__file__).resolve().parents[1] / "fixtures" / "trails"


def load(path: Path) -> tuple[str, list[Envelope]]:
    """The events as the store reads them back: each payload through the upcasting decoder at the
    schema_version it was recorded with (services/infra/store.py)."""
    recorded = json.loads(gzip.decompress(path.read_bytes()))
    return recorded["workload"], [_as_read(event) for event in recorded["events"]]


def _as_read(event: dict[str, Any]) -> Envelope:
    payload = DEFAULT_DECODER.decode(event["type"], event["schema_version"], json.dumps(event["payload"]))
    return Envelope(
        event_id=uuid.UUID(event["event_id"]),
        stream=event["stream"],
        stream_version=event["stream_version"],
        type=event["type"],
        schema_version=event["schema_version"],
        occurred_at=datetime.fromisoformat(event["occurred_at"]),
        causation_id=None if event["causation_id"] is None else uuid.UUID(event["causation_id"]),
        correlation_id=event["correlation_id"],
        payload=payload,
    )


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
