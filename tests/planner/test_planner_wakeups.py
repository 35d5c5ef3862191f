"""What wakes the planner service: an executor taking an action (PodActionStarted) does not. It is no
planner input (the action's outcome, stored after it, wakes the workload), and a NATS server before 2.10
delivers it to the planner anyway (it ignores a consumer's several filter subjects)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest
from nats.aio.msg import Msg

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET, SIDECARSET
from services.model.events import PodActionStarted, new_event
from services.planner.service import Planner

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_an_executor_taking_an_action_does_not_wake_the_planner(
    settings: Settings, event_store: EventStore
) -> None:
    planner = Planner(settings, event_store)
    for stream in (CLONESET.actions_stream("default", "web"), SIDECARSET.actions_stream("", "sidecars")):
        taken = new_event(
            PodActionStarted(action_id="a-1", executor="executor-a"),
            stream=stream,
            stream_version=1,
            occurred_at=datetime.now(UTC),
        )
        await planner.handle(taken, cast(Msg, None))  # acknowledged, nothing to do
    assert planner.workloads == {}  # no CloneSet nor SidecarSet state made, no round started
