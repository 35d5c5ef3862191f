"""Parsing a SidecarSet: OpenKruise's defaults, then its validating webhook's rules (errors name the field).

``validate_update`` holds the rules that compare an update with the stored object.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from services.model import intorpercent, labels
from services.model.cloneset_validation import GoValue, go_intorstring
from services.model.sidecarset.core import (
    AFTER_APP,
    ALWAYS,
    API_VERSION,
    BEFORE_APP,
    CUSTOM_VERSION_LABEL,
    DEFAULT_MAX_UNAVAILABLE,
    DUPLICATE,
    INVALID,
    KIND,
    PARTIAL,
    REDACTION_MARK,
    REQUIRED,
    KruiseError,
    SidecarSet,
    SidecarSetError,
)
from services.model.sidecarset.hashes import sidecarset_hash, sidecarset_hash_without_image
from services.model.sidecarset.resources import MAX, SUM, QuantityError, check_expression

_INJECT_POLICIES = {BEFORE_APP, AFTER_APP}
_SHARE_POLICIES = {"enabled", "disabled"}
_UPGRADE_TYPES = {"ColdUpgrade", "HotUpgrade"}
_UPDATE_TYPES = {"RollingUpdate", "NotUpdate"}
_NAME_RE = re.compile(r"^[a-zA-Z0-9-]+$")
# OpenKruise's wording of its name rule (validateSidecarSetName, a RegexError) and of a bad percent
# (Kubernetes' IsValidPercent).
_NAME_MSG = (
    "sidecarset name must consist of alphanumeric characters or '-' (e.g. 'example-com', regex used for"
    " validation is '^[a-zA-Z0-9\\-]+$')"
)
_PERCENT_MSG = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%',"
    " regex used for validation is '[0-9]+%')"
)


def _container_path(where: str) -> str:
    """OpenKruise's path for a container's resourcesPolicy: its webhook indexes the root path
    (``spec[0]``), for init containers and containers alike."""
    return "spec[" + where.rsplit("[", 1)[1]


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
        raise SidecarSetError(
            "metadata.name",
            "required",
            KruiseError(REQUIRED, "metadata.name", "name or generateName is required"),
        )
    if not _NAME_RE.match(name):
        raise SidecarSetError(
            "metadata.name",
            f"{name!r} must be at most 63 characters of [a-zA-Z0-9-]",
            KruiseError(INVALID, "metadata.name", _NAME_MSG, name),
        )
    if len(name) > 63:
        raise SidecarSetError(
            "metadata.name",
            f"{name!r} must be at most 63 characters of [a-zA-Z0-9-]",
            KruiseError(INVALID, "metadata.name", "must be no more than 63 characters", name),
        )
    raw_spec = obj.get("spec")
    if not isinstance(raw_spec, Mapping):
        raise SidecarSetError("spec", "required")
    spec = _defaulted_spec(raw_spec)
    _validate_spec(spec)
    status = obj.get("status") or {}
    # A recorded (redacted) SidecarSet carries the hashes of its real spec: the values its pods hold.
    mark = obj.get(REDACTION_MARK)
    recorded = mark if isinstance(mark, Mapping) else {}
    fnv = recorded.get("revisionFnv")
    return SidecarSet(
        name=name,
        spec=spec,
        hash=str(recorded.get("sidecarsetHash") or "") or sidecarset_hash(spec),
        hash_without_image=str(recorded.get("sidecarsetHashWithoutImage") or "")
        or sidecarset_hash_without_image(spec),
        revision_fnv=fnv if isinstance(fnv, int) and not isinstance(fnv, bool) else None,
        controller_revision=str(status.get("latestRevision") or "") if isinstance(status, Mapping) else "",
        resource_version=str(metadata.get("resourceVersion") or ""),
        custom_version=_custom_version(metadata, spec),
    )


def _custom_version(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    labels_ = metadata.get("labels") if isinstance(metadata, Mapping) else None
    label = labels_.get(CUSTOM_VERSION_LABEL) if isinstance(labels_, Mapping) else None
    return str(spec.get("customVersion") or label or "")


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
    # OpenKruise (ValidatePositiveIntOrPercent): a string that is no percent, or a negative integer.
    if isinstance(value, str):
        kruise = KruiseError(INVALID, where, _PERCENT_MSG, go_intorstring(value))
    else:
        kruise = KruiseError(INVALID, where, "must be greater than or equal to 0", value)
    try:
        number, _ = intorpercent.parse(value)
    except intorpercent.IntOrPercentError as error:
        raise SidecarSetError(where, str(error), kruise) from None
    if number < 0:
        raise SidecarSetError(where, f"must not be negative, got {value!r}", kruise)


def _validate_container(container: Mapping[str, Any], where: str, *, init: bool) -> None:
    name = container.get("name")
    if not name or not isinstance(name, str):
        raise SidecarSetError(f"{where}.name", "required", KruiseError(REQUIRED, f"{where}.name"))
    if not container.get("image"):
        raise SidecarSetError(
            f"{where}.image", f"container {name!r} needs an image", KruiseError(REQUIRED, f"{where}.image")
        )
    if container.get("podInjectPolicy") not in _INJECT_POLICIES:
        raise SidecarSetError(
            f"{where}.podInjectPolicy",
            f"must be {BEFORE_APP} or {AFTER_APP}, got {container.get('podInjectPolicy')!r}",
            None
            if init  # OpenKruise checks the policy of containers only
            else KruiseError(
                INVALID,
                "spec.container.podInjectPolicy",
                "unsupported pod inject policy",
                container.get("podInjectPolicy"),
            ),
        )
    policy = container.get("resourcesPolicy")
    if policy is not None:
        kruise_at = _container_path(where) + ".resourcesPolicy"
        if init and container.get("restartPolicy") != "Always":
            raise SidecarSetError(
                f"{where}.resourcesPolicy",
                "is only supported for containers with restartPolicy Always",
                KruiseError(
                    INVALID,
                    kruise_at,
                    "resourcesPolicy is only supported for containers with RestartPolicy Always",
                    policy,
                ),
            )
        _validate_resources_policy(container, policy, f"{where}.resourcesPolicy", kruise_at)
    if init:
        return
    share = (container.get("shareVolumePolicy") or {}).get("type")
    if share not in _SHARE_POLICIES:
        raise SidecarSetError(
            f"{where}.shareVolumePolicy.type",
            f"must be enabled or disabled, got {share!r}",
            KruiseError(
                INVALID,
                "spec.container.shareVolumePolicy",
                "unsupported share volume policy",
                GoValue(f"v1beta1.ShareVolumePolicy{{Type:{go_string(share)}}}"),
            ),
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


def go_string(value: Any) -> str:
    """A string-typed Go field as ``%#v`` prints it."""
    import json

    return json.dumps(value if isinstance(value, str) else "")


