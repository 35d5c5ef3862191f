"""The loop every service command runs on (services/cli/runtime.py)."""

from __future__ import annotations

import asyncio
import sys

import msgspec
import pytest

from services.cli.runtime import event_loop_factory, run_command
from services.infra.settings import Settings, SettingsError

# Addresses nothing listens on: with both URLs set no embedded server starts, and migrate=False connects
# to neither.
UNUSED = {"database_url": "postgresql://u@127.0.0.1:1/x", "nats_url": "nats://127.0.0.1:1"}


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_a_command_runs_on_uvloop_where_it_is_installed() -> None:
    """A service's CPU per pod is mostly the event loop's machinery: its body runs on uvloop's loop."""
    import uvloop

    seen: list[asyncio.AbstractEventLoop] = []

    async def body(_: Settings) -> int:
        seen.append(asyncio.get_running_loop())
        return 3

    settings = msgspec.structs.replace(Settings.from_env(), **UNUSED)
    assert run_command(body, settings=settings, migrate=False) == 3
    assert isinstance(seen[0], uvloop.Loop)


def test_without_uvloop_a_command_runs_on_asyncio_s_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert event_loop_factory() is None

    kinds: list[str] = []

    async def body(_: Settings) -> None:
        kinds.append(type(asyncio.get_running_loop()).__module__)

    settings = msgspec.structs.replace(Settings.from_env(), **UNUSED)
    assert run_command(body, settings=settings, migrate=False) == 0
    assert kinds == ["asyncio.unix_events"]


def test_rollbook_event_loop_asyncio_runs_a_command_on_asyncio_s_loop() -> None:
    """The way back to asyncio's loop without uninstalling uvloop: ROLLBOOK_EVENT_LOOP=asyncio."""
    kinds: list[str] = []

    async def body(_: Settings) -> None:
        kinds.append(type(asyncio.get_running_loop()).__module__)

    settings = Settings.from_env({"ROLLBOOK_EVENT_LOOP": "asyncio"})
    assert settings.event_loop == "asyncio"
    assert run_command(body, settings=msgspec.structs.replace(settings, **UNUSED), migrate=False) == 0
    assert kinds == ["asyncio.unix_events"]


def test_an_unknown_event_loop_is_one_clear_error() -> None:
    with pytest.raises(SettingsError, match=r"ROLLBOOK_EVENT_LOOP: expected uvloop or asyncio, got 'trio'"):
        Settings.from_env({"ROLLBOOK_EVENT_LOOP": "trio"})


def test_a_signal_still_cancels_the_body_on_uvloop() -> None:
    """SIGTERM (as `rollbook up` sends its children) cancels the body and the command exits 130."""
    import os
    import signal

    finished: list[str] = []

    async def body(_: Settings) -> None:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            finished.append("cleaned up")
            raise

    settings = msgspec.structs.replace(Settings.from_env(), **UNUSED)
    assert run_command(body, settings=settings, migrate=False) == 130
    assert finished == ["cleaned up"]


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
async def test_the_tests_run_on_the_loop_the_services_run_on() -> None:
    """tests/conftest.py gives pytest-asyncio uvloop's loop: service code tested in-process meets the loop
    it meets in production (the webhook once assumed asyncio's server class and failed only there)."""
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
