"""`rollbook verify --all` verifies every workload kind in the log: a CloneSet history and a SidecarSet
rollout recorded through their planners' own code paths, and a Deployment's trail stored by the watcher's
recorder, into one store; an edited SidecarSet decision is reported as a divergence (exit 1), as an edited
CloneSet one is, and so is a forged or edited event of the Deployment's trail."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from services.cli.replay import kind_counts
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds import registry
from services.kinds.cloneset.rules.decisions import RULES_VERSION as CLONESET_RULES
from services.kinds.sidecarset.rules.decisions import RULES_VERSION as SIDECARSET_RULES
from services.model.events import Event, ObjectObserved, RolloutCompleted, new_event
from services.model.memory_store import InMemoryEventStore
from services.model.sidecarset_streams import SIDECARSET_KIND
from services.model.signed_note import Signer
from services.planner.kinds import SIDECARSET as SIDECARSET_PLANNER
from services.planner.service import Planner
from services.replay.operations import verify_all, verify_log, verify_recorded
from services.replay.simulation import T0, WorkloadSimulation
from services.watcher.recorder import Recorder
from tests.kinds.sidecarset.test_upgrade import NEW, OLD, pod, sidecarset
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import REPO_ROOT
from tests.replay.test_recorded_replay import FIRST, HISTORY, OBSERVED, RECORDED, observations

pytestmark = pytest.mark.asyncio(loop_scope="session")

SIDECARSET = "test-sidecarset"


async def observe(store: EventStore, obj: dict[str, Any], seconds: float) -> None:
    metadata = obj["metadata"]
    kind = obj["kind"]
    payload: Event = ObjectObserved(
        kind=kind,
        namespace=metadata.get("namespace", ""),
        name=metadata["name"],
        uid=metadata.get("uid") or f"uid-{metadata['name']}",
        resource_version=str(seconds),
        change="MODIFIED",
        object=obj,
    )
    stream = registry.SIDECARSET.observed_stream("", SIDECARSET)
    version = (await store.stream_version(stream)) + 1
    event = new_event(
        payload, stream=stream, stream_version=version, occurred_at=T0 + timedelta(seconds=seconds)
    )
    await store.append([event], expected_version=version - 1)


async def record_sidecarset_rollout(store: EventStore) -> None:
    """The SidecarSet planner's rounds over a SidecarSet seen at the old image, then changed to a new one
    (a partitioned step upgrading one of two pods)."""
    planner = Planner(Settings(), store)
    workload = planner.workload(SIDECARSET_PLANNER, SIDECARSET)
    for seconds, obj in enumerate([pod("a"), pod("b", age=1), sidecarset(OLD)], start=1):
        await observe(store, obj, seconds)
    await planner.plan_round(workload)
    await observe(store, sidecarset(NEW, partition=1), 10)
    await planner.plan_round(workload)


async def record_deployment(store: EventStore | InMemoryEventStore, behind: int = 0) -> None:
    """The Deployment's observations stored as the watcher stores them and its recorder's trail, the last
    ``behind`` observations not recorded yet."""
    for index, envelope in enumerate(observations(HISTORY), start=1):
        await store.append([envelope], expected_version=envelope.stream_version - 1)
        if index <= len(HISTORY) - behind:
            await Recorder(store).record(OBSERVED)


AUDITOR_KEY = Signer.generate("test.rollbook/log").verifier.text()


@pytest.fixture
async def database(server_urls: ServerUrls) -> AsyncIterator[str]:
    async with fresh_database(server_urls.database_url, prefix="rollbook_verify_kinds") as url:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            await store.import_events(WorkloadSimulation("team-a", "web", replicas=2, start=T0).run())
            await record_sidecarset_rollout(store)
            await record_deployment(store)
        finally:
            await store.close()
        yield url


async def rollbook(database_url: str, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        cwd=REPO_ROOT,
        # A data dir of this database's own (checkpoints other runs left in the default one are not its)
        # and an auditor's public key to trust, though no auditor signed this log.
        env={
            **os.environ,
            "ROLLBOOK_DATABASE_URL": database_url,
            "ROLLBOOK_DATA_DIR": str(Path(tempfile.gettempdir()) / database_url.rsplit("/", 1)[-1]),
            "ROLLBOOK_AUDIT_PUBLIC_KEY": AUDITOR_KEY,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    return await process.wait(), output.decode()


async def edit_partition_step(database_url: str) -> None:
    """A superuser edits the SidecarSet's recorded partition step (guard triggers off)."""
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        async with conn.transaction():
            await conn.execute("SET session_replication_role = replica")
            changed = await conn.execute(
                "UPDATE events SET payload = jsonb_set(payload, '{partition}', '0')"
                " WHERE stream = $1 AND type = 'PartitionStepPlanned'",
                registry.SIDECARSET.decisions_stream("", SIDECARSET),
            )
            assert changed == "UPDATE 1"
    finally:
        await conn.close()


