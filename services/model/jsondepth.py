"""How deeply a JSON document nests (levels of objects and arrays), read from its bytes without decoding
it, and the document cut to a depth: what lets a reader refuse an object nested deeper than its decoder
can take (msgspec and the json module both raise RecursionError near Python's recursion limit, about a
thousand levels, where kube-apiserver stores up to 10,000) and still read who it is. Pure functions."""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

# A JSON string (escapes included) or one bracket: the only tokens that matter to depth.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")


def depth(data: bytes) -> int:
    """The deepest nesting in ``data`` (``{}`` is 1, ``{"a": [1]}`` is 2, a scalar 0). Brackets inside
    strings do not count. Malformed input gives a number, never an error."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(0, max(accumulate(_STEP[b] for b in brackets)))


def decoded_depth_over(value: Any, limit: int) -> bool:
    """Whether a decoded document (dicts and lists) nests deeper than ``limit``; stops at the first
    level beyond it. Iterative: any depth is safe to measure."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if level + 1 > limit:
                    return True
                if child:
                    stack.append((child, level + 1))
    return False


def object_depth_over(data: bytes, value: Any, limit: int) -> bool:
    """``decoded_depth_over(value, limit)`` for ``value`` decoded from ``data``, skipped when ``data``
    has no more opening brackets than ``limit`` (it cannot nest deeper): most documents."""
    if data.count(b"{") + data.count(b"[") <= limit:
        return False
    return (isinstance(value, dict | list) and limit < 1) or decoded_depth_over(value, limit)


def depth_over(data: bytes, limit: int) -> int | None:
    """``depth(data)`` when it is over ``limit``, else None. Cheap for most documents: fewer brackets
    than the limit in all cannot nest deeper than it."""
    if data.count(b"{") + data.count(b"[") <= limit:
        return None
    found = depth(data)
    return found if found > limit else None


def pruned(data: bytes, limit: int) -> bytes:
    """``data`` with every object or array that opens below level ``limit`` replaced by ``null``: a
    document any decoder takes, keeping what the upper levels say (an object's kind and metadata)."""
    pieces: list[bytes] = []
    current = 0
    kept_from = 0
    cut_at: int | None = None
    for token in _TOKENS.finditer(data):
        first = data[token.start()]
        if first in _OPEN:
            current += 1
            if current > limit and cut_at is None:
                cut_at = token.start()
        elif first in _CLOSE:
            current -= 1
            if cut_at is not None and current < limit + 1:
                pieces.append(data[kept_from:cut_at])
                pieces.append(b"null")
                kept_from = token.end()
                cut_at = None
    if cut_at is not None:  # unbalanced: cut to the end
        pieces.append(data[kept_from:cut_at])
        pieces.append(b"null")
        return b"".join(pieces)
    pieces.append(data[kept_from:])
    return b"".join(pieces)


def list_items(data: bytes) -> list[tuple[bytes, int]]:
    """The objects of the top-level ``items`` array of a Kubernetes list answer, each as its bytes and
    its depth, found without decoding anything (for a list an item of which nests too deep to decode)."""
    found: list[tuple[bytes, int]] = []
    level = 0
    last_key = b""
    in_items = False
    start = deepest = 0
    for token in _TOKENS.finditer(data):
        first = data[token.start()]
        if first in _OPEN:
            level += 1
            if level == 2 and first == ord("[") and last_key == b'"items"':
                in_items = True
            elif level == 3 and in_items:
                start, deepest = token.start(), 1
            elif level > 3 and in_items:
                deepest = max(deepest, level - 2)
        elif first in _CLOSE:
            if level == 3 and in_items:
                found.append((data[start : token.end()], deepest))
            elif level == 2:
                in_items = False
            level -= 1
        elif level == 1:
            last_key = token.group()
    return found
