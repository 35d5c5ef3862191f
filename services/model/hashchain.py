"""The event hash chain, recomputed in Python from raw column values (the database computes it in the
``events_chain`` trigger, migrations/versions/0004_event_hash_chain.py; the two must agree byte for byte).

Pure: no I/O. ``ChainVerifier`` walks rows in global order and reports every break it can name; the store
reads feed it (services/replay/audit.py).
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec

from services.model.merkle import LEAF_TAG

ZERO_HASH = bytes(32)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_POSITION = struct.Struct(">q")  # the position in the global chain's input: 8 bytes, big-endian, signed

# The raw columns the chain covers, as the archive copies them (services/infra/archive.py).
CHAIN_COLUMNS = (
    "global_position, event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,"
    " causation_id, correlation_id, payload::text, stream_hash, chain_hash"
)


# A row as ChainVerifier.feed_rows takes it: (global_position, stored stream_hash, stored chain_hash,
# stream (UTF-8), stream_version, content). The content is the bytes the chain trigger hashed
# (``content_bytes``): the text renderings of event_id, stream, stream_version, type, schema_version,
# occurred_at and recorded_at as epoch microseconds, causation_id or "", correlation_id or "" and the
# payload as stored text, joined by CONTENT_SEPARATOR, UTF-8. A plain tuple: verify makes one per event.
ChainRow = tuple[int, bytes, bytes, bytes, int, bytes]
CONTENT_SEPARATOR = b"\x1f"
PENDING = "pending"  # a RangeVerifier's stand-in for the finding of a row judged when the ranges are joined


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """The global hash chain at one position, kept outside the database (services/infra/checkpoints.py)."""

    global_position: int
    chain_hash: str  # hex
    taken_at: datetime


def micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def content_bytes(
    event_id: uuid.UUID,
    stream: str,
    stream_version: int,
    type_: str,
    schema_version: int,
    occurred_at: datetime,
    recorded_at: datetime,
    causation_id: uuid.UUID | None,
    correlation_id: str | None,
    payload_text: str,
) -> bytes:
    return CONTENT_SEPARATOR.join(
        field.encode()
        for field in (
            str(event_id),
            stream,
            str(stream_version),
            type_,
            str(schema_version),
            str(micros(occurred_at)),
            str(micros(recorded_at)),
            "" if causation_id is None else str(causation_id),
            correlation_id or "",
            payload_text,
        )
    )


def stream_hash(previous: bytes, content: bytes) -> bytes:
    return hashlib.sha256(previous + content).digest()


def chain_hash(previous: bytes, global_position: int, stream_hash_: bytes) -> bytes:
    return hashlib.sha256(previous + global_position.to_bytes(8, "big", signed=True) + stream_hash_).digest()


@dataclass(frozen=True)
class Finding:
    """One break in the record, named as precisely as the evidence allows."""

    kind: str  # edited | removed | reordered | chain-broken | checkpoint-mismatch | checkpoint-missing-row
    global_position: int | None
    stream: str | None
    stream_version: int | None
    event_id: str | None
    detail: str

    def describe(self) -> str:
        where = []
        if self.global_position is not None:
            where.append(f"position {self.global_position}")
        if self.stream is not None:
            where.append(f"stream {self.stream} v{self.stream_version}")
        if self.event_id is not None:
            where.append(f"event {self.event_id}")
        if not where:
            return f"{self.kind.upper()}: {self.detail}"
        return f"{self.kind.upper()}: {', '.join(where)}: {self.detail}"


@dataclass
class _StreamTip:
    version: int  # highest version seen
    stored_hash: bytes  # stored stream_hash of that version
    position: int
    missing: dict[int, int] = field(default_factory=dict)  # version skipped -> position where it was noticed


@dataclass
class ChainVerifier:
    """Feed rows in global order (``feed_rows``), then ``finish``. ``findings`` lists every break found."""

    findings: list[Finding] = field(default_factory=list)
    rows: int = 0
    last_position: int = 0
    last_chain: bytes = ZERO_HASH
    chain_at: dict[int, bytes] = field(default_factory=dict)  # position -> stored chain hash, for checkpoints
    wanted_positions: set[int] = field(default_factory=set)
    _tips: dict[bytes, _StreamTip] = field(default_factory=dict)  # by stream name, UTF-8

    def feed_rows(self, rows: Iterable[ChainRow], leaves: list[bytes] | None = None) -> None:
        """Check rows given in global order: each row's stream hash from its stream's previous stored hash
        and its content, and the global chain hash from the previous row's stored chain hash. With
        ``leaves``, append each row's Merkle leaf hash to it (``services.model.merkle.event_leaf_hash``):
        the leaf and the chain link hash the same position and stored stream hash, one loop makes both."""
        findings = self.findings
        tips = self._tips
        wanted = self.wanted_positions
        sha256 = hashlib.sha256
        position_bytes = _POSITION.pack  # int.to_bytes with keywords costs more, once per event
        add_leaf, leaf_tag = (leaves.append if leaves is not None else None), LEAF_TAG
        last_chain, last_position, count = self.last_chain, self.last_position, 0
        for row in rows:
            global_position, stored_stream, stored_chain, stream, stream_version, content = row
            count += 1
            link = position_bytes(global_position) + stored_stream
            if add_leaf is not None:
                add_leaf(sha256(leaf_tag + link).digest())
            flagged = len(findings)
            tip = tips.get(stream)
            if tip is not None and stream_version == tip.version + 1:
                # The usual row: the next version of a stream seen before.
                if sha256(tip.stored_hash + content).digest() != stored_stream:
                    self._content_edited(row)
                tip.version = stream_version
                tip.stored_hash = stored_stream
                tip.position = global_position
            else:
                self._check_stream(row, last_position, last_chain)
            if sha256(last_chain + link).digest() != stored_chain and len(findings) == flagged:
                self._found(
                    "chain-broken",
                    row,
                    f"the global chain does not continue from position {last_position}: an event"
                    " between them was removed, or rows were moved or their hashes rewritten",
                )
            # Continue from what is stored, so one break is reported once and later rows are judged alone.
            last_chain, last_position = stored_chain, global_position
            if global_position in wanted:
                self.chain_at[global_position] = stored_chain
        self.last_chain, self.last_position = last_chain, last_position
        self.rows += count

    def _check_stream(self, row: ChainRow, previous_position: int, previous_chain: bytes) -> None:
        """A row that is not simply the next version of a stream seen before: the stream's first, one
        after a gap, one that fills a gap or repeats a version. (The previous row's position and stored
        chain hash: a RangeVerifier judges a stream's first row in its range later with them.)"""
        global_position, stored_stream, _, stream, stream_version, content = row
        tip = self._tips.get(stream)
        if tip is None:
            tip = self._tips[stream] = _StreamTip(0, ZERO_HASH, 0)
        if stream_version <= tip.version:
            noticed = tip.missing.pop(stream_version, None)
            if noticed is not None:
                self._found(
                    "reordered",
                    row,
                    f"stream version {stream_version} is stored after version {tip.version}"
                    f" (which sits at position {noticed} or later): rows were moved",
                )
            else:
                self._found("edited", row, f"stream version {stream_version} appears twice in the stream")
            return
        if stream_version > tip.version + 1:
            for version in range(tip.version + 1, stream_version):
                tip.missing[version] = global_position
        elif hashlib.sha256(tip.stored_hash + content).digest() != stored_stream:
            self._content_edited(row)
        tip.version = stream_version
        tip.stored_hash = stored_stream
        tip.position = global_position

    def _content_edited(self, row: ChainRow) -> None:
        _, _, _, stream, stream_version, content = row
        # The type is the content's fourth field: after the event id, the stream and the version.
        start = content.index(CONTENT_SEPARATOR) + len(stream) + len(str(stream_version)) + 3
        end = content.find(CONTENT_SEPARATOR, start)
        type_ = content[start:end].decode(errors="replace")
        self._found("edited", row, f"content does not match its stored hash ({type_})")

    def _found(self, kind: str, row: ChainRow, detail: str) -> None:
        global_position, _, _, stream, stream_version, content = row
        event_id = content.split(CONTENT_SEPARATOR, 1)[0].decode(errors="replace")
        self.findings.append(
            Finding(kind, global_position, stream.decode(errors="replace"), stream_version, event_id, detail)
        )

    def resume(self, position: int, chain: bytes, heads: dict[str, tuple[int, bytes]]) -> None:
        """Go on after a prefix of the log this verifier does not read (archived, and its files not
        given): from the chain hash at ``position`` and each stream's last (version, stream_hash) in it."""
        self.last_position, self.last_chain = position, chain
        for stream, (version, digest) in heads.items():
            self._tips[stream.encode()] = _StreamTip(version, digest, position)

    def join(self, part: RangeVerifier, previous_position: int, previous_chain: bytes) -> bool:
        """Take in the verification of the rows after ``previous_position`` made by ``part`` (which began
        from ``previous_chain``, a signed checkpoint's), if it holds: this verifier must have ended at that
        position with that chain hash, and each stream's first row in the part, judged now against the
        stream as this verifier left it, must leave the stream as the part assumed (that version, that
        stored hash, no version missing before it). Then the findings and the streams' states are exactly
        those of feeding the part's rows here. False, changing nothing, if not: read the rows here."""
        if (self.last_position, self.last_chain) != (previous_position, previous_chain):
            return False
        judged: list[list[Finding]] = []
        for row, row_previous_position, row_previous_chain in part.openings:
            stream = row[3]
            probe = ChainVerifier(last_position=row_previous_position, last_chain=row_previous_chain)
            tip = self._tips.get(stream)
            if tip is not None:
                missing = dict(tip.missing)
                probe._tips[stream] = _StreamTip(tip.version, tip.stored_hash, tip.position, missing)
            probe.feed_rows([row])
            after = probe._tips[stream]
            if after.version != row[4] or after.stored_hash != row[1] or after.missing:
                return False
            judged.append(probe.findings)
        pending = iter(judged)
        for finding in part.findings:
            if finding.kind == PENDING:
                self.findings.extend(next(pending))
            else:
                self.findings.append(finding)
        self._tips.update(part._tips)
        self.chain_at.update(part.chain_at)
        self.rows += part.rows
        self.last_position, self.last_chain = part.last_position, part.last_chain
        return True

    def finish(self) -> list[Finding]:
        """Report stream versions that never turned up (removed), then return every finding."""
        for stream_key, tip in self._tips.items():
            stream = stream_key.decode(errors="replace")
            for version, position in sorted(tip.missing.items()):
                self.findings.append(
                    Finding(
                        "removed",
                        position,
                        stream,
                        version,
                        None,
                        f"stream version {version} is missing (noticed at position {position}):"
                        " the event was deleted",
                    )
                )
            tip.missing.clear()
        self.findings.sort(key=lambda f: f.global_position or 0)
        return self.findings

    def check_checkpoint(self, position: int, expected_chain: bytes, source: str) -> None:
        """Compare a checkpoint kept elsewhere with the chain hash stored at its position (call after the
        rows up to ``position`` were fed with ``position`` in ``wanted_positions``)."""
        stored = self.chain_at.get(position)
        if stored is None:
            self.findings.append(
                Finding(
                    "checkpoint-missing-row",
                    position,
                    None,
                    None,
                    None,
                    f"checkpoint from {source} names position {position}, which is no longer stored"
                    f" (events removed; the log now ends at {self.last_position})",
                )
            )
        elif stored != expected_chain:
            self.findings.append(
                Finding(
                    "checkpoint-mismatch",
                    position,
                    None,
                    None,
                    None,
                    f"chain hash at this position differs from the checkpoint kept in {source}:"
                    " the history up to here was rewritten (hashes recomputed after a change)",
                )
            )


@dataclass
class RangeVerifier(ChainVerifier):
    """Verifies a range of the log that starts after a known position (``last_position``, ``last_chain``:
    a signed checkpoint's), without the streams' states before it: a stream's first row in the range
    (an opening) is taken as the next version of its stream and kept, with the previous row's position
    and chain hash, for ``ChainVerifier.join`` to judge against the streams as the ranges before left them.
    Every other row is judged here as ChainVerifier judges it. Call ``finish`` only on the joined whole."""

    openings: list[tuple[ChainRow, int, bytes]] = field(default_factory=list)

    def _check_stream(self, row: ChainRow, previous_position: int, previous_chain: bytes) -> None:
        global_position, stored_stream, _, stream, stream_version, _ = row
        if stream in self._tips:
            super()._check_stream(row, previous_position, previous_chain)
            return
        # A stand-in finding: the row's global chain check waits for the opening's judgement too (a row
        # is named once, and chain-broken only when nothing else is wrong with it).
        self.findings.append(Finding(PENDING, global_position, None, None, None, ""))
        self.openings.append((row, previous_position, previous_chain))
        self._tips[stream] = _StreamTip(stream_version, stored_stream, global_position)
