"""The log's rows for hash-chain verification (``rollbook audit verify``), read by binary
``COPY ... TO STDOUT`` (a page of rows each) and cut into ``services.model.hashchain.ChainRow`` batches.

Why COPY: fetching Records makes asyncpg build a Python object per column (a UUID, two datetimes) that
the verifier only turns back into text, and runs a statement per batch. Binary COPY streams the rows
with little work for the server (no text rendering but the payload's, which the hash covers) and the
fields parse with one ``struct`` call per row and a few slices.

The content is built as the chain trigger builds it (migrations/versions/0026_events_partitioned.py,
``services.model.hashchain.content_bytes``): the ids as the server renders uuid text, the versions and
the timestamps (epoch microseconds) as decimal, NULL ids as "", the payload as stored text.

The binary format (PostgreSQL's COPY documentation, "Binary Format"): a header (signature, flags,
extension), then per row a 16-bit field count and per field a 32-bit length (-1 for NULL) and the
value in the type's binary form (int8/int4 big-endian, timestamptz as microseconds since 2000-01-01,
bytea and text as their bytes), and a trailer of -1. A row cut at a chunk's end waits for the next.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

from services.model.hashchain import CONTENT_SEPARATOR, ChainRow

__all__ = ["CHAIN_COPY_END", "CHAIN_COPY_PAGE", "CHAIN_COPY_SQL", "ChainCopyParser", "ChainCopyError"]

# $1: the position after which to read, $2 the rows to read at most, $3 the last position to read. The
# fixed-size fields first, so one struct reads them. asyncpg's copy_from_query wraps it in
# COPY (...) TO STDOUT (FORMAT binary).
CHAIN_COPY_SQL = """
SELECT global_position, stream_hash, chain_hash, stream_version, schema_version, occurred_at, recorded_at,
       event_id::text, coalesce(causation_id::text, ''), stream, type, coalesce(correlation_id, ''),
       payload::text
  FROM events WHERE global_position > $1 AND global_position <= $3 ORDER BY global_position LIMIT $2
