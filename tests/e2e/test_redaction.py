"""Secrets never enter the trail, end to end (docs/events.md, "Redaction").

A random canary is planted in a CloneSet's env and in its last-applied annotation, in a SidecarSet
sidecar's env (and its last-applied annotation) and in a ConfigMap. The four services and the webhook run
an in-place rollout, a recreate and a sidecar upgrade, and record a shadow-mode rollout another writer
drives (a stand-in for kruise-manager on a CloneSet labelled shadow, with the canary in its env);
``verify --all``, ``what-if``, ``audit verify`` and the shadow report succeed. Then every table and view
of the database, every message of every JetStream stream of the test, every service log, the
auditor's /history answers and the UI's are searched: the canary is nowhere. The pods, which the cluster
keeps, carry the real value."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import asyncpg
import nats.js.errors
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio import client

from services.cli.ui import make_app
from services.infra.bus import Bus
from services.infra.database import asyncpg_url
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.supervisor import settings_env
from services.model.management import MANAGE_LABEL, SHADOW
from services.model.sidecarset_streams import SIDECARSET_GROUP, SIDECARSET_PLURAL, SIDECARSET_VERSION
from services.simcluster import SimCluster, SimConfig
from services.simcluster.kubelet import Timing
from services.webhook.revisions import StoreRevisions
from services.webhook.service import RunningWebhook, WebhookOptions, run_webhook
from services.webhook.sinks import EventStoreSink
from tests.e2e.cluster import Cluster, image_of, is_ready
from tests.e2e.kruise_standin import KruiseStandIn
from tests.plugins.simcluster import MakeSimCluster
from tests.plugins.stack import REPO_ROOT, Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

CANARY = f"canary-{uuid.uuid4().hex}"
NAME = "secretive"
SIDECARSET = "secretive-tools"
SHADOWED = "secretive-shadowed"
BARE_PODS = ["bare-0", "bare-1"]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _cloneset() -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": NAME, "labels": {"app": NAME}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "nginx:1.25",
                            "env": [
                                {"name": "API_TOKEN", "value": CANARY},
                                {
                                    "name": "DB_URL",
                                    "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}},
                                },
                            ],
                        }
                    ]
                },
            },
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1},
        },
    }
    obj["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(obj, separators=(",", ":"))}
    return obj


def _sidecarset() -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{SIDECARSET_GROUP}/{SIDECARSET_VERSION}",
        "kind": "SidecarSet",
        "metadata": {"name": SIDECARSET},
        "spec": {
            "selector": {"matchLabels": {"app": "bare"}},
            "namespace": "default",
            "containers": [
                {
                    "name": "tools",
                    "image": "centos:6.7",
                    "command": ["sleep", "999d"],
                    "env": [{"name": "SIDECAR_SECRET", "value": CANARY}],
                    "podInjectPolicy": "BeforeAppContainer",
                    "upgradeStrategy": {"upgradeType": "ColdUpgrade"},
                }
            ],
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 1},
        },
    }
    obj["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(obj, separators=(",", ":"))}
    return obj


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    return await make_simcluster(SimConfig(timing=Timing(start=0.05, ready=0.2)))


@pytest_asyncio.fixture(loop_scope="session")
async def webhook(
    simcluster: SimCluster, stack_settings: Settings, tmp_path: Path
) -> AsyncIterator[RunningWebhook]:
    settings = Settings(kubeconfig=str(simcluster.kubeconfig_path), data_dir=str(tmp_path))
    sink = EventStoreSink(lambda: EventStore.connect(stack_settings.database_url))
    revisions = StoreRevisions(lambda: EventStore.connect(stack_settings.database_url, pool_size=2))
    try:
        async with run_webhook(
            settings, WebhookOptions(cert_dir=tmp_path / "tls"), sink, revisions
        ) as running:
            yield running
    finally:
        await sink.close()
        await revisions.close()


def rollbook(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **settings_env(stack.settings)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _apply(cluster: Cluster, image: str, strategy: str) -> None:
    """What ``kubectl apply`` of the changed manifest does: the whole template (env kept), the last-applied
    annotation rewritten (holding the canary again)."""
    changed = _cloneset()
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = image
    changed["spec"]["updateStrategy"]["type"] = strategy
    del changed["metadata"]["annotations"]
    changed["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(changed, separators=(",", ":"))}
    await cluster.patch_cloneset(NAME, changed)


async def _settled(cluster: Cluster, image: str) -> dict[str, Any] | None:
    pods = await cluster.pods(NAME)
    if len(pods) != 3 or not all(is_ready(p) and image_of(p) == image for p in pods.values()):
        return None
    status = (await cluster.cloneset(NAME)).get("status") or {}
    return pods if status.get("updatedReplicas") == 3 and status.get("readyReplicas") == 3 else None


async def _bare_pods(core: client.CoreV1Api) -> dict[str, dict[str, Any]]:
    response: Any = await core.list_namespaced_pod(
        "default", label_selector="app=bare", _preload_content=False
    )
    return {p["metadata"]["name"]: p for p in json.loads(await response.read())["items"]}


def _sidecar_image(pod: dict[str, Any]) -> str:
    return str(next(c["image"] for c in pod["spec"]["containers"] if c["name"] == "tools"))


async def _found_in_database(database_url: str) -> list[str]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        relations = await connection.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        found = []
        for row in relations:
            name = f'"{row["table_schema"]}"."{row["table_name"]}"'
            hits = await connection.fetchval(
                f"SELECT count(*) FROM {name} t WHERE t::text LIKE '%' || $1 || '%'",  # noqa: S608
                CANARY,
            )
            if hits:
                found.append(f"{name}: {hits} rows")
        assert len(relations) > 5  # the events table, the views...: the search reached them
        return found
    finally:
        await connection.close()


async def _found_on_the_bus(settings: Settings) -> tuple[list[str], int]:
    bus = await Bus.connect(settings, name="rollbook-test-redaction")
    found, read = [], 0
    try:
        for stream in (settings.stream_name, f"{settings.stream_name}_CHECKPOINTS"):
            try:
                info = await bus.js.stream_info(stream)
            except nats.js.errors.NotFoundError:
                continue
            for sequence in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    message = await bus.js.get_msg(stream, sequence)
                except nats.js.errors.NotFoundError:
                    continue
                read += 1
                if CANARY.encode() in (message.data or b"") or CANARY in str(message.headers or {}):
                    found.append(f"{stream} #{sequence} {message.subject}")
    finally:
        await bus.close()
    return found, read


async def test_a_canary_planted_everywhere_is_found_nowhere_and_every_command_succeeds(
    stack: Stack, webhook: RunningWebhook, k8s_client: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    core = client.CoreV1Api(k8s_client)
    cluster = Cluster(k8s_client)
    await core.create_namespaced_config_map(
        "default", cast(Any, {"metadata": {"name": "secretive-settings"}, "data": {"token": CANARY}})
    )
    await custom.create_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, _sidecarset()
    )
    await wait_for(
        lambda: _true(any(s.name == SIDECARSET for s in webhook.state.sidecarsets.snapshot())),
        what="the webhook to see the SidecarSet",
    )
    await stack.start("auditor", "watcher", "planner", "executor")

    # The SidecarSet injects into two bare pods; its sidecar image is then rolled in place.
    for name in BARE_PODS:
        pod = {
            "metadata": {"name": name, "labels": {"app": "bare"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.15.1"}]},
        }
        await core.create_namespaced_pod("default", body=cast(Any, pod))

    async def bare_ready(image: str) -> dict[str, Any] | None:
        pods = await _bare_pods(core)
        ok = len(pods) == 2 and all(is_ready(p) and _sidecar_image(p) == image for p in pods.values())
        return pods if ok else None

    injected = await wait_for(lambda: bare_ready("centos:6.7"), within=60, what="two injected pods")
    env = next(c for c in injected["bare-0"]["spec"]["containers"] if c["name"] == "tools")["env"]
    assert {"name": "SIDECAR_SECRET", "value": CANARY} in env  # the cluster holds the real value

    # The CloneSet: created, rolled in place, then recreated.
    await cluster.create_cloneset(_cloneset())
    first = await wait_for(lambda: _settled(cluster, "nginx:1.25"), within=60, what="3 ready pods")
    await _apply(cluster, "nginx:1.26", "InPlaceIfPossible")
    in_place = await wait_for(lambda: _settled(cluster, "nginx:1.26"), within=90, what="an in-place rollout")
    assert {p["metadata"]["uid"] for p in in_place.values()} == {p["metadata"]["uid"] for p in first.values()}
    await _apply(cluster, "nginx:1.27", "ReCreate")
    recreated = await wait_for(lambda: _settled(cluster, "nginx:1.27"), within=90, what="a recreate rollout")
    assert not {p["metadata"]["uid"] for p in recreated.values()} & {
        p["metadata"]["uid"] for p in first.values()
    }
    for pod in recreated.values():
        env = pod["spec"]["containers"][0]["env"]
        assert {"name": "API_TOKEN", "value": CANARY} in env  # created from the real template

    sidecarset = await custom.get_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, SIDECARSET
    )
    containers = copy.deepcopy(cast(dict[str, Any], sidecarset)["spec"]["containers"])
    containers[0]["image"] = "centos:7"
    await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        SIDECARSET,
        {"spec": {"containers": containers}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    upgraded = await wait_for(lambda: bare_ready("centos:7"), within=90, what="the sidecar upgrade")
    assert {p["metadata"]["uid"] for p in upgraded.values()} == {
        p["metadata"]["uid"] for p in injected.values()
    }

    # A CloneSet another controller drives (labelled shadow): its observed trail is redacted as well.
    shadowed = _cloneset()
    shadowed["metadata"] = {"name": SHADOWED, "labels": {"app": SHADOWED, MANAGE_LABEL: SHADOW}}
    shadowed["spec"]["selector"] = {"matchLabels": {"app": SHADOWED}}
    shadowed["spec"]["template"]["metadata"]["labels"] = {"app": SHADOWED}
    shadowed["spec"]["replicas"] = 2
    shadowed["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(shadowed, separators=(",", ":"))}
    kruise = KruiseStandIn(k8s_client, stack.settings.database_url, SHADOWED)
    await kruise.create(shadowed)
    await kruise.write_status()
    for instance in ("q2w4e", "r6t8y"):
        await kruise.create_pod(instance)
    await kruise.write_status()
    await kruise.set_image("nginx:1.26")
    await kruise.write_status()
    while candidates := await kruise.update_candidates():
        await kruise.update_in_place(candidates[0])

    async def compared() -> list[Any]:
        connection = await asyncpg.connect(asyncpg_url(stack.settings.database_url))
        try:
            rows = await connection.fetch(
                "SELECT action, verdict FROM shadow_agreement WHERE workload = $1", SHADOWED
            )
        finally:
            await connection.close()
        return rows if len(rows) == 4 else []

    rows = await wait_for(compared, within=60, what="the shadowed rollout compared")
    assert {r["verdict"] for r in rows} == {"agree"}
    report = await asyncio.to_thread(rollbook, stack, "shadow", "report", f"default/{SHADOWED}")
    assert report.returncode == 0 and CANARY not in report.stdout, report.stdout + report.stderr

    # Every command works on the redacted trail (run off the loop: simcluster serves the services from it).
    verified = await asyncio.to_thread(rollbook, stack, "verify", "--all")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    connection = await asyncpg.connect(asyncpg_url(stack.settings.database_url))
    try:
        rollouts = [r["rollout_id"] for r in await connection.fetch("SELECT rollout_id FROM rollouts")]
    finally:
        await connection.close()
    ours = [r for r in rollouts if r.startswith(f"default/{NAME}@")]
    assert len(ours) >= 2, rollouts
    for rollout in ours:
        what_if = await asyncio.to_thread(rollbook, stack, "what-if", rollout, "--set", "maxUnavailable=100%")
        assert what_if.returncode == 0, what_if.stdout + what_if.stderr
        assert CANARY not in what_if.stdout
    audit = await asyncio.to_thread(rollbook, stack, "audit", "verify")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    history = await asyncio.to_thread(rollbook, stack, "history", f"default/{NAME}")
    assert history.returncode == 0 and CANARY not in history.stdout

    # The search.
    assert await _found_in_database(stack.settings.database_url) == []
    found, read = await _found_on_the_bus(stack.settings)
    assert read > 50 and found == []
    answers = []
    # The largest page /history serves (more is a 400).
    for query in ("?after=0&limit=10000", f"?stream=CloneSet/default/{NAME}/observed"):
        answers.append(await stack.get_text("auditor", "/history" + query))
    assert all(answers) and not [a for a in answers if CANARY in a]
    assert json.loads(answers[0])  # the history answered with events
    timelines = [r for r in rollouts if r.startswith("default/")]  # the UI shows CloneSet rollouts
    answers = await _ui_answers(stack.settings.database_url, timelines)
    assert (
        len(timelines) >= 3 and len(answers) == len(timelines) + 1 and not [a for a in answers if CANARY in a]
    )
    logs = {name: child.log_path.read_text(errors="replace") for name, child in stack.children.items()}
    leaked = {name: [line for line in text.splitlines() if CANARY in line][:2] for name, text in logs.items()}
    assert logs and not {name: lines for name, lines in leaked.items() if lines}
    for command in (verified, audit, history):
        assert CANARY not in command.stdout + command.stderr
    assert stack.dead() == []


async def _ui_answers(database_url: str, rollouts: list[str]) -> list[str]:
    """What `rollbook ui` serves: the rollout list and every rollout's timeline (its replayed states too)."""
    pool = await asyncpg.create_pool(asyncpg_url(database_url), min_size=1, max_size=2)
    store = await EventStore.connect(database_url)
    try:
        async with TestClient(TestServer(make_app(pool, store))) as ui:
            answers = [await (await ui.get("/api/rollouts")).text()]
            for rollout in rollouts:
                response = await ui.get("/api/rollout", params={"id": rollout})
                assert response.status == 200, rollout
                answers.append(await response.text())
            return answers
    finally:
        await store.close()
        await pool.close()


async def _true(value: bool) -> bool:
    return value
