"""The depth checks a hostile document meets before any recursive decoder: exact on brackets inside
strings and escapes (an attacker hiding depth behind them), any depth measured without recursion, and
a too-deep watch line read as which object it is."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.model.jsondepth import decoded_depth_over, depth, depth_over, pruned
from services.watcher.watch_stream import TooDeep, parse_line, parse_list

json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\a'), inner, max_size=3)
    ),
    max_leaves=30,
)


def reference_depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((reference_depth(v) for v in value), default=0)
    return 0


@given(json_values)
def test_depth_is_exact_whatever_the_strings_hold(value: object) -> None:
    data = msgspec.json.encode(value)
    assert depth(data) == reference_depth(value)
    assert (
        decoded_depth_over(value, reference_depth(value)) is False if isinstance(value, dict | list) else True
    )
    if isinstance(value, dict | list) and reference_depth(value) > 1:
        assert decoded_depth_over(value, reference_depth(value) - 1)
        cut = msgspec.json.decode(pruned(data, 1))
        assert reference_depth(cut) == 1


@pytest.mark.usefixtures("services_recursion_limit")
def test_ten_thousand_levels_are_measured_and_cut() -> None:
    data = b'{"metadata":{"name":"x"},"spec":' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    assert depth(data) == 10_001 and depth_over(data, 200) == 10_001
    assert msgspec.json.decode(pruned(data, 3)) == {"metadata": {"name": "x"}, "spec": [[None]]}
    with pytest.raises(RecursionError):
        msgspec.json.decode(data)  # what the watcher met before


@pytest.mark.parametrize("levels", [250, 1_100, 10_000])
def test_a_too_deep_watch_line_is_read_as_which_object_it_is(levels: int) -> None:
    obj = (
        b'{"metadata":{"name":"deep","uid":"u1","resourceVersion":"7"},"spec":'
        + b"[" * levels
        + b"]" * levels
    )
    line = b'{"type":"MODIFIED","object":' + obj + b"}}"
    parsed = parse_line(line, max_depth=200)
    assert parsed is not None
    change, found = parsed
    assert change == "MODIFIED" and isinstance(found, TooDeep)
    assert found["metadata"] == {"name": "deep", "uid": "u1", "resourceVersion": "7"}
    assert found.depth == levels + 1
    listing = (
        b'{"apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":['
        + obj
        + b'},{"metadata":{"name":"ok"}}]}'
    )
    api_version, metadata, items = parse_list(listing, max_depth=200)
    assert metadata == {"resourceVersion": "9"}
    assert isinstance(items[0], TooDeep) and items[0].depth == levels + 1
    assert items[1] == {"metadata": {"name": "ok"}} and not isinstance(items[1], TooDeep)


def test_an_object_at_the_limit_is_not_too_deep() -> None:
    line = b'{"type":"ADDED","object":{"a":' + b"[" * 199 + b"]" * 199 + b"}}"
    parsed = parse_line(line, max_depth=200)
    assert parsed is not None and not isinstance(parsed[1], TooDeep)
    parsed = parse_line(line.replace(b"[" * 199, b"[" * 200).replace(b"]" * 199, b"]" * 200), max_depth=200)
    assert parsed is not None and isinstance(parsed[1], TooDeep)
