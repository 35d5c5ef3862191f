"""SidecarSet revisions (services.kinds.sidecarset.rules.revisions and the planner's decisions): recorded as
OpenKruise records its ControllerRevisions, named in ``status.latestRevision`` and in upgraded pods'
``kruise.io/sidecarset-hash`` entries, pruned beyond ``revisionHistoryLimit``, and replayed identically."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from services.kinds import registry
from services.kinds.sidecarset.rules.revisions import (
    SIDECARSET_NAME_LABEL,
    RevisionDecision,
    plan_revision,
    revision_object,
    revisions_in_use,
)
from services.kinds.sidecarset.rules.state import SidecarSetState
from services.kinds.sidecarset.rules.upgrade import plan_sidecarset
from services.model import sidecarset as ss
from services.model.events import (
    Envelope,
    ObjectObserved,
    RevisionCreated,
    RevisionsPruned,
    StatusPlanned,
    new_event,
)
from services.model.sidecarset_streams import SIDECARSET_KIND
from services.planner.kinds import SIDECARSET, plan_round
from services.replay.verify import verify_streams
from tests.kinds.sidecarset.test_upgrade import NEW, NOW, OLD, apply, pod, sidecarset

NAME = "test-sidecarset"
# Kubernetes' controller/history name: <parent>-<SafeEncode(FNV-32)>, at most 10 safe characters.
NAME_RE = re.compile(rf"^{NAME}-[bcdfghjklmnpqrstvwxz2456789]{{1,10}}$")


def recorded_after(
    obj: dict[str, Any], recorded: dict[str, dict[str, Any]], pods: list[dict[str, Any]] | None = None
) -> tuple[dict[str, dict[str, Any]], RevisionDecision]:
    """One revision decision, and the record as the fold keeps it afterwards."""
    parsed = ss.parse_sidecarset(obj)
    decision = plan_revision(parsed, recorded.values(), 0, revisions_in_use(parsed, pods or []))
    after = dict(recorded)
    if decision.record is not None:
        after[decision.record.name] = revision_object(NAME, decision.record)
    for name in decision.pruned:
        after.pop(name)
    return after, decision


def numbers(recorded: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: obj["revision"] for name, obj in recorded.items()}


def with_volume(obj: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["volumes"] = [{"name": "logs", "emptyDir": {}}]
    return changed


def test_first_revision_is_number_1_named_like_a_controller_revision_with_the_spec_as_data() -> None:
    recorded, first = recorded_after(sidecarset(OLD), {})
    assert first.record is first.latest and first.latest.number == 1
    assert NAME_RE.match(first.latest.name), first.latest.name
    spec = first.latest.data["spec"]
    assert spec["$patch"] == "replace"
    assert [c["image"] for c in spec["containers"]] == [OLD]
    assert set(spec) == {
        "$patch",
        "containers",
        "initContainers",
        "volumes",
        "imagePullSecrets",
        "patchPodMetadata",
    }
    obj = recorded[first.latest.name]
    assert obj["kind"] == "ControllerRevision" and obj["metadata"]["labels"] == {SIDECARSET_NAME_LABEL: NAME}
    assert obj["metadata"]["annotations"][ss.HASH_ANNOTATION] == ss.parse_sidecarset(sidecarset(OLD)).hash


def test_only_recorded_fields_make_a_new_revision_and_numbers_increase() -> None:
    recorded, first = recorded_after(sidecarset(OLD), {})
    same, again = recorded_after(sidecarset(OLD), recorded)
    assert again.record is None and again.latest.name == first.latest.name and same == recorded
    # Strategy, selector and scope are not revision data.
    moved = sidecarset(OLD, paused=True, partition="50%")
    moved["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    assert recorded_after(moved, recorded)[1].record is None
    # An image change and a volume change (the hash does not see volumes) each record one.
    recorded, second = recorded_after(sidecarset(NEW), recorded)
    assert second.record is not None and second.latest.number == 2 and second.latest.name != first.latest.name
    recorded, third = recorded_after(with_volume(sidecarset(NEW)), recorded)
    assert third.latest.number == 3 and len({first.latest.name, second.latest.name, third.latest.name}) == 3
    assert ss.parse_sidecarset(with_volume(sidecarset(NEW))).hash == ss.parse_sidecarset(sidecarset(NEW)).hash


def test_going_back_to_an_older_spec_renumbers_that_revision() -> None:
    recorded, first = recorded_after(sidecarset(OLD), {})
    recorded, second = recorded_after(sidecarset(NEW), recorded)
    recorded, back = recorded_after(sidecarset(OLD), recorded)
    assert back.record is not None and back.latest.name == first.latest.name and back.latest.number == 3
    assert numbers(recorded) == {first.latest.name: 3, second.latest.name: 2}


@pytest.mark.parametrize(
    ("limit", "kept"),
    [
        (None, 5),  # default 10: nothing pruned
        (3, 3),
        (1, 1),
        (0, 1),  # at least the latest is kept
    ],
)
def test_history_is_pruned_oldest_first_down_to_the_limit(limit: int | None, kept: int) -> None:
    recorded: dict[str, dict[str, Any]] = {}
    latest = ""
    for i in range(5):
        obj = sidecarset(f"centos:{i}")
        if limit is not None:
            obj["spec"]["revisionHistoryLimit"] = limit
        recorded, decision = recorded_after(obj, recorded)
        latest = decision.latest.name
    assert len(recorded) == kept and latest in recorded
    assert sorted(numbers(recorded).values()) == list(range(6 - kept, 6))


def test_a_revision_a_pod_names_is_not_pruned() -> None:
    first_obj = sidecarset("centos:0")
    recorded, first = recorded_after(first_obj, {})
    named = copy.deepcopy(first_obj)
    named["status"] = {"latestRevision": first.latest.name}
    pods = [pod("a", injected_from=named)]  # its hash entry records controllerRevision = the first
    assert ss.pod_sidecar_revisions(pods[0])[NAME].controller_revision == first.latest.name
    for i in range(1, 4):
        obj = sidecarset(f"centos:{i}")
        obj["spec"]["revisionHistoryLimit"] = 2
        recorded, decision = recorded_after(obj, recorded, pods)
    assert first.latest.name in recorded and decision.latest.name in recorded
    assert sorted(numbers(recorded).values()) == [1, 4]


def test_a_name_taken_by_other_data_bumps_the_collision_count() -> None:
    _, plain = recorded_after(sidecarset(OLD), {})
    squatter = revision_object(NAME, plain.latest)
    squatter["data"] = {"spec": {"containers": []}}  # same name, different data
    parsed = ss.parse_sidecarset(sidecarset(OLD))
    decision = plan_revision(parsed, [squatter], 0, set())
    assert decision.collision_count == 1 and decision.latest.name != plain.latest.name
    assert NAME_RE.match(decision.latest.name) and decision.latest.number == 2


def test_the_round_names_the_latest_revision_in_the_status_and_the_upgraded_pod() -> None:
    pods = [pod("a")]
    first = plan_sidecarset(sidecarset(OLD), pods, NOW)
    recorded = [revision_object(NAME, first.revisions.latest)]
    result = plan_sidecarset(sidecarset(NEW), pods, NOW, revisions=recorded)
    latest = result.revisions.latest
    assert latest.number == 2 and result.status["latestRevision"] == latest.name
    assert result.status["collisionCount"] == 0
    upgraded = apply(pods[0], result.upgrades[0].patch)
    assert ss.pod_sidecar_revisions(upgraded)[NAME].controller_revision == latest.name


def test_a_pod_injected_after_the_status_names_the_revision_records_it() -> None:
    result = plan_sidecarset(sidecarset(NEW), [], NOW)
    obj = sidecarset(NEW)
    obj["status"] = result.status
    injected = pod("late", injected_from=obj)
    assert ss.pod_sidecar_revisions(injected)[NAME].controller_revision == result.revisions.latest.name


# --- the planner's decisions, folded and replayed ------------------------------------------------------


class Recorder:
    """The planner service's round without a store: observations in, rounds appended and folded."""

    def __init__(self) -> None:
        self.state = SidecarSetState(NAME)
        self.observed: list[Envelope] = []
        self.decisions: list[Envelope] = []
        self.clock = NOW

    def observe(self, obj: dict[str, Any], kind: str = SIDECARSET_KIND) -> None:
        self.clock += timedelta(seconds=1)
        metadata = obj["metadata"]
        envelope = new_event(
            ObjectObserved(
                kind=kind,
                namespace=metadata.get("namespace", ""),
                name=metadata["name"],
                uid=metadata.get("uid", "uid-ss"),
                resource_version=str(len(self.observed) + 1),
                change="MODIFIED",
                object=copy.deepcopy(obj),
            ),
            stream=registry.SIDECARSET.observed_stream("", NAME),
            stream_version=len(self.observed) + 1,
            occurred_at=self.clock,
        )
        self.observed.append(envelope)
        self.state.fold(envelope)

    def plan(self) -> list[Any]:
        planned = plan_round(SIDECARSET, self.state)
        if planned.decisions:
            for envelope in planned.envelopes:
                self.state.fold(envelope)
            self.decisions.extend(planned.envelopes)
        return planned.decisions


