"""As the database owner, rewriting an event and recomputing everything the database holds (the hash
chain with the database's own trigger, the Merkle tree with rollbook's own code) without the signing key:
`rollbook audit verify` fails and names it. Before signed checkpoints, the same rewrite with the
checkpoint table recomputed verified OK."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.infra.store import EventStore
from services.infra.transparency import Checkpointer, MerkleLog
from services.model.signed_note import Signer
from tests.plugins.database import lose_events_sql
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import CONTENT, SignedTrail, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def rewrite_event(trail: SignedTrail, position: int) -> None:
    """Edit one event's payload and re-insert it and every later row with the chain trigger on, so the
    chain is consistent again; then rebuild the tree over the rewritten log and rewrite the legacy
    checkpoint table from it."""
    conn_statements = [
        "ALTER TABLE events DISABLE TRIGGER events_append_only",
        f"CREATE TEMP TABLE rest AS SELECT * FROM events WHERE global_position >= {position}",
        *lose_events_sql(f"global_position >= {position}"),
        "UPDATE rest SET payload = jsonb_set(payload, '{action_id}', '\"forged\"')"
        f" WHERE global_position = {position}",
        f"INSERT INTO events (global_position, {CONTENT}) OVERRIDING SYSTEM VALUE"
        f" SELECT global_position, {CONTENT} FROM rest ORDER BY global_position",
        "ALTER TABLE events ENABLE TRIGGER events_append_only",
        "DELETE FROM event_checkpoints",
    ]
    import asyncpg

    from services.infra.database import asyncpg_url

    conn = await asyncpg.connect(asyncpg_url(trail.url))
    try:
        async with conn.transaction():
            for statement in conn_statements:
                await conn.execute(statement)
    finally:
        await conn.close()
    owner = await EventStore.connect(trail.url, duty="owner")  # the services' writer may not rebuild it
    try:
        await MerkleLog(owner).rebuild()
    finally:
        await owner.close()


async def test_a_rewrite_with_chain_and_tree_recomputed_is_caught(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=2, events=300) as trail:
        await rewrite_event(trail, 123)
        inside = await trail.store.query("SELECT count(*) FROM events")
        assert inside[0][0] == 600
        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 1, out
        # The chain inside the database is consistent: only the signed tree head catches it.
        assert "EDITED" not in out and "CHAIN-BROKEN" not in out, out
        assert "CHECKPOINT-MISMATCH: position 600: the first 600 events of the log do not match" in out, out
        assert "its tree head" in out


async def test_checkpoints_signed_again_with_another_key_are_caught(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=300) as trail:
        await rewrite_event(trail, 10)
        # The attacker signs the rewritten log with a key of their own and publishes that key instead.
        await trail.owner("DELETE FROM signed_checkpoints", "DELETE FROM audit_keys")
        forged = Checkpointer(trail.store, Signer.generate("test.rollbook/log"))
        assert await forged.checkpoint() is not None
        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 1, out
        assert "KEY-MISMATCH: the database publishes the public key test.rollbook/log+" in out, out
        assert "UNTRUSTED-KEY: a checkpoint in database: signed by test.rollbook/log (" in out, out
        assert "CHECKPOINT-MISSING-FROM-DATABASE: the checkpoint of tree size 300" in out, out
        assert "CHECKPOINT-MISMATCH: position 300: " in out, out
