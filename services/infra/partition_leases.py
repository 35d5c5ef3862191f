"""Partitioned ownership: a service whose work splits by bus partition (the planner) runs on several
replicas at once, each bus partition owned by one replica at a time (docs/services.md, "Running several
replicas").

    await run_owning_partitions(runtime, settings, "planner", acquired=start, dropped=stop)

- **One Lease per partition**, ``rollbook-<service>-p<N>``, acquired and renewed with the election of
  services/infra/leader.py (kubernetes-asyncio's rules: a Lease not renewed for ``leader_lease_duration``
  seconds of the candidate's own clock may be taken over; any error a failed attempt), one attempt per
  partition every ``leader_retry_period``.
- **Stop before expiry.** A partition whose renewal has not succeeded for ``leader_renew_deadline``
  seconds is dropped (its work stopped, cancelled after half of ``lease_duration - renew_deadline``)
  before any other replica may take it; so is one found held by another replica.
- **A fair share.** Each replica holds and renews one member Lease, ``rollbook-<service>-member-<k>`` for k
  < ``partition_member_slots``: it claims the first slot that is free, expired or held under its own
  identity (by the same election; a restarted process with a stable ``ROLLBOOK_INSTANCE`` takes its
  predecessor's slot and partitions back at once, services/infra/leader.py), and lists them to count the
  live replicas (a member Lease is alive while its record changes, by the same rule; one still held under
  its own identity is a dead predecessor's, deleted); a replica finding every slot held by a live replica
  takes no partition and reports itself not ready until one frees up. Every Lease name is thus known in
  advance, so the Role can grant get/update/delete on exactly these names (deploy/base/rbac.yaml); a replica
  takes at most ceil(partitions / live replicas) and hands the ones beyond that over when a replica joins:
  it stops their work, then releases their Leases, so the newcomer takes them at its next attempt. A
  hand-over runs beside the attempts, which go on renewing its Lease until the work has stopped: a slow
  stop neither lets the Lease lapse under running work nor delays the renewals of the partitions kept.
  A replica that leaves cleanly hands every partition over and deletes its member Lease; one that dies stops
  renewing, and the others take its partitions once they expire. A member Lease left by a dead replica is
  deleted after ``STALE_MEMBER_DURATIONS`` lease durations.

Dropping a partition never leaves work running: ``dropped(p, graceful)`` returns only once the
partition's work has stopped. Should two replicas still overlap (a paused process), the work's own
single-writer check (the planner's decisions streams are appended with an expected version) rejects the
second writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.leaderelection.electionconfig import Config

from services.infra import kube
from services.infra.leader import (
    _Election,
    _election_record,
    _Lock,
    candidate_identity,
    release_lease,
)
from services.infra.metrics import LEADER, PARTITIONS_OWNED
from services.infra.runtime import ServiceRuntime
from services.infra.settings import Settings

log = structlog.get_logger("partitions")


def partition_lease_name(service: str, partition: int) -> str:
    return f"rollbook-{service}-p{partition}"


def member_lease_name(service: str, slot: int) -> str:
    return f"rollbook-{service}-member-{slot}"


def partition_lease_names(service: str, partitions: int) -> list[str]:
    """Every partition Lease of ``partitions`` bus partitions: p0 .. p(partitions - 1)."""
    return [partition_lease_name(service, p) for p in range(partitions)]


def member_lease_names(service: str, slots: int) -> list[str]:
    """Every member Lease a replica may claim: member-0 .. member-(slots - 1)."""
    return [member_lease_name(service, k) for k in range(slots)]


def renewals_overdue(
    renewed: Mapping[int, float | None], now: float, deadline: float
) -> tuple[list[int], float]:
    """Of the partitions held (-> when their last successful renewal was sent, None if never), those not
    renewed within ``deadline`` seconds at ``now``, in order, and the seconds until the first of the
    others falls due (``deadline`` when there is none)."""
    overdue = sorted(p for p, at in renewed.items() if at is None or now - at >= deadline)
    due = [at + deadline for p, at in renewed.items() if at is not None and p not in overdue]
    return overdue, min(due, default=now + deadline) - now


def partition_share(partitions: int, live: int) -> int:
    """The most partitions one of ``live`` replicas owns: ceil(partitions / live)."""
    return -(-partitions // max(live, 1))


def partitions_beyond_share(owned: Iterable[int], share: int) -> list[int]:
    """The partitions to release to get down to ``share``: the highest-numbered ones."""
    return sorted(owned)[max(share, 0) :]


@dataclass
class Members:
    """Replicas seen alive through their member Leases. A member Lease counts as alive while its record
    (holder, renewTime) changed less than ``lease_duration`` seconds ago by this process's clock, the
    rule the election itself uses for a holder, so no two machines' clocks are compared. A Lease without
    a holder is not alive."""

    lease_duration: float
    seen: dict[str, tuple[object, float]] = field(default_factory=dict)  # name -> (record, changed at)

    def observe(self, records: Mapping[str, tuple[str | None, object]], now: float) -> None:
        """``records``: every member Lease listed, name -> (holder, renewTime)."""
        for name, record in records.items():
            previous = self.seen.get(name)
            if previous is None or previous[0] != record:
                self.seen[name] = (record, now)
        for name in [n for n in self.seen if n not in records]:
            del self.seen[name]

    def alive(self, now: float) -> set[str]:
        return {
            name
            for name, (record, changed) in self.seen.items()
            if isinstance(record, tuple) and record[0] and now - changed < self.lease_duration
        }

    def stale(self, now: float, after: float) -> list[str]:
        """Member Leases unchanged for ``after`` seconds: their replicas are gone (a crash leaves them)."""
        return sorted(name for name, (_, changed) in self.seen.items() if now - changed >= after)


def predecessor_members(
    records: Mapping[str, tuple[str | None, object]], identity: str, own: str | None
) -> list[str]:
    """Member Leases held under this process's ``identity`` other than the one it holds (``own``): a
    predecessor's of the same ``ROLLBOOK_INSTANCE`` that died holding it, while this process claimed
    another slot. Not a live replica: not counted, and deleted."""
    return sorted(name for name, (holder, _) in records.items() if holder == identity and name != own)


def partitions_to_try(
    partitions: int,
    owned: Iterable[int],
    slots: int,
    *,
    listed: bool,
    may_be_taken: Callable[[int], bool],
) -> list[int]:
    """The partitions not ``owned`` to make an attempt on. None while the share is full (``slots`` <= 0):
    such an attempt could only read the Lease, and the list of the namespace's Leases has observed them
    all (``listed``); with slots free, those the list saw free, expired or ours. Without a list, every one
    not owned, each attempt reading its Lease."""
    free = [p for p in range(partitions) if p not in set(owned)]
    if not listed:
        return free
    if slots <= 0:
        return []
    return [p for p in free if may_be_taken(p)]


Partition = Callable[[int], Coroutine[Any, Any, None]]
Dropped = Callable[[int, bool], Coroutine[Any, Any, None]]

# A member Lease unchanged for this many lease durations belonged to a replica that died: deleted.
STALE_MEMBER_DURATIONS = 10


class PartitionOwner:
    """Owns this process's share of ``settings.bus_partitions`` partitions by Lease (see above).

    ``acquired(p)`` starts the work of partition p; ``dropped(p, graceful)`` stops it and forgets its
    state, ``graceful`` False when the Lease was lost (it must finish within half of ``lease_duration -
    renew_deadline``, before another replica may take the partition; it is cancelled otherwise)."""

    def __init__(
        self,
        runtime: ServiceRuntime,
        settings: Settings,
        service: str,
        api: client.ApiClient,
        *,
        acquired: Partition,
        dropped: Dropped,
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.service = service
        self.api = api
        self.acquired = acquired
        self.dropped = dropped
        self.identity = candidate_identity(settings)
        self.namespace = settings.leader_election_namespace
        self.partitions = settings.bus_partitions
        self.member_slots = {
            name: self._election(name, may_write=None)
            for name in member_lease_names(service, settings.partition_member_slots)
        }
        self.member_name: str | None = None  # the member slot this process holds
        self.members = Members(float(settings.leader_lease_duration))
        self.owned: set[int] = set()
        # Partitions being handed over: their work is stopping, their Leases still renewed until released.
        self.leaving: dict[int, asyncio.Task[None]] = {}
        self._taken = asyncio.Event()  # set when a partition is taken: the watchdog looks at its deadline
        self.live = 1
        self._slots = 0  # partitions this process may still take in the current attempt
        self.elections = {
            p: self._election(
                partition_lease_name(service, p), may_write=functools.partial(self._may_write, p)
            )
            for p in range(self.partitions)
        }

    def _election(self, name: str, *, may_write: Callable[[], bool] | None) -> _Election:
        lock = _Lock(name, self.namespace, self.identity, self.api)
        lock.may_write = may_write

        async def nothing() -> None:
            pass

        config = Config(
            lock,
            lease_duration=self.settings.leader_lease_duration,
            renew_deadline=self.settings.leader_renew_deadline,
            retry_period=self.settings.leader_retry_period,
            onstarted_leading=nothing,
            onstopped_leading=nothing,
        )
        return _Election(config, lock, lambda held, error: None)

    def _may_write(self, partition: int) -> bool:
        """Renew an owned partition; take any other (free, expired, or still held under this process's
        identity by its predecessor) only within the share."""
        if partition in self.owned or partition in self.leaving:
            return True
        if self._slots <= 0 or self.runtime.stopping.is_set():
            return False
        self._slots -= 1
        return True

    @property
    def held(self) -> set[int]:
        """The partitions whose Leases this process renews: owned, or being handed over."""
        return self.owned | set(self.leaving)

    @property
    def share(self) -> int:
        return partition_share(self.partitions, self.live)

    def detail(self) -> dict[str, Any]:
        """``details.partitions`` of /readyz."""
        return {
            "identity": self.identity,
            "member": f"{self.namespace}/{self.member_name}" if self.member_name else None,
            "live_replicas": self.live,
            "share": self.share,
            "owned": sorted(self.owned),
            "handing_over": sorted(self.leaving),
        }

    def _report(self) -> None:
        LEADER.labels(self.service).set(1 if self.owned else 0)
        PARTITIONS_OWNED.labels(self.service).set(len(self.owned))

    async def run(self) -> None:
        """Take, renew and hand over partitions every ``leader_retry_period`` until the service stops;
        then stop the work of every owned partition, release their Leases and leave."""
        self._report()
        log.info("partition_election_started", identity=self.identity, partitions=self.partitions)
        watchdog = asyncio.create_task(self._watch_renewals(), name=f"{self.service}-partition-watchdog")
        try:
            while not self.runtime.stopping.is_set():
                await self._attempt_all()
                try:
                    await asyncio.wait_for(self.runtime.stopping.wait(), self.settings.leader_retry_period)
                except TimeoutError:
                    pass
        finally:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
            for partition in sorted(self.owned):
                self._start_hand_over(partition)
            await asyncio.gather(*self.leaving.values(), return_exceptions=True)
            await self._leave()
            self._report()

    async def _attempt(self, election: _Election) -> bool:
        try:
            return await asyncio.wait_for(
                election.try_acquire_or_renew(), self.settings.leader_renew_deadline
            )
        except TimeoutError:
            return False

    async def _attempt_all(self) -> None:
        """One round of attempts: renew the member Lease and count the live replicas while renewing the
        partitions held (owned or being handed over), start handing over those beyond the share, and try to
        take free ones up to it."""
        held = sorted(self.held)
        member = asyncio.ensure_future(self._member_attempt())
        await asyncio.gather(member, *(self._renew(p) for p in held))
        member_ok, listed = member.result()
        beyond = partitions_beyond_share(self.owned, self.share)
        for partition in beyond:
            log.info("partition_released_to_share", partition=partition, share=self.share, live=self.live)
            self._start_hand_over(partition)
        if member_ok:  # a replica cut off from the API takes nothing new
            self._slots = self.share - len(self.owned)
            free = partitions_to_try(
                self.partitions,
                self.held,
                self._slots,
                listed=listed,
                may_be_taken=lambda p: self.elections[p].may_be_taken(self.identity),
            )
            try:
                await asyncio.gather(*(self._take(p) for p in free))
            finally:
                self._slots = 0
        self._report()

    async def _member_attempt(self) -> tuple[bool, bool]:
        """Renew (or claim) the member Lease and report readiness by it, then list the Leases: whether
        the member Lease is held, and whether the list succeeded."""
        member_ok = await self._renew_member() if self.member_name else await self._claim_member()
        if member_ok:
            self.runtime.set_ready()
        elif self.member_name is None:
            self.runtime.set_ready(
                False,
                f"no member Lease free in {self.namespace}: all {len(self.member_slots)} "
                f"(ROLLBOOK_PARTITION_MEMBER_SLOTS) are held by live replicas",
            )
        else:
            error = self.member_slots[self.member_name].lock.last_error or "the member Lease was not renewed"
            self.runtime.set_ready(
                False, f"cannot reach the Lease {self.namespace}/{self.member_name}: {error}"
            )
        return member_ok, await self._list_leases()

    async def _claim_member(self) -> bool:
        """Take the first member slot that is free or expired (one attempt each, in order)."""
        for name, election in self.member_slots.items():
            if self.runtime.stopping.is_set():
                return False
            if await self._attempt(election):
                self.member_name = name
                log.info("partition_member_claimed", member=f"{self.namespace}/{name}")
                return True
        return False

    async def _renew_member(self) -> bool:
        """Renew the member slot held; one found held by another replica (ours expired) is given up,
        and a slot is claimed again at the next attempt."""
        assert self.member_name is not None
        election = self.member_slots[self.member_name]
        if await self._attempt(election):
            return True
        if election.holder not in (None, self.identity):
            log.warning("partition_member_lost", member=self.member_name, holder=election.holder)
            self.member_name = None
        return False

    async def _list_leases(self) -> bool:
        """List the namespace's Leases (one request, raw JSON): count the live replicas by the member
        Leases, and observe the partition Leases this process does not own, so that it reads one only when
        it may take it (``partitions_to_try``). False when the list failed: the last count is kept, and
        every partition is tried as before."""
        leases = client.CoordinationV1Api(self.api)
        try:
            listed = await kube.raw_json(
                await leases.list_namespaced_lease(
                    self.namespace,
                    _preload_content=False,  # raw JSON: no model, no timestamp parsed
                    _request_timeout=self.settings.leader_renew_deadline,
                )
            )
        except Exception as error:  # keep the last count; the next attempt lists again
            log.warning("member_leases_unreachable", error=repr(error))
            return False
        records: dict[str, tuple[str | None, object]] = {}
        partition_of = {partition_lease_name(self.service, p): p for p in range(self.partitions)}
        held = self.held
        for lease in listed.get("items") or []:
            name = (lease.get("metadata") or {}).get("name")
            spec = lease.get("spec") or {}
            if name in self.member_slots:
                records[name] = (spec.get("holderIdentity"), spec.get("renewTime"))
            elif name in partition_of and partition_of[name] not in held:
                # The held ones are read or renewed by their own attempts (optimistic renewals).
                self.elections[partition_of[name]].observe(_election_record(spec))
        await self._count_members(records)
        return True

    async def _count_members(self, records: dict[str, tuple[str | None, object]]) -> None:
        """``records``: every member Lease listed, name -> (holder, renewTime)."""
        for name in predecessor_members(records, self.identity, self.member_name):
            del records[name]
            await self._delete_member(name)
        now = time.monotonic()
        self.members.observe(records, now)
        alive = self.members.alive(now) | ({self.member_name} if self.member_name else set())
        if len(alive) != self.live:
            log.info(
                "partition_members_changed",
                live=len(alive),
                share=partition_share(self.partitions, len(alive)),
            )
        self.live = len(alive)
        stale_after = STALE_MEMBER_DURATIONS * self.settings.leader_lease_duration
        for name in self.members.stale(now, stale_after):
            if name != self.member_name:
                await self._delete_member(name)

    async def _renew(self, partition: int) -> None:
        election = self.elections[partition]
        if await self._attempt(election):
            return
        if election.holder not in (None, self.identity) and (
            partition in self.owned or partition in self.leaving
        ):
            # Another replica holds it: ours expired before we noticed. Stop at once.
            await self._lose(partition, why=f"held by {election.holder}")

    async def _take(self, partition: int) -> None:
        if not await self._attempt(self.elections[partition]) or partition in self.owned:
            return
        if self.runtime.stopping.is_set():
            return
        self.owned.add(partition)
        self._taken.set()
        log.info("partition_acquired", partition=partition, identity=self.identity)
        await self.acquired(partition)

    async def _watch_renewals(self) -> None:
        """Drop every partition held (owned or being handed over) whose Lease was not renewed for
        ``leader_renew_deadline`` seconds (measured from when the last successful renewal was sent), before
        another replica may take it. It sleeps until the first of their deadlines, or until a partition is
        taken, instead of waking every 0.2 s (each wake-up of an idle service costs CPU)."""
        deadline = self.settings.leader_renew_deadline
        while True:
            self._taken.clear()
            # Until none is overdue: dropping one waits for its work to stop, and the others' deadlines
            # (renewed together, milliseconds apart) may pass meanwhile; sleeping then to the next deadline
            # of the rest would hold them a whole deadline too long, past their Leases.
            while True:
                renewed = {p: self.elections[p].renewed_at for p in self.held}
                overdue, left = renewals_overdue(renewed, time.monotonic(), deadline)
                if not overdue:
                    break
                for partition in overdue:
                    await self._lose(partition, why=f"not renewed within {deadline:g}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._taken.wait(), max(left, 0.01))

    async def _lose(self, partition: int, *, why: str) -> None:
        leaving = self.leaving.pop(partition, None)
        if partition not in self.owned and leaving is None:
            return
        self.owned.discard(partition)
        self._report()
        log.error("partition_lost", partition=partition, identity=self.identity, detail=why)
        if leaving is not None:  # its graceful stop is cut short: the work stops now
            leaving.cancel()
            await asyncio.gather(leaving, return_exceptions=True)
        grace = max(self.settings.leader_lease_duration - self.settings.leader_renew_deadline, 0.0) / 2
        try:
            await asyncio.wait_for(self.dropped(partition, False), grace)
        except TimeoutError:
            log.warning("partition_work_cancelled", partition=partition, grace_seconds=grace)

    def _start_hand_over(self, partition: int) -> None:
        """Hand ``partition`` over in a task of its own; its Lease is renewed meanwhile (``leaving``)."""
        if partition not in self.owned:
            return
        self.owned.discard(partition)
        self._report()
        self.leaving[partition] = asyncio.create_task(
            self._hand_over(partition), name=f"{self.service}-hand-over-p{partition}"
        )

    async def _hand_over(self, partition: int) -> None:
        """Stop the partition's work, then release its Lease for another replica to take at once. A lost
        Lease (``_lose``) cancels this and stops the work itself."""
        try:
            await self.dropped(partition, True)
        except Exception:  # the work is gone with its error; the Lease is released all the same
            log.exception("partition_hand_over_failed", partition=partition)
        if self.leaving.get(partition) is not asyncio.current_task():
            return
        # No longer renewed from here (``_may_write``); a renewal in flight makes the release read again.
        del self.leaving[partition]
        await release_lease(
            self.api,
            self.namespace,
            partition_lease_name(self.service, partition),
            self.identity,
            timeout=self.settings.leader_renew_deadline,
        )

    async def _delete_member(self, name: str) -> None:
        try:
            await client.CoordinationV1Api(self.api).delete_namespaced_lease(
                name, self.namespace, _request_timeout=self.settings.leader_renew_deadline
            )
            log.info("member_lease_deleted", lease=f"{self.namespace}/{name}")
        except Exception as error:  # best effort: the next attempt tries again
            log.debug("member_lease_delete_failed", lease=name, error=repr(error))

    async def _leave(self) -> None:
        if self.member_name is not None:
            await self._delete_member(self.member_name)
            self.member_name = None


async def run_owning_partitions(
    runtime: ServiceRuntime, settings: Settings, service: str, *, acquired: Partition, dropped: Dropped
) -> None:
    """Run the work of the partitions this process owns (``PartitionOwner``) until the service stops;
    with ``leader_election`` off, own every partition."""
    if not settings.leader_election:
        LEADER.labels(service).set(1)
        PARTITIONS_OWNED.labels(service).set(settings.bus_partitions)
        try:
            for partition in range(settings.bus_partitions):
                await acquired(partition)
            runtime.set_ready()
            await runtime.stopping.wait()
        finally:
            for partition in range(settings.bus_partitions):
                await dropped(partition, True)
            LEADER.labels(service).set(0)
            PARTITIONS_OWNED.labels(service).set(0)
        return
    api = await kube.api_client(settings, group=kube.LEADER_ELECTION_GROUP)
    try:
        owner = PartitionOwner(runtime, settings, service, api, acquired=acquired, dropped=dropped)
        runtime.add_detail("partitions", owner.detail)
        await owner.run()
    finally:
        await api.close()
