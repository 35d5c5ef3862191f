"""`rollbook ui` in a real browser: headless Chromium loads the page, runs its JavaScript against the
server, and the DOM it ends with must show what the SQL views and the replay fold say about the rollout.
The live page (it follows a rollout as the trail grows, shades paused time, and shows a banner when the
stack or its own server is down) is driven over the DevTools protocol, waiting on what the page shows."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.model.events import RolloutStarted
from services.replay.operations import replay_at
from services.replay.simulation import WorkloadSimulation, base_cloneset

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Elements(HTMLParser):
    """Every element of the dumped DOM as (tag, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, tag: str, **wanted: str) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.found
            if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in wanted.items())
        ]


async def browse(url: str) -> Elements:
    assert CHROMIUM is not None
    # A profile dir of its own: the browsers of parallel test workers must not share the default one
    # (Chromium locks a profile to one process).
    with tempfile.TemporaryDirectory(prefix="rollbook-chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
            f"--user-data-dir={profile}", "--dump-dom", url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        dom, _ = await asyncio.wait_for(process.communicate(), 120)
    parser = Elements()
    parser.feed(dom.decode())
    return parser


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
async def test_the_timeline_shows_what_the_views_and_replay_say(
    event_store: EventStore, database_url: str
) -> None:
    strategy = {"type": "InPlaceIfPossible", "maxUnavailable": 2}
    history = WorkloadSimulation("ui-test", "web", replicas=4, start=T0, strategy=strategy).run()
    await event_store.import_events(history)
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    rollout = started.rollout_id

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        actions: list[Any] = await connection.fetch(
            "SELECT pod, in_place FROM pod_actions WHERE rollout_id = $1 AND requested IS NOT NULL", rollout
        )
        span = await connection.fetchrow(
            "SELECT started_position, finished_position FROM rollouts WHERE rollout_id = $1", rollout
        )
        allowed = await connection.fetchval(
            "SELECT max_unavailable FROM partition_steps WHERE rollout_id = $1"
            " ORDER BY position DESC LIMIT 1",
            rollout,
        )
        peak = await connection.fetchval(
            "SELECT max(unavailable) FROM unavailability WHERE namespace = 'ui-test' AND workload = 'web'"
            " AND position >= $1 AND position <= $2",
            span["started_position"], span["finished_position"],
        )  # fmt: skip
    finally:
        await connection.close()
    middle = (span["started_position"] + span["finished_position"]) // 2
    expected_state, at = await replay_at(event_store, "ui-test/web", at_position=middle)
    assert at is not None

    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment["ROLLBOOK_DATABASE_URL"] = database_url
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "ui", "--port", "0",
        cwd=REPO_ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = (await asyncio.wait_for(server.stdout.readline(), 60)).decode()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, line
        page = await browse(f"{found.group(0)}#rollout={quote(rollout)}&position={middle}")
    finally:
        server.terminate()
        await server.wait()

    assert page.having("body", data_ready="true"), page.having("body")
    assert page.having("a", data_rollout=rollout)  # the rollout list
    bars = page.having("rect", **{"class": "action"})
    assert len(bars) == len(actions) > 0
    assert sorted(b["data-pod"] for b in bars) == sorted(a["pod"] for a in actions)
    assert sum(b["data-kind"] == "in place" for b in bars) == sum(a["in_place"] for a in actions) > 0
    assert page.having("line", **{"class": "max-unavailable", "data-allowed": str(allowed)})
    assert page.having("svg", id="timeline", data_peak_unavailable=str(peak))
    assert page.having("line", **{"class": "partition-step"})
    # The slider sits on the first event at or after the position asked for: the state replay gives there.
    table = page.having("table", id="state")
    assert table and table[0]["data-position"] == str(at.global_position)
    shown = sorted(row["data-pod"] for row in page.having("tr") if "data-pod" in row)
    assert shown == sorted(expected_state["pods"])


@contextlib.asynccontextmanager
async def ui_server(database_url: str) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """`rollbook ui --port 0` on ``database_url``: its address, and the process (its output on stdout)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment["ROLLBOOK_DATABASE_URL"] = database_url
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "ui", "--port", "0",
        cwd=REPO_ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = (await asyncio.wait_for(server.stdout.readline(), 60)).decode()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, line
        yield found.group(0), server
    finally:
        if server.returncode is None:
            server.terminate()
        await server.wait()


class Browser:
    """Headless Chromium over the DevTools protocol: one page, navigated and read with JavaScript."""

    def __init__(self) -> None:
        self.serial = 0

    async def __aenter__(self) -> Browser:
        import aiohttp

        assert CHROMIUM is not None
        self.profile = tempfile.mkdtemp(prefix="rollbook-ui-test-")
        self.process = await asyncio.create_subprocess_exec(
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={self.profile}",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self.process.stderr is not None
        while True:
            line = (await asyncio.wait_for(self.process.stderr.readline(), 60)).decode()
            assert line, "chromium exited before its DevTools endpoint was up"
            listening = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if listening:
                break
        self.drain = asyncio.create_task(self._drain(self.process.stderr))
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{listening.group(1)}/json/list") as answer:
            targets = await answer.json()
        page = next(t for t in targets if t["type"] == "page")
        self.socket = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.readline():
            pass

    async def __aexit__(self, *_: object) -> None:
        await self.socket.close()
        await self.session.close()
        self.process.terminate()
        await self.process.wait()
        self.drain.cancel()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.serial += 1
        await self.socket.send_json({"id": self.serial, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.socket.receive_json(), 60)
            if message.get("id") == self.serial:
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return answer["result"].get("value")

    async def wait_for(self, expression: str, what: str, within: float = 90) -> Any:
        """The value of ``expression`` once it is truthy (the page polls on its own clock); fails after
        ``within`` seconds naming ``what`` was awaited and what the page showed."""
        deadline = asyncio.get_running_loop().time() + within
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                shown = await self.evaluate("document.body.outerHTML.slice(0, 3000)")
                raise AssertionError(f"waited {within:g} s for {what}; the page shows: {shown}")
            await asyncio.sleep(0.25)


BODY = "document.body.dataset"
PAUSED_RECTS = "[...document.querySelectorAll('rect.paused')].map((r) => [r.dataset.from, r.dataset.to])"


def paused_history() -> list[Any]:
    """A CloneSet rolled to a partition of 2 (the rollout pauses once those pods are updated), the partition
    lowered to 0 two minutes later (it resumes and finishes): every event as recorded."""
    strategy = {"type": "InPlaceIfPossible", "maxUnavailable": 1}
    simulation = WorkloadSimulation(
        "ui-live", "web", replicas=4, start=T0, strategy={**strategy, "partition": 2}
    )
    lowered = base_cloneset("web", "ui-live", 4, {**strategy, "partition": 0})
    lowered["metadata"].update(uid=str(uuid.uuid5(uuid.NAMESPACE_URL, "ui-live/web")), generation=3)
    lowered["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:mainline"
    simulation.model.schedule_spec(150.0, copy.deepcopy(lowered))
    return simulation.run()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
async def test_the_page_follows_a_running_rollout_and_shades_its_paused_time(
    event_store: EventStore, database_url: str
) -> None:
    from services.model.events import RolloutPaused, RolloutResumed

    history = paused_history()
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    rollout = started.rollout_id
    paused_at = next(i for i, e in enumerate(history) if isinstance(e.payload, RolloutPaused))
    resumed = next(e for e in history if isinstance(e.payload, RolloutResumed))
    # Recorded so far: the rollout started and paused at its partition, not resumed yet.
    await event_store.import_events(history[: paused_at + 1])

    async with ui_server(database_url) as (address, server), Browser() as browser:
        await browser.open(f"{address}#rollout={quote(rollout)}")
        await browser.wait_for(f"{BODY}.ready === 'true' && {BODY}.live === 'true'", "the running rollout")
        [(since, until)] = await browser.wait_for(PAUSED_RECTS, "the paused period shaded")
        assert until == ""  # still paused: shaded to the end of what is recorded
        assert datetime.fromisoformat(since) == history[paused_at].occurred_at
        assert "paused" in await browser.evaluate("document.getElementById('summary').textContent")

        # The rest of the rollout is recorded: the page follows without being reloaded.
        await event_store.import_events(history[paused_at + 1 :])
        await browser.wait_for(f"{BODY}.live === 'false'", "the rollout to be shown finished")
        assert await browser.evaluate(f"{BODY}.outcome") == "succeeded"
        [(since, until)] = await browser.evaluate(PAUSED_RECTS)
        assert datetime.fromisoformat(until) == resumed.occurred_at
        assert await browser.evaluate("document.getElementById('banner').hidden") is True

        # Its server stops: the page says so instead of going blank.
        server.terminate()
        await server.wait()
        kind = await browser.wait_for(f"{BODY}.banner", "the banner of a server that is gone")
        assert kind == "server-gone"
        assert await browser.evaluate("document.querySelectorAll('rect.action').length") > 0  # as last read


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
async def test_a_stack_that_is_down_is_a_banner_not_a_blank_page_or_a_traceback(unused_tcp_port: int) -> None:
    # Nothing listens on that port: the stack is down. The page's server starts anyway.
    down = f"postgresql://root@127.0.0.1:{unused_tcp_port}/test"
    async with ui_server(down) as (address, server), Browser() as browser:
        await browser.open(address)
        kind = await browser.wait_for(f"{BODY}.banner", "the banner of a stack that is down")
        assert kind == "stack-down"
        banner = await browser.evaluate("document.getElementById('banner').textContent")
        assert banner.startswith("The stack is down: the event store is unreachable: "), banner
        assert "Retrying every 2 s" in banner
        assert await browser.evaluate("document.getElementById('rollouts').textContent") == "unavailable"
        server.terminate()
        await server.wait()
    assert server.stdout is not None
    output = (await server.stdout.read()).decode()
    assert "rollbook ui: the event store is unreachable (" in output
    assert output.count("the event store is unreachable") == 1  # once, not once per poll
    assert "Traceback" not in output
