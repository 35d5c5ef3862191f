"""The Merkle tree against the RFC 6962 test vectors published with the reference implementations
(transparency-dev/merkle, proof/verify_test.go and rfc6962/rfc6962_test.go; the same values as
certificate-transparency-go's merkle tests): eight leaves, the roots of every prefix, inclusion and
consistency proofs; and every tampered proof refused."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.model.merkle import (
    EMPTY_ROOT,
    CompactRange,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    leaves_source,
    node_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)

h = bytes.fromhex

LEAVES = [h(""), h("00"), h("10"), h("2021"), h("3031"), h("40414243"), h("5051525354555657"),
          h("606162636465666768696a6b6c6d6e6f")]  # fmt: skip
ROOTS = [  # MTH of the first 1..8 leaves
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
INCLUSION = [  # (leaf index, tree size, proof)
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (0, 1, []),
]  # fmt: skip
CONSISTENCY = [  # (old size, new size, proof)
    (1, 1, []),
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 7, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]  # fmt: skip


def flip(proof: list[bytes], at: int, bit: int) -> list[bytes]:
    """The proof with one bit of one hash flipped."""
    return [bytes([p[0] ^ bit]) + p[1:] if i == at else p for i, p in enumerate(proof)]


HASHED = [leaf_hash(leaf) for leaf in LEAVES]
SOURCE = leaves_source(HASHED)


def test_the_hashes_of_rfc_6962() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    assert leaf_hash(b"L123456").hex() == "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


def test_roots_of_every_prefix() -> None:
    for size, want in enumerate(ROOTS, start=1):
        assert root_of(HASHED[:size]).hex() == want
        assert CompactRange.of(HASHED[:size]).root().hex() == want
    assert root_of([]) == EMPTY_ROOT == CompactRange().root()


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_proofs(index: int, size: int, proof: list[str]) -> None:
    made = inclusion_proof(index, size, leaves_source(HASHED[:size]))
    assert [p.hex() for p in made] == proof
    root = h(ROOTS[size - 1])
    verify_inclusion(index, size, HASHED[index], made, root)
    tampered = [
        (index + 1, size, HASHED[index], made, root),
        (index, size * 2, HASHED[index], made, root),
        (index, size, leaf_hash(b"WrongLeaf"), made, root),
        (index, size, HASHED[index], made, EMPTY_ROOT),
        (index, size, HASHED[index], [*made, root], root),
        (index, size, HASHED[index], [root, *made], root),
        (index, size, HASHED[index], made[:-1], root),
    ] + [(index, size, HASHED[index], flip(made, i, 8), root) for i in range(len(made))]
    for args in tampered:
        if args[0] < args[1] and (args[0], args[1], args[2], list(args[3]), args[4]) != (
            index, size, HASHED[index], made, root
        ):  # fmt: skip
            with pytest.raises(ProofError):
                verify_inclusion(*args)


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_proofs(old: int, new: int, proof: list[str]) -> None:
    made = consistency_proof(old, new, leaves_source(HASHED[:new]))
    assert [p.hex() for p in made] == proof
    old_root, new_root = h(ROOTS[old - 1]), h(ROOTS[new - 1])
    verify_consistency(old, new, old_root, new_root, made)
    if not made:
        return
    for args in [
        (old - 1, new, old_root, new_root, made),
        (old + 1, new, old_root, new_root, made),
        (old, new * 2, old_root, new_root, made),
        (old, new, new_root, old_root, made),
        (old, new, old_root, leaf_hash(b"x"), made),
        (old, new, old_root, new_root, []),
        (old, new, old_root, new_root, made[:-1]),
        (old, new, old_root, new_root, [*made, old_root]),
        (old, new, old_root, new_root, [new_root, *made]),
        *[(old, new, old_root, new_root, flip(made, i, 16)) for i in range(len(made))],
    ]:  # fmt: skip
        with pytest.raises(ProofError):
            verify_consistency(*args)


def test_a_log_that_shrank_is_not_consistent() -> None:
    with pytest.raises(ProofError, match="did not only grow"):
        verify_consistency(5, 3, h(ROOTS[4]), h(ROOTS[2]), [])
    with pytest.raises(ProofError, match="two different roots"):
        verify_consistency(3, 3, h(ROOTS[2]), h(ROOTS[3]), [])


@given(st.integers(min_value=1, max_value=300), st.data())
def test_proofs_from_larger_trees_verify(size: int, data: st.DataObject) -> None:
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(size)]
    source = leaves_source(leaves)
    compact = CompactRange()
    nodes: dict[tuple[int, int], bytes] = {}
    for leaf in leaves:
        compact.append(leaf, lambda level, index, digest: nodes.__setitem__((level, index), digest))
    root = compact.root()
    assert root == root_of(leaves)
    assert all(source(level, index) == digest for (level, index), digest in nodes.items())
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    verify_inclusion(index, size, leaves[index], inclusion_proof(index, size, source), root)
    old = data.draw(st.integers(min_value=0, max_value=size))
    verify_consistency(old, size, root_of(leaves[:old]), root, consistency_proof(old, size, source))


def test_an_events_leaf_is_its_position_and_stream_hash() -> None:
    from services.model.merkle import event_leaf_hash, leaf_data

    stream_hash = hashlib.sha256(b"content").digest()
    for position in (1, 255, 2**40 + 3):
        data = leaf_data(position, stream_hash)
        assert data == position.to_bytes(8, "big") + stream_hash
        assert event_leaf_hash(position, stream_hash) == leaf_hash(data)
