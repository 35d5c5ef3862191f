"""Leader election for the services that must work one at a time (planner, watcher): a process does the
service's work only while it holds the service's ``coordination.k8s.io/v1`` Lease (``rollbook-planner``,
``rollbook-watcher``), so several replicas can run and the others stand by (docs/services.md, "Running
several replicas").

    await run_while_leading(runtime, settings, "planner", work)   # work: the service's loop

The election is kubernetes-asyncio's ``leaderelection`` (``LeaderElection`` on a ``LeaseLock``): a
candidate creates the Lease or, once the holder has not renewed it for ``leader_lease_duration`` seconds
of the candidate's own clock, takes it over with an update carrying the resourceVersion it read (a
conflict means someone else won); the holder renews every ``leader_retry_period`` seconds. Around it this
module adds what the library leaves out:

- **Errors are failed attempts.** The library counts only an ``ApiException`` as one; a refused
  connection or a timeout would escape its loop. Here any error is a failed attempt, retried.
- **A renewal deadline that cannot hang.** The library makes its API calls without a timeout, so one
  hung renewal would keep the holder working after its Lease expired and a standby took over. A watchdog
  declares the leadership lost once no renewal succeeded for ``leader_renew_deadline`` seconds (measured
  from when the last successful renewal was sent), which is before any standby may take over.
- **Lost means stop, then exit.** On loss the work is asked to stop (the clean shutdown path: consumers
  stop fetching, the message or append in hand finishes), cancelled if it has not stopped within half of
  ``lease_duration - renew_deadline``, and ``LeadershipLost`` is raised: the process exits 1 and its
  supervisor (``rollbook up``, Kubernetes, Compose) starts it again as a candidate, as controller-runtime
  does. Re-entering the election in-process would have to prove every piece of the old leader's state
  gone; a fresh process proves it.
- **Release on a clean stop** (client-go's ``ReleaseOnCancel``): after the work stopped on SIGTERM, or
  ended with an error, the holder clears ``holderIdentity`` so a standby takes over on its next attempt
  instead of waiting for the Lease to expire.

A process's identity (``holderIdentity``) is ``ROLLBOOK_INSTANCE`` when set: a name stable across
restarts of the same replica slot (the pod's name, which a container restart keeps; the supervisor's
``<supervisor>/<child>``), never held by two live processes at once. A restarted process that finds the
Lease still held under its own name (its predecessor was killed, or exited on a lost Lease) renews it at
once, as client-go does, instead of waiting ``leader_lease_duration`` for it to expire: the predecessor
has exited, so nobody else works under that name. Without it the identity is ``<hostname>/<pid>/<random>``
(the random part keeps two containers that share a hostname, Compose's ``network_mode: service:…``, and
both run as pid 1 apart), and a restart waits for the Lease to expire.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import structlog
from dateutil import parser as dateutil_parser
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection.electionconfig import Config
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from services.infra import kube
from services.infra.metrics import LEADER
from services.infra.runtime import ServiceRuntime
from services.infra.settings import Settings

log = structlog.get_logger("leader")

Work = Callable[[], Coroutine[Any, Any, None]]


class LeadershipLost(Exception):
    """The Lease was not renewed in time, or another process holds it: the work was stopped."""


def lease_name(service: str) -> str:
    return f"rollbook-{service}"


def lease_identity(instance: str, *, hostname: str, pid: int, token: str) -> str:
    """The ``holderIdentity`` this process writes into Leases: ``instance`` (``ROLLBOOK_INSTANCE``, stable
    across restarts of one replica slot) when given, else ``<hostname>/<pid>/<token>``, new at each start."""
    instance = instance.strip()
    return instance if instance else f"{hostname}/{pid}/{token}"


def candidate_identity(settings: Settings) -> str:
    return lease_identity(
        settings.instance, hostname=socket.gethostname(), pid=os.getpid(), token=uuid.uuid4().hex[:8]
    )


class _Lock(LeaseLock):
    """The library's Lease lock, remembering why the last read failed (anything but 404 means this process
    cannot currently take the Lease over: it is reported in /readyz). ``may_write``, when set, is asked
    before every write (create, take over, renew): False leaves the Lease alone, so a caller can watch a
    Lease without taking it (services/infra/partition_leases.py, at its share of the partitions). It is
    asked for a renewal too: a Lease held under this process's identity may be its predecessor's
    (``ROLLBOOK_INSTANCE``), and taking that one back counts like taking any other.

    The Lease is read and written as raw JSON (``kube.request_json``: same client, rate limit and
    metrics), the election record made from it as the library makes it from its ``V1Lease`` model. A
    planner renews 17 Leases every ``leader_retry_period``, and the generated methods' models (every
    timestamp of the object parsed by dateutil, then serialised back) were most of a renewal's CPU."""

    last_error: str | None = None
    may_write: Callable[[], bool] | None = None
    lease_object: dict[str, Any] | None = None  # the Lease as last read or written: the next update's body
    # The last write (create, renewal, take-over) succeeded: the next attempt renews on top of the Lease as
    # written without reading it first (client-go's optimistic renewal). A write by anyone else since then
    # changed its resourceVersion, so that renewal fails (409) and the attempt after it reads the Lease.
    written: bool = False

    def __init__(self, name: str, namespace: str, identity: str, api: client.ApiClient) -> None:
        super().__init__(name, namespace, identity, api)
        self.api = api

    async def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if self.may_write is not None and not self.may_write():
            return False
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": self._spec(election_record, {}),
        }
        try:
            self.lease_object = await kube.request_json(self.api, "POST", _lease_path(namespace), body)
            self.written = True
        except ApiException as error:
            if error.status != 409:  # created by another candidate first: no news
                log.warning("leader_lease_create_failed", lease=f"{namespace}/{name}", status=error.status)
            return False
        return True

    async def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.may_write is not None and not self.may_write():
            return False
        lease = self.lease_object
        assert lease is not None  # read by the attempt before it updates
        # The object as read (its resourceVersion makes a concurrent take-over a 409), with the record.
        body = {**lease, "spec": self._spec(updated_record, lease.get("spec") or {})}
        try:
            self.lease_object = await kube.request_json(self.api, "PUT", _lease_path(namespace, name), body)
            self.written = True
        except ApiException as error:
            if error.status != 409:  # a conflict is another candidate winning: no news
                log.warning("leader_lease_update_failed", lease=f"{namespace}/{name}", status=error.status)
            return False
        return True

    async def get(self, name: str, namespace: str) -> Any:
        if self.written and self.lease_object is not None:
            self.written = False  # set again only by this attempt's successful write
            return True, _election_record(self.lease_object.get("spec") or {})
        try:
            lease = await kube.request_json(self.api, "GET", _lease_path(namespace, name))
        except ApiException as error:
            self.last_error = (
                None
                if error.status == 404
                else f"reading Lease {namespace}/{name}: HTTP {error.status} {error.reason}"
            )
            return False, error
        self.lease_object = lease
        self.last_error = None
        return True, _election_record(lease.get("spec") or {})

    def _spec(self, record: Any, current: dict[str, Any]) -> dict[str, Any]:
        """The Lease spec carrying ``record``, as the library's ``update_lease`` writes it (the rest of the
        current spec, such as ``leaseTransitions``, kept)."""
        spec = dict(current)
        spec["holderIdentity"] = record.holder_identity
        spec["leaseDurationSeconds"] = int(record.lease_duration)
        for field, value in (("acquireTime", record.acquire_time), ("renewTime", record.renew_time)):
            written = self.time_str_to_iso(value)
            if written:
                spec[field] = written
        return spec


