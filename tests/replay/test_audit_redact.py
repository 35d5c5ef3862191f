"""``rollbook audit redact`` on a trail recorded before redaction: afterwards nothing of the secret is
left, every workload still verifies, the hash chain is whole, the redaction is on record, the Merkle tree
is rebuilt and a checkpoint of it signed, a checkpoint or receipt taken before it is accepted as history
only because a signed record names it, and any other edit is still caught."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from services.cli.replay import redact_signed, verify_trail
from services.infra.database import asyncpg_url
from services.infra.db_roles import assume_sql
from services.infra.rechain import rechain
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.supervisor import settings_env
from services.infra.transparency import (
    MerkleLog,
    checkpoint_standing,
    checkpointer_for,
    export_receipt,
    load_signer,
    trusted_verifiers,
)
from services.model.events import REDACTION_STREAM, Envelope, TrailRedacted, encode, new_event
from services.model.hashchain import Checkpoint
from services.model.receipt import canonical_json, verify_receipt
from services.model.redaction import LAST_APPLIED_ANNOTATION, RedactionPolicy
from services.model.signed_note import SignedCheckpoint
from services.replay import simulation
from services.replay.audit import audit_log
from services.replay.operations import verify_all
from services.replay.redact import RedactionAborted, RedactionResult, plan_redaction
from services.replay.simulation import T0, WorkloadSimulation
from services.replay.verify import verify_workload
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import REPO_ROOT, e2e_database

CANARY = "canary-3f9a61c2d8"
POLICY = RedactionPolicy(b"audit-redact-key" * 2)


@pytest.fixture
def secret_template(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Simulated CloneSets carry the canary in an env value and in their last-applied annotation."""
    plain = simulation.base_cloneset

    def with_secret(*args: Any, **kwargs: Any) -> dict[str, Any]:
        cloneset = plain(*args, **kwargs)
        cloneset["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "API_TOKEN", "value": CANARY}
        ]
        cloneset["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: f'{{"token":"{CANARY}"}}'}
        return cloneset

    monkeypatch.setattr(simulation, "base_cloneset", with_secret)
    yield


def _trail(inputs: dict[uuid.UUID, bytes] | None = None) -> list[Envelope]:
    """The trail; ``inputs`` gets the inputs of the rounds that started its rollouts (``round_inputs``)."""
    simulated = WorkloadSimulation("team-a", "web", replicas=4, start=T0)
    events = simulated.run()
    assert any(CANARY.encode() in encode(e) for e in events)  # recorded before redaction
    assert verify_workload("team-a", "web", events).clean
    if inputs is not None:
        inputs.update(simulated.rollout_inputs)
    return events


def test_a_redacted_trail_holds_no_secret_and_verifies_round_by_round(secret_template: None) -> None:
    events = _trail()
    plan = plan_redaction(POLICY, list(enumerate(events, 1)))
    rewritten = [plan.changed.get(position, e) for position, e in enumerate(events, 1)]
    assert not [e.type for e in rewritten if CANARY.encode() in encode(e)]
    assert plan.rounds_resealed > 0  # rounds folded the secret: their input digests follow the rewrite
    report = verify_workload("team-a", "web", rewritten)
    assert report.clean and report.rounds > 5 and report.decisions > 10, report.divergence
    # the same policy again: nothing left to rewrite
    assert plan_redaction(POLICY, list(enumerate(rewritten, 1))).changed == {}


async def _stored(store: EventStore, events: list[Envelope]) -> None:
    for envelope in events:
        await store.append([envelope], expected_version=envelope.stream_version - 1)


def _settings(url: str, data_dir: Path) -> Settings:
    return Settings(
        database_url=url,
        data_dir=str(data_dir),
        audit_key_name="test.rollbook/redact",
        audit_checkpoint_dir=str(data_dir / "audit" / "checkpoints"),
    )


async def _redact(store: EventStore, settings: Settings) -> RedactionResult:
    """`rollbook audit redact` as the CLI runs it (no bus): checked, rewritten, recorded, signed."""
    signer = load_signer(settings)
    result: RedactionResult = await redact_signed(
        store, settings, POLICY, signer, trusted_verifiers(settings)
    )
    return result


async def _rewrite_as_owner(url: str, store: EventStore, position: int) -> None:
    """An insider with the owner's login but not the signing key: edits one event, recomputes every hash
    with rollbook's own code, and rebuilds the Merkle tree over the edited log."""
    rows = await store.query("SELECT payload::text FROM events WHERE global_position = $1", position)
    edited = rows[0][0][:-1] + ', "forged": true}'
    connection = await asyncpg.connect(asyncpg_url(url))
    try:
        await connection.execute(assume_sql("owner"))
        async with connection.transaction():
            await rechain(connection, {position: edited})
    finally:
        await connection.close()
    await MerkleLog(store).extend()


def _rollout(events: list[Envelope]) -> str:
    """A rollout of the simulated trail whose events carried the secret."""
    return next(
        e.correlation_id
        for e in events
        if e.correlation_id and "@" in e.correlation_id and CANARY.encode() in encode(e)
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_a_signed_trail_redacted_verifies_and_names_the_checkpoints_and_receipts_it_supersedes(
    secret_template: None, server_urls: ServerUrls, tmp_path: Path
) -> None:
    events = _trail()
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
            settings = _settings(url, tmp_path)
            trusted = trusted_verifiers(settings) or [load_signer(settings).verifier]
            auditor = checkpointer_for(store, settings, None)  # the auditor's, left running meanwhile
            signed_before = await auditor.checkpoint()
            assert signed_before is not None and signed_before.body.tree_size == len(events)
            rollout = _rollout(events)
            receipt_before = canonical_json(await export_receipt(store, trusted, rollout))
            assert (await verify_trail(store, settings, trusted, bus=False)).clean

            result = await _redact(store, settings)

            record, after = result.record, result.checkpoint
            assert record is not None and after is not None
            # The record names the tree head before and the checkpoint it supersedes; the log is signed
            # again over the rewritten events and the record.
            assert (record.tree_size_before, record.root_before) == (
                len(events),
                signed_before.body.root_hash.hex(),
            )
            assert record.signed_superseded == {str(len(events)): signed_before.body.root_hash.hex()}
            assert after.body.tree_size == len(events) + 1
            assert after.body.root_hash != signed_before.body.root_hash
            # Both checkpoints stay where they were kept: history is not deleted.
            notes = await store.query("SELECT tree_size FROM signed_checkpoints ORDER BY tree_size")
            assert [r[0] for r in notes] == [len(events), len(events) + 1]
            assert len(list((tmp_path / "audit" / "checkpoints").glob("checkpoint-*.txt"))) == 2

            report = await verify_trail(store, settings, trusted, bus=False)
            assert report.clean, [f.describe() for f in report.findings]
            assert len(report.redactions) == 1 and POLICY.policy_id in report.redactions[0]
            assert f"tree head before: {len(events)} events" in report.redactions[0]
            assert len(report.accepted) == 1, report.accepted
            assert report.accepted[0].startswith(f"checkpoint of tree size {len(events)} (")
            assert "superseded by the redaction of" in report.accepted[0]

            # The receipt exported before: still authentic offline, and reported as superseded by the
            # named redaction against the log; one exported now is current.
            assert verify_receipt(receipt_before, trusted).events > 0
            held = SignedCheckpoint.open(json.loads(receipt_before)["checkpoint"], trusted)
            standing = await checkpoint_standing(store, trusted, held)
            assert standing.state == "superseded", standing.detail
            assert record.redacted_at.isoformat() in standing.detail
            receipt_after = await export_receipt(store, trusted, rollout)
            assert CANARY not in canonical_json(receipt_after).decode()
            held = SignedCheckpoint.open(receipt_after["checkpoint"], trusted)
            assert (await checkpoint_standing(store, trusted, held)).state == "current"

            # An auditor that kept its tree in memory across the redaction signs the log as it is now.
            assert await auditor.checkpoint() is None  # the redaction's checkpoint covers everything
            await _stored(store, WorkloadSimulation("team-b", "api", replicas=2, start=T0).run())
            later = await auditor.checkpoint()
            assert later is not None and later.body.tree_size > after.body.tree_size
            report = await verify_trail(store, settings, trusted, bus=False)
            assert report.clean, [f.describe() for f in report.findings]
            assert (await checkpoint_standing(store, trusted, held)).state == "current"
        finally:
            await store.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_an_edit_after_a_redaction_is_caught_even_with_a_forged_redaction_record(
    secret_template: None, server_urls: ServerUrls, tmp_path: Path
) -> None:
    events = _trail()
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
            settings = _settings(url, tmp_path)
            trusted = trusted_verifiers(settings) or [load_signer(settings).verifier]
            assert await checkpointer_for(store, settings, None).checkpoint() is not None
            result = await _redact(store, settings)
            after = result.checkpoint
            assert after is not None
            receipt = await export_receipt(store, trusted, _rollout(events))

            # The owner edits an event and recomputes chain and tree, without the key.
            await _rewrite_as_owner(url, store, 5)
            # Both checkpoints mismatch now, and the redaction no longer accounts for the older one: no
            # valid signed checkpoint covers its record any more.
            report = await verify_trail(store, settings, trusted, bus=False)
            kinds = [f.kind for f in report.findings]
            assert kinds == ["checkpoint-mismatch"] * 2, [f.describe() for f in report.findings]
            assert f"the first {after.body.tree_size} events" in report.findings[1].detail
            assert report.accepted == []
            held = SignedCheckpoint.open(receipt["checkpoint"], trusted)
            assert (await checkpoint_standing(store, trusted, held)).state == "unaccounted"

            # ... and appends a redaction record of their own naming the checkpoint the edit broke.
            version = await store.stream_version(REDACTION_STREAM)
            forged = msgspec.structs.replace(
                result.record,
                signed_superseded={str(after.body.tree_size): after.body.root_hash.hex()},
            )
            assert isinstance(forged, TrailRedacted)
            await store.append(
                [new_event(forged, stream=REDACTION_STREAM, stream_version=version + 1, occurred_at=T0)],
                expected_version=version,
            )
            report = await verify_trail(store, settings, trusted, bus=False)
            assert [f.kind for f in report.findings] == ["checkpoint-mismatch"] * 2
            assert "no valid signed checkpoint taken after that record covers it" in report.findings[1].detail
            assert report.accepted == []
            assert "NOT covered by a valid signed checkpoint" in report.redactions[-1]
            assert (await checkpoint_standing(store, trusted, held)).state == "unaccounted"
        finally:
            await store.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_a_redaction_refuses_to_account_for_an_earlier_edit(
    secret_template: None, server_urls: ServerUrls, tmp_path: Path
) -> None:
    events = _trail()
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
            settings = _settings(url, tmp_path)
            assert await checkpointer_for(store, settings, None).checkpoint() is not None
            await _rewrite_as_owner(url, store, 5)

            with pytest.raises(RedactionAborted, match="finds 1 problem.*CHECKPOINT-MISMATCH"):
                await _redact(store, settings)

            assert not await store.read_stream(REDACTION_STREAM)
            rows = await store.query("SELECT count(*) FROM events WHERE payload::text LIKE $1", f"%{CANARY}%")
            assert rows[0][0] > 0  # nothing was rewritten
        finally:
            await store.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_redacting_the_store_rechains_records_it_and_still_catches_other_edits(
    secret_template: None, server_urls: ServerUrls, tmp_path: Path
) -> None:
    inputs: dict[uuid.UUID, bytes] = {}
    events = _trail(inputs)
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
            for round_id, input_json in inputs.items():  # as the planner stores them: the secret in them
                await store.store_round_input(round_id, input_json)
            assert inputs and all(CANARY.encode() in i for i in inputs.values())
            taken = await store.write_checkpoint()
            assert taken is not None
            before = Checkpoint(global_position=taken[0], chain_hash=taken[1].hex(), taken_at=T0)
            forged = msgspec.structs.replace(before, chain_hash="00" * 32)

            result = await _redact(store, _settings(url, tmp_path))

            record = result.record
            assert record is not None and record.policy == POLICY.policy_id
            assert record.chain_before == before.chain_hash and record.chain_after != before.chain_hash
            connection = await asyncpg.connect(asyncpg_url(url))
            try:
                rows = await connection.fetch("SELECT e::text FROM events e")
                assert rows and not [r for r in rows if CANARY in r[0]]
                # The rounds' stored inputs, written before the redaction, went with it.
                assert await connection.fetchval("SELECT count(*) FROM round_inputs") == 0
            finally:
                await connection.close()
            reports = await verify_all(store)
            assert reports and all(r.clean for r in reports), [r.divergence for r in reports]

            audit = await audit_log(store, [("checkpoints.jsonl", before)])
            assert audit.findings == [] and len(audit.redactions) == 1 and len(audit.accepted) == 1
            assert POLICY.policy_id in audit.redactions[0]
            # a checkpoint the record does not name is still a mismatch
            audit = await audit_log(store, [("checkpoints.jsonl", forged)])
            assert [f.kind for f in audit.findings] == ["checkpoint-mismatch"]

            # an edit after the redaction, by someone who can switch the guard off, is caught as before
            connection = await asyncpg.connect(asyncpg_url(url))
            try:
                async with connection.transaction():
                    await connection.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
                    await connection.execute(
                        "UPDATE events SET payload = jsonb_set(payload, '{reason}', '\"edited\"')"
                        " WHERE global_position = (SELECT min(global_position) FROM events"
                        " WHERE type = 'RequeueScheduled')"
                    )
                    await connection.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
            finally:
                await connection.close()
            audit = await audit_log(store, [])
            assert [f.kind for f in audit.findings] == ["edited"]
        finally:
            await store.close()


def test_a_rewrite_that_would_change_a_decision_is_refused(secret_template: None) -> None:
    events = _trail()
    # A decision recorded with a value no redaction of the inputs gives: the rewrite cannot keep it exact.
    position, tampered = next(
        (i, e)
        for i, e in enumerate(events)
        if e.type == "PodActionRequested" and e.payload.details  # type: ignore[union-attr]
    )
    details = copy.deepcopy(tampered.payload.details)  # type: ignore[union-attr]
    details["tampered"] = True
    events[position] = msgspec.structs.replace(
        tampered, payload=msgspec.structs.replace(tampered.payload, details=details)
    )
    with pytest.raises(RedactionAborted, match="would not verify"):
        plan_redaction(POLICY, list(enumerate(events, 1)))


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_the_command_redacts_once_names_it_in_audit_verify_and_refuses_without_its_key(
    secret_template: None, server_urls: ServerUrls, tmp_path: Path
) -> None:
    events = _trail()
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
        finally:
            await store.close()
        key = tmp_path / "key"
        key.write_text("k" * 40)
        settings = Settings(database_url=url, redaction_key_file=str(key), data_dir=str(tmp_path))

        missing = msgspec.structs.replace(settings, redaction_key_file=str(tmp_path / "absent"))
        refused = await asyncio.to_thread(_cli, missing, "audit", "redact")
        assert refused.returncode == 1 and refused.stderr.startswith(
            "rollbook: cannot read the redaction key"
        )
        assert "Traceback" not in refused.stderr

        # A signed checkpoint and a customer's receipt taken before the redaction.
        signed = await asyncio.to_thread(_cli, settings, "audit", "checkpoint", "--no-bus")
        assert signed.returncode == 0, signed.stdout + signed.stderr
        rollout = _rollout(events)
        receipt = tmp_path / "receipt.json"
        exported = await asyncio.to_thread(
            _cli, settings, "audit", "export", rollout.split("@")[0], "--rollout", rollout, "-o", str(receipt)
        )
        assert exported.returncode == 0, exported.stdout + exported.stderr

        done = await asyncio.to_thread(_cli, settings, "audit", "redact", "--no-bus")
        assert done.returncode == 0 and "\nredacted " in f"\n{done.stdout}", done.stdout + done.stderr
        assert "it supersedes 1 signed checkpoint(s)" in done.stdout, done.stdout
        again = await asyncio.to_thread(_cli, settings, "audit", "redact", "--no-bus")
        assert again.returncode == 0 and "nothing rewritten" in again.stdout, again.stdout + again.stderr
        audit = await asyncio.to_thread(_cli, settings, "audit", "verify", "--no-bus")
        assert audit.returncode == 0 and "redacted " in audit.stdout and "OK:" in audit.stdout, audit.stdout
        assert "is superseded by the redaction of" in audit.stdout, audit.stdout
        checked = await asyncio.to_thread(_cli, settings, "audit", "verify-receipt", str(receipt), "--log")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "\nSUPERSEDED: superseded by the redaction of" in checked.stdout, checked.stdout
        verified = await asyncio.to_thread(_cli, settings, "verify", "--all")
        assert verified.returncode == 0, verified.stdout + verified.stderr
