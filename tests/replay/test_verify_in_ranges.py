"""`audit verify` reads a long log in ranges between signed checkpoints, in worker processes at once, and
joins them (services/replay/audit.py, ``_check_ranges``): on a real database, a clean trail is joined
without reading a range again, and tampering at a range's edge (its first row, the checkpoint's row, the
two swapped, a chain rewritten across it) gives exactly the findings of reading the log in one go."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.infra.transparency import trusted_verifiers
from services.model.signed_note import SignedCheckpoint
from services.replay.audit import (
    AuditReport,
    Parallel,
    TrailSources,
    audit_trail,
    plan_ranges,
    read_database_trail,
)
from tests.plugins.database import lose_events_sql
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import CONTENT, SignedTrail, append_rollout, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def trail(server_urls: ServerUrls, tmp_path: Path) -> AsyncIterator[SignedTrail]:
    """900 events and a signed checkpoint, 300 more (one stream going on across it) and another, 300
    more and a third: three ranges, starting after positions 0, 900 and 1200."""
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=3, events=300) as trail:
        await append_rollout(trail.store, "prod/w0", 150, start_version=301)
        await append_rollout(trail.store, "prod/w1", 150, start_version=301)
        assert await trail.checkpointer.checkpoint() is not None
        await append_rollout(trail.store, "prod/w0", 150, start_version=451)
        await append_rollout(trail.store, "prod/w2", 150, start_version=301)
        assert await trail.checkpointer.checkpoint() is not None
        yield trail


async def verify(trail: SignedTrail, processes: int, database_url: str | None = None) -> AuditReport:
    """``audit verify`` of the trail in ``processes`` ranges, the workers connecting to ``database_url``
    (the trail's by default)."""
    notes, keys = await read_database_trail(trail.store)
    sources = TrailSources(
        database_notes=notes,
        external_notes=[],
        database_keys=keys,
        trusted=trusted_verifiers(trail.settings),
        max_age=math.inf,
    )
    store = trail.store
    url = database_url or store.database_url
    parallel = Parallel(url, store.duty, processes, min_events=1) if processes > 1 else None
    return await audit_trail(store, sources, parallel=parallel)


def described(report: AuditReport) -> list[str]:
    return [f.describe() for f in report.findings]


async def test_the_ranges_start_at_signed_checkpoints_and_a_clean_trail_joins(trail: SignedTrail) -> None:
    notes, _ = await read_database_trail(trail.store)
    bodies = [SignedCheckpoint.open(note, trusted_verifiers(trail.settings)).body for note in notes]
    parallel = Parallel(trail.store.database_url, trail.store.duty, 3, min_events=1)
    assert [(r.start_position, r.start_size) for r in plan_ranges(bodies, parallel)] == [
        (0, 0),
        (900, 900),
        (1200, 1200),
    ]
    report = await verify(trail, 3)
    assert report.clean, described(report)
    assert (report.rows, report.ranges_joined, report.ranges_read_again) == (1500, 3, 0)
    assert report.checkpoints_checked == 3


async def test_ranges_whose_workers_fail_are_read_here_with_the_same_report(trail: SignedTrail) -> None:
    """Workers that cannot reach the database (here: a port nothing listens on) fail their ranges; the
    verify reads those ranges itself and reports the trail as one read does, not an error."""
    report = await verify(trail, 3, database_url="postgresql://nobody@127.0.0.1:9/none")
    assert report.clean, described(report)
    assert (report.rows, report.ranges_joined, report.ranges_read_again) == (1500, 0, 3)


async def tamper_edit_first_row(trail: SignedTrail) -> None:
    await trail.owner(
        "UPDATE events SET payload = jsonb_set(payload, '{action_id}', '\"forged\"')"
        " WHERE global_position = 901"
    )


async def tamper_delete_anchor_row(trail: SignedTrail) -> None:
    await trail.owner(*lose_events_sql("global_position = 900"))


async def tamper_swap_across(trail: SignedTrail) -> None:
    columns = CONTENT + ", stream_hash, chain_hash"
    await trail.owner(
        "CREATE TEMP TABLE moved AS SELECT * FROM events WHERE global_position IN (900, 901)",
        "DELETE FROM events WHERE global_position IN (900, 901)",
        f"INSERT INTO events (global_position, {columns}) OVERRIDING SYSTEM VALUE"
        f" SELECT CASE global_position WHEN 900 THEN 901 ELSE 900 END, {columns} FROM moved",
    )


async def tamper_rechain_across(trail: SignedTrail) -> None:
    """An edit before the anchor and every hash after it recomputed by the chain trigger: consistent
    inside the database, caught by the signed checkpoints (and the ranges after it read again)."""
    await trail.owner(
        "CREATE TEMP TABLE rest AS SELECT * FROM events WHERE global_position >= 850",
        *lose_events_sql("global_position >= 850"),
        "UPDATE rest SET payload = jsonb_set(payload, '{action_id}', '\"forged\"')"
        " WHERE global_position = 850",
        "SET session_replication_role = origin",
        "ALTER TABLE events DISABLE TRIGGER events_append_only",
        f"INSERT INTO events (global_position, {CONTENT}) OVERRIDING SYSTEM VALUE"
        f" SELECT global_position, {CONTENT} FROM rest ORDER BY global_position",
        "ALTER TABLE events ENABLE TRIGGER events_append_only",
    )


@pytest.mark.parametrize(
    ("tamper", "kinds", "read_again"),
    [
        (tamper_edit_first_row, {"edited"}, 0),
        (tamper_delete_anchor_row, {"removed", "chain-broken", "checkpoint-mismatch", "truncated"}, 2),
        (tamper_swap_across, {"chain-broken", "checkpoint-mismatch"}, 1),
        (tamper_rechain_across, {"checkpoint-mismatch"}, 2),
    ],
    ids=["edited first row", "deleted anchor row", "swapped across", "rechained across"],
)
async def test_tampering_at_a_range_edge_gives_the_findings_of_one_read(
    trail: SignedTrail, tamper: object, kinds: set[str], read_again: int
) -> None:
    await tamper(trail)  # type: ignore[operator]
    one_read = await verify(trail, 1)
    assert {f.kind for f in one_read.findings} >= kinds, described(one_read)
    in_ranges = await verify(trail, 3)
    assert described(in_ranges) == described(one_read)
    assert in_ranges.rows == one_read.rows
    assert in_ranges.ranges_read_again == read_again
