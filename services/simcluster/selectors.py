"""Label and field selector strings (`?labelSelector=`, `?fieldSelector=`) as the API server parses them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ApiError

Predicate = Callable[[Mapping[str, Any]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_TERM = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\((.*)\)\s*$")
_EQ_TERM = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_TERM = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside `( )`."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


LabelCheck = Callable[[Mapping[str, str]], bool]


def _in(key: str, values: set[str]) -> LabelCheck:
    return lambda labels: key in labels and labels[key] in values


def _not_in(key: str, values: set[str]) -> LabelCheck:
    return lambda labels: key not in labels or labels[key] not in values


def _equals(key: str, value: str) -> LabelCheck:
    return lambda labels: key in labels and labels[key] == value


def _not_equals(key: str, value: str) -> LabelCheck:
    return lambda labels: labels.get(key) != value


def _exists(key: str) -> LabelCheck:
    return lambda labels: key in labels


def _absent(key: str) -> LabelCheck:
    return lambda labels: key not in labels


def parse_label_selector(text: str | None) -> LabelCheck:
    """Return a predicate over a labels map. Raises ApiError(400) on a malformed selector."""
    if not text or not text.strip():
        return lambda labels: True
    checks: list[LabelCheck] = []
    for term in _split_terms(text):
        if m := _SET_TERM.match(term):
            key, op = m.group(1), m.group(3)
            values = {v.strip() for v in m.group(4).split(",") if v.strip()}
            checks.append(_in(key, values) if op == "in" else _not_in(key, values))
        elif m := _EQ_TERM.match(term):
            key, op, value = m.group(1), m.group(3), m.group(4)
            checks.append(_not_equals(key, value) if op == "!=" else _equals(key, value))
        elif m := _EXISTS_TERM.match(term):
            checks.append(_absent(m.group(2)) if m.group(1) == "!" else _exists(m.group(2)))
        else:
            raise ApiError(400, f"unable to parse requirement: invalid label selector term {term.strip()!r}")
    return lambda labels: all(check(labels) for check in checks)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    return "" if current is None else str(current)


# Per kind, the fields the API server accepts in a field selector (beyond metadata.name/namespace).
SUPPORTED_FIELDS: dict[str, set[str]] = {
    "Pod": {"spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName", "status.podIP"},
    "Event": {
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
        "source",
    },
    "PersistentVolumeClaim": {"status.phase"},
    "Namespace": {"status.phase"},
}


def _field_check(field: str, value: str, negate: bool) -> Predicate:
    if negate:
        return lambda obj: _field_value(obj, field) != value
    return lambda obj: _field_value(obj, field) == value


def parse_field_selector(text: str | None, kind: str) -> Predicate:
    if not text or not text.strip():
        return lambda obj: True
    allowed = {"metadata.name", "metadata.namespace"} | SUPPORTED_FIELDS.get(kind, set())
    checks: list[Predicate] = []
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                field, value = (part.strip() for part in term.split(op, 1))
                break
        else:
            raise ApiError(400, f"invalid field selector term {term.strip()!r}: needs =, == or !=")
        if field not in allowed:
            raise ApiError(400, f'field label not supported: "{field}"')
        checks.append(_field_check(field, value, op == "!="))
    return lambda obj: all(check(obj) for check in checks)
