"""Migration 0032: ``unavailability`` (and ``max_unavailable_exceeded`` on it) counts a pod available as the
planner and OpenKruise do: lifecycle state Normal, Running, Ready, InPlaceUpdateReady not False, Ready for
longer than minReadySeconds (services/model/availability.py).

A trail is stored at 0031, two CloneSets with a rollout each (limit 1):

- ``web`` (4 replicas, ReCreate with a surge pod; the case the planner's property test found): the surge pod
  turns Ready while still ``PreparingNormal``; two Normal pods leave service on their own; scale-in deletes
  the surge pod, which OpenKruise does without using up maxUnavailable (it is not available). Before the
  migration the view counted the surge pod as available, so the two pods out did not show as over the limit,
  and the deletion did: the excess was pinned on a deletion that took nothing out of service. After it, the
  excess shows when the second pod left, and the deletion changes no count. Later two Normal pods out at
  once, a real breach, is listed before and after.
- ``slow`` (2 replicas, in place, minReadySeconds 2): the second pod is taken down one second after the first
  came back Ready. Before the migration that was within the limit; after it, it is the breach it is (the
  first pod was not available yet), and the first pod counts as available from its Ready time plus 2 s, at
  the next observation, though nothing observed it then.

The downgrade restores 0031's view and drops the functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from services.infra.database import asyncpg_url
from services.model.events import (
    Event,
    ObjectObserved,
    PartitionStepPlanned,
    RolloutCompleted,
    RolloutStarted,
)
from tests.infra.store_helpers import import_trail
from tests.infra.test_store_migrations import _alembic, _views
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

T0 = datetime(2026, 12, 8, tzinfo=UTC)
LONG_AGO = "2026-12-07T00:00:00Z"
LIFECYCLE = "lifecycle.apps.kruise.io/state"
FUNCTIONS = {"pod_in_service", "pod_ready_since", "pod_available", "workload_min_ready_seconds"}


def _stamp(index: int) -> str:
    """The time of the trail's ``index``-th event (import_trail: one second apart from T0)."""
    return (T0 + timedelta(seconds=index)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(
    name: str,
    *,
    ready: bool = True,
    since: str = LONG_AGO,
    phase: str = "Running",
    state: str = "Normal",
    in_place: str = "True",
    terminating: bool = False,
) -> ObjectObserved:
    conditions = [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since},
        {"type": "InPlaceUpdateReady", "status": in_place},
    ]
    metadata: dict[str, Any] = {"name": name, "labels": {LIFECYCLE: state}}
    if terminating:
        metadata["deletionTimestamp"] = _stamp(0)
    pod = {"metadata": metadata, "status": {"phase": phase, "conditions": conditions}}
    return ObjectObserved(kind="Pod", namespace="ops", name=name, uid=name, resource_version="1",
                          change="MODIFIED", object=pod)  # fmt: skip


def _cloneset(name: str, replicas: int, min_ready_seconds: int = 0) -> ObjectObserved:
    spec = {"replicas": replicas, "minReadySeconds": min_ready_seconds}
    return ObjectObserved(kind="CloneSet", namespace="ops", name=name, uid=name, resource_version="1",
                          change="MODIFIED", object={"spec": spec})  # fmt: skip


def _rollout(name: str, strategy: str, replicas: int) -> list[tuple[str, Event]]:
    rollout = f"ops/{name}@{name}-2#1"
    return [
        (
            f"CloneSet/ops/{name}",
            RolloutStarted(
                rollout_id=rollout,
                from_revision=f"{name}-1",
                to_revision=f"{name}-2",
                strategy={"type": strategy},
                replicas=replicas,
            ),
        ),  # fmt: skip
        (
            f"CloneSet/ops/{name}",
            PartitionStepPlanned(
                rollout_id=rollout,
                partition=0,
                replicas=replicas,
                expected_updated=replicas,
                max_unavailable=1,
                max_surge=1 if strategy == "ReCreate" else 0,
            ),
        ),  # fmt: skip
    ]


