"""What the kubelet knows of each pod it runs and of each of its containers: shared by the simulated
kubelet (kubelet.py) and the process runtime (processes.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


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
    exit_at: float | None = None  # loop time when a run-to-completion container exits 0
    terminated: dict[str, Any] | None = None  # the state of a container that exited and stays so
    allocated: dict[str, Any] = field(default_factory=dict)  # resources the kubelet admitted
    actual: dict[str, Any] = field(default_factory=dict)  # resources the runtime applied
    sidecar: bool = False  # a native sidecar (init container, restartPolicy Always): always restarted
    readiness_failing: bool = (
        False  # its readiness probe fails (SimCluster.fail_readiness): running, not ready
    )


@dataclass
class PodRuntime:
    uid: str
    node: str
    ip: str
    start_time: str
    containers: dict[str, ContainerRuntime] = field(default_factory=dict)
    # The native sidecars (init containers with restartPolicy Always) the simulated kubelet runs.
    sidecars: dict[str, ContainerRuntime] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    process: bool = False  # run by the process runtime (processes.py)
    resize_pending: tuple[str, str] | None = None  # (Deferred | Infeasible, message)
    resize_in_progress: bool = False
