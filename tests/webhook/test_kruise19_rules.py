"""OpenKruise 1.9's SidecarSet injection rules as tables: which recorded revision
``injectionStrategy.revision`` injects, ``resourcesPolicy`` (the expression calculator, aggregation,
targets, validation), and the order several SidecarSets inject in."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from services.model import sidecarset as ss
from services.model.sidecarset import resources
from tests.kinds.sidecarset.test_revisions import recorded_after
from tests.kinds.sidecarset.test_upgrade import NEW, OLD, sidecarset
from tests.webhook.test_injection_rules import NOW, container, make_sidecarset, names, pod, run

# --- injectionStrategy.revision -------------------------------------------------------------------------


def history(*images: str, custom: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The revisions the planner records while the SidecarSet's image goes through ``images`` (with the
    custom version ``custom[image]`` set at the time), as the webhook reads them back."""
    recorded: dict[str, dict[str, Any]] = {}
    for image in images:
        obj = sidecarset(image)
        if custom and image in custom:
            obj["metadata"].setdefault("labels", {})[ss.CUSTOM_VERSION_LABEL] = custom[image]
        recorded, _ = recorded_after(obj, recorded)
    return list(recorded.values())


def name_of(recorded: list[dict[str, Any]], image: str) -> str:
    [found] = [
        r["metadata"]["name"] for r in recorded if r["data"]["spec"]["containers"][0]["image"] == image
    ]
    return str(found)


def pinned(image: str = NEW, **strategy: Any) -> dict[str, Any]:
    """The seed SidecarSet at ``image`` whose injectionStrategy pins ``revision`` (popped from strategy)."""
    obj = sidecarset(image, **{k: v for k, v in strategy.items() if k != "revision"})
    obj["spec"]["injectionStrategy"] = {"revision": strategy["revision"]}
    return obj


