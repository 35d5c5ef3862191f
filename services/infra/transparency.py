"""The signed Merkle log: the tree over the events kept in ``merkle_nodes``, signed checkpoints of its head
written to the database and to sinks outside it, inclusion proofs and receipts (docs/audit.md).

The tree (services/model/merkle.py) has one leaf per stored event, in global order. ``MerkleLog`` keeps the
hashes of its perfect subtrees of 256 leaves and more (a few rows per thousand events) and recomputes
anything smaller from the events' ``stream_hash`` when a proof needs it. ``MerkleLog.extend`` catches the
stored tree up with the log; ``MerkleLog.rebuild`` drops it and builds it again from the events (as the
owner). ``checkpoint`` extends the tree, signs its head with the auditor's key and publishes it: the
``signed_checkpoints`` table, the JetStream checkpoint stream (deny_delete and deny_purge, checked), a
directory of read-only files, and the JSON-lines checkpoint file if configured.
The public key goes with it (``audit_keys``, the bus message's header, the directory).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from services.infra.bus import Bus
from services.infra.checkpoints import (
    checkpoint_stream,
    checkpoint_subject,
    ensure_checkpoint_stream,
    stream_messages,
)
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import REDACTION_STREAM, TrailRedacted
from services.model.hashchain import ZERO_HASH, micros
from services.model.merkle import (
    CompactRange,
    ProofError,
    consistency_proof,
    event_leaf_hash,
    frontier_root,
    inclusion_proof,
    perfect_root,
    range_hash,
    verify_consistency,
    verify_inclusion,
)
from services.model.receipt import RECEIPT_FORMAT
from services.model.signed_note import (
    CheckpointBody,
    NoteError,
    SignedCheckpoint,
    Signer,
    Verifier,
    sign_checkpoint,
)

log = structlog.get_logger("transparency")

BLOCK_LEVEL = 8  # perfect subtrees of 2**8 leaves and more are stored; smaller ones are recomputed
BLOCK = 1 << BLOCK_LEVEL
_READ_CHUNK = 16 * BLOCK
VERIFIER_HEADER = "Rollbook-Verifier-Key"

_INSERT_NODE = """
INSERT INTO merkle_nodes (level, idx, hash, first_position, last_position) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (level, idx) DO NOTHING
"""
_INSERT_CHECKPOINT = """
INSERT INTO signed_checkpoints (tree_size, global_position, root_hash, key_name, key_id, note)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tree_size) DO NOTHING
"""
_INSERT_KEY = """
INSERT INTO audit_keys (verifier_key, key_name, key_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
"""
# The chain hash at a position: stored, or the last of an archived range (rollbook archive ends on a
# block, so the tree's last block may end on an archived event).
_CHAIN_AT_SQL = (
    "SELECT chain_hash FROM events WHERE global_position = $1"
    " UNION ALL SELECT last_chain_hash FROM event_archives WHERE last_position = $1 LIMIT 1"
)


class TransparencyError(RuntimeError):
    """A key that cannot be read, a stream left unprotected, a proof the stored tree cannot give."""


# --- keys ----------------------------------------------------------------------------------------------


def signing_key_path(settings: Settings) -> Path:
    if settings.audit_key_file:
        return Path(settings.audit_key_file)
    return settings.data_path / "audit" / "signing.key"


def load_signer(settings: Settings, *, create: bool = True) -> Signer:
    """The auditor's signing key: audit_key_file, or <data_dir>/audit/signing.key, created (0600, with a
    readable ``signing.pub`` beside it) when that default file is missing and ``create``."""
    path = signing_key_path(settings)
    if not path.exists():
        if settings.audit_key_file or not create:
            raise TransparencyError(f"signing key {path} not found (ROLLBOOK_AUDIT_KEY_FILE; docs/audit.md)")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        signer = Signer.generate(settings.audit_key_name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it first: use that one
            return load_signer(settings, create=False)
        with os.fdopen(fd, "w") as out:
            out.write(signer.text() + "\n")
        public = path.with_suffix(".pub")
        public.write_text(signer.verifier.text() + "\n")
        log.info("signing_key_created", path=str(path), verifier_key=signer.verifier.text())
        return signer
    try:
        return Signer.parse(path.read_text())
    except (OSError, NoteError) as error:
        raise TransparencyError(f"signing key {path}: {error}") from error


def trusted_verifiers(settings: Settings, given: Sequence[str] = ()) -> list[Verifier]:
    """The public keys a verifier trusts: each of ``given`` (verifier keys or files of them), else
    audit_public_key, else the public half of the signing key file if readable. Never the database's."""
    sources = list(given) or [s for s in settings.audit_public_key.split(",") if s.strip()]
    verifiers: list[Verifier] = []
    for source in sources:
        verifiers += parse_verifier_keys(source.strip())
    if not sources:
        path = signing_key_path(settings)
        public = path.with_suffix(".pub")
        with contextlib.suppress(OSError, NoteError):
            verifiers.append(Signer.parse(path.read_text()).verifier)
        if not verifiers and public.exists():
            verifiers += parse_verifier_keys(str(public))
    return verifiers


