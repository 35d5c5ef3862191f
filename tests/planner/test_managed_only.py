"""The planner plans only for the CloneSets and SidecarSets it manages (services/model/management.py):
an unmanaged one is observed and folded but gets no decision, until it is labelled in."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds import registry
from services.model.events import ObjectObserved, new_event
from services.model.management import MANAGE_LABEL, ManageMode, Selection
from services.planner.kinds import CLONESET, SIDECARSET
from services.planner.service import Planner

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEED = Path(__file__).parents[1] / "fixtures" / "seed"
LABELLED = Selection(ManageMode.LABELLED)


def seed(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SEED / name).read_text())
    return loaded


async def observe(store: EventStore, stream: str, obj: dict[str, Any], version: int) -> None:
    metadata = obj["metadata"]
    payload = ObjectObserved(
        kind=obj["kind"],
        namespace=metadata.get("namespace", ""),
        name=metadata["name"],
        uid=metadata["uid"],
        resource_version=str(version),
        change="ADDED" if version == 1 else "MODIFIED",
        object=obj,
    )
    envelope = new_event(payload, stream=stream, stream_version=version, occurred_at=datetime.now(UTC))
    await store.append([envelope], expected_version=version - 1)


async def test_an_unlabelled_cloneset_gets_no_decision_until_labelled(
    settings: Settings, event_store: EventStore
) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    cloneset = seed("cloneset-sample.yaml")
    cloneset["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), generation=1)
    planner = Planner(settings, event_store, LABELLED)
    workload = planner.workload(CLONESET, f"{namespace}/sample")

    await observe(event_store, registry.CLONESET.observed_stream(namespace, "sample"), cloneset, 1)
    await planner.plan_round(workload)
    assert workload.state.cloneset is not None  # folded: the trail has it
    assert await event_store.read_stream(registry.CLONESET.decisions_stream(namespace, "sample")) == []

    labelled = copy.deepcopy(cloneset)
    labelled["metadata"]["labels"][MANAGE_LABEL] = "true"
    await observe(event_store, registry.CLONESET.observed_stream(namespace, "sample"), labelled, 2)
    await planner.plan_round(workload)
    decided = [
        e.envelope.type
        for e in await event_store.read_stream(registry.CLONESET.decisions_stream(namespace, "sample"))
    ]
    assert decided[0] == "RoundPlanned" and "PodActionRequested" in decided


async def test_a_cloneset_in_a_listed_namespace_is_managed_without_its_label(
    settings: Settings, event_store: EventStore
) -> None:
    namespace = f"team-{uuid.uuid4().hex[:8]}"
    cloneset = seed("cloneset-sample.yaml")
    cloneset["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), generation=1)
    planner = Planner(settings, event_store, Selection(ManageMode.LABELLED, frozenset({namespace})))
    await observe(event_store, registry.CLONESET.observed_stream(namespace, "sample"), cloneset, 1)
    await planner.plan_round(planner.workload(CLONESET, f"{namespace}/sample"))
    decided = [
        e.envelope.type
        for e in await event_store.read_stream(registry.CLONESET.decisions_stream(namespace, "sample"))
    ]
    assert "PodActionRequested" in decided


async def test_an_unlabelled_sidecarset_gets_no_decision_until_labelled(
    settings: Settings, event_store: EventStore
) -> None:
    sidecarset = seed("sidecarset-test-sidecarset.yaml")
    name = f"sc-{uuid.uuid4().hex[:8]}"
    sidecarset["metadata"].update(name=name, uid=str(uuid.uuid4()), generation=1)
    planner = Planner(settings, event_store, LABELLED)
    await observe(event_store, registry.SIDECARSET.observed_stream("", name), sidecarset, 1)
    workload = planner.workload(SIDECARSET, name)
    await planner.plan_round(workload)
    assert workload.state.sidecarset is not None
    assert await event_store.read_stream(registry.SIDECARSET.decisions_stream("", name)) == []

    labelled = copy.deepcopy(sidecarset)
    labelled["metadata"].setdefault("labels", {})[MANAGE_LABEL] = "true"
    await observe(event_store, registry.SIDECARSET.observed_stream("", name), labelled, 2)
    await planner.plan_round(workload)
    decided = [
        e.envelope.type for e in await event_store.read_stream(registry.SIDECARSET.decisions_stream("", name))
    ]
    assert decided and decided[0] == "RoundPlanned"


async def test_a_cloneset_labelled_out_mid_life_gets_no_further_decision(
    settings: Settings, event_store: EventStore
) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    cloneset = seed("cloneset-sample.yaml")
    cloneset["spec"]["replicas"] = 0  # nothing pending after the first round: the planner is free to act
    cloneset["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), generation=1)
    planner = Planner(settings, event_store, Selection(ManageMode.ALL))
    workload = planner.workload(CLONESET, f"{namespace}/sample")
    await observe(event_store, registry.CLONESET.observed_stream(namespace, "sample"), cloneset, 1)
    await planner.plan_round(workload)
    before = await event_store.read_stream(registry.CLONESET.decisions_stream(namespace, "sample"))
    assert before and not any(e.envelope.type == "PodActionRequested" for e in before)

    # Released (say, to OpenKruise) and scaled up in the same change: the new owner creates the pods.
    released = copy.deepcopy(cloneset)
    released["metadata"]["labels"][MANAGE_LABEL] = "false"
    released["metadata"]["generation"] = 2
    released["spec"]["replicas"] = 3
    await observe(event_store, registry.CLONESET.observed_stream(namespace, "sample"), released, 2)
    await planner.plan_round(workload)
    assert workload.state.cloneset is not None and workload.state.cloneset["spec"]["replicas"] == 3
    assert len(await event_store.read_stream(registry.CLONESET.decisions_stream(namespace, "sample"))) == len(
        before
    )