def app_pod(name: str = "p", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {"app": "nginx"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.15.1"}]},
    }


def injected_image(
    obj: dict[str, Any], recorded: list[dict[str, Any]], pod_obj: dict[str, Any], uid: str
) -> str:
    out, _ = ss.inject(
        pod_obj,
        [ss.parse_sidecarset(obj)],
        now=NOW,
        revisions={"test-sidecarset": recorded},
        injection_id=uid,
    )
    return str(out["spec"]["containers"][0]["image"])


def test_revision_name_injects_that_revision_with_its_hash_and_name_on_the_pod() -> None:
    recorded = history(OLD, NEW)
    old_name = name_of(recorded, OLD)
    obj = pinned(revision={"revisionName": old_name})
    out, [record] = ss.inject(
        app_pod(), [ss.parse_sidecarset(obj)], now=NOW, revisions={"test-sidecarset": recorded}
    )
    assert out["spec"]["containers"][0]["image"] == OLD
    entry = ss.pod_sidecar_revisions(out)["test-sidecarset"]
    old = ss.parse_sidecarset(sidecarset(OLD))
    # The pod records the revision it got, so the upgrade planner counts it as not updated.
    assert (entry.hash, entry.hash_without_image, entry.controller_revision) == (
        old.hash,
        old.hash_without_image,
        old_name,
    )
    assert (record.revision, record.controller_revision) == (old.hash, old_name)


@pytest.mark.parametrize(
    ("revision", "images", "custom", "expected"),
    [
        # revisionName wins over customVersion
        ({"revisionName": "OLD", "customVersion": "v2"}, (OLD, NEW), {NEW: "v2"}, OLD),
        # customVersion: the highest-numbered revision with that label (OLD re-recorded as number 3)
        ({"customVersion": "v1"}, (OLD, NEW, OLD), {OLD: "v1", NEW: "v1"}, OLD),
        ({"customVersion": "v1"}, (OLD, NEW), {OLD: "v1", NEW: "v1"}, NEW),
        ({"customVersion": "v2"}, (OLD, NEW), {NEW: "v2"}, NEW),
        # neither name: the latest (the SidecarSet is now at centos:8)
        ({"policy": "Always"}, (OLD, NEW), None, "centos:8"),
    ],
)
def test_which_recorded_revision(
    revision: dict[str, str], images: tuple[str, ...], custom: dict[str, str] | None, expected: str
) -> None:
    recorded = history(*images, custom=custom)
    if revision.get("revisionName") == "OLD":
        revision = {**revision, "revisionName": name_of(recorded, OLD)}
    assert injected_image(pinned("centos:8", revision=revision), recorded, app_pod(), "uid") == expected


@pytest.mark.parametrize(
    ("revision", "recorded_images", "message"),
    [
        (
            {"revisionName": "test-sidecarset-gone"},
            (OLD,),
            "'test-sidecarset-gone' is not a recorded revision",
        ),
        ({"customVersion": "v9"}, (OLD,), "no recorded revision has custom version 'v9'"),
        ({"revisionName": "test-sidecarset-gone"}, (), "no revision of it is recorded"),
    ],
)
def test_a_pinned_revision_not_recorded_refuses_the_pod(
    revision: dict[str, str], recorded_images: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ss.InjectionError, match=message):
        injected_image(pinned(revision=revision), history(*recorded_images), app_pod(), "uid")


@pytest.mark.parametrize(
    ("policy", "strategy", "draw", "history_injected"),
    [
        ("Always", {}, 0.99, True),
        ("", {}, 0.99, True),  # an empty policy is Always
        ("Partial", {"paused": True}, 0.99, True),  # paused: every pod gets it
        # Partial: a pod the update selector does not select gets the pinned revision ...
        ("Partial", {"selector": {"matchLabels": {"canary": "yes"}}}, 0.99, True),
        # ... a selected one only by the draw against a partition percent (a selector allows none: latest)
        ("Partial", {"selector": {"matchLabels": {"app": "nginx"}}}, 0.0, False),
        ("Partial", {"partition": "30%"}, 0.30, True),  # draw <= p
        ("Partial", {"partition": "30%"}, 0.31, False),
        ("Partial", {"partition": "12.5%"}, 0.125, True),
        ("Partial", {"partition": 3}, 0.0, False),  # an integer partition: always the latest
        ("Partial", {}, 0.0, False),  # partition defaults to 0 (an integer)
    ],
)
def test_when_the_pinned_revision_is_injected(
    policy: str, strategy: dict[str, Any], draw: float, history_injected: bool
) -> None:
    parsed = ss.parse_sidecarset(pinned(revision={"revisionName": "x", "policy": policy}, **strategy))
    pin = ss.pinned_revision(parsed)
    assert pin is not None
    assert ss.injects_history(parsed, pin, app_pod(), draw) is history_injected


def test_a_revision_recorded_without_its_spec_cannot_be_injected() -> None:
    bare = [{"metadata": {"name": "test-sidecarset-old"}, "revision": 1}]  # an older planner's record
    with pytest.raises(ss.InjectionError, match="recorded without its spec"):
        injected_image(pinned(revision={"revisionName": "test-sidecarset-old"}), bare, app_pod(), "uid")


@pytest.mark.parametrize(
    ("partition", "paused", "outcome"),
    [
        # Any string partition must be a percentage (OpenKruise's ParsePercentageAsFloat64); its error
        # refuses the pod. Only a NotUpdate SidecarSet's partition is not validated, so only it gets here.
        ("5", False, "'5' is not a percentage"),
        ("half%", False, "'half%' is not a percentage"),
        ("", False, "'' is not a percentage"),
        ("60%", False, True),  # draw 0.5 <= 0.6
        ("40%", False, False),
        (5, False, False),  # an integer: the latest
        ("5", True, True),  # paused: the pinned revision before the partition is looked at
    ],
)
def test_a_partial_policy_partition_of_a_not_update_sidecarset(
    partition: Any, paused: bool, outcome: bool | str
) -> None:
    obj = pinned(revision={"revisionName": "x", "policy": "Partial"})
    obj["spec"]["updateStrategy"] = {"type": "NotUpdate", "partition": partition, "paused": paused}
    parsed = ss.parse_sidecarset(obj)
    pin = ss.pinned_revision(parsed)
    assert pin is not None
    if isinstance(outcome, str):
        with pytest.raises(ss.InjectionError, match=outcome):
            ss.injects_history(parsed, pin, app_pod(), 0.5)
    else:
        assert ss.injects_history(parsed, pin, app_pod(), 0.5) is outcome


def test_a_rolling_update_partition_without_percent_is_refused_at_validation() -> None:
    """OpenKruise's SidecarSet webhook validates a RollingUpdate partition as an int or a percent, so a
    bare "5" never reaches injection there."""
    with pytest.raises(ss.SidecarSetError) as err:
        ss.parse_sidecarset(pinned(revision={"revisionName": "x", "policy": "Partial"}, partition="5"))
    assert err.value.field == "spec.updateStrategy.partition"


def test_partial_draw_is_reproducible_and_spreads_over_pods() -> None:
    draws = [ss.partial_draw("s", "default", f"p-{i}", f"uid-{i}") for i in range(400)]
    assert draws == [ss.partial_draw("s", "default", f"p-{i}", f"uid-{i}") for i in range(400)]
    assert all(0 <= d < 1 for d in draws)
    # Uniform enough that a 30% partition sends about 30% of new pods to the pinned revision.
    assert 0.22 < sum(d <= 0.3 for d in draws) / len(draws) < 0.38
    assert ss.partial_draw("s", "default", "p", "a") != ss.partial_draw("s", "default", "p", "b")


# Known draws (sha256 of SidecarSet, namespace, pod, uid), pinned so a change to the draw shows here.
KNOWN_DRAWS = {
    0: 0.9964036770152607,
    1: 0.895472078890712,
    2: 0.7364403411807824,
    3: 0.8159923993370393,
    5: 0.7196386462093386,
    7: 0.28675911612506727,
}


def test_partial_draw_values_are_pinned() -> None:
    for i, draw in KNOWN_DRAWS.items():
        assert ss.partial_draw("test-sidecarset", "default", f"p-{i}", f"uid-{i}") == draw


@pytest.mark.parametrize(
    ("partition", "expected"),
    [
        # pod index -> image, from the draws above: the pinned (OLD) one when draw <= partition
        ("50%", {0: NEW, 1: NEW, 2: NEW, 3: NEW, 5: NEW, 7: OLD}),
        ("80%", {0: NEW, 1: NEW, 2: OLD, 3: NEW, 5: OLD, 7: OLD}),
        ("90%", {0: NEW, 1: OLD, 2: OLD, 3: OLD, 5: OLD, 7: OLD}),
    ],
)
def test_partial_injects_the_pinned_revision_into_the_pods_the_draw_picks(
    partition: str, expected: dict[int, str]
) -> None:
    recorded = history(OLD, NEW)
    obj = pinned(revision={"revisionName": name_of(recorded, OLD), "policy": "Partial"}, partition=partition)
    got = {i: injected_image(obj, recorded, app_pod(f"p-{i}"), f"uid-{i}") for i in expected}
    assert got == expected


def test_custom_version_ties_go_to_the_latest_created_then_the_greatest_name() -> None:
    """OpenKruise's history.SortControllerRevisions: revision number, creation time, name. rollbook's
    revisions carry the time their event was recorded as creationTimestamp (whole seconds)."""
    obj = ss.parse_sidecarset(pinned(revision={"customVersion": "v1"}))
    pin = ss.pinned_revision(obj)
    assert pin is not None

    def record(name: str, created: str) -> dict[str, Any]:
        labels = {ss.CUSTOM_VERSION_LABEL: "v1"}
        return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created}, "revision": 2}

    early_z, late_a = record("z", "2026-11-30T12:00:00Z"), record("a", "2026-11-30T12:00:01Z")
    assert ss.recorded_revision(obj, pin, [early_z, late_a]) is late_a  # time before name
    same_b, same_c = record("b", "2026-11-30T12:00:00Z"), record("c", "2026-11-30T12:00:00Z")
    assert ss.recorded_revision(obj, pin, [same_c, same_b]) is same_c  # same second: the greater name