def parse_verifier_keys(source: str) -> list[Verifier]:
    """A verifier key, or a file holding verifier keys one a line."""
    if not Path(source).exists():
        with contextlib.suppress(NoteError):
            return [Verifier.parse(source)]
    try:
        text = Path(source).read_text()
    except OSError as error:
        raise TransparencyError(
            f"public key {source!r}: not a verifier key, and not a readable file"
        ) from error
    try:
        return [Verifier.parse(line) for line in text.splitlines() if line.strip()]
    except NoteError as error:
        raise TransparencyError(f"public key file {source}: {error}") from error


# --- the tree --------------------------------------------------------------------------------------------


_block_root = perfect_root
_frontier_root = frontier_root


@dataclass(frozen=True)
class TreeHead:
    size: int
    root: bytes
    global_position: int  # of the last leaf (0 when empty)
    chain_hash: bytes  # at that position


class MerkleLog:
    """The stored tree's upkeep and reads. Not safe for two writers at once (the auditor runs one)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.blocks = 0  # complete blocks stored
        self.last_block_position = 0  # last position of the last complete block
        self.upper = CompactRange()  # over the stored blocks (levels >= BLOCK_LEVEL)
        self.tail: list[tuple[int, bytes]] = []  # (position, leaf hash) of the events after the blocks
        self._head_chain: tuple[int, bytes] = (0, ZERO_HASH)  # position and chain hash of the last leaf
        self.loaded = False

    @property
    def size(self) -> int:
        return self.blocks * BLOCK + len(self.tail)

    async def load(self) -> None:
        """Read the stored tree's frontier (and the events after its last block)."""
        rows = await self.store.query(
            "SELECT idx, last_position FROM merkle_nodes WHERE level = $1 ORDER BY idx DESC LIMIT 1",
            BLOCK_LEVEL,
        )
        self.blocks = int(rows[0][0]) + 1 if rows else 0
        self.last_block_position = int(rows[0][1]) if rows else 0
        keys = frontier_keys(self.blocks)
        nodes = await self._nodes(keys)
        if len(nodes) != len(keys):
            log.warning("merkle_tree_incomplete", blocks=self.blocks, missing=len(keys) - len(nodes))
            await self.rebuild()
            return
        self.upper = CompactRange(self.blocks * BLOCK, [(level, nodes[(level, idx)]) for level, idx in keys])
        self.tail = []
        self._head_chain = (0, ZERO_HASH)
        if self.last_block_position:
            chain = await self.store.query(_CHAIN_AT_SQL, self.last_block_position)
            self._head_chain = (self.last_block_position, bytes(chain[0][0]) if chain else ZERO_HASH)
        self.loaded = True

    async def rebuild(self) -> TreeHead:
        """Drop the stored tree and build it again from the events (the owner's store: the services' role
        may not delete nodes; `audit redact` drops it in its rewrite's own transaction instead)."""
        await self.store.execute_many("DELETE FROM merkle_nodes WHERE level >= $1", [(BLOCK_LEVEL,)])
        self.blocks, self.last_block_position = 0, 0
        self.upper, self.tail = CompactRange(), []
        self._head_chain = (0, ZERO_HASH)
        self.loaded = True
        return await self.extend()

    async def extend(self) -> TreeHead:
        """Add the events stored since the last call to the tree; the head of the tree after them."""
        if not self.loaded:
            await self.load()
        after = self.tail[-1][0] if self.tail else self.last_block_position
        last_read = after
        while True:
            rows = await self.store.read_leaf_rows(after, _READ_CHUNK)
            pending: list[tuple[int, int, bytes, int | None, int | None]] = []

            def on_node(level: int, index: int, digest: bytes, pending: list[Any] = pending) -> None:
                if level > BLOCK_LEVEL:
                    pending.append((level, index, digest, None, None))

            tail = self.tail
            for position, stream_hash in rows:
                tail.append((position, event_leaf_hash(position, stream_hash)))
                if len(tail) == BLOCK:
                    digest = _block_root([leaf for _, leaf in tail])
                    pending.append((BLOCK_LEVEL, self.blocks, digest, tail[0][0], tail[-1][0]))
                    self.upper.push(BLOCK_LEVEL, digest, on_node)
                    self.blocks += 1
                    self.last_block_position = tail[-1][0]
                    self.tail = tail = []
            if pending:
                await self.store.execute_many(_INSERT_NODE, pending)
            if rows:
                last_read = rows[-1][0]
            if len(rows) < _READ_CHUNK:
                break
            after = rows[-1][0]
            await asyncio.sleep(0)
        if last_read != self._head_chain[0]:
            chain = await self.store.query(_CHAIN_AT_SQL, last_read)
            self._head_chain = (last_read, bytes(chain[0][0]) if chain else ZERO_HASH)
        return self.head()

    def head(self) -> TreeHead:
        frontier = list(self.upper.frontier)
        if self.tail:
            frontier += CompactRange.of(leaf for _, leaf in self.tail).frontier
        if not frontier:
            return TreeHead(0, CompactRange().root(), 0, ZERO_HASH)
        position, chain = self._head_chain
        return TreeHead(self.size, _frontier_root(frontier), position, chain)

    async def _nodes(self, keys: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        wanted = list(keys)
        if not wanted:
            return {}
        rows = await self.store.query(
            "SELECT n.level, n.idx, n.hash FROM merkle_nodes n"
            " JOIN unnest($1::smallint[], $2::bigint[]) AS k(level, idx)"
            " ON n.level = k.level AND n.idx = k.idx",
            [level for level, _ in wanted],
            [idx for _, idx in wanted],
        )
        return {(int(r[0]), int(r[1])): bytes(r[2]) for r in rows}

    async def leaf_index(self, position: int) -> tuple[int, list[tuple[int, bytes]]]:
        """The leaf index of the event at ``position`` and the (position, leaf hash) of its block's events
        (up to the event's own, at least). TransparencyError if no event is stored there."""
        rows = await self.store.query(
            "SELECT idx, first_position, last_position FROM merkle_nodes"
            " WHERE level = $1 AND last_position >= $2 ORDER BY last_position LIMIT 1",
            BLOCK_LEVEL,
            position,
        )
        if rows:
            block, first, last = int(rows[0][0]), int(rows[0][1]), int(rows[0][2])
            leaves = await self._block_leaves(first, last)
        else:
            tip = await self.store.query(
                "SELECT idx, last_position FROM merkle_nodes WHERE level = $1 ORDER BY idx DESC LIMIT 1",
                BLOCK_LEVEL,
            )
            block = int(tip[0][0]) + 1 if tip else 0
            start = int(tip[0][1]) if tip else 0
            leaves = [
                (int(p), event_leaf_hash(int(p), bytes(h)))
                for p, h in await self.store.read_leaf_rows(start, BLOCK)
            ]
        for offset, (stored, _) in enumerate(leaves):
            if stored == position:
                return block * BLOCK + offset, leaves
        raise TransparencyError(f"no event is stored at position {position}")

    async def _block_leaves(self, first: int, last: int) -> list[tuple[int, bytes]]:
        return [
            (int(p), event_leaf_hash(int(p), bytes(h)))
            for p, h in await self.store.read_leaf_range(first, last)
        ]

    async def node_source(
        self,
        requests: Callable[[Callable[[int, int], bytes]], Any],
        known: dict[int, list[bytes]] | None = None,
    ) -> Callable[[int, int], bytes]:
        """A NodeSource answering every node ``requests(source)`` asks for: the stored nodes (levels >=
        8) read in one query, smaller ones from the leaves of their block (``known`` blocks first)."""
        asked: set[tuple[int, int]] = set()

        def record(level: int, index: int) -> bytes:
            asked.add((level, index))
            return bytes(32)

        requests(record)
        stored = await self._nodes(k for k in asked if k[0] >= BLOCK_LEVEL)
        blocks: dict[int, list[bytes]] = dict(known or {})
        for block in {index >> (BLOCK_LEVEL - level) for level, index in asked if level < BLOCK_LEVEL}:
            if block not in blocks:
                blocks[block] = [leaf for _, leaf in await self._leaves_of_block(block)]

        def source(level: int, index: int) -> bytes:
            if level >= BLOCK_LEVEL:
                found = stored.get((level, index))
                if found is None:
                    raise TransparencyError(f"the stored tree has no node ({level}, {index})")
                return found
            block = index >> (BLOCK_LEVEL - level)
            leaves = blocks[block]
            width = 1 << level
            start = (index << level) - block * BLOCK
            if start + width > len(leaves):
                raise TransparencyError(f"block {block} has {len(leaves)} events, fewer than the tree needs")
            return _block_root(leaves[start : start + width])

        return source

    async def _leaves_of_block(self, block: int) -> list[tuple[int, bytes]]:
        rows = await self.store.query(
            "SELECT idx, first_position, last_position FROM merkle_nodes"
            " WHERE level = $1 AND idx IN ($2, $3)",
            BLOCK_LEVEL,
            block,
            block - 1,
        )
        spans = {int(r[0]): (int(r[1]), int(r[2])) for r in rows}
        if block in spans:
            return await self._block_leaves(*spans[block])
        if block > 0 and block - 1 not in spans:
            raise TransparencyError(f"the stored tree has no block {block - 1}")
        start = spans[block - 1][1] if block > 0 else 0
        return [
            (int(p), event_leaf_hash(int(p), bytes(h)))
            for p, h in await self.store.read_leaf_rows(start, BLOCK)
        ]


def frontier_keys(blocks: int) -> list[tuple[int, int]]:
    """The stored nodes (level, idx) whose subtrees cover the first ``blocks`` blocks, largest first."""
    keys = []
    covered = 0
    for bit in range(blocks.bit_length() - 1, -1, -1):
        if blocks >> bit & 1:
            keys.append((BLOCK_LEVEL + bit, covered >> bit))
            covered += 1 << bit
    return keys


# --- checkpoints -----------------------------------------------------------------------------------------


def checkpoint_dir(settings: Settings) -> Path | None:
    """audit_checkpoint_dir; by default <data_dir>/audit/checkpoints when the data dir holds the embedded
    Postgres (its log and its checkpoints then live and go together), else none: one directory must never
    collect the checkpoints of two logs."""
    if settings.audit_checkpoint_dir == "none":
        return None
    if settings.audit_checkpoint_dir:
        return Path(settings.audit_checkpoint_dir)
    if (settings.data_path / "postgres" / "PG_VERSION").exists():
        return settings.data_path / "audit" / "checkpoints"
    return None


def write_checkpoint_file(directory: Path, checkpoint: SignedCheckpoint, verifier: Verifier) -> None:
    """checkpoint-<size>.txt (the signed note), created once, read-only; and the public key file."""
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / f"key-{verifier.key_id.hex()}.pub"
    if not key_file.exists():
        key_file.write_text(verifier.text() + "\n")
        key_file.chmod(0o444)
    path = directory / f"checkpoint-{checkpoint.body.tree_size:015d}.txt"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    except FileExistsError:
        if path.read_text() != checkpoint.note:
            log.error("checkpoint_file_differs", path=str(path))
        return
    with os.fdopen(fd, "w") as out:
        out.write(checkpoint.note)


def directory_checkpoints(directory: Path) -> list[str]:
    """The signed notes in a checkpoint directory, by tree size."""
    if not directory.is_dir():
        return []
    return [path.read_text() for path in sorted(directory.glob("checkpoint-*.txt"))]


def file_notes(path: Path) -> list[str]:
    """The signed notes of a JSON-lines checkpoint file (lines of the unsigned format are skipped)."""
    if not path.exists():
        return []
    notes = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            note = json.loads(line).get("note")
            if isinstance(note, str):
                notes.append(note)
    return notes


async def publish_key(store: EventStore, verifier: Verifier) -> None:
    await store.execute_many(_INSERT_KEY, [(verifier.text(), verifier.name, verifier.key_id)])


async def stored_notes(store: EventStore) -> list[str]:
    return await store.signed_notes()


async def stored_keys(store: EventStore) -> list[str]:
    return await store.verifier_keys()


async def published_notes(bus: Bus, *, timeout: float = 10.0) -> list[str]:  # noqa: ASYNC109
    """The signed notes in the JetStream checkpoint stream, oldest first (unsigned legacy messages are
    skipped: services/infra/checkpoints.py reads those)."""
    notes = []
    for data in await stream_messages(bus, timeout=timeout):
        text = data.decode(errors="replace")
        if not text.startswith("{"):
            notes.append(text)
    return notes


@dataclass
class Checkpointer:
    """Signs and publishes checkpoints of the log (the auditor holds one)."""

    store: EventStore
    signer: Signer
    bus: Bus | None = None
    directory: Path | None = None
    file: Path | None = None

    def __post_init__(self) -> None:
        self.tree = MerkleLog(self.store)
        self.last: SignedCheckpoint | None = None
        self.key_published = False

    async def checkpoint(self, *, force: bool = False) -> SignedCheckpoint | None:
        """Extend the tree, then sign and publish its head if it grew since the last checkpoint (or, with
        ``force``, even if not). None when there was nothing new."""
        rows = await self.store.query("SELECT note FROM signed_checkpoints ORDER BY tree_size DESC LIMIT 1")
        newest: SignedCheckpoint | None = None
        if rows:
            with contextlib.suppress(NoteError):
                newest = SignedCheckpoint.unchecked(rows[0][0])
        if newest is not None and (self.last is None or newest.body.tree_size > self.last.body.tree_size):
            if self.last is not None:
                # Someone else signed since (`audit redact`, which rebuilt the stored tree over a rewritten
                # log, or `audit checkpoint`): the tree kept in memory may hash the old leaves.
                self.tree = MerkleLog(self.store)
            self.last = newest
        head = await self.tree.extend()
        # An empty log is signed too: from an auditor's first round on, a log always has a checkpoint, so
        # the events that follow are an unsigned tail (bounded by the stale-checkpoint rule), never
        # "no checkpoint anywhere".
        if not force and self.last is not None and self.last.body.tree_size == head.size:
            return None
        body = CheckpointBody(
            origin=self.signer.name,
            tree_size=head.size,
            root_hash=head.root,
            global_position=head.global_position,
            chain_hash=head.chain_hash,
            taken_at=datetime.now(UTC),
        )
        signed = sign_checkpoint(body, self.signer)
        await self.publish(signed)
        self.last = signed
        return signed

    async def publish(self, signed: SignedCheckpoint) -> None:
        verifier = self.signer.verifier
        if not self.key_published:
            await publish_key(self.store, verifier)
            self.key_published = True
        body = signed.body
        await self.store.execute_many(
            _INSERT_CHECKPOINT,
            [
                (
                    body.tree_size,
                    body.global_position,
                    body.root_hash,
                    verifier.name,
                    verifier.key_id,
                    signed.note,
                )
            ],
        )
        if self.directory is not None:
            write_checkpoint_file(self.directory, signed, verifier)
        if self.file is not None:
            with self.file.open("a") as out:
                out.write(json.dumps({"note": signed.note, "verifier_key": verifier.text()}) + "\n")
        if self.bus is not None:
            await ensure_checkpoint_stream(self.bus)
            await self.bus.js.publish(
                checkpoint_subject(self.bus),
                signed.note.encode(),
                stream=checkpoint_stream(self.bus),
                headers={VERIFIER_HEADER: verifier.text()},
            )


def checkpointer_for(store: EventStore, settings: Settings, bus: Bus | None) -> Checkpointer:
    return Checkpointer(
        store,
        load_signer(settings),
        bus=bus,
        directory=checkpoint_dir(settings),
        file=Path(settings.checkpoint_file) if settings.checkpoint_file else None,
    )


async def checkpoint_loop(checkpointer: Checkpointer, settings: Settings, stopping: asyncio.Event) -> None:
    """The auditor's loop: build the tree over what is stored at once (a trail recorded before the tree
    existed gets its first signed checkpoint here), then sign a checkpoint every ``checkpoint_interval``
    seconds when the log moved, or sooner once ``checkpoint_every_events`` events arrived; a last one on
    the way out. A failure is logged and retried at the next tick: checkpoints are evidence, not a
    dependency of the services."""
    if settings.checkpoint_interval <= 0:
        return
    tick = settings.checkpoint_interval
    every = settings.checkpoint_every_events
    poll = min(tick, 1.0) if every > 0 else tick
    waited = tick  # the first round runs at once
    while True:
        # Read before the round: a stop that arrives while a checkpoint is being signed still gets a last
        # one after it, over what was appended meanwhile, so a stopped stack leaves no unsigned tail.
        stopped = stopping.is_set()
        if stopped or waited >= tick or (every > 0 and await _events_since(checkpointer, every) >= every):
            waited = 0.0
            try:
                taken = await checkpointer.checkpoint()
                if taken is not None:
                    log.info(
                        "signed_checkpoint",
                        tree_size=taken.body.tree_size,
                        position=taken.body.global_position,
                        root=base64.b64encode(taken.body.root_hash).decode(),
                    )
            except Exception as error:  # noqa: BLE001 - keep the auditor running; the next tick retries
                log.warning("checkpoint_failed", error=repr(error))
        if stopped:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), poll)
        waited += poll