def _trail() -> list[tuple[str, Event]]:
    web, slow = "CloneSet/ops/web/observed", "CloneSet/ops/slow/observed"
    trail: list[tuple[str, Event]] = [
        (web, _cloneset("web", 4)),  # 0
        *[(web, _pod(name)) for name in ("web-a", "web-b", "web-c", "web-d")],  # 1-4
        *_rollout("web", "ReCreate", 4),  # 5-6
        (web, _pod("web-s", ready=False, phase="Pending", state="PreparingNormal")),  # 7: the surge pod
        (web, _pod("web-s", since=_stamp(8), state="PreparingNormal")),  # 8: Ready, not Normal yet
        (web, _pod("web-a", ready=False)),  # 9: a Normal pod leaves service on its own
        (web, _pod("web-b", ready=False)),  # 10: a second one: two out, limit 1
        (web, _pod("web-s", since=_stamp(8), state="PreparingNormal", terminating=True)),  # 11: scale-in
        (web, _pod("web-a", since=_stamp(12))),  # 12
        (web, _pod("web-b", since=_stamp(13))),  # 13
        (web, _pod("web-c", ready=False)),  # 14
        (web, _pod("web-d", ready=False)),  # 15: two Normal pods out at once: a real breach
        (web, _pod("web-c", since=_stamp(16))),  # 16
        (web, _pod("web-d", since=_stamp(17))),  # 17
        ("CloneSet/ops/web", RolloutCompleted(rollout_id="ops/web@web-2#1", revision="web-2")),  # 18
        (slow, _cloneset("slow", 2, min_ready_seconds=2)),  # 19
        (slow, _pod("slow-p")),  # 20
        (slow, _pod("slow-q")),  # 21
        *_rollout("slow", "InPlaceIfPossible", 2),  # 22-23
        (slow, _pod("slow-p", ready=False, state="Updating", in_place="False")),  # 24
        (slow, _pod("slow-p", since=_stamp(25))),  # 25: Ready again, available after 27
        (slow, _pod("slow-q", ready=False, state="Updating", in_place="False")),  # 26: taken down too soon
        (slow, _pod("slow-q", since=_stamp(27))),  # 27: available after 29
        (slow, _cloneset("slow", 2, min_ready_seconds=2)),  # 28: p is available now
        (slow, _cloneset("slow", 2, min_ready_seconds=2)),  # 29: q is not yet (29 is not after 29)
        (slow, _cloneset("slow", 2, min_ready_seconds=2)),  # 30: both are
        ("CloneSet/ops/slow", RolloutCompleted(rollout_id="ops/slow@slow-2#1", revision="slow-2")),  # 31
    ]
    return trail


async def _read(url: str) -> tuple[dict[str, list[int]], dict[str, list[tuple[str, int]]]]:
    """Per workload: the view's unavailable pods at each moment, and the moments listed as over the limit
    (observed, unavailable)."""
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        counts: dict[str, list[int]] = {"web": [], "slow": []}
        for row in await conn.fetch("SELECT workload, unavailable FROM unavailability ORDER BY position"):
            counts[row["workload"]].append(row["unavailable"])
        listed: dict[str, list[tuple[str, int]]] = {"web": [], "slow": []}
        rows = await conn.fetch(
            "SELECT workload, position, observed, unavailable FROM max_unavailable_exceeded ORDER BY position"
        )
        base = await conn.fetchval("SELECT min(global_position) FROM events")
        for row in rows:
            listed[row["workload"]].append(
                (f"{row['position'] - base}:{row['observed']}", row["unavailable"])
            )
        functions = {r[0] for r in await conn.fetch("SELECT proname FROM pg_proc")} & FUNCTIONS
    finally:
        await conn.close()
    assert functions in (set(), FUNCTIONS)
    return counts, listed


async def test_the_audit_counts_a_pod_available_as_the_planner_does(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0031_exceeded_steps_once")
        original = await _views(url)
        await import_trail(url, _trail(), T0)
        before = await _read(url)
        counts, listed = before
        # The surge pod counted as available while PreparingNormal: the deletion looked like the breach.
        assert counts["web"] == [4, 3, 2, 1, 0, 0, 0, 0, 1, 2, 1, 0, 1, 2, 1, 0]
        assert listed["web"] == [("11:Pod/web-s", 2), ("15:Pod/web-d", 2)]
        # Ready was enough: the pod taken down before the other had been Ready for minReadySeconds was not.
        assert counts["slow"] == [2, 1, 0, 1, 0, 1, 0, 0, 0, 0]
        assert listed["slow"] == []

        _alembic(url, "upgrade", "0032_openkruise_availability")
        counts, listed = await _read(url)
        # Not available until Normal: two pods out shows when the second left; the deletion changes nothing.
        assert counts["web"] == [4, 3, 2, 1, 0, 0, 0, 1, 2, 2, 1, 0, 1, 2, 1, 0]
        assert listed["web"] == [("10:Pod/web-b", 2), ("11:Pod/web-s", 2), ("15:Pod/web-d", 2)]
        # minReadySeconds: p available after 27 and q after 29, at the next observation past it.
        assert counts["slow"] == [2, 1, 0, 1, 1, 2, 2, 1, 1, 0]
        assert listed["slow"] == [("26:Pod/slow-q", 2), ("27:Pod/slow-q", 2)]

        _alembic(url, "downgrade", "0031_exceeded_steps_once")
        assert await _views(url) == original
        assert await _read(url) == before
