"""kube-controller-manager's workload controllers, run inside simcluster: Deployment, ReplicaSet,
StatefulSet, Job, EndpointSlice and disruption (PodDisruptionBudget). Each module holds its pure
decision helpers and one ``Controller``; ``ControllerManager`` runs them on the store's events."""

from __future__ import annotations

from ..store import Store
from .base import Controller, ControllerManager, CreateFn, NowFn, utc_now
from .deployment import DeploymentController
from .disruption import DisruptionController
from .endpointslice import EndpointSliceController
from .job import JobController
from .replicaset import ReplicaSetController
from .statefulset import StatefulSetController

__all__ = ["ControllerManager", "controller_manager"]


def controller_manager(store: Store, create: CreateFn, now: NowFn = utc_now) -> ControllerManager:
    controllers: list[Controller] = [
        DeploymentController(store, create, now),
        ReplicaSetController(store, create, now),
        StatefulSetController(store, create, now),
        JobController(store, create, now),
        EndpointSliceController(store, create, now),
        DisruptionController(store, create, now),
    ]
    return ControllerManager(store, controllers)