def test_history_sidecarset_takes_the_five_recorded_fields_and_keeps_the_rest_current() -> None:
    recorded = history(OLD)
    current = sidecarset(NEW)
    current["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    current["spec"]["volumes"] = [{"name": "new-volume", "emptyDir": {}}]
    parsed = ss.parse_sidecarset(current)
    old = ss.history_sidecarset(parsed, recorded[0])
    assert [c["image"] for c in old.containers] == [OLD]
    assert "volumes" not in old.spec  # the revision recorded none
    assert old.selector == {"matchLabels": {"app": "other"}}
    assert old.controller_revision == recorded[0]["metadata"]["name"]
    # Hashes from the revision's annotations; computed from the restored spec when it has none.
    bare = copy.deepcopy(recorded[0])
    bare["metadata"]["annotations"] = {}
    assert ss.history_sidecarset(parsed, bare).hash == old.hash == ss.parse_sidecarset(sidecarset(OLD)).hash


def test_fold_revision_reads_the_planners_records_and_prunes() -> None:
    from services.model.events import RevisionCreated, RevisionsPruned

    revisions: dict[str, dict[str, Any]] = {}
    ss.fold_revision(revisions, RevisionCreated(name="a", revision=1, hash="h", template={}, object={"x": 1}))
    ss.fold_revision(revisions, RevisionCreated(name="b", revision=2, hash="h", template={}))
    assert revisions == {"a": {"x": 1}, "b": {"metadata": {"name": "b"}, "revision": 2}}
    ss.fold_revision(revisions, RevisionsPruned(names=["a"]))
    assert list(revisions) == ["b"]


def test_injection_strategy_policy_is_validated() -> None:
    with pytest.raises(ss.SidecarSetError) as err:
        ss.parse_sidecarset(pinned(revision={"revisionName": "x", "policy": "Sometimes"}))
    assert err.value.field == "spec.injectionStrategy.revision.policy"


def test_custom_version_from_the_label() -> None:
    obj = sidecarset()
    obj["metadata"]["labels"] = {ss.CUSTOM_VERSION_LABEL: "v3"}
    assert ss.parse_sidecarset(obj).custom_version == "v3"
    assert ss.parse_sidecarset(sidecarset()).custom_version == ""


# --- resourcesPolicy: the calculator ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "variable", "expected"),
    [
        ("2 + 3 * 4", "1", "14"),  # a plain number is cores for CPU
        ("(2 + 3) * 4", "1", "20"),
        ("0.5", "1", "500m"),
        ("cpu * 50%", "600m", "300m"),
        ("max(cpu*50%, 50m)", "600m", "300m"),
        ("max(cpu*50%, 50m)", "60m", "50m"),
        ("min(cpu, 1)", "2", "1"),
        ("cpu / 3", "1", "333m"),  # in millis, truncated
        ("cpu - 100m", "1", "900m"),
        ("-cpu + 2", "1", "1"),
        ("CPU * 2", "250m", "500m"),  # names are case-insensitive
        ("MAX(cpu, 2)", "1", "2"),
        ("memory * 50%", "1Gi", "512Mi"),
        ("memory + 100Mi", "100Mi", "200Mi"),
        ("memory / 3", "1Gi", "357913941333m"),  # not whole bytes: printed as a decimal
        ("200Mi", "1", "200Mi"),
        ("1e3", "1", "1k"),  # an exponent number
        ("1.5Gi", "1", "1536Mi"),
        ("memory", "1500", "1500"),
    ],
)
def test_calculator(expression: str, variable: str, expected: str) -> None:
    assert str(resources.resource_value(expression, resources.parse_quantity(variable))) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cpu - 2", "negative"),
        ("max(cpu)", "exactly 2 arguments"),
        ("avg(cpu, 1)", "unknown function"),
        ("cpu * 100Mi", "multiplication of two quantities"),
        ("cpu / 0", "division by zero"),
        ("cpu / 1m", "division by quantity"),
        ("cpu +", "parse error"),
        ("(cpu", "parse error"),
        ("cpu ^ 2", "parse error"),
        ("memory + cpu", "undefined variable: cpu"),  # the variable is memory when the word is there
        ("", "empty"),
    ],
)
def test_calculator_errors(expression: str, message: str) -> None:
    with pytest.raises(resources.QuantityError, match=message):
        resources.resource_value(expression, resources.parse_quantity("1"))


