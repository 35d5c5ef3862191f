"""simcluster: embedded Kubernetes API server, simulated scheduler and kubelet (docs/simcluster.md)."""

from .cluster import SimCluster, SimConfig
from .faults import FaultConfig
from .nodes import NodeConfig, Timing

__all__ = ["FaultConfig", "NodeConfig", "SimCluster", "SimConfig", "Timing"]
