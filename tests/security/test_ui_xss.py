"""`rollbook ui` as an attacker who controls a recorded string (a CloneSet's updateStrategy, which the
shadow trail records unchecked) would try it: the string is HTML that runs script when parsed as HTML.
Headless Chromium loads the page; the payload must show as text and nothing of it may run."""

from __future__ import annotations

import asyncio
import html
import os
import re
import sys
import tempfile
from urllib.parse import quote

import msgspec
import pytest

from services.infra.store import EventStore
from services.model.events import RolloutStarted
from services.replay.simulation import WorkloadSimulation
from tests.cli.test_ui import CHROMIUM, REPO_ROOT, T0

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAYLOAD = """<img src=x onerror="document.body.dataset.pwned='yes'"><b id=injected>bold</b>"""


async def dump_dom(url: str) -> str:
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
    return dom.decode()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
async def test_a_recorded_html_payload_renders_as_text(event_store: EventStore, database_url: str) -> None:
    history = WorkloadSimulation("xss-test", "web", replicas=2, start=T0).run()
    forged = []
    for event in history:
        if isinstance(event.payload, RolloutStarted):
            strategy = {**event.payload.strategy, "type": PAYLOAD}
            event = msgspec.structs.replace(
                event, payload=msgspec.structs.replace(event.payload, strategy=strategy)
            )
            rollout = event.payload.rollout_id
        forged.append(event)
    await event_store.import_events(forged)

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
        dom = await dump_dom(f"{found.group(0)}#rollout={quote(rollout)}")
    finally:
        server.terminate()
        await server.wait()

    assert 'data-ready="true"' in dom, dom[:2000]
    assert "data-pwned" not in dom  # the onerror handler never ran
    assert 'id="injected"' not in dom and "<img" not in dom  # no element was made of the payload
    assert html.escape(PAYLOAD, quote=False) in dom  # it is there, as text
