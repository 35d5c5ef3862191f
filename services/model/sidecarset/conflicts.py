"""Conflicts between SidecarSets that can select the same pods (checked at SidecarSet admission)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from services.model.sidecarset.core import INVALID, KruiseError, SidecarSet


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


def _clashes(candidate: SidecarSet, existing: Iterable[SidecarSet]) -> list[tuple[str, str, str]]:
    """(``container`` or ``volume``, its name, the other SidecarSet's name) for each clash of ``candidate``
    with a SidecarSet that can select the same pods: a container name both declare, or a volume name both
    declare differently."""
    clashes: list[tuple[str, str, str]] = []
    own_names = [c["name"] for c in candidate.containers + candidate.init_containers]
    own_volumes = {v["name"]: v for v in candidate.volumes}
    for other in sorted(existing, key=lambda ss: ss.name):
        if other.name == candidate.name:
            continue
        if not (scopes_overlap(candidate, other) and selectors_overlap(candidate.selector, other.selector)):
            continue
        other_names = {c["name"] for c in other.containers + other.init_containers}
        clashes += [("container", name, other.name) for name in own_names if name in other_names]
        for volume in other.volumes:
            mine = own_volumes.get(volume["name"])
            if mine is not None and mine != volume:
                clashes.append(("volume", volume["name"], other.name))
    return clashes


def find_conflicts(candidate: SidecarSet, existing: Iterable[SidecarSet]) -> list[str]:
    """Why ``candidate`` cannot be applied next to ``existing`` (empty when it can). Messages name both."""
    return [
        f"container {name!r} of SidecarSet {candidate.name!r} already exists in SidecarSet "
        f"{other!r}, and both can select the same pods"
        if kind == "container"
        else f"volume {name!r} of SidecarSet {candidate.name!r} differs from the volume of "
        f"that name in SidecarSet {other!r}, and both can select the same pods"
        for kind, name, other in _clashes(candidate, existing)
    ]


def conflict_errors(candidate: SidecarSet, existing: Iterable[SidecarSet]) -> list[KruiseError]:
    """The clashes of ``find_conflicts`` as OpenKruise's webhook words them (validateSidecarConflict): one
    per container or volume name, naming the last SidecarSet by name that declares it (OpenKruise keeps one
    SidecarSet per name, overwritten in the API server's list order)."""
    last: dict[tuple[str, str], str] = {}
    for kind, name, other in _clashes(candidate, existing):
        last[kind, name] = other
    return [
        KruiseError(INVALID, "spec.containers", f"container {name} already exist in {other}", name)
        if kind == "container"
        else KruiseError(
            INVALID, "spec.volumes", f"volume {name} is in conflict with sidecarset {other}", name
        )
        for (kind, name), other in last.items()
    ]
