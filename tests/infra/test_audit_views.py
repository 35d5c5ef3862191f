"""The SQL views of the audit trail (docs/sql.md) over event logs written through the real event store.

Each test writes one workload's trail (its own namespace) the way the services write it: observations on
``…/observed``, the planner's decisions on the workload stream, outcomes on ``…/actions``; then reads the
views with plain SQL. The end-to-end counterpart (views over a log written by the running services) is
tests/e2e/test_audit_views_e2e.py.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.infra import audit_queries
from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.model.events import (
    PodActionRequested,
    PodHookHeld,
    PodHookReleased,
    RolloutProgressDeadlineExceeded,
)
from tests.infra.audit_helpers import NEW, OLD, SIDECAR_NEW, T0, SidecarSetTrail, Trail, inplace_not_ready

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _rows(database_url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return [dict(r) for r in await connection.fetch(sql, *args)]
    finally:
        await connection.close()


async def test_a_rollout_one_pod_at_a_time_reads_back_as_one_row_per_view(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.start_rollout(10)
    for index in range(3):
        await trail.update_in_place(f"web-{index}", 10 + 5 * index)
    await trail.complete(30)

    rollouts = await _rows(database_url, "SELECT * FROM rollouts WHERE namespace = $1", trail.namespace)
    assert len(rollouts) == 1
    rollout = rollouts[0]
    assert (rollout["rollout_id"], rollout["workload"], rollout["from_revision"], rollout["to_revision"]) == (
        trail.rollout, "web", OLD, NEW,
    )  # fmt: skip
    assert rollout["strategy_type"] == "InPlaceIfPossible"
    assert rollout["kind"] == "CloneSet"
    assert rollout["started"] == T0 + timedelta(seconds=10)
    assert rollout["finished"] == T0 + timedelta(seconds=30)
    assert rollout["duration"] == timedelta(seconds=20)
    assert rollout["outcome"] == "succeeded"

    revisions = await _rows(database_url, "SELECT * FROM revisions WHERE namespace = $1", trail.namespace)
    assert [(r["revision"], r["number"], r["images"]) for r in revisions] == [(NEW, 2, ["web:2"])]
    steps = await _rows(database_url, "SELECT * FROM partition_steps WHERE rollout_id = $1", trail.rollout)
    assert [(s["partition"], s["max_unavailable"], s["expected_updated"]) for s in steps] == [(0, 1, 3)]

    # The question of issue 5, as one SELECT: which pods were updated in place in rollout X, how long each.
    in_place = await _rows(
        database_url,
        "SELECT pod, requested, finished, duration, outcome FROM pod_actions"
        " WHERE rollout_id = $1 AND in_place ORDER BY requested",
        trail.rollout,
    )
    assert [r["pod"] for r in in_place] == ["web-0", "web-1", "web-2"]
    first = in_place[0]
    # From the markNotReady request (pod leaves service) to markReady's outcome (back in service).
    assert first["requested"] == T0 + timedelta(seconds=10)
    assert first["finished"] == T0 + timedelta(seconds=13.2)
    assert first["duration"] == timedelta(seconds=3.2)
    assert {r["outcome"] for r in in_place} == {"succeeded"}
    every = await _rows(database_url, "SELECT action FROM pod_actions WHERE namespace = $1", trail.namespace)
    assert {r["action"] for r in every} == {"updateInPlace"}  # the mark steps belong to their update
    # The grace period waited before each image patch (docs/sql.md's example query): 2 s in this trail.
    grace = await _rows(
        database_url,
        "SELECT a.pod, patch.requested - a.requested AS waited FROM pod_actions a"
        " JOIN action_outcomes patch USING (action_id) JOIN rollouts r ON r.rollout_id = a.rollout_id"
        " WHERE a.action = 'updateInPlace' AND a.namespace = $1 ORDER BY a.position",
        trail.namespace,
    )
    assert grace == [{"pod": f"web-{index}", "waited": timedelta(seconds=2)} for index in range(3)]

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        assert [r["pod"] for r in await audit_queries.in_place_updates(connection, trail.rollout)] == [
            "web-0", "web-1", "web-2",
        ]  # fmt: skip
        assert [
            r
            for r in await audit_queries.max_unavailable_exceeded(connection)
            if r["namespace"] == trail.namespace
        ] == []
        assert [
            r for r in await audit_queries.actions_without_one_terminal(connection)
            if r["namespace"] == trail.namespace
        ] == []  # fmt: skip
    finally:
        await connection.close()


async def test_unavailability_counts_not_ready_missing_and_terminating_pods(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.observe_pod("web-0", 1, ready=False)
    await trail.observe_pod("web-1", 2, terminating=True)
    await trail.observe_pod("web-1", 3, deleted=True)
    await trail.observe_cloneset(4, 4)
    await trail.observe_pod("web-0", 5)
    rows = await _rows(
        database_url,
        "SELECT observed, replicas, pods, available, unavailable FROM unavailability"
        " WHERE namespace = $1 ORDER BY position",
        trail.namespace,
    )
    assert [(r["observed"], r["replicas"], r["pods"], r["available"], r["unavailable"]) for r in rows] == [
        ("CloneSet/web", 3, 0, 0, 3),
        ("Pod/web-0", 3, 1, 1, 2),
        ("Pod/web-1", 3, 2, 2, 1),
        ("Pod/web-2", 3, 3, 3, 0),
        ("Pod/web-0", 3, 3, 2, 1),  # not ready
        ("Pod/web-1", 3, 2, 1, 2),  # terminating: neither a pod nor available any more
        ("Pod/web-1", 3, 2, 1, 2),  # deleted
        ("CloneSet/web", 4, 2, 1, 3),  # scaled out: the missing pods count as unavailable
        ("Pod/web-0", 4, 2, 2, 2),
    ]


async def test_max_unavailable_exceeded_lists_the_moments_over_the_limit(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.start_rollout(10, max_unavailable=1)
    await trail.observe_pod("web-0", 11, ready=False)
    await trail.observe_pod("web-1", 12, ready=False)  # a second pod down: over the limit of 1
    await trail.observe_pod("web-0", 13)
    await trail.observe_pod("web-1", 14)
    await trail.complete(15)
    await trail.observe_pod("web-2", 16, ready=False)  # after the rollout: not its business
    await trail.observe_pod("web-0", 17, ready=False)

    rows = await _rows(
        database_url,
        "SELECT rollout_id, observed, unavailable, max_unavailable, at FROM max_unavailable_exceeded"
        " WHERE namespace = $1",
        trail.namespace,
    )
    assert [(r["rollout_id"], r["observed"], r["unavailable"], r["max_unavailable"]) for r in rows] == [
        (trail.rollout, "Pod/web-1", 2, 1)
    ]
    assert rows[0]["at"] == T0 + timedelta(seconds=12)


async def test_actions_without_exactly_one_terminal_event_are_listed(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    ok = await trail.request("createPod", "web-0", 1)
    await trail.succeed(ok, 2)
    missing = await trail.request("createPod", "web-1", 1)
    twice = await trail.request("createPod", "web-2", 1)
    await trail.succeed(twice, 2)
    await trail.fail(twice, 'pods "web-2" already exists', 3)
    failed = await trail.request("deletePod", "web-3", 1)
    await trail.fail(failed, "forbidden", 2)

    rows = await _rows(
        database_url,
        "SELECT action_id, terminal_events FROM actions_without_one_terminal WHERE namespace = $1",
        trail.namespace,
    )
    assert sorted((r["action_id"], r["terminal_events"]) for r in rows) == sorted([(missing, 0), (twice, 2)])
    outcomes = {
        r["action_id"]: (r["outcome"], r["reason"])
        for r in await _rows(database_url, "SELECT * FROM pod_actions WHERE namespace = $1", trail.namespace)
    }
    assert outcomes[ok] == ("succeeded", None)
    assert outcomes[missing] == ("pending", None)
    assert outcomes[failed] == ("failed", "forbidden")


async def test_a_pods_to_delete_write_back_names_its_cloneset_as_the_pod_in_old_and_new_records(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    new = str(uuid.uuid4())
    await trail.decide(
        PodActionRequested(
            action_id=new, action="setPodsToDelete", namespace=trail.namespace, workload=trail.name
        ),
        1,
    )
    old = str(uuid.uuid4())
    v1 = PodActionRequested(
        action_id=old, action="setPodsToDelete", namespace=trail.namespace, pod=trail.name
    )
    await trail.decide(v1, 2)  # written as schema v1 wrote it: the CloneSet's name in pod
    rows = await _rows(
        database_url,
        "SELECT action_id, pod FROM action_outcomes WHERE namespace = $1 AND action = 'setPodsToDelete'",
        trail.namespace,
    )
    assert sorted((r["action_id"], r["pod"]) for r in rows) == sorted([(new, "web"), (old, "web")])
    pods = await _rows(database_url, "SELECT pod FROM pod_actions WHERE namespace = $1", trail.namespace)
    assert [r["pod"] for r in pods] == ["web", "web"]


async def test_an_in_place_update_whose_pod_never_came_back_is_pending(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    mark = await trail.request("markNotReady", "web-0", 1)
    await trail.succeed(mark, 1.1)
    update = await trail.request("updateInPlace", "web-0", 3)
    await trail.succeed(update, 3.1)
    rows = await _rows(
        database_url,
        "SELECT requested, started, finished, duration, outcome FROM pod_actions WHERE namespace = $1",
        trail.namespace,
    )
    assert rows == [
        {
            "requested": T0 + timedelta(seconds=1),
            "started": T0 + timedelta(seconds=1),  # no PodActionStarted recorded: the request time
            "finished": None,
            "duration": None,
            "outcome": "pending",
        }
    ]


async def test_an_in_place_update_takes_its_steps_from_its_own_rollout_only(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    earlier = trail.rollout
    mark = await trail.request("markNotReady", "web-0", 1)  # an earlier rollout, superseded mid-way
    await trail.succeed(mark, 1.1)
    trail.rollout = f"{trail.namespace}/web@web-333#2"
    update = await trail.request("updateInPlace", "web-0", 5)  # no grace period in this one
    await trail.succeed(update, 5.1)
    ready = await trail.request("markReady", "web-0", 6)
    await trail.succeed(ready, 6.2)
    rows = await _rows(
        database_url,
        "SELECT rollout_id, requested, started, duration FROM pod_actions WHERE namespace = $1",
        trail.namespace,
    )
    assert rows == [
        {
            "rollout_id": f"{trail.namespace}/web@web-333#2",
            "requested": T0 + timedelta(seconds=5),
            "started": T0 + timedelta(seconds=5),
            "duration": timedelta(seconds=1.2),
        }
    ]
    assert earlier != trail.rollout


async def test_an_in_place_update_writing_its_own_condition_starts_at_its_own_request_not_a_hook_mark(
    event_store: EventStore, database_url: str
) -> None:
    # An inPlaceUpdate hook with markPodNotReady marks KruisePodReady False as the pod enters
    # PreparingUpdate; once released, the update (no grace period) writes InPlaceUpdateReady=False itself.
    trail = Trail(event_store)
    hook_condition = {"type": "KruisePodReady", "status": "False", "message": "[]"}
    hook_mark = await trail.request(
        "markNotReady", "web-0", 1, {"action": "markNotReady", "pod": "web-0", "condition": hook_condition}
    )
    await trail.succeed(hook_mark, 1.2, taken=1.1)
    merged = {"action": "updateInPlace", "pod": "web-0", "notReady": inplace_not_ready(5)}
    update = await trail.request("updateInPlace", "web-0", 5, merged)
    await trail.succeed(update, 5.4, taken=5.25)
    ready = await trail.request("markReady", "web-0", 6)
    await trail.succeed(ready, 6.2, taken=6.1)
    # A dynamic update (no restart, no notReady) after a hook mark: the hook's mark is no step of it either.
    hook_mark = await trail.request(
        "markNotReady", "web-1", 7, {"action": "markNotReady", "pod": "web-1", "condition": hook_condition}
    )
    await trail.succeed(hook_mark, 7.2, taken=7.1)
    dynamic = await trail.request("updateInPlace", "web-1", 9)
    await trail.succeed(dynamic, 9.4, taken=9.25)
    ready = await trail.request("markReady", "web-1", 10)
    await trail.succeed(ready, 10.2, taken=10.1)
    rows = await _rows(
        database_url,
        "SELECT pod, requested, started, queued, finished, duration, outcome FROM pod_actions"
        " WHERE namespace = $1 ORDER BY position",
        trail.namespace,
    )
    assert rows == [
        {
            "pod": "web-0", "requested": _seconds(5), "started": _seconds(5.25),
            "queued": timedelta(seconds=0.25), "finished": _seconds(6.2), "duration": timedelta(seconds=1.2),
            "outcome": "succeeded",
        },
        {
            "pod": "web-1", "requested": _seconds(9), "started": _seconds(9.25),
            "queued": timedelta(seconds=0.25), "finished": _seconds(10.2), "duration": timedelta(seconds=1.2),
            "outcome": "succeeded",
        },
    ]  # fmt: skip


async def test_started_and_queued_say_when_an_executor_took_each_action(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    create = await trail.request("createPod", "web-3", 1)
    await trail.start(create, 1.25)
    await trail.start(create, 1.5, executor="executor-b")  # a second take: the first one counts
    await trail.succeed(create, 1.6)
    # An in-place update is one row from markNotReady to markReady: it started when an executor took the
    # markNotReady (the pod leaving service), not when it took the later image patch.
    mark = await trail.request("markNotReady", "web-0", 10)
    await trail.start(mark, 10.75)
    await trail.succeed(mark, 10.8)
    update = await trail.request("updateInPlace", "web-0", 12)
    await trail.start(update, 12.5)
    await trail.succeed(update, 12.6)
    ready = await trail.request("markReady", "web-0", 13.1)
    await trail.start(ready, 13.2)
    await trail.succeed(ready, 13.3)
    old = await trail.request("deletePod", "web-1", 20)  # recorded before executors wrote PodActionStarted
    await trail.succeed(old, 20.1)

    # Which pod actions waited longest on the bus during the rollout (docs/sql.md)?
    rows = await _rows(
        database_url,
        "SELECT action, pod, requested, started, queued, finished, duration FROM pod_actions"
        " WHERE rollout_id = $1 ORDER BY queued DESC, position",
        trail.rollout,
    )
    assert rows == [
        {
            "action": "updateInPlace", "pod": "web-0", "requested": _seconds(10), "started": _seconds(10.75),
            "queued": timedelta(seconds=0.75), "finished": _seconds(13.3), "duration": timedelta(seconds=3.3),
        },
        {
            "action": "createPod", "pod": "web-3", "requested": _seconds(1), "started": _seconds(1.25),
            "queued": timedelta(seconds=0.25), "finished": _seconds(1.6), "duration": timedelta(seconds=0.6),
        },
        {
            "action": "deletePod", "pod": "web-1", "requested": _seconds(20), "started": _seconds(20),
            "queued": timedelta(0), "finished": _seconds(20.1), "duration": timedelta(seconds=0.1),
        },
    ]  # fmt: skip
    # PodActionStarted is no terminal event: every action still has exactly one.
    unsound = await _rows(
        database_url, "SELECT * FROM actions_without_one_terminal WHERE namespace = $1", trail.namespace
    )
    assert unsound == []


async def test_started_reads_the_outcome_when_no_action_started_is_recorded(
    event_store: EventStore, database_url: str
) -> None:
    # Today's executor records when it took an action in the outcome (started_at), and a PodActionStarted
    # only for an action that had to wait: the first taking counts, whichever records it.
    trail = Trail(event_store)
    create = await trail.request("createPod", "web-3", 1)
    await trail.succeed(create, 1.6, taken=1.25)
    mark = await trail.request("markNotReady", "web-0", 10)
    await trail.succeed(mark, 10.8, taken=10.75)
    update = await trail.request("updateInPlace", "web-0", 12)
    await trail.succeed(update, 12.6, taken=12.5)
    ready = await trail.request("markReady", "web-0", 13.1)
    await trail.succeed(ready, 13.3, taken=13.2)
    retried = await trail.request("deletePod", "web-1", 20)
    await trail.start(retried, 20.5)  # taken, then the API server failed it: handed back to the bus
    await trail.fail(retried, "HTTP 503", 31, taken=30)  # taken again on its last delivery

    rows = await _rows(
        database_url,
        "SELECT action, pod, requested, started, queued, finished FROM pod_actions"
        " WHERE rollout_id = $1 ORDER BY position",
        trail.rollout,
    )
    assert rows == [
        {
            "action": "createPod", "pod": "web-3", "requested": _seconds(1), "started": _seconds(1.25),
            "queued": timedelta(seconds=0.25), "finished": _seconds(1.6),
        },
        {
            "action": "updateInPlace", "pod": "web-0", "requested": _seconds(10), "started": _seconds(10.75),
            "queued": timedelta(seconds=0.75), "finished": _seconds(13.3),
        },
        {
            "action": "deletePod", "pod": "web-1", "requested": _seconds(20), "started": _seconds(20.5),
            "queued": timedelta(seconds=0.5), "finished": _seconds(31),
        },
    ]  # fmt: skip


def _seconds(at: float) -> Any:
    return T0 + timedelta(seconds=at)


async def test_a_sidecarset_rollout_reads_back_like_a_cloneset_one(
    event_store: EventStore, database_url: str
) -> None:
    trail = SidecarSetTrail(event_store)
    pods = ["team-a/web-0", "team-b/web-0", "team-b/web-1"]  # two pods share a name
    await trail.observe_sidecarset(0)
    for index, pod in enumerate(pods):
        await trail.observe_pod(pod, 0.5 + index / 10)
    await trail.start_rollout(10, pods=3)
    for index, pod in enumerate(pods):
        await trail.upgrade(pod, 10 + 5 * index)
    await trail.complete(30)

    rollouts = await _rows(database_url, "SELECT * FROM rollouts WHERE workload = $1", trail.name)
    assert [
        (r["kind"], r["namespace"], r["rollout_id"], r["strategy_type"], r["outcome"]) for r in rollouts
    ] == [("SidecarSet", "", trail.rollout, "RollingUpdate", "succeeded")]
    assert rollouts[0]["duration"] == timedelta(seconds=20)
    revisions = await _rows(database_url, "SELECT * FROM revisions WHERE workload = $1", trail.name)
    assert [(r["kind"], r["revision"], r["images"]) for r in revisions] == [
        ("SidecarSet", trail.new, [SIDECAR_NEW])
    ]
    steps = await _rows(database_url, "SELECT * FROM partition_steps WHERE rollout_id = $1", trail.rollout)
    assert [(s["kind"], s["partition"], s["replicas"], s["max_unavailable"]) for s in steps] == [
        ("SidecarSet", 0, 3, 1)
    ]

    # The question for a SidecarSet rollout: which pods were upgraded in place, how long each was
    # out of service: from the request to the first observation with the sidecar restarted and ready (not
    # the patch's own observation, where the old sidecar still runs and is ready).
    in_place = await _rows(
        database_url,
        "SELECT kind, pod_namespace, pod, action, update_kind, requested, started, finished, duration,"
        " outcome FROM pod_actions WHERE rollout_id = $1 AND in_place ORDER BY requested",
        trail.rollout,
    )
    assert [(r["pod_namespace"], r["pod"]) for r in in_place] == [
        ("team-a", "web-0"), ("team-b", "web-0"), ("team-b", "web-1"),
    ]  # fmt: skip
    assert {(r["kind"], r["action"], r["update_kind"], r["outcome"]) for r in in_place} == {
        ("SidecarSet", "updateSidecarInPlace", "in place", "succeeded")
    }
    for index, row in enumerate(in_place):
        assert row["requested"] == row["started"] == _seconds(10 + 5 * index)
        assert row["finished"] == _seconds(10 + 5 * index + 1.5)
        assert row["duration"] == timedelta(seconds=1.5)

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        assert [r["pod"] for r in await audit_queries.in_place_updates(connection, trail.rollout)] == [
            "web-0", "web-0", "web-1",
        ]  # fmt: skip
        mine = await audit_queries.rollouts(connection, workload=trail.name, kind="SidecarSet")
        assert [r["rollout_id"] for r in mine] == [trail.rollout]
        assert await audit_queries.rollouts(connection, workload=trail.name, kind="CloneSet") == []
        assert [
            r for r in await audit_queries.max_unavailable_exceeded(connection) if r["workload"] == trail.name
        ] == []
        unsound = await audit_queries.actions_without_one_terminal(connection)
        assert [r for r in unsound if r["workload"] == trail.name] == []
    finally:
        await connection.close()


async def test_sidecarset_unavailability_counts_matched_pods_across_namespaces(
    event_store: EventStore, database_url: str
) -> None:
    trail = SidecarSetTrail(event_store)
    await trail.observe_sidecarset(0)
    for pod in ("team-a/web-0", "team-b/web-0", "team-b/web-1"):
        await trail.observe_pod(pod, 1)
    await trail.start_rollout(2, pods=3, max_unavailable=1)
    await trail.observe_pod("team-a/web-0", 3, ready=False)
    await trail.observe_pod("team-b/web-0", 4, ready=False)  # the same name in another namespace
    await trail.observe_pod("team-a/web-0", 5)
    rows = await _rows(
        database_url,
        "SELECT kind, namespace, observed, replicas, pods, available, unavailable FROM unavailability"
        " WHERE workload = $1 ORDER BY position",
        trail.name,
    )
    assert {(r["kind"], r["namespace"]) for r in rows} == {("SidecarSet", "")}
    assert [(r["observed"], r["replicas"], r["pods"], r["available"], r["unavailable"]) for r in rows] == [
        (f"SidecarSet/{trail.name}", None, 0, 0, 0),
        ("Pod/team-a/web-0", None, 1, 1, 0),
        ("Pod/team-b/web-0", None, 2, 2, 0),
        ("Pod/team-b/web-1", None, 3, 3, 0),
        # the partition step planned at 2 gives the total: 3 matched pods
        ("Pod/team-a/web-0", 3, 3, 2, 1),
        ("Pod/team-b/web-0", 3, 3, 1, 2),
        ("Pod/team-a/web-0", 3, 3, 2, 1),
    ]


async def test_max_unavailable_exceeded_reports_a_sidecarset_rollout_over_its_limit(
    event_store: EventStore, database_url: str
) -> None:
    trail = SidecarSetTrail(event_store)
    pods = [f"team-a/web-{index}" for index in range(4)]
    await trail.observe_sidecarset(0)
    for pod in pods:
        await trail.observe_pod(pod, 1)
    await trail.start_rollout(10, pods=4, max_unavailable=1)
    first = await trail.request_upgrade(pods[0], 10)
    await trail.patched(pods[0], first, 10.1)
    await trail.restart_sidecar(pods[0], 10.5, comes_back=False)  # crash-loops on the new image
    # A planner that did not wait: a second pod upgraded while the first is still down.
    second = await trail.request_upgrade(pods[1], 12)
    await trail.patched(pods[1], second, 12.1)
    await trail.restart_sidecar(pods[1], 12.5)  # down from 12.5 to 13.5: two of four at once
    await trail.observe_pod(pods[0], 15, image=SIDECAR_NEW)  # fixed: ready again
    await trail.complete(16)
    await trail.observe_pod(pods[2], 17, ready=False)  # after the rollout: not its business
    await trail.observe_pod(pods[3], 18, ready=False)

    rows = await _rows(
        database_url,
        "SELECT rollout_id, kind, namespace, observed, replicas, unavailable, max_unavailable, at"
        " FROM max_unavailable_exceeded WHERE workload = $1",
        trail.name,
    )
    assert [
        (r["rollout_id"], r["kind"], r["namespace"], r["observed"], r["replicas"], r["unavailable"],
         r["max_unavailable"], r["at"])
        for r in rows
    ] == [(trail.rollout, "SidecarSet", "", "Pod/team-a/web-1", 4, 2, 1, _seconds(12.5))]  # fmt: skip

    # The crash-looping pod's upgrade finished only when its sidecar came back ready on a new image id.
    actions = await _rows(
        database_url,
        "SELECT pod, finished, duration, outcome FROM pod_actions WHERE workload = $1 ORDER BY position",
        trail.name,
    )
    assert [(a["pod"], a["finished"], a["outcome"]) for a in actions] == [
        ("web-0", _seconds(15), "succeeded"),
        ("web-1", _seconds(13.5), "succeeded"),
    ]


async def test_a_sidecar_upgrade_is_pending_until_its_sidecar_restarts_and_failed_when_the_patch_fails(
    event_store: EventStore, database_url: str
) -> None:
    trail = SidecarSetTrail(event_store)
    await trail.observe_pod("team-a/web-0", 0)
    await trail.observe_pod("team-a/web-1", 0)
    await trail.start_rollout(1, pods=2)
    patched = await trail.request_upgrade("team-a/web-0", 2)
    await trail.patched("team-a/web-0", patched, 2.1)  # Ready, new image in spec, old sidecar still running
    refused = await trail.request_upgrade("team-a/web-1", 3)
    await trail.fail(refused, "pod team-a/web-1 was replaced (uid uid-team-a/web-1 is gone)", 3.1)
    rows = {
        r["action_id"]: r
        for r in await _rows(database_url, "SELECT * FROM pod_actions WHERE workload = $1", trail.name)
    }
    assert (rows[patched]["outcome"], rows[patched]["finished"], rows[patched]["duration"]) == (
        "pending", None, None,
    )  # fmt: skip
    assert (rows[refused]["outcome"], rows[refused]["finished"]) == ("failed", None)
    assert rows[refused]["reason"].startswith("pod team-a/web-1 was replaced")


async def test_hook_waits_show_how_long_each_lifecycle_hook_held_each_pod(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.decide(PodHookHeld(pod="web-0", hook="preDelete", state="PreparingDelete"), 10)
    await trail.decide(PodHookHeld(pod="web-1", hook="inPlaceUpdate", state="PreparingUpdate"), 12)
    await trail.decide(
        PodHookReleased(
            pod="web-0",
            hook="preDelete",
            state="PreparingDelete",
            held_since=T0 + timedelta(seconds=10),
            held_seconds=35.0,
        ),
        45,
    )
    rows = await _rows(
        database_url, "SELECT * FROM hook_waits WHERE namespace = $1 ORDER BY position", trail.namespace
    )
    assert [(r["workload"], r["pod"], r["hook"], r["state"]) for r in rows] == [
        ("web", "web-0", "preDelete", "PreparingDelete"),
        ("web", "web-1", "inPlaceUpdate", "PreparingUpdate"),
    ]
    held, running = rows
    assert (held["held_since"], held["released"]) == (T0 + timedelta(seconds=10), T0 + timedelta(seconds=45))
    assert held["held_seconds"] == 35.0 and held["still_held"] is False
    assert running["released"] is None and running["held_seconds"] is None and running["still_held"] is True


async def test_progress_deadlines_list_the_rollouts_whose_deadline_passed(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.decide(
        RolloutProgressDeadlineExceeded(
            rollout_id=trail.rollout,
            revision=NEW,
            progress_deadline_seconds=600,
            progressing_since="2026-11-30T12:00:10Z",
        ),
        611,
    )
    rows = await _rows(database_url, "SELECT * FROM progress_deadlines WHERE namespace = $1", trail.namespace)
    assert [
        (r["workload"], r["rollout_id"], r["revision"], r["progress_deadline_seconds"]) for r in rows
    ] == [("web", trail.rollout, NEW, 600)]
    assert rows[0]["progressing_since"] == T0 + timedelta(seconds=10)
    assert rows[0]["exceeded_at"] == T0 + timedelta(seconds=611)
