"""The watcher's routing of SidecarSets and injected pods to SidecarSet observed streams
(services/watcher/sidecarsets.py): which streams, when, with which ids."""

from __future__ import annotations

import copy
from typing import Any

from services.kinds.registry import SIDECARSET
from services.model.events import ObjectObserved
from services.model.sidecarset import INJECTED_LIST_ANNOTATION
from services.watcher.sidecarsets import SidecarSetRoutes


def pod(injected: str, version: str = "1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "test-pod",
            "namespace": "default",
            "uid": "uid-1",
            "resourceVersion": version,
            "labels": labels or {"app": "nginx"},
            "annotations": {INJECTED_LIST_ANNOTATION: injected} if injected else {},
        },
    }


def summary(routes: SidecarSetRoutes, kind: str, obj: dict[str, Any], change: str) -> list[tuple[str, str]]:
    result: list[tuple[str, str]] = []
    for event in routes.diff(kind, obj, change):
        assert isinstance(event.payload, ObjectObserved)
        result.append((event.stream, event.payload.change))
    return result


def test_a_bare_pod_goes_to_every_sidecarset_that_injected_it_once_per_real_change() -> None:
    routes = SidecarSetRoutes()
    first = routes.diff("Pod", pod("alpha,beta"), "ADDED")
    assert [(e.stream, e.payload.change) for e in first] == [  # type: ignore[union-attr]
        (SIDECARSET.observed_stream("", "alpha"), "ADDED"),
        (SIDECARSET.observed_stream("", "beta"), "ADDED"),
    ]
    assert len({e.event_id for e in first}) == 2  # one pod version, two streams: two distinct ids
    assert summary(routes, "Pod", pod("alpha,beta", version="2"), "MODIFIED") == []  # only the version moved
    changed = pod("alpha,beta", version="3", app="nginx", tier="web")
    assert summary(routes, "Pod", changed, "MODIFIED") == [
        (SIDECARSET.observed_stream("", "alpha"), "MODIFIED"),
        (SIDECARSET.observed_stream("", "beta"), "MODIFIED"),
    ]
    assert summary(routes, "Pod", pod("beta", version="4", app="nginx", tier="web"), "MODIFIED") == [
        (SIDECARSET.observed_stream("", "alpha"), "DELETED"),  # no longer injected by alpha: gone for alpha
        (SIDECARSET.observed_stream("", "beta"), "MODIFIED"),  # its annotations changed
    ]
    assert summary(routes, "Pod", pod("beta", version="5"), "DELETED") == [
        (SIDECARSET.observed_stream("", "beta"), "DELETED")
    ]
    assert summary(routes, "Pod", pod("beta", version="6"), "DELETED") == []


def test_pods_nothing_injected_and_other_kinds_are_not_routed() -> None:
    routes = SidecarSetRoutes()
    assert routes.diff("Pod", pod(""), "ADDED") == []
    assert routes.diff("PersistentVolumeClaim", pod("alpha"), "ADDED") == []


def test_sidecarsets_go_to_their_own_stream_and_a_relist_deletes_what_vanished() -> None:
    routes = SidecarSetRoutes()
    sidecarset = {"kind": "SidecarSet", "metadata": {"name": "alpha", "uid": "ss-1", "resourceVersion": "7"}}
    assert summary(routes, "SidecarSet", sidecarset, "ADDED") == [
        (SIDECARSET.observed_stream("", "alpha"), "ADDED")
    ]
    routes.diff("Pod", pod("alpha"), "ADDED")
    assert [(e.stream, e.payload.kind) for e in routes.vanished("SidecarSet", set())] == [  # type: ignore[union-attr]
        (SIDECARSET.observed_stream("", "alpha"), "SidecarSet")
    ]
    assert routes.vanished("Pod", {"uid-1"}) == []


def test_rebuilt_from_the_store_a_restart_emits_only_what_changed() -> None:
    before = SidecarSetRoutes()
    stored = before.diff("Pod", pod("alpha,beta"), "ADDED")
    stored += before.diff("Pod", pod("alpha", version="2"), "MODIFIED")
    after = SidecarSetRoutes()
    for envelope in stored:
        after.rebuild(envelope)
    assert summary(after, "Pod", pod("alpha", version="3"), "MODIFIED") == []
    moved = copy.deepcopy(pod("alpha,gamma", version="4"))
    assert summary(after, "Pod", moved, "MODIFIED") == [
        (SIDECARSET.observed_stream("", "alpha"), "MODIFIED"),
        (SIDECARSET.observed_stream("", "gamma"), "ADDED"),
    ]