async def _events_since(checkpointer: Checkpointer, limit: int) -> int:
    """Events stored after the last checkpoint, counted up to ``limit``."""
    last = checkpointer.last
    position = last.body.global_position if last is not None else 0
    rows = await checkpointer.store.query(
        "SELECT count(*) FROM (SELECT 1 FROM events WHERE global_position > $1 LIMIT $2) AS n",
        position,
        limit,
    )
    return int(rows[0][0])


# --- proofs and receipts ---------------------------------------------------------------------------------


async def newest_checkpoint(store: EventStore, trusted: list[Verifier]) -> SignedCheckpoint:
    rows = await store.query("SELECT note FROM signed_checkpoints ORDER BY tree_size DESC LIMIT 1")
    if not rows:
        raise TransparencyError("no signed checkpoint yet: the auditor signs one when it starts")
    try:
        return SignedCheckpoint.open(rows[0][0], trusted)
    except NoteError as error:
        raise TransparencyError(f"the newest signed checkpoint does not verify: {error}") from error


@dataclass(frozen=True)
class InclusionProof:
    global_position: int
    leaf_index: int
    leaf_hash: bytes
    proof: list[bytes]
    checkpoint: SignedCheckpoint


async def prove(
    store: EventStore,
    trusted: list[Verifier],
    *,
    position: int | None = None,
    event_id: uuid.UUID | None = None,
) -> InclusionProof:
    """The inclusion proof of one event (by position or id) in the newest signed checkpoint, checked
    against its signed root before it is returned."""
    if event_id is not None:
        rows = await store.query("SELECT global_position FROM events WHERE event_id = $1", event_id)
        if not rows:
            raise TransparencyError(f"no event {event_id}")
        position = int(rows[0][0])
    assert position is not None
    checkpoint = await newest_checkpoint(store, trusted)
    if position > checkpoint.body.global_position:
        raise TransparencyError(
            f"position {position} is newer than the newest signed checkpoint (tree size"
            f" {checkpoint.body.tree_size}): it is covered by the next one"
        )
    tree = MerkleLog(store)
    index, leaves = await tree.leaf_index(position)
    size = checkpoint.body.tree_size
    if index >= size:
        raise TransparencyError(
            f"position {position} is newer than the newest signed checkpoint (tree size {size}):"
            " it is covered by the next one"
        )
    block = index // BLOCK
    source = await tree.node_source(
        lambda node: inclusion_proof(index, size, node), {block: [leaf for _, leaf in leaves]}
    )
    leaf = leaves[index - block * BLOCK][1]
    proof = inclusion_proof(index, size, source)
    try:
        verify_inclusion(index, size, leaf, proof, checkpoint.body.root_hash)
    except ProofError as error:
        raise TransparencyError(
            f"the stored log does not match the signed checkpoint at position {position}: {error}"
            " (run `rollbook audit verify`)"
        ) from error
    return InclusionProof(position, index, leaf, proof, checkpoint)


