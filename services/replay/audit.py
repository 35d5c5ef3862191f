"""``rollbook audit verify``: recompute the hash chain of the whole log from its raw columns and compare it
with the stored hashes (``audit_log``), and the Merkle tree over it with every signed checkpoint found in
the database and outside it (``audit_trail``; docs/audit.md)."""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import multiprocessing
from collections.abc import AsyncIterator, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import structlog

from services.infra.archive import (
    ArchiveError,
    ArchiveRecord,
    Manifest,
    Segment,
    archive_records,
    archived_heads,
    file_sha256,
    read_manifest,
    segment_rows,
)
from services.infra.chain_read import CHAIN_COPY_END
from services.infra.db_roles import Duty
from services.infra.store import EventStore
from services.model.events import REDACTION_STREAM, StoreLossDetected, TrailRedacted
from services.model.hashchain import ZERO_HASH, ChainRow, ChainVerifier, Checkpoint, Finding, RangeVerifier
from services.model.merkle import (
    EMPTY_ROOT,
    CompactRange,
    ProofError,
    consistency_proof,
    event_leaf_hash,
    frontier_root,
    perfect_root,
    verify_consistency,
)
from services.model.signed_note import CheckpointBody, NoteError, SignedCheckpoint, UntrustedKey, Verifier

_loss_decoder = msgspec.json.Decoder(StoreLossDetected)

log = structlog.get_logger()

# Rows checked at a time, in the event loop between reads of the COPY stream. Not in a thread: hashlib
# keeps the GIL for inputs under 2 KiB (every hash here), so a thread only took turns with the loop, and
# the loop, woken by each chunk the socket gave, waited for the GIL (up to the 5 ms switch interval) and
# read small chunks. Checking a small batch in the loop lets the socket fill meanwhile (the server goes on
# rendering rows into the kernel's buffer) and the next reads take it in bigger chunks.
CHECK_BATCH = 1000
# A range's worker (``verify_range``) still checks 5,000 rows at a time in a thread: with two workers and
# their backends on two busy cores, that measured faster than checking in the loop (performance-log.md).
RANGE_BATCH = 5000


@dataclass
class AuditReport:
    rows: int
    head: int
    checkpoints_checked: int
    findings: list[Finding] = field(default_factory=list)
    # The redactions on record (``rollbook audit redact``), described; and checkpoints kept elsewhere that
    # predate one, accepted because its record names their exact hash.
    redactions: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    # The losses on record (a failover lost published events the bus could not give back): the lines
    # naming them, and the ids of the records that name an unrecoverable event.
    losses: list[str] = field(default_factory=list)
    unrecovered: list[str] = field(default_factory=list)
    # Ranges of the log checked in worker processes and joined, and those read again here because their
    # start did not continue the ranges before (``_check_ranges``).
    ranges_joined: int = 0
    ranges_read_again: int = 0

    @property
    def clean(self) -> bool:
        return not self.findings


async def audit_log(
    store: EventStore,
    checkpoints: list[tuple[str, Checkpoint]] | None = None,
    *,
    batch_size: int = CHECK_BATCH,
) -> AuditReport:
    """Verify every row's stream and global chain hashes, then every checkpoint given as (source, cp)."""
    given = checkpoints or []
    verifier = ChainVerifier(wanted_positions={cp.global_position for _, cp in given})
    async for rows in store.read_chain_batches(0, batch_size):
        verifier.feed_rows(rows)  # here, not in a thread: see CHECK_BATCH
    verifier.finish()
    redactions = [
        s.envelope.payload
        for s in await store.read_stream(REDACTION_STREAM)
        if isinstance(s.envelope.payload, TrailRedacted)
    ]
    accepted = []
    for source, checkpoint in given:
        found = len(verifier.findings)
        verifier.check_checkpoint(checkpoint.global_position, bytes.fromhex(checkpoint.chain_hash), source)
        if len(verifier.findings) == found or verifier.findings[-1].kind != "checkpoint-mismatch":
            continue
        record = _redaction_naming(redactions, checkpoint)
        if record is not None:
            verifier.findings.pop()
            accepted.append(
                f"checkpoint at position {checkpoint.global_position} ({source}) predates the redaction"
                f" of {record.redacted_at.isoformat()}, which names its hash"
            )
    return AuditReport(
        rows=verifier.rows,
        head=verifier.last_position,
        checkpoints_checked=len(given),
        findings=verifier.findings,
        redactions=[describe_redaction(r) for r in redactions],
        accepted=accepted,
    )


