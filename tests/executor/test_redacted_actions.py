"""The executor writes real values from the live template, never the digests the trail holds, and refuses
an action whose template has moved on (services/executor/real_values.py)."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client

from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import plan
from services.kinds.registry import CLONESET
from services.model.events import (
    Envelope,
    PodActionFailed,
    PodActionRequested,
    PodActionSucceeded,
    RoundPlanned,
    new_event,
)
from services.model.redaction import contains_digest
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION, derived_id
from services.simcluster import SimCluster
from tests.executor.test_inplace_not_ready import outcomes
from tests.planner.builders import plan_input


def _cloneset(name: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{CLONESET_GROUP}/{CLONESET_VERSION}",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"example.com/api-token": token}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "nginx:alpine",
                            "env": [
                                {"name": "API_TOKEN", "value": token},
                                {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}},
                            ],
                        }
                    ]
                },
            },
        },
    }


async def _planned_create(
    event_store: EventStore, executor: Executor, cloneset: dict[str, Any]
) -> tuple[Envelope, PodActionRequested]:
    """The createPod a round plans on the recorded (redacted) CloneSet, stored as the planner stores it."""
    recorded = executor.policy.redact_object("CloneSet", copy.deepcopy(cloneset))
    assert recorded is not None
    result = plan(plan_input(recorded, []))
    [create] = result.actions
    assert isinstance(create, model.CreatePod)
    name = cloneset["metadata"]["name"]
    stream = CLONESET.decisions_stream("default", name)
    round_id = uuid.uuid4()
    now = datetime.now(UTC)
    request = PodActionRequested(
        action_id=str(derived_id("decision", round_id, 0)),
        action="createPod",
        namespace="default",
        pod=create.object["metadata"]["name"],
        revision=result.update_revision,
        details={"object": msgspec.to_builtins(create.object)},
    )
    assert contains_digest(request.details)
    envelopes = [
        new_event(
            RoundPlanned(through={}, now=now, input_sha256="0" * 64, rules=10),
            stream=stream,
            stream_version=1,
            occurred_at=now,
            event_id=round_id,
        ),
        new_event(request, stream=stream, stream_version=2, occurred_at=now, causation_id=round_id),
    ]
    await event_store.append(envelopes, expected_version=0)
    return envelopes[1], request


@pytest.mark.asyncio(loop_scope="session")
async def test_a_pod_planned_on_a_redacted_template_is_created_with_the_real_values(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    name = f"red{uuid.uuid4().hex[:8]}"
    token = f"canary-{uuid.uuid4().hex}"
    custom = client.CustomObjectsApi(k8s_client)
    cloneset = _cloneset(name, token)
    cloneset = await custom.create_namespaced_custom_object(
        CLONESET_GROUP, CLONESET_VERSION, "default", CLONESET_PLURAL, cloneset
    )  # as the API returned it: its uid is the pods' owner
    executor = Executor(settings, event_store, k8s_client)
    envelope, request = await _planned_create(event_store, executor, cloneset)
    assert token not in str(request.details)

    await executor.execute(envelope, request)

    [outcome] = await outcomes(event_store, name)
    assert isinstance(outcome, PodActionSucceeded), outcome
    pod = await client.CoreV1Api(k8s_client).read_namespaced_pod(request.pod, "default")
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["API_TOKEN"].value == token
    assert env["DB"].value_from.secret_key_ref.name == "db"
    assert pod.metadata.annotations["example.com/api-token"] == token


@pytest.mark.asyncio(loop_scope="session")
async def test_an_action_whose_template_moved_on_is_refused_with_the_reason(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    name = f"red{uuid.uuid4().hex[:8]}"
    custom = client.CustomObjectsApi(k8s_client)
    cloneset = _cloneset(name, f"canary-{uuid.uuid4().hex}")
    cloneset = await custom.create_namespaced_custom_object(
        CLONESET_GROUP, CLONESET_VERSION, "default", CLONESET_PLURAL, cloneset
    )  # as the API returned it: its uid is the pods' owner
    executor = Executor(settings, event_store, k8s_client)
    envelope, request = await _planned_create(event_store, executor, cloneset)
    # The secret is rotated before the executor takes the action: the planned values are gone.
    moved = copy.deepcopy(cloneset["spec"]["template"])
    moved["spec"]["containers"][0]["env"][0]["value"] = "rotated"
    await custom.patch_namespaced_custom_object(
        CLONESET_GROUP,
        CLONESET_VERSION,
        "default",
        CLONESET_PLURAL,
        name,
        [{"op": "replace", "path": "/spec/template", "value": moved}],
    )

    await executor.execute(envelope, request)

    [outcome] = await outcomes(event_store, name)
    assert isinstance(outcome, PodActionFailed)
    assert "template has moved on" in outcome.reason and not outcome.retryable
    assert request.revision is not None and request.revision in outcome.reason
    pods = await client.CoreV1Api(k8s_client).list_namespaced_pod("default", label_selector=f"app={name}")
    assert pods.items == []  # nothing written with digests, nothing written at all


@pytest.mark.asyncio(loop_scope="session")
async def test_an_api_error_repeating_a_restored_value_is_recorded_with_its_digest(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    name = f"red{uuid.uuid4().hex[:8]}"
    bad = f"not a label value {uuid.uuid4().hex}!"  # deny-listed key: digested; the API refuses the value
    cloneset = _cloneset(name, f"canary-{uuid.uuid4().hex}")
    cloneset["spec"]["template"]["metadata"]["labels"]["example.com/license-key"] = bad
    custom = client.CustomObjectsApi(k8s_client)
    cloneset = await custom.create_namespaced_custom_object(
        CLONESET_GROUP, CLONESET_VERSION, "default", CLONESET_PLURAL, cloneset
    )
    executor = Executor(settings, event_store, k8s_client)
    envelope, request = await _planned_create(event_store, executor, cloneset)

    await executor.execute(envelope, request)

    [outcome] = await outcomes(event_store, name)
    assert isinstance(outcome, PodActionFailed) and "Invalid value" in outcome.reason, outcome
    assert bad not in outcome.reason and executor.policy.digest(bad) in outcome.reason
