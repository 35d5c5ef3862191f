"""`rollbook archive` round trip on a real database: months recorded in the past written to files and
dropped (one run crashing before its drop first), the log verified across the archive as one chain with
its signed checkpoints, a rollout in the archived months replayed and re-planned from the files, streams
going on after their archived versions; and each kind of tampering with the files named."""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from services.cli.replay import verify_trail
from services.infra import archive as archive_module
from services.infra.archive import (
    MANIFEST,
    ArchivedEventStore,
    ArchiveError,
    ArchiveOutcome,
    archive_before,
    read_manifest,
)
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.transparency import checkpointer_for, trusted_verifiers
from services.model.event_store import ConcurrencyError
from services.replay.audit import AuditReport
from services.replay.operations import replay_lines, what_if_rollout
from tests.infra.partition_helpers import (
    envelope,
    filler,
    fixture_trail,
    insert_recorded,
    month_start,
    old_partition,
)
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]

ARCHIVED_STREAM = "CloneSet/arch/full/actions"  # every event of it is archived
LIVE = 40


@dataclass
class Archived:
    url: str
    store: EventStore
    settings: Settings
    directory: Path
    workload: str
    rollout: str
    total: int
    replay_before: list[str]
    what_if_before: Any
    runs: list[ArchiveOutcome]

    async def verify(self, directory: Path | None) -> AuditReport:
        report: AuditReport = await verify_trail(
            self.store, self.settings, trusted_verifiers(self.settings), bus=False, archive=directory
        )
        return report


@pytest.fixture(scope="module")
async def archived(
    server_urls: ServerUrls, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Archived]:
    """Long ago (a month no partition covers: the default partition) one event; three months ago: a
    recorded CloneSet trail and a filler stream (300 events); two months ago, 300 more; then one event
    recorded three months ago that committed after them (its transaction began before the month ended);
    this month, a few live ones. Signed checkpoint; archived twice."""
    data_dir = tmp_path_factory.mktemp("archive")
    async with fresh_database(server_urls.database_url, prefix="rollbook_archive") as url:
        await upgrade_async(url)
        owner = await asyncpg.connect(asyncpg_url(url))
        store = await EventStore.connect(url)
        settings = Settings(
            data_dir=str(data_dir),
            database_url=url,
            audit_key_name="test.rollbook/log",
            audit_checkpoint_dir=str(data_dir / "audit" / "checkpoints"),
        )
        try:
            # Before all: one event of a month no partition covers, in the default partition.
            await insert_recorded(owner, filler("arch/ancient", 1), month_start(12 * 30))
            await old_partition(owner, 3)
            await old_partition(owner, 2)
            workload, trail = fixture_trail()
            rollout = next(e["payload"]["rollout_id"] for e in trail if e["type"] == "RolloutStarted")
            await insert_recorded(owner, trail, month_start(3) + timedelta(days=1))
            await insert_recorded(
                owner, filler("arch/full", 300 - len(trail)), month_start(3) + timedelta(days=2)
            )
            await insert_recorded(owner, filler("arch/next", 300), month_start(2) + timedelta(days=1))
            await insert_recorded(owner, filler("arch/straggler", 1), month_start(2) - timedelta(seconds=1))
            live = [envelope(e) for e in filler("live/now", LIVE)]
            await store.append_many(live)
            # A stored round input for the archived rollout's round, and one for a live event: archiving
            # removes the first with its round and keeps the other.
            started = next(e for e in trail if e["type"] == "RolloutStarted")
            await store.store_round_input(uuid.UUID(str(started["causation_id"])), b"{}")
            await store.store_round_input(live[0].event_id, b"{}")
            assert await checkpointer_for(store, settings, None).checkpoint() is not None
            namespace, name = workload.split("/")
            replay_before = await replay_lines(store, workload)
            what_if_before = await what_if_rollout(store, rollout, {"maxUnavailable": "100%"})
            directory = data_dir / "archive"

            async def crash(*_: object) -> dict[str, int]:
                raise ArchiveError("crashed before the drop")

            original = archive_module._drop
            archive_module._drop = crash  # type: ignore[assignment]
            try:
                with pytest.raises(ArchiveError):
                    await archive_before(url, month_start(2), directory)
            finally:
                archive_module._drop = original  # type: ignore[assignment]
            assert await owner.fetchval("SELECT count(*) FROM events") == 602 + LIVE, "nothing dropped"
            runs = [
                await archive_before(url, month_start(2), directory),
                await archive_before(url, month_start(0), directory),
                await archive_before(url, month_start(0), directory),
            ]
            yield Archived(
                url,
                store,
                settings,
                directory,
                workload,
                rollout,
                602 + LIVE,
                replay_before,
                what_if_before,
                runs,
            )
        finally:
            await store.close()
            await owner.close()