@pytest.mark.parametrize(
    ("text", "value", "printed"),
    [
        ("100m", Fraction(1, 10), "100m"),
        ("1.5", Fraction(3, 2), "1500m"),
        ("2000", Fraction(2000), "2k"),
        ("1Ki", Fraction(1024), "1Ki"),
        ("1536Mi", Fraction(1536 * 2**20), "1536Mi"),
        ("2048Mi", Fraction(2 * 2**30), "2Gi"),
        ("512", Fraction(512), "512"),
        ("1e3", Fraction(1000), "1e3"),
        ("0", Fraction(0), "0"),
    ],
)
def test_quantities_parse_and_print_as_kubernetes(text: str, value: Fraction, printed: str) -> None:
    quantity = resources.parse_quantity(text)
    assert (quantity.value, str(quantity)) == (value, printed)


# --- resourcesPolicy: the policy ----------------------------------------------------------------------------

PROPOSAL_EXPR = {
    "limits": {"cpu": "max(cpu*50%, 50m)", "memory": "200Mi"},
    "requests": {"cpu": "max(cpu*50%, 50m)", "memory": "100Mi"},
}


def app(
    name: str, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None, **fields: Any
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return container(name, resources=res, **fields)


APPS = [
    app("app1", {"cpu": "200m", "memory": "200Mi"}, {"cpu": "50m", "memory": "100Mi"}),
    app("app2", {"cpu": "400m", "memory": "400Mi"}, {"cpu": "100m", "memory": "200Mi"}),
]


def policy(mode: str = "sum", regex: str = ".*", expr: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "targetContainersMode": mode,
        "targetContainersNameRegex": regex,
        "resourcesExpr": expr or PROPOSAL_EXPR,
    }


@pytest.mark.parametrize(
    ("apps", "mode", "expected"),
    [
        # OpenKruise's proposal example
        (
            APPS,
            "sum",
            {"limits": {"cpu": "300m", "memory": "200Mi"}, "requests": {"cpu": "75m", "memory": "100Mi"}},
        ),
        (
            APPS,
            "max",
            {"limits": {"cpu": "200m", "memory": "200Mi"}, "requests": {"cpu": "50m", "memory": "100Mi"}},
        ),
        # a target without a memory limit: the memory limit is unlimited, so the sidecar gets none
        (
            [APPS[0], app("app2", {"cpu": "400m"}, {"cpu": "100m"})],
            "sum",
            {"limits": {"cpu": "300m"}, "requests": {"cpu": "75m", "memory": "100Mi"}},
        ),
        # no requests anywhere: the requests variable is 0
        (
            [app("a", {"cpu": "1"})],
            "sum",
            {"limits": {"cpu": "500m"}, "requests": {"cpu": "50m", "memory": "100Mi"}},
        ),
        # no limits at all: none computed
        ([app("a")], "max", {"requests": {"cpu": "50m", "memory": "100Mi"}}),
    ],
)
def test_resources_policy(apps: list[dict[str, Any]], mode: str, expected: dict[str, Any]) -> None:
    s = make_sidecarset("s", containers=[container("agent", resourcesPolicy=policy(mode))])
    out = run(pod(apps), s)
    [agent] = [c for c in out["spec"]["containers"] if c["name"] == "agent"]
    assert agent["resources"] == expected
    assert "resourcesPolicy" not in agent


def test_resources_policy_targets() -> None:
    native = app("proxy", {"cpu": "1"}, restartPolicy="Always")
    plain_init = app("setup", {"cpu": "8"})
    other = make_sidecarset("other", containers=[app("log-agent", {"cpu": "4"})])
    s = make_sidecarset(
        "s",
        containers=[container("agent", resourcesPolicy=policy(regex="a", expr={"limits": {"cpu": "cpu"}}))],
    )
    app_pod = pod(
        [app("main", {"cpu": "2"}), app("web", {"cpu": "16"}), app("log-agent", {"cpu": "32"})],
        initContainers=[native, plain_init],
    )
    # Targets: containers whose name the regex finds anywhere ("a": main, not web), native-sidecar init
    # containers (proxy, not setup), never a container name of a matched SidecarSet (log-agent, agent).
    out = run(app_pod, s, other)
    assert [c for c in out["spec"]["containers"] if c["name"] == "agent"][0]["resources"] == {
        "limits": {"cpu": "2"}
    }
    s2 = make_sidecarset(
        "s",
        containers=[
            container("agent", resourcesPolicy=policy(regex="^p|^m", expr={"limits": {"cpu": "cpu"}}))
        ],
    )
    out = run(app_pod, s2)
    assert [c for c in out["spec"]["containers"] if c["name"] == "agent"][0]["resources"] == {
        "limits": {"cpu": "3"}
    }


def test_resources_policy_on_a_native_sidecar_init_container() -> None:
    init = container(
        "proxy", restartPolicy="Always", resourcesPolicy=policy(expr={"requests": {"memory": "memory*2"}})
    )
    s = make_sidecarset("s", initContainers=[init], updateStrategy={"type": "NotUpdate"})
    out = run(pod(APPS), s)
    assert out["spec"]["initContainers"][0]["resources"] == {"requests": {"memory": "600Mi"}}


def test_resources_policy_without_a_target_refuses_the_pod() -> None:
    s = make_sidecarset("s", containers=[container("agent", resourcesPolicy=policy(regex="^nothing$"))])
    with pytest.raises(ss.InjectionError, match="no containers match the regex pattern '\\^nothing\\$'"):
        run(pod(APPS), s)


@pytest.mark.parametrize(
    ("sidecar", "field", "reason"),
    [
        (
            container("a", resources={"limits": {"cpu": "1"}}, resourcesPolicy=policy()),
            "spec.containers[0].resourcesPolicy",
            "cannot be configured together",
        ),
        (
            container("a", resourcesPolicy=policy(mode="avg")),
            "spec.containers[0].resourcesPolicy.targetContainersMode",
            "sum or max",
        ),
        (
            container("a", resourcesPolicy=policy(regex="")),
            "spec.containers[0].resourcesPolicy.targetContainersNameRegex",
            "empty",
        ),
        (
            container("a", resourcesPolicy=policy(regex="(")),
            "spec.containers[0].resourcesPolicy.targetContainersNameRegex",
            "invalid regex",
        ),
        (
            container("a", resourcesPolicy={"targetContainersMode": "sum", "resourcesExpr": {}}),
            "spec.containers[0].resourcesPolicy.resourcesExpr",
            "limits or requests",
        ),
        (
            container("a", resourcesPolicy=policy(expr={"limits": {"cpu": "cpu +"}})),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu",
            "parse error",
        ),
        # validated with the field's own resource as the variable: "cpu" in a memory expression is undefined
        (
            container("a", resourcesPolicy=policy(expr={"requests": {"memory": "cpu*2"}})),
            "spec.containers[0].resourcesPolicy.resourcesExpr.requests.memory",
            "undefined variable",
        ),
        (
            container("a", resourcesPolicy=policy(expr={"limits": {"gpu": "1"}})),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits",
            "only cpu and memory",
        ),
    ],
)
def test_resources_policy_validation(sidecar: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ss.SidecarSetError) as err:
        ss.parse_sidecarset(make_sidecarset("s", containers=[sidecar]))
    assert err.value.field == field and reason in err.value.reason


def test_resources_policy_on_an_init_container_needs_restart_policy_always() -> None:
    with pytest.raises(ss.SidecarSetError) as err:
        ss.parse_sidecarset(make_sidecarset("s", initContainers=[container("i", resourcesPolicy=policy())]))
    assert (
        err.value.field == "spec.initContainers[0].resourcesPolicy"
        and "restartPolicy Always" in err.value.reason
    )


# --- injection order ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "named"),
    [
        ({"namespace": "team-a"}, {"team-a"}),
        ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}}, {"team-a"}),
        (
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}
                    ]
                }
            },
            {"a", "b"},
        ),
        ({"namespaceSelector": {"matchLabels": {"env": "prod"}}}, None),
        ({}, None),
    ],
)
def test_named_namespaces(scope: dict[str, Any], named: set[str] | None) -> None:
    parsed = ss.parse_sidecarset(make_sidecarset("s", containers=[container("a")], **scope))
    assert ss.named_namespaces(parsed) == (frozenset(named) if named is not None else None)


