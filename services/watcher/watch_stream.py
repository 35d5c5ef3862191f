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
- The server ending the watch (its ``timeoutSeconds``) ends the iteration.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube

WATCH_READ_GRACE_SECONDS = 30  # beyond the watch's own timeout, before a silent connection counts as dead


class WatchLine(msgspec.Struct):
    """One line of a watch: an event, or (from some servers) a bare Status."""

    type: str = ""
    object: dict[str, Any] = {}
    code: int | None = None  # a bare Status
    reason: str = ""
    message: str = ""


_decoder = msgspec.json.Decoder(WatchLine)


def parse_line(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """``(type, object)`` of one watch line; None for a blank line. Raises as the module docstring says."""
    if not line.strip():
        return None
    try:
        event = _decoder.decode(line)
    except msgspec.DecodeError as error:  # ValidationError included
        raise ConnectionError(f"malformed watch event: {error}") from error
    if event.type == "ERROR":
        status = event.object
        raise ApiException(
            status=int(status.get("code") or 500), reason=f"{status.get('reason')}: {status.get('message')}"
        )
    if not event.type:
        raise ApiException(status=event.code or 500, reason=f"{event.reason}: {event.message}")
    return event.type, event.object


async def watch_events(
    list_func: Callable[..., Awaitable[Any]], *, resource_version: str | None, timeout_seconds: int
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
                event = parse_line(bytes(pending[start:end]))
                start = end + 1
                if event is not None:
                    yield event
            del pending[:start]
        if pending.strip():
            event = parse_line(bytes(pending))
            if event is not None:
                yield event