# --- the signed Merkle log (docs/audit.md) -------------------------------------------------------------

BLOCK_LEVEL = 8  # as services/infra/transparency.py stores the tree
# Archive findings after which the archived events were not all read.
_UNREAD_ARCHIVE = {"archived", "archive-missing", "archive-manifest"}


def _finding(kind: str, position: int | None, detail: str) -> Finding:
    return Finding(kind, position, None, None, None, detail)


@dataclass
class _Recomputed:
    """The tree recomputed from the stored events while the chain is verified: blocks of 256 leaves
    hashed as they complete, the perfect subtrees above them kept (consistency proofs), the roots at the
    checkpoints' sizes, and the leaves of the blocks those proofs reach into."""

    wanted_sizes: set[int]
    wanted_blocks: set[int]
    upper: CompactRange = field(default_factory=CompactRange)
    tail: list[bytes] = field(default_factory=list)
    nodes: dict[tuple[int, int], bytes] = field(default_factory=dict)
    blocks: dict[int, list[bytes]] = field(default_factory=dict)
    at_size: dict[int, tuple[bytes, int, bytes]] = field(default_factory=dict)  # root, position, chain
    _sizes: list[int] = field(default_factory=list, init=False)  # wanted_sizes in order

    @property
    def size(self) -> int:
        return self.upper.size + len(self.tail)

    def __post_init__(self) -> None:
        self._sizes = sorted(self.wanted_sizes)

    def feed_leaf(self, leaf: bytes, position: int, chain: bytes) -> None:
        self.tail.append(leaf)
        if len(self.tail) == 1 << BLOCK_LEVEL:
            self._close_block()
        self._note_root(position, chain)

    def feed_rows(self, rows: Sequence[ChainRow], leaves: Sequence[bytes] | None = None) -> None:
        """The rows' leaves (``leaves``: their hashes when ChainVerifier.feed_rows made them), a slice at
        a time: to the end of a block or to the next size a checkpoint names, whichever comes first."""
        if leaves is None:
            leaves = [event_leaf_hash(row[0], row[1]) for row in rows]
        block_size, wanted = 1 << BLOCK_LEVEL, self._sizes
        taken, count = 0, len(leaves)
        while taken < count:
            size = self.upper.size + len(self.tail)
            end = min(count, taken + block_size - len(self.tail))
            at = bisect.bisect_right(wanted, size)
            if at < len(wanted):
                end = min(end, taken + wanted[at] - size)
            self.tail += leaves[taken:end]
            taken = end
            if len(self.tail) == block_size:
                self._close_block()
            self._note_root(rows[taken - 1][0], rows[taken - 1][2])

    def _note_root(self, position: int, chain: bytes) -> None:
        """Keep the root at a size a checkpoint names, with the last row's position and chain hash."""
        size = self.upper.size + len(self.tail)
        if size in self.wanted_sizes:
            frontier = self.upper.frontier + CompactRange.of(self.tail).frontier
            self.at_size[size] = (frontier_root(frontier), position, chain)

    def _close_block(self) -> None:
        block = self.upper.size >> BLOCK_LEVEL
        if block in self.wanted_blocks:
            self.blocks[block] = self.tail
        self.upper.push(BLOCK_LEVEL, perfect_root(self.tail), self._node)
        self.tail = []

    def feed_part(self, items: Iterable[bytes | tuple[bytes, int, bytes]]) -> None:
        """A range's leaves as _RangeLeaves gives them: a block's root where it is whole and no checkpoint
        needs its leaves, else each leaf with its position and chain hash."""
        for item in items:
            if isinstance(item, bytes):
                self.upper.push(BLOCK_LEVEL, item, self._node)  # ValueError if the tail is not empty
            else:
                self.feed_leaf(*item)

    def finish(self) -> None:
        block = self.upper.size >> BLOCK_LEVEL
        if self.tail and block in self.wanted_blocks:
            self.blocks[block] = self.tail

    def _node(self, level: int, index: int, digest: bytes) -> None:
        self.nodes[(level, index)] = digest

    def source(self, level: int, index: int) -> bytes:
        if level >= BLOCK_LEVEL:
            return self.nodes[(level, index)]
        block = index >> (BLOCK_LEVEL - level)
        start = (index << level) - (block << BLOCK_LEVEL)
        return perfect_root(self.blocks[block][start : start + (1 << level)])