def test_sidecarsets_naming_the_pods_namespace_inject_first_then_by_name() -> None:
    sets = [
        make_sidecarset("a-cluster", containers=[container("a1")]),
        make_sidecarset("z-scoped", containers=[container("z1")], namespace="team-a"),
        make_sidecarset(
            "m-selected",
            containers=[container("m1")],
            namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
        ),
    ]
    parsed = [ss.parse_sidecarset(s) for s in sets]
    out, _ = ss.inject(
        pod([container("app")], namespace="team-a"),
        parsed,
        now=NOW,
        namespace_labels={"kubernetes.io/metadata.name": "team-a"},
    )
    assert names(out["spec"]["containers"]) == ["m1", "z1", "a1", "app"]


# OpenKruise 1.9's example: A = [z-log After, b-proxy Before], B = [a-agent Before], pod [app].
ORDER_SETS = [
    make_sidecarset(
        "a",
        containers=[container("z-log", podInjectPolicy="AfterAppContainer"), container("b-proxy")],
    ),
    make_sidecarset("b", containers=[container("a-agent")]),
]


@pytest.mark.parametrize(
    ("gate", "expected"),
    [
        (False, ["b-proxy", "a-agent", "app", "z-log"]),  # SidecarSet by SidecarSet, spec order
        (True, ["a-agent", "b-proxy", "app", "z-log"]),  # all sidecars sorted by name
    ],
)
def test_sort_sidecar_containers_by_name_gate(gate: bool, expected: list[str]) -> None:
    parsed = [ss.parse_sidecarset(s) for s in ORDER_SETS]
    out, _ = ss.inject(pod([container("app")]), parsed, now=NOW, sort_containers_by_name=gate)
    assert names(out["spec"]["containers"]) == expected


