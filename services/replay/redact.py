"""``rollbook audit redact``: rewrite the values a trail recorded before redaction (or under a narrower
deny-list) under the current policy, re-chain the log, and record what was done (docs/replay.md,
"Redacting a trail").

1. Every event is read in global order and its payload redacted (``redacted_payload``): observations as the
   watcher now records them (with the real template's hash values beside the redacted template), revisions
   with the real data's FNV, every other payload wherever containers, annotations or labels appear.
2. Every planned workload is verified on the rewritten events (``Resealer``): a round whose input changed
   gets the ``input_sha256`` of its rewritten input; any other difference aborts the whole command before
   anything is written, so ``rollbook verify`` is as exact after it as before.
3. ``rollbook audit verify`` of the trail as it is must find nothing: a redaction accounts for what it
   rewrites, never for an edit made before it.
4. ``rechain`` rewrites the payloads and recomputes every stream and global chain hash in one transaction,
   with the append-only guard disabled for that transaction only (the owner's credential is needed), and
   drops the stored Merkle tree.
5. A ``TrailRedacted`` event records when, which policy, which positions, the chain hashes before and
   after (also at every checkpoint position), the tree head before and every signed checkpoint the rewrite
   supersedes. The tree is built again over the rewritten log and a checkpoint of it signed with the
   auditor's key, covering the record. ``rollbook audit verify`` accepts a checkpoint that predates the
   rewrite only when a record covered by a later valid signed checkpoint names that exact hash or root, and
   names the redaction (as Certificate Transparency would: the rewrite is on the log, never silent)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from services.infra.rechain import HeadMoved, rewrite_payloads
from services.infra.store import EventStore
from services.kinds import registry
from services.model import rounds
from services.model.events import (
    EVENT_TYPES,
    REDACTION_STREAM,
    Envelope,
    ObjectObserved,
    RevisionCreated,
    RoundPlanned,
    TrailRedacted,
    new_event,
)
from services.model.redaction import MARK, RedactionPolicy
from services.model.revision_hash import data_fnv, template_fnv
from services.model.signed_note import NoteError, SignedCheckpoint
from services.planner.kinds import CLONESET, SIDECARSET, KindPlanner
from services.replay.audit import AuditReport
from services.replay.verify import Divergence, WorkloadVerifier


class RedactionAborted(Exception):
    """The rewritten trail would not verify: nothing was written."""


def redacted_payload(policy: RedactionPolicy, envelope: Envelope) -> dict[str, Any]:
    """The payload as the current policy records it (a builtins dict)."""
    payload = envelope.payload
    data: dict[str, Any] = msgspec.to_builtins(payload)
    if isinstance(payload, ObjectObserved):
        recorded = policy.redact_object(payload.kind, dict(payload.object))
        data["object"] = recorded if recorded is not None else {"metadata": {"name": payload.name}}
        return data
    if isinstance(payload, RevisionCreated):
        obj = dict(payload.object)
        mark = obj.get(MARK) if isinstance(obj.get(MARK), dict) else None
        result = policy.redact_value(data)
        if obj and mark is None:
            if registry.kind_of_stream(envelope.stream) is registry.SIDECARSET:
                if isinstance(obj.get("data"), dict):
                    result["object"][MARK] = {"dataFnv": data_fnv(obj["data"])}
            else:
                template = ((obj.get("data") or {}).get("spec") or {}).get("template")
                if isinstance(template, dict):
                    result["object"][MARK] = {"templateFnv": template_fnv(template)}
        return result  # type: ignore[no-any-return]
    return policy.redact_value(data)  # type: ignore[no-any-return]


def _with_payload(envelope: Envelope, data: dict[str, Any]) -> Envelope:
    payload = msgspec.convert(data, type=EVENT_TYPES[envelope.type])
    return msgspec.structs.replace(envelope, payload=payload)  # type: ignore[arg-type]


class Resealer(WorkloadVerifier):
    """Verifies a workload's rewritten events; a round whose only difference is its input digest (its
    input was redacted) takes the replayed digest (``resealed``: event id -> digest)."""

    def __init__(self, kind: KindPlanner[Any], key: str) -> None:
        super().__init__(kind, key)
        self.resealed: dict[uuid.UUID, str] = {}

    def _open_round(self, recorded_round: Envelope, payload: RoundPlanned) -> None:
        super()._open_round(recorded_round, payload)
        divergence = self.report.divergence
        if divergence is None or divergence.field != "payload.input_sha256":
            return
        digest = str(divergence.replayed)
        self.report.divergence = None
        self.resealed[recorded_round.event_id] = digest
        resealed = msgspec.structs.replace(payload, input_sha256=digest)
        recorded = msgspec.structs.replace(
            recorded_round, payload=rounds.with_round(recorded_round.payload, resealed)
        )
        super()._open_round(recorded, resealed)
        if self._recorded:
            self._recorded[0] = recorded


@dataclass
class RedactionPlan:
    policy: str
    changed: dict[int, Envelope] = field(default_factory=dict)  # position -> rewritten envelope
    events: int = 0
    rounds_resealed: int = 0
    workloads: int = 0


def plan_redaction(policy: RedactionPolicy, stored: Sequence[tuple[int, Envelope]]) -> RedactionPlan:
    """What the rewrite changes (pure): raises RedactionAborted naming the first divergence when a planned
    workload would not verify on the rewritten events."""
    plan = RedactionPlan(policy.policy_id, events=len(stored))
    rewritten: list[tuple[int, Envelope]] = []
    for position, envelope in stored:
        if isinstance(envelope.payload, TrailRedacted):
            rewritten.append((position, envelope))
            continue
        data = redacted_payload(policy, envelope)
        new = _with_payload(envelope, data)
        if new != envelope:
            plan.changed[position] = new
        rewritten.append((position, new))
    verifiers: dict[tuple[int, str], Resealer] = {}
    kinds: tuple[KindPlanner[Any], ...] = (CLONESET, SIDECARSET)
    for _, envelope in rewritten:
        for rank, kind in enumerate(kinds):
            key = kind.workload_of(envelope.stream)
            if key is None:
                continue
            verifier = verifiers.get((rank, key))
            if verifier is None:
                verifier = verifiers[(rank, key)] = Resealer(kind, key)
            verifier.feed(envelope)
            break
    by_id = {envelope.event_id: (position, envelope) for position, envelope in rewritten}
    for verifier in verifiers.values():
        report = verifier.finish()
        if report.divergence is not None:
            raise RedactionAborted(_describe(report.divergence))
        for event_id, digest in verifier.resealed.items():
            position, envelope = by_id[event_id]
            planned = rounds.round_of(envelope.payload)
            assert planned is not None
            resealed = msgspec.structs.replace(planned, input_sha256=digest)
            payload = rounds.with_round(envelope.payload, resealed)
            plan.changed[position] = msgspec.structs.replace(envelope, payload=payload)
            plan.rounds_resealed += 1
    plan.workloads = len(verifiers)
    return plan


def _describe(divergence: Divergence) -> str:
    return f"the rewritten trail would not verify ({divergence.describe()}); nothing was written"


@dataclass
class RedactionResult:
    plan: RedactionPlan
    record: TrailRedacted | None  # None: nothing to rewrite
    checkpoint: SignedCheckpoint | None = None  # signed over the rewritten log and the record


# Findings that do not stop a redaction: a trail recorded before signed checkpoints has none, and the
# newest checkpoint lagging is mended by the one the redaction signs.
_TOLERATED = {"no-checkpoint", "stale-checkpoint"}


async def redact_trail(
    store: EventStore,
    owner_url: str,
    policy: RedactionPolicy,
    *,
    audit: Callable[[], Awaitable[AuditReport]],
    tree_head: Callable[[], Awaitable[tuple[int, bytes]]],
    sign: Callable[[], Awaitable[SignedCheckpoint | None]],
) -> RedactionResult:
    """Rewrite the trail under ``policy`` (see the module docstring). ``owner_url``: the owner's database
    URL; ``store``: the writer's (it appends the record). ``audit`` is `rollbook audit verify` of the trail
    as it is, which must find nothing before anything is rewritten: a redaction accounts for what it
    changes, never for an earlier edit. ``tree_head``: the Merkle tree's size and root over the stored log;
    ``sign`` builds the tree again over the rewritten log and signs a checkpoint of it with the auditor's
    key (services/infra/transparency.py, wired by the CLI: replay code reaches no bus)."""
    stored: list[tuple[int, Envelope]] = []
    async for batch in store.read_all_batches(0, 1000):
        stored.extend((s.global_position, s.envelope) for s in batch)
    plan = plan_redaction(policy, stored)
    if not plan.changed:
        return RedactionResult(plan, None)
    report = await audit()
    blocking = [f for f in report.findings if f.kind not in _TOLERATED]
    if blocking:
        raise RedactionAborted(
            f"`rollbook audit verify` finds {len(blocking)} problem(s) in the trail as it is (first:"
            f" {blocking[0].describe()}); a redaction would hide them, so nothing was written"
        )
    size_before, root_before = await tree_head()
    first = min(plan.changed)
    superseded: dict[str, str] = {}
    for note in await store.signed_notes():
        try:
            signed = SignedCheckpoint.unchecked(note)
        except NoteError:
            continue  # the audit above found every stored note valid; an unreadable one names nothing
        if signed.body.global_position >= first:
            superseded[str(signed.body.tree_size)] = signed.body.root_hash.hex()
    payloads = {p: msgspec.json.encode(e.payload).decode() for p, e in plan.changed.items()}
    try:
        rechained = await rewrite_payloads(owner_url, stored[-1][0], payloads)
    except HeadMoved:
        raise RedactionAborted(
            "events were appended while the trail was read: stop the services and run it again"
        ) from None
    record = TrailRedacted(
        policy=plan.policy,
        redacted_at=datetime.now(UTC),
        positions=sorted(plan.changed),
        rounds_resealed=plan.rounds_resealed,
        head=rechained.head,
        chain_before=rechained.chain_before.hex(),
        chain_after=rechained.chain_after.hex(),
        checkpoints_before={str(p): h.hex() for p, h in sorted(rechained.checkpoints_before.items())},
        tree_size_before=size_before,
        root_before=root_before.hex(),
        signed_superseded=superseded,
    )
    version = await store.stream_version(REDACTION_STREAM)
    await store.append(
        [
            new_event(
                record, stream=REDACTION_STREAM, stream_version=version + 1, occurred_at=record.redacted_at
            )
        ],
        expected_version=version,
    )
    # The tree over the rewritten log (and the record), and a checkpoint of it signed now: the record is
    # covered by it, which is what lets `audit verify` accept the checkpoints it supersedes.
    return RedactionResult(plan, record, await sign())
