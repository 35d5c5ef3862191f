"""Injecting SidecarSets into a pod at admission: build each sidecar, place it, merge volumes, secrets and
annotations, and record what went in. Also the JSON patch the webhook answers with.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import jsonpatch

from services.model.sidecarset.core import (
    BEFORE_APP,
    DEFAULT_EXCLUDED_NAMESPACES,
    HASH_ANNOTATION,
    HASH_WITHOUT_IMAGE_ANNOTATION,
    INJECTED_ENV,
    INJECTED_LIST_ANNOTATION,
    INJECTION_ID_ANNOTATION,
    InjectionRecord,
    SidecarSet,
    json_object,
)
from services.model.sidecarset.resources import computed_resources
from services.model.sidecarset.revisions import revision_to_inject
from services.model.sidecarset.selection import pod_namespace, select_sidecarsets
from services.model.sidecarset.sharing import add_env, is_injected, share_mounts, transfer_envs

# Fields of a SidecarContainer that are not Kubernetes container fields: dropped from the injected copy.
_SIDECAR_ONLY_FIELDS = (
    "podInjectPolicy",
    "upgradeStrategy",
    "shareVolumePolicy",
    "shareVolumeDevicePolicy",
    "transferEnv",
    "resourcesPolicy",
)


def _build_sidecar(
    spec_container: Mapping[str, Any], pod: Mapping[str, Any], sidecar_names: Sequence[str]
) -> dict[str, Any]:
    """The Kubernetes container a SidecarContainer becomes in ``pod`` (``sidecar_names``: every container
    name of the SidecarSets injecting into it, which a resourcesPolicy never takes as a target)."""
    sidecar = copy.deepcopy(dict(spec_container))
    if spec_container.get("resourcesPolicy") is not None:
        sidecar["resources"] = computed_resources(spec_container["resourcesPolicy"], pod, sidecar_names)
    sidecar["env"] = list(sidecar.get("env") or [])
    add_env(sidecar, {"name": INJECTED_ENV, "value": "true"})
    for env in transfer_envs(spec_container, pod):
        add_env(sidecar, env)
    # Init containers share too (OpenKruise buildSidecars: GetInjectedVolumeMountsAndEnvs and
    # GetInjectedVolumeDevices for init containers as for containers); only the pod's containers are shared.
    apps = [c for c in (pod.get("spec") or {}).get("containers") or [] if not is_injected(c)]
    share_mounts(sidecar, apps)
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


def format_time(moment: datetime) -> str:
    """A Kubernetes timestamp (RFC 3339, UTC, whole seconds), as ``metav1.Time`` is written."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash_entry(
    ss: SidecarSet, hash_value: str, sidecars: list[str], now: datetime, *, with_revision: bool
) -> dict[str, Any]:
    # Same keys and order as OpenKruise's SidecarSetUpgradeSpec JSON. Only the hash annotation's entry
    # names the controller revision; OpenKruise leaves it out of the without-image one.
    entry: dict[str, Any] = {
        "updateTimestamp": format_time(now),
        "hash": hash_value,
        "sidecarSetName": ss.name,
        "sidecarList": sidecars,
    }
    if with_revision and ss.controller_revision:
        entry["controllerRevision"] = ss.controller_revision
    return entry


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


def inject(
    pod: Mapping[str, Any],
    sidecarsets: Iterable[SidecarSet],
    *,
    now: datetime,
    namespace: str | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
    injection_id: str = "",
    revisions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    sort_containers_by_name: bool = False,
) -> tuple[dict[str, Any], list[InjectionRecord]]:
    """The pod as admission would create it, and one record per SidecarSet that injected into it.

    ``sidecarsets`` may hold any SidecarSets: those that do not select the pod, or are paused, are
    ignored. The input pod is not modified; with no match a copy of it comes back with no records.
    ``revisions``: per SidecarSet name, its recorded revisions (ControllerRevision-shaped), which a
    SidecarSet pinning one (``injectionStrategy.revision``) injects from. ``sort_containers_by_name``:
    OpenKruise's ``EnableSortSidecarContainerByName`` gate. Raises InjectionError when the pod cannot be
    injected as asked (OpenKruise refuses such a pod).
    """
    result: dict[str, Any] = copy.deepcopy(dict(pod))
    selected = select_sidecarsets(
        pod,
        sidecarsets,
        namespace,
        namespace_labels=namespace_labels,
        excluded_namespaces=excluded_namespaces,
    )
    if not selected:
        return result, []
    ns = pod_namespace(pod, namespace)
    matched = [
        revision_to_inject(
            ss, pod, (revisions or {}).get(ss.name) or (), namespace=ns, injection_id=injection_id
        )
        for ss in selected
    ]
    sidecar_names = [c["name"] for ss in matched for c in ss.containers + ss.init_containers]
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
        built = [(c["podInjectPolicy"], _build_sidecar(c, pod, sidecar_names)) for c in ss.containers]
        built_init = [
            (c["podInjectPolicy"], _build_sidecar(c, pod, sidecar_names)) for c in ss.init_containers
        ]
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

    # Init containers of all SidecarSets sorted by name (stable), then placed; containers too with the gate.
    init_containers.sort(key=lambda item: item[1]["name"])
    if sort_containers_by_name:
        containers.sort(key=lambda item: item[1]["name"])
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
        hashes[ss.name] = _hash_entry(ss, ss.hash, sidecar_names, now, with_revision=True)
        hashes_without_image[ss.name] = _hash_entry(
            ss, ss.hash_without_image, sidecar_names, now, with_revision=False
        )
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