async def test_whole_blocks_before_the_first_later_position_are_archived_and_dropped(
    archived: Archived,
) -> None:
    first, second, again = archived.runs
    # Run 1 (months 3 back, and the default partition): stops before position 302 (two months back), on a
    # 256-event block; the default partition is put back empty.
    assert (first.first_position, first.last_position, first.events) == (1, 256, 256)
    assert set(first.kept) == {f"events_y{month_start(3).year:04d}m{month_start(3).month:02d}"}
    # Run 2: both months, up to the last whole block before this month's first position (603).
    assert (second.first_position, second.last_position, second.events) == (257, 512, 256)
    assert sum(second.kept.values()) == 602 - 512  # 513-601 two months back, the straggler (602)
    assert again.events == 0 and again.reason
    manifest = read_manifest(archived.directory)
    assert [s.file for s in manifest.segments] == [first.file, second.file]
    assert sorted(p.name for p in archived.directory.iterdir()) == sorted(
        [MANIFEST, first.file or "", second.file or ""]
    )
    owner = await asyncpg.connect(asyncpg_url(archived.url))
    try:
        assert await owner.fetchval("SELECT min(global_position) FROM events") == 513
        assert await owner.fetchval("SELECT count(*) FROM event_partitions WHERE is_default") == 1
        # The partitions put back carry the statistics the views' lookups are planned with (migration 0030).
        put_back = {"events_default", *first.kept, *second.kept}
        statistics = await owner.fetch(
            "SELECT c.relname, count(s.oid) AS n FROM pg_class c"
            " LEFT JOIN pg_statistic_ext s ON s.stxrelid = c.oid"
            " WHERE c.relname = ANY($1::text[]) GROUP BY c.relname",
            list(put_back),
        )
        assert {r["relname"]: r["n"] for r in statistics} == dict.fromkeys(put_back, 2)
        assert await owner.fetchval("SELECT count(*) FROM events") == archived.total - 512
        # The archived round's stored input went with it; the live one stays.
        kept = await owner.fetch("SELECT round_event_id FROM round_inputs")
        first_live = await owner.fetchval(
            "SELECT event_id FROM events WHERE stream = 'CloneSet/live/now/actions' AND stream_version = 1"
        )
        assert [r["round_event_id"] for r in kept] == [first_live]
    finally:
        await owner.close()


async def test_the_log_verifies_across_the_archive_and_not_without_it(archived: Archived) -> None:
    across = await archived.verify(archived.directory)
    assert across.clean, [f.describe() for f in across.findings]
    assert across.rows == archived.total and across.checkpoints_checked >= 1
    alone = await archived.verify(None)
    assert [f.kind for f in alone.findings] == ["archived"]
    assert "--archive" in alone.findings[0].detail


async def test_an_archived_rollout_replays_and_replans_from_the_files(archived: Archived) -> None:
    combined = ArchivedEventStore(archived.store, archived.directory)
    assert await replay_lines(combined, archived.workload) == archived.replay_before
    after = await what_if_rollout(combined, archived.rollout, {"maxUnavailable": "100%"})
    assert after == archived.what_if_before
    with pytest.raises(Exception, match="no events"):
        await replay_lines(archived.store, archived.workload)  # the database alone no longer has it


async def test_a_stream_goes_on_after_its_archived_events(archived: Archived) -> None:
    head = await archived.store.stream_version(ARCHIVED_STREAM)
    assert head == 300 - len(fixture_trail()[1])
    nxt = filler("arch/full", 1, start_version=head + 1)[0]
    result = await archived.store.append([envelope(nxt)], expected_version=head)
    assert result.stream_version == head + 1
    # An auditor started now loads the tree whose blocks reach into the archive, and signs on.
    signed = await checkpointer_for(archived.store, archived.settings, None).checkpoint()
    assert signed is not None and signed.body.tree_size == archived.total + 1
    report = await archived.verify(archived.directory)
    assert report.clean and report.rows == archived.total + 1, [f.describe() for f in report.findings]
    archived.total += 1


async def test_a_redelivered_archived_event_is_recognised_as_stored(archived: Archived) -> None:
    """An event whose partition was archived is redelivered (a bus replay, a watcher's resend): every
    idempotent append skips it as stored, none stores it twice, and a different event cannot take its
    version. Its key stayed in event_keys (0028) when its partition was dropped."""
    _, trail = fixture_trail()
    redelivered = [envelope(e) for e in trail[-3:]]
    ids = [e.event_id for e in redelivered]
    store = archived.store
    assert not await store.query("SELECT 1 FROM events WHERE event_id = ANY($1::uuid[])", ids), "archived"
    assert await store.stored_ids(ids) == set(ids)
    assert await store.append_many(redelivered) == 0
    unversioned = await store.append_unversioned(redelivered)
    assert sum(r.appended for r in unversioned) == 0
    assert sum(r.skipped for r in unversioned) == len(redelivered)
    last = redelivered[-1]
    again = await store.append([last], expected_version=last.stream_version - 1)
    assert (again.appended, again.skipped) == (0, 1)
    with pytest.raises(ConcurrencyError):
        await store.append_many([msgspec.structs.replace(last, event_id=uuid.uuid4())])
    report = await archived.verify(archived.directory)
    assert report.clean and report.rows == archived.total, [f.describe() for f in report.findings]