@dataclass(frozen=True)
class TrailSources:
    """What `audit verify` checks the log against: signed notes by where they were found (the database's
    own and the copies outside it), the trusted public keys, and the unsigned chain checkpoints."""

    database_notes: list[str]
    external_notes: list[tuple[str, str]]  # (source, note)
    database_keys: list[str]
    trusted: list[Verifier]
    legacy: list[tuple[str, Checkpoint]] = field(default_factory=list)
    max_age: float = 900.0
    now: datetime | None = None


async def read_database_trail(store: EventStore) -> tuple[list[str], list[str]]:
    """The signed notes (by tree size) and the published verifier keys kept in the database."""
    return await store.signed_notes(), await store.verifier_keys()


async def _trail_rows(
    store: EventStore,
    archive: Path | None,
    verifier: ChainVerifier,
    findings: list[Finding],
    batch_size: int,
) -> AsyncIterator[Sequence[ChainRow]]:
    """The log's rows in global order for verification: the archived ones from the files in ``archive``
    (each file checked against the manifest and the database's record of the archive), then the table's.
    When archived rows cannot all be read (no --archive, a file missing), the verifier resumes after them
    from the database's record, and a finding says what was not verified."""
    records = await archive_records(store)
    if not records:
        async for rows in store.read_chain_batches(0, batch_size):
            yield rows
        return
    end = records[-1]
    complete = False
    if archive is None:
        findings.append(
            _finding(
                "archived",
                end.last_position,
                f"positions {records[0].first_position}-{end.last_position} were archived (rollbook archive):"
                " pass --archive DIR to verify them and the signed checkpoints that cover them",
            )
        )
    else:
        try:
            manifest = read_manifest(archive)
        except ArchiveError as error:
            findings.append(_finding("archive-manifest", None, str(error)))
            manifest = Manifest()
        segments = {s.first_position: s for s in manifest.segments}
        usable: list[tuple[ArchiveRecord, Segment]] = []
        for record in records:
            segment = segments.get(record.first_position)
            named = f"{archive / record.file}"
            if segment is None:
                findings.append(
                    _finding(
                        "archive-missing",
                        record.first_position,
                        f"positions {record.first_position}-{record.last_position} were archived to {named},"
                        f" which the manifest in {archive} does not list",
                    )
                )
                continue
            differs = [
                what
                for what, same in (
                    ("file", segment.file == record.file),
                    ("last position", segment.last_position == record.last_position),
                    ("event count", segment.events == record.events),
                    ("chain hash before", segment.chain_hash_before == record.chain_hash_before.hex()),
                    ("last chain hash", segment.last_chain_hash == record.last_chain_hash.hex()),
                    ("sha256", segment.sha256 == record.sha256),
                )
                if not same
            ]
            if differs:
                findings.append(
                    _finding(
                        "archive-manifest-mismatch",
                        record.first_position,
                        f"the manifest's entry for {segment.file} differs from the database's record of the"
                        f" archive in its {', '.join(differs)}: the manifest was edited or replaced",
                    )
                )
            path = archive / segment.file
            if not path.exists():
                findings.append(_finding("archive-missing", record.first_position, f"{path} does not exist"))
                continue
            if file_sha256(path) != record.sha256:
                findings.append(
                    _finding(
                        "archive-file-changed",
                        record.first_position,
                        f"{path} is not the file archived (its sha256 differs from the one recorded):"
                        " its events were changed, removed or moved",
                    )
                )
            usable.append((record, segment))
        complete = len(usable) == len(records)
        if complete:
            for record, segment in usable:
                count = 0
                batch: list[ChainRow] = []
                try:
                    for row in segment_rows(archive, segment):
                        batch.append(row.chain_row())
                        if len(batch) == batch_size:
                            count += len(batch)
                            yield batch
                            batch = []
                except ArchiveError as error:
                    findings.append(_finding("archive-unreadable", record.first_position, str(error)))
                count += len(batch)
                if batch:
                    yield batch
                if count != record.events:
                    findings.append(
                        _finding(
                            "archive-count",
                            record.first_position,
                            f"{segment.file} holds {count} events; {record.events} were archived",
                        )
                    )
    if not complete:
        verifier.resume(end.last_position, end.last_chain_hash, await archived_heads(store))
    async for rows in store.read_chain_batches(end.last_position, batch_size):
        yield rows


