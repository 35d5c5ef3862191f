"""Simulated scheduler, kubelet and PVC binder.

- Scheduler: binds each pending pod to the node with the fewest pods that still has room (pods, CPU),
  setting `spec.nodeName` and `PodScheduled`; pods that fit nowhere stay Pending/Unschedulable and are
  retried when a pod goes away.
- Kubelet: containers go Waiting(ContainerCreating) -> Running -> ready; `podIP` comes from the node's
  range; pod `Ready` needs every container ready and every `readinessGates` condition True. An image
  change on a running container restarts that container only (restartCount + 1, new imageID, waiting
  reason `ContainerRebuilding`, pod NotReady meanwhile); UID, IP and node stay. Probe changes apply with
  no restart. With ``extended_inplace`` env/envFrom/volumeMounts/volumes changes restart the container too.
- Image pulls: the first pull of an image on a node takes ``pull_cold``; later ones ``pull_cached``.
- PVC binder: Pending -> Bound with a generated volume name.
All delays come from ``Timing`` and are jittered by a seeded RNG; all zero makes everything immediate.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError
from .resources import EVENTS, NODES, PODS, PVCS, ResourceType
from .store import Key, Obj, Store, WatchEvent, key_of, now_iso

PVC_PROTECTION = "kubernetes.io/pvc-protection"


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
            jitter=0.2,
        )


def _cpu_millis(value: Any) -> int:
    text = str(value or "0")
    if text.endswith("m"):
        return int(float(text[:-1]))
    return int(float(text) * 1000)


def _pod_cpu(pod: Obj) -> int:
    return sum(
        _cpu_millis(((c.get("resources") or {}).get("requests") or {}).get("cpu"))
        for c in (pod.get("spec") or {}).get("containers") or []
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rebuild_fingerprint(container: dict[str, Any], volumes: list[Any]) -> str:
    """What the extended kubelet restarts a container for besides its image: env and mounted volumes."""
    mounted = {m.get("name") for m in container.get("volumeMounts") or []}
    relevant = [v for v in volumes if isinstance(v, dict) and v.get("name") in mounted]
    return _digest(
        repr((container.get("env"), container.get("envFrom"), container.get("volumeMounts"), relevant))
    )


@dataclass
class ContainerRuntime:
    name: str
    image: str  # the image this container runs (or is starting with)
    fingerprint: str
    restart_count: int = 0
    running: bool = False
    ready: bool = False
    waiting_reason: str = "ContainerCreating"
    started_at: str = ""
    container_id: str = ""
    last_terminated: dict[str, Any] | None = None
    crashes: int = 0  # consecutive crashes, for the back-off
    restart_at: float | None = None  # loop time when a crashed container is started again


@dataclass
class PodRuntime:
    uid: str
    node: str
    ip: str
    start_time: str
    containers: dict[str, ContainerRuntime] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class NodeState:
    def __init__(self, config: NodeConfig, index: int) -> None:
        self.config = config
        self.index = index
        self.pods: set[Key] = set()
        self.cpu_used = 0
        self.images: set[str] = set()
        self.free_ips = list(range(2, 255))

    def fits(self, cpu: int) -> bool:
        return len(self.pods) < self.config.max_pods and self.cpu_used + cpu <= self.config.cpu_millis


class Kubelet:
    def __init__(
        self,
        store: Store,
        nodes: list[NodeConfig],
        timing: Timing,
        seed: int = 0,
        extended_inplace: bool = False,
        events: bool = True,
        max_events: int = 10_000,
        failing_images: tuple[str, ...] = (),
        crashing_images: tuple[str, ...] = (),
    ) -> None:
        self.store = store
        self.failing_images = failing_images
        self.crashing_images = crashing_images
        self.events = events
        self.max_events = max_events
        self._event_keys: deque[Key] = deque()
        self._unschedulable_reported: set[str] = set()
        self._last_stamp = 0
        self.timing = timing
        self.extended_inplace = extended_inplace
        self.rng = random.Random(seed)
        self.nodes = {n.name: NodeState(n, i) for i, n in enumerate(nodes)}
        self.pods: dict[Key, PodRuntime] = {}
        self.pod_cpu: dict[Key, int] = {}
        self._pending: set[Key] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        store.listeners.append(self._on_event)
        store.graceful_delete = self._graceful_delete
        store.create_hooks.append(self._protect_pvc)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def register_nodes(self) -> None:
        for state in self.nodes.values():
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
                            "bootID": _digest(f"boot/{cfg.name}")[:32],
                            "machineID": _digest(f"machine/{cfg.name}")[:32],
                            "systemUUID": _digest(f"system/{cfg.name}")[:32],
                        },
                    },
                },
                validate=False,
            )

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks) + [p.task for p in self.pods.values() if p.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _sleep(self, seconds: float) -> None:
        if self.timing.jitter and seconds > 0:
            seconds *= self.rng.uniform(1 - self.timing.jitter, 1 + self.timing.jitter)
        await asyncio.sleep(max(seconds, 0.0))

    def _graceful_delete(self, rt: ResourceType, obj: Obj, grace: int | None) -> bool:
        """A pod on a node terminates gracefully (the kubelet removes it) unless the grace period is 0."""
        return (
            rt is PODS and bool((obj.get("spec") or {}).get("nodeName")) and grace != 0 and not self._closed
        )

    def _event_stamp(self) -> int:
        """Event names end in a hex nanosecond timestamp, as the kubelet's do, so they list in time order."""
        self._last_stamp = max(time.time_ns(), self._last_stamp + 1)
        return self._last_stamp

    def _emit(
        self, pod: Obj, reason: str, message: str, warning: bool = False, component: str = "kubelet"
    ) -> None:
        """Record a core/v1 Event about the pod (as `kubectl describe` shows), keeping at most max_events."""
        if not self.events:
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

    # ---- events ------------------------------------------------------------------------------------

    def _on_event(self, event: WatchEvent) -> None:
        if self._closed:
            return
        if event.resource is PODS:
            self._on_pod(event)
        if event.resource is PVCS and event.type == "ADDED":
            self._spawn(self._bind_pvc(key_of(event.obj), event.obj["metadata"]["uid"]))
        if (
            event.resource is PVCS
            and event.type == "MODIFIED"
            and event.obj["metadata"].get("deletionTimestamp")
        ):
            self._spawn(self._release_pvc(*key_of(event.obj)))
        if event.resource is PODS and event.type == "DELETED":
            for claim in _claims(event.obj):
                self._spawn(self._release_pvc(key_of(event.obj)[0], claim))

    def _on_pod(self, event: WatchEvent) -> None:
        key = key_of(event.obj)
        uid = event.obj["metadata"]["uid"]
        runtime = self.pods.get(key)
        if event.type == "DELETED":
            self._release(key, uid)
            if self._pending:
                self._spawn(self._retry_pending())
            return
        node = (event.obj.get("spec") or {}).get("nodeName")
        if not node:
            if key not in self._pending and not event.obj["metadata"].get("deletionTimestamp"):
                self._pending.add(key)
                self._spawn(self._schedule(key, uid))
            return
        if runtime is None or runtime.uid != uid:
            if runtime is not None:
                self._release(key, runtime.uid)
            self._start_pod(key, event.obj, node)
        else:
            runtime.wake.set()

    def _release(self, key: Key, uid: str) -> None:
        self._unschedulable_reported.discard(uid)
        runtime = self.pods.get(key)
        if runtime is None or runtime.uid != uid:
            self._pending.discard(key)
            return
        self.pods.pop(key)
        if runtime.task is not None and runtime.task is not asyncio.current_task():
            runtime.task.cancel()
        node = self.nodes.get(runtime.node)
        if node is not None and key in node.pods:
            node.pods.discard(key)
            node.cpu_used -= self.pod_cpu.pop(key, 0)
            host = int(runtime.ip.rsplit(".", 1)[1]) if runtime.ip else 0
            if host:
                node.free_ips.append(host)

    # ---- scheduler ---------------------------------------------------------------------------------

    async def _schedule(self, key: Key, uid: str) -> None:
        await self._sleep(self.timing.schedule)
        pod = self.store.objects[PODS].get(key)
        if pod is None or pod["metadata"]["uid"] != uid or (pod.get("spec") or {}).get("nodeName"):
            self._pending.discard(key)
            return
        cpu = _pod_cpu(pod)
        wanted_node = None
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        candidates = [
            n
            for n in self.nodes.values()
            if n.fits(cpu)
            and all(
                dict(n.config.labels, **{"kubernetes.io/hostname": n.config.name}).get(k) == v
                for k, v in selector.items()
            )
        ]
        if candidates:
            wanted_node = min(candidates, key=lambda n: (len(n.pods), n.cpu_used, n.index))
        status = dict(pod.get("status") or {})
        if wanted_node is None:
            message = f"0/{len(self.nodes)} nodes are available: insufficient pods, cpu or no matching node."
            status["conditions"] = _set_condition(
                status.get("conditions") or [], "PodScheduled", "False", "Unschedulable", message
            )
            self.store.commit_internal(PODS, dict(pod, status=status))
            if uid not in self._unschedulable_reported:
                self._unschedulable_reported.add(uid)
                self._emit(pod, "FailedScheduling", message, warning=True, component="default-scheduler")
            return  # stays in _pending; retried when capacity frees up
        self._pending.discard(key)
        status["conditions"] = _set_condition(status.get("conditions") or [], "PodScheduled", "True")
        bound = dict(pod, spec=dict(pod["spec"], nodeName=wanted_node.config.name), status=status)
        # Reserve before the write: the write's own event starts the pod on this node.
        wanted_node.pods.add(key)
        wanted_node.cpu_used += cpu
        self.pod_cpu[key] = cpu
        self._unschedulable_reported.discard(uid)
        bound = self.store.commit_internal(PODS, bound)
        self._emit(
            bound,
            "Scheduled",
            f"Successfully assigned {key[0]}/{key[1]} to {wanted_node.config.name}",
            component="default-scheduler",
        )

    async def _retry_pending(self) -> None:
        await asyncio.sleep(0)
        for key in list(self._pending):
            pod = self.store.objects[PODS].get(key)
            if pod is None:
                self._pending.discard(key)
                continue
            await self._schedule(key, pod["metadata"]["uid"])

    # ---- kubelet -----------------------------------------------------------------------------------

    def _start_pod(self, key: Key, pod: Obj, node_name: str) -> None:
        node = self.nodes.get(node_name)
        ip = ""
        if node is not None:
            if key not in node.pods:  # bound by someone else (spec.nodeName set at create)
                node.pods.add(key)
                cpu = _pod_cpu(pod)
                node.cpu_used += cpu
                self.pod_cpu[key] = cpu
            if node.free_ips:
                ip = f"10.244.{node.index}.{node.free_ips.pop(0)}"
        runtime = PodRuntime(uid=pod["metadata"]["uid"], node=node_name, ip=ip, start_time=now_iso())
        self.pods[key] = runtime
        runtime.task = asyncio.get_running_loop().create_task(self._run_pod(key, runtime))

    def _current(self, key: Key, runtime: PodRuntime) -> Obj | None:
        pod = self.store.objects[PODS].get(key)
        if pod is None or pod["metadata"]["uid"] != runtime.uid:
            return None
        return pod

    def _pull_seconds(self, node_name: str, image: str) -> float:
        node = self.nodes.get(node_name)
        if node is None or image in node.images:
            return self.timing.pull_cached
        return self.timing.pull_cold

    def _pull_fails(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.failing_images)

    def _crashes(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.crashing_images)

    def _crash_backoff(self, crashes: int) -> float:
        """Exponential back-off as the kubelet's (10 s doubling to 5 min), scaled to Timing.crash_backoff."""
        base = max(self.timing.crash_backoff, 0.05)  # a floor, so zero timing cannot spin
        return float(min(base * 2**crashes, base * 30))

    def _containers_to_start(
        self, pod: Obj, runtime: PodRuntime, now: float
    ) -> list[tuple[ContainerRuntime, str, str]]:
        """Containers to (re)start: new ones, changed ones (in place), crashed ones whose back-off is over."""
        spec = pod.get("spec") or {}
        volumes = spec.get("volumes") or []
        todo: list[tuple[ContainerRuntime, str, str]] = []  # (container, image, fingerprint)
        for container in spec.get("containers") or []:
            name, image = container["name"], container.get("image", "")
            fingerprint = _rebuild_fingerprint(container, volumes) if self.extended_inplace else ""
            current = runtime.containers.get(name)
            if current is None:
                current = ContainerRuntime(name=name, image=image, fingerprint=fingerprint)
                runtime.containers[name] = current
                todo.append((current, image, fingerprint))
            elif not current.running and current.waiting_reason == "ContainerCreating":
                todo.append((current, image, fingerprint))
            elif current.image != image or current.fingerprint != fingerprint:
                if current.running:
                    current.last_terminated = {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": current.started_at,
                        "finishedAt": now_iso(),
                        "containerID": current.container_id,
                    }
                    current.restart_count += 1
                    self._emit(pod, "Killing", f"Container {name} definition changed, will be restarted")
                current.running, current.ready, current.restart_at = False, False, None
                current.crashes = 0
                current.waiting_reason = "ContainerRebuilding"
                todo.append((current, image, fingerprint))
            elif current.restart_at is not None and now >= current.restart_at:
                current.restart_at = None
                todo.append((current, image, fingerprint))
        return todo

    async def _run_pod(self, key: Key, runtime: PodRuntime) -> None:
        loop = asyncio.get_running_loop()
        while True:
            runtime.wake.clear()
            pod = self._current(key, runtime)
            if pod is None:
                return
            if pod["metadata"].get("deletionTimestamp"):
                await self._terminate(key, runtime, pod)
                return
            todo = self._containers_to_start(pod, runtime, loop.time())
            if todo:
                if not await self._start_containers(key, runtime, pod, todo):
                    return
                continue
            unready = [c for c in runtime.containers.values() if c.running and not c.ready]
            if unready:
                await self._sleep(self.timing.ready)
                if self._current(key, runtime) is None:
                    return
                for c in unready:
                    c.ready = c.running
                self._write_status(key, runtime)
                continue
            self._write_status(key, runtime)
            if runtime.wake.is_set():
                continue
            restarts = [c.restart_at for c in runtime.containers.values() if c.restart_at is not None]
            if restarts:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(runtime.wake.wait(), max(min(restarts) - loop.time(), 0.0))
            else:
                await runtime.wake.wait()

    async def _start_containers(
        self, key: Key, runtime: PodRuntime, pod: Obj, todo: list[tuple[ContainerRuntime, str, str]]
    ) -> bool:
        """Pull and start ``todo``; images that fail to pull wait in ImagePullBackOff, crashing ones go to
        CrashLoopBackOff. False when the pod went away meanwhile."""
        self._write_status(key, runtime)
        node = self.nodes.get(runtime.node)
        pulls = {img: self._pull_seconds(runtime.node, img) for _, img, _ in todo}
        for img in pulls:
            if node is not None and img in node.images:
                self._emit(pod, "Pulled", f'Container image "{img}" already present on machine')
            else:
                self._emit(pod, "Pulling", f'Pulling image "{img}"')
        await self._sleep(max(pulls.values()) + self.timing.start)
        current_pod = self._current(key, runtime)
        if current_pod is None:
            return False
        pod = current_pod
        for img, seconds in pulls.items():
            if (node is None or img not in node.images) and not self._pull_fails(img):
                self._emit(pod, "Pulled", f'Successfully pulled image "{img}" in {seconds:.3f}s')
        crashing: list[ContainerRuntime] = []
        for container_rt, image, fingerprint in todo:
            container_rt.image, container_rt.fingerprint = image, fingerprint
            if self._pull_fails(image):
                container_rt.running, container_rt.ready = False, False
                container_rt.waiting_reason = "ImagePullBackOff"
                self._emit(
                    pod,
                    "Failed",
                    f'Failed to pull image "{image}": rpc error: code = NotFound desc = '
                    f'failed to pull and unpack image "{image}": not found',
                    warning=True,
                )
                continue
            if node is not None:
                node.images.add(image)
            container_rt.running, container_rt.ready = True, False
            container_rt.started_at = now_iso()
            container_rt.container_id = "containerd://" + _digest(
                f"{runtime.uid}/{container_rt.name}/{container_rt.restart_count}"
            )
            self._emit(pod, "Created", f"Created container {container_rt.name}")
            self._emit(pod, "Started", f"Started container {container_rt.name}")
            if self._crashes(image):
                crashing.append(container_rt)
        self._write_status(key, runtime)
        if crashing:
            await self._sleep(self.timing.ready)  # it runs a moment, then exits with an error
            current_pod = self._current(key, runtime)
            if current_pod is None:
                return False
            loop = asyncio.get_running_loop()
            for container_rt in crashing:
                if not container_rt.running:
                    continue
                container_rt.last_terminated = {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": container_rt.started_at,
                    "finishedAt": now_iso(),
                    "containerID": container_rt.container_id,
                }
                container_rt.running, container_rt.ready = False, False
                container_rt.restart_count += 1
                container_rt.waiting_reason = "CrashLoopBackOff"
                container_rt.restart_at = loop.time() + self._crash_backoff(container_rt.crashes)
                container_rt.crashes += 1
                self._emit(
                    current_pod,
                    "BackOff",
                    f"Back-off restarting failed container {container_rt.name} in pod {key[1]}",
                    warning=True,
                )
            self._write_status(key, runtime)
        return True

    async def _terminate(self, key: Key, runtime: PodRuntime, pod: Obj) -> None:
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        delay = self.timing.terminate if grace is None else min(self.timing.terminate, float(grace))
        for name, container in runtime.containers.items():
            if container.running:
                self._emit(pod, "Killing", f"Stopping container {name}")
        await self._sleep(delay)
        current = self._current(key, runtime)
        if current is not None:
            self.store.remove(PODS, current)

    def _write_status(self, key: Key, runtime: PodRuntime) -> None:
        pod = self._current(key, runtime)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        spec = pod.get("spec") or {}
        old_status = pod.get("status") or {}
        statuses = []
        for container in spec.get("containers") or []:
            rt = runtime.containers.get(container["name"])
            if rt is None:
                continue
            image = rt.image if rt.running else container.get("image", rt.image)
            entry: dict[str, Any] = {
                "name": rt.name,
                "image": image,
                "imageID": "",
                "ready": rt.ready,
                "restartCount": rt.restart_count,
                "started": rt.running,
            }
            if rt.running:
                entry["imageID"] = f"docker.io/library/{rt.image}@sha256:{_digest(rt.image)}"
                entry["containerID"] = rt.container_id
                entry["state"] = {"running": {"startedAt": rt.started_at}}
            else:
                entry["state"] = {"waiting": {"reason": rt.waiting_reason}}
            if rt.last_terminated:
                entry["lastState"] = {"terminated": rt.last_terminated}
            else:
                entry["lastState"] = {}
            statuses.append(entry)
        init_statuses = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": f"docker.io/library/{c.get('image', '')}@sha256:{_digest(c.get('image', ''))}",
                "ready": True,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": runtime.start_time,
                        "finishedAt": runtime.start_time,
                    }
                },
                "lastState": {},
            }
            for c in spec.get("initContainers") or []
        ]
        containers_ready = (
            bool(statuses)
            and len(statuses) == len(spec.get("containers") or [])
            and all(s["ready"] for s in statuses)
        )
        conditions = list(old_status.get("conditions") or [])
        by_type = {c.get("type"): c for c in conditions}
        gates_ok = all(
            (by_type.get(g.get("conditionType")) or {}).get("status") == "True"
            for g in spec.get("readinessGates") or []
        )
        conditions = _set_condition(conditions, "PodScheduled", "True")
        conditions = _set_condition(conditions, "Initialized", "True")
        conditions = _set_condition(
            conditions,
            "ContainersReady",
            "True" if containers_ready else "False",
            "" if containers_ready else "ContainersNotReady",
        )
        ready = containers_ready and gates_ok
        ready_reason = (
            "" if ready else ("ContainersNotReady" if not containers_ready else "ReadinessGatesNotReady")
        )
        conditions = _set_condition(conditions, "Ready", "True" if ready else "False", ready_reason)
        any_running = any(s.get("started") for s in statuses) or any(
            c.restart_count > 0 for c in runtime.containers.values()
        )
        node = self.nodes.get(runtime.node)
        status = dict(old_status)
        status.update(
            {
                "phase": "Running" if any_running else "Pending",
                "conditions": conditions,
                "hostIP": f"192.168.0.{node.index + 10}" if node else "",
                "podIP": runtime.ip,
                "podIPs": [{"ip": runtime.ip}] if runtime.ip else [],
                "startTime": old_status.get("startTime") or runtime.start_time,
                "containerStatuses": statuses,
            }
        )
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
        self.store.commit_internal(PODS, dict(pod, status=status))

    # ---- PVC binder and protection -----------------------------------------------------------------

    @staticmethod
    def _protect_pvc(rt: ResourceType, obj: Obj) -> None:
        """Like the StorageObjectInUseProtection admission plugin: new PVCs get the protection finalizer."""
        if rt is PVCS:
            finalizers = obj["metadata"].setdefault("finalizers", [])
            if PVC_PROTECTION not in finalizers:
                finalizers.append(PVC_PROTECTION)

    async def _release_pvc(self, namespace: str, name: str) -> None:
        """A deleted PVC goes once no pod uses it (the pvc-protection controller)."""
        await asyncio.sleep(0)
        pvc = self.store.objects[PVCS].get((namespace, name))
        if pvc is None or not pvc["metadata"].get("deletionTimestamp"):
            return
        if PVC_PROTECTION not in (pvc["metadata"].get("finalizers") or []):
            return
        for (pod_namespace, _), pod in self.store.objects[PODS].items():
            if pod_namespace == namespace and name in _claims(pod):
                return  # still in use; checked again when that pod is deleted
        released = dict(pvc)
        released["metadata"] = dict(
            pvc["metadata"], finalizers=[f for f in pvc["metadata"]["finalizers"] if f != PVC_PROTECTION]
        )
        with contextlib.suppress(ApiError):
            self.store.update(PVCS, namespace, name, released, validate=False)

    async def _bind_pvc(self, key: Key, uid: str) -> None:
        await self._sleep(self.timing.pvc_bind)
        pvc = self.store.objects[PVCS].get(key)
        if pvc is None or pvc["metadata"]["uid"] != uid or pvc["metadata"].get("deletionTimestamp"):
            return
        spec = dict(pvc.get("spec") or {})
        spec.setdefault("volumeName", f"pvc-{uid}")
        status = {
            "phase": "Bound",
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "capacity": dict((spec.get("resources") or {}).get("requests") or {"storage": "1Gi"}),
        }
        self.store.commit_internal(PVCS, dict(pvc, spec=spec, status=status))


def _claims(pod: Obj) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v, dict) and (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]


def _set_condition(
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
