"""Retention of the event log: whole months of ``events`` written to files and dropped (``rollbook archive``),
and those files read back (``audit verify --archive``, ``replay --archive``, ``what-if --archive``).
docs/retention.md is the user's page.

The files. An archive directory holds one gzip-compressed JSON-lines file per archive run,
``events-<first position>-<last position>.jsonl.gz``, one event per line in global order with every column
the hash chain covers (the payload as the JSON the database hashed, the hashes in hex), and
``manifest.json``: per file its position range, event count, sha256, the chain hash before its first event
and at its last, the partitions it came from, and the signed checkpoints (C2SP notes) the database held.
Readable with ``zcat | jq``; nothing but the standard library is needed to read or verify it.

What is archived. The partitions that end before the date (and before now), but only the longest prefix of
the log that is (a) below every position still in another partition (``recorded_at`` is when a transaction
began, so a transaction that began before midnight can commit after one that began later: positions of two
months may interleave at their boundary), (b) covered by a signed checkpoint, and (c) made of whole blocks
of the auditor's Merkle tree (256 events; the tree's blocks stay in ``merkle_nodes``, so checkpoints and the
proofs of live events still work). Events of those partitions after that prefix stay in the database: they
are copied into a new table that takes the partition's place. So archived + live is always one chain: the
archive ends where the table begins.

Crash safety. The file and then the manifest are written to temporary names, fsynced and renamed before
anything is dropped; the drop (detach, copy of what stays, ``event_archives``, ``archived_stream_heads``) is
one transaction as the owner, under an exclusive lock on ``events``. A crash before the commit leaves the
database as it was and a manifest entry the database does not confirm: the next run writes the same range
again (the same bytes: gzip without a timestamp) and replaces it. Nothing is dropped that is not in a file.

What stays. ``event_keys`` and ``stream_heads`` (0028) are not touched: an archived event's id stays taken
(its redelivery is skipped as stored) and its stream's versions keep rising from its head.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import msgspec
import structlog

from services.infra.database import asyncpg_url
from services.infra.db_roles import assume_sql, role_sql
from services.infra.store import PostgresEventStore, StoredEvent
from services.model.events import Envelope
from services.model.hashchain import CHAIN_COLUMNS, ZERO_HASH, ChainRow, content_bytes

log = structlog.get_logger(__name__)

MANIFEST = "manifest.json"
FORMAT = "rollbook-archive/1"
_PAGE = 5000
_MERKLE_BLOCK_LEVEL = 8  # services/infra/transparency.py's blocks


class ArchiveError(Exception):
    """The archive cannot be made or read; the message says why in one line."""


class ArchivedRow(msgspec.Struct, kw_only=True):
    """One line of an archive file: the columns the hash chain covers."""

    global_position: int
    event_id: uuid.UUID
    stream: str
    stream_version: int
    type: str
    schema_version: int
    occurred_at: datetime
    recorded_at: datetime
    causation_id: uuid.UUID | None
    correlation_id: str | None
    payload: msgspec.Raw
    stream_hash: str
    chain_hash: str

    def chain_row(self) -> ChainRow:
        """The row as ChainVerifier.feed_rows takes it, as the database's would be read."""
        return (
            self.global_position,
            bytes.fromhex(self.stream_hash),
            bytes.fromhex(self.chain_hash),
            self.stream.encode(),
            self.stream_version,
            content_bytes(
                self.event_id,
                self.stream,
                self.stream_version,
                self.type,
                self.schema_version,
                self.occurred_at,
                self.recorded_at,
                self.causation_id,
                self.correlation_id,
                bytes(self.payload).decode(),
            ),
        )


class Segment(msgspec.Struct, kw_only=True):
    """One archive run's file, as the manifest describes it."""

    file: str
    sha256: str
    events: int
    first_position: int
    last_position: int
    chain_hash_before: str
    last_chain_hash: str
    partitions: list[str]
    archived_at: datetime
    signed_checkpoints: list[str] = msgspec.field(default_factory=list)


class Manifest(msgspec.Struct, kw_only=True):
    format: str = FORMAT
    segments: list[Segment] = msgspec.field(default_factory=list)


@dataclass(frozen=True)
class ArchiveRecord:
    """An archived range as the database records it (``event_archives``)."""

    first_position: int
    last_position: int
    events: int
    chain_hash_before: bytes
    last_chain_hash: bytes
    file: str
    sha256: str


@dataclass
class ArchiveOutcome:
    """What one ``archive_before`` run did."""

    events: int = 0
    first_position: int = 0
    last_position: int = 0
    file: str | None = None
    dropped: list[str] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)  # partition -> events left in it (after the prefix)
    reason: str = ""  # why nothing (more) was archived
    seconds_writing: float = 0.0


