"""A CloneSet handed over by another controller (OpenKruise, whose revision names are not rollbook's): its
pods continue instead of being recreated. The update revision its status reports for the current
generation is adopted under that name (``revisions.reported_update_revision``); a pod at a revision
rollbook has no record of is compared by what it shows (``inplace.template_from_pod``) and updated in
place when only its images differ, recreated otherwise."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.kinds.cloneset.rules.inplace import template_from_pod
from services.kinds.cloneset.rules.plan import plan
from tests.planner.builders import IDS, cloneset, plan_input, running_pod, with_image

KRUISE_OLD, KRUISE_NEW = "sample-7b9c5d8f6a", "sample-5f4d8b7c9e"  # OpenKruise's names for v1 and v2


def as_kruise_left_it(pod: dict[str, Any], revision: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"].update(
        {"controller-revision-hash": revision, "pod-template-hash": revision.rsplit("-", 1)[1]}
    )
    return pod


def reported(cs: dict[str, Any], update: str, current: str, observed_generation: int) -> dict[str, Any]:
    cs = copy.deepcopy(cs)
    cs["status"] = {
        "observedGeneration": observed_generation,
        "updateRevision": update,
        "currentRevision": current,
        "replicas": 2,
        "readyReplicas": 2,
        "updatedReplicas": 2,
        "updatedReadyReplicas": 2,
        "availableReplicas": 2,
    }
    return cs


def test_the_revision_openkruise_reports_for_this_generation_is_adopted_and_its_pods_are_updated() -> None:
    v1 = cloneset(replicas=2, strategy={"type": "InPlaceIfPossible", "maxUnavailable": 2})
    pods = [as_kruise_left_it(running_pod(v1, i), KRUISE_OLD) for i in IDS[:2]]
    result = plan(plan_input(reported(v1, KRUISE_OLD, KRUISE_OLD, 1), pods))
    assert result.actions == []  # nothing to do: the pods are at the current template's revision
    assert result.update_revision == KRUISE_OLD and result.status is not None
    assert result.status["updatedReadyReplicas"] == 2
    assert [r["metadata"]["name"] for r in result.revisions] == [KRUISE_OLD]  # recorded from now on


def test_a_status_of_an_older_generation_is_not_adopted() -> None:
    v1 = cloneset(replicas=2, strategy={"type": "InPlaceIfPossible", "maxUnavailable": 2})
    v2 = with_image(v1, "nginx:mainline")
    v2["metadata"]["generation"] = 2
    pods = [as_kruise_left_it(running_pod(v1, i), KRUISE_OLD) for i in IDS[:2]]
    result = plan(plan_input(reported(v2, KRUISE_OLD, KRUISE_OLD, 1), pods))
    assert result.update_revision != KRUISE_OLD and result.update_revision is not None
    assert result.update_revision.startswith("sample-")
    # The pods' revision is unrecorded but they show it: only the image differs, so in place.
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace"] * 2


def test_handed_over_mid_update_the_updated_pods_count_and_the_rest_are_updated_in_place() -> None:
    v1 = cloneset(replicas=2, strategy={"type": "InPlaceIfPossible", "maxUnavailable": 2})
    v2 = with_image(v1, "nginx:mainline")
    v2["metadata"]["generation"] = 2
    old = as_kruise_left_it(running_pod(v1, IDS[0]), KRUISE_OLD)
    new = as_kruise_left_it(running_pod(v2, IDS[1]), KRUISE_NEW)
    result = plan(plan_input(reported(v2, KRUISE_NEW, KRUISE_OLD, 2), [old, new]))
    assert result.update_revision == KRUISE_NEW
    assert [(type(a).__name__, a.pod) for a in result.actions] == [("UpdateInPlace", old["metadata"]["name"])]
    assert result.status is not None and result.status["updatedReplicas"] == 1


def test_a_pod_that_differs_beyond_its_images_is_recreated() -> None:
    v1 = cloneset(replicas=1, strategy={"type": "InPlaceIfPossible"})
    v2 = with_image(v1, "nginx:mainline")
    v2["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "MODE", "value": "b"}]
    v2["metadata"]["generation"] = 2
    pod = as_kruise_left_it(running_pod(v1, IDS[0]), KRUISE_OLD)
    pod["spec"]["containers"][0]["env"] = [{"name": "MODE", "value": "a"}]
    result = plan(plan_input(reported(v2, KRUISE_OLD, KRUISE_OLD, 1), [pod]))
    assert [type(a).__name__ for a in result.actions] == ["RecreatePod"]


TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "web", "tier": "front"}},
    "spec": {
        "restartPolicy": "Always",
        "containers": [
            {"name": "main", "image": "web:2", "ports": [{"containerPort": 80, "protocol": "TCP"}]}
        ],
    },
}


def pod_like(**container: Any) -> dict[str, Any]:
    main = {
        "name": "main",
        "image": "web:1",
        "ports": [{"containerPort": 80, "protocol": "TCP"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "resources": {},
        "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
    }
    main.update(container)
    return {
        "metadata": {"labels": {"app": "web", "controller-revision-hash": KRUISE_OLD}},
        "spec": {"restartPolicy": "Always", "nodeName": "n1", "containers": [main]},
    }


def test_template_from_pod_keeps_the_images_the_pod_runs() -> None:
    derived = template_from_pod(pod_like(), TEMPLATE)
    assert derived is not None
    assert derived["spec"]["containers"] == [dict(TEMPLATE["spec"]["containers"][0], image="web:1")]
    assert derived["spec"]["restartPolicy"] == "Always"
    # Only the template's label keys, as the pod has them: the missing "tier" is added by the update.
    assert derived["metadata"]["labels"] == {"app": "web"}


@pytest.mark.parametrize(
    ("container", "spec", "why"),
    [
        (
            {"command": ["sh"]},
            {},
            "a container field the template does not set and the API server does not default",
        ),
        ({"ports": [{"containerPort": 81, "protocol": "TCP"}]}, {}, "a field the template sets, different"),
        ({"name": "other"}, {}, "another container"),
        (
            {"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {},
            "a mount the template does not have",
        ),
        ({}, {"restartPolicy": "Never"}, "a pod spec field the template sets, different"),
    ],
)
def test_template_from_pod_says_nothing_when_the_pod_differs_beyond_its_images(
    container: dict[str, Any], spec: dict[str, Any], why: str
) -> None:
    pod = pod_like(**container)
    pod["spec"].update(spec)
    assert template_from_pod(pod, TEMPLATE) is None, why


# A pod as the API server stores one created from TEMPLATE at image web:1: everything it adds when the
# template leaves a field out, with the value it adds.
def defaulted_pod() -> dict[str, Any]:
    pod = pod_like(
        volumeMounts=[
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ]
    )
    pod["spec"].update(
        {
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "terminationGracePeriodSeconds": 30,
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "enableServiceLinks": True,
            "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": t, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                for t in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            ],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [], "defaultMode": 420}}],
        }
    )
    return pod


def test_a_pod_with_only_what_the_api_server_adds_is_updated_in_place() -> None:
    derived = template_from_pod(defaulted_pod(), TEMPLATE)
    assert derived is not None
    assert derived["spec"] == {
        "restartPolicy": "Always",
        "containers": [dict(TEMPLATE["spec"]["containers"][0], image="web:1")],
    }


def test_defaults_the_api_server_fills_into_fields_the_template_sets_are_not_differences() -> None:
    template = copy.deepcopy(TEMPLATE)
    main = template["spec"]["containers"][0]
    main["ports"] = [{"containerPort": 80}]
    main["resources"] = {"limits": {"cpu": "1"}}
    template["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    pod = defaulted_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    pod["spec"]["tolerations"].insert(0, {"key": "dedicated", "operator": "Exists"})
    assert template_from_pod(pod, template) is not None


# The fields OpenKruise's revision may have set that the new template removes: the pod keeps them when only
# its images are patched, so it must be recreated.
REMOVED_FROM_THE_TEMPLATE: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"hostNetwork": True}, {}),
    ({"serviceAccountName": "legacy", "serviceAccount": "legacy"}, {}),
    ({"serviceAccountName": "legacy"}, {}),
    ({"dnsPolicy": "ClusterFirstWithHostNet"}, {}),
    ({"terminationGracePeriodSeconds": 60}, {}),
    ({"priority": 1000, "priorityClassName": "high"}, {}),
    ({"nodeSelector": {"zone": "a"}}, {}),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}, {}),
    ({"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}, {}),
    (
        {
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                }
            ]
        },
        {},
    ),
    ({"initContainers": [{"name": "init", "image": "busybox:1"}]}, {}),
    ({"volumes": [{"name": "data", "emptyDir": {}}]}, {}),
    ({}, {"resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}}),
    ({}, {"imagePullPolicy": "Always"}),
    ({}, {"terminationMessagePolicy": "FallbackToLogsOnError"}),
    ({}, {"securityContext": {"privileged": True}}),
    ({}, {"ports": [{"containerPort": 80, "protocol": "UDP"}]}),
]


@pytest.mark.parametrize(("spec", "container"), REMOVED_FROM_THE_TEMPLATE)
def test_a_pod_keeping_a_field_the_template_removed_is_recreated(
    spec: dict[str, Any], container: dict[str, Any]
) -> None:
    pod = defaulted_pod()
    pod["spec"].update(spec)
    pod["spec"]["containers"][0].update(container)
    assert template_from_pod(pod, TEMPLATE) is None


def test_a_handed_over_pod_with_host_network_and_cpu_limits_the_template_dropped_is_recreated() -> None:
    v1 = cloneset(replicas=1, strategy={"type": "InPlaceIfPossible"})
    v2 = with_image(v1, "nginx:mainline")
    v2["metadata"]["generation"] = 2
    pod = as_kruise_left_it(running_pod(v1, IDS[0]), KRUISE_OLD)
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    result = plan(plan_input(reported(v2, KRUISE_OLD, KRUISE_OLD, 1), [pod]))
    assert [type(a).__name__ for a in result.actions] == ["RecreatePod"]
    assert result.status is not None and result.status["updatedReplicas"] == 0