def test_sort_by_name_is_bytewise() -> None:
    s = make_sidecarset(
        "s", containers=[container("sidecar-2"), container("sidecar-10"), container("b"), container("B")]
    )
    out, _ = ss.inject(
        pod([container("app")]), [ss.parse_sidecarset(s)], now=NOW, sort_containers_by_name=True
    )
    assert names(out["spec"]["containers"]) == ["B", "b", "sidecar-10", "sidecar-2", "app"]


# --- shareVolumePolicy / shareVolumeDevicePolicy -------------------------------------------------------


def test_devices_are_shared_after_all_mounts_and_skip_every_mount_path() -> None:
    sidecar = container(
        "agent",
        shareVolumePolicy={"type": "enabled"},
        shareVolumeDevicePolicy={"type": "enabled"},
        volumeDevices=[{"name": "own", "devicePath": "/dev/own"}],
    )
    app1 = container("app1", volumeDevices=[{"name": "blk", "devicePath": "/data"}])
    # app2's mount at /data comes from the mount pass, before app1's device at the same path is considered.
    app2 = container(
        "app2",
        volumeMounts=[{"name": "d", "mountPath": "/data"}, {"name": "o", "mountPath": "/dev/own"}],
        volumeDevices=[{"name": "raw", "devicePath": "/dev/raw"}, {"name": "raw2", "devicePath": "/dev/raw"}],
    )
    out = run(
        pod([app1, app2]),
        make_sidecarset("s", containers=[sidecar], volumes=[{"name": "own", "emptyDir": {}}]),
    )
    [agent] = [c for c in out["spec"]["containers"] if c["name"] == "agent"]
    assert [m["mountPath"] for m in agent["volumeMounts"]] == ["/data"]  # /dev/own is the sidecar's device
    assert [d["devicePath"] for d in agent["volumeDevices"]] == ["/dev/own", "/dev/raw"]


