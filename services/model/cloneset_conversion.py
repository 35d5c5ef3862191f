"""CloneSet ``apps.kruise.io/v1beta1`` <-> ``v1alpha1``, both ways, as OpenKruise master defines it
(apis/apps/v1alpha1/cloneset_conversion.go ``ConvertTo`` / ``ConvertFrom``; defaults in
apis/apps/defaults/v1beta1.go; admission in pkg/webhook/cloneset/validating/). Pure: dicts in, new dicts
out, the input never modified.

rollbook plans on the v1alpha1 shape; a v1beta1 object is converted on input (``as_v1alpha1``). Field
differences: ``scaleStrategy.enablePVCReuse`` (v1beta1, default false = reuse off) replaces
``disablePVCReuse`` (v1alpha1, default false = reuse on); ``scaleStrategy.excludePreparingDelete`` replaces
the CloneSet label ``apps.kruise.io/cloneset-scaling-exclude-preparing-delete: "true"``; ``updateStrategy``
is ``{type: RollingUpdate|OnDelete, rollingUpdate: {podUpdatePolicy, partition, maxUnavailable, maxSurge,
paused, priorityStrategy, scatterStrategy, inPlaceUpdateStrategy}}`` instead of one flat level with
``type: ReCreate|InPlaceIfPossible|InPlaceOnly|OnDelete``; the image pre-download settings are
``inPlaceUpdateStrategy`` fields instead of CloneSet annotations. Metadata, the rest of the spec and the
status are the same in both.
"""

from __future__ import annotations

import copy
import re
from typing import Any

GROUP = "apps.kruise.io"
V1ALPHA1 = f"{GROUP}/v1alpha1"
V1BETA1 = f"{GROUP}/v1beta1"

EXCLUDE_PREPARING_DELETE_LABEL = "apps.kruise.io/cloneset-scaling-exclude-preparing-delete"
PARALLELISM_ANNOTATION = "apps.kruise.io/image-predownload-parallelism"
TIMEOUT_ANNOTATION = "apps.kruise.io/image-predownload-timeout-seconds"
MIN_UPDATED_READY_ANNOTATION = "apps.kruise.io/image-predownload-min-updated-ready-pods"
# v1alpha1 has no podUpdatePolicy beside type OnDelete: a v1beta1 OnDelete CloneSet's policy is kept here
# while it is read or written at v1alpha1, so a round trip through v1alpha1 loses nothing.
ON_DELETE_POLICY_ANNOTATION = "rollbook.io/on-delete-pod-update-policy"

ROLLING_UPDATE = "RollingUpdate"
ON_DELETE = "OnDelete"
POD_UPDATE_POLICIES = ("ReCreate", "InPlaceIfPossible", "InPlaceOnly")
_ROLLING_FIELDS = ("partition", "maxUnavailable", "maxSurge", "paused", "priorityStrategy", "scatterStrategy")
_INT32 = re.compile(r"^[+-]?\d+$")


class ConversionError(ValueError):
    """A v1beta1 CloneSet that OpenKruise's v1beta1 admission would refuse; ``field`` names the part."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _int32(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 32)``; None when it does not parse."""
    if not _INT32.match(text):
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def _int_or_string(text: str) -> int | str:
    """``intstr.Parse``: an integer when the text is one, else the text."""
    value = _int32(text)
    return text if value is None else value


