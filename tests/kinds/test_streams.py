"""Stream names come from the kinds alone (services/kinds/base.py ``Kind.stream``) and are the names every
recorded trail already has: a kind's streams never move, whatever reads them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from services.kinds import registry
from services.kinds.registry import CLONESET, SIDECARSET, decisions_workload

TRAILS = Path(__file__).resolve().parents[1] / "fixtures" / "trails"


def test_the_driven_kinds_streams_are_named_as_recorded() -> None:
    assert CLONESET.planned_streams("shop", "web") == (
        "CloneSet/shop/web/observed",
        "CloneSet/shop/web/actions",
        "CloneSet/shop/web",
    )
    assert CLONESET.shadow_stream("shop", "web") == "CloneSet/shop/web/shadow"
    assert SIDECARSET.planned_streams("", "mesh") == (
        "SidecarSet//mesh/observed",
        "SidecarSet//mesh/actions",
        "SidecarSet//mesh/decisions",
    )
    assert SIDECARSET.stream("", "mesh") == "SidecarSet//mesh"  # the webhook's injections
    deployment = registry.KINDS["Deployment"]
    assert deployment.recorded_stream("shop", "api") == "Deployment/shop/api/recorded"
    with pytest.raises(ValueError, match="not driven"):
        deployment.decisions_stream("shop", "api")


def test_every_recorded_trails_stream_is_one_its_kind_names() -> None:
    streams = set()
    for path in TRAILS.glob("rules-v*.json.gz"):
        streams |= {e["stream"] for e in json.loads(gzip.decompress(path.read_bytes()))["events"]}
    assert streams
    for stream in streams:
        found = registry.workload_of(stream)
        assert found is not None, stream
        kind, namespace, name = found
        assert stream in kind.planned_streams(namespace, name), stream


@pytest.mark.parametrize(
    ("stream", "workload"),
    [
        ("CloneSet/default/web", ("CloneSet", "default", "web")),
        ("SidecarSet//mesh/decisions", ("SidecarSet", "", "mesh")),
        ("CloneSet/default/web/observed", None),
        ("CloneSet//web", None),  # a CloneSet has a namespace
        ("SidecarSet/default/mesh/decisions", None),  # a SidecarSet has none
        ("SidecarSet//mesh", None),  # the injections, not the planner's
        ("Deployment/default/api", None),  # recorded, not driven
    ],
)
def test_a_decisions_stream_names_its_workload(stream: str, workload: tuple[str, str, str] | None) -> None:
    found = decisions_workload(stream)
    assert (None if found is None else (found[0].name, found[1], found[2])) == workload
