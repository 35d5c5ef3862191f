"""The one registry of workload kinds (docs/kinds.md): adding a kind is a folder under services/kinds/ and
a line here.

Read by the watcher (what to list and watch, where each object's observations go), the auditor (a
stream's bus partition), the planner and the executor (which kind a stream is), and the CLI."""

from __future__ import annotations

from typing import Any

from services.kinds import cloneset, deployment, sidecarset, statefulset
from services.kinds.base import Kind, Workload
from services.model.streams import workload_stream

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        cloneset.KIND,
        sidecarset.KIND,
        deployment.KIND,
        statefulset.KIND,
    )
}

DRIVEN: tuple[Kind, ...] = tuple(k for k in KINDS.values() if k.driven)
RECORDED: tuple[Kind, ...] = tuple(k for k in KINDS.values() if not k.driven)


def kind_of_stream(stream: str) -> Kind | None:
    """The kind whose workload ``stream`` belongs to (its first segment), or None."""
    return KINDS.get(stream.split("/", 1)[0])


def workload_of(stream: str) -> tuple[Kind, str, str] | None:
    """(kind, namespace, name) of a workload's stream; None for a stream of no registered kind."""
    kind = kind_of_stream(stream)
    parts = stream.split("/", 3)
    if kind is None or len(parts) < 3:
        return None
    return kind, parts[1], parts[2]


def partition_key(stream: str) -> str:
    """All streams of one workload share its bus partition: the workload's stream, ``<Kind>/<ns>/<name>``
    (a stream of three segments or fewer is its own key)."""
    return workload_stream(stream)


def route(
    kind: str, obj: dict[str, Any], kinds: tuple[Kind, ...] | None = None
) -> tuple[Kind, Workload] | None:
    """The workload (of ``kinds``, by default every kind with a route) an observed object belongs to."""
    for candidate in kinds if kinds is not None else tuple(KINDS.values()):
        if candidate.route is None:
            continue
        workload = candidate.route(kind, obj)
        if workload is not None:
            return candidate, workload
    return None
