#!/usr/bin/env python3
"""Check a rollbook receipt offline, with nothing of rollbook: Python 3.9+, hashlib and cryptography.

    python3 verify_receipt.py RECEIPT.json [VERIFIER_KEY]

VERIFIER_KEY is the log's public key as published (`rollbook audit public-key`), e.g.
``rollbook+1a2b3c4d+AXyz...``; without it the receipt's own key is used and printed, to compare by hand.
Exit 0 and one OK line, or exit 1 naming what does not hold. docs/audit.md ("Receipts") defines the
format; `rollbook audit verify-receipt` checks the same.
"""

import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class Refused(Exception):
    pass


def parse_verifier_key(text):
    """<name>+<hex key id>+<base64(0x01 || 32-byte Ed25519 key)> -> (name, key id, public key)."""
    name, key_id, encoded = text.strip().split("+", 2)
    raw = base64.b64decode(encoded, validate=True)
    if len(raw) != 33 or raw[0] != 1:
        raise Refused("the verifier key is not an Ed25519 key")
    if hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex() != key_id.lower():
        raise Refused("the verifier key's id does not match it")
    return name, bytes.fromhex(key_id), raw[1:]


def open_checkpoint(note, key):
    """The signed note's text, if the key signed it (C2SP signed-note): origin, size, root, extensions."""
    name, key_id, public = key
    cut = note.rfind("\n\n")
    if cut < 0:
        raise Refused("the checkpoint is not a signed note")
    text = note[: cut + 1]
    for line in note[cut + 2 :].splitlines():
        if not line.startswith("\u2014 "):
            raise Refused("a malformed signature line")
        signer, _, encoded = line[2:].rpartition(" ")
        raw = base64.b64decode(encoded, validate=True)
        if signer == name and raw[:4] == key_id:
            try:
                Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], text.encode())
            except InvalidSignature:
                raise Refused("the checkpoint's signature does not verify") from None
            lines = text.split("\n")
            return int(lines[1]), base64.b64decode(lines[2], validate=True)
    raise Refused(f"the checkpoint is not signed by {name}")


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_proof(index, size, leaf, proof):
    """RFC 9162 section 2.1.3.2."""
    if not 0 <= index < size:
        raise Refused("a leaf index outside the tree")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise Refused("an inclusion proof too long")
        if fn & 1 or fn == sn:
            r = node(p, r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise Refused("an inclusion proof too short")
    return r


def verify(data, key_text=None):
    receipt = json.loads(data)
    if (json.dumps(receipt, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode() != data:
        raise Refused("the file is not the receipt's canonical JSON: it was edited")
    if receipt.get("format") != "rollbook-receipt/1" or set(receipt) != {
        "format",
        "rollout",
        "checkpoint",
        "public_key",
        "events",
    }:
        raise Refused("not a rollbook-receipt/1")
    key = parse_verifier_key(key_text or receipt["public_key"])
    size, root = open_checkpoint(receipt["checkpoint"], key)
    if not receipt["events"]:
        raise Refused("no event")
    for e in receipt["events"]:
        if e["correlation_id"] != receipt["rollout"]:
            raise Refused(f"event {e['event_id']} is not of this rollout")
        # The event's content as the hash chain hashes it: fields joined by U+001F.
        content = "\x1f".join(
            [e["event_id"], e["stream"], str(e["stream_version"]), e["type"], str(e["schema_version"]),
             str(e["occurred_at_us"]), str(e["recorded_at_us"]), e["causation_id"], e["correlation_id"],
             e["payload"]]
        ).encode()  # fmt: skip
        stream_hash = hashlib.sha256(bytes.fromhex(e["previous_stream_hash"]) + content).digest()
        leaf = hashlib.sha256(
            b"\x00" + e["global_position"].to_bytes(8, "big", signed=True) + stream_hash
        ).digest()
        proof = [bytes.fromhex(p) for p in e["inclusion_proof"]]
        if root_from_proof(e["leaf_index"], size, leaf, proof) != root:
            raise Refused(f"event at position {e['global_position']} is not in the signed log")
    return receipt, size, key


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as f:
            data = f.read()
        receipt, size, key = verify(data, argv[2] if len(argv) == 3 else None)
    except (Refused, ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError) as error:
        print(f"REFUSED: {error}", file=sys.stderr)
        return 1
    signer = receipt["public_key"] if len(argv) == 2 else argv[2]
    print(
        f"OK: {len(receipt['events'])} events of {receipt['rollout']} in a log of {size}, signed by {signer}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
