"""``rollbook audit verify``: recompute the hash chain of the whole log from its raw columns and compare it
with the stored hashes and with checkpoints kept outside the database (docs/replay.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.infra.store import EventStore
from services.model.hashchain import ChainVerifier, Checkpoint, Finding


@dataclass
class AuditReport:
    rows: int
    head: int
    checkpoints_checked: int
    findings: list[Finding] = field(default_factory=list)

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
    for source, checkpoint in given:
        verifier.check_checkpoint(checkpoint.global_position, bytes.fromhex(checkpoint.chain_hash), source)
    return AuditReport(
        rows=verifier.rows,
        head=verifier.last_position,
        checkpoints_checked=len(given),
        findings=verifier.findings,
    )
