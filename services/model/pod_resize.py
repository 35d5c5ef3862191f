"""What the planner and the executor share about ``pods/resize``: resources as a pod stores them, their
comparison as quantities, and the resize patch."""

from __future__ import annotations

from typing import Any

from services.model.sidecarset.resources import QuantityError, parse_quantity

RESIZABLE = ("cpu", "memory")


def quantity(value: Any) -> Any:
    """A quantity's exact value (None when absent; the text itself when it does not parse)."""
    if value is None:
        return None
    try:
        return parse_quantity(value).value
    except QuantityError:
        return ("unparsed", str(value))


def defaulted(resources: Any) -> dict[str, Any]:
    """Resources as the API server stores them in a pod: a limit without a request requests the limit."""
    out = dict(resources) if isinstance(resources, dict) else {}
    limits = out.get("limits")
    if isinstance(limits, dict) and limits:
        out["requests"] = {**limits, **(out.get("requests") or {})}
    return {k: v for k, v in out.items() if v}


def same(a: Any, b: Any) -> bool:
    """Equal as quantities (``1`` and ``1000m`` are the same cpu); only cpu and memory are compared."""
    a, b = defaulted(a), defaulted(b)
    for part in ("requests", "limits"):
        left, right = a.get(part) or {}, b.get(part) or {}
        for resource in RESIZABLE:
            if quantity(left.get(resource)) != quantity(right.get(resource)):
                return False
    return True


def spec_matches(pod: dict[str, Any], targets: dict[str, Any]) -> bool:
    """The pod's spec has the ``targets`` resources (container name -> resources) already."""
    specs = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    return all(name in specs and same(specs[name].get("resources"), t) for name, t in targets.items())


def body(targets: dict[str, Any]) -> dict[str, Any]:
    """The pods/resize patch: each container's resources (strategic merge by container name)."""
    return {"spec": {"containers": [{"name": n, "resources": r} for n, r in sorted(targets.items())]}}
