"""What the simulated node agents share (scheduler.py, kubelet.py, images.py, pvcs.py): node configuration
and state (pods, CPU, IPs, pulled images), timing with seeded jitter, the Event recorder, task bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from .errors import ApiError
from .resources import EVENTS, NODES
from .store import Key, Obj, Store, now_iso
from .validation import parse_quantity


@dataclass(frozen=True)
class NodeConfig:
    name: str
    cpu_millis: int = 8000
    memory_mib: int = 32768
    max_pods: int = 110
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Timing:
    """Seconds. Zero everywhere (the default) for fast tests."""

    schedule: float = 0.0
    pull_cold: float = 0.0  # first pull of an image on a node
    pull_cached: float = 0.0  # image already on the node
    start: float = 0.0  # create and start a container
    ready: float = 0.0  # started -> readiness probe passes
    terminate: float = 0.0  # graceful deletion (capped by the pod's grace period)
    pvc_bind: float = 0.0
    crash_backoff: float = 0.0  # first CrashLoopBackOff wait, doubling to 30x (floor 0.05 s)
    resize: float = 0.0  # an allocated pod resize -> actuated (cgroups updated)
    run: float = 0.0  # a container of a pod with restartPolicy Never/OnFailure exits 0 after this long
    jitter: float = 0.0  # each delay is multiplied by uniform(1 - jitter, 1 + jitter)

    @classmethod
    def realistic(cls) -> Timing:
        """Delays of the order a small real cluster shows, for demos and `rollbook simcluster`."""
        return cls(
            schedule=0.05,
            pull_cold=3.0,
            pull_cached=0.3,
            start=0.5,
            ready=1.0,
            terminate=1.0,
            pvc_bind=0.5,
            crash_backoff=2.0,
            resize=0.2,
            run=2.0,
            jitter=0.2,
        )


def cpu_millis(value: Any) -> int:
    text = str(value or "0")
    if text.endswith("m"):
        return int(float(text[:-1]))
    return int(float(text) * 1000)


def pod_cpu(pod: Obj) -> int:
    return sum(
        cpu_millis(((c.get("resources") or {}).get("requests") or {}).get("cpu"))
        for c in (pod.get("spec") or {}).get("containers") or []
    )


def memory_bytes(value: Any) -> int:
    parsed = parse_quantity(value) if value is not None else None
    return int(parsed) if parsed is not None else 0


def pod_memory(pod: Obj) -> int:
    return sum(
        memory_bytes(((c.get("resources") or {}).get("requests") or {}).get("memory"))
        for c in (pod.get("spec") or {}).get("containers") or []
    )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class NodeState:
    """One node: its pods, the CPU they request, its free pod IPs and the images pulled on it."""

    def __init__(self, config: NodeConfig, index: int) -> None:
        self.config = config
        self.index = index
        self.pods: set[Key] = set()
        self.cpu_used = 0
        self.memory_used = 0  # bytes of memory requests, for pod resize's feasibility
        self.images: set[str] = set()
        self.free_ips = list(range(2, 255))

    def fits(self, cpu: int, memory: int = 0) -> bool:
        return (
            len(self.pods) < self.config.max_pods
            and self.cpu_used + cpu <= self.config.cpu_millis
            and self.memory_used + memory <= self.memory_capacity
        )

    @property
    def memory_capacity(self) -> int:
        return self.config.memory_mib * 2**20


class Nodes:
    """The nodes by name, and which node each bound pod takes capacity on."""

    def __init__(self, store: Store, configs: list[NodeConfig]) -> None:
        self.store = store
        self.by_name = {n.name: NodeState(n, i) for i, n in enumerate(configs)}
        self.pod_cpu: dict[Key, int] = {}
        self.pod_memory: dict[Key, int] = {}

    def get(self, name: str) -> NodeState | None:
        return self.by_name.get(name)

    def __len__(self) -> int:
        return len(self.by_name)

    def reserve(self, node: NodeState, key: Key, cpu: int, memory: int = 0) -> None:
        node.pods.add(key)
        node.cpu_used += cpu
        node.memory_used += memory
        self.pod_cpu[key] = cpu
        self.pod_memory[key] = memory

    def resize(self, node_name: str, key: Key, cpu: int, memory: int) -> None:
        """A bound pod's requests changed in place (an allocated resize)."""
        node = self.by_name.get(node_name)
        if node is None or key not in node.pods:
            return
        node.cpu_used += cpu - self.pod_cpu.get(key, 0)
        node.memory_used += memory - self.pod_memory.get(key, 0)
        self.pod_cpu[key], self.pod_memory[key] = cpu, memory

    def take_ip(self, node: NodeState) -> str:
        return f"10.244.{node.index}.{node.free_ips.pop(0)}" if node.free_ips else ""

    def release(self, node_name: str, key: Key, ip: str) -> None:
        node = self.by_name.get(node_name)
        if node is not None and key in node.pods:
            node.pods.discard(key)
            node.cpu_used -= self.pod_cpu.pop(key, 0)
            node.memory_used -= self.pod_memory.pop(key, 0)
            host = int(ip.rsplit(".", 1)[1]) if ip else 0
            if host:
                node.free_ips.append(host)

    def register_nodes(self) -> None:
        for state in self.by_name.values():
            cfg = state.config
            self.store.create(
                NODES,
                "",
                {
                    "metadata": {
                        "name": cfg.name,
                        "labels": {
                            "kubernetes.io/hostname": cfg.name,
                            "kubernetes.io/os": "linux",
                            **dict(cfg.labels),
                        },
                    },
                    "spec": {"podCIDR": f"10.244.{state.index}.0/24"},
                    "status": {
                        "capacity": {
                            "cpu": f"{cfg.cpu_millis}m",
                            "memory": f"{cfg.memory_mib}Mi",
                            "pods": str(cfg.max_pods),
                        },
                        "allocatable": {
                            "cpu": f"{cfg.cpu_millis}m",
                            "memory": f"{cfg.memory_mib}Mi",
                            "pods": str(cfg.max_pods),
                        },
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "reason": "KubeletReady",
                                "message": "simcluster kubelet is posting ready status",
                                "lastHeartbeatTime": now_iso(),
                                "lastTransitionTime": now_iso(),
                            }
                        ],
                        "addresses": [
                            {"type": "InternalIP", "address": f"192.168.0.{state.index + 10}"},
                            {"type": "Hostname", "address": cfg.name},
                        ],
                        "nodeInfo": {
                            "kubeletVersion": "v1.30.0-simcluster",
                            "kubeProxyVersion": "v1.30.0-simcluster",
                            "containerRuntimeVersion": "simulated://1.0",
                            "operatingSystem": "linux",
                            "architecture": "amd64",
                            "osImage": "simcluster",
                            "kernelVersion": "6.1.0",
                            "bootID": digest(f"boot/{cfg.name}")[:32],
                            "machineID": digest(f"machine/{cfg.name}")[:32],
                            "systemUUID": digest(f"system/{cfg.name}")[:32],
                        },
                    },
                },
                validate=False,
            )


