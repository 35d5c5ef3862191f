"""Classify a template change and build the in-place patches (OpenKruise
pkg/util/inplaceupdate/inplace_update.go and inplace_update_defaults.go).

Classes, from mildest to hardest:
- Dynamic: applied to the running pod with no container restart (template metadata; probes in extended mode);
- Rebuild: the container is recreated in place, the pod is kept (image; env/envFrom/volumeMounts/volumes in
  extended mode);
- Resize: container cpu/memory requests and limits, resized in the running pod through ``pods/resize``
  (Kubernetes 1.33+) where the API server allows it (services/kinds/cloneset/rules/resize.py); the
  containers whose changed resource has ``resizePolicy: RestartContainer`` restart, the others keep
  running. It combines with the other classes (carried in ``Change.resize`` beside ``kind``); on a node
  that does not resize pods, a resize is Static;
- Static: the pod must be recreated (everything else).
The default mode is what stock Kubernetes and OpenKruise accept; the extended mode is switched on per
CloneSet with the annotation ``rollbook.io/inplace-mode: extended`` and needs a kubelet that accepts it.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from services.kinds.cloneset.rules import resize
from services.kinds.cloneset.rules.names import (
    INPLACE_GRACE_ANNOTATION,
    INPLACE_GRACE_ANNOTATION_OLD,
    INPLACE_READY_CONDITION,
    INPLACE_STATE_ANNOTATION,
    INPLACE_STATE_ANNOTATION_OLD,
    KRUISE_POD_READY_CONDITION,
    POD_TEMPLATE_HASH_LABEL,
    REVISION_LABEL,
)
from services.kinds.cloneset.rules.podstate import container_statuses
from services.model.availability import RESIZE_STATE_KEY as RESIZE_STATE_KEY  # the update's record

NONE, DYNAMIC, REBUILD, STATIC = 0, 1, 2, 3
CLASS_NAMES = {NONE: "None", DYNAMIC: "Dynamic", REBUILD: "Rebuild", STATIC: "Static"}

_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_EXTENDED_REBUILD = ("env", "envFrom", "volumeMounts")


@dataclass(slots=True)
class Change:
    """The difference between a pod's revision and the target revision."""

    kind: int = NONE
    static_field: str | None = None  # first field that forces a recreate
    labels: dict[str, str | None] = field(default_factory=dict)  # label -> new value (None = remove)
    annotations: dict[str, str | None] = field(default_factory=dict)
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> changed fields
    restart: list[str] = field(default_factory=list)  # containers recreated in place
    volumes: list[Any] | None = None  # new pod volumes (extended mode), when they changed
    removed_volumes: list[str] = field(default_factory=list)
    spec_patch: dict[str, Any] | None = None  # built once per change, shared by every pod it applies to
    resize: dict[str, dict[str, Any]] = field(default_factory=dict)  # container -> resources (pods/resize)
    resize_restart: list[str] = field(default_factory=list)  # containers the resize restarts

    @property
    def in_place(self) -> bool:
        return self.kind != STATIC

    @property
    def class_name(self) -> str:
        """The class as the trail names it: Dynamic, Rebuild, Resize, or Rebuild+Resize and the like."""
        if not self.resize:
            return CLASS_NAMES[self.kind]
        return resize.CLASS_NAME if self.kind <= DYNAMIC else f"{CLASS_NAMES[self.kind]}+{resize.CLASS_NAME}"

    @property
    def restarts(self) -> bool:
        """Whether applying it restarts a container (the pod leaves service meanwhile)."""
        return self.kind >= REBUILD or bool(self.resize_restart)

    def bump(self, kind: int, where: str | None = None) -> None:
        if kind == STATIC and self.static_field is None:
            self.static_field = where
        self.kind = max(self.kind, kind)


def _map_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    diff: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    diff.update({k: None for k in old if k not in new})
    return diff


# What the API server and its default admission plugins (ServiceAccount, DefaultTolerationSeconds, Priority)
# add to a pod whose template leaves a field out, with the value they add. A pod may carry these although its
# revision's template did not set them; with any other value, or any other field the target template lacks,
# the pod was created from a template that set it and patching its images would leave that behind.
_DEFAULTED_POD_FIELDS: dict[str, Any] = {
    "dnsPolicy": "ClusterFirst",
    "restartPolicy": "Always",
    "schedulerName": "default-scheduler",
    "securityContext": {},
    "terminationGracePeriodSeconds": 30,
    "serviceAccountName": "default",
    "serviceAccount": "default",
    "enableServiceLinks": True,
    "priority": 0,
    "preemptionPolicy": "PreemptLowerPriority",
}
_SCHEDULED_POD_FIELDS = ("nodeName",)  # set by the scheduler, any value
_DEFAULT_TOLERATIONS = tuple(
    {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
)
_TOKEN_VOLUME_PREFIX = "kube-api-access-"  # the ServiceAccount plugin's projected token volume
_TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"  # and its mount in every container
_DEFAULT_TERMINATION_MESSAGE = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}


