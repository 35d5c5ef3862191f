"""Shadow mode end to end: a stand-in for OpenKruise's controller drives a CloneSet on simcluster while
watcher, planner and auditor run with ROLLBOOK_SHADOW=true (no executor). The trail must show the
controller's rollouts and pod actions in the SQL views, rollbook's verdict on each, and a disagreement
where the stand-in updates more pods at once than maxUnavailable allows; rollbook itself acts on nothing."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.kinds import registry
from services.model.streams import ACTION_ID_ANNOTATION
from services.replay.operations import replay_lines, what_if_rollout
from tests.e2e.cluster import GROUP, PLURAL, VERSION
from tests.e2e.kruise_standin import KruiseStandIn
from tests.plugins.simcluster import api_client_for
from tests.plugins.stack import REPO_ROOT, Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "web"
LABELLED = "web-labelled"
CLONESET: dict[str, Any] = {
    "apiVersion": "apps.kruise.io/v1alpha1",
    "kind": "CloneSet",
    "metadata": {"name": NAME, "labels": {"app": NAME}},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": NAME}},
        "template": {
            "metadata": {"labels": {"app": NAME}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
        },
        "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1},
    },
}


@pytest_asyncio.fixture(loop_scope="session")
async def api(simcluster: Any) -> AsyncIterator[client.ApiClient]:
    """An API client; the CloneSets the test created are deleted afterwards (their pods by garbage
    collection), so no later test's services find a CloneSet to manage that nobody drives any more."""
    api = await api_client_for(simcluster)
    async with api:
        yield api
        custom = client.CustomObjectsApi(api)
        for name in (NAME, LABELLED):
            with contextlib.suppress(client.ApiException):
                await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)


