"""The signed Merkle log end to end on a real database: the tree the auditor stores agrees with the one
recomputed from the events, proofs of every event verify against the signed checkpoint, receipts verify
offline, checkpoints follow the log, and a trail recorded before the tree existed gets one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.infra.database import upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.transparency import (
    MerkleLog,
    checkpointer_for,
    consistency,
    export_receipt,
    prove,
    trusted_verifiers,
)
from services.model.merkle import CompactRange, event_leaf_hash, verify_consistency
from services.model.receipt import canonical_json, verify_receipt
from services.model.signed_note import SignedCheckpoint
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import SignedTrail, append_rollout, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")
TRAILS = Path(__file__).resolve().parents[1] / "fixtures" / "trails"
INSERT_AS_BEFORE = (
    "INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, causation_id,"
    " correlation_id, payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)"
)


async def test_the_stored_tree_proves_every_event(server_urls: ServerUrls, tmp_path: Path) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=3, events=300) as trail:
        store = trail.store
        rows = await store.query("SELECT global_position, stream_hash FROM events ORDER BY global_position")
        leaves = [event_leaf_hash(p, bytes(h)) for p, h in rows]
        checkpoint = trail.checkpointer.last
        assert checkpoint is not None and checkpoint.body.tree_size == 900
        assert checkpoint.body.root_hash == CompactRange.of(leaves).root()
        trusted = trusted_verifiers(trail.settings)
        for index in (0, 1, 255, 256, 511, 512, 700, 767, 768, 899):
            proof = await prove(store, trusted, position=int(rows[index][0]))
            assert proof.leaf_index == index and proof.leaf_hash == leaves[index]
        # The log grows: the next checkpoint, and a consistency proof from the first.
        await append_rollout(store, "prod/late", 40)
        second = await trail.checkpointer.checkpoint()
        assert second is not None and second.body.tree_size == 940
        verify_consistency(
            900, 940, checkpoint.body.root_hash, second.body.root_hash, await consistency(store, 900, 940)
        )
        assert await trail.checkpointer.checkpoint() is None, "an unmoved log is not signed again"
        # A new process loads the stored tree and agrees.
        fresh = MerkleLog(store)
        head = await fresh.extend()
        assert (head.size, head.root) == (940, second.body.root_hash)
        report = await trail.verify()
        assert report.clean, [f.describe() for f in report.findings]


async def test_a_receipt_verifies_offline(server_urls: ServerUrls, tmp_path: Path) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=2, events=300) as trail:
        trusted = trusted_verifiers(trail.settings)
        receipt = await export_receipt(trail.store, trusted, "prod/w1@rev")
        data = canonical_json(receipt)
        result = verify_receipt(data, trusted)
        assert (result.events, result.rollout, result.pinned) == (300, "prod/w1@rev", True)
        assert verify_receipt(data).signer == trusted[0]


async def test_the_auditor_builds_the_tree_over_a_trail_recorded_before_it(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=10) as trail:
        # As if the events had been recorded before migration 0017: no tree, no checkpoint anywhere.
        await trail.owner(
            "DELETE FROM merkle_nodes", "DELETE FROM signed_checkpoints", "DELETE FROM audit_keys"
        )
        shutil.rmtree(tmp_path / "audit" / "checkpoints")
        await append_rollout(trail.store, "prod/old", 600)
        report = await trail.verify()
        assert [f.kind for f in report.findings] == ["no-checkpoint"]
        restarted = checkpointer_for(trail.store, trail.settings, None)
        taken = await restarted.checkpoint()
        assert taken is not None and taken.body.tree_size == 610
        assert SignedCheckpoint.open(taken.note, trusted_verifiers(trail.settings)).body == taken.body
        report = await trail.verify()
        assert report.clean, [f.describe() for f in report.findings]


async def test_trails_recorded_before_the_tree_get_one_and_verify(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    """Two recorded trails (tests/fixtures/trails, one with PodActionRequested schema 1 payloads), stored
    as rollbook stored them before migration 0017; after the upgrade the auditor's first round builds the
    tree and signs it, the trail verifies, and each rollout's receipt verifies offline."""
    import asyncio
    import gzip
    import json
    import uuid
    from datetime import datetime

    import asyncpg

    from services.infra.database import asyncpg_url, upgrade, upgrade_async
    from services.infra.settings import Settings
    from services.infra.store import EventStore
    from services.replay.audit import TrailSources, audit_trail, read_database_trail
    from tests.plugins.database import fresh_database

    trails = sorted(TRAILS.glob("rules-v7-*.json.gz"))
    async with fresh_database(server_urls.database_url, prefix="rollbook_old_trail") as url:
        await asyncio.to_thread(upgrade, url, "0013_inplace_mark_of_its_own")
        conn = await asyncpg.connect(asyncpg_url(url))
        rollouts = set()
        try:
            for path in trails:
                for event in json.loads(gzip.decompress(path.read_bytes()))["events"]:
                    await conn.execute(
                        INSERT_AS_BEFORE,
                        uuid.UUID(event["event_id"]), event["stream"], event["stream_version"], event["type"],
                        event["schema_version"], datetime.fromisoformat(event["occurred_at"]),
                        None if event["causation_id"] is None else uuid.UUID(event["causation_id"]),
                        event["correlation_id"], json.dumps(event["payload"]),
                    )  # fmt: skip
                    if event["correlation_id"] and "@" in event["correlation_id"]:
                        rollouts.add(event["correlation_id"])
        finally:
            await conn.close()
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            settings = Settings(database_url=url, data_dir=str(tmp_path))
            taken = await checkpointer_for(store, settings, None).checkpoint()
            assert taken is not None and taken.body.tree_size == await store.head_position()
            trusted = trusted_verifiers(settings)
            notes, keys = await read_database_trail(store)
            report = await audit_trail(store, TrailSources(notes, [], keys, trusted))
            assert report.clean and report.rows > 300, [f.describe() for f in report.findings]
            assert rollouts
            for rollout in sorted(rollouts):
                receipt = await export_receipt(store, trusted, rollout)
                assert verify_receipt(canonical_json(receipt), trusted).events == len(receipt["events"])
        finally:
            await store.close()