async def test_verify_all_covers_sidecarsets_and_reports_their_divergence(database: str) -> None:
    store = await EventStore.connect(database)
    try:
        reports = await verify_all(store)
    finally:
        await store.close()
    assert [(r.kind, r.workload, r.divergence) for r in reports] == [
        ("CloneSet", "team-a/web", None),
        (SIDECARSET_KIND, SIDECARSET, None),
    ]
    sidecar = reports[1]
    assert sidecar.rounds == 2 and sidecar.decisions == 8 and sidecar.events > sidecar.decisions

    code, output = await rollbook(database, "verify", "--all")
    assert code == 0, output
    assert "OK team-a/web:" in output
    assert f"OK SidecarSet {SIDECARSET}: 2 rounds" in output
    assert "CloneSet: 1 verified, 0 diverged; SidecarSet: 1 verified, 0 diverged" in output

    await edit_partition_step(database)
    code, output = await rollbook(database, "verify", "--all")
    assert code == 1, output
    assert f"DIVERGENCE in SidecarSet {SIDECARSET}" in output and "partition" in output
    assert "OK team-a/web:" in output  # the CloneSet is still verified, and clean
    assert "CloneSet: 1 verified, 0 diverged; SidecarSet: 1 verified, 1 diverged" in output
    code, output = await rollbook(database, "verify", "--all", "--json")
    assert code == 1
    by_kind = {r["kind"]: r for r in msgspec.json.decode(output)}
    assert by_kind["CloneSet"]["divergence"] is None
    divergence = by_kind[SIDECARSET_KIND]["divergence"]
    # The second round's (v5) third decision: RevisionCreated, RolloutStarted, PartitionStepPlanned.
    assert (divergence["event_type"], divergence["stream_version"]) == ("PartitionStepPlanned", 8)
    assert divergence["field"] == "payload.partition"
    assert (divergence["recorded"], divergence["replayed"]) == (0, 1)


async def forget_rules(database_url: str, cloneset_rounds: int) -> int:
    """Make the store look as if an older rollbook (planner rules before versioning) recorded the
    SidecarSet's rounds and the CloneSet's first ``cloneset_rounds`` rounds: their stored RoundPlanned
    payloads (or a status round's ``round``) lose the ``rules`` field (a superuser edit, guard triggers
    off). Returns the CloneSet's number of rounds."""
    rounds = "(type = 'RoundPlanned' OR (type = 'StatusPlanned' AND payload ? 'round'))"
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        async with conn.transaction():
            await conn.execute("SET session_replication_role = replica")
            versions = await conn.fetch(
                f"SELECT stream_version FROM events WHERE stream = $1 AND {rounds} ORDER BY stream_version",
                registry.CLONESET.decisions_stream("team-a", "web"),
            )
            changed = await conn.execute(
                "UPDATE events SET payload = CASE type WHEN 'RoundPlanned' THEN payload - 'rules'"
                f" ELSE payload #- '{{round,rules}}' END WHERE {rounds}"
                " AND (stream = $1 OR (stream = $2 AND stream_version <= $3))",
                registry.SIDECARSET.decisions_stream("", SIDECARSET),
                registry.CLONESET.decisions_stream("team-a", "web"),
                versions[cloneset_rounds - 1]["stream_version"],
            )
            assert changed == f"UPDATE {cloneset_rounds + 2}"
            return len(versions)
    finally:
        await conn.close()


