"""The watcher's watch lines (services/watcher/watch_stream.py): each parsed once into (type, object);
an ERROR event or a bare Status raises the ApiException the watch loop acts on (410 relists, 404 marks an
optional kind not served); a malformed line is a cut stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from services.watcher.watch_stream import parse_line, watch_events

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


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class _Response:
    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None


async def test_watch_lines_are_split_across_chunks_whatever_their_size() -> None:
    """A line cut anywhere by the network, several lines in one chunk, and an object larger than aiohttp's
    readline limit (4 MiB; Kubernetes can be configured to store such objects) all arrive whole."""
    big = {"metadata": {"name": "big", "resourceVersion": "3"}, "data": {"x": "y" * (5 * 1024 * 1024)}}
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}},
        {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "2"}}},
        {"type": "MODIFIED", "object": big},
    ]
    stream = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    chunks = [stream[:7], stream[7:130], stream[130:131]]
    chunks += [stream[i : i + 65536] for i in range(131, len(stream), 65536)]

    async def list_func(**_: Any) -> _Response:
        return _Response(chunks)

    seen = [event async for event in watch_events(list_func, resource_version="0", timeout_seconds=60)]
    assert seen == [(line["type"], line["object"]) for line in lines]
