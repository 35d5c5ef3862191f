"""Kubernetes' revision hash (``controller/history``) as pure functions: FNV-1 32 of a revision's
canonical JSON, the collision count appended as decimal text, written as SafeEncodeString of the decimal
value. Shared by the planner (revision names), the watcher (the hash of a template's real values, recorded
beside its redacted copy) and the executor (checking a live template against a recorded revision).

FNV-1 is a streaming hash: the 32-bit value after the canonical JSON (``data_fnv``) is enough to finish
the hash for any collision count (``hash_from_fnv``), so a recorder that keeps only that value can name a
revision exactly without keeping the data itself.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery rand.SafeEncodeString's alphabet
_canonical = msgspec.json.Encoder(order="sorted")
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def canonical_json(value: Any) -> bytes:
    return _canonical.encode(value)


def fnv1_32(data: bytes, start: int = _FNV_OFFSET) -> int:
    value = start
    for byte in data:
        value = (value * _FNV_PRIME) & 0xFFFFFFFF
        value ^= byte
    return value


def safe_encode(text: str) -> str:
    return "".join(SAFE_ALPHABET[ord(ch) % len(SAFE_ALPHABET)] for ch in text)


def hash_from_fnv(fnv: int, collision_count: int = 0) -> str:
    """The revision hash of data whose canonical JSON hashes to ``fnv``, salted with a non-zero count."""
    value = fnv1_32(str(collision_count).encode(), fnv) if collision_count else fnv
    return safe_encode(str(value))


@lru_cache(maxsize=1024)
def _fnv_cached(canonical: bytes) -> int:
    return fnv1_32(canonical)


def data_fnv(data: Any) -> int:
    """FNV of the canonical JSON (remembered: the watcher sees the same template at every status write)."""
    return _fnv_cached(canonical_json(data))


def data_hash(data: Any, collision_count: int = 0) -> str:
    """FNV-1 of the canonical JSON of a revision's data, salted with a non-zero collision count."""
    return hash_from_fnv(data_fnv(data), collision_count)


def strip_patch(template: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in template.items() if k != "$patch"}


def revision_data(template: dict[str, Any]) -> dict[str, Any]:
    """A CloneSet revision's data: its pod template, replacing the whole template when applied."""
    return {"spec": {"template": {**strip_patch(template), "$patch": "replace"}}}


def template_fnv(template: dict[str, Any]) -> int:
    """``data_fnv`` of a CloneSet template's revision data: what its revision hash is finished from."""
    return data_fnv(revision_data(template))
