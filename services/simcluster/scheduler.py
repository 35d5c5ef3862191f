"""The simulated scheduler: binds each pending pod to the node with the fewest pods that still has room
(pod count, CPU requests, ``nodeSelector``), setting ``spec.nodeName`` and ``PodScheduled``; pods that fit
nowhere stay Pending/Unschedulable (one ``FailedScheduling`` event) and are retried when a pod goes away."""

from __future__ import annotations

import asyncio

from .nodes import Clock, EventRecorder, Nodes, Tasks, pod_cpu, pod_memory, set_condition
from .resources import NODES, PODS
from .store import Key, Store, WatchEvent, key_of


class Scheduler:
    def __init__(self, store: Store, nodes: Nodes, clock: Clock, events: EventRecorder) -> None:
        self.store = store
        self.nodes = nodes
        self.clock = clock
        self.events = events
        self.tasks = Tasks()
        self._pending: set[Key] = set()
        self._unschedulable_reported: set[str] = set()
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if self.tasks.closed:
            return
        if event.resource is NODES:
            uncordoned = ((event.prev or {}).get("spec") or {}).get("unschedulable") and not (
                event.obj.get("spec") or {}
            ).get("unschedulable")
            if uncordoned and self._pending:
                self.tasks.spawn(self._retry_pending())
            return
        if event.resource is not PODS:
            return
        key = key_of(event.obj)
        if event.type == "DELETED":
            self._unschedulable_reported.discard(event.obj["metadata"]["uid"])
            self._pending.discard(key)
            if self._pending:
                self.tasks.spawn(self._retry_pending())
            return
        meta = event.obj["metadata"]
        if (event.obj.get("spec") or {}).get("nodeName"):
            return
        if key not in self._pending and not meta.get("deletionTimestamp"):
            self._pending.add(key)
            self.tasks.spawn(self._schedule(key, meta["uid"]))

    async def _schedule(self, key: Key, uid: str) -> None:
        await self.clock.sleep(self.clock.timing.schedule)
        pod = self.store.objects[PODS].get(key)
        if pod is None or pod["metadata"]["uid"] != uid or (pod.get("spec") or {}).get("nodeName"):
            self._pending.discard(key)
            return
        cpu, memory = pod_cpu(pod), pod_memory(pod)
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        candidates = [
            n
            for n in self.nodes.by_name.values()
            if n.fits(cpu, memory)
            and not self._cordoned(n.config.name)
            and all(
                dict(n.config.labels, **{"kubernetes.io/hostname": n.config.name}).get(k) == v
                for k, v in selector.items()
            )
        ]
        wanted_node = (
            min(candidates, key=lambda n: (len(n.pods), n.cpu_used, n.index)) if candidates else None
        )
        status = dict(pod.get("status") or {})
        if wanted_node is None:
            message = f"0/{len(self.nodes)} nodes are available: insufficient pods, cpu or no matching node."
            status["conditions"] = set_condition(
                status.get("conditions") or [], "PodScheduled", "False", "Unschedulable", message
            )
            self.store.commit_internal(PODS, dict(pod, status=status))
            if uid not in self._unschedulable_reported:
                self._unschedulable_reported.add(uid)
                self.events.emit(
                    pod, "FailedScheduling", message, warning=True, component="default-scheduler"
                )
            return  # stays in _pending; retried when capacity frees up
        self._pending.discard(key)
        status["conditions"] = set_condition(status.get("conditions") or [], "PodScheduled", "True")
        bound = dict(pod, spec=dict(pod["spec"], nodeName=wanted_node.config.name), status=status)
        # Reserve before the write: the write's own event starts the pod on this node.
        self.nodes.reserve(wanted_node, key, cpu, memory)
        self._unschedulable_reported.discard(uid)
        bound = self.store.commit_internal(PODS, bound)
        self.events.emit(
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

    def _cordoned(self, node: str) -> bool:
        """``kubectl cordon`` / ``drain``: a node with ``spec.unschedulable`` takes no new pods."""
        obj = self.store.objects[NODES].get(("", node))
        return bool(((obj or {}).get("spec") or {}).get("unschedulable"))

    async def close(self) -> None:
        await self.tasks.close()
