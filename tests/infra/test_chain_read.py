"""Reading the log for `audit verify` by binary COPY (services/infra/chain_read.py): the rows come out with
the content bytes the chain trigger hashed, however the server's output is cut into chunks, and rows the
fast path cannot read (hashes of another length, a tampered row) still come out for the verifier."""

from __future__ import annotations

import asyncio
import struct
import uuid
from datetime import UTC, datetime

import pytest

from services.infra.chain_read import ChainCopyError, ChainCopyParser
from services.model.hashchain import ChainRow, content_bytes

_EPOCH_2000 = datetime(2000, 1, 1, tzinfo=UTC)


def _field(value: bytes | None) -> bytes:
    return struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value


def _micros(moment: datetime) -> bytes:
    return struct.pack(">q", (moment - _EPOCH_2000) // (datetime.resolution))


def _row(
    position: int, stream: str, version: int, payload: str, *, stream_hash: bytes, causation: bool
) -> bytes:
    """One row as PostgreSQL's binary COPY sends CHAIN_COPY_SQL's columns."""
    event_id = uuid.UUID(int=position)
    occurred = datetime(2026, 11, 30, 12, 0, position % 60, 123456, tzinfo=UTC)
    recorded = datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)  # before 2000: negative in COPY
    fields = [
        struct.pack(">q", position),
        stream_hash,
        bytes([position % 256]) * 32,
        struct.pack(">i", version),
        struct.pack(">i", 2),
        _micros(occurred),
        _micros(recorded),
        str(event_id).encode(),
        str(uuid.UUID(int=position + 1)).encode() if causation else b"",
        stream.encode(),
        b"PodActionSucceeded",
        b"corr\t\\id" if causation else b"",
        payload.encode(),
    ]
    return struct.pack(">h", len(fields)) + b"".join(_field(f) for f in fields)


def _expected(position: int, stream: str, version: int, payload: str, causation: bool) -> bytes:
    return content_bytes(
        uuid.UUID(int=position),
        stream,
        version,
        "PodActionSucceeded",
        2,
        datetime(2026, 11, 30, 12, 0, position % 60, 123456, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        uuid.UUID(int=position + 1) if causation else None,
        "corr\t\\id" if causation else None,
        payload,
    )


ROWS = [
    (1, "CloneSet/prod/a", 1, '{"a": "tab\\there, new\\nline, \\\\ and ü"}', bytes(32), False),
    (2, "CloneSet/prod/ä\tb", 7, "{}", b"\x01" * 32, True),
    (3, "CloneSet/prod/a", 2, '{"long": "' + "x" * 3000 + '"}', b"\x02" * 5, True),  # a hash cut short
    (4, "CloneSet/prod/a", 3, '{"n": 1}', b"", False),  # an emptied hash
]
COPY = (
    b"PGCOPY\n\xff\r\n\x00"
    + struct.pack(">ii", 0, 0)
    + b"".join(_row(p, s, v, pl, stream_hash=h, causation=c) for p, s, v, pl, h, c in ROWS)
    + b"\xff\xff"
)


def _parse(chunks: list[bytes]) -> tuple[list[ChainRow], int, int]:
    """(rows delivered, rows the COPY gave, the parser's position after it)."""
    delivered: list[ChainRow] = []

    async def deliver(rows: list[ChainRow]) -> None:
        delivered.extend(rows)

    async def run() -> tuple[int, int]:
        parser = ChainCopyParser(0, 2, deliver)
        parser.begin()
        for chunk in chunks:
            await parser.feed(bytearray(chunk))  # as asyncpg hands them over
        count = parser.end()
        await parser.finish()
        return count, parser.position

    count, position = asyncio.run(run())
    return delivered, count, position


def test_rows_come_out_with_the_content_the_trigger_hashed() -> None:
    rows, count, position = _parse([COPY])
    assert (count, position) == (len(ROWS), 4)
    assert rows == [
        (p, h, bytes([p % 256]) * 32, s.encode(), v, _expected(p, s, v, pl, c)) for p, s, v, pl, h, c in ROWS
    ]


def test_output_cut_anywhere_gives_the_same_rows() -> None:
    whole, _, _ = _parse([COPY])
    for cut in range(1, len(COPY), 7):
        for second in (cut + 1, cut + 40, len(COPY)):
            chunks = [COPY[:cut], COPY[cut:second], COPY[second:]]
            assert _parse([c for c in chunks if c])[0] == whole, (cut, second)


def test_output_cut_off_inside_a_row_is_an_error() -> None:
    with pytest.raises(ChainCopyError, match="inside a row"):
        _parse([COPY[: len(COPY) - 10]])


def test_output_in_another_format_is_an_error() -> None:
    with pytest.raises(ChainCopyError, match="signature"):
        _parse([b"1\tabc\n" * 10])
