"""One definition of "available" (services/model/availability.py), held in Python and SQL alike: every pod of
one table — lifecycle states, phases, conditions, terminating, Ready times and minReadySeconds, and a few
malformed objects — is judged by ``pod_available`` and by the SQL function of the same name (which the view
``unavailability`` is built on), and by the planner's ``PodView.cs_available``; all three must agree, and so
must the parts (``pod_in_service``, ``pod_ready_since``, ``workload_min_ready_seconds``). A rule changed on
one side only fails here."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.kinds.cloneset.rules.podstate import PodView
from services.model.availability import (
    INPLACE_STATE_ANNOTATIONS,
    min_ready_seconds,
    pod_available,
    pod_facts,
)

READY_AT = "2026-11-30T12:00:00Z"
READY_EPOCH = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()
LIFECYCLE = "lifecycle.apps.kruise.io/state"
NULL = object()  # a JSON null (None deletes)


def _pod(**changes: Any) -> dict[str, Any]:
    """A Running, Ready pod in lifecycle state Normal, changed by ``changes`` (paths with ``__``; None
    deletes, NULL writes a JSON null)."""
    pod: dict[str, Any] = {
        "metadata": {"name": "web-a", "labels": {LIFECYCLE: "Normal"}},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": READY_AT},
                {"type": "InPlaceUpdateReady", "status": "True"},
            ],
        },
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = pod
        for key in parents:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = None if value is NULL else value
    return pod


def _conditions(*conditions: Any) -> dict[str, Any]:
    return _pod(status__conditions=list(conditions))


READY = {"type": "Ready", "status": "True", "lastTransitionTime": READY_AT}


def _ready_since(value: Any) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": "Ready", "status": "True"}
    if value is not None:
        condition["lastTransitionTime"] = None if value is NULL else value
    return _conditions(condition)


STATE, OLD_STATE = INPLACE_STATE_ANNOTATIONS
RESIZE_STATE = json.dumps({"revision": "web-2", "rollbookResize": {"app": {"requests": {"cpu": "200m"}}}})
NO_RESIZE_STATE = json.dumps({"revision": "web-2", "updateResources": True})


def _resizing(
    *annotations: Any, lifecycle: str = "Updating", in_place_ready: str = "True", ready: str = "True"
) -> dict[str, Any]:
    """A pod in lifecycle ``lifecycle`` with these annotations (name, value, name, value, ...)."""
    pairs = dict(zip(annotations[::2], annotations[1::2], strict=True))
    return _pod(
        metadata__labels={LIFECYCLE: lifecycle},
        metadata__annotations={k: None if v is NULL else v for k, v in pairs.items()},
        status__conditions=[
            {"type": "Ready", "status": ready, "lastTransitionTime": READY_AT},
            {"type": "InPlaceUpdateReady", "status": in_place_ready},
        ],
    )


# (id, pod, minReadySeconds, seconds after READY_AT to judge at)
CASES: list[tuple[str, dict[str, Any], int, float]] = [
    ("normal", _pod(), 0, 0),
    ("no-lifecycle-label", _pod(metadata__labels={}), 0, 0),
    ("lifecycle-empty", _pod(metadata__labels={LIFECYCLE: ""}), 0, 0),
    ("lifecycle-null", _pod(metadata__labels={LIFECYCLE: None}), 0, 0),
    ("no-labels", _pod(metadata__labels=None), 0, 0),
    *[
        (f"lifecycle-{state}", _pod(metadata__labels={LIFECYCLE: state}), 0, 0)
        for state in ("PreparingNormal", "PreparingUpdate", "Updating", "Updated", "PreparingDelete")
    ],
    ("lifecycle-number", _pod(metadata__labels={LIFECYCLE: 5}), 0, 0),
    # rollbook's resize that restarts nothing: Updating, its in-place state (a JSON string) naming the
    # resize, stays in service; anything short of that does not.
    ("resize-updating", _resizing(STATE, RESIZE_STATE), 0, 0),
    ("resize-updating-old-annotation", _resizing(OLD_STATE, RESIZE_STATE), 0, 0),
    ("resize-new-annotation-first", _resizing(STATE, NO_RESIZE_STATE, OLD_STATE, RESIZE_STATE), 0, 0),
    ("resize-new-annotation-null", _resizing(STATE, NULL, OLD_STATE, RESIZE_STATE), 0, 0),
    ("resize-state-not-a-string", _resizing(STATE, {"rollbookResize": {}}), 0, 0),
    ("resize-state-not-json", _resizing(STATE, '{"rollbookResize": '), 0, 0),
    ("resize-state-without-it", _resizing(STATE, NO_RESIZE_STATE), 0, 0),
    ("resize-restarting", _resizing(STATE, RESIZE_STATE, in_place_ready="False"), 0, 0),
    ("resize-updated", _resizing(STATE, RESIZE_STATE, lifecycle="Updated"), 0, 0),
    ("resize-preparing-update", _resizing(STATE, RESIZE_STATE, lifecycle="PreparingUpdate"), 0, 0),
    ("resize-not-ready", _resizing(STATE, RESIZE_STATE, ready="False"), 0, 0),
    ("resize-min-ready", _resizing(STATE, RESIZE_STATE), 30, 60),
    *[
        (f"phase-{phase}", _pod(status__phase=phase), 0, 0)
        for phase in ("Pending", "Succeeded", "Failed", "Unknown")
    ],
    ("no-phase", _pod(status__phase=None), 0, 0),
    ("no-status", _pod(status=None), 0, 0),
    ("status-not-a-map", _pod(status="Running"), 0, 0),
    ("not-ready", _conditions({"type": "Ready", "status": "False", "lastTransitionTime": READY_AT}), 0, 0),
    ("ready-unknown", _conditions({"type": "Ready", "status": "Unknown"}), 0, 0),
    ("ready-boolean", _conditions({"type": "Ready", "status": True}), 0, 0),
    ("ready-without-status", _conditions({"type": "Ready"}), 0, 0),
    ("no-ready-condition", _conditions({"type": "ContainersReady", "status": "True"}), 0, 0),
    ("no-conditions", _pod(status__conditions=None), 0, 0),
    ("conditions-null", _pod(status__conditions=NULL), 0, 0),
    ("conditions-not-a-list", _pod(status__conditions=READY), 0, 0),
    ("no-in-place-condition", _conditions(READY), 0, 0),
    ("in-place-false", _conditions(READY, {"type": "InPlaceUpdateReady", "status": "False"}), 0, 0),
    ("in-place-unknown", _conditions(READY, {"type": "InPlaceUpdateReady", "status": "Unknown"}), 0, 0),
    ("in-place-without-status", _conditions(READY, {"type": "InPlaceUpdateReady"}), 0, 0),
    ("first-ready-false", _conditions({"type": "Ready", "status": "False"}, READY), 0, 0),
    ("first-ready-true", _conditions(READY, {"type": "Ready", "status": "False"}), 0, 0),
    (
        "first-in-place-true",
        _conditions(
            READY,
            {"type": "InPlaceUpdateReady", "status": "True"},
            {"type": "InPlaceUpdateReady", "status": "False"},
        ),
        0,
        0,
    ),
    ("odd-elements-before-ready", _conditions(5, "Ready", {"type": ["Ready"]}, READY), 0, 0),
    ("terminating", _pod(metadata__deletionTimestamp="2026-11-30T12:01:00Z"), 0, 0),
    ("deletion-null", _pod(metadata__deletionTimestamp=NULL), 0, 0),
    ("deletion-empty", _pod(metadata__deletionTimestamp=""), 0, 0),
    # minReadySeconds: Ready for strictly longer than it, from an RFC 3339 lastTransitionTime
    ("min-ready-passed", _pod(), 30, 30.5),
    ("min-ready-exactly", _pod(), 30, 30),
    ("min-ready-not-yet", _pod(), 30, 29),
    ("min-ready-negative", _pod(), -5, 0),
    ("min-ready-not-normal", _pod(metadata__labels={LIFECYCLE: "Updated"}), 30, 3600),
    ("min-ready-no-time", _ready_since(None), 30, 3600),
    ("no-time-min-ready-zero", _ready_since(None), 0, 0),
    ("time-null", _ready_since(NULL), 30, 3600),
    ("time-fraction", _ready_since("2026-11-30T12:00:00.500000Z"), 1, 1.4),
    ("time-fraction-passed", _ready_since("2026-11-30T12:00:00.5Z"), 1, 1.6),
    ("time-offset", _ready_since("2026-11-30T14:00:00+02:00"), 30, 31),
    ("time-offset-not-yet", _ready_since("2026-11-30T12:00:00-02:00"), 30, 31),
    ("time-naive", _ready_since("2026-11-30T12:00:00"), 30, 3600),
    ("time-space", _ready_since("2026-11-30 12:00:00Z"), 30, 3600),
    ("time-not-a-date", _ready_since("2026-02-30T12:00:00Z"), 30, 3600),
    ("time-hour-24", _ready_since("2026-11-30T24:00:00Z"), 30, 3600),
    ("time-seven-digits", _ready_since("2026-11-30T12:00:00.1234567Z"), 30, 3600),
    ("time-trailing-newline", _ready_since(READY_AT + "\n"), 30, 3600),
    ("time-number", _ready_since(1796040000), 30, 3600),
    ("time-garbage", _ready_since("yesterday"), 30, 3600),
]

WORKLOADS: list[tuple[str, Any]] = [
    ("absent", {"spec": {}}),
    ("no-spec", {}),
    ("zero", {"spec": {"minReadySeconds": 0}}),
    ("some", {"spec": {"minReadySeconds": 30}}),
    ("negative", {"spec": {"minReadySeconds": -3}}),
    ("largest", {"spec": {"minReadySeconds": 999_999_999}}),
    ("too-large", {"spec": {"minReadySeconds": 1_000_000_000}}),
    ("text", {"spec": {"minReadySeconds": "30"}}),
    ("fraction", {"spec": {"minReadySeconds": 1.5}}),
    ("boolean", {"spec": {"minReadySeconds": True}}),
    ("null", {"spec": {"minReadySeconds": None}}),
]


@pytest.fixture(scope="module")
def expected() -> list[tuple[str, bool, bool, float | None]]:
    """Python's answers: (id, available, in service, ready since)."""
    rows = []
    for name, pod, min_ready, after in CASES:
        facts = pod_facts(pod)
        rows.append(
            (name, pod_available(pod, min_ready, READY_EPOCH + after), facts.in_service, facts.ready_since)
        )
    return rows