def _lines(path: Path) -> list[bytes]:
    return gzip.decompress(path.read_bytes()).splitlines()


def _rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n", mtime=0))


def _edit_payload(path: Path) -> None:
    lines = _lines(path)
    lines[10] = lines[10].replace(b'"PodActionSucceeded"', b'"PodActionSucceeded", "forged": true', 1)
    if lines[10] == _lines(path)[10]:
        lines[10] = lines[10].replace(b'"payload":{', b'"payload":{"forged":true,', 1)
    _rewrite(path, lines)


def _remove_line(path: Path) -> None:
    lines = _lines(path)
    del lines[20]
    _rewrite(path, lines)


def _reorder(path: Path) -> None:
    lines = _lines(path)
    lines[30], lines[31] = lines[31], lines[30]
    _rewrite(path, lines)


def _wrong_manifest(directory: Path) -> None:
    manifest = read_manifest(directory)
    manifest.segments[0].events -= 1
    (directory / MANIFEST).write_bytes(msgspec.json.encode(manifest))


TAMPERING = {
    "edited-payload": (lambda d, f: _edit_payload(d / f), {"edited", "archive-file-changed"}),
    "removed-line": (lambda d, f: _remove_line(d / f), {"archive-count", "archive-file-changed"}),
    "reordered-lines": (lambda d, f: _reorder(d / f), {"archive-file-changed"}),
    "wrong-manifest": (lambda d, f: _wrong_manifest(d), {"archive-manifest-mismatch"}),
    "missing-file": (lambda d, f: (d / f).unlink(), {"archive-missing"}),
}


@pytest.mark.parametrize("tampering", sorted(TAMPERING))
async def test_tampering_with_the_archive_is_named(
    archived: Archived, tmp_path: Path, tampering: str
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(archived.directory, copy)
    first = read_manifest(copy).segments[0].file
    tamper, expected = TAMPERING[tampering]
    tamper(copy, first)
    report = await archived.verify(copy)
    kinds = {f.kind for f in report.findings}
    assert expected <= kinds, [f.describe() for f in report.findings]
    if tampering in ("edited-payload", "removed-line", "reordered-lines"):
        # The event itself is named, in its file.
        named = [f for f in report.findings if f.kind in ("edited", "chain-broken", "reordered", "removed")]
        assert named and all(first in f.detail and f.global_position for f in named), [
            f.describe() for f in report.findings
        ]


async def test_the_commands_run_against_the_archive_and_refuse_bad_input(archived: Archived) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment |= {"ROLLBOOK_DATABASE_URL": archived.url, "ROLLBOOK_DATA_DIR": archived.settings.data_dir}

    def rollbook(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli.main", *args],
            env=environment, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    verified = await asyncio.to_thread(
        rollbook, "audit", "verify", "--no-bus", "--archive", str(archived.directory)
    )
    assert verified.returncode == 0 and verified.stdout.startswith("OK:"), verified.stdout + verified.stderr
    again = await asyncio.to_thread(
        rollbook, "archive", "--before", "2000-01-01", "--to", str(archived.directory)
    )
    assert again.returncode == 0 and "nothing archived" in again.stdout, again.stderr
    replayed = await asyncio.to_thread(
        rollbook, "replay", archived.workload, "--archive", str(archived.directory)
    )
    assert replayed.returncode == 0 and replayed.stdout.splitlines() == archived.replay_before
    # history reads the database only, and says that the workload's earlier events are in the archive.
    history = await asyncio.to_thread(rollbook, "history", archived.workload)
    note = f"earlier events of {archived.workload} were archived and are not shown"
    assert note in " ".join(history.stdout.split()) and "Traceback" not in history.stderr, history.stdout
    live = await asyncio.to_thread(rollbook, "history", "live/now")
    assert "were archived" not in live.stdout + live.stderr, live.stdout
    bad = await asyncio.to_thread(rollbook, "archive", "--before", "last tuesday", "--to", "x")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr and "Traceback" not in bad.stderr
    missing = await asyncio.to_thread(
        rollbook, "replay", archived.workload, "--archive", "/nonexistent/archive"
    )
    assert (
        missing.returncode == 1 and "holds no archive" in missing.stderr and "Traceback" not in missing.stderr
    )
