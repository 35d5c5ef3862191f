"""A service whose background task dies stops as a whole: the other loops wind down, the error is
re-raised (non-zero exit), /healthz fails meanwhile, and a shutdown that hangs is cut short."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from services.infra.runtime import FAILED_EXIT_CODE, ServiceRuntime, run_until_stopped
from services.infra.settings import Settings
from tests.plugins.stack import REPO_ROOT


@pytest_asyncio.fixture
async def runtime() -> AsyncIterator[ServiceRuntime]:
    service = ServiceRuntime(Settings(http_host="127.0.0.1", http_port=0), "auditor")
    service.failed_exit_seconds = None  # never os._exit the test process
    async with service:
        yield service


async def health(runtime: ServiceRuntime) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{runtime.port}/healthz") as response:
            return response.status, await response.json()


async def test_a_failed_task_stops_every_loop_fails_health_and_is_raised(runtime: ServiceRuntime) -> None:
    release = asyncio.Event()

    async def relay() -> None:
        await release.wait()
        raise RuntimeError("relay broke")

    async def checkpoints() -> None:  # like the checkpoint loop: ends only when the service stops
        await runtime.stopping.wait()

    relay_task = asyncio.create_task(relay(), name="relay")
    checkpoint_task = asyncio.create_task(checkpoints(), name="checkpoints")
    serving = asyncio.create_task(run_until_stopped(runtime, relay_task))

    status, body = await health(runtime)
    assert (status, body["status"]) == (200, "ok")

    release.set()
    with pytest.raises(RuntimeError, match="relay broke"):
        await serving
    await asyncio.wait_for(checkpoint_task, 5)  # the shutdown reached the loop that waits on `stopping`
    status, body = await health(runtime)
    assert status == 503
    assert body["dead_tasks"] == ["relay: RuntimeError('relay broke')"]


async def test_a_task_that_returns_while_running_counts_as_failed(runtime: ServiceRuntime) -> None:
    async def gives_up() -> None:
        return

    with pytest.raises(RuntimeError, match="consumer ended while the service was running"):
        await run_until_stopped(runtime, asyncio.create_task(gives_up(), name="consumer"))
    assert runtime.stopping.is_set()


async def test_sigterm_stops_cleanly_with_health_ok(runtime: ServiceRuntime) -> None:
    async def work() -> None:
        await runtime.stopping.wait()

    serving = asyncio.create_task(run_until_stopped(runtime, asyncio.create_task(work(), name="work")))
    runtime.request_stop()
    await serving
    status, _ = await health(runtime)
    assert status == 200


def test_a_shutdown_that_hangs_after_a_failure_still_exits_non_zero() -> None:
    script = textwrap.dedent(
        """
        import asyncio
        from services.infra.runtime import ServiceRuntime, run_until_stopped
        from services.infra.settings import Settings

        async def main():
            runtime = ServiceRuntime(Settings(http_host="127.0.0.1"), "auditor")
            runtime.failed_exit_seconds = 0.5
            async with runtime:
                async def broken():
                    raise RuntimeError("boom")
                try:
                    await run_until_stopped(runtime, asyncio.create_task(broken(), name="relay"))
                finally:
                    await asyncio.Event().wait()  # a cleanup that never finishes

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == FAILED_EXIT_CODE, done.stderr.decode()[-2000:]
    assert b"forced_exit" in done.stdout + done.stderr