def _validate_resources_policy(container: Mapping[str, Any], policy: Any, where: str, kruise_at: str) -> None:
    """OpenKruise 1.9's checks of a resourcesPolicy (the mode is a CRD enum)."""
    if not isinstance(policy, Mapping):
        raise SidecarSetError(where, "must be an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping) or resources.get("limits") or resources.get("requests"):
        raise SidecarSetError(
            where,
            "resourcesPolicy and resources cannot be configured together",
            KruiseError(
                INVALID, kruise_at, "resourcesPolicy and resources cannot be configured together", policy
            ),
        )
    if policy.get("targetContainersMode") not in (SUM, MAX):
        raise SidecarSetError(
            f"{where}.targetContainersMode", f"must be sum or max, got {policy.get('targetContainersMode')!r}"
        )
    regex = policy.get("targetContainersNameRegex", ".*")
    if not isinstance(regex, str):
        raise SidecarSetError(f"{where}.targetContainersNameRegex", "must be a string")
    if not regex:
        raise SidecarSetError(
            f"{where}.targetContainersNameRegex",
            "invalid empty regex",
            KruiseError(REQUIRED, f"{kruise_at}.targetContainersNameRegex", "invalid empty regex"),
        )
    try:
        re.compile(str(regex))
    except re.error as err:
        raise SidecarSetError(f"{where}.targetContainersNameRegex", f"invalid regex pattern: {err}") from None
    expressions = policy.get("resourcesExpr") or {}
    if not isinstance(expressions, Mapping):
        raise SidecarSetError(f"{where}.resourcesExpr", "must be an object")
    for kind in ("limits", "requests"):
        if not isinstance(expressions.get(kind) or {}, Mapping):
            raise SidecarSetError(f"{where}.resourcesExpr.{kind}", "must be an object")
    if not expressions.get("limits") and not expressions.get("requests"):
        raise SidecarSetError(
            f"{where}.resourcesExpr",
            "needs limits or requests (or both)",
            KruiseError(
                INVALID,
                f"{kruise_at}.resourcesExpr",
                "at least one of limits or requests must be configured",
                expressions,
            ),
        )
    for kind in ("limits", "requests"):
        for resource, expression in (expressions.get(kind) or {}).items():
            if resource not in ("cpu", "memory"):
                at = f"{where}.resourcesExpr.{kind}"
                raise SidecarSetError(at, f"only cpu and memory, got {resource!r}")
            if not expression:
                continue
            if not isinstance(expression, str):
                raise SidecarSetError(f"{where}.resourcesExpr.{kind}.{resource}", "must be a string")
            try:
                check_expression(str(expression), resource)
            except QuantityError as err:
                raise SidecarSetError(
                    f"{where}.resourcesExpr.{kind}.{resource}", f"invalid expression {expression!r}: {err}"
                ) from None


def _validate_injection_strategy(spec: Mapping[str, Any]) -> None:
    strategy = spec.get("injectionStrategy") or {}
    if not isinstance(strategy, Mapping):
        raise SidecarSetError("spec.injectionStrategy", "must be an object")
    revision = strategy.get("revision")
    if revision is None:
        return
    if not isinstance(revision, Mapping):
        raise SidecarSetError("spec.injectionStrategy.revision", "must be an object")
    for key in ("revisionName", "customVersion"):
        if not isinstance(revision.get(key) or "", str):
            raise SidecarSetError(f"spec.injectionStrategy.revision.{key}", "must be a string")
    policy = revision.get("policy")
    if policy not in (None, "", ALWAYS, PARTIAL):
        raise SidecarSetError(
            "spec.injectionStrategy.revision.policy",
            f"must be {ALWAYS} or {PARTIAL}, got {policy!r}",
            KruiseError(
                INVALID,
                "revision.policy",  # OpenKruise's path, not rooted at spec
                f"Invalid policy {policy}, supported: [{ALWAYS}, {PARTIAL}]",
                revision,
            ),
        )


def _validate_spec(spec: Mapping[str, Any]) -> None:
    selector = spec.get("selector")
    try:
        labels.validate_selector(selector, "spec.selector")
    except labels.SelectorError as err:
        raise SidecarSetError(err.field, err.reason) from None
    if labels.is_empty(selector):
        raise SidecarSetError(
            "spec.selector",
            "required and must not be empty",
            KruiseError(REQUIRED, "spec.selector", "no selector defined for SidecarSet")
            if selector is None
            else KruiseError(
                INVALID,
                "spec.selector",
                "empty selector is not valid for sidecarset.",
                _go_selector(selector),
            ),
        )
    if spec.get("namespace") and spec.get("namespaceSelector"):
        raise SidecarSetError("spec.namespaceSelector", "namespace and namespaceSelector cannot both be set")
    if spec.get("namespaceSelector"):
        try:
            labels.validate_selector(spec["namespaceSelector"], "spec.namespaceSelector")
        except labels.SelectorError as err:
            raise SidecarSetError(err.field, err.reason) from None
    _validate_injection_strategy(spec)
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    if not containers and not init_containers:
        raise SidecarSetError(
            "spec.containers",
            "at least one container or init container is required",
            KruiseError(REQUIRED, "spec", "no initContainer or container defined for SidecarSet"),
        )
    seen: dict[str, str] = {}
    for kind, items in (("containers", containers), ("initContainers", init_containers)):
        for i, container in enumerate(items):
            where = f"spec.{kind}[{i}]"
            _validate_container(container, where, init=kind == "initContainers")
            if container["name"] in seen:
                raise SidecarSetError(
                    f"{where}.name",
                    f"{container['name']!r} is also {seen[container['name']]}",
                    KruiseError(DUPLICATE, f"{where}.name", value=container["name"]),
                )
            seen[container["name"]] = where
    volume_names: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, Mapping) or not volume.get("name"):
            raise SidecarSetError(
                f"spec.volumes[{i}].name", "required", KruiseError(REQUIRED, f"spec.volumes[{i}].name")
            )
        if volume["name"] in volume_names:
            raise SidecarSetError(
                f"spec.volumes[{i}].name",
                f"duplicate volume {volume['name']!r}",
                KruiseError(DUPLICATE, f"spec.volumes[{i}].name", value=volume["name"]),
            )
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
                "spec.updateStrategy.selector",
                "selector and partition cannot be used together",
                # OpenKruise's path is not rooted at spec; its value is the strategy printed by Go's %+v,
                # shown here as JSON.
                KruiseError(
                    INVALID,
                    "updateStrategy",
                    "Partition and Selector cannot be used together",
                    json_text(strategy),
                ),
            )
        if strategy.get("selector"):
            try:
                labels.validate_selector(strategy["selector"], "spec.updateStrategy.selector")
            except labels.SelectorError as err:
                raise SidecarSetError(err.field, err.reason) from None
        # Native sidecars (init containers with restartPolicy Always) are upgraded in place like the
        # containers; OpenKruise refuses them here ("The initContainer in-place upgrade is not currently
        # supported."), rollbook does not (docs/sidecarset.md, "Native sidecars").


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
                KruiseError(
                    INVALID,
                    "spec.containers.name",
                    f"container {container['name']} is not found",
                    container["name"],
                ),
            )
        old_type = previous["upgradeStrategy"]["upgradeType"]
        new_type = container["upgradeStrategy"]["upgradeType"]
        if old_type != new_type:
            raise SidecarSetError(
                f"spec.containers[{i}].upgradeStrategy.upgradeType",
                f"immutable: was {old_type}, got {new_type}",
                KruiseError(
                    INVALID,
                    "spec.containers.upgradeStrategy.upgradeType",
                    f"container {container['name']} upgradeType is immutable",
                    container["name"],
                ),
            )


def json_text(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _go_selector(selector: Mapping[str, Any]) -> GoValue:
    """An empty LabelSelector as ``%#v`` prints it (nil or empty map and list)."""
    labels_ = "map[string]string{}" if "matchLabels" in selector else "map[string]string(nil)"
    expressions = (
        "[]v1.LabelSelectorRequirement{}"
        if "matchExpressions" in selector
        else "[]v1.LabelSelectorRequirement(nil)"
    )
    return GoValue(f"v1.LabelSelector{{MatchLabels:{labels_}, MatchExpressions:{expressions}}}")
