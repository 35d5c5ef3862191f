"""What every service process shares: structured logs, the health/readiness/metrics HTTP server, and a clean
shutdown on SIGTERM.

Usage inside a service's ``run(settings)``::

    async with ServiceRuntime(settings, "planner") as runtime:
        ...start work...
        runtime.set_ready()
        await runtime.stopping.wait()      # SIGTERM/SIGINT sets it
        ...stop consuming, finish in-flight work...

``/healthz`` answers 200 while the process's loop runs and every task the service needs (the ones given
to ``run_until_stopped``) is alive, 503 naming the dead task otherwise, so a liveness probe restarts a
process that lost a part of itself; ``/readyz`` answers 200 once ``set_ready`` was called and until
shutdown begins (503 otherwise, with the reason); ``/metrics`` is prometheus-client's text format. Extra
routes (the auditor's history) are added with ``runtime.app.router`` before entering.

A task that ends with an error stops the whole service: ``run_until_stopped`` begins the shutdown (so
every loop waiting on ``stopping`` winds down) and re-raises, and the process exits non-zero for its
supervisor to restart. Should that shutdown itself hang, the process exits anyway after
``FAILED_EXIT_SECONDS``: a live process with a dead part is the one state not allowed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from services.infra.metrics import TASK_FAILURES
from services.infra.settings import Settings

# Each service's HTTP port is settings.http_port + its offset, so `rollbook up` can run all four with one
# base port; http_port 0 lets the OS pick (the chosen port is logged as "http_listening").
PORT_OFFSETS = {"watcher": 0, "planner": 1, "executor": 2, "auditor": 3}
# After a needed task died, seconds the clean shutdown may take before the process exits regardless.
FAILED_EXIT_SECONDS = 30.0
FAILED_EXIT_CODE = 70  # EX_SOFTWARE
# Tracked containers allocated (net of those freed) between young collections, instead of Python's 700.
YOUNG_COLLECTION_THRESHOLD = 10_000


def calm_cyclic_collector() -> None:
    """Keep the cyclic garbage collector off the work of a process that decodes a JSON document per
    message into plain dicts and lists (every service: a pod per watch event, an event per bus message; a
    pod is ~100 containers). None of them is in a cycle, so reference counting frees them all, yet at
    Python's default threshold (700) they set off a young collection every few messages and, as they are
    promoted, full collections over the whole heap (the imported modules alone are over 100,000 objects):
    the largest share of the watcher's CPU per watch event. Call once, after the imports: what exists now
    moves to the permanent generation (``gc.freeze``: never scanned again, still freed by reference
    counting), and a young collection waits for ``YOUNG_COLLECTION_THRESHOLD`` net allocations. Real
    cycles (exception tracebacks) are still collected, just later."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


def logged_port(log_path: Path, start: int = 0) -> int | None:
    """The port a service process reported in its ``http_listening`` log line, reading its JSON-lines log
    from byte ``start`` (the file's size before the process started); None until it has. Starting
    services on port 0 and reading the port back avoids the race of picking a free port for a child
    process, which another process can take before the child binds it."""
    try:
        with log_path.open("rb") as log_file:
            log_file.seek(start)
            for line in log_file:
                if b'"http_listening"' not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("event") == "http_listening":
                    return int(record["port"])
    except FileNotFoundError:
        return None
    return None


def configure_logging(settings: Settings, service: str) -> None:
    """JSON lines on stderr; every line carries the service name and whatever is bound in contextvars
    (the rollout's correlation_id while handling one of its events)."""
    level = getattr(logging, settings.log_level.upper(), logging.INFO)
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s", force=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service, pid=os.getpid())


