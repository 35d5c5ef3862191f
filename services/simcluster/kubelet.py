"""The simulated kubelet: runs the pods bound to its nodes. Containers go Waiting(ContainerCreating) ->
Running -> ready; ``podIP`` comes from the node's range; pod ``Ready`` needs every container ready and every
``readinessGates`` condition True. An image change on a running container restarts that container only
(restartCount + 1, new imageID, waiting reason ``ContainerRebuilding``, pod NotReady meanwhile); UID, IP and
node stay. Probe changes apply with no restart. A resize (``pods/resize``) is checked against the node's
allocatable and the other pods' requests (``PodResizePending`` Infeasible / Deferred), then allocated
(``allocatedResources``, ``PodResizeInProgress``) and actuated (``resources``), restarting only the
containers whose changed resource has ``resizePolicy: RestartContainer``. With ``extended_inplace``
env/envFrom/volumeMounts/volumes changes restart the container too. Deleted pods on a node terminate
gracefully (``Timing.terminate``).

Native sidecars (init containers with ``restartPolicy: Always``) run as the kubelet's
``computeInitContainerActions`` runs them: in spec order, each started before the next init container and
before any app container; once the pod is initialized they keep running beside the app containers, a
crashed one is restarted whatever the pod's ``restartPolicy``, and one whose image changed is restarted in
place on its own (``restartCount`` + 1 in ``initContainerStatuses``, new ``imageID``, ready after start); the
app containers are untouched. Their readiness counts towards ``ContainersReady`` and ``Ready``. Plain init
containers are reported completed at once. The process runtime (processes.py) does not run native sidecars.

Its siblings, one job each: scheduler.py binds pods to nodes, images.py pulls images, pvcs.py binds and
protects PVCs; nodes.py holds what they share. All delays come from ``Timing``, jittered by one seeded RNG;
all zero makes everything immediate.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from . import resize
from .images import ImagePuller
from .nodes import (
    Clock,
    EventRecorder,
    NodeConfig,
    Nodes,
    Tasks,
    Timing,
    digest,
    pod_cpu,
    pod_memory,
    set_condition,
)
from .pod_runtimes import ContainerRuntime, PodRuntime
from .processes import ProcessRuntime
from .resources import PODS, ResourceType
from .store import Key, Obj, Store, WatchEvent, key_of, now_iso

__all__ = ["Kubelet", "NodeConfig", "Timing"]


def _rebuild_fingerprint(container: dict[str, Any], volumes: list[Any]) -> str:
    """What the extended kubelet restarts a container for besides its image: env and mounted volumes."""
    mounted = {m.get("name") for m in container.get("volumeMounts") or []}
    relevant = [v for v in volumes if isinstance(v, dict) and v.get("name") in mounted]
    return digest(
        repr((container.get("env"), container.get("envFrom"), container.get("volumeMounts"), relevant))
    )


def _restart_policy(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def _native_sidecars(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The init containers with ``restartPolicy: Always``, in spec order."""
    return [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]


def _image_id(image: str) -> str:
    return f"docker.io/library/{image}@sha256:{digest(image)}"