async def test_audit_prove_prints_a_checked_proof(server_urls: ServerUrls, tmp_path: Path) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=300) as trail:
        code, out = await trail.cli("audit", "prove", "257")
        assert code == 0, out
        lines = out.splitlines()
        assert lines[0] == "event at position 257: leaf 256 of 300"
        assert sum(line.startswith("proof[") for line in lines) == 7  # [0, 256), then 6 within [256, 300)
        assert lines[-1].startswith("\u2014 test.rollbook/log ")
        event_id = (await trail.store.query("SELECT event_id FROM events WHERE global_position = 5"))[0][0]
        code, out = await trail.cli("audit", "prove", str(event_id), "--json")
        assert code == 0 and '"leaf_index": 4' in out, out
        await append_rollout(trail.store, "prod/later", 1)
        code, out = await trail.cli("audit", "prove", "301")
        assert (code, out.strip()) == (
            1,
            "rollbook: position 301 is newer than the newest signed checkpoint (tree size 300): it is covered"
            " by the next one",
        )
        code, out = await trail.cli("audit", "prove", "nonsense")
        assert (code, out.strip()) == (2, "rollbook: 'nonsense' is neither a global position nor an event id")
        # The stored tree damaged: the proof does not match the signed head, and prove says so.
        await trail.owner("UPDATE merkle_nodes SET hash = sha256(hash) WHERE level = 8 AND idx = 0")
        code, out = await trail.cli("audit", "prove", "260")  # its proof holds the first block's hash
        assert code == 1 and "does not match the signed checkpoint at position 260" in out, out


async def test_a_log_is_signed_from_the_auditors_first_round_even_when_empty(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    # A stack verified moments after it started: the auditor's first round signed the empty log, so the
    # events since are a tail within the stale bound, not "no signed checkpoint anywhere".
    async with fresh_database(server_urls.database_url, prefix="rollbook_signed") as url:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            settings = Settings(
                data_dir=str(tmp_path),
                database_url=url,
                audit_key_name="test.rollbook/log",
                audit_checkpoint_dir=str(tmp_path / "audit" / "checkpoints"),
                nats_url="",
            )
            checkpointer = checkpointer_for(store, settings, None)
            first = await checkpointer.checkpoint()
            assert first is not None and first.body.tree_size == 0
            await append_rollout(store, "prod/fresh", 30)
            trail = SignedTrail(url, store, settings, checkpointer)
            report = await trail.verify()
            assert report.clean, [f.describe() for f in report.findings]
        finally:
            await store.close()