_line_encoder = msgspec.json.Encoder()
_line_decoder = msgspec.json.Decoder(ArchivedRow)
_manifest_decoder = msgspec.json.Decoder(Manifest)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST
    if not path.exists():
        return Manifest()
    try:
        manifest = _manifest_decoder.decode(path.read_bytes())
    except msgspec.DecodeError as error:
        raise ArchiveError(f"{path} is not an archive manifest: {error}") from None
    if manifest.format != FORMAT:
        raise ArchiveError(f"{path} has format {manifest.format!r}; this rollbook reads {FORMAT!r}")
    return manifest


def write_manifest(directory: Path, manifest: Manifest) -> None:
    _write_durably(directory / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest)))


# --- partitions ahead -----------------------------------------------------------------------------------

PARTITION_UPKEEP_SECONDS = 3600.0


async def keep_partitions_ahead(
    store: PostgresEventStore, months: int, stopping: asyncio.Event, every: float = PARTITION_UPKEEP_SECONDS
) -> None:
    """The auditor's upkeep: partitions of ``events`` ready two ahead of now, at start and every ``every``
    seconds (rows nothing covers would land in the default partition, which is not archived by month). A
    failure is logged and tried again at the next turn."""
    while not stopping.is_set():
        try:
            created = await store.add_partitions(months)
            if created:
                log.info("event_partitions_created", count=created)
        except Exception as error:  # noqa: BLE001 - the store goes on without new partitions meanwhile
            log.warning("event_partitions_failed", error=repr(error))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), every)


# --- archiving -----------------------------------------------------------------------------------------

_CHAIN_PAGE_SQL = (
    f"SELECT {CHAIN_COLUMNS} FROM events WHERE global_position > $1 AND global_position <= $2"
    " ORDER BY global_position LIMIT $3"
)


async def _owner_connection(owner_url: str) -> asyncpg.Connection:
    connection = await asyncpg.connect(asyncpg_url(owner_url))
    await connection.execute(assume_sql("owner"))
    owner = await connection.fetchval(f"SELECT {role_sql('owner')}")
    if await connection.fetchval("SELECT current_user") != owner and not await connection.fetchval(
        "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
    ):
        await connection.close()
        raise ArchiveError(
            f"archiving drops partitions of events, which only the owner role {owner!r} may: run it with"
            " ROLLBOOK_DATABASE_OWNER_URL set to a login that may act as the owner"
            " (docs/security-database.md)"
        )
    return connection


async def _cut(
    connection: asyncpg.Connection, partitions: Sequence[str], others: Sequence[str]
) -> tuple[int, str]:
    """The last position that may be archived (0: none) and, when it stops short, why."""
    ends = [await connection.fetchval(f"SELECT max(global_position) FROM {_quote(p)}") for p in partitions]
    highest = max((e for e in ends if e is not None), default=0)
    if not highest:
        return 0, "the partitions before that date hold no event"
    limit, reason = highest, ""
    for other in others:
        first = await connection.fetchval(f"SELECT min(global_position) FROM {_quote(other)}")
        if first is not None and first - 1 < limit:
            limit, reason = first - 1, f"partition {other} holds position {first}, recorded earlier"
    signed = await connection.fetchval("SELECT max(global_position) FROM signed_checkpoints") or 0
    if signed < limit:
        limit = signed
        reason = (
            f"the newest signed checkpoint covers position {signed}: start the auditor or run"
            " `rollbook audit checkpoint` first"
            if signed
            else "no signed checkpoint covers these events: run `rollbook audit checkpoint` first"
        )
    block_end = await connection.fetchval(
        "SELECT max(last_position) FROM merkle_nodes WHERE level = $1 AND last_position <= $2",
        _MERKLE_BLOCK_LEVEL,
        limit,
    )
    if (block_end or 0) < limit:
        reason = reason or "the archive ends on a whole block of 256 events of the Merkle tree"
        limit = block_end or 0
    return limit, reason


