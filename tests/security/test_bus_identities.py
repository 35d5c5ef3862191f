"""Attacks on the bus, as a client on the same network would try them against rollbook's embedded
nats-server (the user's default): each fails on a server without rollbook's identities."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats.errors
import nats.js.errors
import pytest
import pytest_asyncio
from nats.js.api import ConsumerConfig

from services.infra.bus import Bus
from services.infra.checkpoints import (
    checkpoint_stream,
    checkpoint_subject,
    ensure_checkpoint_stream,
    published_checkpoints,
)
from services.infra.nats_auth import ADMIN, AUDITOR, EXECUTOR, OPERATOR, PLANNER, CredentialsError
from services.infra.settings import Settings
from tests.security.bus_server import Refusals, auth_nats, connect_as

pytestmark = pytest.mark.servers

PERMISSION = "permissions violation"


@pytest_asyncio.fixture
async def secured(server_data_dir: Path) -> AsyncIterator[tuple[Settings, Bus]]:
    """The server, and the auditor's connection, which made the stream (as `rollbook up` does)."""
    async with auth_nats(server_data_dir) as settings:
        auditor = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
        await auditor.ensure_stream()
        try:
            yield settings, auditor
        finally:
            await auditor.close()


def event_subject(settings: Settings) -> str:
    return f"{settings.subject_prefix}.ev.p0.Pod.default.forged.PodActionRequested"


async def test_a_client_without_credentials_is_refused(secured: tuple[Settings, Bus]) -> None:
    settings, _ = secured
    with pytest.raises(nats.errors.Error) as refused:
        client = await connect_as(settings, None)
        await client.close()  # reached only when the server let it in
    assert "authorization" in str(refused.value).lower() or isinstance(
        refused.value, nats.errors.NoServersError
    )


async def test_a_wrong_password_is_refused(secured: tuple[Settings, Bus]) -> None:
    settings, _ = secured
    with pytest.raises(nats.errors.Error):
        client = await nats.connect(
            settings.nats_url, user=EXECUTOR, password="guessed", allow_reconnect=False, connect_timeout=5
        )
        await client.close()


@pytest.mark.parametrize("identity", [EXECUTOR, PLANNER, OPERATOR])
async def test_only_the_relay_publishes_events(secured: tuple[Settings, Bus], identity: str) -> None:
    settings, auditor = secured
    refusals = Refusals()
    client = await connect_as(settings, identity, refusals)
    try:
        js = client.jetstream(timeout=0.5)  # refused at once; nothing answers
        with pytest.raises((nats.errors.TimeoutError, nats.js.errors.Error)):
            await js.publish(event_subject(settings), b'{"forged": true}', stream=settings.stream_name)
        assert PERMISSION in (await refusals.wait()).lower()
    finally:
        await client.close()
    info = await auditor.js.stream_info(settings.stream_name)
    assert info.state.messages == 0


@pytest.mark.parametrize("identity", [AUDITOR, EXECUTOR, PLANNER, OPERATOR])
@pytest.mark.parametrize("operation", ["delete", "purge"])
async def test_only_the_owner_deletes_or_purges_the_stream(
    secured: tuple[Settings, Bus], identity: str, operation: str
) -> None:
    settings, auditor = secured
    await auditor.js.publish(event_subject(settings), b"{}", stream=settings.stream_name)
    refusals = Refusals()
    client = await connect_as(settings, identity, refusals)
    try:
        js = client.jetstream(timeout=0.5)  # refused at once; nothing answers
        attack = js.delete_stream if operation == "delete" else js.purge_stream
        with pytest.raises((nats.errors.TimeoutError, nats.js.errors.Error)):
            await attack(settings.stream_name)
        assert PERMISSION in (await refusals.wait()).lower()
    finally:
        await client.close()
    info = await auditor.js.stream_info(settings.stream_name)
    assert info.state.messages == 1
    # The owner (admin) may: the refusal above is the permissions', not the server's.
    admin = await connect_as(settings, ADMIN)
    try:
        assert await admin.jetstream(timeout=5).purge_stream(settings.stream_name)
    finally:
        await admin.close()


