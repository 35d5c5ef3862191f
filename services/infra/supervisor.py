"""The one supervisor of rollbook's service processes: `rollbook up`, `rollbook demo` and the test stack run
the services through it (docs/services.md, "Running the services").

Each service is a child process (`python -m services.cli.main <service>`) with the settings in its
environment, logging JSON lines to ``<log_dir>/<name>.log``. Its HTTP port (health, readiness, metrics) is
chosen by the OS unless ``ROLLBOOK_HTTP_PORT`` fixes a base, and read back from the ``http_listening``
line of its log: no free-port race between processes. ``start`` waits until each child answers
``/readyz``. Leaving the ``async with`` block by any path (return, exception, cancellation by SIGTERM or
Ctrl-C) stops every child: SIGTERM, then SIGKILL after ``stop_timeout``; on Linux a child also gets
SIGTERM when the supervisor is killed outright (SIGKILL), through the parent-death signal.

    async with Supervisor(settings, log_dir) as supervisor:
        await supervisor.start("watcher", "planner", "executor", "auditor")
        await supervisor.keep_running()          # `rollbook up`: restart a child that dies, until cancelled
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import msgspec

from services.infra.runtime import logged_port
from services.infra.settings import Settings

STOP_TIMEOUT = 20.0  # seconds a child has to finish its in-flight work after SIGTERM
READY_TIMEOUT = 60.0
RESTART_DELAY = 1.0  # the first restart's delay; it doubles with each failure in a row
MAX_RESTART_DELAY = 60.0  # the cap of that backoff
STABLE_AFTER = 60.0  # seconds of running after which an exit starts the backoff from its first delay
# A child's exit code for a failure no restart can mend: a missing or unusable kubeconfig, a server that
# is not there, a port another process holds (sysexits.h's EX_CONFIG). `keep_running` stops on it.
EXIT_CONFIGURATION = 78
TAIL_LINES = 5  # a failed child's last log lines shown with the news of its exit
_POLL = 0.1


def backoff_delay(failures: int, first: float = RESTART_DELAY, cap: float = MAX_RESTART_DELAY) -> float:
    """Seconds before restarting a child that failed ``failures`` times in a row (1 = the first time):
    ``first``, doubling each time, never more than ``cap``."""
    return min(cap, first * 2 ** max(0, min(failures - 1, 32)))


def _parent_death_signal() -> Callable[[], None] | None:
    """Linux: a child started with this gets SIGTERM when the supervisor dies, even by SIGKILL (which no
    Python code survives to clean up after), so no service outlives the process that started it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_signal() -> None:  # runs in the child between fork and exec: one C call, nothing else
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return set_signal


_DIE_WITH_PARENT = _parent_death_signal()


class ServiceFailed(RuntimeError):
    """A child did not start, did not become ready, or did not stop; the message has its log's tail."""


class ServiceCannotRun(ServiceFailed):
    """A child exited with ``EXIT_CONFIGURATION``: restarting it would fail the same way. The message is
    the child's own reason (its last ``rollbook:`` line) and ``tail`` its log's last lines."""

    def __init__(self, name: str, reason: str, tail: str) -> None:
        super().__init__(f"{name} cannot run: {reason}")
        self.name, self.reason, self.tail = name, reason, tail


def _last_reason(tail: str) -> str:
    """A child's own reason for exiting: the last ``rollbook: ...`` line it printed (its error boundary)."""
    reasons = [line for line in tail.splitlines() if line.startswith("rollbook: ")]
    return reasons[-1].removeprefix("rollbook: ") if reasons else ""


