"""The pure rules of partitioned ownership (services/infra/partition_leases.py): a replica's fair share,
which partitions it hands over, and which replicas count as alive by their member Leases."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace
from typing import Any

import pytest

from services.infra.partition_leases import (
    Members,
    PartitionOwner,
    partition_share,
    partitions_beyond_share,
    partitions_to_try,
    renewals_overdue,
)
from services.infra.settings import Settings


@pytest.mark.parametrize(
    ("partitions", "live", "share"),
    [(16, 1, 16), (16, 2, 8), (16, 3, 6), (16, 5, 4), (16, 16, 1), (16, 17, 1), (16, 0, 16), (1, 2, 1)],
)
def test_a_replica_takes_at_most_ceil_partitions_over_live_replicas(
    partitions: int, live: int, share: int
) -> None:
    assert partition_share(partitions, live) == share


def test_shares_of_the_live_replicas_cover_every_partition() -> None:
    for live in range(1, 20):
        assert partition_share(16, live) * live >= 16


@pytest.mark.parametrize(
    ("owned", "share", "released"),
    [
        ({0, 1, 2, 3}, 4, []),
        ({0, 1, 2, 3}, 8, []),
        (set(range(16)), 8, list(range(8, 16))),
        ({3, 9, 12, 1}, 2, [9, 12]),
        ({5}, 0, [5]),
    ],
)
def test_the_highest_numbered_partitions_beyond_the_share_are_handed_over(
    owned: set[int], share: int, released: list[int]
) -> None:
    assert partitions_beyond_share(owned, share) == released


@pytest.mark.parametrize(
    ("renewed", "now", "overdue", "left"),
    [
        # Deadline 10 s: renewed at 95 and 98, at 100: none overdue; the first falls due at 105.
        ({1: 95.0, 2: 98.0}, 100.0, [], 5.0),
        # Renewed at 90 (due exactly now) or never: dropped; the others still count for the wait.
        ({3: 90.0, 1: None, 2: 98.0}, 100.0, [1, 3], 8.0),
        # Nothing held: look again a whole deadline later (a partition taken meanwhile wakes it).
        ({}, 100.0, [], 10.0),
    ],
)
def test_partitions_not_renewed_within_the_deadline_are_dropped_and_the_next_is_waited_for(
    renewed: dict[int, float | None], now: float, overdue: list[int], left: float
) -> None:
    assert renewals_overdue(renewed, now, 10.0) == (overdue, left)


def test_a_member_is_alive_while_its_lease_changes_within_the_lease_duration() -> None:
    members = Members(lease_duration=4.0)
    members.observe({"m-a": ("a", "t1"), "m-b": ("b", "t1")}, now=100.0)
    assert members.alive(101.0) == {"m-a", "m-b"}
    members.observe({"m-a": ("a", "t2"), "m-b": ("b", "t1")}, now=103.0)  # b stopped renewing at 100
    assert members.alive(104.5) == {"m-a"}  # a changed at 103: alive; b unchanged since 100: gone
    members.observe({"m-a": ("a", "t3"), "m-b": ("b", "t2")}, now=105.0)  # b renews again
    assert members.alive(105.0) == {"m-a", "m-b"}


def test_a_released_member_is_not_alive_and_a_deleted_one_is_forgotten() -> None:
    members = Members(lease_duration=4.0)
    members.observe({"m-a": (None, "t1"), "m-b": ("b", "t1")}, now=0.0)
    assert members.alive(1.0) == {"m-b"}
    members.observe({"m-a": (None, "t1")}, now=2.0)
    assert members.alive(2.0) == set()
    assert set(members.seen) == {"m-a"}


def test_member_leases_unchanged_for_long_are_stale() -> None:
    members = Members(lease_duration=4.0)
    members.observe({"m-a": ("a", "t1"), "m-b": ("b", "t1")}, now=0.0)
    members.observe({"m-a": ("a", "t2"), "m-b": ("b", "t1")}, now=30.0)
    assert members.stale(40.0, after=40.0) == ["m-b"]
    assert members.stale(39.0, after=40.0) == []


@pytest.mark.parametrize(
    ("owned", "slots", "listed", "takeable", "tried"),
    [
        ({0, 1}, 0, True, {2, 3}, []),  # at its share: nothing to read, the list observed them
        ({0, 1}, 0, False, {2, 3}, [2, 3]),  # no list this attempt: read each as before
        ({0, 1}, 2, True, {3}, [3]),  # room for two: only the one the list saw free or expired
        ({0, 1}, 2, True, set(), []),
        (set(), 4, True, {0, 1, 2, 3}, [0, 1, 2, 3]),
        (set(), 4, False, set(), [0, 1, 2, 3]),
    ],
)
def test_a_replica_reads_a_partition_lease_it_does_not_own_only_when_it_could_take_it(
    owned: set[int], slots: int, listed: bool, takeable: set[int], tried: list[int]
) -> None:
    assert partitions_to_try(4, owned, slots, listed=listed, may_be_taken=takeable.__contains__) == tried


@pytest.mark.asyncio
async def test_partitions_that_fall_due_while_another_is_dropped_are_dropped_at_their_deadline() -> None:
    """Partitions renewed together fall due milliseconds apart; dropping the first waits for its work to
    stop. The watchdog drops the next ones then, not a whole deadline later (past their Leases, when
    another replica may already work on them)."""
    deadline, stop_takes = 0.5, 0.05
    owner = PartitionOwner.__new__(PartitionOwner)
    owner.settings = Settings(leader_renew_deadline=deadline, leader_lease_duration=1.5)
    started = time.monotonic()
    renewals: Any = {p: SimpleNamespace(renewed_at=started + 0.005 * p) for p in range(3)}
    owner.elections = renewals  # only their renewal times are read
    owner.owned, owner.leaving, owner._taken = {0, 1, 2}, {}, asyncio.Event()
    lost: dict[int, float] = {}
    all_lost = asyncio.Event()

    async def lose(partition: int, *, why: str) -> None:
        owner.owned.discard(partition)
        await asyncio.sleep(stop_takes)  # its work stopping
        lost[partition] = time.monotonic()
        if len(lost) == 3:
            all_lost.set()

    owner._lose = lose  # type: ignore[method-assign]
    watchdog = asyncio.create_task(owner._watch_renewals())
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_lost.wait(), 3 * deadline)
    finally:
        watchdog.cancel()
    due = {p: started + 0.005 * p + deadline for p in range(3)}
    # Each dropped after its deadline, and within the drops before it (not a deadline later).
    assert sorted(lost) == [0, 1, 2]
    assert all(due[p] <= lost[p] <= due[p] + 3 * stop_takes + 0.1 for p in lost), {
        p: round(lost[p] - due[p], 3) for p in lost
    }