async def consistency(store: EventStore, old_size: int, new_size: int) -> list[bytes]:
    """The consistency proof between two tree sizes, from the stored tree."""
    tree = MerkleLog(store)
    source = await tree.node_source(lambda node: consistency_proof(old_size, new_size, node))
    return consistency_proof(old_size, new_size, source)


@dataclass(frozen=True)
class Standing:
    """Where a checkpoint held outside the log (a receipt's, a proof's) stands against the log today."""

    state: str  # current | superseded | unaccounted
    detail: str


async def checkpoint_standing(
    store: EventStore, trusted: list[Verifier], held: SignedCheckpoint, positions: Sequence[int] = ()
) -> Standing:
    """``current`` when the newest signed checkpoint extends ``held`` (a consistency proof from the stored
    tree, checked against both signed roots); ``superseded`` when a redaction record names ``held`` and the
    newest checkpoint proves that record included (``positions``: the held events, to name those it
    rewrote); else ``unaccounted``: the log no longer holds what was signed, and nothing on it says why."""
    newest = await newest_checkpoint(store, trusted)
    old, new = held.body.tree_size, newest.body.tree_size
    if old <= new:
        try:
            proof = await consistency(store, old, new)
            verify_consistency(old, new, held.body.root_hash, newest.body.root_hash, proof)
            # ... and the log as stored still hashes to the held root (not only the signed heads agree).
            tree = MerkleLog(store)
            source = await tree.node_source(lambda node: range_hash(0, old, node))
            if old and range_hash(0, old, source) == held.body.root_hash:
                return Standing(
                    "current",
                    f"the log holds it, and the newest signed checkpoint (tree size {new}) extends it",
                )
        except (ProofError, TransparencyError):
            pass
    root = held.body.root_hash.hex()
    for stored in await store.read_stream(REDACTION_STREAM):
        record = stored.envelope.payload
        if not isinstance(record, TrailRedacted) or record.signed_superseded.get(str(old)) != root:
            continue
        try:
            await prove(store, trusted, position=stored.global_position)
        except TransparencyError:
            continue  # a record the signed log does not hold accounts for nothing
        rewritten = sorted(set(positions) & set(record.positions))
        return Standing(
            "superseded",
            f"superseded by the redaction of {record.redacted_at.isoformat()} under policy {record.policy}"
            f" (position {stored.global_position}, in the newest signed checkpoint, tree size {new}):"
            f" {len(rewritten)} of its events were rewritten"
            + (f" (positions {', '.join(map(str, rewritten[:10]))}{'…' if len(rewritten) > 10 else ''})"
               if rewritten else "")
            + "; export a new receipt for the log as it is now",
        )  # fmt: skip
    return Standing(
        "unaccounted",
        f"the log no longer holds the tree of size {old} this was signed over, and no signed redaction"
        " record names it: the log was rewritten (run `rollbook audit verify`)",
    )