@pytest.mark.parametrize("identity", [OPERATOR, PLANNER, EXECUTOR])
async def test_no_one_else_reads_the_auditors_stream_consumer(
    secured: tuple[Settings, Bus], identity: str
) -> None:
    settings, _ = secured
    refusals = Refusals()
    client = await connect_as(settings, identity, refusals)
    try:
        js = client.jetstream(timeout=0.5)  # refused at once; nothing answers
        with pytest.raises((nats.errors.TimeoutError, nats.js.errors.Error)):
            await js.add_consumer(
                settings.stream_name, ConsumerConfig(durable_name="auditor", name="auditor")
            )
        assert PERMISSION in (await refusals.wait()).lower()
    finally:
        await client.close()


@pytest.mark.parametrize("subject", ["{prefix}.>", "_INBOX.>", "_INBOX_auditor.>", ">"])
async def test_no_service_listens_on_what_is_not_its_own(secured: tuple[Settings, Bus], subject: str) -> None:
    settings, _ = secured
    refusals = Refusals()
    client = await connect_as(settings, EXECUTOR, refusals)
    try:
        await client.subscribe(subject.format(prefix=settings.subject_prefix))
        await client.flush()
        assert PERMISSION in (await refusals.wait()).lower()
    finally:
        await client.close()


async def test_each_service_can_do_its_own_work(secured: tuple[Settings, Bus]) -> None:
    """The permissions are not too tight: the relay publishes, the executor and the planner consume,
    ack and dead-letter on their own durables, the operator reads the checkpoints the auditor wrote."""
    settings, auditor = secured
    executor = await Bus.connect(settings, name="rollbook-executor", identity=EXECUTOR)
    planner = await Bus.connect(settings, name="rollbook-planner", identity=PLANNER)
    operator = await Bus.connect(settings, name="rollbook-audit", identity=OPERATOR)
    try:
        await asyncio.wait_for(executor.ensure_stream(), 10)  # exists: the auditor made it
        await auditor.js.publish(event_subject(settings), b"not an event", stream=settings.stream_name)
        for bus, durable in ((executor, "executor"), (planner, "planner-p0")):

            async def handler(*_: object) -> None:
                raise AssertionError("an undecodable message never reaches the handler")

            consumer = bus.consumer(durable, bus.event_filter(partition=0), handler, batch=1, ack_wait=5)
            task = asyncio.create_task(consumer.run())
            try:
                # Undecodable: dead-lettered on the consumer's own dead-letter subject, which it may use.
                for _ in range(100):
                    if consumer.stats.dead_lettered:
                        break
                    await asyncio.sleep(0.1)
                assert consumer.stats.dead_lettered == 1
            finally:
                consumer.stop()
                await asyncio.wait_for(task, 10)
        await ensure_checkpoint_stream(auditor)
        record = {"global_position": 1, "chain_hash": "00", "taken_at": "2026-01-01T00:00:00Z"}
        await auditor.js.publish(
            checkpoint_subject(auditor), json.dumps(record).encode(), stream=checkpoint_stream(auditor)
        )
        found = await published_checkpoints(operator, timeout=5)
        assert [c.global_position for c in found] == [1]
    finally:
        for bus in (executor, planner, operator):
            await bus.close()


async def test_an_identity_unknown_to_rollbook_is_a_clear_error() -> None:
    settings = Settings(nats_url="nats://127.0.0.1:1", nats_credentials_dir="/nonexistent")
    with pytest.raises(ValueError, match="unknown NATS identity"):
        await Bus.connect(settings, identity="watcher-" + uuid.uuid4().hex[:4])


async def test_refused_credentials_are_one_clear_error_not_a_hang(
    secured: tuple[Settings, Bus], tmp_path: Path
) -> None:
    settings, _ = secured
    (tmp_path / EXECUTOR).write_text("guessed\n")
    for given in ("", str(tmp_path)):
        wrong = msgspec.structs.replace(settings, nats_credentials_dir=given)
        with pytest.raises(CredentialsError, match="refused identity 'executor'"):
            await asyncio.wait_for(Bus.connect(wrong, identity=EXECUTOR), 20)