def settings_env(settings: Settings) -> dict[str, str]:
    """Environment variables that reproduce ``settings`` in a child process."""
    env: dict[str, str] = {}
    for settings_field in msgspec.structs.fields(Settings):
        if settings_field.name == "database_owner_url":
            continue  # services never migrate with a URL set: the owner's login stays with the migration
        value = getattr(settings, settings_field.name)
        name = "ROLLBOOK_" + settings_field.name.upper()
        env[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def child_instance(supervisor: str, child: str) -> str:
    """A child's ``ROLLBOOK_INSTANCE`` (its Lease identity): the same for every restart of the child, so a
    restarted planner or watcher takes back the Lease its predecessor held at once, and different from
    every other live process's: child names are unique within a supervisor, and ``supervisor`` is the
    supervisor's own instance (a pod's name) or a token new with each supervisor."""
    return f"{supervisor}/{child}"


@dataclass
class Child:
    """One running service process."""

    name: str  # unique among the supervisor's children (e.g. "executor-2")
    service: str  # the `rollbook` subcommand it runs
    process: asyncio.subprocess.Process
    log_path: Path
    log_start: int  # the log's size when the process started (a restart appends to the same file)
    port: int = 0  # its HTTP port, read back from the log; 0 until it has logged it
    env: Mapping[str, str] = field(default_factory=dict)  # its own variables beside the supervisor's
    started: float = field(default_factory=time.monotonic)
    failures: int = 0  # exits in a row before this start, each after less than STABLE_AFTER seconds

    @property
    def base_url(self) -> str:
        assert self.port, f"{self.name} has not reported its HTTP port yet"
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Supervisor:
    settings: Settings
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)  # extra variables for every child
    cwd: Path | None = None
    stop_timeout: float = STOP_TIMEOUT
    children: dict[str, Child] = field(default_factory=dict)
    exited: list[Child] = field(default_factory=list)  # stopped, killed or restarted, oldest first
    # Names this supervisor among live ones when settings.instance does not: see child_instance.
    token: str = field(default_factory=lambda: f"{socket.gethostname()}/{uuid.uuid4().hex[:8]}")

    async def __aenter__(self) -> Supervisor:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Shielded: a second Ctrl-C while the children finish their work must not leave them running.
        await asyncio.shield(self.stop_all())

    # --- starting --------------------------------------------------------------------------------------

    async def start(
        self,
        *services: str,
        name: str | None = None,
        ready_timeout: float = READY_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Start each service (``name`` renames a single one) and wait until each answers ``/readyz``; a
        child that exits meanwhile, or is not ready in time, raises ``ServiceFailed``. ``env`` adds to (or
        overrides) the settings for these services alone, e.g. a kubeconfig of their own; a restart keeps
        it."""
        names = await self.spawn(*services, name=name, env=env)
        for child_name in names:  # one after the other: each has ``ready_timeout`` after the one before
            await self.wait_ready(child_name, ready_timeout)

    async def spawn(
        self, *services: str, name: str | None = None, env: Mapping[str, str] | None = None
    ) -> list[str]:
        """Start each service without waiting; the children's names."""
        return [(await self._spawn(service, name or service, env or {})).name for service in services]

    async def _spawn(self, service: str, name: str, own_env: Mapping[str, str], failures: int = 0) -> Child:
        if name in self.children:
            raise ServiceFailed(f"{name} is already running")
        if any(child.name == name and child.process.returncode is None for child in self.exited):
            # Still stopping: a successor now would share its Lease identity while it still works.
            raise ServiceFailed(f"{name} is still stopping")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        instance = {"ROLLBOOK_INSTANCE": child_instance(self.settings.instance or self.token, name)}
        env = {**os.environ, **settings_env(self.settings), **self.env, **instance, **own_env}
        if not self.settings.http_port:
            env["ROLLBOOK_HTTP_PORT"] = "0"  # an OS-chosen port, read back from the child's log
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log_file:
            log_start = log_file.tell()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "services.cli.main",
                service,
                cwd=self.cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                preexec_fn=_DIE_WITH_PARENT,
            )
        child = Child(name, service, process, log_path, log_start, env=dict(own_env), failures=failures)
        self.children[name] = child
        return child

    async def wait_ready(
        self,
        name: str,
        timeout: float | None = READY_TIMEOUT,  # noqa: ASYNC109 - the deadline is checked between polls
        *,
        follow_restarts: bool = False,
    ) -> Child:
        """Wait until the child ``name`` answers ``/readyz``; ``ServiceFailed`` if it exits first (unless
        ``follow_restarts``: then its restart by ``keep_running`` is waited for) or after ``timeout``."""
        import aiohttp

        deadline = None if timeout is None else time.monotonic() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while deadline is None or time.monotonic() < deadline:
                child = self.children.get(name)
                if child is None or child.process.returncode is not None:
                    if not follow_restarts:
                        how = "is gone" if child is None else f"exited with {child.process.returncode}"
                        raise ServiceFailed(f"{name} {how} while starting:\n{self.tail(name)}")
                    await asyncio.sleep(_POLL)
                    continue
                child.port = child.port or logged_port(child.log_path, child.log_start) or 0
                if child.port:
                    try:
                        async with session.get(child.base_url + "/readyz") as response:
                            if response.status == 200:
                                return child
                    except (aiohttp.ClientError, TimeoutError):
                        pass
                await asyncio.sleep(_POLL)
        child = self.children.get(name)
        unknown = "" if child and child.port else " (it never logged http_listening: log level above INFO?)"
        raise ServiceFailed(f"{name} not ready after {timeout:.0f}s{unknown}:\n{self.tail(name)}")

    async def keep_running(
        self,
        restart_delay: float = RESTART_DELAY,
        *,
        max_delay: float = MAX_RESTART_DELAY,
        stable_after: float = STABLE_AFTER,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """Restart every child that exits, until cancelled (`rollbook up` runs this until SIGTERM/SIGINT).

        Each exit is said (``say``, stderr by default) with the child's last log lines. A child that
        keeps failing waits longer each time (``backoff_delay``: doubling up to ``max_delay``; a child
        that ran ``stable_after`` seconds starts again from the first delay), so a crash loop costs
        little. A child that exits with ``EXIT_CONFIGURATION`` is not restarted: ``ServiceCannotRun``."""
        say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        pending: dict[str, tuple[float, Child]] = {}  # name -> (when to start it again, the exited child)
        while True:
            now = time.monotonic()
            for name in self.dead():
                child = self.children.pop(name)
                self.exited.append(child)
                code = child.process.returncode
                tail = self.tail(name, TAIL_LINES, since=child.log_start)
                if code == EXIT_CONFIGURATION:
                    raise ServiceCannotRun(name, _last_reason(tail) or f"exited with {code}", tail)
                failures = 1 if now - child.started >= stable_after else child.failures + 1
                delay = backoff_delay(failures, restart_delay, max_delay)
                child.failures = failures
                pending[name] = (now + delay, child)
                say(
                    f"rollbook up: {name} exited with {code}; restarting in {delay:.3g}s"
                    f" (failure {failures} in a row); last lines of {child.log_path}:\n"
                    + "\n".join(f"    {line}" for line in tail.splitlines())
                )
            for name, (when, child) in list(pending.items()):
                if when <= now:
                    del pending[name]
                    await self._spawn(child.service, name, child.env, failures=child.failures)
            await asyncio.sleep(_POLL * 5)

    # --- stopping --------------------------------------------------------------------------------------

    async def stop(self, name: str, timeout: float | None = None) -> int:  # noqa: ASYNC109
        """SIGTERM, then wait for a clean exit; returns the exit code. A child still running after the
        timeout is killed and ``ServiceFailed`` raised."""
        child = self.children.pop(name)
        self.exited.append(child)
        if child.process.returncode is None:
            child.process.send_signal(signal.SIGTERM)
        limit = self.stop_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(child.process.wait(), limit)
        except TimeoutError:
            child.process.kill()
            await child.process.wait()
            raise ServiceFailed(f"{name} did not stop within {limit:.0f}s of SIGTERM") from None

    async def kill(self, name: str) -> None:
        """SIGKILL: no cleanup at all, as in a crash."""
        child = self.children.pop(name)
        self.exited.append(child)
        if child.process.returncode is None:
            child.process.kill()
        await child.process.wait()

    async def stop_all(self) -> dict[str, int]:
        """SIGTERM every child at once and wait for them all (SIGKILL after the timeout); their exit codes
        (-9 for a killed one). Never raises: it runs on every way out."""
        children = list(self.children.values())
        for child in children:
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)

        async def wait(child: Child) -> int:
            try:
                return await asyncio.wait_for(child.process.wait(), self.stop_timeout)
            except TimeoutError:
                child.process.kill()
                return await child.process.wait()

        codes = await asyncio.gather(*(wait(c) for c in children))
        self.exited.extend(children)
        self.children.clear()
        return {child.name: code for child, code in zip(children, codes, strict=True)}

    # --- looking at them -------------------------------------------------------------------------------

    def dead(self) -> list[str]:
        """Children that exited without being asked to."""
        return [name for name, child in self.children.items() if child.process.returncode is not None]

    def tail(self, name: str, lines: int = 40, *, since: int = 0) -> str:
        """The last ``lines`` lines of the child's log (from byte ``since``: one start's)."""
        path = self.log_dir / f"{name}.log"
        try:
            with path.open("rb") as log:
                log.seek(since)
                text = log.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def tails(self, lines: int = 8) -> str:
        names = dict.fromkeys([c.name for c in self.exited] + list(self.children))
        return "\n".join(f"--- {n} ({self.log_dir / f'{n}.log'}) ---\n{self.tail(n, lines)}" for n in names)
