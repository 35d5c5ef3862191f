"""CloneSet validation: every problem is a (field, reason) rejection, never an exception.

One function for everyone who judges a CloneSet: the planner (a spec it cannot plan is a SpecRejected),
the validating admission webhook (services/webhook/admission.py: refused with 422 Invalid before it is
stored) and ``rollbook apply`` (refused before it is sent). Where OpenKruise's validating webhook
(pkg/webhook/cloneset/validating) refuses the same thing, the field path and reason are its own, and
``field_error`` renders them as its ``field.Error`` does: ``<field>: Invalid value: <value>: <reason>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from services.model import intorpercent
from services.model import labels as selectors
from services.model.cloneset import DEFAULT_MAX_UNAVAILABLE, IN_PLACE_ONLY, UPDATE_TYPES

_INT_FIELDS_NON_NEGATIVE = ("minReadySeconds", "revisionHistoryLimit")


class _NoValue:
    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()


@dataclass(frozen=True, slots=True)
class GoValue:
    """A bad value as Go's ``%#v`` prints it (OpenKruise passes some as structs, not strings)."""

    text: str


@dataclass(frozen=True, slots=True)
class Invalid:
    field: str
    reason: str
    value: Any = NO_VALUE  # the offending value, for field_error (NO_VALUE: none named)


def field_error(problem: Invalid) -> str:
    """``problem`` as Kubernetes' ``field.Error`` prints an Invalid one (what kubectl shows)."""
    if problem.value is NO_VALUE:
        return f"{problem.field}: Invalid value: {problem.reason}"
    return f"{problem.field}: Invalid value: {go_value(problem.value)}: {problem.reason}"


def go_value(value: Any) -> str:
    if isinstance(value, GoValue):
        return value.text
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def go_intorstring(value: Any) -> GoValue:
    """An IntOrString as Go's ``%#v`` prints it (``field.Invalid`` given a ``*intstr.IntOrString``)."""
    if isinstance(value, str):
        return GoValue(f"intstr.IntOrString{{Type:1, IntVal:0, StrVal:{json.dumps(value)}}}")
    number = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return GoValue(f'intstr.IntOrString{{Type:0, IntVal:{number}, StrVal:""}}')