class Kubelet:
    def __init__(
        self,
        store: Store,
        nodes: Nodes,
        clock: Clock,
        events: EventRecorder,
        images: ImagePuller,
        extended_inplace: bool = False,
        processes: ProcessRuntime | None = None,
        resize_pods: bool = True,
    ) -> None:
        self.store = store
        self.processes = processes  # runs the pods whose images it matches as local processes
        self.nodes = nodes
        self.clock = clock
        self.events = events
        self.images = images
        self.extended_inplace = extended_inplace
        # Resizes pods in place and reports container resources (a 1.33+ kubelet); off: an older one.
        self.resize_pods = resize_pods
        self.pods: dict[Key, PodRuntime] = {}
        self.tasks = Tasks()
        store.listeners.append(self._on_event)
        store.graceful_delete = self._graceful_delete

    async def close(self) -> None:
        await self.tasks.close(*(p.task for p in self.pods.values() if p.task is not None))
        if self.processes is not None:
            await self.processes.close()

    def _graceful_delete(self, rt: ResourceType, obj: Obj, grace: int | None) -> bool:
        """A pod on a node terminates gracefully (the kubelet removes it) unless the grace period is 0."""
        return (
            rt is PODS
            and bool((obj.get("spec") or {}).get("nodeName"))
            and grace != 0
            and not self.tasks.closed
        )

    def _on_event(self, event: WatchEvent) -> None:
        if self.tasks.closed or event.resource is not PODS:
            return
        key = key_of(event.obj)
        uid = event.obj["metadata"]["uid"]
        runtime = self.pods.get(key)
        if event.type == "DELETED":
            self._release(key, uid)
            return
        node = (event.obj.get("spec") or {}).get("nodeName")
        if not node:
            return
        if runtime is None or runtime.uid != uid:
            if runtime is not None:
                self._release(key, runtime.uid)
            self._start_pod(key, event.obj, node)
        else:
            runtime.wake.set()

    def _release(self, key: Key, uid: str) -> None:
        runtime = self.pods.get(key)
        if runtime is None or runtime.uid != uid:
            return
        self.pods.pop(key)
        if runtime.task is not None and runtime.task is not asyncio.current_task():
            runtime.task.cancel()
        if runtime.process:  # its loopback address is freed once its processes have stopped
            self.nodes.release(runtime.node, key, "")
        else:
            self.nodes.release(runtime.node, key, runtime.ip)
        for other in self.pods.values():
            if other.node == runtime.node and other.resize_pending is not None:
                other.wake.set()  # capacity freed: a deferred resize is tried again

    def _start_pod(self, key: Key, pod: Obj, node_name: str) -> None:
        node = self.nodes.get(node_name)
        process = self.processes is not None and self.processes.runs(pod)
        ip = ""
        if node is not None:
            if key not in node.pods:  # bound by someone else (spec.nodeName set at create)
                self.nodes.reserve(node, key, pod_cpu(pod), pod_memory(pod))
            if not process:
                ip = self.nodes.take_ip(node)
        if self.processes is not None and process:
            ip = self.processes.take_ip()  # its own loopback address: its ports are its own
        runtime = PodRuntime(
            uid=pod["metadata"]["uid"], node=node_name, ip=ip, start_time=now_iso(), process=process
        )
        self.pods[key] = runtime
        loop = asyncio.get_running_loop()
        if self.processes is not None and process:
            runtime.task = loop.create_task(self.processes.run_pod(self, key, runtime))
        else:
            runtime.task = loop.create_task(self._run_pod(key, runtime))

    def _current(self, key: Key, runtime: PodRuntime) -> Obj | None:
        pod = self.store.objects[PODS].get(key)
        if pod is None or pod["metadata"]["uid"] != runtime.uid:
            return None
        return pod

    def _crash_backoff(self, crashes: int) -> float:
        """Exponential back-off as the kubelet's (10 s doubling to 5 min), scaled to Timing.crash_backoff."""
        base = max(self.clock.timing.crash_backoff, 0.05)  # a floor, so zero timing cannot spin
        return float(min(base * 2**crashes, base * 30))

    def _containers_to_start(
        self, pod: Obj, runtime: PodRuntime, now: float
    ) -> list[tuple[ContainerRuntime, str, str]]:
        """Containers to (re)start: new ones, changed ones (in place), crashed ones whose back-off is over.
        Native sidecars come first: until the pod is initialized (an app container created, the kubelet's
        ``podHasInitialized``) each must be running before the next one or any app container starts."""
        spec = pod.get("spec") or {}
        volumes = spec.get("volumes") or []
        todo: list[tuple[ContainerRuntime, str, str]] = []  # (container, image, fingerprint)
        initialized = bool(runtime.containers)
        for container in _native_sidecars(spec):
            name, image = container["name"], container.get("image", "")
            fingerprint = _rebuild_fingerprint(container, volumes) if self.extended_inplace else ""
            sidecar = runtime.sidecars.get(name)
            if sidecar is None:
                sidecar = ContainerRuntime(name=name, image=image, fingerprint=fingerprint, sidecar=True)
                runtime.sidecars[name] = sidecar
                todo.append((sidecar, image, fingerprint))
            elif self._must_start(pod, sidecar, image, fingerprint, now):
                todo.append((sidecar, image, fingerprint))
            if not initialized and not sidecar.running:
                return todo  # the next init container and the app containers wait for this one
        for container in spec.get("containers") or []:
            name, image = container["name"], container.get("image", "")
            fingerprint = _rebuild_fingerprint(container, volumes) if self.extended_inplace else ""
            current = runtime.containers.get(name)
            if current is None:
                resources = dict(container.get("resources") or {})
                current = ContainerRuntime(
                    name=name, image=image, fingerprint=fingerprint, allocated=resources, actual=resources
                )
                runtime.containers[name] = current
                todo.append((current, image, fingerprint))
            elif self._must_start(pod, current, image, fingerprint, now):
                todo.append((current, image, fingerprint))
        return todo

    def _must_start(
        self, pod: Obj, current: ContainerRuntime, image: str, fingerprint: str, now: float
    ) -> bool:
        """Whether a known container is (re)started now: still being created, changed (restarted in place:
        the old one killed, restartCount + 1), or crashed with its back-off over."""
        if current.terminated is not None:
            return False  # exited for good (restartPolicy Never, or OnFailure after success)
        if not current.running and current.waiting_reason == "ContainerCreating":
            return True
        if current.image != image or current.fingerprint != fingerprint:
            if current.running:
                current.last_terminated = {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": current.started_at,
                    "finishedAt": now_iso(),
                    "containerID": current.container_id,
                }
                current.restart_count += 1
                kind = "Init container" if current.sidecar else "Container"
                self.events.emit(
                    pod, "Killing", f"{kind} {current.name} definition changed, will be restarted"
                )
            current.running, current.ready, current.restart_at = False, False, None
            current.crashes = 0
            current.waiting_reason = "ContainerRebuilding"
            return True
        if current.restart_at is not None and now >= current.restart_at:
            current.restart_at = None
            return True
        return False

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
            if self._exits(pod, runtime, loop.time()):
                self._write_status(key, runtime)
                continue
            if await self._resize(key, runtime, pod):
                continue
            todo = self._containers_to_start(pod, runtime, loop.time())
            if todo:
                if not await self._start_containers(key, runtime, pod, todo):
                    return
                continue
            every = [*runtime.sidecars.values(), *runtime.containers.values()]
            unready = [c for c in every if c.running and not c.ready and not c.readiness_failing]
            if unready:
                await self.clock.sleep(self.clock.timing.ready)
                if self._current(key, runtime) is None:
                    return
                for c in unready:
                    c.ready = c.running and not c.readiness_failing
                self._write_status(key, runtime)
                continue
            self._write_status(key, runtime)
            if runtime.wake.is_set():
                continue
            restarts = [c.restart_at for c in every if c.restart_at is not None]
            restarts += [c.exit_at for c in runtime.containers.values() if c.exit_at is not None]
            if restarts:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(runtime.wake.wait(), max(min(restarts) - loop.time(), 0.0))
            else:
                await runtime.wake.wait()

    def fail_readiness(self, key: Key, failing: bool) -> bool:
        """Make the readiness probe of every container of the pod fail (``failing``) or pass again, as a
        real probe would start or stop failing: a failing container stays running but not ready (pod
        ``ContainersReady`` and ``Ready`` False), one passing again is ready after ``Timing.ready``. False
        when this kubelet runs no such pod."""
        runtime = self.pods.get(key)
        if runtime is None or runtime.process:
            return False
        for container in [*runtime.sidecars.values(), *runtime.containers.values()]:
            container.readiness_failing = failing
            if failing:
                container.ready = False
        runtime.wake.set()
        return True

    async def _start_containers(
        self, key: Key, runtime: PodRuntime, pod: Obj, todo: list[tuple[ContainerRuntime, str, str]]
    ) -> bool:
        """Pull and start ``todo``; images that fail to pull wait in ImagePullBackOff, crashing ones go to
        CrashLoopBackOff. False when the pod went away meanwhile."""
        self._write_status(key, runtime)
        node = self.nodes.get(runtime.node)
        pulls = self.images.plan(pod, node, [img for _, img, _ in todo])
        await self.clock.sleep(max(pulls.values()) + self.clock.timing.start)
        current_pod = self._current(key, runtime)
        if current_pod is None:
            return False
        pod = current_pod
        self.images.finish(pod, node, pulls)
        crashing: list[ContainerRuntime] = []
        for container_rt, image, fingerprint in todo:
            container_rt.image, container_rt.fingerprint = image, fingerprint
            if self.images.fails(image):
                container_rt.running, container_rt.ready = False, False
                container_rt.waiting_reason = "ImagePullBackOff"
                self.images.report_failure(pod, image)
                continue
            container_rt.running, container_rt.ready = True, False
            container_rt.started_at = now_iso()
            container_rt.container_id = "containerd://" + digest(
                f"{runtime.uid}/{container_rt.name}/{container_rt.restart_count}"
            )
            self.events.emit(pod, "Created", f"Created container {container_rt.name}")
            self.events.emit(pod, "Started", f"Started container {container_rt.name}")
            if self.images.crashes(image):
                crashing.append(container_rt)
            elif _restart_policy(pod) != "Always" and not container_rt.sidecar:
                container_rt.exit_at = asyncio.get_running_loop().time() + self.clock.timing.run
        self._write_status(key, runtime)
        if crashing:
            await self.clock.sleep(self.clock.timing.ready)  # it runs a moment, then exits with an error
            current_pod = self._current(key, runtime)
            if current_pod is None:
                return False
            loop = asyncio.get_running_loop()
            for container_rt in crashing:
                if not container_rt.running:
                    continue
                exited = {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": container_rt.started_at,
                    "finishedAt": now_iso(),
                    "containerID": container_rt.container_id,
                }
                if _restart_policy(current_pod) == "Never" and not container_rt.sidecar:
                    container_rt.running, container_rt.ready = False, False
                    container_rt.terminated = exited
                    continue
                container_rt.last_terminated = exited
                container_rt.running, container_rt.ready = False, False
                container_rt.restart_count += 1
                container_rt.waiting_reason = "CrashLoopBackOff"
                container_rt.restart_at = loop.time() + self._crash_backoff(container_rt.crashes)
                container_rt.crashes += 1
                self.events.emit(
                    current_pod,
                    "BackOff",
                    f"Back-off restarting failed container {container_rt.name} in pod {key[1]}",
                    warning=True,
                )
            self._write_status(key, runtime)
        return True

    async def _resize(self, key: Key, runtime: PodRuntime, pod: Obj) -> bool:
        """Admit and actuate a resize of the pod's containers; True when it moved the pod on (loop again),
        False when there is none or it waits (Deferred: tried again when the node frees capacity;
        Infeasible: until the spec changes)."""
        if not self.resize_pods:
            return False
        specs = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
        desired = {n: dict(c.get("resources") or {}) for n, c in specs.items() if n in runtime.containers}
        changed = [n for n, res in desired.items() if not resize.same(runtime.containers[n].allocated, res)]
        if not changed:
            if runtime.resize_pending is not None:  # the resize was withdrawn
                runtime.resize_pending = None
                self._write_status(key, runtime)
            return False
        node = self.nodes.get(runtime.node)
        allocated = {n: c.allocated for n, c in runtime.containers.items()}
        wanted = resize.pod_requests({**allocated, **desired})
        if node is not None:
            capacity = {"cpu": f"{node.config.cpu_millis}m", "memory": f"{node.config.memory_mib}Mi"}
            used = {
                "cpu": resize.quantity(f"{node.cpu_used}m"),
                "memory": resize.quantity(node.memory_used),
            }
            verdict = resize.feasibility(wanted, resize.pod_requests(allocated), used, capacity)
            if verdict is not None:
                if runtime.resize_pending != verdict:
                    runtime.resize_pending = verdict
                    reason = "ResizeInfeasible" if verdict[0] == resize.INFEASIBLE else "ResizeDeferred"
                    self.events.emit(pod, reason, f"Pod resize {verdict[0]}: {verdict[1]}", warning=True)
                    self._write_status(key, runtime)
                return False
        runtime.resize_pending = None
        for name in changed:
            runtime.containers[name].allocated = desired[name]
        if node is not None:
            self.nodes.resize(runtime.node, key, int(wanted["cpu"] * 1000), int(wanted["memory"]))
        runtime.resize_in_progress = True
        self._write_status(key, runtime)
        await self.clock.sleep(self.clock.timing.resize)
        current = self._current(key, runtime)
        if current is None:
            return True
        for name in changed:
            container = runtime.containers[name]
            if container.running and resize.restarts(container.actual, container.allocated, specs[name]):
                self._restart_for_resize(current, container)
            container.actual = container.allocated
        runtime.resize_in_progress = False
        self.events.emit(current, "ResizeCompleted", f"Pod resize completed: {', '.join(sorted(changed))}")
        self._write_status(key, runtime)
        return True

    def _restart_for_resize(self, pod: Obj, container: ContainerRuntime) -> None:
        """A container whose resizePolicy says RestartContainer is stopped and started again."""
        container.last_terminated = {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": container.started_at,
            "finishedAt": now_iso(),
            "containerID": container.container_id,
        }
        container.restart_count += 1
        container.running, container.ready, container.restart_at = False, False, None
        container.waiting_reason = "ContainerCreating"
        self.events.emit(pod, "Killing", f"Container {container.name} resize requires a restart")

    def _exits(self, pod: Obj, runtime: PodRuntime, now: float) -> bool:
        """Run-to-completion containers whose time is up exit 0 (Completed) and stay terminated."""
        exited = False
        for container in runtime.containers.values():
            if container.exit_at is None or now < container.exit_at or not container.running:
                continue
            container.exit_at = None
            container.running, container.ready = False, False
            container.waiting_reason = ""
            container.terminated = {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": container.started_at,
                "finishedAt": now_iso(),
                "containerID": container.container_id,
            }
            exited = True
        return exited

    async def _terminate(self, key: Key, runtime: PodRuntime, pod: Obj) -> None:
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        delay = (
            self.clock.timing.terminate if grace is None else min(self.clock.timing.terminate, float(grace))
        )
        for name, container in [*runtime.containers.items(), *runtime.sidecars.items()]:
            if container.running:
                self.events.emit(pod, "Killing", f"Stopping container {name}")
        await self.clock.sleep(delay)
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
            entry = _status_entry(rt, container)
            if self.resize_pods:
                entry["allocatedResources"] = dict(rt.allocated.get("requests") or {})
                entry["resources"] = rt.actual
            statuses.append(entry)
        init_statuses = []
        sidecars_ready = True
        for c in spec.get("initContainers") or []:
            rt = runtime.sidecars.get(c["name"])
            if rt is not None:
                init_statuses.append(_status_entry(rt, c))
                sidecars_ready = sidecars_ready and rt.ready
            elif c.get("restartPolicy") == "Always" and not runtime.process:
                init_statuses.append(_waiting_entry(c))  # a native sidecar not started yet
                sidecars_ready = False
            else:
                init_statuses.append(_completed_entry(c, runtime.start_time))
        containers_ready = (
            bool(statuses)
            and len(statuses) == len(spec.get("containers") or [])
            and all(s["ready"] for s in statuses)
            and sidecars_ready
        )
        initialized = bool(runtime.containers) or runtime.process or not _native_sidecars(spec)
        conditions = list(old_status.get("conditions") or [])
        by_type = {c.get("type"): c for c in conditions}
        gates_ok = all(
            (by_type.get(g.get("conditionType")) or {}).get("status") == "True"
            for g in spec.get("readinessGates") or []
        )
        if runtime.resize_pending is not None:
            reason, message = runtime.resize_pending
            conditions = set_condition(conditions, resize.PENDING, "True", reason, message)
        else:
            conditions = [c for c in conditions if c.get("type") != resize.PENDING]
        if runtime.resize_in_progress:
            conditions = set_condition(conditions, resize.IN_PROGRESS, "True")
        else:
            conditions = [c for c in conditions if c.get("type") != resize.IN_PROGRESS]
        conditions = set_condition(conditions, "PodScheduled", "True")
        conditions = set_condition(
            conditions,
            "Initialized",
            "True" if initialized else "False",
            "" if initialized else "ContainersNotInitialized",
        )
        conditions = set_condition(
            conditions,
            "ContainersReady",
            "True" if containers_ready else "False",
            "" if containers_ready else "ContainersNotReady",
        )
        ready = containers_ready and gates_ok
        ready_reason = (
            "" if ready else ("ContainersNotReady" if not containers_ready else "ReadinessGatesNotReady")
        )
        containers = spec.get("containers") or []
        finished = (
            _restart_policy(pod) != "Always"
            and len(runtime.containers) == len(containers)
            and all(c.terminated is not None for c in runtime.containers.values())
        )
        if finished:
            ready_reason = "PodCompleted"
            conditions = set_condition(conditions, "ContainersReady", "False", "PodCompleted")
        conditions = set_condition(conditions, "Ready", "True" if ready else "False", ready_reason)
        any_running = any(s.get("started") for s in statuses) or any(
            c.restart_count > 0 for c in runtime.containers.values()
        )
        phase = "Running" if any_running else "Pending"
        if finished:
            failed = any(c.terminated and c.terminated.get("exitCode") for c in runtime.containers.values())
            phase = "Failed" if failed else "Succeeded"
        node = self.nodes.get(runtime.node)
        status = dict(old_status)
        status.update(
            {
                "phase": phase,
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


def _status_entry(rt: ContainerRuntime, container: dict[str, Any]) -> dict[str, Any]:
    """A container's (or a native sidecar's) status as the kubelet reports what it runs."""
    entry: dict[str, Any] = {
        "name": rt.name,
        "image": rt.image if rt.running else container.get("image", rt.image),
        "imageID": "",
        "ready": rt.ready,
        "restartCount": rt.restart_count,
        "started": rt.running,
    }
    if rt.running:
        entry["imageID"] = _image_id(rt.image)
        entry["containerID"] = rt.container_id
        entry["state"] = {"running": {"startedAt": rt.started_at}}
    elif rt.terminated is not None:
        entry["imageID"] = _image_id(rt.image)
        entry["containerID"] = rt.container_id
        entry["state"] = {"terminated": rt.terminated}
        entry["started"] = False
    else:
        entry["state"] = {"waiting": {"reason": rt.waiting_reason}}
    entry["lastState"] = {"terminated": rt.last_terminated} if rt.last_terminated else {}
    return entry


def _waiting_entry(container: dict[str, Any]) -> dict[str, Any]:
    """An init container the kubelet has not started yet."""
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": "PodInitializing"}},
        "lastState": {},
    }


def _completed_entry(container: dict[str, Any], at: str) -> dict[str, Any]:
    """A plain init container: reported as run to completion when the pod started."""
    image = container.get("image", "")
    return {
        "name": container["name"],
        "image": image,
        "imageID": _image_id(image),
        "ready": True,
        "restartCount": 0,
        "started": False,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}},
        "lastState": {},
    }
