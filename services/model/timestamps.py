"""Kubernetes timestamps (RFC 3339, "Z" for UTC) read into datetimes: one reading for every layer."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def parse_kube_time(value: Any) -> datetime | None:
    """``value`` as an aware datetime; None when absent or malformed (a recorded object is read as it is,
    never refused for a bad timestamp)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