async def test_rounds_recorded_by_older_planner_rules_are_reported_not_re_verifiable(database: str) -> None:
    total = await forget_rules(database, cloneset_rounds=3)
    code, output = await rollbook(database, "verify", "--all")
    assert code == 0, output
    assert f"OK team-a/web: {total - 3} rounds" in output
    assert (
        f"NOT RE-VERIFIABLE team-a/web: 3 rounds recorded by planner rules v1, this rollbook has"
        f" v{CLONESET_RULES}: not re-verifiable"
    ) in output
    assert f"OK SidecarSet {SIDECARSET}: 0 rounds, 0 decisions" in output
    assert (
        f"NOT RE-VERIFIABLE SidecarSet {SIDECARSET}: 2 rounds recorded by planner rules v1, this rollbook"
        f" has v{SIDECARSET_RULES}: not re-verifiable"
    ) in output
    assert "rollbook audit verify" in output
    assert (
        "CloneSet: 1 verified, 0 diverged, 1 with rounds not re-verifiable;"
        " SidecarSet: 1 verified, 0 diverged, 1 with rounds not re-verifiable"
    ) in output

    code, output = await rollbook(database, "verify", "--all", "--strict")
    assert code == 1 and "NOT RE-VERIFIABLE team-a/web: 3 rounds" in output, output
    code, output = await rollbook(database, "verify", "--all", "--json", "--strict")
    assert code == 1, output
    skipped = {(r["kind"], r["workload"]): r["skipped"] for r in msgspec.json.decode(output)}
    assert skipped == {
        ("CloneSet", "team-a/web"): {"1": 3},
        (SIDECARSET_KIND, SIDECARSET): {"1": 2},
        ("Deployment", "ops/web"): {},  # no planner rounds: nothing recorded by other rules
    }
    code, output = await rollbook(database, "sidecarset", "verify", SIDECARSET)
    assert code == 0 and "NOT RE-VERIFIABLE" in output and "2 rounds recorded by planner rules v1" in output
    code, output = await rollbook(database, "sidecarset", "verify", SIDECARSET, "--strict")
    assert code == 1, output

    # What verify cannot re-run, the hash chain still covers: the edited rounds are named.
    # (No auditor ran here, so no signed checkpoint covers the log either: named too.)
    code, output = await rollbook(database, "audit", "verify", "--no-bus")
    assert code == 1 and output.count("EDITED: ") == 5 and "NO-CHECKPOINT: " in output, output


DEPLOYMENT_COUNTS = "Deployment: 1 verified, 0 diverged; StatefulSet: 0 verified, 0 diverged"


async def test_verify_all_checks_every_recorded_trail(database: str) -> None:
    store = await EventStore.connect(database)
    try:
        log = await verify_log(store)
        alone = await verify_recorded(store, "Deployment/ops/web")
    finally:
        await store.close()
    assert [(r.kind, r.workload, r.divergence) for r in log.planned] == [
        ("CloneSet", "team-a/web", None),
        (SIDECARSET_KIND, SIDECARSET, None),
    ]
    assert log.recorded == [alone]  # the same check as `verify Deployment/ops/web`, in the one pass
    (trail,) = log.recorded
    assert (trail.divergence, trail.pending, trail.observations) == (None, 0, len(HISTORY))
    assert trail.recorded == trail.refolded > 0

    code, output = await rollbook(database, "verify", "--all")
    assert code == 0, output
    assert (
        f"OK Deployment ops/web: {trail.recorded} recorded events are what its {len(HISTORY)} observations"
        " fold into\n"
    ) in output
    assert (
        f"CloneSet: 1 verified, 0 diverged; SidecarSet: 1 verified, 0 diverged; {DEPLOYMENT_COUNTS}" in output
    )
    code, output = await rollbook(database, "verify", "--all", "--json")
    assert code == 0, output
    reports = msgspec.json.decode(output)
    assert [r["kind"] for r in reports] == ["CloneSet", SIDECARSET_KIND, "Deployment"]
    # Every entry has a planned report's fields with their meaning, so a consumer of them keeps working.
    assert all(set(reports[0]) <= set(r) for r in reports)
    assert reports[2] == {
        "kind": "Deployment",
        "workload": "ops/web",
        "events": len(HISTORY) + trail.recorded,
        "rounds": 0,
        "decisions": 0,
        "rules": 0,
        "skipped": {},
        "observations": len(HISTORY),
        "recorded": trail.recorded,
        "refolded": trail.refolded,
        "pending": 0,
        "divergence": None,
    }


