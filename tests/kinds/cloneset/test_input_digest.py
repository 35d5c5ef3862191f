"""The recorded round's input hash, built from encodings kept across rounds, is the hash of the whole
input's canonical JSON (what verify recomputes), whatever the workload's objects did in between."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.kinds import registry
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model.events import ObjectObserved, new_event
from services.model.rounds import encode_input
from services.planner.kinds import CLONESET

NS, NAME = "default", "web"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PODS = ("web-a", "web-b", "web-c", "web-d")
PVCS = ("data-web-a", "data-web-b")


class Observer:
    """Folds observations of one CloneSet's objects into its state, one second apart."""

    def __init__(self) -> None:
        self.state = WorkloadState(NS, NAME)
        self.version = 0

    def observe(self, kind: str, name: str, change: str, fields: dict[str, Any]) -> None:
        self.version += 1
        obj = {"kind": kind, "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}, **fields}
        payload = ObjectObserved(
            kind=kind,
            namespace=NS,
            name=name,
            uid=f"uid-{name}",
            resource_version=str(self.version),
            change=change,  # type: ignore[arg-type]
            object=obj,
        )
        at = T0 + timedelta(seconds=self.version)
        stream = registry.CLONESET.observed_stream(NS, NAME)
        self.state.fold(new_event(payload, stream=stream, stream_version=self.version, occurred_at=at))

    def digest_agrees(self) -> None:
        plan_input = self.state.plan_input()
        data, digest = encode_input(plan_input)
        assert self.state.input_digest.encode(plan_input) == data
        assert CLONESET.input_sha256(self.state, plan_input) == digest


# An observation: which kind and object, the change, and a field value (the same value again is a new
# object with the same content: the state replaces it all the same).
OBSERVATIONS = st.lists(
    st.tuples(
        st.sampled_from(["Pod", "PersistentVolumeClaim", "CloneSet"]),
        st.integers(0, 3),
        st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
        st.one_of(st.integers(0, 3), st.text(max_size=3), st.none()),
    ),
    max_size=40,
)


@given(observations=OBSERVATIONS, rounds_every=st.integers(1, 5))
@settings(max_examples=100, deadline=None)
def test_the_incremental_input_hash_equals_the_full_hash_after_any_changes(
    observations: list[tuple[str, int, str, Any]], rounds_every: int
) -> None:
    observer = Observer()
    observer.observe("CloneSet", NAME, "ADDED", {"spec": {"replicas": 4}})
    for index, (kind, which, change, value) in enumerate(observations):
        name = NAME if kind == "CloneSet" else PODS[which] if kind == "Pod" else PVCS[which % len(PVCS)]
        if kind == "CloneSet" and change == "DELETED":
            change = "MODIFIED"  # a deleted CloneSet has no decision input
        observer.observe(kind, name, change, {"spec": {"value": value}, "status": {"seen": index}})
        if index % rounds_every == 0:  # a round hashes its input now and then, as the service does
            observer.digest_agrees()
    observer.digest_agrees()


def test_a_pod_observed_changing_changes_the_recorded_hash() -> None:
    observer = Observer()
    observer.observe("CloneSet", NAME, "ADDED", {"spec": {"replicas": 2}})
    for pod in PODS[:2]:
        observer.observe("Pod", pod, "ADDED", {"status": {"phase": "Pending"}})
    first = CLONESET.input_sha256(observer.state, observer.state.plan_input())
    observer.observe("Pod", PODS[1], "MODIFIED", {"status": {"phase": "Running"}})
    observer.digest_agrees()
    assert CLONESET.input_sha256(observer.state, observer.state.plan_input()) != first
