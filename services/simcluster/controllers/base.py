"""What the workload controllers share: the work queue each runs on (one worker per controller, keys
deduplicated, delayed re-syncs), owner references, pod readiness and availability, int-or-percent values
and status conditions. The decision helpers here and in each controller's module are pure; only the
``Controller.sync`` methods read the store and write through it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from ..errors import ApiError
from ..resources import PODS, ResourceType
from ..store import Key, Obj, Store, WatchEvent

log = logging.getLogger(__name__)

CreateFn = Callable[[ResourceType, str, Obj], Awaitable[Obj]]
NowFn = Callable[[], datetime]

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def safe_encode(number: int, length: int) -> str:
    """A short name suffix from a number, in the alphabet Kubernetes uses for generated names."""
    out = []
    for _ in range(length):
        number, digit = divmod(number, len(_NAME_ALPHABET))
        out.append(_NAME_ALPHABET[digit])
    return "".join(out)


# ---- int-or-percent --------------------------------------------------------------------------------

_PERCENT = re.compile(r"^(\d+)%$")


def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as is, ``"N%"`` of ``total`` rounded up or down.
    Anything else is a ValueError."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match is None:
            if value.isdigit():  # an int sent as a string is not a percentage: Kubernetes refuses it
                raise ValueError(
                    f"invalid value for IntOrString: invalid type: string is not a percentage: {value}"
                )
            raise ValueError(f"invalid value for IntOrString: invalid value {value!r}")
        exact = int(match.group(1)) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    raise ValueError(f"invalid value for IntOrString: {value!r}")


# ---- owners ----------------------------------------------------------------------------------------


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_reference(owner: Obj) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled(store: Store, owner: Obj, rt: ResourceType) -> list[Obj]:
    """The objects of type ``rt`` whose controller is ``owner`` (through the store's owner index)."""
    uid = owner["metadata"]["uid"]
    return [
        obj
        for kind, obj in store.dependents(uid)
        if kind is rt and (controller_ref(obj) or {}).get("uid") == uid
    ]


def owner_key(obj: Obj | None, kind: str) -> Key | None:
    """(namespace, name) of ``obj``'s controller when it is a ``kind``."""
    if obj is None:
        return None
    ref = controller_ref(obj)
    if ref is None or ref.get("kind") != kind:
        return None
    return ((obj.get("metadata") or {}).get("namespace") or "", ref.get("name", ""))


def event_owner_keys(event: WatchEvent, kind: str) -> list[Key]:
    keys = [owner_key(event.obj, kind), owner_key(event.prev, kind)]
    return list(dict.fromkeys(k for k in keys if k is not None))


# ---- pods ------------------------------------------------------------------------------------------


def pod_condition(pod: Obj, type_: str) -> dict[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return condition
    return None


def pod_ready(pod: Obj) -> bool:
    return (pod_condition(pod, "Ready") or {}).get("status") == "True"


def pod_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_active(pod: Obj) -> bool:
    """controller.IsPodActive: not finished and not being deleted."""
    return not pod_terminal(pod) and not pod["metadata"].get("deletionTimestamp")


def available_in(pod: Obj, min_ready_seconds: int, now: datetime) -> float | None:
    """Seconds until the pod counts as available (ready for ``minReadySeconds``): 0 when it is, None when it
    is not ready at all."""
    condition = pod_condition(pod, "Ready")
    if condition is None or condition.get("status") != "True":
        return None
    if min_ready_seconds <= 0:
        return 0.0
    since = parse_time(condition.get("lastTransitionTime"))
    if since is None:
        return 0.0
    left = (since - now).total_seconds() + min_ready_seconds
    return max(left, 0.0)


def pod_available(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    return available_in(pod, min_ready_seconds, now) == 0.0


def pod_from_template(template: Obj, owner: Obj, name: str | None = None) -> Obj:
    """A pod of ``owner`` from its pod template (controller.GetPodFromTemplate)."""
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "namespace": owner["metadata"].get("namespace", ""),
        "labels": dict(tmeta.get("labels") or {}),
        "ownerReferences": [owner_reference(owner)],
    }
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = f"{owner['metadata']['name']}-"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _copy(template.get("spec") or {})}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# ---- conditions ------------------------------------------------------------------------------------


def find_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    for condition in conditions or []:
        if condition.get("type") == type_:
            return condition
    return None


def put_condition(conditions: list[dict[str, Any]] | None, condition: dict[str, Any]) -> list[dict[str, Any]]:
    """Set ``condition`` by type, keeping its lastTransitionTime when the status does not change (as the
    controllers' SetXCondition helpers); the other conditions keep their order."""
    out = []
    replaced = False
    for current in conditions or []:
        if current.get("type") != condition.get("type"):
            out.append(current)
            continue
        replaced = True
        new = dict(condition)
        if current.get("status") == new.get("status") and current.get("lastTransitionTime"):
            new["lastTransitionTime"] = current["lastTransitionTime"]
        out.append(new)
    if not replaced:
        out.append(dict(condition))
    return out


def drop_condition(conditions: list[dict[str, Any]] | None, type_: str) -> list[dict[str, Any]]:
    return [c for c in conditions or [] if c.get("type") != type_]


# ---- the queue -------------------------------------------------------------------------------------


class Controller:
    """One controller: which events concern which of its keys, and how to sync a key. ``sync`` returns
    seconds after which the key must be synced again (a deadline, minReadySeconds), or None."""

    name = "controller"
    watches: tuple[ResourceType, ...] = ()

    def __init__(self, store: Store, create: CreateFn, now: NowFn = utc_now) -> None:
        self.store = store
        self.create = create
        self.now = now

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        raise NotImplementedError

    async def sync(self, key: Key) -> float | None:
        raise NotImplementedError

    # Shared write helpers: conflicts and vanished objects end this sync; the key is synced again.
    def write_status(self, rt: ResourceType, obj: Obj, status: dict[str, Any]) -> Obj:
        if obj.get("status") == status:
            return obj
        meta = obj["metadata"]
        return self.store.update(
            rt, meta.get("namespace", ""), meta["name"], dict(obj, status=status), subresource="status"
        )

    def write(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return self.store.update(rt, meta.get("namespace", ""), meta["name"], obj)

    def delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            self.store.delete(PODS, meta.get("namespace", ""), meta["name"], precondition_uid=meta["uid"])


class _Queue:
    def __init__(self) -> None:
        self.dirty: dict[Key, None] = {}
        self.wake = asyncio.Event()
        self.timers: dict[Key, asyncio.TimerHandle] = {}

    def add(self, key: Key) -> None:
        self.dirty[key] = None
        self.wake.set()

    def add_after(self, key: Key, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self.timers.get(key)
        if timer is not None and timer.when() <= when and not timer.cancelled():
            return
        if timer is not None:
            timer.cancel()
        self.timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: Key) -> None:
        self.timers.pop(key, None)
        self.add(key)

    def close(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()


class ControllerManager:
    """Runs the controllers as kube-controller-manager does: informers (here the store's listeners) mark
    keys dirty, one worker per controller syncs them; a failed sync is retried with a back-off."""

    def __init__(self, store: Store, controllers: list[Controller]) -> None:
        self.store = store
        self.controllers = controllers
        self._queues = {id(c): _Queue() for c in controllers}
        self._failures: dict[tuple[int, Key], int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        store.listeners.append(self._on_event)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for controller in self.controllers:
            self._tasks.append(loop.create_task(self._work(controller), name=f"simcluster-{controller.name}"))
        # What exists already (objects created before the controllers started) is synced once.
        for controller in self.controllers:
            for rt in controller.watches[:1]:
                for key in list(self.store.objects.get(rt, {})):
                    self._queues[id(controller)].add(key)

    def _on_event(self, event: WatchEvent) -> None:
        if self._closed:
            return
        for controller in self.controllers:
            if event.resource in controller.watches:
                queue = self._queues[id(controller)]
                for key in controller.keys(event):
                    queue.add(key)

    async def _work(self, controller: Controller) -> None:
        queue = self._queues[id(controller)]
        while True:
            await queue.wake.wait()
            queue.wake.clear()
            while queue.dirty:
                key = next(iter(queue.dirty))
                del queue.dirty[key]
                failure_key = (id(controller), key)
                try:
                    delay = await controller.sync(key)
                    self._failures.pop(failure_key, None)
                except ApiError as exc:  # a conflict or a refused write: sync again shortly
                    failures = self._failures[failure_key] = self._failures.get(failure_key, 0) + 1
                    delay = min(0.005 * 2**failures, 5.0)
                    if exc.code != 409:
                        log.debug("%s: sync of %s/%s: %s", controller.name, *key, exc.message)
                except Exception:
                    failures = self._failures[failure_key] = self._failures.get(failure_key, 0) + 1
                    delay = min(0.05 * 2**failures, 30.0)
                    log.exception("%s: sync of %s/%s failed", controller.name, *key)
                if delay is not None:
                    queue.add_after(key, delay)
                await asyncio.sleep(0)

    async def close(self) -> None:
        self._closed = True
        for queue in self._queues.values():
            queue.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