def test_the_table_tells_both_ways() -> None:
    """The table is worth holding the two sides to: both answers occur, for each reason."""
    answers = {
        name: pod_available(pod, min_ready, READY_EPOCH + after) for name, pod, min_ready, after in CASES
    }
    assert answers["normal"] and answers["min-ready-passed"] and answers["time-offset"]
    assert not answers["lifecycle-PreparingNormal"] and not answers["phase-Pending"]
    assert not answers["terminating"] and not answers["in-place-unknown"] and not answers["min-ready-exactly"]
    assert not answers["time-naive"] and answers["no-time-min-ready-zero"]


@pytest.mark.asyncio(loop_scope="session")
async def test_sql_and_python_agree_on_every_pod(
    database_url: str, expected: list[tuple[str, bool, bool, float | None]]
) -> None:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        answers = []
        for name, pod, min_ready, after in CASES:
            at = datetime.fromtimestamp(READY_EPOCH + after, UTC)
            row = await connection.fetchrow(
                "SELECT pod_available($1::jsonb, $2, $3) AS available,"
                " pod_in_service($1::jsonb) AS in_service,"
                " extract(epoch FROM pod_ready_since($1::jsonb))::float8 AS ready_since",
                json.dumps(pod), min_ready, at,
            )  # fmt: skip
            answers.append((name, row["available"], row["in_service"], row["ready_since"]))
    finally:
        await connection.close()
    assert answers == expected


def test_the_planner_reads_pods_by_the_same_rule() -> None:
    for name, pod, min_ready, after in CASES:
        metadata = pod.get("metadata") or {}
        if not isinstance(pod.get("status") or {}, dict) or not isinstance(
            metadata.get("labels") or {}, dict
        ):
            continue  # not a pod the planner is given (it reads only what the API server accepts)
        now = READY_EPOCH + after
        assert PodView(copy.deepcopy(pod)).cs_available(min_ready, now) is pod_available(
            pod, min_ready, now
        ), name


@pytest.mark.asyncio(loop_scope="session")
async def test_sql_and_python_read_min_ready_seconds_alike(database_url: str) -> None:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        for name, workload in WORKLOADS:
            found = await connection.fetchval(
                "SELECT workload_min_ready_seconds($1::jsonb)", json.dumps(workload)
            )
            assert found == min_ready_seconds(workload), name
    finally:
        await connection.close()
