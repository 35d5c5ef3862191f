"""One watch request of the watcher and its events, each line parsed once into plain dicts.

kubernetes-asyncio's ``Watch`` parses every line with ``json``, then serialises the object again and
parses it a second time to "deserialize" it (even when asked for a plain object), and builds an
``ApiClient`` (an SSL context) for every watch: about a third of the watcher's CPU per watch event.
Here each line is decoded once by msgspec into ``(type, object)``; the request is the same list call
(``watch=True``, raw content) on the same client.

- A non-2xx answer raises the ``ApiException`` a preloaded call would (``kube.raw_json``): 404 for a kind
  not served, 410 for a resourceVersion too old.
- An ``ERROR`` event raises ``ApiException`` with the Status's code (410 Gone mid-stream relists).
- A malformed line raises ``ConnectionError``: the stream is treated as cut and reconnected.
- An object nested deeper than ``max_depth`` (or too deep for the decoder: RecursionError) comes as a
  ``TooDeep`` dict: the object cut below that depth (services/model/jsondepth.py), enough to say which
  object it is, for the watcher to record ``ObservationRejected`` and go on.
- The server ending the watch (its ``timeoutSeconds``) ends the iteration.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.model.jsondepth import depth, list_items, object_depth_over, pruned

DEFAULT_MAX_DEPTH = 200

WATCH_READ_GRACE_SECONDS = 30  # beyond the watch's own timeout, before a silent connection counts as dead


class WatchLine(msgspec.Struct):
    """One line of a watch: an event, or (from some servers) a bare Status."""

    type: str = ""
    object: dict[str, Any] = {}
    code: int | None = None  # a bare Status
    reason: str = ""
    message: str = ""


_decoder = msgspec.json.Decoder(WatchLine)


class TooDeep(dict[str, Any]):
    """An object nested deeper than the watcher records, cut below that depth; ``depth`` is how deep
    the whole object nests."""

    def __init__(self, cut: dict[str, Any], depth: int, size: int) -> None:
        super().__init__(cut)
        self.depth = depth
        self.size = size


def bounded(data: bytes, value: dict[str, Any] | None, max_depth: int) -> dict[str, Any] | TooDeep:
    """The object decoded from ``data`` (``value``; None when the decoder gave up on its depth), or a
    ``TooDeep`` of it when it nests deeper than ``max_depth``."""
    if value is not None and not object_depth_over(data, value, max_depth):
        return value
    cut = msgspec.json.decode(pruned(data, max_depth + 1))
    return TooDeep(cut if isinstance(cut, dict) else {}, depth(data), len(data))


class ListShape(msgspec.Struct):
    """A list answer with its items left as bytes, each decoded (and bounded) on its own: one item too
    deep for the decoder must not make the whole list unreadable."""

    apiVersion: str = "v1"
    metadata: dict[str, Any] = {}
    items: list[msgspec.Raw] | None = None


_list_decoder = msgspec.json.Decoder(ListShape)
_item_decoder = msgspec.json.Decoder(dict[str, Any])


def parse_list(
    data: bytes, max_depth: int = DEFAULT_MAX_DEPTH
) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """(apiVersion, metadata, items) of a list answer; an item nested deeper than ``max_depth`` comes as
    a ``TooDeep``."""
    try:
        listing = _list_decoder.decode(data)
    except RecursionError:  # an item too deep for the decoder: read the list without its items
        listing = _list_decoder.decode(pruned(data, 2))
        return listing.apiVersion, listing.metadata, [_item(item, max_depth) for item, _ in list_items(data)]
    return listing.apiVersion, listing.metadata, [_item(bytes(raw), max_depth) for raw in listing.items or []]


def _item(item: bytes, max_depth: int) -> dict[str, Any]:
    try:
        value: dict[str, Any] | None = _item_decoder.decode(item)
    except RecursionError:
        value = None
    return bounded(item, value, max_depth)


def parse_line(line: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[str, dict[str, Any]] | None:
    """``(type, object)`` of one watch line; None for a blank line. Raises as the module docstring says."""
    if not line.strip():
        return None
    try:
        event = _decoder.decode(line)
    except RecursionError:
        event = _decoder.decode(pruned(line, max_depth + 2))  # the line is one level above its object
        event.object = TooDeep(event.object, depth(line) - 1, len(line))
    except msgspec.DecodeError as error:  # ValidationError included
        raise ConnectionError(f"malformed watch event: {error}") from error
    else:
        if object_depth_over(line, event.object, max_depth):
            event.object = TooDeep(
                msgspec.json.decode(pruned(line, max_depth + 2), type=WatchLine).object,
                depth(line) - 1,
                len(line),
            )
    if event.type == "ERROR":
        status = event.object
        raise ApiException(
            status=int(status.get("code") or 500), reason=f"{status.get('reason')}: {status.get('message')}"
        )
    if not event.type:
        raise ApiException(status=event.code or 500, reason=f"{event.reason}: {event.message}")
    return event.type, event.object


async def watch_events(
    list_func: Callable[..., Awaitable[Any]],
    *,
    resource_version: str | None,
    timeout_seconds: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """The events of one watch from ``resource_version`` (bookmarks requested) until the server ends it.
    Close it (``aclose``) when leaving early: that releases the connection."""
    response = await list_func(
        watch=True,
        resource_version=resource_version,
        timeout_seconds=timeout_seconds,
        allow_watch_bookmarks=True,
        _preload_content=False,
        # The server ends the watch after timeout_seconds and sends bookmarks meanwhile: a read silent for
        # longer is a half-open connection, ended here instead of waited on forever.
        _request_timeout=aiohttp.ClientTimeout(sock_read=timeout_seconds + WATCH_READ_GRACE_SECONDS),
    )
    async with response:
        if not 200 <= response.status <= 299:
            await kube.raw_json(response)  # raises the ApiException of this status
        # Lines split here, not with readline(): aiohttp refuses a line over twice its read buffer
        # (4 MiB), and an object up to the event ceiling must reach the watcher to be observed or rejected.
        pending = bytearray()
        async for chunk in response.content.iter_any():
            scanned = len(pending)
            pending += chunk
            start = 0
            while (end := pending.find(b"\n", max(start, scanned))) >= 0:
                event = parse_line(bytes(pending[start:end]), max_depth)
                start = end + 1
                if event is not None:
                    yield event
            del pending[:start]
        if pending.strip():
            event = parse_line(bytes(pending), max_depth)
            if event is not None:
                yield event
