"""The Merkle tree over the event log, hashed as RFC 6962 section 2.1 (RFC 9162 section 2.1) says.

Pure: no I/O. The hashes:

    leaf hash      = SHA-256(0x00 || leaf data)
    node hash      = SHA-256(0x01 || left || right)
    MTH({})        = SHA-256() of nothing
    MTH(D[n])      = split at k, the largest power of two smaller than n:
                     node hash(MTH(D[0:k]), MTH(D[k:n]))

rollbook's leaf data for an event is ``global_position`` as 8 big-endian bytes followed by its 32-byte
``stream_hash`` (the hash chain's digest of the event's content and of its stream's history,
migrations/versions/0004_event_hash_chain.py): the leaves are the events in global order, leaf index i is
the (i+1)-th stored event. ``leaf_data`` builds it.

The tree is addressed by perfect subtrees: node (level, index) covers leaves [index * 2**level,
(index + 1) * 2**level). Every hash a proof needs is a perfect subtree hash or combines a few of them
along the right edge of the tree (``range_hash``), so the functions here take a
``NodeSource``: whatever can give perfect subtree hashes (a list of leaves in tests, the stored tree in
services/infra/transparency.py).
Proofs follow RFC 6962 section 2.1.1 (PATH) and 2.1.2 (PROOF/SUBPROOF); verifiers follow RFC 9162
section 2.1.3.2 and 2.1.4.2.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

HASH_SIZE = 32
_LEAF_PREFIX = struct.Struct(">Bq")  # 0x00, then the position as 8 big-endian bytes
LEAF_TAG = b"\x00"  # before a leaf's data (leaf_hash); 0x01 before a node's two hashes
_sha256 = hashlib.sha256
EMPTY_ROOT = hashlib.sha256(b"").digest()

# (level, index) -> the hash of that perfect subtree.
NodeSource = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof that does not verify, or a request no proof can answer (an index beyond the tree)."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def leaf_data(global_position: int, stream_hash: bytes) -> bytes:
    """An event's leaf data: its position (8 bytes, big-endian) and its stored stream hash."""
    return global_position.to_bytes(8, "big", signed=True) + bytes(stream_hash)


