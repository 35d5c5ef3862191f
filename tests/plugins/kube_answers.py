"""Answers of the Kubernetes API as kubernetes-asyncio hands them to the watcher, for tests that give the
watcher's list calls their own answer."""

from __future__ import annotations

import json
from typing import Any


class Listing:
    """A list answer as kubernetes-asyncio hands it over with ``_preload_content=False``."""

    status, reason, headers = 200, "OK", {}

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.body = json.dumps({"apiVersion": "v1", "metadata": {"resourceVersion": "99"}, "items": items})

    async def __aenter__(self) -> Listing:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def read(self) -> bytes:
        return self.body.encode()