"""
# Rows per COPY. A LIMIT keeps the plan an index scan in order: without one the planner may sort the
# whole table (in parallel workers, with JIT), which costs more than the rows' rendering.
CHAIN_COPY_PAGE = 100_000
CHAIN_COPY_END = 2**63 - 1  # $3 when reading to the head
_FIELDS = 13
_HASH = 32
_UUID_TEXT = 36
# Field count; position; stream_hash and chain_hash (their lengths checked: any length may be stored);
# stream_version, schema_version; occurred_at, recorded_at; event_id as text. Each after its length.
_FIXED = struct.Struct(f">hiqi{_HASH}si{_HASH}siiiiiqiqi{_UUID_TEXT}s")
_LENGTH = struct.Struct(">i")
_COUNT = struct.Struct(">h")
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = struct.Struct(">11sii")
_TRAILER = b"\xff\xff"
_EPOCH_2000 = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01


class ChainCopyError(ValueError):
    """The COPY output is not what the query asked for."""


def _odd_row(data: bytes, offset: int) -> tuple[ChainRow, int] | None:
    """A row the fast path does not read: one whose hashes are not SHA-256's length (edited: the verifier
    reports it). None when the row is incomplete."""
    if _COUNT.unpack_from(data, offset)[0] != _FIELDS:
        raise ChainCopyError("a COPY row without the fields the query asked for")
    offset += 2
    values: list[bytes] = []
    for _ in range(_FIELDS):
        if offset + 4 > len(data):
            return None
        (size,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        values.append(data[offset : offset + max(size, 0)])
        offset += max(size, 0)
    if offset > len(data):
        return None
    position, stream_hash, chain_hash, version, schema, occurred, recorded = values[:7]
    event_id, causation_id, stream, type_, correlation_id, payload = values[7:]
    stream_version = int.from_bytes(version, "big", signed=True)
    content = CONTENT_SEPARATOR.join(
        (
            event_id,
            stream,
            b"%d" % stream_version,
            type_,
            b"%d" % int.from_bytes(schema, "big", signed=True),
            b"%d" % (int.from_bytes(occurred, "big", signed=True) + _EPOCH_2000),
            b"%d" % (int.from_bytes(recorded, "big", signed=True) + _EPOCH_2000),
            causation_id,
            correlation_id,
            payload,
        )
    )
    row = (
        int.from_bytes(position, "big", signed=True),
        stream_hash,
        chain_hash,
        stream,
        stream_version,
        content,
    )
    return row, offset


class ChainCopyParser:
    """Takes the output of one COPY after another (``begin``, then ``feed`` with each chunk as it
    arrives: asyncpg's ``output``; ``end``) and hands ``batch_size`` rows or more at a time to
    ``deliver``; ``finish`` hands the rest. ``position`` is the last complete row's: the next COPY, or
    the same one again after a lost connection, starts after it."""

    def __init__(
        self, from_position: int, batch_size: int, deliver: Callable[[list[ChainRow]], Awaitable[None]]
    ) -> None:
        self.position = from_position
        self._batch_size = batch_size
        self._deliver = deliver
        self._pending = b""
        self._header = True
        self._ended = False
        self._copied = 0
        self._rows: list[ChainRow] = []

    def begin(self) -> None:
        """A COPY starts (again): forget a row a lost connection cut off."""
        self._pending, self._header, self._ended, self._copied = b"", True, False, 0

    def end(self) -> int:
        """The COPY ended: the number of rows it gave."""
        if not self._ended or self._pending:
            raise ChainCopyError("the COPY output ended inside a row")
        return self._copied

    async def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk if self._pending else bytes(chunk)  # asyncpg gives a bytearray
        offset = self._skip_header(data) if self._header else 0
        if offset < 0:
            self._pending = data
            return
        rows = self._rows
        before = len(rows)
        offset = self._parse(data, offset, rows)
        self._copied += len(rows) - before
        self._pending = data[offset:]
        if self._pending == _TRAILER:
            self._pending, self._ended = b"", True
        if rows:
            self.position = rows[-1][0]
        if len(rows) >= self._batch_size:
            self._rows = []
            await self._deliver(rows)

    def _skip_header(self, data: bytes) -> int:
        """The offset after the file header, or -1 while it is incomplete."""
        if len(data) < _HEADER.size:
            return -1
        signature, _, extension = _HEADER.unpack_from(data)
        if signature != _SIGNATURE:
            raise ChainCopyError("the COPY output does not start with the binary format's signature")
        if len(data) < _HEADER.size + extension:
            return -1
        self._header = False
        return _HEADER.size + extension

    def _parse(self, data: bytes, offset: int, rows: list[ChainRow]) -> int:
        """Parse the complete rows from ``offset`` on into ``rows``; return where the first incomplete
        one starts."""
        fixed, fixed_size = _FIXED.unpack_from, _FIXED.size
        length = _LENGTH.unpack_from
        join = CONTENT_SEPARATOR.join
        end = len(data)
        append = rows.append
        while offset + fixed_size <= end:
            start = offset
            (
                count,
                _,
                position,
                stream_hash_size,
                stream_hash,
                chain_hash_size,
                chain_hash,
                _,
                stream_version,
                _,
                schema_version,
                _,
                occurred_at,
                _,
                recorded_at,
                _,
                event_id,
            ) = fixed(data, offset)
            if count != _FIELDS or stream_hash_size != _HASH or chain_hash_size != _HASH:
                odd = _odd_row(data, offset)
                if odd is None:
                    return start
                row, offset = odd
                append(row)
                continue
            offset += fixed_size
            try:
                # causation_id, stream, type, correlation_id, payload: never NULL (coalesced), so each is
                # its length and that many bytes.
                (size,) = length(data, offset)
                offset += 4
                causation_id = data[offset : offset + size]
                offset += size
                (size,) = length(data, offset)
                offset += 4
                stream = data[offset : offset + size]
                offset += size
                (size,) = length(data, offset)
                offset += 4
                type_ = data[offset : offset + size]
                offset += size
                (size,) = length(data, offset)
                offset += 4
                correlation_id = data[offset : offset + size]
                offset += size
                (size,) = length(data, offset)
                offset += 4
                payload = data[offset : offset + size]
                offset += size
            except struct.error:  # the row goes on in the next chunk
                return start
            if offset > end:
                return start
            content = join(
                (
                    event_id,
                    stream,
                    b"%d" % stream_version,
                    type_,
                    b"%d" % schema_version,
                    b"%d" % (occurred_at + _EPOCH_2000),
                    b"%d" % (recorded_at + _EPOCH_2000),
                    causation_id,
                    correlation_id,
                    payload,
                )
            )
            append((position, stream_hash, chain_hash, stream, stream_version, content))
        return offset

    async def finish(self) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            await self._deliver(rows)