async def query(database_url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return [dict(r) for r in await connection.fetch(sql, *args)]
    finally:
        await connection.close()


def rollbook(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    from services.infra.supervisor import settings_env

    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **settings_env(stack.settings)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_foreign_controllers_rollouts_are_recorded_compared_and_never_acted_on(
    stack: Stack, api: client.ApiClient
) -> None:
    stack.settings = msgspec.structs.replace(stack.settings, shadow=True)
    await stack.start("auditor", "watcher", "planner")
    database_url = stack.settings.database_url
    kruise = KruiseStandIn(api, database_url, NAME)
    await kruise.create(CLONESET)
    await kruise.write_status()
    for instance in ("b2x4k", "c7m9p", "d5q8r"):
        await kruise.create_pod(instance)
    await kruise.write_status()
    pods = sorted(await kruise.pods())

    # Rollout 1: one pod at a time, in OpenKruise's order: what rollbook would do too.
    await kruise.set_image("nginx:1.26")
    await kruise.write_status()
    first = f"default/{NAME}@{kruise.update_revision}#1"
    while candidates := await kruise.update_candidates():
        await kruise.update_in_place(candidates[0])

    # Rollout 2: two pods at once although maxUnavailable is 1, then the last one.
    await kruise.set_image("nginx:1.27")
    await kruise.write_status()
    second = f"default/{NAME}@{kruise.update_revision}#2"
    candidates = await kruise.update_candidates()
    await kruise.update_in_place(*candidates[:2])
    await kruise.update_in_place(candidates[2])
    revisions = list(kruise.revisions)

    async def both_finished() -> list[dict[str, Any]]:
        rows = await query(
            database_url,
            "SELECT rollout_id, from_revision, to_revision, strategy_type, outcome, driven_by FROM rollouts"
            " WHERE workload = $1 ORDER BY started_position",
            NAME,
        )
        return rows if len(rows) == 2 and all(r["outcome"] == "succeeded" for r in rows) else []

    rollouts = await wait_for(both_finished, within=60, what="both observed rollouts succeeded in SQL")
    assert [(r["rollout_id"], r["from_revision"], r["to_revision"], r["driven_by"]) for r in rollouts] == [
        (first, revisions[0], revisions[1], "observed"),
        (second, revisions[1], revisions[2], "observed"),
    ]
    steps = await query(
        database_url,
        "SELECT rollout_id, partition, max_unavailable, driven_by FROM partition_steps WHERE workload = $1"
        " ORDER BY position",
        NAME,
    )
    assert [(s["rollout_id"], s["partition"], s["max_unavailable"], s["driven_by"]) for s in steps] == [
        (first, 0, 1, "observed"),
        (second, 0, 1, "observed"),
    ]

    # Every pod action the stand-in took, as an operator sees them (in-place updates out of service until
    # their pod was back), driven by someone else.
    async def every_update_back() -> list[dict[str, Any]]:
        rows = await query(
            database_url,
            "SELECT rollout_id, pod, action, requested, finished, duration, outcome, driven_by"
            " FROM pod_actions WHERE workload = $1 ORDER BY position",
            NAME,
        )
        updates = [r for r in rows if r["action"] == "updateInPlace"]
        return rows if len(updates) == 6 and all(r["outcome"] == "succeeded" for r in updates) else []

    actions = await wait_for(every_update_back, within=30, what="six observed in-place updates finished")
    assert {r["driven_by"] for r in actions} == {"observed"}
    assert sorted(r["pod"] for r in actions if r["action"] == "createPod") == pods
    for rollout in (first, second):
        updated = [r for r in actions if r["action"] == "updateInPlace" and r["rollout_id"] == rollout]
        assert sorted(r["pod"] for r in updated) == pods
        assert all(r["requested"] < r["finished"] and r["duration"].total_seconds() > 0 for r in updated)

    # The verdicts: the first rollout agrees throughout; the second's batch exceeds maxUnavailable.
    agreement = await query(
        database_url,
        "SELECT rollout_id, action, pod, verdict, reason, pattern, unavailable, max_unavailable"
        " FROM shadow_agreement WHERE workload = $1 ORDER BY position",
        NAME,
    )
    assert [(a["action"], a["verdict"]) for a in agreement if a["rollout_id"] == first] == [
        ("updateInPlace", "agree")
    ] * 3, agreement
    second_verdicts = [a for a in agreement if a["rollout_id"] == second]
    assert [a["verdict"] for a in second_verdicts] == ["agree", "differ", "agree"], second_verdicts
    differ = second_verdicts[1]
    assert (differ["pod"], differ["pattern"], differ["unavailable"], differ["max_unavailable"]) == (
        candidates[1],
        "above maxUnavailable",
        2,
        1,
    )
    assert differ["reason"].startswith(f"rollbook would have updated in place {candidates[0]} instead")
    creates = [a for a in agreement if a["action"] == "createPod"]
    assert [a["verdict"] for a in creates] == ["agree"] * 3, creates
    # The unavailability view, whoever drove the rollout: the batch is the one moment above the limit.
    exceeded = await query(
        database_url, "SELECT rollout_id, unavailable FROM max_unavailable_exceeded WHERE workload = $1", NAME
    )
    assert exceeded and {(e["rollout_id"], e["unavailable"]) for e in exceeded} == {(second, 2)}

    # rollbook acted on nothing: no decision of its own, no action id on any pod.
    assert (
        await query(
            database_url,
            "SELECT 1 FROM events WHERE stream = $1",
            registry.CLONESET.decisions_stream("default", NAME),
        )
        == []
    )
    listed: Any = await client.CoreV1Api(api).list_namespaced_pod("default", _preload_content=False)
    items = json.loads(await listed.read())["items"]
    assert not [p for p in items if ACTION_ID_ANNOTATION in (p["metadata"].get("annotations") or {})]

    # The report (CLI), history, replay and what-if work for it as for rollbook's own rollouts.
    report = rollbook(stack, "shadow", "report", f"default/{NAME}", "--json")
    assert report.returncode == 0, report.stderr
    summaries = {s["rollout_id"]: s for s in json.loads(report.stdout)}
    assert (summaries[first]["verdict"], summaries[first]["agree"], summaries[first]["differ"]) == (
        "agrees",
        3,
        0,
    )
    assert (summaries[second]["verdict"], summaries[second]["differ"]) == ("differs", 1)
    assert summaries[second]["patterns"] == {"above maxUnavailable": 1}
    text = rollbook(stack, "shadow", "report", f"default/{NAME}")
    assert text.returncode == 0 and f"updateInPlace {candidates[1]}:" in text.stdout, text.stdout
    history = rollbook(stack, "history", f"default/{NAME}")
    assert history.returncode == 0 and history.stdout.count("(observed)") == 2, history.stdout
    store = await EventStore.connect(database_url)
    try:
        lines = await replay_lines(store, second)
        assert any(f"PodActionObserved updateInPlace {candidates[1]}" in line for line in lines), lines
        result = await what_if_rollout(store, second, {})
    finally:
        await store.close()
    assert (result.recorded.actions, len(result.recorded.pods_touched), result.recorded.completed) == (
        3,
        3,
        True,
    )
    assert result.recorded.max_unavailable == 2  # the stand-in's batch
    assert result.replanned.completed and result.replanned.max_unavailable == 1  # rollbook keeps the limit


async def test_a_cloneset_labelled_shadow_is_recorded_and_left_alone_by_the_running_services(
    stack: Stack, api: client.ApiClient
) -> None:
    """Normal mode, all four services: the label alone keeps rollbook's hands off one CloneSet."""
    await stack.start("auditor", "watcher", "planner", "executor")
    database_url = stack.settings.database_url
    labelled = copy.deepcopy(CLONESET)
    labelled["metadata"] = {"name": LABELLED, "labels": {"app": LABELLED, "rollbook.io/manage": "shadow"}}
    labelled["spec"]["replicas"] = 2
    labelled["spec"]["selector"] = {"matchLabels": {"app": LABELLED}}
    labelled["spec"]["template"]["metadata"]["labels"] = {"app": LABELLED}
    kruise = KruiseStandIn(api, database_url, LABELLED)
    await kruise.create(labelled)
    await kruise.write_status()
    for instance in ("f2g4h", "j6k8l"):
        await kruise.create_pod(instance)
    await kruise.write_status()
    await kruise.set_image("nginx:1.26")
    await kruise.write_status()
    while candidates := await kruise.update_candidates():
        await kruise.update_in_place(candidates[0])
    rollout = f"default/{LABELLED}@{kruise.update_revision}#1"

    async def compared() -> list[dict[str, Any]]:
        rows = await query(
            database_url,
            "SELECT action, verdict FROM shadow_agreement WHERE workload = $1 ORDER BY position",
            LABELLED,
        )
        return rows if len(rows) == 4 else []

    rows = await wait_for(compared, within=30, what="two creates and two updates compared")
    assert [(r["action"], r["verdict"]) for r in rows] == [
        ("createPod", "agree"), ("createPod", "agree"), ("updateInPlace", "agree"), ("updateInPlace", "agree")
    ]  # fmt: skip

    async def succeeded() -> list[dict[str, Any]]:
        rows = await query(
            database_url, "SELECT outcome, driven_by FROM rollouts WHERE rollout_id = $1", rollout
        )
        return rows if rows and rows[0]["outcome"] == "succeeded" else []

    assert await wait_for(succeeded, within=30, what="the observed rollout succeeded") == [
        {"outcome": "succeeded", "driven_by": "observed"}
    ]
    # The executor ran all along, yet rollbook decided nothing for the labelled CloneSet.
    decisions = registry.CLONESET.decisions_stream("default", LABELLED)
    assert await query(database_url, "SELECT type FROM events WHERE stream = $1", decisions) == []
    pods = await kruise.pods()
    assert not [p for p in pods.values() if ACTION_ID_ANNOTATION in (p["metadata"].get("annotations") or {})]
