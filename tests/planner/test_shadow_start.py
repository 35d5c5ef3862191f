"""Shadow mode records from its own start (issue: `pod_actions` held observed createPod duplicates of
rollbook's own actions, stamped before shadow mode began, and the shadow report listed a rollout with null
from, to and outcome). docs/shadow.md: the trail starts at the first observation in shadow mode."""

from __future__ import annotations

from datetime import timedelta

from services.kinds.cloneset.rules.decisions import RULES_VERSION
from services.model.events import (
    Envelope,
    PodActionObserved,
    RolloutStarted,
    ShadowCompared,
    ShadowPlanned,
)
from services.planner.shadow_trail import ShadowTrail
from tests.planner.kruise_observations import KruiseLog
from tests.planner.test_shadow_trail import created, of, update_one_by_one


def shadow_from(
    log: KruiseLog, begun: int, *, recorded_start: int | None = None
) -> tuple[ShadowTrail, list[Envelope]]:
    """The trail of shadow mode begun just before observation ``begun`` (or, after a restart, of the
    trail whose stored start is ``recorded_start``)."""
    since = log.envelopes[begun - 1].occurred_at - timedelta(milliseconds=1)
    trail = ShadowTrail(
        log.namespace,
        log.name,
        True,
        RULES_VERSION,
        start_version=recorded_start,
        since=None if recorded_start is not None else since,
    )
    out: list[Envelope] = []
    for envelope in log.envelopes:
        out += trail.step(envelope)
    return trail, out


def test_nothing_before_shadow_mode_began_is_recorded_and_every_rollout_is_whole() -> None:
    log = KruiseLog(maxUnavailable=1)
    pods = created(log)  # before shadow mode: rollbook (or anyone) created the pods
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)  # a rollout under way when shadow mode begins ...
    log.start_in_place(pods[2])
    begun = len(log.envelopes) + 1
    log.patch_in_place(pods[2])  # ... shadow mode begins here: this is its first observation
    log.set_ready(pods[2])
    update_one_by_one(log, [pods[1], pods[0]])
    log.write_status()
    since = log.envelopes[begun - 1].occurred_at

    trail, out = shadow_from(log, begun)
    assert trail.start_version == begun
    observed = of(out, PodActionObserved)
    assert observed, "the controller's actions after the start are recorded"
    assert all(a.started_at >= since - timedelta(seconds=60) for a in observed)
    assert not any(a.action == "createPod" for a in observed), observed  # the pods predate the trail
    assert all(e.causation_id is not None for e in out)
    causes = {e.causation_id for e in out}
    assert causes <= {e.event_id for e in log.envelopes[begun - 1 :]}  # nothing from before the start
    # the rollout under way is recorded whole: started, from and to known; every action names it (or none)
    started = of(out, RolloutStarted)
    assert [(r.from_revision, r.to_revision) for r in started] == [(old, log.revision)]
    ids = {r.rollout_id for r in started}
    assert {a.rollout_id for a in observed} <= ids
    assert {c.rollout_id for c in of(out, ShadowCompared)} <= ids | {None}
    assert (
        isinstance(out[0].payload, RolloutStarted)
        and out[0].causation_id == log.envelopes[begun - 1].event_id
    )


def test_a_restart_rederives_the_trail_from_its_recorded_start() -> None:
    log = KruiseLog(maxUnavailable=1)
    pods = created(log)
    begun = len(log.envelopes) + 1
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    update_one_by_one(log, pods[::-1])
    log.write_status()
    _, first = shadow_from(log, begun)
    assert first and any(isinstance(e.payload, ShadowPlanned) for e in first)
    # after a restart the start is the cause of the stored trail's first event (ShadowRecorder reads it)
    start = next(e.stream_version for e in log.envelopes if e.event_id == first[0].causation_id)
    assert start == begun
    _, again = shadow_from(log, begun, recorded_start=start)
    assert again == first


def test_actions_outside_any_recorded_rollout_name_none() -> None:
    """Scaling before any rollout this trail saw start: no rollout id, never one with no RolloutStarted."""
    log = KruiseLog(maxUnavailable=1)
    log.write_status()
    begun = len(log.envelopes) + 1
    log.create_pod("ddddd")
    log.write_status()
    _, out = shadow_from(log, begun)
    created_ = [a for a in of(out, PodActionObserved) if a.action == "createPod"]
    assert created_ and all(a.rollout_id is None for a in created_)
    assert not of(out, RolloutStarted)