def of_type(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_decisions_record_prune_and_report_revisions_and_replay_reproduces_them() -> None:
    recorder = Recorder()
    recorder.observe(pod("a"), kind="Pod")
    limited = sidecarset(OLD, paused=True)  # revisions only: no upgrade to wait for
    limited["spec"]["revisionHistoryLimit"] = 2
    recorder.observe(limited)
    first = recorder.plan()
    [created] = of_type(first, RevisionCreated)
    assert (
        created.revision == 1 and NAME_RE.match(created.name) and created.object["data"]["spec"]["containers"]
    )
    assert created.template["containers"][0]["image"] == OLD
    assert of_type(first, StatusPlanned)[0].status["latestRevision"] == created.name
    assert recorder.plan() == []  # nothing repeated

    names = [created.name]
    for image in (NEW, "centos:8"):
        changed = copy.deepcopy(limited)
        changed["spec"]["containers"][0]["image"] = image
        changed["metadata"]["generation"] = len(names) + 3
        recorder.observe(changed)
        decided = recorder.plan()
        [created] = of_type(decided, RevisionCreated)
        assert created.revision == len(names) + 1
        names.append(created.name)
        assert of_type(decided, StatusPlanned)[0].status["latestRevision"] == created.name
    # The third revision goes beyond revisionHistoryLimit 2: the first (no pod names it) is pruned.
    assert [p.names for p in of_type(decided, RevisionsPruned)] == [[names[0]]]
    assert sorted(recorder.state.revisions) == sorted(names[1:])

    # The status the executor wrote comes back with the SidecarSet: nothing new to decide.
    written = copy.deepcopy(changed)
    written["status"] = recorder.state.last_status
    recorder.observe(written)
    assert recorder.plan() == []

    report = verify_streams(SIDECARSET, NAME, recorder.observed, [], recorder.decisions)
    assert report.clean and report.rounds == 3, report.divergence
    tampered = [
        msgspec.structs.replace(e, payload=msgspec.structs.replace(e.payload, revision=7))
        if isinstance(e.payload, RevisionCreated)
        else e
        for e in recorder.decisions
    ]
    divergence = verify_streams(SIDECARSET, NAME, recorder.observed, [], tampered).divergence
    assert divergence is not None and (divergence.field, divergence.recorded) == ("payload.revision", 7)


def test_records_without_data_still_count_for_the_next_number() -> None:
    """Revisions recorded before they carried their data (name and number only) are not reused, but the
    next revision is numbered after them."""
    legacy = [{"metadata": {"name": f"{NAME}-2wcfbwz492"}, "revision": 3}]
    decision = plan_revision(ss.parse_sidecarset(sidecarset(OLD)), legacy, 0, set())
    assert decision.record is not None and decision.latest.number == 4


def test_a_revision_recorded_with_a_custom_version_carries_it_and_keeps_it_on_rollback() -> None:
    # OpenKruise's NewRevision labels the revision with the SidecarSet's custom version, which
    # injectionStrategy.revision.customVersion selects by.
    labelled = sidecarset(OLD)
    labelled["metadata"]["labels"] = {ss.CUSTOM_VERSION_LABEL: "v1"}
    recorded, first = recorded_after(labelled, {})
    assert recorded[first.latest.name]["metadata"]["labels"] == {
        SIDECARSET_NAME_LABEL: NAME,
        ss.CUSTOM_VERSION_LABEL: "v1",
    }
    recorded, second = recorded_after(sidecarset(NEW), recorded)
    assert recorded[second.latest.name]["metadata"]["labels"] == {SIDECARSET_NAME_LABEL: NAME}
    recorded, back = recorded_after(sidecarset(OLD), recorded)  # re-numbered: the label stays
    assert back.latest.name == first.latest.name
    assert recorded[first.latest.name]["metadata"]["labels"][ss.CUSTOM_VERSION_LABEL] == "v1"