async def test_verify_all_exits_1_naming_a_forged_or_edited_recorded_event(database: str) -> None:
    store = await EventStore.connect(database)
    try:
        # The owner appends that the first rollout failed: no observation says so.
        version = await store.stream_version(RECORDED)
        forged = new_event(
            RolloutCompleted(rollout_id=FIRST, revision="web-b", outcome="failed"),
            stream=RECORDED,
            stream_version=version + 1,
            occurred_at=T0,
        )
        await store.append([forged], expected_version=version)
        step = next(e for e in await store.read_stream(RECORDED) if e.envelope.type == "PartitionStepPlanned")
    finally:
        await store.close()
    code, output = await rollbook(database, "verify", "--all")
    assert code == 1, output
    assert (
        f"DIVERGED Deployment ops/web: RolloutCompleted at version {version + 1} has no observation behind it"
        f" (the observations fold into {version} events)"
    ) in output
    assert "OK team-a/web:" in output and f"OK SidecarSet {SIDECARSET}:" in output  # still verified, clean
    assert "Deployment: 1 verified, 1 diverged; StatefulSet: 0 verified, 0 diverged" in output

    # An earlier event of the trail edited in place (guard triggers off): the first difference is named.
    conn = await asyncpg.connect(asyncpg_url(database))
    try:
        async with conn.transaction():
            await conn.execute("SET session_replication_role = replica")
            changed = await conn.execute(
                "UPDATE events SET payload = jsonb_set(payload, '{max_surge}', '9') WHERE event_id = $1",
                step.envelope.event_id,
            )
            assert changed == "UPDATE 1"
    finally:
        await conn.close()
    code, output = await rollbook(database, "verify", "--all", "--json")
    assert code == 1, output
    by_kind = {r["kind"]: r for r in msgspec.json.decode(output)}
    assert by_kind["CloneSet"]["divergence"] is None and by_kind[SIDECARSET_KIND]["divergence"] is None
    divergence = by_kind["Deployment"]["divergence"]
    assert (divergence["stream"], divergence["stream_version"], divergence["event_id"]) == (
        RECORDED,
        step.envelope.stream_version,
        str(step.envelope.event_id),
    )
    assert divergence["field"] == "payload.max_surge"
    assert (divergence["recorded"], divergence["replayed"]) == (9, step.envelope.payload.max_surge)
    code, output = await rollbook(database, "verify", "--all")
    assert code == 1, output
    assert (
        f"DIVERGED Deployment ops/web: PartitionStepPlanned at version {step.envelope.stream_version} differs"
        " from the fold's PartitionStepPlanned in its payload"
    ) in output


async def test_a_recorder_behind_its_observations_is_pending_in_verify_all() -> None:
    store = InMemoryEventStore()
    await record_deployment(store, behind=6)
    log = await verify_log(store)
    (trail,) = log.recorded
    assert trail.divergence is None and trail.pending > 0
    assert trail.describe().endswith(f"({trail.pending} not recorded yet)")
    assert log.recorded == [await verify_recorded(store, "Deployment/ops/web")]
    assert kind_counts(log.planned, log.recorded).endswith(
        "Deployment: 1 verified, 0 diverged, 1 with observations not recorded yet;"
        " StatefulSet: 0 verified, 0 diverged"
    )
    # The recorder catches up: nothing pending.
    await Recorder(store).record(OBSERVED)
    assert [(t.divergence, t.pending) for t in (await verify_log(store)).recorded] == [(None, 0)]
