"""``rollbook audit verify``: recompute the hash chain of the whole log from its raw columns and compare it
with the stored hashes and with checkpoints kept outside the database (docs/replay.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.infra.store import EventStore
from services.model.events import TrailRedacted
from services.model.hashchain import ChainVerifier, Checkpoint, Finding

REDACTION_STREAM = "Audit//redaction"


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

    @property
    def clean(self) -> bool:
        return not self.findings


async def audit_log(
    store: EventStore, checkpoints: list[tuple[str, Checkpoint]] | None = None, *, batch_size: int = 5000
) -> AuditReport:
    """Verify every row's stream and global chain hashes, then every checkpoint given as (source, cp)."""
    given = checkpoints or []
    verifier = ChainVerifier(wanted_positions={cp.global_position for _, cp in given})
    async for rows in store.read_chain_batches(0, batch_size):
        feed = verifier.feed
        for row in rows:
            feed(*row)
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
        redactions=[
            f"redacted {r.redacted_at.isoformat()} under policy {r.policy}: {len(r.positions)} events"
            f" rewritten, log re-chained up to position {r.head}"
            f" ({r.chain_before[:16]}… -> {r.chain_after[:16]}…)"
            for r in redactions
        ],
        accepted=accepted,
    )


def _redaction_naming(redactions: list[TrailRedacted], checkpoint: Checkpoint) -> TrailRedacted | None:
    """The redaction whose record names this checkpoint's position with exactly this hash, if any."""
    for record in redactions:
        if record.checkpoints_before.get(str(checkpoint.global_position)) == checkpoint.chain_hash:
            return record
        if record.head == checkpoint.global_position and record.chain_before == checkpoint.chain_hash:
            return record
    return None