def _default_pull_policy(image: Any) -> str:
    """Always for ``:latest`` or an untagged image, IfNotPresent for a tag or a digest."""
    tail = str(image or "").rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def _defaulted_container(want: dict[str, Any], image: Any) -> dict[str, Any]:
    """``want`` as the API server stores it in a pod running ``image``: termination message and pull policy
    defaults, ``resources: {}`` (a limit without a request requesting the limit), ports' protocol TCP."""
    out = {**_DEFAULT_TERMINATION_MESSAGE, "imagePullPolicy": _default_pull_policy(image), **want}
    resources = dict(out.get("resources") or {})
    limits = resources.get("limits")
    if isinstance(limits, dict) and limits:
        resources["requests"] = {**limits, **(resources.get("requests") or {})}
    out["resources"] = resources
    if isinstance(out.get("ports"), list):
        out["ports"] = [
            {**p, "protocol": p.get("protocol") or "TCP"} if isinstance(p, dict) else p for p in out["ports"]
        ]
    return out


def _without_token_mount(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    have = dict(have)
    mounts = [m for m in have.get("volumeMounts") or [] if m.get("mountPath") != _TOKEN_MOUNT_PATH]
    if mounts or "volumeMounts" in want:
        have["volumeMounts"] = mounts
    else:
        have.pop("volumeMounts", None)
    return have


def _same_containers(wanted: list[Any], actual: list[Any], images_may_differ: bool) -> bool:
    """Whether each pod container is the template's up to the API server's defaults (images aside when
    ``images_may_differ``): the same names in the same order, nothing more, nothing different."""
    if [c.get("name") for c in wanted] != [c.get("name") for c in actual]:
        return False
    for want, have in zip(wanted, actual, strict=True):
        have = _without_token_mount(have, want)
        if images_may_differ:
            want = {**want, "image": have.get("image")}
        if _defaulted_container(have, have.get("image")) != _defaulted_container(want, have.get("image")):
            return False
    return True


def _added_list_item(key: str, item: Any) -> bool:
    """An item the API server, its admission plugins or the controller add to a pod's list field."""
    if not isinstance(item, dict):
        return False
    if key == "tolerations":
        return item in _DEFAULT_TOLERATIONS
    if key == "volumes":
        return str(item.get("name", "")).startswith(_TOKEN_VOLUME_PREFIX) and "projected" in item
    if key == "readinessGates":  # the controller's gates (OpenKruise's and rollbook's)
        return item.get("conditionType") in (INPLACE_READY_CONDITION, KRUISE_POD_READY_CONDITION)
    return False


def _pod_spec_as_template_sets(pod_spec: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    """The pod-level fields of ``pod_spec`` less what the API server added to a template like ``spec``
    (containers aside); None when the pod has a field ``spec`` lacks with a value no default explains."""
    out: dict[str, Any] = {}
    for key, value in pod_spec.items():
        if key in ("containers", "initContainers") or key in _SCHEDULED_POD_FIELDS:
            continue
        if key == "serviceAccount" and value == pod_spec.get("serviceAccountName"):
            continue  # the deprecated field mirrors serviceAccountName
        if key in ("tolerations", "volumes", "readinessGates") and isinstance(value, list):
            ours = spec.get(key) or []
            kept = [item for item in value if not _added_list_item(key, item) or item in ours]
            if kept or key in spec:
                out[key] = kept
            continue
        if key not in spec:
            if key in _DEFAULTED_POD_FIELDS and value == _DEFAULTED_POD_FIELDS[key]:
                continue
            return None
        out[key] = value
    return out


def template_from_pod(pod: dict[str, Any], template: dict[str, Any]) -> dict[str, Any] | None:
    """The template of a pod at a revision rollbook has no record of (another controller's, such as
    OpenKruise's before a hand-over), as far as the pod shows it: the target ``template`` with the images
    the pod's containers have. Only when the pod is ``template`` in everything but its containers' images,
    as the API server stores a pod created from it: every pod spec and container field the pod has is one
    the template sets, with the same value, or one the API server and its admission plugins add when the
    template leaves it out, with the value they add (scheduler, service account and its token volume and
    mounts, default tolerations, priority, termination message, pull policy, empty resources, port
    protocol). So patching the images leaves nothing of the old revision behind. None otherwise: the pod's
    revision stays unknown and the pod is recreated."""
    spec, pod_spec = template.get("spec") or {}, pod.get("spec") or {}
    rest = {k: v for k, v in spec.items() if k not in ("containers", "initContainers")}
    if _pod_spec_as_template_sets(pod_spec, spec) != rest:
        return None
    if not _same_containers(spec.get("initContainers") or [], pod_spec.get("initContainers") or [], False):
        return None
    wanted = spec.get("containers") or []
    if not _same_containers(wanted, pod_spec.get("containers") or [], True):
        return None
    actual = pod_spec.get("containers") or []
    containers = [{**want, "image": have.get("image")} for want, have in zip(wanted, actual, strict=True)]
    metadata = dict(template.get("metadata") or {})
    pod_meta = pod.get("metadata") or {}
    for key in ("labels", "annotations"):
        if key in metadata:
            present = pod_meta.get(key) or {}
            metadata[key] = {k: present[k] for k in metadata[key] or {} if k in present}
    return {**template, "metadata": metadata, "spec": {**spec, "containers": containers}}


def classify(old: dict[str, Any], new: dict[str, Any], extended: bool) -> Change:
    change = Change()
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    change.labels = _map_diff(old_meta.get("labels") or {}, new_meta.get("labels") or {})
    change.annotations = _map_diff(old_meta.get("annotations") or {}, new_meta.get("annotations") or {})
    if old_meta != new_meta:
        change.bump(DYNAMIC)
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for key in sorted(set(old_spec) | set(new_spec)):
        if key == "containers" or old_spec.get(key) == new_spec.get(key):
            continue
        if key == "volumes" and extended:
            _classify_volumes(change, old_spec.get("volumes") or [], new_spec.get("volumes") or [], new_spec)
        else:
            change.bump(STATIC, f"spec.template.spec.{key}")
    _classify_containers(change, old_spec.get("containers") or [], new_spec.get("containers") or [], extended)
    if change.resize and resize.qos_class(old_spec) != resize.qos_class(new_spec):
        # The API server refuses a resize that changes the pod's QoS class: the pod is recreated.
        change.bump(STATIC, f"spec.template.spec.containers[{sorted(change.resize)[0]}].resources")
    if change.kind == STATIC:
        change.resize, change.resize_restart = {}, []
    return change


def _classify_containers(change: Change, old: list[Any], new: list[Any], extended: bool) -> None:
    if [c.get("name") for c in old] != [c.get("name") for c in new]:
        change.bump(STATIC, "spec.template.spec.containers")
        return
    for index, (before, after) in enumerate(zip(old, new, strict=True)):
        if before == after:
            continue
        name = after["name"]
        changed: dict[str, Any] = {}
        restart = False
        for key in sorted(set(before) | set(after)):
            if before.get(key) == after.get(key):
                continue
            changed[key] = after.get(key)
            if key == "image":
                restart = True
            elif key == "resources" and resize.resizable(before.get(key), after.get(key), after) is None:
                del changed[key]  # not part of the pod patch: written through pods/resize
                if resize.same(before.get(key), after.get(key)):
                    continue  # the same quantities written differently
                change.resize[name] = resize.defaulted(after.get(key))
                if resize.restarts(before.get(key), after.get(key), after):
                    change.resize_restart.append(name)
            elif extended and key in _PROBES:
                change.bump(DYNAMIC)
            elif extended and key in _EXTENDED_REBUILD:
                restart = True
            else:
                change.bump(STATIC, f"spec.template.spec.containers[{index}].{key}")
        if restart:
            change.bump(REBUILD)
            change.restart.append(name)
        if changed:
            change.containers[name] = changed


def _classify_volumes(change: Change, old: list[Any], new: list[Any], new_spec: dict[str, Any]) -> None:
    before = {v.get("name"): v for v in old}
    after = {v.get("name"): v for v in new}
    touched = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    change.volumes = new
    change.removed_volumes = sorted(n for n in before if n not in after)
    change.bump(REBUILD)
    for container in new_spec.get("containers") or []:
        mounts = {m.get("name") for m in container.get("volumeMounts") or []}
        if mounts & touched and container["name"] not in change.restart:
            change.restart.append(container["name"])


def _dump(value: Any) -> str:
    """Compact JSON; maps are built in the order Go's encoding/json writes them (struct fields in
    declaration order, map keys sorted), so the bytes match OpenKruise's for the same content."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _sorted_map(value: dict[str, Any]) -> dict[str, Any]:
    return {k: value[k] for k in sorted(value)}


def container_patch(change: Change, old_containers: list[Any]) -> list[dict[str, Any]]:
    """Strategic-merge entries for the changed containers (merge key: name)."""
    old_by_name = {c.get("name"): c for c in old_containers}
    entries = []
    for name, changed in change.containers.items():
        entry: dict[str, Any] = {"name": name}
        before = old_by_name.get(name) or {}
        for key, value in changed.items():
            if key in _PROBES and value is not None:
                entry[key] = {**value, "$patch": "replace"}
            elif key in ("env", "volumeMounts") and value is not None:
                merge_key = "name" if key == "env" else "mountPath"
                kept = {item.get(merge_key) for item in value}
                gone = [
                    {merge_key: item.get(merge_key), "$patch": "delete"}
                    for item in before.get(key) or []
                    if item.get(merge_key) not in kept
                ]
                entry[key] = list(value) + gone
            else:
                entry[key] = value
        entries.append(entry)
    return entries


# --- OpenKruise's two pod annotations (apis/apps/pub/inplace_update.go) ----------------------------------
#
# apps.kruise.io/inplace-update-grace holds the UpdateSpec of pkg/util/inplaceupdate/inplace_update.go:
#   {"revision", "containerImages"?, "metaDataPatch"? (base64 of a strategic merge patch), "graceSeconds"}
# apps.kruise.io/inplace-update-state holds InPlaceUpdateState:
#   {"revision", "updateTimestamp", "lastContainerStatuses": null | {name: {"imageID"?}}, "updateImages"?,
#    "containerBatchesRecord"?: [{"timestamp", "containers": [sorted names]}]}
# rollbook's extended in-place mode adds one key to each, which OpenKruise ignores when it reads them:
# "rollbookContainerPatch" (the env/probe/volumeMount part of the patch, grace) and "containerID" in a
# lastContainerStatuses entry (a container restarted without an image change).

EXTENDED_PATCH_KEY = "rollbookContainerPatch"
# The resize's target resources (container -> resources) in the state annotation, beside OpenKruise's
# ``updateResources``: the update is complete once the kubelet has actuated them (resize.actuated).


def metadata_patch(change: Change) -> dict[str, Any] | None:
    """The template-metadata part of a change as the strategic merge patch OpenKruise stores
    (``CreateTwoWayMergePatch`` of the two templates' metadata); None when metadata did not change."""
    metadata: dict[str, Any] = {}
    if change.annotations:
        metadata["annotations"] = _sorted_map(change.annotations)
    if change.labels:
        metadata["labels"] = _sorted_map(change.labels)
    return {"metadata": metadata} if metadata else None


def container_images(change: Change) -> dict[str, str]:
    return {n: c["image"] for n, c in sorted(change.containers.items()) if c.get("image") is not None}


def update_spec_json(change: Change, revision_name: str, grace_seconds: int, extended: bool) -> str:
    """The grace annotation: what the round after the grace period applies."""
    spec: dict[str, Any] = {"revision": revision_name}
    images = container_images(change)
    if images:
        spec["containerImages"] = images
    meta = metadata_patch(change)
    if meta is not None:
        spec["metaDataPatch"] = base64.b64encode(_dump(meta).encode()).decode()
    spec["graceSeconds"] = grace_seconds
    if extended:
        extra = [
            {k: v for k, v in entry.items() if k != "image"}
            for entry in container_patch(change, [])
            if set(entry) - {"name", "image"}
        ]
        if extra or change.volumes is not None:
            spec[EXTENDED_PATCH_KEY] = {
                "containers": extra,
                "restart": sorted(change.restart),
                **_volumes_patch(change),
            }
    return _dump(spec)


def _volumes_patch(change: Change) -> dict[str, Any]:
    if change.volumes is None:
        return {}
    return {
        "volumes": list(change.volumes) + [{"name": n, "$patch": "delete"} for n in change.removed_volumes]
    }


def _state(
    revision_name: str, update_timestamp: str, update_images: bool, targets: dict[str, Any] | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {
        "revision": revision_name,
        "updateTimestamp": update_timestamp,
        "lastContainerStatuses": None,
    }
    if targets:
        state["updateResources"] = True
    if update_images:
        state["updateImages"] = True
    if targets:
        state[RESIZE_STATE_KEY] = targets
    return state


def _apply(
    pod: dict[str, Any],
    state: dict[str, Any],
    images: dict[str, str],
    restart_only: list[str],
    now_text: str,
) -> dict[str, Any]:
    """Record in ``state`` what patching these images does (``defaultPatchUpdateSpecToPod``): the imageID
    before, per container whose image changes and that has a status, and one batch record."""
    statuses = {s.get("name", ""): s for s in (pod.get("status") or {}).get("containerStatuses") or ()}
    last: dict[str, Any] = dict(state.get("lastContainerStatuses") or {})
    for name in sorted(set(images) | set(restart_only)):
        status = statuses.get(name)
        if status is None:
            continue
        entry: dict[str, str] = {}
        if status.get("imageID"):
            entry["imageID"] = status["imageID"]
        if name not in images and status.get("containerID"):
            entry["containerID"] = status["containerID"]  # extended mode: restart without a new image
        last[name] = entry
    state["lastContainerStatuses"] = _sorted_map(last) if last else None
    records = list(state.get("containerBatchesRecord") or [])
    records.append({"timestamp": now_text, "containers": sorted(set(images) | set(restart_only))})
    # Keys in InPlaceUpdateState's declaration order.
    ordered: dict[str, Any] = {
        k: state[k] for k in ("revision", "updateTimestamp", "lastContainerStatuses") if k in state
    }
    for key in ("updateEnvFromMetadata", "updateResources", "updateImages"):
        if state.get(key):
            ordered[key] = state[key]
    ordered["containerBatchesRecord"] = records
    if state.get(RESIZE_STATE_KEY):
        ordered[RESIZE_STATE_KEY] = state[RESIZE_STATE_KEY]
    return ordered


def start_patch(
    pod: dict[str, Any],
    change: Change,
    old_template: dict[str, Any],
    revision_name: str,
    revision_hash: str,
    now_text: str,
    lifecycle_patch: dict[str, Any],
    grace_seconds: int,
    extended: bool,
) -> dict[str, Any]:
    """The one pod write that starts an in-place update (``updatePodInPlace``): revision labels to the
    target, lifecycle ``Updating``, the state annotation; then with no grace period the images and the
    template metadata in the same write, with one the grace annotation instead (images untouched)."""
    labels: dict[str, str | None] = {REVISION_LABEL: revision_hash, POD_TEMPLATE_HASH_LABEL: revision_hash}
    labels.update(lifecycle_patch["metadata"]["labels"])
    annotations: dict[str, str | None] = dict(lifecycle_patch["metadata"]["annotations"])
    state = _state(revision_name, now_text, bool(container_images(change)), change.resize)
    annotations[INPLACE_STATE_ANNOTATION_OLD] = None
    patch: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}}
    if grace_seconds > 0:
        annotations[INPLACE_STATE_ANNOTATION] = _dump(state)
        annotations[INPLACE_GRACE_ANNOTATION] = update_spec_json(
            change, revision_name, grace_seconds, extended
        )
        return patch
    labels.update(change.labels)
    annotations.update(change.annotations)
    images = container_images(change)
    restart_only = [n for n in change.restart if n not in images]
    annotations[INPLACE_STATE_ANNOTATION] = _dump(_apply(pod, state, images, restart_only, now_text))
    annotations[INPLACE_GRACE_ANNOTATION] = None
    annotations[INPLACE_GRACE_ANNOTATION_OLD] = None
    if change.spec_patch is None:
        spec: dict[str, Any] = {}
        entries = container_patch(change, (old_template.get("spec") or {}).get("containers") or [])
        if entries:
            spec["containers"] = entries
        spec.update(_volumes_patch(change))
        change.spec_patch = spec
    if change.spec_patch:
        # Shared between the pods of this round: action payloads are immutable values.
        patch["spec"] = change.spec_patch
    return patch


def grace_expiry_patch(
    pod: dict[str, Any], update_spec: dict[str, Any], state: dict[str, Any], now_text: str
) -> dict[str, Any]:
    """The write after the grace period (``finishGracePeriod``): what the grace annotation recorded —
    images, template metadata — applied, the state completed (``updateTimestamp`` kept), grace removed."""
    images = update_spec.get("containerImages") or {}
    images = {str(k): str(v) for k, v in images.items()} if isinstance(images, dict) else {}
    raw_extra = update_spec.get(EXTENDED_PATCH_KEY)
    extra: dict[str, Any] = raw_extra if isinstance(raw_extra, dict) else {}
    extra_containers = [c for c in extra.get("containers") or [] if isinstance(c, dict) and c.get("name")]
    labels: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    meta = _decode_metadata_patch(update_spec.get("metaDataPatch"))
    if meta is not None:
        labels.update(meta.get("labels") or {})
        annotations.update(meta.get("annotations") or {})
    restart_only = sorted({str(n) for n in extra.get("restart") or []} - set(images))
    annotations[INPLACE_STATE_ANNOTATION] = _dump(_apply(pod, dict(state), images, restart_only, now_text))
    annotations[INPLACE_STATE_ANNOTATION_OLD] = None
    annotations[INPLACE_GRACE_ANNOTATION] = None
    annotations[INPLACE_GRACE_ANNOTATION_OLD] = None
    metadata: dict[str, Any] = {"annotations": annotations}
    if labels:
        metadata["labels"] = labels
    patch: dict[str, Any] = {"metadata": metadata}
    by_name: dict[str, dict[str, Any]] = {n: {"name": n, "image": i} for n, i in sorted(images.items())}
    for entry in extra_containers:
        by_name.setdefault(entry["name"], {"name": entry["name"]}).update(
            {k: v for k, v in entry.items() if k != "name"}
        )
    spec: dict[str, Any] = {}
    if by_name:
        spec["containers"] = list(by_name.values())
    if extra.get("volumes") is not None:
        spec["volumes"] = extra["volumes"]
    if spec:
        patch["spec"] = spec
    return patch


def _decode_metadata_patch(value: Any) -> dict[str, Any] | None:
    """``metaDataPatch`` is a Go byte slice: base64 in JSON. A plain JSON object is accepted too."""
    if isinstance(value, dict):
        return value.get("metadata") if isinstance(value.get("metadata"), dict) else None
    if not isinstance(value, str) or not value:
        return None
    try:
        decoded = json.loads(base64.b64decode(value, validate=True))
    except (ValueError, binascii.Error):
        return None
    metadata = decoded.get("metadata") if isinstance(decoded, dict) else None
    return metadata if isinstance(metadata, dict) else None


def drop_grace_patch() -> dict[str, Any]:
    """The pod's revision no longer matches the grace record: only the record goes."""
    return {"metadata": {"annotations": {INPLACE_GRACE_ANNOTATION: None, INPLACE_GRACE_ANNOTATION_OLD: None}}}


def condition(ready: bool, reason: str, now_text: str) -> dict[str, Any]:
    return {
        "type": INPLACE_READY_CONDITION,
        "status": "True" if ready else "False",
        "reason": reason,
        "lastTransitionTime": now_text,
    }


def _with_tag(image: Any) -> str:
    text = str(image or "")
    return text if ":" in text.rsplit("/", 1)[-1] or "@" in text else f"{text}:latest"


def update_complete(pod: dict[str, Any], state: dict[str, Any]) -> bool:
    """``DefaultCheckInPlaceUpdateCompleted``: no later batch pending, and every container recorded in
    ``lastContainerStatuses`` has a status whose imageID changed, or is unchanged while its image already
    equals the spec image (a spec image without a tag compared as ``:latest``). An entry with a
    ``containerID`` (extended mode) is complete once the container was restarted."""
    for key in ("nextContainerImages", "nextContainerRefMetadata", "nextContainerResources"):
        if state.get(key):
            return False
    targets = state.get(RESIZE_STATE_KEY)
    if isinstance(targets, dict) and targets and not resize.actuated(pod, targets):
        return False
    recorded = state.get("lastContainerStatuses") or {}
    if not isinstance(recorded, dict):
        return True
    statuses = container_statuses(pod)
    spec_images = {c.get("name"): c.get("image") for c in (pod.get("spec") or {}).get("containers") or []}
    for name, before in recorded.items():
        now_status = statuses.get(name)
        if now_status is None:
            return False
        before = before if isinstance(before, dict) else {}
        old_container_id = before.get("containerID")
        if old_container_id:
            if now_status.get("containerID") and now_status.get("containerID") != old_container_id:
                continue
            return False
        if now_status.get("imageID", "") != before.get("imageID", ""):
            continue
        if _with_tag(now_status.get("image")) == _with_tag(spec_images.get(name)):
            continue
        return False
    return True
