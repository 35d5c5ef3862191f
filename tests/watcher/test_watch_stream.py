"""The watcher's watch lines (services/watcher/watch_stream.py): each parsed once into (type, object);
an ERROR event or a bare Status raises the ApiException the watch loop acts on (410 relists, 404 marks an
optional kind not served); a malformed line is a cut stream."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from services.watcher.watch_stream import parse_line

POD = {"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "12", "labels": {"x": "1"}}, "spec": {}}


def line(value: Any) -> bytes:
    return json.dumps(value).encode() + b"\n"


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (line({"type": "ADDED", "object": POD}), ("ADDED", POD)),
        (line({"type": "MODIFIED", "object": POD}), ("MODIFIED", POD)),
        (line({"type": "DELETED", "object": POD}), ("DELETED", POD)),
        (
            line({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "99"}}}),
            ("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99"}}),
        ),
        (b"\n", None),
        (b"  \r\n", None),
    ],
)
def test_a_watch_line_is_its_type_and_object(raw: bytes, parsed: Any) -> None:
    assert parse_line(raw) == parsed


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (
            line(
                {
                    "type": "ERROR",
                    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"},
                }
            ),
            410,
        ),
        (line({"kind": "Status", "code": 404, "reason": "NotFound", "message": "no such kind"}), 404),
        (line({"type": "ERROR", "object": {"kind": "Status"}}), 500),
    ],
)
def test_an_error_in_the_stream_raises_its_status(raw: bytes, status: int) -> None:
    with pytest.raises(ApiException) as raised:
        parse_line(raw)
    assert raised.value.status == status


@pytest.mark.parametrize(
    "raw", [b'{"type": "MODIFIED", "object": {"kind": "Po', b"[1, 2]\n", b'{"type": 3}\n']
)
def test_a_malformed_line_is_a_cut_stream(raw: bytes) -> None:
    with pytest.raises(ConnectionError):
        parse_line(raw)