async def archive_before(owner_url: str, before: datetime, directory: Path) -> ArchiveOutcome:
    """Archive the partitions of ``events`` that end at or before ``before`` (and before now) into
    ``directory``, then drop them (module docstring). Idempotent: a second run archives nothing more."""
    import time

    manifest = _prepare(directory)
    connection = await _owner_connection(owner_url)
    try:
        rows = await connection.fetch(
            "SELECT name, is_default, lower_bound, upper_bound FROM event_partitions ORDER BY lower_bound"
        )
        until = min(before, datetime.now(UTC))
        candidates = [r for r in rows if not r[1] and r[3] <= until]
        for row in rows:
            # Rows of months no partition covered (the auditor was down) wait in the default partition;
            # once all of them are old enough it is archived too, and an empty one takes its place.
            if row[1] and (
                latest := await connection.fetchval(f"SELECT max(recorded_at) FROM {_quote(row[0])}")
            ):
                if latest < until:
                    candidates.append(row)
        others = [r[0] for r in rows if r not in candidates]
        outcome = ArchiveOutcome()
        if not candidates:
            outcome.reason = f"no partition of events ends before {before.isoformat()}"
            return outcome
        names = [r[0] for r in candidates]
        cut, reason = await _cut(connection, names, others)
        archived = await connection.fetchrow(
            "SELECT last_position, last_chain_hash FROM event_archives ORDER BY last_position DESC LIMIT 1"
        )
        after = int(archived[0]) if archived else 0
        chain_before = bytes(archived[1]) if archived else ZERO_HASH
        if cut <= after:
            outcome.reason = reason or "everything before that date is archived already"
            return outcome
        started = time.perf_counter()
        segment, heads = await _write_segment(connection, directory, after, cut, chain_before, names)
        outcome.seconds_writing = time.perf_counter() - started
        # Entries the database does not confirm (a run that crashed before its commit) give way.
        manifest.segments = [s for s in manifest.segments if s.last_position <= after] + [segment]
        write_manifest(directory, manifest)
        outcome.kept = await _drop(connection, candidates, segment, heads)
        outcome.events, outcome.file = segment.events, segment.file
        outcome.first_position, outcome.last_position = segment.first_position, segment.last_position
        outcome.dropped = [r[0] for r in candidates if r[0] not in outcome.kept and not r[1]]
        outcome.reason = reason
        _remove_unlisted(directory, manifest)
        return outcome
    finally:
        await connection.close()


def _prepare(directory: Path) -> Manifest:
    directory.mkdir(parents=True, exist_ok=True)
    return read_manifest(directory)


def _remove_unlisted(directory: Path, manifest: Manifest) -> None:
    """Files of runs the manifest no longer lists (written by a run that crashed before its commit)."""
    listed = {s.file for s in manifest.segments}
    for stale in directory.glob("events-*.jsonl.gz"):
        if stale.name not in listed:
            stale.unlink()


class _SegmentFile:
    """An archive file being written: gzip (no timestamp, so a rerun writes the same bytes) over a
    temporary file, hashed as written; ``finish`` fsyncs it and renames it into place."""

    def __init__(self, directory: Path, first: int) -> None:
        self.directory = directory
        self.temporary = directory / f".events-{first:012d}.jsonl.gz.tmp"
        self.digest = hashlib.sha256()
        self.raw = open(self.temporary, "wb")  # noqa: SIM115 - closed in finish
        # Level 6: nearly level 9's size at twice its speed.
        self.gzip = gzip.GzipFile(  # type: ignore[call-overload]
            filename="", mode="wb", fileobj=self, mtime=0, compresslevel=6
        )

    def write(self, data: bytes) -> int:  # what gzip writes through: hashed, then to the file
        self.digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def add(self, lines: list[bytes]) -> None:
        self.gzip.write(b"\n".join(lines) + b"\n")

    def finish(self, name: str) -> str:
        self.gzip.close()
        self.raw.flush()
        os.fsync(self.raw.fileno())
        self.raw.close()
        os.replace(self.temporary, self.directory / name)
        _fsync_directory(self.directory)
        return self.digest.hexdigest()


