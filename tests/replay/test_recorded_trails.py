"""Trails recorded by an earlier rollbook verify under this one: every round of CloneSet histories recorded
(by services/replay/simulation.py, through the planner's code path) under rules v2 before the planner was
reorganised into kind planners, and under rules v7 before PodActionRequested's schema 2 (its v1 payloads
read through the upcaster), replays to the same decisions. A change to the planner that alters what
it decides fails here unless it bumps RULES_VERSION (then the rounds are reported as not re-verifiable).
A recorded kind's trail has no planner rules: its observations carry what its fold needs, and one recorded
before they did folds again as recorded."""

from __future__ import annotations

import gzip
import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from services.kinds import registry
from services.kinds.cloneset.rules.decisions import RULES_VERSION
from services.model.events import Envelope, ObjectObserved, PodActionObserved
from services.model.timestamps import parse_kube_time
from services.model.upcasting import DEFAULT_DECODER
from services.replay.recorded import check_recorded
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


def test_a_statefulset_trail_recorded_before_born_verifies() -> None:
    """A StatefulSet's observations (made up, stored as the watcher stores them) and the trail the flight
    recorder (services/watcher/recorder.py) recorded from them before observations carried ``born``
    (services/kinds/recorded/rules.py, ``existed_before``). db-0's ADDED, the trail's first observation, came
    early in the second after db-0 was created, so that recorder took db-0 for a pod already there: it
    recorded its readiness, not its creation. The observations fold again into exactly that trail."""
    workload, events = load(TRAILS / "recorded-statefulset-before-born.json.gz")
    namespace, name = workload.split("/")
    kind = registry.KINDS["StatefulSet"]
    observed = [e for e in events if e.stream == kind.observed_stream(namespace, name)]
    recorded = [e for e in events if e.stream == kind.recorded_stream(namespace, name)]
    first = observed[0].payload
    assert isinstance(first, ObjectObserved) and first.kind == "Pod" and first.born is msgspec.UNSET
    created = parse_kube_time(first.object["metadata"]["creationTimestamp"])
    assert created is not None and created < observed[0].occurred_at.replace(microsecond=0)
    db0 = [
        e.payload.action
        for e in recorded
        if isinstance(e.payload, PodActionObserved) and e.payload.pod == "db-0"
    ]
    assert db0 == ["becameReady", "deletePod", "recreatePod", "becameReady"]  # no createPod

    report = check_recorded(kind, namespace, name, observed, recorded)
    assert report.divergence is None and report.pending == 0 and report.recorded == len(recorded) == 20

    # Had the watch's ADDED said born, the fold would give db-0's createPod first: not the trail stored.
    born = msgspec.structs.replace(observed[0], payload=msgspec.structs.replace(first, born=True))
    report = check_recorded(kind, namespace, name, [born, *observed[1:]], recorded)
    assert report.divergence is not None and report.divergence.startswith(
        "RevisionCreated at version 1 differs from the fold's PodActionObserved"
    ), report.describe()
    assert report.refolded == len(recorded) + 1
