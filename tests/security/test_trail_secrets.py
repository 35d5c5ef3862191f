"""Attacks on the trail: someone who can read the event store (a read-only SQL role, a backup, the
auditor's /history) looks for the secrets of the workloads rollbook watched. Each fails since the watcher
redacts (docs/events.md, "Redaction"); before it, each found the value in the stored observations."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import ObjectObserved, encode, new_event
from services.model.redaction import LAST_APPLIED_ANNOTATION, is_digest
from services.watcher.objects import observation
from services.watcher.service import Watcher
from tests.plugins.kube_answers import Listing

pytestmark = pytest.mark.asyncio(loop_scope="session")

PIN = "0420"  # a short secret: four digits


def _cloneset(name: str, secret: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx", "env": [{"name": "PIN", "value": secret}]}
                    ]
                },
            },
        },
    }
    obj["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: json.dumps(obj)}
    return obj


def _pod(owner: str, secret: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{owner}-a",
            "namespace": "default",
            "uid": f"pod-{owner}",
            "resourceVersion": "2",
            "labels": {"app": owner},
            "ownerReferences": [
                {
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "CloneSet",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [{"name": "main", "image": "nginx", "env": [{"name": "PIN", "value": secret}]}],
            "initContainers": [
                {"name": "setup", "image": "busybox", "env": [{"name": "PIN", "value": secret}]}
            ],
        },
    }


@pytest.fixture
async def watcher(event_store: EventStore, tmp_path: Path) -> AsyncIterator[Watcher]:
    api = client.ApiClient()  # never called: the watch events are fed in
    watched = Watcher(Settings(data_dir=str(tmp_path)), event_store, api)
    appender = asyncio.create_task(watched.append_queued())
    try:
        yield watched
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()


async def _observed(watcher: Watcher, store: EventStore, secret: str) -> list[ObjectObserved]:
    owner = f"web-{uuid.uuid4().hex[:8]}"
    kinds = {k.kind: k for k in watcher.kinds}
    await watcher._on_watch_event(kinds["CloneSet"], "ADDED", _cloneset(owner, secret))
    await watcher._on_watch_event(kinds["Pod"], "ADDED", _pod(owner, secret))
    await watcher._idle.wait()
    stored = await store.read_stream(CLONESET.observed_stream("default", owner))
    observed = [s.envelope.payload for s in stored if isinstance(s.envelope.payload, ObjectObserved)]
    assert {o.kind for o in observed} == {"CloneSet", "Pod"}
    return observed


async def test_an_env_value_cannot_be_read_from_the_stored_observations(
    watcher: Watcher, event_store: EventStore
) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    for observed in await _observed(watcher, event_store, secret):
        assert secret not in json.dumps(observed.object), observed.kind


async def test_the_last_applied_annotation_does_not_repeat_the_env_value(
    watcher: Watcher, event_store: EventStore
) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    [cloneset] = [o for o in await _observed(watcher, event_store, secret) if o.kind == "CloneSet"]
    annotation = cloneset.object["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
    assert is_digest(annotation) and secret not in annotation


async def test_a_four_digit_value_cannot_be_guessed_back_from_what_is_stored(
    watcher: Watcher, event_store: EventStore
) -> None:
    stored = b"".join(encode_observation(o) for o in await _observed(watcher, event_store, PIN))
    # Every candidate, in every form an unkeyed digest could take: none is in the trail. (The revision
    # hash, a 32-bit FNV of the real template as Kubernetes computes it, can still confirm a value from a
    # set this small: docs/events.md, "What a revision hash still tells".)
    candidates = [f"{n:04d}" for n in range(10_000)]
    assert f'"value":"{PIN}"'.encode() not in stored
    for name in ("sha256", "sha1", "md5"):
        hashes = {hashlib.new(name, c.encode()).hexdigest().encode() for c in candidates}
        assert not [h for h in hashes if h in stored], name


def encode_observation(observation: ObjectObserved) -> bytes:
    return encode(new_event(observation, stream="s", stream_version=1, occurred_at=datetime.now(UTC)))


async def test_an_object_recorded_before_redaction_is_not_recorded_again_in_clear(
    event_store: EventStore, tmp_path: Path
) -> None:
    """A trail from before the upgrade holds a pod in clear; the pod is deleted while the watcher is down.
    The restarted watcher records it DELETED from its cache, which it rebuilt from that trail."""
    secret = f"s3cret-{uuid.uuid4().hex}"
    owner = f"web-{uuid.uuid4().hex[:8]}"
    old = observation(
        "Pod",
        _pod(owner, secret),
        "ADDED",
        stream=CLONESET.observed_stream("default", owner),
        correlation_id=None,
    )
    await event_store.append([old], expected_version=0)
    api = client.ApiClient()
    try:
        watcher = Watcher(Settings(data_dir=str(tmp_path)), event_store, api)
        await watcher.rebuild()
        pods = next(k for k in watcher.kinds if k.kind == "Pod")

        async def listed(**_: Any) -> Listing:
            return Listing([])  # the pod is gone

        pods.list_func = listed
        appender = asyncio.create_task(watcher.append_queued())
        try:
            await watcher.relist(pods)
            await watcher._idle.wait()
        finally:
            appender.cancel()
            await asyncio.gather(appender, return_exceptions=True)
    finally:
        await api.close()
    stored = await event_store.read_stream(CLONESET.observed_stream("default", owner))
    [deleted] = [s.envelope.payload for s in stored if s.envelope.payload.change == "DELETED"]  # type: ignore[union-attr]
    assert secret not in json.dumps(deleted.object)  # type: ignore[union-attr]
