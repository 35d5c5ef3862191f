"""The subject scheme: event type and workload in the subject, escaped reversibly, filterable."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.infra.bus import Bus, decode_token, encode_token
from services.infra.settings import Settings
from tests.infra.bus_helpers import paused


def offline_bus(**overrides: object) -> Bus:
    # Subject functions need no connection.
    return Bus(Settings(subject_prefix="rb", **overrides), nc=None, js=None)  # type: ignore[arg-type]


@given(st.text())
def test_any_value_becomes_one_valid_token_and_back(value: str) -> None:
    token = encode_token(value)
    assert token and "." not in token and " " not in token and token not in {"*", ">"}
    assert all(33 <= ord(c) < 127 for c in token)
    assert decode_token(token) == value


def test_subject_carries_partition_kind_namespace_name_and_type() -> None:
    bus = offline_bus(bus_partitions=8)
    subject = bus.subject_for(paused("CloneSet/default/web.v2", 1))
    prefix, space, partition, kind, namespace, name, event_type = subject.split(".")
    assert (prefix, space, kind, namespace, name, event_type) == (
        "rb",
        "ev",
        "CloneSet",
        "default",
        "web%2Ev2",
        "RolloutPaused",
    )
    parsed = bus.parse_event_subject(subject)
    assert (parsed.kind, parsed.namespace, parsed.name, parsed.event_type) == (
        "CloneSet",
        "default",
        "web.v2",
        "RolloutPaused",
    )
    assert partition == f"p{parsed.partition}" and 0 <= parsed.partition < 8


def test_cluster_scoped_objects_have_a_namespace_token() -> None:
    bus = offline_bus()
    subject = bus.subject_for(paused("SidecarSet//sidecar", 1))
    assert bus.parse_event_subject(subject).namespace == ""


def test_a_workload_and_its_pods_can_share_a_partition() -> None:
    bus = offline_bus(bus_partitions=64)
    workload = "CloneSet/default/web"
    pod_event = paused("Pod/default/web-abcde", 1)
    assert bus.parse_event_subject(bus.subject_for(pod_event, partition_key=workload)).partition == (
        bus.partition_of(workload)
    )


def test_partition_is_stable_across_processes() -> None:
    # crc32("CloneSet/default/web") % 16, not Python's per-process salted hash(): every publisher and
    # consumer must agree, and changing the function would re-partition a live stream.
    assert offline_bus(bus_partitions=16).partition_of("CloneSet/default/web") == 3


def test_filters_use_wildcards_for_unspecified_parts() -> None:
    bus = offline_bus()
    assert bus.event_filter(kind="CloneSet", namespace="default", name="web.v2") == (
        "rb.ev.*.CloneSet.default.web%2Ev2.*"
    )
    assert bus.event_filter(partition=3) == "rb.ev.p3.*.*.*.*"
    assert bus.dead_letter_subject("planner") == "rb.dlq.planner"