def event_leaf_hash(global_position: int, stream_hash: bytes) -> bytes:
    """leaf_hash(leaf_data(global_position, stream_hash)), in one step (the auditor hashes every event)."""
    return _sha256(_LEAF_PREFIX.pack(0, global_position) + stream_hash).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def perfect_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree: a power-of-two number of leaf hashes, paired level by level."""
    level = list(leaf_hashes)
    sha256 = _sha256
    while len(level) > 1:
        # node_hash inlined: `audit verify` hashes about one node per event here.
        pairs = iter(level)
        level = [sha256(b"\x01" + left + right).digest() for left, right in zip(pairs, pairs, strict=True)]
    return level[0]


def frontier_root(frontier: Sequence[tuple[int, bytes]]) -> bytes:
    """MTH of the leaves covered by a compact range's perfect subtrees, largest first."""
    if not frontier:
        return EMPTY_ROOT
    digest = frontier[-1][1]
    for _, left in reversed(frontier[:-1]):
        digest = node_hash(left, digest)
    return digest


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH of the given leaf hashes (the whole tree in memory: tests and small trees)."""
    if not leaf_hashes:
        return EMPTY_ROOT
    return range_hash(0, len(leaf_hashes), leaves_source(leaf_hashes))


def leaves_source(leaf_hashes: Sequence[bytes]) -> NodeSource:
    """A NodeSource computing perfect subtrees from a list of leaf hashes."""

    def node(level: int, index: int) -> bytes:
        if level == 0:
            return leaf_hashes[index]
        return node_hash(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))

    return node


def range_hash(start: int, end: int, node: NodeSource) -> bytes:
    """MTH(D[start:end]) for a range that starts aligned to the largest power of two below its length
    (every range RFC 6962's recursion meets does), from perfect subtree hashes."""
    width = end - start
    if width <= 0:
        raise ProofError(f"empty range [{start}, {end})")
    if width & (width - 1) == 0 and start % width == 0:
        level = width.bit_length() - 1
        return node(level, start >> level)
    k = _split(width)
    return node_hash(range_hash(start, start + k, node), range_hash(start + k, end, node))


def inclusion_proof(index: int, size: int, node: NodeSource) -> list[bytes]:
    """PATH(index, D[size]) of RFC 6962 section 2.1.1, leaf first."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    path: list[bytes] = []
    start, end = 0, size
    # Walk down from the root; the sibling of each step is appended, then reversed (leaf first).
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(range_hash(start + k, end, node))
            end = start + k
        else:
            path.append(range_hash(start, start + k, node))
            start = start + k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, node: NodeSource) -> list[bytes]:
    """PROOF(old_size, D[new_size]) of RFC 6962 section 2.1.2."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"no consistency proof from size {old_size} to {new_size}")
    if old_size == 0 or old_size == new_size:
        return []
    proof: list[bytes] = []
    # SUBPROOF(m, D[start:end], b), iteratively.
    m, start, end, complete = old_size, 0, new_size, True
    while True:
        width = end - start
        if m == width:
            if not complete:
                proof.append(range_hash(start, end, node))
            break
        k = _split(width)
        if m <= k:
            proof.append(range_hash(start + k, end, node))
            end = start + k
        else:
            proof.append(range_hash(start, start + k, node))
            m -= k
            start += k
            complete = False
    proof.reverse()
    return proof


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root the proof leads to (RFC 9162 section 2.1.3.2); ProofError for a malformed proof."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    if len(leaf) != HASH_SIZE or any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("every hash is 32 bytes")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the proof is shorter than the tree is deep")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Raise ProofError unless ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree ``root``."""
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise ProofError(f"the inclusion proof of leaf {index} does not lead to the root of size {size}")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise ProofError unless ``proof`` shows the tree of ``old_size`` is a prefix of ``new_size``
    (RFC 9162 section 2.1.4.2)."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"size {new_size} is smaller than {old_size}: the log did not only grow")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise ProofError(f"two different roots for size {old_size}")
        return
    if old_size == 0:
        if proof:
            raise ProofError("a consistency proof from the empty tree is empty")
        return
    if not proof or any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("malformed consistency proof")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofError(
            f"the consistency proof does not link the tree of size {old_size} to the one of size {new_size}"
        )


@dataclass
class CompactRange:
    """The right frontier of a growing tree: the perfect subtrees covering leaves [0, size), largest
    first, as (level, hash). Appending a leaf merges equal-level subtrees, reporting each perfect node it
    completes to ``on_node(level, index, hash)`` (the stored tree keeps those at and above a level)."""

    size: int = 0
    frontier: list[tuple[int, bytes]] = field(default_factory=list)

    def append(self, leaf: bytes, on_node: Callable[[int, int, bytes], None] | None = None) -> None:
        self.push(0, leaf, on_node)

    def push(
        self, level: int, digest: bytes, on_node: Callable[[int, int, bytes], None] | None = None
    ) -> None:
        """Append a perfect subtree of ``2**level`` leaves (the size must be a multiple of it)."""
        if self.size % (1 << level):
            raise ValueError(f"a subtree of level {level} cannot start at leaf {self.size}")
        frontier = self.frontier
        self.size += 1 << level
        index = (self.size - 1) >> level
        if on_node is not None:
            on_node(level, index, digest)
        while frontier and frontier[-1][0] == level:
            _, left = frontier.pop()
            digest = node_hash(left, digest)
            level += 1
            index >>= 1
            if on_node is not None:
                on_node(level, index, digest)
        frontier.append((level, digest))

    def root(self) -> bytes:
        """MTH of the leaves appended so far."""
        return frontier_root(self.frontier)

    @classmethod
    def of(cls, leaves: Iterable[bytes]) -> CompactRange:
        compact = cls()
        for leaf in leaves:
            compact.append(leaf)
        return compact