async def _write_segment(
    connection: asyncpg.Connection,
    directory: Path,
    after: int,
    cut: int,
    chain_before: bytes,
    partitions: list[str],
) -> tuple[Segment, dict[str, tuple[int, bytes]]]:
    """Write the events after ``after`` up to ``cut`` to a file (fsynced, renamed into place)."""
    heads: dict[str, tuple[int, bytes]] = {}
    first = last = 0
    count = 0
    last_chain = chain_before
    out = _SegmentFile(directory, after + 1)
    position = after
    while True:
        page = await connection.fetch(_CHAIN_PAGE_SQL, position, cut, _PAGE)
        lines = []
        for r in page:
            lines.append(
                _line_encoder.encode(
                    ArchivedRow(
                        global_position=r[0],
                        event_id=r[1],
                        stream=r[2],
                        stream_version=r[3],
                        type=r[4],
                        schema_version=r[5],
                        occurred_at=r[6],
                        recorded_at=r[7],
                        causation_id=r[8],
                        correlation_id=r[9],
                        payload=msgspec.Raw(r[10].encode()),
                        stream_hash=bytes(r[11]).hex(),
                        chain_hash=bytes(r[12]).hex(),
                    )
                )
            )
            heads[r[2]] = (r[3], bytes(r[11]))
        if page:
            out.add(lines)
            first = first or page[0][0]
            last, last_chain = page[-1][0], bytes(page[-1][12])
            count += len(page)
            position = last
        if len(page) < _PAGE:
            break
    name = f"events-{first:012d}-{last:012d}.jsonl.gz"
    sha256 = out.finish(name)
    notes = [
        r[0]
        for r in await connection.fetch(
            "SELECT note FROM signed_checkpoints WHERE global_position >= $1 ORDER BY tree_size", first
        )
    ]
    segment = Segment(
        file=name,
        sha256=sha256,
        events=count,
        first_position=first,
        last_position=last,
        chain_hash_before=chain_before.hex(),
        last_chain_hash=last_chain.hex(),
        partitions=partitions,
        archived_at=datetime.now(UTC),
        signed_checkpoints=notes,
    )
    return segment, heads


async def _drop(
    connection: asyncpg.Connection,
    partitions: Sequence[asyncpg.Record],
    segment: Segment,
    heads: dict[str, tuple[int, bytes]],
) -> dict[str, int]:
    """In one transaction: check the database still holds what the file holds, move each partition's
    events after the archived prefix to a table that takes its place, drop the partitions, and record the
    archive and the streams' heads. Returns the partitions kept (with the events left in them)."""
    kept: dict[str, int] = {}
    cut = segment.last_position
    async with connection.transaction():
        # Before anything else: no writer or reader is inside events while its partitions change.
        await connection.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        count, last_chain = await connection.fetchrow(
            "SELECT count(*), (SELECT chain_hash FROM events WHERE global_position = $1) FROM events"
            " WHERE global_position <= $1",
            cut,
        )
        if count != segment.events or bytes(last_chain or b"").hex() != segment.last_chain_hash:
            raise ArchiveError(
                f"the database changed while {segment.file} was written ({count} events up to {cut}, the"
                f" file {segment.events}): nothing dropped; run the archive again"
            )
        roles = [await connection.fetchval(f"SELECT {role_sql(d)}") for d in ("writer", "reader", "webhook")]
        for name, is_default, lower, upper in partitions:
            staying = await connection.fetchval(
                f"SELECT count(*) FROM {_quote(name)} WHERE global_position > $1", cut
            )
            carried = f"{name[:40]}_carried"
            if staying or is_default:  # the default partition is always put back, empty if need be
                await connection.execute(
                    f"CREATE TABLE {_quote(carried)} (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
                )
                await connection.execute(
                    f"INSERT INTO {_quote(carried)} SELECT * FROM {_quote(name)} WHERE global_position > $1",
                    cut,
                )
            # The stored inputs of the rounds archived (pod objects of that time) leave with them.
            await connection.execute(
                "DELETE FROM round_inputs WHERE round_event_id IN"
                f" (SELECT event_id FROM {_quote(name)} WHERE global_position <= $1)",
                cut,
            )
            await connection.execute(f"ALTER TABLE events DETACH PARTITION {_quote(name)}")
            await connection.execute(f"DROP TABLE {_quote(name)}")
            if staying or is_default:
                bounds = (
                    "DEFAULT"
                    if is_default
                    else f"FOR VALUES FROM ('{lower.isoformat()}') TO ('{upper.isoformat()}')"
                )
                await connection.execute(f"ALTER TABLE {_quote(carried)} RENAME TO {_quote(name)}")
                await connection.execute(f"ALTER TABLE events ATTACH PARTITION {_quote(name)} {bounds}")
                # Its statistics on the expressions the views look up by (migration 0030).
                await connection.execute("SELECT events_partition_statistics($1::regclass)", name)
                await connection.execute(f"REVOKE ALL ON {_quote(name)} FROM {', '.join(map(_quote, roles))}")
            if staying:
                kept[name] = int(staying)
        await connection.execute(
            "INSERT INTO event_archives (first_position, last_position, events, chain_hash_before,"
            " last_chain_hash, partitions, file, sha256) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            segment.first_position,
            segment.last_position,
            segment.events,
            bytes.fromhex(segment.chain_hash_before),
            bytes.fromhex(segment.last_chain_hash),
            segment.partitions,
            segment.file,
            segment.sha256,
        )
        await connection.execute(
            "INSERT INTO archived_stream_heads (stream, stream_version, stream_hash)"
            " SELECT * FROM unnest($1::text[], $2::int4[], $3::bytea[])"
            " ON CONFLICT (stream) DO UPDATE SET stream_version = excluded.stream_version,"
            " stream_hash = excluded.stream_hash"
            " WHERE archived_stream_heads.stream_version < excluded.stream_version",
            list(heads),
            [v for v, _ in heads.values()],
            [h for _, h in heads.values()],
        )
    return kept


