"""The bus forgets: rollbook's stream keeps events for ROLLBOOK_BUS_MAX_AGE seconds and at most
ROLLBOOK_BUS_MAX_BYTES (docs/bus.md, "Retention"), set on creation and brought up to date on an existing
stream; the dedup window never exceeds the age limit (JetStream refuses that)."""

from __future__ import annotations

import uuid

import msgspec
import nats.js.errors
import pytest

from services.infra.bus import Bus
from services.infra.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _config(settings: Settings) -> tuple[float | None, int | None, float | None]:
    bus = await Bus.connect(settings, name="rollbook-test-retention")
    try:
        await bus.ensure_stream()
        info = await bus.js.stream_info(settings.stream_name)
        return info.config.max_age, info.config.max_bytes, info.config.duplicate_window
    finally:
        await bus.close()


async def _delete(settings: Settings) -> None:
    bus = await Bus.connect(settings, name="rollbook-test-retention")
    try:
        await bus.js.delete_stream(settings.stream_name)
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await bus.close()


async def test_the_stream_keeps_events_for_the_configured_age_and_size(settings: Settings) -> None:
    suffix = uuid.uuid4().hex[:10]
    own = msgspec.structs.replace(settings, stream_name=f"RBRET_{suffix}", subject_prefix=f"rbret{suffix}")
    try:
        assert await _config(own) == (7 * 24 * 3600.0, 1024**3, 600.0)  # the defaults
        tighter = msgspec.structs.replace(own, bus_max_age=60.0, bus_max_bytes=10 * 1024 * 1024)
        assert await _config(tighter) == (60.0, 10 * 1024 * 1024, 60.0)  # updated; dedup window capped
        unlimited = msgspec.structs.replace(own, bus_max_age=0.0, bus_max_bytes=-1)
        age, size, window = await _config(unlimited)
        assert (age or 0.0, size if size is not None else -1, window) == (0.0, -1, 600.0)
    finally:
        await _delete(own)
