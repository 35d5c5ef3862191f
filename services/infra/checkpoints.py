"""Unsigned checkpoints of the global hash chain (before signed checkpoints: services/infra/transparency.py),
and the JetStream checkpoint stream both kinds are published to.

A checkpoint is (global_position, chain_hash at that position). It is written to three places: the
``event_checkpoints`` table (convenient, but inside the attacker's reach), a JetStream stream created with
deny_delete and deny_purge (``<stream_name>_CHECKPOINTS`` on subject ``<prefix>-checkpoints``), and, when
configured, an append-only JSON-lines file. ``rollbook audit verify`` compares the chain stored in the
database with every checkpoint it can read; one the database no longer agrees with means the history up to
it was rewritten (docs/replay.md; the signed checkpoints that replace these: docs/audit.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.js.api import DeliverPolicy, StorageType, StreamConfig

from services.infra.bus import Bus
from services.infra.store import EventStore
from services.model.hashchain import Checkpoint

log = structlog.get_logger("checkpoints")


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Checkpoint)


def checkpoint_stream(bus: Bus) -> str:
    return f"{bus.stream}_CHECKPOINTS"


def checkpoint_subject(bus: Bus) -> str:
    return f"{bus.prefix}-checkpoints"


class UnprotectedStream(RuntimeError):
    """The checkpoint stream exists but lets messages be deleted or purged."""


async def ensure_checkpoint_stream(bus: Bus) -> None:
    """Create the checkpoint stream with deny_delete and deny_purge, or check that the existing one has
    both: UnprotectedStream if not (someone recreated it without them, so messages could be deleted)."""
    config = StreamConfig(
        name=checkpoint_stream(bus),
        subjects=[checkpoint_subject(bus)],
        storage=StorageType.FILE,
        deny_delete=True,  # messages cannot be deleted or the stream purged through the API
        deny_purge=True,
        num_replicas=bus.settings.bus_replicas,
    )
    try:
        await bus.js.add_stream(config)
    except nats.js.errors.BadRequestError as error:
        if error.err_code != 10058:  # already exists with another config: checked below
            raise
    problem = await stream_protection(bus)
    if problem is not None:
        raise UnprotectedStream(problem)


async def stream_protection(bus: Bus) -> str | None:
    """What is wrong with the checkpoint stream's protection, or None (also when it does not exist)."""
    try:
        info = await bus.js.stream_info(checkpoint_stream(bus))
    except nats.js.errors.NotFoundError:
        return None
    if info.config.deny_delete and info.config.deny_purge:
        return None
    return (
        f"JetStream stream {checkpoint_stream(bus)} allows deleting or purging messages"
        " (deny_delete/deny_purge off): recreate it with both (docs/audit.md)"
    )


async def take_checkpoint(
    store: EventStore, *, bus: Bus | None = None, file: Path | None = None
) -> Checkpoint | None:
    """Checkpoint the head of the log: in the database, then on the bus and in the file if given.
    None for an empty log."""
    taken = await store.write_checkpoint()
    if taken is None:
        return None
    checkpoint = Checkpoint(global_position=taken[0], chain_hash=taken[1].hex(), taken_at=datetime.now(UTC))
    data = _encoder.encode(checkpoint)
    if bus is not None:
        await ensure_checkpoint_stream(bus)
        await bus.js.publish(checkpoint_subject(bus), data, stream=checkpoint_stream(bus))
    if file is not None:
        with file.open("ab") as out:
            out.write(data + b"\n")
    return checkpoint


async def stream_messages(bus: Bus, *, timeout: float = 10.0) -> list[bytes]:  # noqa: ASYNC109
    """The data of every message in the JetStream checkpoint stream, oldest first (empty if there is
    none). Read with an ephemeral ordered consumer: one subscription, not one request per message."""
    try:
        info = await bus.js.stream_info(checkpoint_stream(bus))
    except nats.js.errors.NotFoundError:
        return []
    last = info.state.last_seq
    found: list[bytes] = []
    if not info.state.messages:
        return found
    subscription = await bus.js.subscribe(
        checkpoint_subject(bus),
        stream=checkpoint_stream(bus),
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    try:
        while True:
            message = await subscription.next_msg(timeout=timeout)
            if message.data:
                found.append(message.data)
            if message.metadata.sequence.stream >= last:
                return found
    finally:
        await subscription.unsubscribe()


async def published_checkpoints(bus: Bus, *, timeout: float = 10.0) -> list[Checkpoint]:  # noqa: ASYNC109
    """The unsigned chain checkpoints (this module's format) in the JetStream checkpoint stream, oldest
    first; signed ones are read by services/infra/transparency.py."""
    return [
        _decoder.decode(data) for data in await stream_messages(bus, timeout=timeout) if data.startswith(b"{")
    ]


def file_checkpoints(path: Path) -> list[Checkpoint]:
    """The unsigned chain checkpoints of a JSON-lines file (lines holding a signed note are skipped)."""
    if not path.exists():
        return []
    return [
        _decoder.decode(line)
        for line in path.read_bytes().splitlines()
        if line.strip() and not line.startswith(b'{"note"')
    ]