def test_a_subpath_expr_mount_brings_its_env_even_when_its_path_is_taken() -> None:
    sidecar = container(
        "agent", shareVolumePolicy={"type": "enabled"}, volumeMounts=[{"name": "own", "mountPath": "/logs"}]
    )
    app1 = container(
        "app",
        env=[{"name": "POD", "value": "first"}, {"name": "POD", "value": "second"}],
        volumeMounts=[{"name": "l", "mountPath": "/logs", "subPathExpr": "$(POD)"}],
    )
    out = run(
        pod([app1]), make_sidecarset("s", containers=[sidecar], volumes=[{"name": "own", "emptyDir": {}}])
    )
    [agent] = [c for c in out["spec"]["containers"] if c["name"] == "agent"]
    assert [m["name"] for m in agent["volumeMounts"]] == ["own"]
    assert {"name": "POD", "value": "first"} in agent["env"]  # the container's first var of that name


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s.update(injectionStrategy=["paused"]), "spec.injectionStrategy"),
        (lambda s: s.update(injectionStrategy={"revision": "v1"}), "spec.injectionStrategy.revision"),
        (
            lambda s: s.update(injectionStrategy={"revision": {"revisionName": ["a"]}}),
            "spec.injectionStrategy.revision.revisionName",
        ),
        (
            lambda s: s["containers"][0].update(resourcesPolicy=policy(expr=["cpu"])),  # type: ignore[arg-type]
            "spec.containers[0].resourcesPolicy.resourcesExpr",
        ),
        (
            lambda s: s["containers"][0].update(resourcesPolicy=policy(expr={"limits": ["cpu"]})),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits",
        ),
        (
            lambda s: s["containers"][0].update(resourcesPolicy=policy(expr={"limits": {"cpu": 2}})),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu",
        ),
        (
            lambda s: s["containers"][0].update(resourcesPolicy={**policy(), "targetContainersNameRegex": 1}),
            "spec.containers[0].resourcesPolicy.targetContainersNameRegex",
        ),
    ],
)
def test_malformed_new_fields_name_the_field(mutate: Any, field: str) -> None:
    obj = make_sidecarset("s", containers=[container("agent")])
    mutate(obj["spec"])
    with pytest.raises(ss.SidecarSetError) as err:
        ss.parse_sidecarset(obj)
    assert err.value.field == field
