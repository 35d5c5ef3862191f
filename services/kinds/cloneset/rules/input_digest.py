"""The CloneSet decision input's canonical JSON and SHA-256 (``RoundPlanned.input_sha256``), built from
per-object encodings kept across rounds.

``rounds.encode_input`` encodes the whole ``PlanInput`` every round: at 5,000 pods that is most of the
cost of a recorded round's hash, though a round follows only the few pods observed changing since the
last one. The state replaces a pod's object when it folds a new observation of it and never changes one
in place, so an object's encoding is reused for as long as the same object (identity) is in the input.
The bytes are exactly ``rounds.encode_input``'s (tests/kinds/cloneset/test_input_digest.py checks it), so the
recorded hashes, and verify's comparison with them, do not change.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from services.kinds.cloneset.rules.model import PlanInput

_canonical = msgspec.json.Encoder(order="sorted")

# ``PlanInput``'s fields in the order the sorted encoding writes them (by JSON name); the assembly below
# writes them in this order, so a new field must be added there too (the import-time check says so).
_FIELDS = ("cloneSet", "now", "pods", "pvcs", "revisions")
assert tuple(sorted(PlanInput.__struct_encode_fields__)) == _FIELDS, "update PlanInputDigest.encode"


class PlanInputDigest:
    """Encodes ``PlanInput`` as ``rounds.encode_input`` does, re-encoding only the pods and PVCs whose
    object changed since the last call (the CloneSet, its revisions and ``now`` are few and encoded each
    time). Keeps the encodings of the last call's objects only."""

    __slots__ = ("_encoded",)

    def __init__(self) -> None:
        # id(object) -> (the object, its canonical JSON); the entry holds the object, so its id is not
        # reused by another object while the entry exists, and the identity check rules out the rest.
        self._encoded: dict[int, tuple[dict[str, Any], bytes]] = {}

    def encode(self, plan_input: PlanInput) -> bytes:
        previous = self._encoded
        current: dict[int, tuple[dict[str, Any], bytes]] = {}
        encode = _canonical.encode

        def objects(items: list[dict[str, Any]]) -> bytes:
            parts = []
            for obj in items:
                key = id(obj)
                entry = previous.get(key)
                if entry is None or entry[0] is not obj:
                    entry = (obj, encode(obj))
                current[key] = entry
                parts.append(entry[1])
            return b",".join(parts)

        data = b"".join(
            (
                b'{"cloneSet":',
                encode(plan_input.clone_set),
                b',"now":',
                encode(plan_input.now),
                b',"pods":[',
                objects(plan_input.pods),
                b'],"pvcs":[',
                objects(plan_input.pvcs),
                b'],"revisions":',
                encode(plan_input.revisions),
                b"}",
            )
        )
        self._encoded = current
        return data

    def sha256(self, plan_input: PlanInput) -> str:
        return hashlib.sha256(self.encode(plan_input)).hexdigest()
