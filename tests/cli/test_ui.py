"""`rollbook ui` in a real browser: headless Chromium loads the page, runs its JavaScript against the
server, and the DOM it ends with must show what the SQL views and the replay fold say about the rollout."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
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
from services.replay.simulation import WorkloadSimulation

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
    process = await asyncio.create_subprocess_exec(
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
        "--dump-dom", url,
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