def intstr_error(value: Any) -> str | None:
    """Kubernetes' ``GetScaledValueFromIntOrPercent`` error for a value it cannot read, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if not isinstance(value, str):
        return "invalid value for IntOrString: invalid type: neither int nor percentage"
    if not value.endswith("%"):
        return "invalid value for IntOrString: invalid type: string is not a percentage"
    digits = value[:-1]
    if re.fullmatch(r"[+-]?[0-9]+", digits) is None:
        return (
            f"invalid value for IntOrString: invalid value {json.dumps(value)}:"
            f" strconv.Atoi: parsing {json.dumps(digits)}: invalid syntax"
        )
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(cloneset: Any) -> Invalid | None:
    """First problem found in the CloneSet, or None when it can be planned."""
    if not isinstance(cloneset, dict):
        return Invalid("cloneSet", "must be a CloneSet object")
    metadata = cloneset.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        return Invalid("metadata.name", "required")
    if not _string_map(metadata.get("annotations")):
        return Invalid("metadata.annotations", "must be a map of strings")
    for key in ("uid", "namespace"):
        if metadata.get(key) is not None and not isinstance(metadata[key], str):
            return Invalid(f"metadata.{key}", "must be a string")
    generation = metadata.get("generation")
    if generation is not None and not _is_int(generation):
        return Invalid("metadata.generation", "must be an integer")
    status = cloneset.get("status")
    if status is not None:
        if not isinstance(status, dict):
            return Invalid("status", "must be an object")
        if status.get("currentRevision") is not None and not isinstance(status["currentRevision"], str):
            return Invalid("status.currentRevision", "must be a string")
        if status.get("collisionCount") is not None and not _is_int(status["collisionCount"]):
            return Invalid("status.collisionCount", "must be an integer")
        conditions = status.get("conditions")
        if conditions is not None and not isinstance(conditions, list):
            return Invalid("status.conditions", "must be a list")
    spec = cloneset.get("spec")
    if not isinstance(spec, dict):
        return Invalid("spec", "required")
    return _validate_spec(spec)


def _validate_spec(spec: dict[str, Any]) -> Invalid | None:
    replicas = spec.get("replicas")
    if replicas is not None and not _is_int(replicas):
        return Invalid("spec.replicas", "must be an integer", replicas)
    if replicas is not None and replicas < 0:
        return Invalid("spec.replicas", "must be greater than or equal to 0", replicas)
    for name in _INT_FIELDS_NON_NEGATIVE:
        value = spec.get(name)
        if value is not None and (not _is_int(value) or value < 0):
            return Invalid(f"spec.{name}", f"must be a non-negative integer, got {value!r}")
    problem = _validate_selector_and_template(spec)
    if problem:
        return problem
    problem = _validate_update_strategy(spec, 1 if replicas is None else replicas)
    if problem:
        return problem
    problem = _validate_scale_strategy(spec, 1 if replicas is None else replicas)
    if problem:
        return problem
    problem = _validate_lifecycle(spec.get("lifecycle"))
    if problem:
        return problem
    deadline = spec.get("progressDeadlineSeconds")
    if deadline is not None:
        # validation.go: >= 0 and greater than minReadySeconds, unless it is MaxInt32 ("no deadline").
        if not _is_int(deadline) or deadline < 0:
            return Invalid(
                "spec.progressDeadlineSeconds", f"must be a non-negative integer, got {deadline!r}"
            )
        if deadline != 2**31 - 1 and deadline <= int(spec.get("minReadySeconds") or 0):
            return Invalid("spec.progressDeadlineSeconds", "must be greater than minReadySeconds")
    return _validate_claim_templates(spec)


def _validate_lifecycle(lifecycle: Any) -> Invalid | None:
    """``spec.lifecycle`` (apis/apps/pub/lifecycle.go): three optional hooks, each with a labelsHandler
    map, a finalizersHandler list and a markPodNotReady flag."""
    if lifecycle is None:
        return None
    if not isinstance(lifecycle, dict):
        return Invalid("spec.lifecycle", "must be an object")
    for name in ("preDelete", "inPlaceUpdate", "preNormal"):
        hook = lifecycle.get(name)
        where = f"spec.lifecycle.{name}"
        if hook is None:
            continue
        if not isinstance(hook, dict):
            return Invalid(where, "must be an object")
        if not _string_map(hook.get("labelsHandler")):
            return Invalid(f"{where}.labelsHandler", "must be a map of strings")
        finalizers = hook.get("finalizersHandler")
        if finalizers is not None and (
            not isinstance(finalizers, list) or not all(isinstance(f, str) and f for f in finalizers)
        ):
            return Invalid(f"{where}.finalizersHandler", "must be a list of finalizer names")
        if not isinstance(hook.get("markPodNotReady", False), bool):
            return Invalid(f"{where}.markPodNotReady", "must be a boolean")
    return None


def _string_map(value: Any) -> bool:
    return value is None or (
        isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    )


def _selector_shape(selector: Any, where: str) -> Invalid | None:
    if not isinstance(selector, dict):
        return Invalid(where, "must be an object with matchLabels and/or matchExpressions")
    if not _string_map(selector.get("matchLabels")):
        return Invalid(f"{where}.matchLabels", "must be a map of strings")
    expressions = selector.get("matchExpressions")
    if expressions is not None and not isinstance(expressions, list):
        return Invalid(f"{where}.matchExpressions", "must be a list")
    for i, expr in enumerate(expressions or []):
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            return Invalid(f"{where}.matchExpressions[{i}].key", "required")
        values = expr.get("values")
        if values is not None and (
            not isinstance(values, list) or not all(isinstance(v, str) for v in values)
        ):
            return Invalid(f"{where}.matchExpressions[{i}].values", "must be a list of strings")
    try:
        selectors.validate_selector(selector, where)
    except selectors.SelectorError as error:
        return Invalid(error.field, error.reason)
    return None


def _validate_selector_and_template(spec: dict[str, Any]) -> Invalid | None:
    selector = spec.get("selector")
    problem = _selector_shape(selector, "spec.selector") if selector is not None else None
    if problem:
        return problem
    if selectors.is_empty(selector):
        return Invalid("spec.selector", "required and must not be empty")
    try:
        selectors.validate_selector(selector, "spec.selector")
    except selectors.SelectorError as error:
        return Invalid(error.field, error.reason)
    template = spec.get("template")
    if not isinstance(template, dict):
        return Invalid("spec.template", "required")
    template_meta = template.get("metadata") or {}
    if not isinstance(template_meta, dict):
        return Invalid("spec.template.metadata", "must be an object")
    template_labels = template_meta.get("labels") or {}
    if not _string_map(template_labels):
        return Invalid("spec.template.metadata.labels", "must be a map of strings")
    if not _string_map(template_meta.get("annotations")):
        return Invalid("spec.template.metadata.annotations", "must be a map of strings")
    if not selectors.matches(selector, template_labels):
        return Invalid(
            "spec.template.metadata.labels",
            "`selector` does not match template `labels`",
            GoValue(
                "map[string]string{"
                + ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(template_labels.items()))
                + "}"
            ),
        )
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return Invalid("spec.template.spec", "required")
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return Invalid("spec.template.spec.containers", "at least one container is required")
    seen: set[str] = set()
    for i, container in enumerate(containers):
        if not isinstance(container, dict) or not container.get("name"):
            return Invalid(f"spec.template.spec.containers[{i}].name", "required")
        if not isinstance(container["name"], str):
            return Invalid(f"spec.template.spec.containers[{i}].name", "must be a string")
        if container["name"] in seen:
            return Invalid(
                f"spec.template.spec.containers[{i}].name", f"duplicate name {container['name']!r}"
            )
        seen.add(container["name"])
    restart_policy = pod_spec.get("restartPolicy")
    if restart_policy not in (None, "", "Always"):
        return Invalid(
            "spec.template.spec.restartPolicy", f"only 'Always' is supported, got {restart_policy!r}"
        )
    if pod_spec.get("activeDeadlineSeconds") is not None:
        return Invalid(
            "spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds in CloneSet is not Supported"
        )
    return None


def _validate_update_strategy(spec: dict[str, Any], replicas: int) -> Invalid | None:
    strategy = spec.get("updateStrategy") or {}
    if not isinstance(strategy, dict):
        return Invalid("spec.updateStrategy", "must be an object")
    update_type = strategy.get("type")
    if update_type not in (None, "", *UPDATE_TYPES):
        return Invalid(
            "spec.updateStrategy.type", f"must be one of {', '.join(UPDATE_TYPES)}, got {update_type!r}"
        )
    resolved: dict[str, int] = {}
    for name in ("partition", "maxUnavailable", "maxSurge"):
        value = strategy.get(name)
        if value is None:
            continue
        where = f"spec.updateStrategy.{name}"
        refused = intstr_error(value)
        try:
            number, _ = intorpercent.parse(value)
        except intorpercent.IntOrPercentError as error:
            # OpenKruise's message where Kubernetes' parser refuses it too, else rollbook's own.
            reason = f"failed GetScaledValueFromIntOrPercent for {name}: {refused}" if refused else str(error)
            return Invalid(where, reason, value)
        if number < 0:
            if name == "partition":
                scaled = intorpercent.scaled(value, replicas, round_up=True)
                return Invalid(where, "must be greater than or equal to 0", scaled)
            return Invalid(where, "must not be negative", value)
        resolved[name] = intorpercent.scaled(value, replicas, round_up=True)
    max_surge = resolved.get("maxSurge", 0)
    if update_type == IN_PLACE_ONLY and max_surge > 0:
        return Invalid(
            "spec.updateStrategy.maxSurge",
            "can not use maxSurge with strategy type InPlaceOnly",
            str(strategy.get("maxSurge")),
        )
    max_unavailable = resolved.get("maxUnavailable")
    if "maxUnavailable" not in strategy:
        max_unavailable = intorpercent.scaled(DEFAULT_MAX_UNAVAILABLE, replicas, round_up=True)
    if replicas > 0 and (max_unavailable or 0) < 1 and max_surge < 1:
        return Invalid(
            "spec.updateStrategy.maxUnavailable",
            "maxUnavailable and maxSurge should not both be less than 1",
            go_intorstring(strategy.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE)),
        )
    paused = strategy.get("paused")
    if paused is not None and not isinstance(paused, bool):
        return Invalid("spec.updateStrategy.paused", f"must be a boolean, got {paused!r}")
    inplace = strategy.get("inPlaceUpdateStrategy") or {}
    if not isinstance(inplace, dict):
        return Invalid("spec.updateStrategy.inPlaceUpdateStrategy", "must be an object")
    grace = inplace.get("gracePeriodSeconds")
    if grace is not None and (not _is_int(grace) or grace < 0):
        return Invalid(
            "spec.updateStrategy.inPlaceUpdateStrategy.gracePeriodSeconds",
            f"must be a non-negative integer, got {grace!r}",
        )
    return _validate_priority(strategy.get("priorityStrategy")) or _validate_scatter(
        strategy.get("scatterStrategy")
    )


def _validate_scatter(scatter: Any) -> Invalid | None:
    """``scatterStrategy``: a list of ``{key, value}`` terms, both non-empty, no term twice
    (pkg/webhook/cloneset/validating/validation.go ``validateScatterStrategy``)."""
    if scatter is None:
        return None
    where = "spec.updateStrategy.scatterStrategy"
    if not isinstance(scatter, list):
        return Invalid(where, "must be a list of {key, value} terms")
    seen: set[tuple[str, str]] = set()
    for i, term in enumerate(scatter):
        if not isinstance(term, dict) or not isinstance(term.get("key"), str) or not term["key"]:
            return Invalid(f"{where}[{i}].key", "required")
        if not isinstance(term.get("value"), str) or not term["value"]:
            return Invalid(f"{where}[{i}].value", "required")
        if (term["key"], term["value"]) in seen:
            return Invalid(f"{where}[{i}]", f"duplicate term {term['key']}={term['value']}")
        seen.add((term["key"], term["value"]))
    return None


def _validate_priority(priority: Any) -> Invalid | None:
    if priority is None:
        return None
    where = "spec.updateStrategy.priorityStrategy"
    if not isinstance(priority, dict):
        return Invalid(where, "must be an object")
    weights, orders = priority.get("weightPriority"), priority.get("orderPriority")
    for name, terms in (("weightPriority", weights), ("orderPriority", orders)):
        if terms is not None and (not isinstance(terms, list) or not all(isinstance(t, dict) for t in terms)):
            return Invalid(f"{where}.{name}", "must be a list of objects")
    if weights and orders:
        return Invalid(where, "only one of weightPriority and orderPriority can be used")
    for i, term in enumerate(weights or []):
        weight = term.get("weight") if isinstance(term, dict) else None
        if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 100:
            return Invalid(f"{where}.weightPriority[{i}].weight", "must be an integer in [0, 100]")
        if selectors.is_empty(term.get("matchSelector")):
            return Invalid(f"{where}.weightPriority[{i}].matchSelector", "must not be empty")
        try:
            selectors.validate_selector(
                term.get("matchSelector"), f"{where}.weightPriority[{i}].matchSelector"
            )
        except selectors.SelectorError as error:
            return Invalid(error.field, error.reason)
    for i, term in enumerate(orders or []):
        if not isinstance(term.get("orderedKey"), str) or not term["orderedKey"]:
            return Invalid(f"{where}.orderPriority[{i}].orderedKey", "required")
    return None


def _validate_scale_strategy(spec: dict[str, Any], replicas: int) -> Invalid | None:
    scale = spec.get("scaleStrategy") or {}
    if not isinstance(scale, dict):
        return Invalid("spec.scaleStrategy", "must be an object")
    names = scale.get("podsToDelete") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return Invalid("spec.scaleStrategy.podsToDelete", "must be a list of pod names")
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        return Invalid(
            "spec.scaleStrategy.podsToDelete",
            f"duplicated items [{' '.join(duplicated)}]",
            GoValue("[]string{" + ", ".join(json.dumps(n) for n in names) + "}"),
        )
    reuse = scale.get("disablePVCReuse")
    if reuse is not None and not isinstance(reuse, bool):
        return Invalid("spec.scaleStrategy.disablePVCReuse", f"must be a boolean, got {reuse!r}")
    value = scale.get("maxUnavailable")
    if value is not None:
        try:
            number, _ = intorpercent.parse(value)
        except intorpercent.IntOrPercentError as error:
            return Invalid("spec.scaleStrategy.maxUnavailable", str(error))
        if number < 0:
            return Invalid("spec.scaleStrategy.maxUnavailable", f"must not be negative, got {value!r}")
    return None


def _validate_claim_templates(spec: dict[str, Any]) -> Invalid | None:
    templates = spec.get("volumeClaimTemplates") or []
    if not isinstance(templates, list):
        return Invalid("spec.volumeClaimTemplates", "must be a list")
    seen: set[str] = set()
    for i, template in enumerate(templates):
        metadata = template.get("metadata") if isinstance(template, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            return Invalid(f"spec.volumeClaimTemplates[{i}].metadata.name", "required")
        if not _string_map(metadata.get("labels")) or not _string_map(metadata.get("annotations")):  # type: ignore[union-attr]
            return Invalid(
                f"spec.volumeClaimTemplates[{i}].metadata", "labels and annotations must be maps of strings"
            )
        if not isinstance(template.get("spec", {}), dict):
            return Invalid(f"spec.volumeClaimTemplates[{i}].spec", "must be an object")
        if name in seen:
            return Invalid(f"spec.volumeClaimTemplates[{i}].metadata.name", f"duplicate name {name!r}")
        seen.add(name)
    return None