class ServiceRuntime:
    """Health/ready/metrics server plus the stop signal of one service process."""

    def __init__(self, settings: Settings, service: str) -> None:
        self.settings = settings
        self.service = service
        self.stopping = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self.port: int | None = None
        self._ready = False
        self._not_ready_reason = "starting"
        self._runner: web.AppRunner | None = None
        self._details: dict[str, Callable[[], Any]] = {}
        self._needed: list[asyncio.Task[Any]] = []
        self.failed_task: str | None = None  # "name: error" of the needed task that died, if one did
        self.failed_exit_seconds: float | None = FAILED_EXIT_SECONDS  # None: never force the exit
        self.log = structlog.get_logger(service)

    def add_detail(self, name: str, value: Callable[[], Any]) -> None:
        """Report ``value()`` under ``details.<name>`` in every /readyz answer (e.g. degraded parts)."""
        self._details[name] = value

    def need(self, *tasks: asyncio.Task[Any]) -> None:
        """The service cannot work without these tasks: /healthz fails once one of them has ended
        while the service is not stopping."""
        self._needed.extend(tasks)

    def dead_tasks(self) -> list[str]:
        """Needed tasks that have ended although the service is not stopping (with their error)."""
        if self.stopping.is_set() and self.failed_task is None:
            return []
        dead = []
        for task in self._needed:
            if not task.done():
                continue
            error = None if task.cancelled() else task.exception()
            if error is None and self.stopping.is_set():
                continue  # it ended because we stop
            dead.append(f"{task.get_name()}: {'cancelled' if error is None else repr(error)}")
        return dead

    def task_failed(self, task: asyncio.Task[Any], error: BaseException) -> None:
        """A needed task ended with ``error``: record it, count it, begin the shutdown, and make sure
        the process does not outlive its shutdown by more than ``failed_exit_seconds``."""
        name = task.get_name()
        TASK_FAILURES.labels(name).inc()
        self.failed_task = f"{name}: {error!r}"
        self.log.error("task_failed", task=name, error=repr(error))
        self.request_stop(f"task {name} failed")
        if self.failed_exit_seconds is not None:
            asyncio.get_running_loop().call_later(self.failed_exit_seconds, self._exit_now, name)

    def _exit_now(self, task: str) -> None:
        self.log.error("forced_exit", task=task, after_seconds=self.failed_exit_seconds)
        os._exit(FAILED_EXIT_CODE)

    def set_ready(self, ready: bool = True, reason: str = "") -> None:
        self._ready = ready
        self._not_ready_reason = reason

    def request_stop(self, reason: str = "signal") -> None:
        """Begin the clean shutdown: readiness 503, then every loop waiting on ``stopping`` winds down."""
        if not self.stopping.is_set():
            self.log.info("stopping", reason=reason)
            self.set_ready(False, "shutting down" if reason == "signal" else f"shutting down: {reason}")
            self.stopping.set()

    async def __aenter__(self) -> ServiceRuntime:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        base = self.settings.http_port
        port = base + PORT_OFFSETS.get(self.service, 0) if base else 0
        site = web.TCPSite(self._runner, self.settings.http_host, port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the bound port, when 0 asked for a free one
        self.log.info("http_listening", host=self.settings.http_host, port=self.port)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if self._runner is not None:
            await self._runner.cleanup()
        self.log.info("stopped")

    async def _healthz(self, request: web.Request) -> web.Response:
        dead = self.dead_tasks()
        if dead:
            body = {"status": "failing", "service": self.service, "dead_tasks": dead}
            return web.json_response(body, status=503)
        return web.json_response({"status": "ok", "service": self.service})

    async def _readyz(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"status": "ready", "service": self.service}
        if not self._ready:
            body.update(status="not ready", reason=self._not_ready_reason)
        if self._details:
            body["details"] = {name: value() for name, value in self._details.items()}
        return web.json_response(body, status=200 if self._ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def run_until_stopped(runtime: ServiceRuntime, *tasks: asyncio.Task[Any]) -> None:
    """Wait for SIGTERM or for any task to end (a crash of one part stops the service: let the supervisor
    restart it rather than run half a service). A task that failed begins the shutdown of every other
    loop (``runtime.stopping``) and its error is re-raised, so the process exits non-zero."""
    runtime.need(*tasks)
    stop_wait = asyncio.create_task(runtime.stopping.wait())
    done, _ = await asyncio.wait([stop_wait, *tasks], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    for task in done:
        if task is stop_wait:
            continue
        error = task.exception() if not task.cancelled() else asyncio.CancelledError(f"{task.get_name()}")
        if error is None and not runtime.stopping.is_set():
            error = RuntimeError(f"task {task.get_name()} ended while the service was running")
        if error is not None:
            runtime.task_failed(task, error)
            runtime.set_ready(False, f"task {task.get_name()} failed")
            raise error
    if not runtime.stopping.is_set():
        runtime.request_stop()
