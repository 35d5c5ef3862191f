"""`audit verify` reads the log in ranges at once (services/replay/audit.py, ``_check_ranges``) and joins
them at signed checkpoints: every tampering, wherever it falls against a range's start (on the first row,
on the last row before it, across it), gives exactly the findings reading the log in one go gives, and a
range whose start no longer matches its checkpoint is read again after the ones before it."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from services.model.hashchain import (
    ZERO_HASH,
    ChainRow,
    ChainVerifier,
    RangeVerifier,
    chain_hash,
    content_bytes,
    stream_hash,
)

T0 = datetime(2026, 12, 7, tzinfo=UTC)
STREAMS = [f"CloneSet/prod/w{i}/actions" for i in range(4)]


def content(position: int, stream: str, version: int, note: str = "") -> bytes:
    return content_bytes(
        uuid.UUID(int=position),
        stream,
        version,
        "PodActionSucceeded",
        1,
        T0 + timedelta(seconds=position),
        T0 + timedelta(seconds=position),
        None,
        None,
        f'{{"action_id": "{position}{note}"}}',
    )


def chained(entries: list[tuple[int, str, int, bytes]]) -> list[ChainRow]:
    """Rows as the chain trigger stores them: (position, stream, version, content) hashed in order."""
    rows: list[ChainRow] = []
    heads: dict[str, bytes] = {}
    previous = ZERO_HASH
    for position, stream, version, data in entries:
        stream_digest = stream_hash(heads.get(stream, ZERO_HASH), data)
        heads[stream] = stream_digest
        previous = chain_hash(previous, position, stream_digest)
        rows.append((position, stream_digest, previous, stream.encode(), version, data))
    return rows


def log(events: int = 60) -> list[ChainRow]:
    versions = dict.fromkeys(STREAMS, 0)
    entries = []
    for position in range(1, events + 1):
        stream = STREAMS[(position * 7) % 5 % len(STREAMS)]  # interleaved unevenly
        versions[stream] += 1
        entries.append((position, stream, versions[stream], content(position, stream, versions[stream])))
    return chained(entries)


def serial(rows: list[ChainRow]) -> list[str]:
    verifier = ChainVerifier()
    verifier.feed_rows(rows)
    return [f.describe() for f in verifier.finish()]


def in_ranges(rows: list[ChainRow], anchors: list[tuple[int, bytes]]) -> tuple[list[str], int]:
    """The rows checked in ranges starting after each anchor (position, chain hash), joined in order;
    (the findings, how many ranges had to be read again)."""
    starts = [(0, ZERO_HASH), *anchors]
    ends = [position for position, _ in anchors] + [2**63 - 1]
    whole = ChainVerifier()
    again = 0
    for (start, chain), end in zip(starts, ends, strict=True):
        part_rows = [row for row in rows if start < row[0] <= end]
        part = RangeVerifier(last_position=start, last_chain=chain)
        for cut in range(0, len(part_rows), 7):  # in batches, as read
            part.feed_rows(part_rows[cut : cut + 7])
        if not whole.join(part, start, chain):
            again += 1
            whole.feed_rows(part_rows)
    return [f.describe() for f in whole.finish()], again


def anchors_at(rows: list[ChainRow], *indexes: int) -> list[tuple[int, bytes]]:
    """Checkpoints taken of the clean log after the rows at these indexes."""
    return [(rows[i][0], rows[i][2]) for i in indexes]


def edit(row: ChainRow) -> ChainRow:
    position, digest, chain, stream, version, _ = row
    return (position, digest, chain, stream, version, content(position, stream.decode(), version, " edited"))


def rechain(rows: list[ChainRow], index: int) -> list[ChainRow]:
    """The row at ``index`` edited and every hash recomputed from the log's start (the database's own
    trigger run again): consistent inside, only the checkpoints taken before catch it."""
    entries = [(p, s.decode(), v, c) for p, _, _, s, v, c in rows]
    position, stream, version, _ = entries[index]
    entries[index] = (position, stream, version, content(position, stream, version, " edited"))
    return chained(entries)


def swap(rows: list[ChainRow], index: int) -> list[ChainRow]:
    """The rows at index and index + 1 exchange places: every column moves but the positions."""
    changed = list(rows)
    first, second = rows[index], rows[index + 1]
    changed[index] = (first[0], *second[1:])
    changed[index + 1] = (second[0], *first[1:])
    return changed


def delete(rows: list[ChainRow], index: int) -> list[ChainRow]:
    return rows[:index] + rows[index + 1 :]


def edit_at(rows: list[ChainRow], index: int) -> list[ChainRow]:
    return rows[:index] + [edit(rows[index])] + rows[index + 1 :]


def forge_hash(rows: list[ChainRow], index: int) -> list[ChainRow]:
    position, _, chain, stream, version, data = rows[index]
    return [
        *rows[:index],
        (position, hashlib.sha256(b"forged").digest(), chain, stream, version, data),
    ] + rows[index + 1 :]


Tamper = Callable[[list[ChainRow], int], list[ChainRow]]
CUT = 29  # a range starts after the row at this index (and another after 44)


@pytest.mark.parametrize("tamper", [edit_at, forge_hash, delete, swap, rechain], ids=lambda t: t.__name__)
@pytest.mark.parametrize(
    "index",
    [CUT - 1, CUT, CUT + 1, 0, 59],
    ids=["the row before the anchor", "the anchor's row", "a range's first row", "the first row", "the last"],
)
def test_tampering_at_a_range_edge_gives_the_findings_of_one_read(tamper: Tamper, index: int) -> None:
    clean = log()
    anchors = anchors_at(clean, CUT, 44)
    if tamper is swap and index == 59:
        index = 58
    tampered = tamper(clean, index)
    expected = serial(tampered)
    if tamper is not rechain and (tamper, index) != (delete, 59):  # those only a checkpoint catches
        assert expected, "a tampered log must not verify"
    found, _ = in_ranges(tampered, anchors)
    assert found == expected


def test_a_clean_log_is_joined_without_reading_a_range_again() -> None:
    clean = log()
    assert in_ranges(clean, anchors_at(clean, 9, CUT, 44, 58)) == ([], 0)
    assert serial(clean) == []


def test_a_forged_anchor_makes_its_range_be_read_again() -> None:
    """An anchor that does not match the log (a forged checkpoint, or a rewritten chain) is not trusted:
    its range is read after the ones before it, and the findings are those of one read."""
    clean = log()
    forged = [(clean[CUT][0], hashlib.sha256(b"forged").digest())]
    assert in_ranges(clean, forged) == ([], 1)
    moved = [(clean[CUT][0] + 1, clean[CUT][2])]  # the right hash at the wrong position
    assert in_ranges(clean, moved) == ([], 1)


@pytest.mark.parametrize("index", [CUT - 1, CUT, CUT + 1])
def test_a_rewritten_chain_reads_the_ranges_after_it_again(index: int) -> None:
    clean = log()
    found, again = in_ranges(rechain(clean, index), anchors_at(clean, CUT, 44))
    assert found == [] and again == (2 if index <= CUT else 1)


def test_a_stream_missing_a_version_before_a_range_is_judged_as_one_read_would() -> None:
    """A version removed before the anchor and its stream's next row after it: the range assumed the
    stream continued, which the join finds it did not, so the removed version is named once."""
    clean = log()
    stream_rows = [i for i, row in enumerate(clean) if row[3] == clean[CUT][3]]
    before = max(i for i in stream_rows if i < CUT)
    tampered = delete(clean, before)
    expected = serial(tampered)
    assert any(text.startswith("REMOVED") for text in expected)
    assert in_ranges(tampered, anchors_at(clean, CUT, 44))[0] == expected


def test_findings_are_reported_once_with_the_stand_in_never_shown() -> None:
    clean = log()
    found, _ = in_ranges(edit_at(clean, CUT + 1), anchors_at(clean, CUT))
    assert len(found) == 1 and found[0].startswith("EDITED"), found
    assert all(not text.startswith("PENDING") for text in found)
