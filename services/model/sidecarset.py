"""SidecarSet rules as pure functions: parse/validate, match, hash, inject, diff, conflicts.

Shared by the injection webhook, ``rollbook inject`` and the planner (in-place sidecar upgrades).
No I/O, no wall clock: the injection time comes in as an argument. The rules are OpenKruise's
(``pkg/webhook/pod/mutating/sidecarset.go``, ``pkg/webhook/sidecarset/validating``,
``pkg/control/sidecarcontrol``); rollbook's choices are in docs/sidecarset.md.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jsonpatch

from services.model import intorpercent, labels

API_VERSION = "apps.kruise.io/v1alpha1"
KIND = "SidecarSet"

# Pod annotations, as OpenKruise writes them.
HASH_ANNOTATION = "kruise.io/sidecarset-hash"
HASH_WITHOUT_IMAGE_ANNOTATION = "kruise.io/sidecarset-hash-without-image"
INJECTED_LIST_ANNOTATION = "kruise.io/sidecarset-injected-list"
# rollbook's own: the AdmissionReview uid of the injection, linking the pod to its SidecarInjected events
# (a pod created with generateName has no name yet at admission).
INJECTION_ID_ANNOTATION = "rollbook.io/sidecar-injection-id"

# Env var marking a container as an injected sidecar (OpenKruise's SidecarEnvKey).
INJECTED_ENV = "IS_INJECTED"

# The seed: a cluster-wide SidecarSet skips these. OpenKruise >= 1.3 excludes none (docs/sidecarset.md).
DEFAULT_EXCLUDED_NAMESPACES: frozenset[str] = frozenset({"kube-system", "kube-public"})

BEFORE_APP = "BeforeAppContainer"
AFTER_APP = "AfterAppContainer"
_INJECT_POLICIES = {BEFORE_APP, AFTER_APP}
_SHARE_POLICIES = {"enabled", "disabled"}
_UPGRADE_TYPES = {"ColdUpgrade", "HotUpgrade"}
_UPDATE_TYPES = {"RollingUpdate", "NotUpdate"}
_NAME_RE = re.compile(r"^[a-zA-Z0-9-]+$")
# Fields of a SidecarContainer that are not Kubernetes container fields: dropped from the injected copy.
_SIDECAR_ONLY_FIELDS = (
    "podInjectPolicy",
    "upgradeStrategy",
    "shareVolumePolicy",
    "shareVolumeDevicePolicy",
    "transferEnv",
    "resourcesPolicy",
)
_SUBPATH_VAR_RE = re.compile(r"\$\(([^)]+)\)")


# updateStrategy.maxUnavailable of a RollingUpdate SidecarSet that sets none (OpenKruise's default).
DEFAULT_MAX_UNAVAILABLE = 1


class SidecarSetError(ValueError):
    """A SidecarSet is invalid; ``field`` is the JSON path of the offending part."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class SidecarSet:
    """A validated, defaulted SidecarSet. ``spec`` is the defaulted spec (plain JSON); never mutate it."""

    name: str
    spec: dict[str, Any]
    hash: str  # kruise.io/sidecarset-hash
    hash_without_image: str  # kruise.io/sidecarset-hash-without-image
    controller_revision: str = ""  # status.latestRevision when the cluster reports one
    resource_version: str = ""

    @property
    def namespace(self) -> str | None:
        return self.spec.get("namespace") or None

    @property
    def namespace_selector(self) -> dict[str, Any] | None:
        return self.spec.get("namespaceSelector") or None

    @property
    def selector(self) -> dict[str, Any]:
        return self.spec.get("selector") or {}

    @property
    def containers(self) -> list[dict[str, Any]]:
        return self.spec.get("containers") or []

    @property
    def init_containers(self) -> list[dict[str, Any]]:
        return self.spec.get("initContainers") or []

    @property
    def volumes(self) -> list[dict[str, Any]]:
        return self.spec.get("volumes") or []

    @property
    def injection_paused(self) -> bool:
        return bool((self.spec.get("injectionStrategy") or {}).get("paused"))

    @property
    def cluster_wide(self) -> bool:
        return self.namespace is None and self.namespace_selector is None