def _check_rows(verifier: ChainVerifier, recomputed: _Recomputed, rows: Sequence[ChainRow]) -> None:
    leaves: list[bytes] = []
    verifier.feed_rows(rows, leaves)
    recomputed.feed_rows(rows, leaves)


# --- verifying ranges of the log at once ------------------------------------------------------------


@dataclass(frozen=True)
class Parallel:
    """How `audit verify` reads the log in ranges: ``processes`` at once, each with its own connection to
    ``database_url`` as ``duty``'s role, each range at least ``min_events`` long (fewer processes when the
    log is short: starting one costs about as much as reading 50,000 events)."""

    database_url: str
    duty: Duty = "reader"
    processes: int = 2
    min_events: int = 200_000


@dataclass(frozen=True)
class LogRange:
    """The rows after ``start_position`` up to ``end_position``, the range starting where a signed
    checkpoint says the log held ``start_size`` events with the chain hash ``start_chain`` there."""

    start_position: int
    end_position: int
    start_size: int
    start_chain: bytes


def plan_ranges(anchors: Iterable[CheckpointBody], parallel: Parallel) -> list[LogRange]:
    """Ranges of about equal size cut at signed checkpoints (``anchors``: any with a valid signature; one
    that does not match the log only makes its range be read again, see ``_check_ranges``), or none when
    the log is too short for more than one."""
    by_size = sorted((a for a in anchors if a.tree_size > 0), key=lambda a: a.tree_size)
    if not by_size:
        return []
    total = by_size[-1].tree_size
    parts = min(parallel.processes, total // max(parallel.min_events, 1))
    starts = [(0, 0, ZERO_HASH)]
    for part in range(1, parts):
        target = total * part // parts
        # Ranges in the log's order, apart: a signed checkpoint naming a position before an earlier one's
        # (forged with a stolen key) must not make two ranges overlap.
        after = [a for a in by_size if a.tree_size > starts[-1][1] and a.global_position > starts[-1][0]]
        if not after:
            break
        nearest = min(after, key=lambda a: abs(a.tree_size - target))
        starts.append((nearest.global_position, nearest.tree_size, nearest.chain_hash))
    if len(starts) < 2:
        return []
    ends = [position for position, _, _ in starts[1:]] + [CHAIN_COPY_END]
    return [LogRange(p, end, size, chain) for (p, size, chain), end in zip(starts, ends, strict=True)]


class _RangeLeaves:
    """The Merkle leaves of a range, from the tree size its first row is assumed to follow: the root of
    each block of 256 leaves the range holds whole and no checkpoint needs the leaves of
    (``_Recomputed.wanted_blocks``), else each leaf with its position and chain hash."""

    def __init__(self, size: int, wanted_blocks: set[int]) -> None:
        self.size = size
        self.wanted_blocks = wanted_blocks
        self.items: list[bytes | tuple[bytes, int, bytes]] = []
        self._block: list[ChainRow] = []
        self._leaves: list[bytes] = []

    def feed_rows(self, rows: Sequence[ChainRow], leaves: Sequence[bytes] | None = None) -> None:
        """The rows' leaves (``leaves``: their hashes when RangeVerifier.feed_rows made them)."""
        if leaves is None:
            leaves = [event_leaf_hash(row[0], row[1]) for row in rows]
        taken, block_size = 0, 1 << BLOCK_LEVEL
        while taken < len(rows):
            chunk = rows[taken : taken + block_size - self.size % block_size]
            self._block += chunk
            self._leaves += leaves[taken : taken + len(chunk)]
            self.size += len(chunk)
            taken += len(chunk)
            if not self.size % block_size:
                self._close(whole=len(self._block) == block_size)

    def _close(self, *, whole: bool) -> None:
        block, self._block = self._block, []
        leaves, self._leaves = self._leaves, []
        if whole and (self.size - 1) >> BLOCK_LEVEL not in self.wanted_blocks:
            self.items.append(perfect_root(leaves))
        else:
            self.items += [(leaf, row[0], row[2]) for leaf, row in zip(leaves, block, strict=True)]

    def finish(self) -> None:
        if self._block:
            self._close(whole=False)


def _check_range_rows(verifier: RangeVerifier, leaves: _RangeLeaves, rows: Sequence[ChainRow]) -> None:
    hashes: list[bytes] = []
    verifier.feed_rows(rows, hashes)
    leaves.feed_rows(rows, hashes)


def verify_range(
    parallel: Parallel,
    log_range: LogRange,
    wanted_positions: set[int],
    wanted_blocks: set[int],
    batch_size: int,
) -> tuple[RangeVerifier, list[bytes | tuple[bytes, int, bytes]]]:
    """Read and check one range in this process (run in a worker process of ``_check_ranges``)."""

    async def run() -> tuple[RangeVerifier, list[bytes | tuple[bytes, int, bytes]]]:
        store = await EventStore.connect(parallel.database_url, pool_size=1, duty=parallel.duty)
        try:
            verifier = RangeVerifier(
                last_position=log_range.start_position,
                last_chain=log_range.start_chain,
                wanted_positions=wanted_positions,
            )
            leaves = _RangeLeaves(log_range.start_size, wanted_blocks)
            async for rows in store.read_chain_batches(
                log_range.start_position, batch_size, log_range.end_position
            ):
                await asyncio.to_thread(_check_range_rows, verifier, leaves, rows)
            leaves.finish()
            return verifier, leaves.items
        finally:
            await store.close()

    return asyncio.run(run())


async def _check_ranges(
    store: EventStore,
    parallel: Parallel,
    ranges: list[LogRange],
    verifier: ChainVerifier,
    recomputed: _Recomputed,
    batch_size: int | None,
) -> int:
    """Check the ranges in worker processes at once (the GIL would serialise threads: parsing and most
    hashing hold it), then join them in order: a range is taken in when the ranges before end exactly
    where its checkpoint says (position, chain hash, tree size) and its streams' first rows continue
    them (``ChainVerifier.join``); the findings are then the ones reading the log in one go gives. A range
    that is not (an anchor that does not match the log, rows edited, removed or moved across its start)
    is read again here, after the ones before it: the same findings, found more slowly. Returns how many
    were joined."""
    loop = asyncio.get_running_loop()
    joined = 0
    wanted_positions = verifier.wanted_positions
    pool = ProcessPoolExecutor(len(ranges), mp_context=multiprocessing.get_context("spawn"))
    finished = False
    try:
        parts = [
            loop.run_in_executor(
                pool,
                verify_range,
                parallel,
                log_range,
                wanted_positions,
                recomputed.wanted_blocks,
                batch_size or RANGE_BATCH,
            )
            for log_range in ranges
        ]
        for log_range, part in zip(ranges, parts, strict=True):
            try:
                range_verifier: RangeVerifier | None
                range_verifier, items = await part
            except Exception as error:  # a worker that failed (its connection, its memory): read it here
                log.warning("verify_range_failed", start=log_range.start_position, error=repr(error))
                range_verifier, items = None, []
            if (
                range_verifier is not None
                and recomputed.size == log_range.start_size
                and verifier.join(range_verifier, log_range.start_position, log_range.start_chain)
            ):
                recomputed.feed_part(items)
                joined += 1
                continue
            async for rows in store.read_chain_batches(
                log_range.start_position, batch_size or CHECK_BATCH, log_range.end_position
            ):
                _check_rows(verifier, recomputed, rows)
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            # An error or a cancel (Ctrl-C, a stop): workers still reading would run their range to its end,
            # and waiting for them would hold the event loop; ProcessPoolExecutor has no public way to stop
            # them, so they are terminated.
            pool.shutdown(wait=False, cancel_futures=True)
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
    return joined


def _in_files(findings: list[Finding], records: list[ArchiveRecord]) -> list[Finding]:
    """Findings at archived positions, with the archive file they are in named."""
    named = []
    for finding in findings:
        position = finding.global_position
        record = next(
            (r for r in records if position is not None and r.first_position <= position <= r.last_position),
            None,
        )
        if record is not None and record.file not in finding.detail:
            finding = dataclasses.replace(finding, detail=f"in archive file {record.file}: {finding.detail}")
        named.append(finding)
    return named


async def audit_trail(
    store: EventStore,
    sources: TrailSources,
    *,
    batch_size: int | None = None,  # rows checked at a time: CHECK_BATCH, RANGE_BATCH in a range's worker
    archive: Path | None = None,
    parallel: Parallel | None = None,
) -> AuditReport:
    """``audit_log`` and the signed checkpoints: every signature, every signed tree head against the tree
    recomputed from the events, consecutive heads linked by consistency proofs, the copies outside the
    database present in it, a fresh enough newest head, and the database's keys among the trusted ones.
    With ``parallel``, the log (when none of it is archived) is read and checked in ranges between signed
    checkpoints by that many processes at once, and the ranges joined (``_check_ranges``)."""
    findings: list[Finding] = []
    trusted_texts = {v.text() for v in sources.trusted}
    for key in sources.database_keys:
        if key.strip() not in trusted_texts:
            findings.append(
                _finding(
                    "key-mismatch",
                    None,
                    f"the database publishes the public key {key.strip()}, which is not a trusted key"
                    " (--public-key / ROLLBOOK_AUDIT_PUBLIC_KEY): it was swapped or a key was rotated"
                    " without telling the verifier",
                )
            )
    valid: list[tuple[str, SignedCheckpoint]] = []
    given = [("database", note) for note in sources.database_notes] + list(sources.external_notes)
    for source, note in given:
        try:
            valid.append((source, SignedCheckpoint.open(note, sources.trusted)))
        except UntrustedKey as error:
            findings.append(_finding("untrusted-key", None, f"a checkpoint in {source}: {error}"))
        except NoteError as error:
            findings.append(_finding("signature-invalid", None, f"a checkpoint in {source}: {error}"))
    in_database = {(cp.body.tree_size, cp.body.root_hash) for source, cp in valid if source == "database"}
    external = sorted((cp.body.tree_size, source, cp) for source, cp in valid if source != "database")
    missing = [
        (size, source) for size, source, cp in external if (size, cp.body.root_hash) not in in_database
    ]
    if missing:
        size, source = missing[-1]
        findings.append(
            _finding(
                "checkpoint-missing-from-database",
                None,
                f"the checkpoint of tree size {size} kept in {source} is not in the database"
                f" ({len(missing)} external checkpoint(s) missing): checkpoints were deleted or replaced",
            )
        )
    by_size: dict[int, tuple[str, SignedCheckpoint]] = {}
    for source, cp in valid:
        other = by_size.get(cp.body.tree_size)
        if other is not None and other[1].body.root_hash != cp.body.root_hash:
            findings.append(
                _finding(
                    "fork",
                    cp.body.global_position,
                    f"two signed checkpoints of tree size {cp.body.tree_size} ({other[0]}, {source}) have"
                    " different roots: the log was rewritten and signed again",
                )
            )
        by_size.setdefault(cp.body.tree_size, (source, cp))
    sizes = sorted(by_size)
    recomputed = _Recomputed(
        set(sizes),
        {b for s in sizes for b in ((s - 1) >> BLOCK_LEVEL, s >> BLOCK_LEVEL)},
    )
    verifier = ChainVerifier(wanted_positions={cp.global_position for _, cp in sources.legacy})
    archive_findings: list[Finding] = []
    ranges = (
        plan_ranges([cp.body for _, cp in by_size.values()], parallel)
        if parallel is not None and not await archive_records(store)
        else []
    )
    joined = 0
    if ranges:
        assert parallel is not None
        joined = await _check_ranges(store, parallel, ranges, verifier, recomputed, batch_size)
    else:
        async for rows in _trail_rows(store, archive, verifier, archive_findings, batch_size or CHECK_BATCH):
            _check_rows(verifier, recomputed, rows)
    verifier.finish()
    recomputed.finish()
    leaves = recomputed.size
    unread = any(f.kind in _UNREAD_ARCHIVE for f in archive_findings)
    if unread:
        # The tree cannot be recomputed without the archived events: the signed checkpoints wait for them.
        sizes, valid = [], []
    findings[:0] = archive_findings
    bad_sizes: set[int] = set()
    mismatched: dict[int, Finding] = {}
    for size in sizes:
        source, cp = by_size[size]
        body = cp.body
        if size > leaves:
            bad_sizes.add(size)
            findings.append(
                _finding(
                    "truncated",
                    body.global_position,
                    f"the checkpoint in {source} covers {size} events up to position {body.global_position};"
                    f" the log holds {leaves}: events it covers were deleted (the tail truncated)",
                )
            )
            continue
        root, position, chain = recomputed.at_size[size] if size else (EMPTY_ROOT, 0, ZERO_HASH)
        if (root, position, chain) != (body.root_hash, body.global_position, body.chain_hash):
            bad_sizes.add(size)
            differs = [
                what
                for what, same in (
                    ("its tree head", root == body.root_hash),
                    (f"its last position ({position} here)", position == body.global_position),
                    ("its chain hash", chain == body.chain_hash),
                )
                if not same
            ]
            mismatched[size] = _finding(
                "checkpoint-mismatch",
                body.global_position,
                f"the first {size} events of the log do not match the signed checkpoint in {source}"
                f" ({', '.join(differs)}): events it covers were rewritten, removed or moved",
            )
    # A redaction rewrote the log on purpose: the checkpoints it names as superseded are accepted as history
    # while a valid signed checkpoint taken after it covers its record; any other mismatch stays a finding.
    covered = max((by_size[s][1].body.global_position for s in sizes if s not in bad_sizes), default=0)
    redactions = await read_redactions(store)
    accepted: list[str] = []
    for size, finding in mismatched.items():
        source, cp = by_size[size]
        named = cp.body.root_hash.hex()
        naming = [(p, r) for p, r in redactions if r.signed_superseded.get(str(size)) == named]
        signed = [(p, r) for p, r in naming if p <= covered]
        if signed:
            position, superseding = signed[0]
            accepted.append(
                f"checkpoint of tree size {size} ({source}) is superseded by the redaction of"
                f" {superseding.redacted_at.isoformat()} (position {position}), which names its root"
            )
            continue
        if naming:
            finding = _finding(
                finding.kind,
                finding.global_position,
                f"{finding.detail}; a redaction record at position {naming[0][0]} names it, but no valid"
                " signed checkpoint taken after that record covers it (a redaction is signed with the"
                " auditor's key: this one was not)",
            )
        findings.append(finding)
    for source, checkpoint in sources.legacy:
        found = len(verifier.findings)
        verifier.check_checkpoint(checkpoint.global_position, bytes.fromhex(checkpoint.chain_hash), source)
        if len(verifier.findings) == found or verifier.findings[-1].kind != "checkpoint-mismatch":
            continue
        legacy_record = _redaction_naming([r for p, r in redactions if p <= covered], checkpoint)
        if legacy_record is not None:
            verifier.findings.pop()
            accepted.append(
                f"checkpoint at position {checkpoint.global_position} ({source}) predates the redaction"
                f" of {legacy_record.redacted_at.isoformat()}, which names its hash"
            )
    for old, new in zip(sizes, sizes[1:], strict=False):
        if old in bad_sizes or new in bad_sizes:
            continue
        try:
            proof = consistency_proof(old, new, recomputed.source)
            verify_consistency(
                old, new, by_size[old][1].body.root_hash, by_size[new][1].body.root_hash, proof
            )
        except (ProofError, KeyError) as error:
            findings.append(_finding("inconsistent", None, f"checkpoints of sizes {old} and {new}: {error}"))
    if leaves and not valid and not unread:
        findings.append(
            _finding(
                "no-checkpoint",
                verifier.last_position,
                f"the log holds {leaves} events and no signed checkpoint verifies anywhere (database, bus,"
                " files): checkpoints were deleted, or the auditor never ran (`rollbook audit checkpoint`)",
            )
        )
    if valid:
        newest = by_size[sizes[-1]][1].body
        age = ((sources.now or datetime.now(UTC)) - newest.taken_at).total_seconds()
        if leaves > newest.tree_size and age > sources.max_age:
            findings.append(
                _finding(
                    "stale-checkpoint",
                    newest.global_position,
                    f"the newest signed checkpoint (tree size {newest.tree_size}) is {age:.0f}s old and"
                    f" {leaves - newest.tree_size} events came after it (bound {sources.max_age:.0f}s):"
                    " they are not protected; is the auditor running?",
                )
            )
    losses, unrecovered = await read_losses(store)
    records = await archive_records(store)
    return AuditReport(
        rows=verifier.rows,
        head=verifier.last_position,
        checkpoints_checked=len(sources.legacy) + len(given),
        findings=_in_files(verifier.findings + findings, records),
        redactions=[describe_redaction(r, signed=p <= covered) for p, r in redactions],
        accepted=accepted,
        losses=losses,
        unrecovered=unrecovered,
        ranges_joined=joined,
        ranges_read_again=len(ranges) - joined,
    )


async def read_losses(store: EventStore) -> tuple[list[str], list[str]]:
    """The store losses on record (``StoreLossDetected``, on a CloneSet's actions stream or
    ``Audit//store-loss``), described, and the event ids of the records naming an event that could not be
    recovered."""
    lines: list[str] = []
    unrecovered: list[str] = []
    for event_id, payload in await store.payloads_of_type(StoreLossDetected.__name__):
        record = _loss_decoder.decode(payload)
        described = describe_loss(record)
        described[0] += f" [record {event_id}]"
        lines += described
        if record.unrecoverable:
            unrecovered.append(str(event_id))
    return lines, unrecovered


async def read_redactions(store: EventStore) -> list[tuple[int, TrailRedacted]]:
    """The redaction records on the log, with their global positions, oldest first."""
    return [
        (s.global_position, s.envelope.payload)
        for s in await store.read_stream(REDACTION_STREAM)
        if isinstance(s.envelope.payload, TrailRedacted)
    ]


def describe_redaction(record: TrailRedacted, *, signed: bool | None = None) -> str:
    """One line naming a redaction: when, which policy, what it rewrote, the heads before and after."""
    line = (
        f"redacted {record.redacted_at.isoformat()} under policy {record.policy}:"
        f" {len(record.positions)} events rewritten, log re-chained up to position {record.head}"
        f" ({record.chain_before[:16]}… -> {record.chain_after[:16]}…)"
    )
    if record.root_before:
        line += (
            f"; tree head before: {record.tree_size_before} events, root {record.root_before[:16]}…;"
            f" {len(record.signed_superseded)} signed checkpoint(s) superseded"
        )
    if signed is False:
        line += " (NOT covered by a valid signed checkpoint)"
    return line


def _redaction_naming(redactions: list[TrailRedacted], checkpoint: Checkpoint) -> TrailRedacted | None:
    """The redaction whose record names this checkpoint's position with exactly this hash, if any."""
    for record in redactions:
        if record.checkpoints_before.get(str(checkpoint.global_position)) == checkpoint.chain_hash:
            return record
        if record.head == checkpoint.global_position and record.chain_before == checkpoint.chain_hash:
            return record
    return None


def describe_loss(record: StoreLossDetected) -> list[str]:
    """Lines naming a recorded loss: what came back, and each event and carried-out action that did not."""
    lines = [
        f"store loss detected {record.detected_at.isoformat()}: {len(record.recovered)} event(s) recovered"
        f" from the bus, {len(record.unrecoverable)} unrecoverable"
        + (f" (workloads: {', '.join(record.workloads)})" if record.workloads else "")
    ]
    for lost in record.unrecoverable:
        lines.append(
            f"  LOST {lost.get('type')} {lost.get('event_id')} {lost.get('stream')} v{lost.get('version')}"
            f" rollout {lost.get('rollout_id') or '-'}: {lost.get('reason')}"
        )
    for action in record.actions_applied:
        lines.append(
            f"  CARRIED OUT, outcome lost: {action.get('action') or 'action'} {action.get('action_id')}"
            f" on pod {action.get('pod') or action.get('pod_uid') or '?'}"
            f" rollout {action.get('rollout_id') or '-'}"
        )
    return lines