def to_v1beta1(cloneset: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 CloneSet as v1beta1 (``ConvertTo``)."""
    result = copy.deepcopy(cloneset)
    result["apiVersion"] = V1BETA1
    metadata = result.get("metadata") or {}
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return result
    scale = dict(spec.get("scaleStrategy") or {})
    disable = bool(scale.pop("disablePVCReuse", False))
    if not disable:
        scale["enablePVCReuse"] = True
    if (metadata.get("labels") or {}).get(EXCLUDE_PREPARING_DELETE_LABEL) == "true":
        scale["excludePreparingDelete"] = True
    spec["scaleStrategy"] = scale
    flat = dict(spec.get("updateStrategy") or {})
    kind = flat.get("type")
    if kind == ON_DELETE:
        # OpenKruise drops the rolling fields here. rollbook keeps them (and the podUpdatePolicy it parked
        # in an annotation): every v1alpha1 write of a v1beta1-stored object goes through this conversion
        # and back, and would otherwise erase the partition a user set for a later RollingUpdate.
        annotations = metadata.get("annotations") or {}
        policy = annotations.pop(ON_DELETE_POLICY_ANNOTATION, None)
        if not annotations and "annotations" in metadata:
            del metadata["annotations"]
        kept: dict[str, Any] = {"podUpdatePolicy": policy} if policy in POD_UPDATE_POLICIES else {}
        kept.update({key: flat[key] for key in _ROLLING_FIELDS if key in flat})
        in_place = _in_place_to_v1beta1(flat.get("inPlaceUpdateStrategy"), annotations)
        if in_place is not None:
            kept["inPlaceUpdateStrategy"] = in_place
        spec["updateStrategy"] = {"type": ON_DELETE, **({"rollingUpdate": kept} if kept else {})}
        return result
    rolling: dict[str, Any] = {"podUpdatePolicy": kind if kind in POD_UPDATE_POLICIES else "ReCreate"}
    for key in _ROLLING_FIELDS:
        if key in flat:
            rolling[key] = flat[key]
    in_place = _in_place_to_v1beta1(flat.get("inPlaceUpdateStrategy"), metadata.get("annotations") or {})
    if in_place is not None:
        rolling["inPlaceUpdateStrategy"] = in_place
    spec["updateStrategy"] = {"type": ROLLING_UPDATE, "rollingUpdate": rolling}
    return result


def _in_place_to_v1beta1(source: Any, annotations: dict[str, str]) -> dict[str, Any] | None:
    keys = (PARALLELISM_ANNOTATION, TIMEOUT_ANNOTATION, MIN_UPDATED_READY_ANNOTATION)
    has_annotations = any(annotations.get(k) for k in keys)
    if source is None and not has_annotations:
        return None
    result: dict[str, Any] = {}
    if isinstance(source, dict) and source.get("gracePeriodSeconds"):
        result["gracePeriodSeconds"] = source["gracePeriodSeconds"]
    if annotations.get(PARALLELISM_ANNOTATION):
        result["imagePreDownloadParallelism"] = _int_or_string(annotations[PARALLELISM_ANNOTATION])
    for key, name in (
        (TIMEOUT_ANNOTATION, "imagePreDownloadTimeoutSeconds"),
        (MIN_UPDATED_READY_ANNOTATION, "imagePreDownloadMinUpdatedReadyPods"),
    ):
        value = _int32(annotations.get(key) or "")
        if value is not None:  # a value that does not parse (e.g. "50%") is silently dropped
            result[name] = value
    return result


def to_v1alpha1(cloneset: dict[str, Any]) -> dict[str, Any]:
    """A v1beta1 CloneSet as v1alpha1 (``ConvertFrom``). Unlike OpenKruise, ``excludePreparingDelete`` is
    carried back as the CloneSet label that means the same in v1alpha1 (OpenKruise drops it): rollbook
    reads and writes v1alpha1, and a v1beta1-stored object goes through this conversion on each such
    write, so the field would otherwise be ignored and then erased."""
    result = copy.deepcopy(cloneset)
    result["apiVersion"] = V1ALPHA1
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return result
    scale = dict(spec.get("scaleStrategy") or {})
    enable = bool(scale.pop("enablePVCReuse", False))
    exclude = scale.pop("excludePreparingDelete", None)
    if isinstance(exclude, bool):
        labels = result.setdefault("metadata", {}).setdefault("labels", {})
        if exclude:
            labels[EXCLUDE_PREPARING_DELETE_LABEL] = "true"
        else:  # the field, set false, is the truth in v1beta1: a stale label must not turn it back on
            labels.pop(EXCLUDE_PREPARING_DELETE_LABEL, None)
            if not labels:
                del result["metadata"]["labels"]
    if not enable:
        scale["disablePVCReuse"] = True
    spec["scaleStrategy"] = scale
    nested = dict(spec.get("updateStrategy") or {})
    rolling = nested.get("rollingUpdate")
    flat: dict[str, Any] = {}
    if nested.get("type") == ON_DELETE:
        flat["type"] = ON_DELETE
        policy = rolling.get("podUpdatePolicy") if isinstance(rolling, dict) else None
        if policy in POD_UPDATE_POLICIES:
            result.setdefault("metadata", {}).setdefault("annotations", {})[ON_DELETE_POLICY_ANNOTATION] = (
                policy
            )
    else:
        policy = rolling.get("podUpdatePolicy") if isinstance(rolling, dict) else None
        flat["type"] = policy if policy in POD_UPDATE_POLICIES else "ReCreate"
    if isinstance(rolling, dict):
        for key in _ROLLING_FIELDS:
            if key in rolling:
                flat[key] = rolling[key]
        in_place = rolling.get("inPlaceUpdateStrategy")
        if isinstance(in_place, dict):
            kept = _in_place_to_v1alpha1(in_place, result.setdefault("metadata", {}))
            if kept is not None:
                flat["inPlaceUpdateStrategy"] = kept
    spec["updateStrategy"] = flat
    return result


def _in_place_to_v1alpha1(source: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any] | None:
    fields = (
        (PARALLELISM_ANNOTATION, "imagePreDownloadParallelism"),
        (TIMEOUT_ANNOTATION, "imagePreDownloadTimeoutSeconds"),
        (MIN_UPDATED_READY_ANNOTATION, "imagePreDownloadMinUpdatedReadyPods"),
    )
    if not source.get("gracePeriodSeconds") and all(source.get(name) is None for _, name in fields):
        return None  # an empty {} disappears
    for key, name in fields:
        if source.get(name) is not None:
            metadata.setdefault("annotations", {})[key] = str(source[name])
    return {"gracePeriodSeconds": source["gracePeriodSeconds"]} if source.get("gracePeriodSeconds") else {}


def validate_v1beta1(cloneset: dict[str, Any]) -> None:
    """What OpenKruise's v1beta1 admission checks beyond the common CloneSet rules
    (``ValidateCloneSetV1beta1``): the update type and pod update policy, and non-negative image
    pre-download settings."""
    spec = cloneset.get("spec")
    if not isinstance(spec, dict):
        return
    strategy = spec.get("updateStrategy") or {}
    if not isinstance(strategy, dict):
        raise ConversionError("spec.updateStrategy", "must be an object")
    if strategy.get("type") not in (None, "", ROLLING_UPDATE, ON_DELETE):
        raise ConversionError(
            "spec.updateStrategy.type", f"must be RollingUpdate or OnDelete, got {strategy['type']!r}"
        )
    rolling = strategy.get("rollingUpdate")
    if rolling is None:
        return
    if not isinstance(rolling, dict):
        raise ConversionError("spec.updateStrategy.rollingUpdate", "must be an object")
    where = "spec.updateStrategy.rollingUpdate"
    if rolling.get("podUpdatePolicy") not in (None, "", *POD_UPDATE_POLICIES):
        raise ConversionError(
            f"{where}.podUpdatePolicy",
            f"must be ReCreate, InPlaceIfPossible or InPlaceOnly, got {rolling['podUpdatePolicy']!r}",
        )
    in_place = rolling.get("inPlaceUpdateStrategy") or {}
    parallelism = in_place.get("imagePreDownloadParallelism") if isinstance(in_place, dict) else None
    if parallelism is not None and (not isinstance(parallelism, int) or parallelism < 0):
        raise ConversionError(
            f"{where}.inPlaceUpdateStrategy.imagePreDownloadParallelism", "must be a non-negative integer"
        )
    for name in ("imagePreDownloadTimeoutSeconds", "imagePreDownloadMinUpdatedReadyPods"):
        value = in_place.get(name) if isinstance(in_place, dict) else None
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ConversionError(f"{where}.inPlaceUpdateStrategy.{name}", "must be a non-negative integer")


def as_v1alpha1(cloneset: dict[str, Any]) -> dict[str, Any]:
    """The object in the shape rollbook plans on: a v1beta1 CloneSet validated and converted, anything else
    as it is (the same object, not a copy). Raises ConversionError for a v1beta1 object admission refuses."""
    if not isinstance(cloneset, dict) or cloneset.get("apiVersion") != V1BETA1:
        return cloneset
    validate_v1beta1(cloneset)
    return to_v1alpha1(cloneset)
