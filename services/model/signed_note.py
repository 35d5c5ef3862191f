"""Signed checkpoints of the event log: C2SP signed-note and tlog-checkpoint, Ed25519 keys.

Pure (no I/O; ``cryptography`` for Ed25519). The formats, as the C2SP specifications and Go's
golang.org/x/mod/sumdb/note define them, so any tool of that ecosystem reads them:

    key name        non-empty UTF-8, no whitespace, no "+"
    key id          SHA-256(key name || 0x0A || 0x01 || public key)[:4]
    verifier key    <key name>+<hex(key id)>+<base64(0x01 || public key)>        (the public key, shared)
    signer key      PRIVATE+KEY+<key name>+<hex(key id)>+<base64(0x01 || seed)>  (the private key file)
    signed note     text (ends with a newline), a blank line, then one line per signature:
                    "— <key name> <base64(key id || Ed25519 signature of the text)>" (U+2014, a space)
    checkpoint text <origin>\\n<tree size>\\n<base64(root hash)>\\n, then extension lines

rollbook's extension lines (covered by the signature): ``rollbook-position <global position of the
last leaf>``, ``rollbook-chain <hex chain_hash at that position>``, ``rollbook-time <UTC time taken>``.
The origin is the key name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM_ED25519 = 0x01
DASH = "\u2014 "


class NoteError(ValueError):
    """A malformed key, note or checkpoint, or a signature that does not verify."""


class UntrustedKey(NoteError):
    """A well-formed note that no trusted key signed."""


def _check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")
    return name


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALGORITHM_ED25519]) + public).digest()[:4]


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise NoteError(f"{what} is not base64") from error


@dataclass(frozen=True)
class Verifier:
    """A public key with its name: what a verifier trusts."""

    name: str
    public: bytes  # 32 bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public)

    def text(self) -> str:
        encoded = base64.b64encode(bytes([ALGORITHM_ED25519]) + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        parts = text.strip().split("+", 2)  # base64 may hold "+" too
        if len(parts) != 3:
            raise NoteError("a verifier key is <name>+<hex key id>+<base64 key>")
        name, hex_id, encoded = parts
        raw = _b64decode(encoded, "the verifier key")
        if len(raw) != 33 or raw[0] != ALGORITHM_ED25519:
            raise NoteError("the verifier key is not an Ed25519 key")
        verifier = cls(_check_name(name), raw[1:])
        if verifier.key_id.hex() != hex_id.lower():
            raise NoteError("the verifier key's id does not match its name and key")
        return verifier

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class Signer:
    """A private key with its name (the auditor's; never stored in the database)."""

    name: str
    seed: bytes  # 32 bytes

    @classmethod
    def generate(cls, name: str) -> Signer:
        from cryptography.hazmat.primitives import serialization

        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return cls(_check_name(name), seed)

    @property
    def verifier(self) -> Verifier:
        from cryptography.hazmat.primitives import serialization

        public = (
            Ed25519PrivateKey.from_private_bytes(self.seed)
            .public_key()
            .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        return Verifier(self.name, public)

    def text(self) -> str:
        encoded = base64.b64encode(bytes([ALGORITHM_ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> Signer:
        parts = text.strip().split("+", 4)  # base64 may hold "+" too
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signer key is PRIVATE+KEY+<name>+<hex key id>+<base64 key>")
        _, _, name, hex_id, encoded = parts
        raw = _b64decode(encoded, "the signer key")
        if len(raw) != 33 or raw[0] != ALGORITHM_ED25519:
            raise NoteError("the signer key is not an Ed25519 key")
        signer = cls(_check_name(name), raw[1:])
        if signer.verifier.key_id.hex() != hex_id.lower():
            raise NoteError("the signer key's id does not match its name and key")
        return signer

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: bytes
    signature: bytes


def sign_note(text: str, signers: list[Signer]) -> str:
    """The signed note: ``text`` (ending with a newline, no blank line), a blank line, a line per signer."""
    if not text.endswith("\n") or "\n\n" in text:
        raise NoteError("a note's text ends with a newline and has no blank line")
    lines = []
    for signer in signers:
        raw = signer.verifier.key_id + signer.sign(text.encode())
        lines.append(f"{DASH}{signer.name} {base64.b64encode(raw).decode()}\n")
    return text + "\n" + "".join(lines)


def split_note(note: str) -> tuple[str, list[Signature]]:
    """The text and the signature lines of a signed note (signatures not checked)."""
    cut = note.rfind("\n\n")
    if cut < 0 or not note.endswith("\n"):
        raise NoteError("a signed note is text, a blank line, then signature lines")
    text, block = note[: cut + 1], note[cut + 2 :]
    signatures = []
    for line in block.splitlines():
        if not line.startswith(DASH):
            raise NoteError(f"not a signature line: {line[:40]!r}")
        name, _, encoded = line[len(DASH) :].rpartition(" ")
        raw = _b64decode(encoded, "a signature")
        if len(raw) != 4 + 64:
            raise NoteError("an Ed25519 signature line holds 4 + 64 bytes")
        signatures.append(Signature(_check_name(name), raw[:4], raw[4:]))
    if not signatures:
        raise NoteError("the note has no signature")
    return text, signatures


def open_note(note: str, trusted: list[Verifier]) -> tuple[str, Verifier]:
    """The note's text and the trusted key that signed it. NoteError when no trusted key signed it, or
    when a signature of a trusted key does not verify (a known key's bad signature rejects the note)."""
    text, signatures = split_note(note)
    by_id = {(v.name, v.key_id): v for v in trusted}
    good: Verifier | None = None
    for signature in signatures:
        verifier = by_id.get((signature.name, signature.key_id))
        if verifier is None:
            continue
        if not verifier.verify(text.encode(), signature.signature):
            raise NoteError(f"the signature by {verifier.name} ({verifier.key_id.hex()}) does not verify")
        good = good or verifier
    if good is None:
        names = ", ".join(f"{s.name} ({s.key_id.hex()})" for s in signatures)
        raise UntrustedKey(f"signed by {names}: no trusted key")
    return text, good


@dataclass(frozen=True)
class CheckpointBody:
    """The text of a signed checkpoint: the tree head and where it stands in the log."""

    origin: str
    tree_size: int
    root_hash: bytes
    global_position: int  # of the last leaf (0 for the empty tree)
    chain_hash: bytes  # the hash chain at that position (32 zero bytes for the empty tree)
    taken_at: datetime

    def text(self) -> str:
        return (
            f"{_check_name(self.origin)}\n{self.tree_size}\n{base64.b64encode(self.root_hash).decode()}\n"
            f"rollbook-position {self.global_position}\n"
            f"rollbook-chain {self.chain_hash.hex()}\n"
            f"rollbook-time {self.taken_at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}\n"
        )

    @classmethod
    def parse(cls, text: str) -> CheckpointBody:
        lines = text.split("\n")
        if len(lines) < 7 or lines[-1] != "":
            raise NoteError("a rollbook checkpoint has origin, size, root and three rollbook- lines")
        origin, size, root = lines[0], lines[1], lines[2]
        extensions = dict(line.partition(" ")[::2] for line in lines[3:-1])
        if not size.isascii() or not size.isdigit() or (size != "0" and size.startswith("0")):
            raise NoteError(f"tree size {size!r} is not a decimal number")
        try:
            position = int(extensions["rollbook-position"])
            chain = bytes.fromhex(extensions["rollbook-chain"])
            taken = datetime.strptime(extensions["rollbook-time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=UTC
            )
        except (KeyError, ValueError) as error:
            raise NoteError(f"bad rollbook extension line: {error}") from error
        root_hash = _b64decode(root, "the root hash")
        if len(root_hash) != 32 or len(chain) != 32:
            raise NoteError("the root and chain hashes are 32 bytes")
        return cls(_check_name(origin), int(size), root_hash, position, chain, taken)


@dataclass(frozen=True)
class SignedCheckpoint:
    body: CheckpointBody
    note: str  # the signed note, as published
    signer: Verifier | None  # the trusted key whose signature verified; None when not checked

    @classmethod
    def open(cls, note: str, trusted: list[Verifier]) -> SignedCheckpoint:
        text, signer = open_note(note, trusted)
        return cls(CheckpointBody.parse(text), note, signer)

    @classmethod
    def unchecked(cls, note: str) -> SignedCheckpoint:
        text, _ = split_note(note)
        return cls(CheckpointBody.parse(text), note, None)


def sign_checkpoint(body: CheckpointBody, signer: Signer) -> SignedCheckpoint:
    if body.origin != signer.name:
        raise NoteError(f"origin {body.origin!r} differs from the key name {signer.name!r}")
    return SignedCheckpoint(body, sign_note(body.text(), [signer]), signer.verifier)
