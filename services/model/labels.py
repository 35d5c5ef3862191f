"""Kubernetes LabelSelector matching (metav1.LabelSelector: matchLabels and matchExpressions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SelectorError(ValueError):
    """The selector is malformed; ``field`` names the offending part."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


def validate_selector(selector: Mapping[str, Any] | None, field: str = "spec.selector") -> None:
    """Raise SelectorError if the selector is not a well-formed LabelSelector."""
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise SelectorError(field, "must be an object with matchLabels and/or matchExpressions")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"{field}.matchLabels", "must be a map of strings")
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not expr.get("key"):
            raise SelectorError(where, "needs a key")
        operator = expr.get("operator")
        if operator not in _OPERATORS:
            raise SelectorError(f"{where}.operator", f"unknown operator {operator!r}")
        values = expr.get("values") or []
        if operator in {"In", "NotIn"} and not values:
            raise SelectorError(f"{where}.values", f"{operator} needs at least one value")
        if operator in {"Exists", "DoesNotExist"} and values:
            raise SelectorError(f"{where}.values", f"{operator} takes no values")


def is_empty(selector: Mapping[str, Any] | None) -> bool:
    return not selector or (not selector.get("matchLabels") and not selector.get("matchExpressions"))


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """True when ``labels`` satisfy every term. An empty selector matches everything, as in Kubernetes."""
    if not selector:
        return True
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, operator = expr["key"], expr["operator"]
        values = expr.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True