@dataclass(frozen=True)
class InjectionRecord:
    """What one SidecarSet put into one pod: becomes a SidecarInjected event."""

    sidecarset: str
    namespace: str
    pod: str  # the pod's name, or its generateName prefix when the name is not assigned yet
    revision: str  # the SidecarSet hash the pod got
    revision_without_image: str
    controller_revision: str
    containers: list[str]
    init_containers: list[str]


@dataclass(frozen=True)
class PodSidecarRevision:
    """One entry of a pod's kruise.io/sidecarset-hash annotation: which revision a SidecarSet gave it."""

    sidecarset: str
    hash: str
    hash_without_image: str = ""
    sidecars: list[str] = field(default_factory=list)
    controller_revision: str = ""
    update_timestamp: str = ""


# --- parse, default, validate -------------------------------------------------------------------------


def parse_sidecarset(obj: Mapping[str, Any]) -> SidecarSet:
    """Validate an ``apps.kruise.io/v1alpha1`` SidecarSet object and apply OpenKruise's defaults.

    Raises SidecarSetError naming the field on invalid input.
    """
    if not isinstance(obj, Mapping):
        raise SidecarSetError("", "a SidecarSet must be an object")
    kind = obj.get("kind")
    if kind is not None and kind != KIND:
        raise SidecarSetError("kind", f"expected {KIND}, got {kind!r}")
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        raise SidecarSetError("apiVersion", f"expected {API_VERSION}, got {api_version!r}")
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not name or not isinstance(name, str):
        raise SidecarSetError("metadata.name", "required")
    if len(name) > 63 or not _NAME_RE.match(name):
        raise SidecarSetError("metadata.name", f"{name!r} must be at most 63 characters of [a-zA-Z0-9-]")
    raw_spec = obj.get("spec")
    if not isinstance(raw_spec, Mapping):
        raise SidecarSetError("spec", "required")
    spec = _defaulted_spec(raw_spec)
    _validate_spec(spec)
    status = obj.get("status") or {}
    return SidecarSet(
        name=name,
        spec=spec,
        hash=sidecarset_hash(spec),
        hash_without_image=sidecarset_hash_without_image(spec),
        controller_revision=str(status.get("latestRevision") or "") if isinstance(status, Mapping) else "",
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


def _default_container(container: dict[str, Any]) -> None:
    """Kubernetes' own container defaults (SetDefaults_Container), so equal specs hash equally."""
    image = str(container.get("image") or "")
    if "imagePullPolicy" not in container and image:
        tag = image.rsplit("/", 1)[-1]
        untagged = ":" not in tag and "@" not in image
        container["imagePullPolicy"] = "Always" if untagged or tag.endswith(":latest") else "IfNotPresent"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def _defaulted_spec(raw_spec: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(dict(raw_spec))
    for i, container in enumerate(spec.get("containers") or []):
        if not isinstance(container, dict):
            raise SidecarSetError(f"spec.containers[{i}]", "must be an object")
        container.setdefault("podInjectPolicy", BEFORE_APP)
        container.setdefault("upgradeStrategy", {})
        container["upgradeStrategy"].setdefault("upgradeType", "ColdUpgrade")
        container.setdefault("shareVolumePolicy", {})
        container["shareVolumePolicy"].setdefault("type", "disabled")
        _default_container(container)
    for i, container in enumerate(spec.get("initContainers") or []):
        if not isinstance(container, dict):
            raise SidecarSetError(f"spec.initContainers[{i}]", "must be an object")
        container.setdefault("podInjectPolicy", AFTER_APP)
        _default_container(container)
    strategy = spec.setdefault("updateStrategy", {})
    if not isinstance(strategy, dict):
        raise SidecarSetError("spec.updateStrategy", "must be an object")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("partition", 0)
        strategy.setdefault("maxUnavailable", DEFAULT_MAX_UNAVAILABLE)
    spec.setdefault("revisionHistoryLimit", 10)
    return spec


def _validate_int_or_percent(value: Any, where: str) -> None:
    """The Kruise int-or-percent parser, as for CloneSets: decimal percents such as "12.5%" are accepted."""
    try:
        number, _ = intorpercent.parse(value)
    except intorpercent.IntOrPercentError as error:
        raise SidecarSetError(where, str(error)) from None
    if number < 0:
        raise SidecarSetError(where, f"must not be negative, got {value!r}")


def _validate_container(container: Mapping[str, Any], where: str, *, init: bool) -> None:
    name = container.get("name")
    if not name or not isinstance(name, str):
        raise SidecarSetError(f"{where}.name", "required")
    if not container.get("image"):
        raise SidecarSetError(f"{where}.image", f"container {name!r} needs an image")
    if container.get("podInjectPolicy") not in _INJECT_POLICIES:
        raise SidecarSetError(
            f"{where}.podInjectPolicy",
            f"must be {BEFORE_APP} or {AFTER_APP}, got {container.get('podInjectPolicy')!r}",
        )
    if init:
        return
    share = (container.get("shareVolumePolicy") or {}).get("type")
    if share not in _SHARE_POLICIES:
        raise SidecarSetError(
            f"{where}.shareVolumePolicy.type", f"must be enabled or disabled, got {share!r}"
        )
    upgrade = (container.get("upgradeStrategy") or {}).get("upgradeType")
    if upgrade not in _UPGRADE_TYPES:
        raise SidecarSetError(f"{where}.upgradeStrategy.upgradeType", f"unknown upgrade type {upgrade!r}")
    for j, transfer in enumerate(container.get("transferEnv") or []):
        at = f"{where}.transferEnv[{j}]"
        if not isinstance(transfer, Mapping):
            raise SidecarSetError(at, "must be an object")
        if not transfer.get("sourceContainerName") and not transfer.get("sourceContainerNameFrom"):
            raise SidecarSetError(at, "needs sourceContainerName or sourceContainerNameFrom")
        if not transfer.get("envName") and not transfer.get("envNames"):
            raise SidecarSetError(at, "needs envName or envNames")


def _validate_spec(spec: Mapping[str, Any]) -> None:
    selector = spec.get("selector")
    try:
        labels.validate_selector(selector, "spec.selector")
    except labels.SelectorError as err:
        raise SidecarSetError(err.field, err.reason) from None
    if labels.is_empty(selector):
        raise SidecarSetError("spec.selector", "required and must not be empty")
    if spec.get("namespace") and spec.get("namespaceSelector"):
        raise SidecarSetError("spec.namespaceSelector", "namespace and namespaceSelector cannot both be set")
    if spec.get("namespaceSelector"):
        try:
            labels.validate_selector(spec["namespaceSelector"], "spec.namespaceSelector")
        except labels.SelectorError as err:
            raise SidecarSetError(err.field, err.reason) from None
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    if not containers and not init_containers:
        raise SidecarSetError("spec.containers", "at least one container or init container is required")
    seen: dict[str, str] = {}
    for kind, items in (("containers", containers), ("initContainers", init_containers)):
        for i, container in enumerate(items):
            where = f"spec.{kind}[{i}]"
            _validate_container(container, where, init=kind == "initContainers")
            if container["name"] in seen:
                raise SidecarSetError(
                    f"{where}.name", f"{container['name']!r} is also {seen[container['name']]}"
                )
            seen[container["name"]] = where
    volume_names: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, Mapping) or not volume.get("name"):
            raise SidecarSetError(f"spec.volumes[{i}].name", "required")
        if volume["name"] in volume_names:
            raise SidecarSetError(f"spec.volumes[{i}].name", f"duplicate volume {volume['name']!r}")
        volume_names.add(volume["name"])
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type") not in _UPDATE_TYPES:
        raise SidecarSetError(
            "spec.updateStrategy.type", f"must be RollingUpdate or NotUpdate, got {strategy.get('type')!r}"
        )
    if strategy.get("type") == "RollingUpdate":
        _validate_int_or_percent(strategy.get("partition"), "spec.updateStrategy.partition")
        _validate_int_or_percent(strategy.get("maxUnavailable"), "spec.updateStrategy.maxUnavailable")
        partition = strategy.get("partition")
        if strategy.get("selector") and partition not in (0, "0%"):
            raise SidecarSetError(
                "spec.updateStrategy.selector", "selector and partition cannot be used together"
            )
        if strategy.get("selector"):
            try:
                labels.validate_selector(strategy["selector"], "spec.updateStrategy.selector")
            except labels.SelectorError as err:
                raise SidecarSetError(err.field, err.reason) from None
        if any(c.get("restartPolicy") == "Always" for c in init_containers):
            raise SidecarSetError(
                "spec.updateStrategy.type", "init containers with restartPolicy Always require NotUpdate"
            )


def validate_update(old: SidecarSet, new: SidecarSet) -> None:
    """On update, containers cannot be added or renamed, and a container's upgradeType is immutable."""
    old_containers = {c["name"]: c for c in old.containers}
    for i, container in enumerate(new.containers):
        previous = old_containers.get(container["name"])
        if previous is None:
            raise SidecarSetError(
                f"spec.containers[{i}].name",
                f"container {container['name']!r} is not in the existing SidecarSet {old.name!r}: "
                "containers cannot be added or renamed (create another SidecarSet)",
            )
        old_type = previous["upgradeStrategy"]["upgradeType"]
        new_type = container["upgradeStrategy"]["upgradeType"]
        if old_type != new_type:
            raise SidecarSetError(
                f"spec.containers[{i}].upgradeStrategy.upgradeType",
                f"immutable: was {old_type}, got {new_type}",
            )


# --- hashes ------------------------------------------------------------------------------------

_SAFE_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery rand.SafeEncodeString's alphabet


def _safe_encode(text: str) -> str:
    return "".join(_SAFE_ALPHANUMS[ord(ch) % len(_SAFE_ALPHANUMS)] for ch in text)


def _hash_input(spec: Mapping[str, Any], *, without_image: bool) -> dict[str, Any]:
    containers = copy.deepcopy(list(spec.get("containers") or []))
    init_containers = copy.deepcopy(list(spec.get("initContainers") or []))
    if without_image:
        for container in containers + init_containers:
            container["image"] = ""
    payload: dict[str, Any] = {"containers": containers}
    # Native sidecars (init containers with restartPolicy Always) are upgradable, so they count.
    if any(c.get("restartPolicy") == "Always" for c in init_containers):
        payload["initContainers"] = init_containers
    return payload


def _hash(payload: Mapping[str, Any]) -> str:
    # Canonical JSON (sorted keys, compact). OpenKruise hashes Go's struct-order JSON, so the values
    # differ from a Kruise cluster's, but equal specs give equal hashes and any change a new one.
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _safe_encode(hashlib.sha256(canonical.encode()).hexdigest())


def sidecarset_hash(spec: Mapping[str, Any]) -> str:
    """``kruise.io/sidecarset-hash`` of a defaulted spec.

    Only containers count (and native-sidecar init containers); volumes, selector, strategies do not.
    """
    return _hash(_hash_input(spec, without_image=False))


def sidecarset_hash_without_image(spec: Mapping[str, Any]) -> str:
    """The same with every image blanked: equal values mean only images differ (in-place upgradable)."""
    return _hash(_hash_input(spec, without_image=True))


# --- matching ----------------------------------------------------------------------------------


def pod_namespace(pod: Mapping[str, Any], namespace: str | None = None) -> str:
    """The namespace a pod is created in: the request's, else the object's, else ``default``."""
    return namespace or (pod.get("metadata") or {}).get("namespace") or "default"


def is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def matches_pod(
    sidecarset: SidecarSet,
    pod: Mapping[str, Any],
    namespace: str | None = None,
    *,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> bool:
    """Whether ``sidecarset`` selects ``pod`` (created in ``namespace``).

    A cluster-wide SidecarSet (no namespace, no namespaceSelector) skips ``excluded_namespaces``; an
    explicit ``namespace`` or ``namespaceSelector`` is taken as asked. A namespaceSelector needs the
    Namespace's labels: without them (``None``) the pod does not match, as in OpenKruise.
    """
    ns = pod_namespace(pod, namespace)
    if sidecarset.namespace is not None:
        if sidecarset.namespace != ns:
            return False
    elif sidecarset.namespace_selector is not None:
        if namespace_labels is None or not labels.matches(sidecarset.namespace_selector, namespace_labels):
            return False
    elif ns in excluded_namespaces:
        return False
    if not is_active(pod):
        return False
    return labels.matches(sidecarset.selector, (pod.get("metadata") or {}).get("labels") or {})


# --- injection ---------------------------------------------------------------------


def _env_names(container: Mapping[str, Any]) -> set[Any]:
    return {e.get("name") for e in container.get("env") or [] if isinstance(e, Mapping)}


def _add_env(container: dict[str, Any], env: Mapping[str, Any]) -> None:
    """Append ``env`` unless the container already has one of that name (the sidecar's own values win)."""
    if env.get("name") not in _env_names(container):
        container.setdefault("env", []).append(copy.deepcopy(dict(env)))


def _is_injected(container: Mapping[str, Any]) -> bool:
    return any(e.get("name") == INJECTED_ENV and e.get("value") == "true" for e in container.get("env") or [])


def _field_ref_value(pod: Mapping[str, Any], field_path: str) -> str | None:
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path.strip())
    if not match:
        return None
    return ((pod.get("metadata") or {}).get(match.group(1)) or {}).get(match.group(2))


def transfer_envs(sidecar: Mapping[str, Any], pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The env vars ``transferEnv`` copies from the pod's app containers (missing ones are skipped)."""
    by_name = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    result: list[dict[str, Any]] = []
    for transfer in sidecar.get("transferEnv") or []:
        source_name = transfer.get("sourceContainerName")
        source_from = transfer.get("sourceContainerNameFrom") or {}
        if not source_name and source_from.get("fieldRef"):
            source_name = _field_ref_value(pod, source_from["fieldRef"].get("fieldPath", ""))
        source = by_name.get(source_name)
        if source is None:
            continue
        wanted = sorted({n for n in [transfer.get("envName"), *(transfer.get("envNames") or [])] if n})
        source_env = {e.get("name"): e for e in source.get("env") or []}
        result.extend(copy.deepcopy(source_env[name]) for name in wanted if name in source_env)
    return result


def _share_mounts(sidecar: dict[str, Any], app_containers: Sequence[Mapping[str, Any]]) -> None:
    """shareVolume(Device)Policy enabled: mount the app containers' volumes at the same paths."""
    taken_paths = {m.get("mountPath") for m in sidecar.get("volumeMounts") or []}
    taken_paths |= {d.get("devicePath") for d in sidecar.get("volumeDevices") or []}
    share_mounts = (sidecar.get("shareVolumePolicy") or {}).get("type") == "enabled"
    share_devices = (sidecar.get("shareVolumeDevicePolicy") or {}).get("type") == "enabled"
    for app in app_containers:
        app_env = {e.get("name"): e for e in app.get("env") or []}
        if share_mounts:
            for mount in app.get("volumeMounts") or []:
                if mount.get("mountPath") in taken_paths:
                    continue
                taken_paths.add(mount.get("mountPath"))
                sidecar.setdefault("volumeMounts", []).append(copy.deepcopy(mount))
                # A subPathExpr mount resolves $(VAR) from the container's env: bring those vars along.
                for var in _SUBPATH_VAR_RE.findall(mount.get("subPathExpr") or ""):
                    if var in app_env:
                        _add_env(sidecar, app_env[var])
        if share_devices:
            for device in app.get("volumeDevices") or []:
                if device.get("devicePath") in taken_paths:
                    continue
                taken_paths.add(device.get("devicePath"))
                sidecar.setdefault("volumeDevices", []).append(copy.deepcopy(device))


def _build_sidecar(spec_container: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Kubernetes container a SidecarContainer becomes in ``pod``."""
    sidecar = copy.deepcopy(dict(spec_container))
    sidecar["env"] = list(sidecar.get("env") or [])
    _add_env(sidecar, {"name": INJECTED_ENV, "value": "true"})
    for env in transfer_envs(spec_container, pod):
        _add_env(sidecar, env)
    # Init containers share too (OpenKruise buildSidecars: GetInjectedVolumeMountsAndEnvs and
    # GetInjectedVolumeDevices for init containers as for containers); only the pod's containers are shared.
    apps = [c for c in (pod.get("spec") or {}).get("containers") or [] if not _is_injected(c)]
    _share_mounts(sidecar, apps)
    for key in _SIDECAR_ONLY_FIELDS:
        sidecar.pop(key, None)
    return sidecar


def _place(
    existing: list[dict[str, Any]], sidecars: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Put sidecars around ``existing``: same-named containers are replaced in place."""
    positions = {c.get("name"): i for i, c in enumerate(existing)}
    merged = list(existing)
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    for policy, sidecar in sidecars:
        if sidecar["name"] in positions:
            merged[positions[sidecar["name"]]] = sidecar
        elif policy == BEFORE_APP:
            before.append(sidecar)
        else:
            after.append(sidecar)
    return before + merged + after


def _format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash_entry(ss: SidecarSet, hash_value: str, sidecars: list[str], now: datetime) -> dict[str, Any]:
    # Same keys and order as OpenKruise's SidecarSetUpgradeSpec JSON.
    entry: dict[str, Any] = {
        "updateTimestamp": _format_time(now),
        "hash": hash_value,
        "sidecarSetName": ss.name,
        "sidecarList": sidecars,
    }
    if ss.controller_revision:
        entry["controllerRevision"] = ss.controller_revision
    return entry


def json_object(text: Any) -> dict[str, Any]:
    """A JSON-object annotation value (the per-SidecarSet hash and in-place state maps); anything
    missing, malformed or not an object reads as empty, as OpenKruise tolerates hand-edited pods."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _patch_pod_metadata(annotations: dict[str, str], patches: Sequence[Mapping[str, Any]]) -> None:
    """patchPodMetadata: Retain (only if absent), Overwrite, MergePatchJson."""
    for patch in patches:
        policy = patch.get("patchPolicy") or "Retain"
        for key, value in (patch.get("annotations") or {}).items():
            if policy == "Retain":
                annotations.setdefault(key, value)
            elif policy == "Overwrite":
                annotations[key] = value
            elif policy == "MergePatchJson":
                current = json_object(annotations.get(key))
                try:
                    addition = json.loads(value)
                except ValueError:
                    continue
                if isinstance(addition, dict):
                    current.update(addition)
                    annotations[key] = json.dumps(current, sort_keys=True, separators=(",", ":"))


def select_sidecarsets(
    pod: Mapping[str, Any],
    sidecarsets: Iterable[SidecarSet],
    namespace: str | None = None,
    *,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> list[SidecarSet]:
    """The SidecarSets that inject into ``pod``, in injection order: by SidecarSet name."""
    chosen = [
        ss
        for ss in sidecarsets
        if not ss.injection_paused
        and matches_pod(
            ss, pod, namespace, namespace_labels=namespace_labels, excluded_namespaces=excluded_namespaces
        )
    ]
    return sorted(chosen, key=lambda ss: ss.name)


def inject(
    pod: Mapping[str, Any],
    sidecarsets: Iterable[SidecarSet],
    *,
    now: datetime,
    namespace: str | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
    injection_id: str = "",
) -> tuple[dict[str, Any], list[InjectionRecord]]:
    """The pod as admission would create it, and one record per SidecarSet that injected into it.

    ``sidecarsets`` may hold any SidecarSets: those that do not select the pod, or are paused, are
    ignored. The input pod is not modified; with no match a copy of it comes back with no records.
    """
    result: dict[str, Any] = copy.deepcopy(dict(pod))
    matched = select_sidecarsets(
        pod,
        sidecarsets,
        namespace,
        namespace_labels=namespace_labels,
        excluded_namespaces=excluded_namespaces,
    )
    if not matched:
        return result, []
    ns = pod_namespace(pod, namespace)
    metadata = result.setdefault("metadata", {})
    spec = result.setdefault("spec", {})
    pod_name = metadata.get("name") or metadata.get("generateName") or ""

    containers: list[tuple[str, dict[str, Any]]] = []
    init_containers: list[tuple[str, dict[str, Any]]] = []
    volumes_needed: list[dict[str, Any]] = []
    pull_secrets: list[dict[str, Any]] = []
    records: list[InjectionRecord] = []
    for ss in matched:
        ss_volumes = {v["name"]: v for v in ss.volumes}
        built = [(c["podInjectPolicy"], _build_sidecar(c, pod)) for c in ss.containers]
        built_init = [(c["podInjectPolicy"], _build_sidecar(c, pod)) for c in ss.init_containers]
        containers.extend(built)
        init_containers.extend(built_init)
        # Only volumes the sidecars themselves mount are injected, in OpenKruise's order (buildSidecars):
        # init containers first, then containers; per container its volumeMounts, then its volumeDevices.
        for spec_container in ss.init_containers + ss.containers:
            own = list(spec_container.get("volumeMounts") or []) + list(
                spec_container.get("volumeDevices") or []
            )
            volumes_needed.extend(
                copy.deepcopy(ss_volumes[m["name"]]) for m in own if m.get("name") in ss_volumes
            )
        pull_secrets.extend(copy.deepcopy(s) for s in ss.spec.get("imagePullSecrets") or [])
        records.append(
            InjectionRecord(
                sidecarset=ss.name,
                namespace=ns,
                pod=pod_name,
                revision=ss.hash,
                revision_without_image=ss.hash_without_image,
                controller_revision=ss.controller_revision,
                containers=[c["name"] for c in ss.containers],
                init_containers=[c["name"] for c in ss.init_containers],
            )
        )

    # Init containers of all SidecarSets sorted by name (stable), then placed.
    init_containers.sort(key=lambda item: item[1]["name"])
    if init_containers:
        spec["initContainers"] = _place(list(spec.get("initContainers") or []), init_containers)
    spec["containers"] = _place(list(spec.get("containers") or []), containers)

    if volumes_needed:
        volumes = list(spec.get("volumes") or [])
        names = {v.get("name") for v in volumes}
        for volume in volumes_needed:
            if volume["name"] not in names:  # the pod's own volume wins; duplicates dropped
                volumes.append(volume)
                names.add(volume["name"])
        spec["volumes"] = volumes
    # mergeSidecarSecrets: the pod's secrets, then the SidecarSets', each name once (the pod's own
    # duplicates are dropped too).
    secrets: list[dict[str, Any]] = []
    secret_names: set[Any] = set()
    for secret in list(spec.get("imagePullSecrets") or []) + pull_secrets:
        if secret.get("name") not in secret_names:
            secrets.append(secret)
            secret_names.add(secret.get("name"))
    if secrets or "imagePullSecrets" in spec:
        spec["imagePullSecrets"] = secrets

    annotations = metadata.setdefault("annotations", {})
    for ss in matched:
        _patch_pod_metadata(annotations, ss.spec.get("patchPodMetadata") or [])
    hashes = json_object(annotations.get(HASH_ANNOTATION))
    hashes_without_image = json_object(annotations.get(HASH_WITHOUT_IMAGE_ANNOTATION))
    for ss in matched:
        sidecar_names = sorted(
            [c["name"] for c in ss.containers]
            + [c["name"] for c in ss.init_containers if c.get("restartPolicy") == "Always"]
        )
        hashes[ss.name] = _hash_entry(ss, ss.hash, sidecar_names, now)
        hashes_without_image[ss.name] = _hash_entry(ss, ss.hash_without_image, sidecar_names, now)
    annotations[HASH_ANNOTATION] = json.dumps(hashes, separators=(",", ":"), sort_keys=False)
    annotations[HASH_WITHOUT_IMAGE_ANNOTATION] = json.dumps(hashes_without_image, separators=(",", ":"))
    injected = set(filter(None, annotations.get(INJECTED_LIST_ANNOTATION, "").split(",")))
    injected |= {ss.name for ss in matched}
    annotations[INJECTED_LIST_ANNOTATION] = ",".join(sorted(injected))
    if injection_id:
        annotations[INJECTION_ID_ANNOTATION] = injection_id
    return result, records


def json_patch(original: Mapping[str, Any], injected: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``original`` into ``injected`` (what the webhook answers)."""
    ops: list[dict[str, Any]] = jsonpatch.make_patch(dict(original), dict(injected)).patch
    return ops


def apply_patch(original: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply RFC 6902 operations as the API server does (the input is not modified)."""
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(original)), list(ops))
    return patched


# --- reading back what a pod got (for the planner) ----------------------------------------------------


def pod_sidecar_revisions(pod: Mapping[str, Any]) -> dict[str, PodSidecarRevision]:
    """Per SidecarSet name, the revision recorded on the pod at injection (or by a later upgrade).

    Reads the JSON form and OpenKruise's older flat ``{"name": "hash"}`` form.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    hashes = json_object(annotations.get(HASH_ANNOTATION))
    without = json_object(annotations.get(HASH_WITHOUT_IMAGE_ANNOTATION))
    result: dict[str, PodSidecarRevision] = {}
    for name, entry in hashes.items():
        other = without.get(name)
        other_hash = other.get("hash", "") if isinstance(other, dict) else str(other or "")
        if isinstance(entry, dict):
            result[name] = PodSidecarRevision(
                sidecarset=name,
                hash=str(entry.get("hash", "")),
                hash_without_image=other_hash,
                sidecars=list(entry.get("sidecarList") or []),
                controller_revision=str(entry.get("controllerRevision", "")),
                update_timestamp=str(entry.get("updateTimestamp", "")),
            )
        else:
            result[name] = PodSidecarRevision(sidecarset=name, hash=str(entry), hash_without_image=other_hash)
    return result


def injected_sidecarsets(pod: Mapping[str, Any]) -> list[str]:
    """Names in ``kruise.io/sidecarset-injected-list``."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return [n for n in annotations.get(INJECTED_LIST_ANNOTATION, "").split(",") if n]


# --- conflicts between SidecarSets -------------------------------------------------------------


def _requirements(
    selector: Mapping[str, Any] | None,
) -> dict[str, tuple[bool, bool, set[str] | None, set[str]]]:
    """Per label key: (must exist, must not exist, allowed values or None for any, forbidden values)."""
    result: dict[str, tuple[bool, bool, set[str] | None, set[str]]] = {}

    def merge(key: str, exists: bool, absent: bool, allowed: set[str] | None, forbidden: set[str]) -> None:
        e, a, al, fo = result.get(key, (False, False, None, set()))
        if allowed is not None:
            al = set(allowed) if al is None else al & allowed
        result[key] = (e or exists, a or absent, al, fo | forbidden)

    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        merge(key, True, False, {value}, set())
    for expr in (selector or {}).get("matchExpressions") or []:
        values = set(expr.get("values") or [])
        op = expr.get("operator")
        if op == "In":
            merge(expr["key"], True, False, values, set())
        elif op == "NotIn":
            merge(expr["key"], False, False, None, values)
        elif op == "Exists":
            merge(expr["key"], True, False, None, set())
        elif op == "DoesNotExist":
            merge(expr["key"], False, True, None, set())
    return result


def selectors_overlap(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether some label set satisfies both selectors (exact: label keys are independent)."""
    left, right = _requirements(a), _requirements(b)
    for key in set(left) | set(right):
        e1, a1, al1, fo1 = left.get(key, (False, False, None, set()))
        e2, a2, al2, fo2 = right.get(key, (False, False, None, set()))
        exists, absent = e1 or e2, a1 or a2
        if exists and absent:
            return False
        allowed = al1 if al2 is None else (al2 if al1 is None else al1 & al2)
        if allowed is not None and not (allowed - fo1 - fo2):
            return False
    return True


def scopes_overlap(a: SidecarSet, b: SidecarSet) -> bool:
    """Whether two SidecarSets' namespace scopes can share a pod (conservative for namespaceSelector)."""
    if a.namespace is not None and b.namespace is not None:
        return a.namespace == b.namespace
    if a.namespace_selector is not None and b.namespace_selector is not None:
        return selectors_overlap(a.namespace_selector, b.namespace_selector)
    return True


def find_conflicts(candidate: SidecarSet, existing: Iterable[SidecarSet]) -> list[str]:
    """Why ``candidate`` cannot be applied next to ``existing`` (empty when it can). Messages name both."""
    problems: list[str] = []
    own_names = [c["name"] for c in candidate.containers + candidate.init_containers]
    own_volumes = {v["name"]: v for v in candidate.volumes}
    for other in sorted(existing, key=lambda ss: ss.name):
        if other.name == candidate.name:
            continue
        if not (scopes_overlap(candidate, other) and selectors_overlap(candidate.selector, other.selector)):
            continue
        other_names = {c["name"] for c in other.containers + other.init_containers}
        for name in own_names:
            if name in other_names:
                problems.append(
                    f"container {name!r} of SidecarSet {candidate.name!r} already exists in SidecarSet "
                    f"{other.name!r}, and both can select the same pods"
                )
        for volume in other.volumes:
            mine = own_volumes.get(volume["name"])
            if mine is not None and mine != volume:
                problems.append(
                    f"volume {volume['name']!r} of SidecarSet {candidate.name!r} differs from the volume of "
                    f"that name in SidecarSet {other.name!r}, and both can select the same pods"
                )
    return problems