class Clock:
    """Delays from ``Timing``, each multiplied by a seeded jitter (one RNG for every agent)."""

    def __init__(self, timing: Timing, seed: int) -> None:
        self.timing = timing
        self.rng = random.Random(seed)

    async def sleep(self, seconds: float) -> None:
        if self.timing.jitter and seconds > 0:
            seconds *= self.rng.uniform(1 - self.timing.jitter, 1 + self.timing.jitter)
        await asyncio.sleep(max(seconds, 0.0))


class Tasks:
    """An agent's background tasks, cancelled together at close."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self, *more: asyncio.Task[Any]) -> None:
        self.closed = True
        tasks = list(self._tasks) + list(more)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class EventRecorder:
    """core/v1 Events about pods, as the scheduler and kubelet record them; at most ``max_events`` kept."""

    def __init__(self, store: Store, enabled: bool = True, max_events: int = 10_000) -> None:
        self.store = store
        self.enabled = enabled
        self.max_events = max_events
        self._event_keys: deque[Key] = deque()
        self._last_stamp = 0

    def _event_stamp(self) -> int:
        """Event names end in a hex nanosecond timestamp, as the kubelet's do, so they list in time order."""
        self._last_stamp = max(time.time_ns(), self._last_stamp + 1)
        return self._last_stamp

    def emit(
        self, pod: Obj, reason: str, message: str, warning: bool = False, component: str = "kubelet"
    ) -> None:
        """Record a core/v1 Event about the pod (as `kubectl describe` shows), keeping at most max_events."""
        if not self.enabled:
            return
        meta = pod["metadata"]
        namespace = meta.get("namespace", "default")
        when = now_iso()
        host = (pod.get("spec") or {}).get("nodeName", "")
        with contextlib.suppress(ApiError):
            created = self.store.create(
                EVENTS,
                namespace,
                {
                    "metadata": {
                        "name": f"{meta['name']}.{self._event_stamp():x}",
                        "namespace": namespace,
                    },
                    "involvedObject": {
                        "kind": "Pod",
                        "apiVersion": "v1",
                        "namespace": namespace,
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "resourceVersion": meta.get("resourceVersion", ""),
                    },
                    "reason": reason,
                    "message": message,
                    "type": "Warning" if warning else "Normal",
                    "source": {
                        "component": component,
                        **({"host": host} if host and component == "kubelet" else {}),
                    },
                    "firstTimestamp": when,
                    "lastTimestamp": when,
                    "count": 1,
                    "reportingComponent": component,
                    "reportingInstance": host,
                },
                validate=False,
            )
            self._event_keys.append((namespace, created["metadata"]["name"]))
        while len(self._event_keys) > self.max_events:
            namespace, name = self._event_keys.popleft()
            with contextlib.suppress(ApiError):
                self.store.delete(EVENTS, namespace, name)


def set_condition(
    conditions: list[dict[str, Any]], type_: str, status: str, reason: str = "", message: str = ""
) -> list[dict[str, Any]]:
    """Set a condition by type; lastTransitionTime only moves when the status changes."""
    out = []
    found = False
    for condition in conditions:
        if condition.get("type") == type_:
            found = True
            if condition.get("status") == status and condition.get("reason", "") == reason:
                out.append(condition)
                continue
            entry: dict[str, Any] = {
                "type": type_,
                "status": status,
                "lastProbeTime": None,
                "lastTransitionTime": condition.get("lastTransitionTime")
                if condition.get("status") == status
                else now_iso(),
            }
            if reason:
                entry["reason"] = reason
            if message:
                entry["message"] = message
            out.append(entry)
        else:
            out.append(condition)
    if not found:
        entry = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": now_iso()}
        if reason:
            entry["reason"] = reason
        if message:
            entry["message"] = message
        out.append(entry)
    return out
