"""The CloneSet planner's RULES_VERSION changes whenever its decisions do.

`rollbook verify` re-runs only the rounds recorded under the running planner's rules and reports the rest
as not re-verifiable (docs/replay.md, "Upgrading rollbook"). That is only honest if every change to what
the planner decides for a given input bumps ``RULES_VERSION``: a change without a bump would turn every
round recorded before it into a false divergence. So the decisions of two scripted rollouts are
fingerprinted, one fingerprint per rules version.

When this test fails: if the planner now decides differently on purpose, bump ``RULES_VERSION`` in
services/kinds/cloneset/rules/decisions.py and add the new fingerprint below; if only the cluster model of
services/replay/simulation.py changed (timings, object shapes), replace the current version's fingerprint.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from services.kinds.cloneset.rules.decisions import RULES_VERSION
from services.kinds.cloneset.rules.model import PlanInput, UpdateInPlace
from services.kinds.cloneset.rules.plan import plan
from services.kinds.registry import CLONESET
from services.model.events import RoundPlanned
from services.model.rounds import split_round
from services.model.strategic_merge import strategic_merge_patch
from services.replay.simulation import WorkloadSimulation
from tests.planner.builders import IDS, cloneset, plan_input, pvcs_for, revision_record, running_pod

FINGERPRINTS = {
    2: "2f643260948f9f356306cac14fe171ea5d7eeaea516b34f5559cda5d12ce1af9",
    # v3 re-recorded when the simulation started writing expectation timers (next_step): the decisions
    # are the same, tests/replay/test_recorded_trails.py verifies the trails recorded before
    3: "0757a746a3c5caa540f3c0be32da984a9be00907bdf4cc822a24eccc71e779b7",
    # v4 (lifecycle hooks, replicas: null) recorded on the simulation with expectation timers
    4: "c4dd0787c916b4486427aacd05af36fc0b570e90c7fa6d7b4ca687ef390871e2",
    5: "fcb057b8dd64413bb44496ef0dd09fdcb61ab53da759d0529e329e53e875a3d6",
    6: "51981779110960a2b3255951bdfa32a8c27cfac5dcd4ad9021980c2a21274ecb",
    # v7: expectation timeouts counted from the action's outcome (the expectation timers move)
    7: "39636634c4700e56fe4b8635418dc1672bb3b0cdc9207cc4b7e9b66009d9f095",
    # v8: a handed-over CloneSet's revision adopted, its pods updated in place (with the HANDED_OVER script)
    8: "d8457afe768057b338994da956cfec0430f0b9f8c519875d5aa9ed0df1514e4e",
    # v9: a handed-over pod keeping a pod spec field the template lacks is recreated, not updated in place
    # (with the second HANDED_OVER script)
    9: "035696c52fb5365d35aee403f39f888f3a60b83a13ba5ec7a5b9f00bd6e76358",
    # v10: an in-place update with a restart and no grace period is one updateInPlace carrying notReady
    10: "51e99eec9afff65c92ab2a60382f4b9dc3512a2ff3c457f37f9984b0c5a2356c",
    # v11: a new pod's PVCs are created by its createPod, not by createPVC actions before it (with the
    # CLAIMS script)
    11: "53c81210bb8f6f9cce60e1d856b84280b99524448cc941c7fef5ebf63de36bdd",
    # v12: a PVC being deleted is not an existing one for a new pod's create (with the REUSED_CLAIMS input;
    # its createPod's expectation also waits for its action id on each PVC, which the scripts do not meet)
    12: "04d31568abc42cd1ee43c212a05d91ab488b3033914784097dacdb33c5867023",
    # v13: the round's first action on an existing pod names the resourceVersion it was computed from
    13: "38857fb8c1296ce0f7f7b5b837f97018a698c266c2efb31143a3286f8703ef7c",
    # v14: rollout ids carry the workload's rollout sequence (<ns>/<name>@<revision>#<n>)
    14: "f2c126455bd027709b759f068beb4ba5cad89455003574926ceb195a8ba66a03",
    # v15: resources resized in place through pods/resize (with the RESIZE input)
    # v15 re-recorded when a status round became one event (StatusPlanned.round): the decisions are the
    # same, only the ids derived from the decisions stream's versions moved; tests/replay verifies the
    # trails recorded before
    15: "366374187f2f674a7e6617405b9c8f736ed64cdedd304063ae1b90359fca8190",
    # v16: a pod in a resize that restarts nothing counts as available (with the RESIZING input)
    16: "fe1baa5b24f784842b7adbd23aaa3c1044e5f9e6d92d31192310870c6b618bcd",
}
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SCRIPTS: tuple[tuple[int | None, dict[str, object]], ...] = (
    # in place with a canary step left standing (partition 2): RolloutPaused, partition steps, grace
    (5, {"type": "InPlaceIfPossible", "maxUnavailable": 2, "partition": 2}),
    # recreation with a surge pod
    (5, {"type": "ReCreate", "maxUnavailable": 1, "maxSurge": 1}),
    # replicas: null (the default 1) in place (added with rules v4; earlier entries fingerprint the
    # first two scripts only)
    (None, {"type": "InPlaceIfPossible"}),
    # OnDelete: nothing is updated (added with rules v5; earlier entries fingerprint the scripts before it)
    (3, {"type": "OnDelete"}),
    # a scatterStrategy naming one term twice: rejected since rules v6 (scatterStrategy validated and used)
    (3, {"type": "ReCreate", "scatterStrategy": [{"key": "zone", "value": "a"}] * 2}),
)
# Scripts that start from a CloneSet another controller left (WorkloadSimulation handed_over), with the pod
# spec fields that controller's revision set and the template lacks: its revision name is adopted and its
# pods updated in place since rules v8 (recreated before); since rules v9 only when they keep no such field.
HANDED_OVER: tuple[tuple[int | None, dict[str, object], dict[str, Any]], ...] = (
    (3, {"type": "InPlaceIfPossible"}, {}),
    (2, {"type": "InPlaceIfPossible"}, {"hostNetwork": True}),
)

# Scripts of a CloneSet with volumeClaimTemplates (added with rules v11, which create a pod's PVCs in its
# createPod: earlier entries fingerprint the scripts before it): scaled up, then recreated.
CLAIMS: tuple[tuple[int | None, dict[str, object]], ...] = ((3, {"type": "ReCreate", "maxUnavailable": 1}),)
CLAIM_TEMPLATES = [
    {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
]


def _reused_claims_input() -> PlanInput:
    """A pod deleted by someone else whose instance keeps one live PVC and one being deleted (added with
    rules v12, which name the one being deleted in the new pod's ``pvcs``: earlier entries fingerprint the
    scripts alone)."""
    logs = {**CLAIM_TEMPLATES[0], "metadata": {"name": "logs"}}
    cs = cloneset(claims=[*CLAIM_TEMPLATES, logs])
    live, dying = pvcs_for(cs, IDS[4])
    dying["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    pvcs = [p for i in IDS[:4] for p in pvcs_for(cs, i)] + [live, dying]
    return plan_input(cs, [running_pod(cs, i) for i in IDS[:4]], [revision_record(cs, 1)], pvcs)


def _resize_input() -> PlanInput:
    """A cpu request raised on pods whose kubelet reports container resources (added with rules v15, which
    resize them through pods/resize instead of recreating them: earlier entries fingerprint the rest)."""
    old, new = (
        cloneset(strategy={"type": "InPlaceIfPossible"}),
        cloneset(strategy={"type": "InPlaceIfPossible"}),
    )
    for cs, cpu in ((old, "100m"), (new, "200m")):
        cs["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    pods = [running_pod(old, i) for i in IDS[:5]]
    for pod in pods:
        for status in pod["status"]["containerStatuses"]:
            status["resources"] = {"requests": {"cpu": "100m"}}
    return plan_input(new, pods, [revision_record(old, 1)])


def _resizing_input() -> PlanInput:
    """The next round of ``_resize_input``: every pod's resize started (its start patch applied, the
    kubelet not done yet), so each is Updating while Ready (added with rules v16, which count such a pod
    as available: it restarts nothing and stays in its Services)."""
    first = _resize_input()
    started = plan(first)
    patches = {a.pod: a.patch for a in started.actions if isinstance(a, UpdateInPlace)}
    pods = [
        strategic_merge_patch(pod, patches[pod["metadata"]["name"]])
        if pod["metadata"]["name"] in patches
        else pod
        for pod in first.pods
    ]
    revisions = [*first.revisions, *started.revisions]
    return msgspec.structs.replace(first, pods=pods, revisions=revisions)


def decisions_fingerprint() -> tuple[str, dict[str, int]]:
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    stream = CLONESET.decisions_stream("team-a", "web")
    scripts: list[tuple[int | None, dict[str, object], bool, dict[str, Any], list[dict[str, Any]]]]
    scripts = [(r, s, False, {}, []) for r, s in SCRIPTS] + [(r, s, True, f, []) for r, s, f in HANDED_OVER]
    scripts += [(r, s, False, {}, CLAIM_TEMPLATES) for r, s in CLAIMS]
    for replicas, strategy, handed_over, foreign, claims in scripts:
        simulation = WorkloadSimulation(
            "team-a",
            "web",
            replicas=replicas,
            start=START,
            strategy=strategy,
            handed_over=handed_over,
            foreign_pod_spec=foreign,
            volume_claim_templates=claims,
        )
        for envelope in simulation.run():
            # RoundPlanned records the inputs (and the rules version itself), not decisions; a status
            # round's StatusPlanned is fingerprinted as the decision alone.
            for recorded in split_round([envelope]):
                if recorded.stream != stream or isinstance(recorded.payload, RoundPlanned):
                    continue
                digest.update(recorded.type.encode() + msgspec.json.encode(recorded.payload))
                counts[recorded.type] = counts.get(recorded.type, 0) + 1
    digest.update(msgspec.json.encode(plan(_reused_claims_input()).actions))
    digest.update(msgspec.json.encode(plan(_resize_input()).actions))
    if RULES_VERSION >= 16:
        resizing = plan(_resizing_input())
        digest.update(msgspec.json.encode((resizing.actions, resizing.status)))
    return digest.hexdigest(), counts


@pytest.fixture(scope="module")
def fingerprint() -> tuple[str, dict[str, int]]:
    return decisions_fingerprint()


def test_the_decisions_match_the_fingerprint_of_the_current_rules_version(
    fingerprint: tuple[str, dict[str, int]],
) -> None:
    digest, counts = fingerprint
    assert counts.get("RolloutPaused") and counts.get("PodActionRequested")  # the script exercises them
    assert RULES_VERSION in FINGERPRINTS, f"record the fingerprint of rules v{RULES_VERSION}: {digest}"
    assert digest == FINGERPRINTS[RULES_VERSION], (
        f"the planner decides differently from rules v{RULES_VERSION} (new fingerprint {digest}): "
        "bump RULES_VERSION and record it, or re-record if only the simulation changed (module doc)"
    )


def test_a_rules_version_bump_changed_the_decisions(fingerprint: tuple[str, dict[str, int]]) -> None:
    # This code's decisions equal to those of another rules version: the bump was not needed, and verify
    # would report that version's rounds as not re-verifiable for nothing.
    digest, _ = fingerprint
    same = [version for version, f in FINGERPRINTS.items() if f == digest and version != RULES_VERSION]
    assert same == [], f"rules v{RULES_VERSION} decide as v{same} did: the bump was not needed"
    assert len(set(FINGERPRINTS.values())) == len(FINGERPRINTS), "two rules versions share a fingerprint"
