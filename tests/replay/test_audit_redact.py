"""``rollbook audit redact`` on a trail recorded before redaction: afterwards nothing of the secret is
left, every workload still verifies, the hash chain is whole, the redaction is on record, a checkpoint
taken before it is accepted only because the record names its hash, and any other edit is still caught."""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from services.infra.database import asyncpg_url
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.supervisor import settings_env
from services.model.events import Envelope, encode
from services.model.hashchain import Checkpoint
from services.model.redaction import LAST_APPLIED_ANNOTATION, RedactionPolicy
from services.replay import simulation
from services.replay.audit import audit_log
from services.replay.operations import verify_all
from services.replay.redact import plan_redaction, redact_trail
from services.replay.simulation import T0, WorkloadSimulation
from services.replay.verify import verify_workload
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import REPO_ROOT, e2e_database

CANARY = "canary-3f9a61c2d8"
POLICY = RedactionPolicy(b"audit-redact-key" * 2)


@pytest.fixture
def secret_template(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Simulated CloneSets carry the canary in an env value and in their last-applied annotation."""
    plain = simulation.base_cloneset

    def with_secret(*args: Any, **kwargs: Any) -> dict[str, Any]:
        cloneset = plain(*args, **kwargs)
        cloneset["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "API_TOKEN", "value": CANARY}
        ]
        cloneset["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: f'{{"token":"{CANARY}"}}'}
        return cloneset

    monkeypatch.setattr(simulation, "base_cloneset", with_secret)
    yield


def _trail() -> list[Envelope]:
    events = WorkloadSimulation("team-a", "web", replicas=4, start=T0).run()
    assert any(CANARY.encode() in encode(e) for e in events)  # recorded before redaction
    assert verify_workload("team-a", "web", events).clean
    return events


def test_a_redacted_trail_holds_no_secret_and_verifies_round_by_round(secret_template: None) -> None:
    events = _trail()
    plan = plan_redaction(POLICY, list(enumerate(events, 1)))
    rewritten = [plan.changed.get(position, e) for position, e in enumerate(events, 1)]
    assert not [e.type for e in rewritten if CANARY.encode() in encode(e)]
    assert plan.rounds_resealed > 0  # rounds folded the secret: their input digests follow the rewrite
    report = verify_workload("team-a", "web", rewritten)
    assert report.clean and report.rounds > 5 and report.decisions > 10, report.divergence
    # the same policy again: nothing left to rewrite
    assert plan_redaction(POLICY, list(enumerate(rewritten, 1))).changed == {}


async def _stored(store: EventStore, events: list[Envelope]) -> None:
    for envelope in events:
        await store.append([envelope], expected_version=envelope.stream_version - 1)


@pytest.mark.asyncio(loop_scope="session")
async def test_redacting_the_store_rechains_records_it_and_still_catches_other_edits(
    secret_template: None, server_urls: ServerUrls
) -> None:
    events = _trail()
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
            taken = await store.write_checkpoint()
            assert taken is not None
            before = Checkpoint(global_position=taken[0], chain_hash=taken[1].hex(), taken_at=T0)
            forged = msgspec.structs.replace(before, chain_hash="00" * 32)

            result = await redact_trail(store, url, POLICY)

            record = result.record
            assert record is not None and record.policy == POLICY.policy_id
            assert record.chain_before == before.chain_hash and record.chain_after != before.chain_hash
            connection = await asyncpg.connect(asyncpg_url(url))
            try:
                rows = await connection.fetch("SELECT e::text FROM events e")
                assert rows and not [r for r in rows if CANARY in r[0]]
            finally:
                await connection.close()
            reports = await verify_all(store)
            assert reports and all(r.clean for r in reports), [r.divergence for r in reports]

            audit = await audit_log(store, [("checkpoints.jsonl", before)])
            assert audit.findings == [] and len(audit.redactions) == 1 and len(audit.accepted) == 1
            assert POLICY.policy_id in audit.redactions[0]
            # a checkpoint the record does not name is still a mismatch
            audit = await audit_log(store, [("checkpoints.jsonl", forged)])
            assert [f.kind for f in audit.findings] == ["checkpoint-mismatch"]

            # an edit after the redaction, by someone who can switch the guard off, is caught as before
            connection = await asyncpg.connect(asyncpg_url(url))
            try:
                async with connection.transaction():
                    await connection.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
                    await connection.execute(
                        "UPDATE events SET payload = jsonb_set(payload, '{reason}', '\"edited\"')"
                        " WHERE global_position = (SELECT min(global_position) FROM events"
                        " WHERE type = 'RequeueScheduled')"
                    )
                    await connection.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
            finally:
                await connection.close()
            audit = await audit_log(store, [])
            assert [f.kind for f in audit.findings] == ["edited"]
        finally:
            await store.close()


def test_a_rewrite_that_would_change_a_decision_is_refused(secret_template: None) -> None:
    from services.replay.redact import RedactionAborted

    events = _trail()
    # A decision recorded with a value no redaction of the inputs gives: the rewrite cannot keep it exact.
    position, tampered = next(
        (i, e)
        for i, e in enumerate(events)
        if e.type == "PodActionRequested" and e.payload.details  # type: ignore[union-attr]
    )
    details = copy.deepcopy(tampered.payload.details)  # type: ignore[union-attr]
    details["tampered"] = True
    events[position] = msgspec.structs.replace(
        tampered, payload=msgspec.structs.replace(tampered.payload, details=details)
    )
    with pytest.raises(RedactionAborted, match="would not verify"):
        plan_redaction(POLICY, list(enumerate(events, 1)))


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_the_command_redacts_once_names_it_in_audit_verify_and_refuses_without_its_key(
    secret_template: None, server_urls: ServerUrls, tmp_path: Path
) -> None:
    events = _trail()
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            await _stored(store, events)
        finally:
            await store.close()
        key = tmp_path / "key"
        key.write_text("k" * 40)
        settings = Settings(database_url=url, redaction_key_file=str(key), data_dir=str(tmp_path))

        missing = msgspec.structs.replace(settings, redaction_key_file=str(tmp_path / "absent"))
        refused = await asyncio.to_thread(_cli, missing, "audit", "redact")
        assert refused.returncode == 1 and refused.stderr.startswith(
            "rollbook: cannot read the redaction key"
        )
        assert "Traceback" not in refused.stderr

        done = await asyncio.to_thread(_cli, settings, "audit", "redact")
        assert done.returncode == 0 and done.stdout.startswith("redacted "), done.stdout + done.stderr
        again = await asyncio.to_thread(_cli, settings, "audit", "redact")
        assert again.returncode == 0 and "nothing rewritten" in again.stdout, again.stdout + again.stderr
        audit = await asyncio.to_thread(_cli, settings, "audit", "verify", "--no-bus")
        assert audit.returncode == 0 and "redacted " in audit.stdout and "OK:" in audit.stdout, audit.stdout
        verified = await asyncio.to_thread(_cli, settings, "verify", "--all")
        assert verified.returncode == 0, verified.stdout + verified.stderr