_RECEIPT_ROWS = """
SELECT e.global_position, e.event_id, e.stream, e.stream_version, e.type, e.schema_version, e.occurred_at,
       e.recorded_at, e.causation_id, e.correlation_id, e.payload::text, e.stream_hash,
       (SELECT p.stream_hash FROM events p WHERE p.stream = e.stream AND p.stream_version < e.stream_version
         ORDER BY p.stream_version DESC LIMIT 1)
  FROM events e WHERE e.correlation_id = $1 AND e.global_position <= $2 ORDER BY e.global_position
"""


async def export_receipt(store: EventStore, trusted: list[Verifier], rollout: str) -> dict[str, Any]:
    """The receipt of one rollout (its correlation id): every event of it covered by the newest signed
    checkpoint, with its inclusion proof, the checkpoint and the public key. Checked before returned."""
    checkpoint = await newest_checkpoint(store, trusted)
    size = checkpoint.body.tree_size
    rows = await store.query(_RECEIPT_ROWS, rollout, checkpoint.body.global_position)
    if not rows:
        raise TransparencyError(f"no event of rollout {rollout} is covered by the newest signed checkpoint")
    tree = MerkleLog(store)
    blocks: dict[int, list[bytes]] = {}
    offsets: dict[int, dict[int, int]] = {}
    located: list[tuple[Any, int]] = []
    for row in rows:
        located.append((row, await _locate(tree, int(row[0]), blocks, offsets)))
    indexes = [index for _, index in located]

    def requests(node: Callable[[int, int], bytes]) -> None:
        for index in indexes:
            inclusion_proof(index, size, node)

    source = await tree.node_source(requests, blocks)
    events = []
    for row, index in located:
        (position, event_id, stream, version, type_, schema, occurred, recorded, causation, correlation,
         payload, stream_hash, previous) = row  # fmt: skip
        proof = inclusion_proof(index, size, source)
        leaf = event_leaf_hash(position, bytes(stream_hash))
        try:
            verify_inclusion(index, size, leaf, proof, checkpoint.body.root_hash)
        except ProofError as error:
            raise TransparencyError(
                f"the stored log does not match the signed checkpoint at position {position}: {error}"
            ) from error
        events.append(
            {
                "global_position": position,
                "leaf_index": index,
                "event_id": str(event_id),
                "stream": stream,
                "stream_version": version,
                "type": type_,
                "schema_version": schema,
                "occurred_at_us": micros(occurred),
                "recorded_at_us": micros(recorded),
                "causation_id": "" if causation is None else str(causation),
                "correlation_id": correlation or "",
                "payload": payload,
                "previous_stream_hash": (bytes(previous) if previous is not None else ZERO_HASH).hex(),
                "inclusion_proof": [p.hex() for p in proof],
            }
        )
    assert checkpoint.signer is not None
    return {
        "format": RECEIPT_FORMAT,
        "rollout": rollout,
        "checkpoint": checkpoint.note,
        "public_key": checkpoint.signer.text(),
        "events": events,
    }


async def _locate(
    tree: MerkleLog, position: int, blocks: dict[int, list[bytes]], offsets: dict[int, dict[int, int]]
) -> int:
    """The leaf index of ``position``, remembering each block's leaves (a rollout's events share blocks)."""
    for block, by_position in offsets.items():
        offset = by_position.get(position)
        if offset is not None:
            return block * BLOCK + offset
    index, leaves = await tree.leaf_index(position)
    block = index // BLOCK
    blocks[block] = [leaf for _, leaf in leaves]
    offsets[block] = {p: offset for offset, (p, _) in enumerate(leaves)}
    return index
