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

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube


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
    )
    async with response:
        if not 200 <= response.status <= 299:
            await kube.raw_json(response)  # raises the ApiException of this status
        while True:
            line = await response.content.readline()
            if not line:
                return
            event = parse_line(line)
            if event is not None:
                yield event