def _lease_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return path if name is None else f"{path}/{quote(name, safe='')}"


def _election_record(spec: dict[str, Any]) -> LeaderElectionRecord:
    """What ``LeaseLock.election_record`` makes of the Lease's spec: times as ``str`` of a naive UTC
    datetime (the library compares and re-parses them in that form)."""
    record = LeaderElectionRecord(None, None, None, None)
    if spec.get("holderIdentity"):
        record.holder_identity = spec["holderIdentity"]
    if spec.get("leaseDurationSeconds"):
        record.lease_duration = str(spec["leaseDurationSeconds"])
    if spec.get("acquireTime"):
        record.acquire_time = _record_time(spec["acquireTime"])
    if spec.get("renewTime"):
        record.renew_time = _record_time(spec["renewTime"])
    return record


def _record_time(text: str) -> str:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:  # an RFC 3339 form Python does not read: as the generated client parses it
        moment = dateutil_parser.parse(text)
    return str(moment.replace(tzinfo=None))


class _Election(LeaderElection):
    """The library's elector with any error counted as a failed attempt, the time the last successful
    acquire/renew was sent (for the watchdog), and holder changes logged."""

    def __init__(self, config: Config, lock: _Lock, on_attempt: Callable[[bool, str | None], None]) -> None:
        super().__init__(config)
        self.lock = lock
        self.renewed_at: float | None = None  # time.monotonic() when the last successful write was sent
        self.holder: str | None = None
        self._on_attempt = on_attempt

    def observe(self, record: LeaderElectionRecord) -> None:
        """Take ``record`` as read from the Lease by other means (a list of the namespace's Leases), by
        the library's rule: a record that changed restarts the lease duration on this process's clock."""
        observed = self.observed_record
        if observed is None or record.__dict__ != observed.__dict__:
            self.observed_record = record
            self.observed_time_milliseconds = int(time.time() * 1000)
        if record.holder_identity != self.holder:
            log.info(
                "leader_changed",
                lease=f"{self.lock.namespace}/{self.lock.name}",
                holder=record.holder_identity,
            )
            self.holder = record.holder_identity

    def may_be_taken(self, identity: str) -> bool:
        """Whether an attempt could take the Lease as last observed: never observed (perhaps absent: it
        is created), free, held under ``identity`` (a predecessor's), or unchanged for the lease
        duration. False only when another holder renewed it within the lease duration, where an attempt
        would read it and give up."""
        record = self.observed_record
        if record is None or not record.holder_identity or record.holder_identity == identity:
            return True
        expires = self.observed_time_milliseconds + self.election_config.lease_duration * 1000
        return expires <= int(time.time() * 1000)

    async def try_acquire_or_renew(self) -> bool:
        sent = time.monotonic()
        error: str | None
        try:
            held = await super().try_acquire_or_renew()
            error = self.lock.last_error
        except Exception as failure:  # connection refused, timeout, a body that is not JSON: retried
            held, error = False, repr(failure)
        if held:
            self.renewed_at = sent
        record = self.observed_record
        holder = record.holder_identity if record is not None else None
        if holder != self.holder:
            log.info("leader_changed", lease=f"{self.lock.namespace}/{self.lock.name}", holder=holder)
            self.holder = holder
        if error is not None:
            log.warning(
                "leader_lease_unreachable", lease=f"{self.lock.namespace}/{self.lock.name}", error=error
            )
        self._on_attempt(held, error)
        return held


