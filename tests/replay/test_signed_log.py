"""The signed Merkle log end to end on a real database: the tree the auditor stores agrees with the one
recomputed from the events, proofs of every event verify against the signed checkpoint, receipts verify
offline, checkpoints follow the log, and a trail recorded before the tree existed gets one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import append_rollout, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")


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
