"""`audit verify` recomputes the tree in 256-leaf blocks while it walks the log: its roots at the
checkpoints' sizes and its consistency proofs between them agree with the whole tree computed leaf by
leaf (services/model/merkle.py), across block edges, also when the log is read in ranges cut anywhere
(a block's root from the range that holds it whole, leaves where a range starts or ends inside one)."""

from __future__ import annotations

import hashlib

import pytest

from services.model.hashchain import ChainRow, ChainVerifier
from services.model.merkle import consistency_proof, event_leaf_hash, root_of, verify_consistency
from services.replay.audit import BLOCK_LEVEL, _RangeLeaves, _Recomputed


def verifier_leaves(rows: list[ChainRow]) -> list[bytes]:
    """The leaf hashes ChainVerifier.feed_rows makes beside the chain check (what `audit verify` feeds)."""
    leaves: list[bytes] = []
    ChainVerifier().feed_rows(rows, leaves)
    return leaves


@pytest.mark.parametrize("leaves_made", ["by the tree", "by the verifier"])
@pytest.mark.parametrize(
    "cuts",
    [[], [256, 512], [100, 1000, 2049], [255, 257, 2048], [1, 2999]],
    ids=["one read", "at block edges", "inside blocks", "beside block edges", "one row ranges"],
)
def test_roots_and_consistency_proofs_across_block_edges(cuts: list[int], leaves_made: str) -> None:
    n = 3000
    hashes = [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(n)]
    rows: list[ChainRow] = [
        (i + 1, digest, digest, b"s", i + 1, b"%d\x1fs\x1f%d\x1ftype" % (i, i + 1))
        for i, digest in enumerate(hashes)
    ]
    sizes = sorted({1, 2, 255, 256, 257, 511, 512, 1000, 2048, 2049, n})
    recomputed = _Recomputed(
        set(sizes), {b for s in sizes for b in ((s - 1) >> BLOCK_LEVEL, s >> BLOCK_LEVEL)}
    )
    for start, end in zip([0, *cuts], [*cuts, n], strict=True):
        if not cuts:
            for batch in range(0, n, 300):
                rows_read = rows[batch : batch + 300]
                made = verifier_leaves(rows_read) if leaves_made == "by the verifier" else None
                recomputed.feed_rows(rows_read, made)
            continue
        part = _RangeLeaves(start, recomputed.wanted_blocks)
        for batch in range(start, end, 300):
            rows_read = rows[batch : min(batch + 300, end)]
            part.feed_rows(
                rows_read, verifier_leaves(rows_read) if leaves_made == "by the verifier" else None
            )
        part.finish()
        assert part.size == end
        recomputed.feed_part(part.items)
    recomputed.finish()
    leaves = [event_leaf_hash(i + 1, digest) for i, digest in enumerate(hashes)]
    assert verifier_leaves(rows) == leaves
    assert recomputed.size == n
    for size in sizes:
        root, position, chain = recomputed.at_size[size]
        assert (root, position, chain) == (root_of(leaves[:size]), size, hashes[size - 1])
    for old, new in zip(sizes, sizes[1:], strict=False):
        proof = consistency_proof(old, new, recomputed.source)
        verify_consistency(old, new, root_of(leaves[:old]), root_of(leaves[:new]), proof)