class LeaderElector:
    """Campaign for ``rollbook-<service>`` and run the work while holding it (see the module docstring)."""

    def __init__(
        self, runtime: ServiceRuntime, settings: Settings, service: str, api: client.ApiClient
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.service = service
        self.api = api
        self.identity = candidate_identity(settings)
        self.namespace = settings.leader_election_namespace
        self.name = lease_name(service)
        self.leading = False
        self.lost = False
        self._acquired = asyncio.Event()
        lock = _Lock(self.name, self.namespace, self.identity, api)
        config = Config(
            lock,
            lease_duration=settings.leader_lease_duration,
            renew_deadline=settings.leader_renew_deadline,
            retry_period=settings.leader_retry_period,
            onstarted_leading=self._started_leading,
            onstopped_leading=self._stopped_leading,
        )
        self.election = _Election(config, lock, self._attempted)

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    def detail(self) -> dict[str, Any]:
        """``details.leader`` of /readyz."""
        return {
            "lease": self.lease,
            "identity": self.identity,
            "leading": self.leading,
            "holder": self.election.holder,
        }

    async def _started_leading(self) -> None:
        self._acquired.set()

    async def _stopped_leading(self) -> None:
        pass  # the watchdog and the end of the election task tell run() the Lease is lost

    def _attempted(self, held: bool, error: str | None) -> None:
        # A standby is ready while it can take over (it reaches the Lease); the leader's readiness is its
        # work's.
        if held or self.leading or self.lost or self.runtime.stopping.is_set():
            return
        if error is None:
            self.runtime.set_ready()
        else:
            self.runtime.set_ready(False, f"cannot reach the leader Lease {self.lease}: {error}")

    async def run(self, work: Work) -> None:
        """Stand by until the Lease is ours, then run ``work`` until it ends (SIGTERM) or the Lease is lost
        (``LeadershipLost``); a clean end, or an error of the work, releases the Lease."""
        LEADER.labels(self.service).set(0)
        self.runtime.set_ready(False, f"waiting for the leader Lease {self.lease}")
        log.info("leader_election_started", lease=self.lease, identity=self.identity)
        election = asyncio.create_task(self.election.run(), name=f"{self.service}-election")
        stopping = asyncio.create_task(self.runtime.stopping.wait())
        acquired = asyncio.create_task(self._acquired.wait())
        try:
            await asyncio.wait([election, stopping, acquired], return_when=asyncio.FIRST_COMPLETED)
            if self._acquired.is_set() and not self.runtime.stopping.is_set():
                await self._lead(work, election)
            elif election.done():
                election.result()  # an error of the election itself
                raise RuntimeError("the leader election ended before acquiring the Lease")
        finally:
            stopping.cancel()
            acquired.cancel()
            election.cancel()
            await asyncio.gather(election, return_exceptions=True)
            self.leading = False
            LEADER.labels(self.service).set(0)
            if not self.lost and self.election.renewed_at is not None:
                await self.release()

    async def _lead(self, work: Work, election: asyncio.Task[None]) -> None:
        self.leading = True
        LEADER.labels(self.service).set(1)
        log.info("leader_acquired", lease=self.lease, identity=self.identity)
        self.runtime.set_ready(False, "starting as the leader")
        working = asyncio.create_task(work(), name=f"{self.service}-work")
        watchdog = asyncio.create_task(self._watch_renewals())
        try:
            await asyncio.wait([working, election, watchdog], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            working.cancel()
            await asyncio.gather(working, return_exceptions=True)
            raise
        finally:
            watchdog.cancel()
        if working.done():
            working.result()  # the work's error, if any (the Lease is released on the way out)
            return
        self.lost = True
        self.leading = False
        LEADER.labels(self.service).set(0)
        log.error(
            "leader_lost",
            lease=self.lease,
            identity=self.identity,
            holder=self.election.holder,
            detail=f"not renewed within {self.settings.leader_renew_deadline:g}s: stopping the work, exiting",
        )
        self.runtime.request_stop("leader Lease lost")
        grace = max(self.settings.leader_lease_duration - self.settings.leader_renew_deadline, 0.0) / 2
        try:
            await asyncio.wait_for(working, grace)  # cancels the work if it has not stopped by then
        except TimeoutError:
            log.warning("leader_work_cancelled", grace_seconds=grace)
        except Exception as error:  # the work failed while stopping: we exit with LeadershipLost anyway
            log.warning("leader_work_failed_while_stopping", error=repr(error))
        raise LeadershipLost(f"{self.identity} lost the Lease {self.lease}")

    async def _watch_renewals(self) -> None:
        """Return once no renewal succeeded for ``leader_renew_deadline`` seconds."""
        while True:
            renewed = self.election.renewed_at
            assert renewed is not None
            left = renewed + self.settings.leader_renew_deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(left)

    async def release(self) -> None:
        """Clear ``holderIdentity`` if we still hold the Lease: a standby takes over at its next attempt."""
        await release_lease(
            self.api, self.namespace, self.name, self.identity, timeout=self.settings.leader_renew_deadline
        )


async def release_lease(
    api: client.ApiClient,
    namespace: str,
    name: str,
    identity: str,
    *,
    timeout: float,  # noqa: ASYNC109 (each request's own timeout, passed to the client)
) -> None:
    """Clear ``holderIdentity`` of ``namespace/name`` if ``identity`` still holds it: a candidate takes it
    at its next attempt instead of waiting for it to expire. Best effort: an unreachable Lease expires."""
    leases = client.CoordinationV1Api(api)
    where = f"{namespace}/{name}"
    for _ in range(3):
        try:
            lease = await leases.read_namespaced_lease(name, namespace, _request_timeout=timeout)
            spec = lease.spec
            if spec is None or spec.holder_identity != identity:
                return
            now = datetime.now(UTC)
            lease.spec = client.V1LeaseSpec(  # no holderIdentity: free to take
                lease_duration_seconds=1,
                acquire_time=now,
                renew_time=now,
                lease_transitions=spec.lease_transitions,
            )
            await leases.replace_namespaced_lease(name, namespace, lease, _request_timeout=timeout)
        except ApiException as error:
            if error.status == 409:
                continue  # a renewal in flight landed first: read again
            log.warning("leader_release_failed", lease=where, status=error.status, reason=error.reason)
            return
        except Exception as error:  # unreachable: the Lease simply expires
            log.warning("leader_release_failed", lease=where, error=repr(error))
            return
        log.info("leader_released", lease=where, identity=identity)
        return


async def run_while_leading(runtime: ServiceRuntime, settings: Settings, service: str, work: Work) -> None:
    """Run ``work`` only while this process holds ``rollbook-<service>``; with ``leader_election`` off,
    simply run it."""
    if not settings.leader_election:
        LEADER.labels(service).set(1)
        try:
            await work()
        finally:
            LEADER.labels(service).set(0)
        return
    api = await kube.api_client(settings, group=kube.LEADER_ELECTION_GROUP)
    try:
        elector = LeaderElector(runtime, settings, service, api)
        runtime.add_detail("leader", elector.detail)
        await elector.run(work)
    finally:
        await api.close()
