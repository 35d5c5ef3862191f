"""The resource types simcluster serves, with what discovery and REST handling need to know about each."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)  # identity equality and hashing: one instance per type, hashed per write
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False  # a /status subresource; status is ignored on the main resource
    custom: bool = False  # CRD-style: no strategic merge patch, resourceVersion required on update
    short_names: tuple[str, ...] = ()
    singular: str = ""
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = field(
        default=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    )
    # The scale subresource (autoscaling/v1 Scale): spec replicas, status replicas, label selector paths.
    scale: tuple[str, str, str] | None = None
    list_kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def crd_name(self) -> str:
        """``plural.group``, the name a CustomResourceDefinition of this resource has."""
        return f"{self.plural}.{self.group}"


NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, has_status=True, short_names=("ns",))
PODS = ResourceType("", "v1", "pods", "Pod", True, has_status=True, short_names=("po",), categories=("all",))
PVCS = ResourceType(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, has_status=True, short_names=("pvc",)
)
EVENTS = ResourceType("", "v1", "events", "Event", True, short_names=("ev",))
NODES = ResourceType("", "v1", "nodes", "Node", False, has_status=True, short_names=("no",))
CLONESETS = ResourceType(
    "apps.kruise.io",
    "v1alpha1",
    "clonesets",
    "CloneSet",
    True,
    has_status=True,
    custom=True,
    short_names=("clone",),
    categories=("all",),
    scale=(".spec.replicas", ".status.replicas", ".status.labelSelector"),
)
SIDECARSETS = ResourceType(
    "apps.kruise.io",
    "v1alpha1",
    "sidecarsets",
    "SidecarSet",
    False,
    has_status=True,
    custom=True,
)
MUTATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
VALIDATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
# What an install touches, stored and served as an API server without controllers does (as envtest).
SERVICE_ACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",))
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",))
SERVICES = ResourceType(
    "", "v1", "services", "Service", True, has_status=True, short_names=("svc",), categories=("all",)
)
DEPLOYMENTS = ResourceType(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    True,
    has_status=True,
    short_names=("deploy",),
    categories=("all",),
    scale=(".spec.replicas", ".status.replicas", ""),
)
# What kube-controller-manager's workload controllers (controllers/) create and act on.
REPLICASETS = ResourceType(
    "apps",
    "v1",
    "replicasets",
    "ReplicaSet",
    True,
    has_status=True,
    short_names=("rs",),
    categories=("all",),
    scale=(".spec.replicas", ".status.replicas", ""),
)
STATEFULSETS = ResourceType(
    "apps",
    "v1",
    "statefulsets",
    "StatefulSet",
    True,
    has_status=True,
    short_names=("sts",),
    categories=("all",),
    scale=(".spec.replicas", ".status.replicas", ""),
)
CONTROLLER_REVISIONS = ResourceType("apps", "v1", "controllerrevisions", "ControllerRevision", True)
ENDPOINT_SLICES = ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
JOBS = ResourceType("batch", "v1", "jobs", "Job", True, has_status=True, categories=("all",))
PDBS = ResourceType(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, has_status=True, short_names=("pdb",)
)
# Stored and validated only: simcluster has no pod network, so nothing enforces a policy (as with a CNI
# without NetworkPolicy support).
NETWORK_POLICIES = ResourceType(
    "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, short_names=("netpol",)
)
_RBAC = "rbac.authorization.k8s.io"
ROLES = ResourceType(_RBAC, "v1", "roles", "Role", True)
ROLE_BINDINGS = ResourceType(_RBAC, "v1", "rolebindings", "RoleBinding", True)
CLUSTER_ROLES = ResourceType(_RBAC, "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = ResourceType(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
CRDS = ResourceType(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    False,
    has_status=True,
    short_names=("crd", "crds"),
)

ALL: tuple[ResourceType, ...] = (
    NAMESPACES,
    PODS,
    PVCS,
    EVENTS,
    NODES,
    CLONESETS,
    SIDECARSETS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
    LEASES,
    SERVICE_ACCOUNTS,
    SECRETS,
    CONFIGMAPS,
    SERVICES,
    DEPLOYMENTS,
    REPLICASETS,
    STATEFULSETS,
    CONTROLLER_REVISIONS,
    ENDPOINT_SLICES,
    JOBS,
    PDBS,
    NETWORK_POLICIES,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    CRDS,
)

BY_PATH: dict[tuple[str, str, str], ResourceType] = {r.key: r for r in ALL}


def served(disabled: tuple[str, ...] = ()) -> tuple[ResourceType, ...]:
    """Every resource type but the ``disabled`` ones, named by plural (``sidecarsets``) or plural.group
    (``sidecarsets.apps.kruise.io``, as a CRD is named); an unknown name is a ValueError."""
    known = {r.plural for r in ALL} | {f"{r.plural}.{r.group}" for r in ALL if r.group}
    unknown = sorted(set(disabled) - known)
    if unknown:
        raise ValueError(f"disabled_resources: unknown resource(s) {', '.join(unknown)}")
    names = set(disabled)
    return tuple(r for r in ALL if r.plural not in names and f"{r.plural}.{r.group}" not in names)


_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version order (the first is the preferred one): GA before beta before alpha, higher
    numbers first, then any other name alphabetically (apimachinery's CompareKubeAwareVersionStrings)."""
    match = _KUBE_VERSION.match(version)
    if match is None:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0), "")


def groups(types: tuple[ResourceType, ...] = ALL) -> dict[str, list[str]]:
    """Group name -> served versions, the preferred first (core group excluded)."""
    out: dict[str, list[str]] = {}
    for r in types:
        if r.group and r.version not in out.setdefault(r.group, []):
            out[r.group].append(r.version)
    return {group: sorted(versions, key=version_priority) for group, versions in out.items()}
