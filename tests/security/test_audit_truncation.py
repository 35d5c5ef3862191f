"""As the database owner, removing what a signed checkpoint covers: `rollbook audit verify` fails and
names it. Before signed checkpoints, deleting the checkpointed events together with the checkpoint table
and the bus's checkpoint stream left a log that verified OK."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import nats.js.errors
import pytest

from services.infra.bus import Bus
from services.infra.checkpoints import checkpoint_stream
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import SignedTrail, append_rollout, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def trail(server_urls: ServerUrls, bus: Bus, tmp_path: Path) -> AsyncIterator[SignedTrail]:
    async with signed_trail(server_urls.database_url, tmp_path, bus=bus, rollouts=2, events=100) as trail:
        # The log moves on after the checkpoint: the newest events are not covered.
        await append_rollout(trail.store, "prod/after", 5)
        code, out = await trail.cli("audit", "verify")
        assert code == 0 and out.startswith("OK: 205 events"), out
        try:
            yield trail
        finally:
            with pytest.raises(nats.js.errors.NotFoundError):  # the attack deleted it
                await bus.js.stream_info(checkpoint_stream(bus))


async def delete_everything_reachable(trail: SignedTrail, bus: Bus, first_deleted: int) -> None:
    """Checkpointed events from ``first_deleted`` on, the checkpoint tables and the tree, and the bus's
    checkpoint stream (its messages cannot be deleted, the whole stream can)."""
    await trail.owner(
        f"DELETE FROM events WHERE global_position >= {first_deleted}",
        "DELETE FROM signed_checkpoints",
        "DELETE FROM event_checkpoints",
        "DELETE FROM merkle_nodes",
    )
    await bus.js.delete_stream(checkpoint_stream(bus))


async def test_deleting_checkpointed_events_the_checkpoint_table_and_the_stream_is_caught(
    trail: SignedTrail, bus: Bus
) -> None:
    await delete_everything_reachable(trail, bus, first_deleted=198)
    code, out = await trail.cli("audit", "verify")
    assert code == 1, out
    # The copy in the checkpoint directory (outside the database's reach) covers 200 events.
    assert "TRUNCATED: position 200: " in out and "the log holds 197" in out, out
    assert "CHECKPOINT-MISSING-FROM-DATABASE: the checkpoint of tree size 200" in out, out


async def test_deleting_every_checkpoint_copy_too_is_caught(trail: SignedTrail, bus: Bus) -> None:
    await delete_everything_reachable(trail, bus, first_deleted=198)
    shutil.rmtree(Path(trail.settings.data_dir) / "audit" / "checkpoints")
    code, out = await trail.cli("audit", "verify")
    assert code == 1, out
    assert "NO-CHECKPOINT: " in out and "no signed checkpoint verifies anywhere" in out, out


async def test_truncating_the_tail_is_caught(trail: SignedTrail, bus: Bus) -> None:
    # Only the newest events go, checkpoints stay: nothing in the chain breaks, the tree head does.
    await trail.owner("DELETE FROM events WHERE global_position > 150")
    code, out = await trail.cli("audit", "verify")
    assert code == 1, out
    assert "TRUNCATED: position 200: " in out, out
    assert "the log holds 150" in out
    await bus.js.delete_stream(checkpoint_stream(bus))


async def test_a_checkpoint_stream_recreated_without_protection_is_refused_and_named(
    trail: SignedTrail, bus: Bus
) -> None:
    from nats.js.api import StreamConfig

    from services.infra.checkpoints import UnprotectedStream, checkpoint_subject

    # Someone with NATS admin rights replaces the stream with one whose messages can be deleted.
    await bus.js.delete_stream(checkpoint_stream(bus))
    await bus.js.add_stream(StreamConfig(name=checkpoint_stream(bus), subjects=[checkpoint_subject(bus)]))
    await append_rollout(trail.store, "prod/more", 3)
    with pytest.raises(UnprotectedStream, match="deny_delete/deny_purge off"):
        await trail.checkpointer.checkpoint()  # the auditor publishes nothing there (and logs it)
    assert (await bus.js.stream_info(checkpoint_stream(bus))).state.messages == 0
    code, out = await trail.cli("audit", "verify")
    assert code == 1, out
    assert "BUS-STREAM-UNPROTECTED: JetStream stream " in out, out
    await bus.js.delete_stream(checkpoint_stream(bus))
