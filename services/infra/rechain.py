"""The one rewrite of stored events (`rollbook audit redact`, services/replay/redact.py): payloads replaced
at given positions and every stream and global chain hash recomputed, under the owner's login, the log
locked against appends."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from services.infra.database import asyncpg_url
from services.infra.db_roles import assume_sql
from services.model.hashchain import ZERO_HASH, chain_hash, content_bytes, stream_hash


class HeadMoved(RuntimeError):
    """Events were appended after the caller read the log: nothing was rewritten."""


@dataclass
class Rechained:
    head: int
    chain_before: bytes
    chain_after: bytes
    checkpoints_before: dict[int, bytes]  # checkpoint position -> chain hash it had


async def rechain(connection: asyncpg.Connection, payloads: dict[int, str]) -> Rechained:
    """Rewrite the payloads at the given positions and recompute every stream and global chain hash, in
    the caller's transaction, the log locked against appends and the append-only guard off for it.
    The one place the chain is rebuilt; the stored Merkle tree is dropped with it (services/replay/redact.py
    builds it again and signs a checkpoint of it)."""
    await connection.execute("LOCK TABLE events IN EXCLUSIVE MODE")
    await connection.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
    try:
        for position, payload in sorted(payloads.items()):
            await connection.execute(
                "UPDATE events SET payload = $2::jsonb WHERE global_position = $1", position, payload
            )
        rows = await connection.fetch(
            "SELECT global_position, event_id, stream, stream_version, type, schema_version, occurred_at,"
            " recorded_at, causation_id, correlation_id, payload::text, stream_hash, chain_hash"
            " FROM events ORDER BY global_position"
        )
        tips: dict[str, bytes] = {}
        previous = ZERO_HASH
        head, before = 0, ZERO_HASH
        old_chain: dict[int, bytes] = {}
        updates = []
        for row in rows:
            position = int(row[0])
            content = content_bytes(
                row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10]
            )
            new_stream = stream_hash(tips.get(row[2], ZERO_HASH), content)
            tips[row[2]] = new_stream
            new_chain = chain_hash(previous, position, new_stream)
            previous = new_chain
            old_chain[position] = bytes(row[12]) if row[12] is not None else b""
            head, before = position, old_chain[position]
            if bytes(row[11] or b"") != new_stream or old_chain[position] != new_chain:
                updates.append((position, new_stream, new_chain))
        await connection.executemany(
            "UPDATE events SET stream_hash = $2, chain_hash = $3 WHERE global_position = $1", updates
        )
        checkpoints = await connection.fetch("SELECT global_position FROM event_checkpoints")
        checkpoints_before = {int(r[0]): old_chain[int(r[0])] for r in checkpoints if int(r[0]) in old_chain}
        await connection.execute(
            "UPDATE event_checkpoints c SET chain_hash = e.chain_hash FROM events e"
            " WHERE e.global_position = c.global_position"
        )
        # The stored Merkle tree hashes the old leaves: dropped with the rewrite (the writer may not delete
        # it), built again from the rewritten events before the new checkpoint is signed.
        await connection.execute("DELETE FROM merkle_nodes")
    finally:
        await connection.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    return Rechained(head, before, previous, checkpoints_before)


async def rewrite_payloads(owner_url: str, head: int, payloads: dict[int, str]) -> Rechained:
    """``rechain`` on a connection of the owner (``owner_url``), in one transaction, provided the log still
    ends at ``head`` (``HeadMoved`` otherwise)."""
    connection = await asyncpg.connect(asyncpg_url(owner_url))
    try:
        await connection.execute(assume_sql("owner"))
        async with connection.transaction():
            if await connection.fetchval("SELECT max(global_position) FROM events") != head:
                raise HeadMoved("events were appended while the trail was read")
            # The rounds' stored inputs hold the objects as recorded before the redaction: dropped with
            # it (what-if then folds the rewritten events; the planner stores new rollouts' inputs).
            await connection.execute("DELETE FROM round_inputs")
            return await rechain(connection, payloads)
    finally:
        await connection.close()
