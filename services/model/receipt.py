"""Checking a rollout's receipt offline: its events, their inclusion proofs, the signed checkpoint and the
public key (docs/audit.md, "Receipts"). Pure: the receipt's bytes in, a result or ReceiptError out.

The receipt is JSON, written in one canonical form (``canonical_json``); one refused in any other form, so
no byte of it can change unnoticed. Each event's content is hashed as the hash chain does
(services/model/hashchain.py), its stream hash from the previous one the receipt gives, its leaf from its
position and stream hash (services/model/merkle.py), and its inclusion proof must lead to the signed root.
docs/verify_receipt.py does the same with hashlib and cryptography alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from services.model.merkle import ProofError, event_leaf_hash, verify_inclusion
from services.model.signed_note import NoteError, SignedCheckpoint, Verifier

RECEIPT_FORMAT = "rollbook-receipt/1"
_EVENT_FIELDS = {
    "global_position": int,
    "leaf_index": int,
    "event_id": str,
    "stream": str,
    "stream_version": int,
    "type": str,
    "schema_version": int,
    "occurred_at_us": int,
    "recorded_at_us": int,
    "causation_id": str,
    "correlation_id": str,
    "payload": str,
    "previous_stream_hash": str,
    "inclusion_proof": list,
}
_FIELDS = {"format", "rollout", "checkpoint", "public_key", "events"}


class ReceiptError(ValueError):
    """The receipt does not prove what it claims: named."""


def canonical_json(receipt: dict[str, Any]) -> bytes:
    return (json.dumps(receipt, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()


def content_bytes(event: dict[str, Any]) -> bytes:
    """The hash chain's content of one receipt event (migrations/versions/0004_event_hash_chain.py)."""
    return "\x1f".join(
        (
            event["event_id"],
            event["stream"],
            str(event["stream_version"]),
            event["type"],
            str(event["schema_version"]),
            str(event["occurred_at_us"]),
            str(event["recorded_at_us"]),
            event["causation_id"],
            event["correlation_id"],
            event["payload"],
        )
    ).encode()


@dataclass(frozen=True)
class ReceiptResult:
    rollout: str
    events: int
    tree_size: int
    global_position: int
    signer: Verifier
    pinned: bool  # the key was given by the caller, not only taken from the receipt


def verify_receipt(data: bytes, trusted: list[Verifier] | None = None) -> ReceiptResult:
    """Check a receipt; ``trusted`` are the keys to accept (None: the receipt's own, reported unpinned)."""
    import hashlib

    try:
        receipt = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise ReceiptError(f"not JSON: {error}") from error
    if not isinstance(receipt, dict) or set(receipt) != _FIELDS:
        raise ReceiptError(f"a receipt has exactly the fields {sorted(_FIELDS)}")
    if receipt["format"] != RECEIPT_FORMAT:
        raise ReceiptError(f"format {receipt['format']!r} is not {RECEIPT_FORMAT}")
    if canonical_json(receipt) != data:
        raise ReceiptError("the file is not the receipt's canonical JSON: it was edited")
    try:
        own = Verifier.parse(receipt["public_key"])
        checkpoint = SignedCheckpoint.open(receipt["checkpoint"], trusted if trusted is not None else [own])
    except NoteError as error:
        raise ReceiptError(f"the checkpoint: {error}") from error
    root, size = checkpoint.body.root_hash, checkpoint.body.tree_size
    events = receipt["events"]
    if not isinstance(events, list) or not events:
        raise ReceiptError("the receipt holds no event")
    for event in events:
        if not isinstance(event, dict) or set(event) != set(_EVENT_FIELDS):
            raise ReceiptError(f"an event has exactly the fields {sorted(_EVENT_FIELDS)}")
        for name, kind in _EVENT_FIELDS.items():
            if not isinstance(event[name], kind) or (kind is int and isinstance(event[name], bool)):
                raise ReceiptError(f"event field {name} is not a {kind.__name__}")
        where = f"event at position {event['global_position']} ({event['event_id']})"
        if event["correlation_id"] != receipt["rollout"]:
            raise ReceiptError(f"{where} belongs to {event['correlation_id']!r}, not this rollout")
        try:
            previous = bytes.fromhex(event["previous_stream_hash"])
            proof = [bytes.fromhex(p) for p in event["inclusion_proof"]]
        except (ValueError, TypeError) as error:
            raise ReceiptError(f"{where}: a hash is not hex") from error
        stream_hash = hashlib.sha256(previous + content_bytes(event)).digest()
        try:
            verify_inclusion(
                event["leaf_index"], size, event_leaf_hash(event["global_position"], stream_hash), proof, root
            )
        except (ProofError, OverflowError) as error:
            raise ReceiptError(f"{where} is not in the signed log: {error}") from error
    return ReceiptResult(
        rollout=receipt["rollout"],
        events=len(events),
        tree_size=size,
        global_position=checkpoint.body.global_position,
        signer=own if trusted is None else checkpoint.signer or own,
        pinned=trusted is not None,
    )
