"""The one registry of workload kinds (docs/kinds.md): adding a kind is a folder under services/kinds/ and
a line here.

Read by the watcher (what to list and watch, where each object's observations go), the auditor (a
stream's bus partition), the planner and the executor (which kind a stream is), and the CLI."""

from __future__ import annotations

from typing import Any

import msgspec

from services.kinds import cloneset, deployment, sidecarset, statefulset
from services.kinds.base import Kind, Workload
from services.kinds.cloneset.actions import Action as CloneSetAction
from services.kinds.sidecarset.actions import UpdateSidecarInPlace
from services.model.events import PodActionRequested
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
CLONESET, SIDECARSET = cloneset.KIND, sidecarset.KIND

# Every driven kind's pod actions: PodActionRequested.action -> the Struct its details decode to.
ACTIONS: dict[str, type[Any]] = {action: t for kind in DRIVEN for action, t in kind.actions.items()}
RequestedAction = CloneSetAction | UpdateSidecarInPlace


class InvalidAction(Exception):
    """A PodActionRequested no kind's action reads: an unknown action, or details not of its shape."""


def requested_action(request: PodActionRequested) -> RequestedAction:
    """The typed action a request's details hold (its kind's actions.py); InvalidAction with the reason
    when no kind has the action or its details do not decode."""
    typed = ACTIONS.get(request.action)
    if typed is None:
        raise InvalidAction(f"unknown action {request.action!r}")
    try:
        action: RequestedAction = msgspec.convert(request.details, typed)
    except msgspec.ValidationError as error:
        raise InvalidAction(f"invalid details of {request.action}: {error}") from None
    return action


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


def decisions_workload(stream: str) -> tuple[Kind, str, str] | None:
    """(kind, namespace, name) when ``stream`` is a driven kind's decisions stream, else None."""
    kind = kind_of_stream(stream)
    workload = None if kind is None else kind.workload_of(stream)
    if kind is None or workload is None or kind.decisions is None:
        return None
    return (kind, *workload) if stream == kind.decisions_stream(*workload) else None


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