async def archive_records(store: PostgresEventStore) -> list[ArchiveRecord]:
    """The archived ranges the database records, in position order."""
    rows = await store.query(
        "SELECT first_position, last_position, events, chain_hash_before, last_chain_hash, file, sha256"
        " FROM event_archives ORDER BY first_position"
    )
    return [ArchiveRecord(r[0], r[1], r[2], bytes(r[3]), bytes(r[4]), r[5], r[6]) for r in rows]


async def archived_heads(store: PostgresEventStore) -> dict[str, tuple[int, bytes]]:
    """Each archived stream's last archived version and its stream hash."""
    rows = await store.query("SELECT stream, stream_version, stream_hash FROM archived_stream_heads")
    return {r[0]: (int(r[1]), bytes(r[2])) for r in rows}


# --- reading --------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def segment_rows(directory: Path, segment: Segment) -> Iterator[ArchivedRow]:
    """The rows of one archive file, in file order. ArchiveError names the file and line of one that
    cannot be read."""
    path = directory / segment.file
    try:
        with gzip.open(path, "rb") as source:
            for number, line in enumerate(source, start=1):
                try:
                    yield _line_decoder.decode(line)
                except msgspec.DecodeError as error:
                    raise ArchiveError(
                        f"{segment.file} line {number} is not an archived event: {error}"
                    ) from None
    except (OSError, EOFError) as error:
        raise ArchiveError(f"{segment.file} cannot be read: {error}") from None


def stream_events(directory: Path, manifest: Manifest, stream: str) -> list[StoredEvent]:
    """The archived events of ``stream``, in stream order, decoded as the store reads them."""
    from services.model.upcasting import DEFAULT_DECODER

    needle = _line_encoder.encode(stream)
    found: list[StoredEvent] = []
    for segment in manifest.segments:
        for row in _rows_mentioning(directory, segment, needle):
            if row.stream != stream:
                continue
            found.append(
                StoredEvent(
                    row.global_position,
                    row.recorded_at,
                    Envelope(
                        event_id=row.event_id,
                        stream=row.stream,
                        stream_version=row.stream_version,
                        type=row.type,
                        schema_version=row.schema_version,
                        occurred_at=row.occurred_at,
                        causation_id=row.causation_id,
                        correlation_id=row.correlation_id,
                        payload=DEFAULT_DECODER.decode(row.type, row.schema_version, bytes(row.payload)),
                    ),
                )
            )
    return found


def _rows_mentioning(directory: Path, segment: Segment, needle: bytes) -> Iterator[ArchivedRow]:
    """The rows of a file whose line holds ``needle`` (a cheap filter before decoding)."""
    with gzip.open(directory / segment.file, "rb") as source:
        for line in source:
            if needle in line:
                yield _line_decoder.decode(line)


class ArchivedEventStore(PostgresEventStore):
    """The event store with the archived events in front: ``read_stream`` returns a stream's archived
    events, then its live ones (what replay and what-if read). Everything else reads the database only."""

    def __init__(self, store: PostgresEventStore, directory: Path) -> None:
        super().__init__(store.engine, store.decoder)
        self.directory = directory
        self.manifest = read_manifest(directory)
        if not self.manifest.segments:
            raise ArchiveError(f"{directory} holds no archive (no {MANIFEST} with a file in it)")

    async def read_stream(
        self, stream: str, from_version: int = 1, limit: int | None = None
    ) -> list[StoredEvent]:
        archived = [
            e
            for e in stream_events(self.directory, self.manifest, stream)
            if e.envelope.stream_version >= from_version
        ]
        if limit is not None and len(archived) >= limit:
            return archived[:limit]
        start = archived[-1].envelope.stream_version + 1 if archived else from_version
        live = await super().read_stream(stream, start, None if limit is None else limit - len(archived))
        return archived + live

    async def correlation_span(self, correlation_id: str) -> tuple[int, int] | None:
        """None: a rollout's replay reads its workload's archived and live events whole (``read_stream``)."""
        return None

    async def round_input(self, round_event_id: uuid.UUID) -> bytes | None:
        """None: what-if folds an archived workload's events from the files (its other reads are the
        database's only)."""
        return None
