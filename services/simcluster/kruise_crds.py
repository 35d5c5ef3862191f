"""The CustomResourceDefinitions rollbook serves (CloneSet, SidecarSet), built as Python objects: the
source of deploy/base/crds/*.yaml (scripts/crds.py writes them) and of the OpenAPI simcluster serves for
its own CloneSets and SidecarSets when no CRD is installed (``kubectl explain``).

The schemas are structural OpenAPI v3, field for field what OpenKruise accepts for the fields rollbook
reads and writes (CloneSet as on OpenKruise master, SidecarSet as in OpenKruise 1.9), with the pod
template, the volume claim templates, SidecarSet volumes and the container fields of a sidecar kept as
``x-kubernetes-preserve-unknown-fields`` objects, as OpenKruise's own CRDs keep them. Both define
``v1alpha1`` and ``v1beta1``.

CloneSet serves both, as OpenKruise master does, and stores ``v1beta1`` (OpenKruise master's storage
version): nothing a v1beta1 client sets is lost in storage (``scaleStrategy.excludePreparingDelete`` has no
v1alpha1 field), and a cluster can move between OpenKruise master's CRD and this one without migrating
stored objects. The API server converts between the two through rollbook's webhook (``/convert`` on the
``rollbook-webhook`` Service, ``spec.conversion.strategy: Webhook``), so every v1alpha1 read and write,
rollbook's own services' included, needs the webhook up. SidecarSet serves and stores ``v1alpha1`` only
(its ``v1beta1`` schema written down, not served: it has no conversion yet).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

GROUP = "apps.kruise.io"
WEBHOOK_NAMESPACE = "rollbook-system"
WEBHOOK_SERVICE = "rollbook-webhook"  # deploy/base/webhook.yaml; its certificate has the same name
CLONESET_STORAGE_VERSION = "v1beta1"


# --- building blocks -----------------------------------------------------------------------------------


def obj(description: str, properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    schema: Schema = {"description": description, "type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def string(description: str, **extra: Any) -> Schema:
    return {"description": description, "type": "string", **extra}


def boolean(description: str, **extra: Any) -> Schema:
    return {"description": description, "type": "boolean", **extra}


def int32(description: str) -> Schema:
    return {"description": description, "type": "integer", "format": "int32"}


def int64(description: str) -> Schema:
    return {"description": description, "type": "integer", "format": "int64"}


def int_or_percent(description: str) -> Schema:
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }


def array(description: str, items: Schema, **extra: Any) -> Schema:
    return {"description": description, "type": "array", "items": items, **extra}


def string_map(description: str) -> Schema:
    return {"description": description, "type": "object", "additionalProperties": {"type": "string"}}


def opaque(description: str) -> Schema:
    """An object kept as written: Kubernetes validates it where it ends up (a pod, a PVC)."""
    return {"description": description, "type": "object", "x-kubernetes-preserve-unknown-fields": True}


def label_selector(description: str) -> Schema:
    return {
        "description": description,
        "type": "object",
        "properties": {
            "matchExpressions": array(
                "Label selector requirements, ANDed.",
                {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"description": "In, NotIn, Exists or DoesNotExist.", "type": "string"},
                        "values": {
                            "type": "array",
                            "items": {"type": "string"},
                            "x-kubernetes-list-type": "atomic",
                        },
                    },
                    "required": ["key", "operator"],
                },
                **{"x-kubernetes-list-type": "atomic"},
            ),
            "matchLabels": string_map("Labels the object must carry, each key = value."),
        },
        "x-kubernetes-map-type": "atomic",
    }


def condition() -> Schema:
    return obj(
        "One condition of the workload.",
        {
            "lastTransitionTime": string("When the status last changed.", format="date-time"),
            "lastUpdateTime": string("When the condition was last written.", format="date-time"),
            "message": string("Human-readable detail."),
            "reason": string("One-word reason."),
            "status": string("True, False or Unknown."),
            "type": string("The condition's type."),
        },
        ["status", "type"],
    )


def priority_strategy() -> Schema:
    return obj(
        "The order in which pods are updated: by weight of matching selectors, or by a label's value.",
        {
            "orderPriority": array(
                "Pods sorted by the integer value of these label keys, in order.",
                obj("", {"orderedKey": string("Label key.")}, ["orderedKey"]),
            ),
            "weightPriority": array(
                "Pods matching heavier selectors first.",
                obj(
                    "",
                    {
                        "matchSelector": label_selector("Pods this weight applies to."),
                        "weight": int32("Weight, 0 to 100."),
                    },
                    ["matchSelector", "weight"],
                ),
            ),
        },
    )


def scatter_strategy() -> Schema:
    return array(
        "Spread updates of pods carrying these labels over the whole rollout.",
        obj("", {"key": string("Label key."), "value": string("Label value.")}, ["key", "value"]),
    )


def in_place_update_strategy() -> Schema:
    return obj(
        "How in-place updates proceed.",
        {
            "gracePeriodSeconds": int32("Seconds between marking a pod not ready and updating it in place."),
            "imagePreDownloadMinUpdatedReadyPods": int32("Updated ready pods before images are pre-pulled."),
            "imagePreDownloadParallelism": int_or_percent("Nodes pre-pulling the new images at once."),
            "imagePreDownloadTimeoutSeconds": int32("Timeout of one image pre-pull."),
        },
    )


def lifecycle() -> Schema:
    def hook(description: str) -> Schema:
        return obj(
            description,
            {
                "finalizersHandler": array("Finalizers that hold the pod in this state.", {"type": "string"}),
                "labelsHandler": string_map("Labels that hold the pod in this state."),
                "markPodNotReady": boolean("Mark the pod not ready on entering this state."),
            },
        )

    return obj(
        "Hooks holding pods in PreparingNormal, PreparingUpdate and PreparingDelete.",
        {
            "inPlaceUpdate": hook("Before an in-place update."),
            "preDelete": hook("Before deletion."),
            "preNormal": hook("Before a new pod counts as Normal."),
        },
    )


def type_meta() -> dict[str, Schema]:
    return {
        "apiVersion": string("The versioned schema of this object."),
        "kind": string("The REST resource this object represents."),
        "metadata": {"type": "object"},
    }


# --- CloneSet ------------------------------------------------------------------------------------------


def cloneset_spec(version: str) -> Schema:
    update_fields: dict[str, Schema] = {
        "inPlaceUpdateStrategy": in_place_update_strategy(),
        "maxSurge": int_or_percent("Pods created above replicas during an update (number or percent)."),
        "maxUnavailable": int_or_percent("Pods unavailable at once during an update (number or percent)."),
        "partition": int_or_percent("Pods kept at the old revision (number or percent of replicas)."),
        "paused": boolean("Stop updating pods; scaling continues."),
        "priorityStrategy": priority_strategy(),
        "scatterStrategy": scatter_strategy(),
    }
    if version == "v1alpha1":
        update_strategy = obj(
            "How pods move to a new revision.",
            {
                **update_fields,
                "type": string("ReCreate (default), InPlaceIfPossible or InPlaceOnly."),
            },
        )
        scale_strategy = obj(
            "How pods are added and removed.",
            {
                "disablePVCReuse": boolean("Do not reuse the PVCs of a deleted pod for its replacement."),
                "maxUnavailable": int_or_percent("Pods unavailable at once while scaling up."),
                "podsToDelete": array("Pods to delete (and replace, unless scaling in).", {"type": "string"}),
            },
        )
    else:
        update_strategy = obj(
            "How pods move to a new revision.",
            {
                "rollingUpdate": obj(
                    "Parameters of a rolling update.",
                    {
                        **update_fields,
                        "podUpdatePolicy": string("ReCreate (default), InPlaceIfPossible or InPlaceOnly."),
                    },
                ),
                "type": string("RollingUpdate (default) or OnDelete."),
            },
        )
        scale_strategy = obj(
            "How pods are added and removed.",
            {
                "enablePVCReuse": boolean(
                    "Reuse the PVCs of a deleted pod for its replacement.", default=False
                ),
                "excludePreparingDelete": boolean("Do not count PreparingDelete pods as replicas."),
                "maxUnavailable": int_or_percent("Pods unavailable at once while scaling up."),
                "podsToDelete": array("Pods to delete (and replace, unless scaling in).", {"type": "string"}),
            },
        )
    return obj(
        "The desired state of the CloneSet.",
        {
            "lifecycle": lifecycle(),
            "minReadySeconds": int32("Seconds a ready pod must stay ready to count as available."),
            "progressDeadlineSeconds": int32("Seconds a rollout may make no progress before it is failed."),
            "replicas": int32("Desired number of pods (default 1)."),
            "revisionHistoryLimit": int32("ControllerRevisions kept (default 10)."),
            "scaleStrategy": scale_strategy,
            "selector": label_selector("Pods this CloneSet owns; must match the template's labels."),
            "template": opaque("The pod template."),
            "updateStrategy": update_strategy,
            "volumeClaimTemplates": array("A PVC per pod for each of these.", opaque("A PVC template.")),
        },
        ["selector", "template"],
    )


def cloneset_status() -> Schema:
    return obj(
        "The observed state of the CloneSet, written by its controller.",
        {
            "availableReplicas": int32("Pods ready for at least minReadySeconds."),
            "collisionCount": int32("Revision hash collisions seen."),
            "conditions": array("Conditions of the CloneSet.", condition()),
            "currentRevision": string("The revision pods ran before the current update."),
            "expectedUpdatedReplicas": int32("Pods expected at updateRevision, given the partition."),
            "labelSelector": string("The selector as a string (for the scale subresource and an HPA)."),
            "observedGeneration": int64("The generation this status describes."),
            "readyReplicas": int32("Pods with the Ready condition."),
            "replicas": int32("Pods counted by the controller."),
            "updateRevision": string("The revision of the current template."),
            "updatedAvailableReplicas": int32("Pods at updateRevision and available."),
            "updatedReadyReplicas": int32("Pods at updateRevision and ready."),
            "updatedReplicas": int32("Pods at updateRevision."),
        },
        ["availableReplicas", "readyReplicas", "replicas", "updatedReadyReplicas", "updatedReplicas"],
    )


def cloneset_columns() -> list[Schema]:
    def column(name: str, path: str, kind: str, description: str, priority: int = 0) -> Schema:
        entry: Schema = {"name": name, "type": kind, "jsonPath": path, "description": description}
        if priority:
            entry["priority"] = priority
        return entry

    return [
        column("DESIRED", ".spec.replicas", "integer", "Desired pods."),
        column("UPDATED", ".status.updatedReplicas", "integer", "Pods at the update revision."),
        column("UPDATED_READY", ".status.updatedReadyReplicas", "integer", "Updated pods ready."),
        column("UPDATED_AVAILABLE", ".status.updatedAvailableReplicas", "integer", "Updated pods available."),
        column("READY", ".status.readyReplicas", "integer", "Pods ready."),
        column("TOTAL", ".status.replicas", "integer", "All pods."),
        column("AGE", ".metadata.creationTimestamp", "date", "Time since creation."),
        column("CONTAINERS", ".spec.template.spec.containers[*].name", "string", "Containers.", 1),
        column("IMAGES", ".spec.template.spec.containers[*].image", "string", "Images.", 1),
        column("SELECTOR", ".status.labelSelector", "string", "Pod selector.", 1),
    ]


def cloneset_crd() -> Schema:
    versions = []
    for version in ("v1alpha1", "v1beta1"):
        versions.append(
            {
                "name": version,
                "served": True,
                "storage": version == CLONESET_STORAGE_VERSION,
                "additionalPrinterColumns": cloneset_columns(),
                "schema": {
                    "openAPIV3Schema": obj(
                        "A set of identical pods, updated in place or recreated revision by revision.",
                        {**type_meta(), "spec": cloneset_spec(version), "status": cloneset_status()},
                    )
                },
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.labelSelector",
                    },
                },
            }
        )
    cloneset = crd("CloneSet", "clonesets", "Namespaced", versions, short_names=["clone"])
    # cert-manager's CA injector fills the caBundle below, as for the webhook configurations.
    cloneset["metadata"]["annotations"] = {
        "cert-manager.io/inject-ca-from": f"{WEBHOOK_NAMESPACE}/{WEBHOOK_SERVICE}"
    }
    cloneset["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {
                    "namespace": WEBHOOK_NAMESPACE,
                    "name": WEBHOOK_SERVICE,
                    "path": "/convert",
                    "port": 443,
                }
            },
        },
    }
    return cloneset


# --- SidecarSet ----------------------------------------------------------------------------------------


def sidecar_container(description: str) -> Schema:
    schema = obj(
        description,
        {
            "name": string("Container name."),
            "image": string("Container image."),
            "podInjectPolicy": string("BeforeAppContainer (default) or AfterAppContainer."),
            "shareVolumePolicy": obj(
                "Whether the sidecar mounts the pod's other volumes.",
                {"type": string("enabled or disabled.")},
            ),
            "shareVolumeDevicePolicy": obj(
                "Whether the sidecar gets the pod's volume devices.", {"type": string("enabled or disabled.")}
            ),
            "transferEnv": array(
                "Environment variables copied from another container of the pod.",
                obj(
                    "",
                    {
                        "envName": string("One variable."),
                        "envNames": array("Several variables.", {"type": "string"}),
                        "sourceContainerName": string("The container to copy from."),
                        "sourceContainerNameFrom": obj(
                            "The container to copy from, named by a field of the pod.",
                            {
                                "fieldRef": obj(
                                    "A pod field (metadata.name, a label, an annotation).",
                                    {
                                        "apiVersion": string("Schema version."),
                                        "fieldPath": string("The field."),
                                    },
                                    ["fieldPath"],
                                )
                            },
                        ),
                    },
                ),
            ),
            "resourcesPolicy": obj(
                "The sidecar's resources computed from the pod's app containers at pod creation.",
                {
                    "targetContainersMode": string(
                        "sum or max of the target containers' resources.", enum=["sum", "max"]
                    ),
                    "targetContainersNameRegex": string(
                        "Target containers: those whose name this regex finds.", default=".*"
                    ),
                    "resourcesExpr": obj(
                        "Expressions of the aggregated resource (cpu or memory), e.g. max(cpu*50%, 50m).",
                        {
                            kind: obj(
                                f"Expressions of the sidecar's {kind}.",
                                {"cpu": string("CPU expression."), "memory": string("Memory expression.")},
                            )
                            for kind in ("limits", "requests")
                        },
                    ),
                },
                ["targetContainersMode"],
            ),
            "upgradeStrategy": obj(
                "How a running sidecar is upgraded.",
                {
                    "hotUpgradeEmptyImage": string("The empty image of a HotUpgrade."),
                    "upgradeType": string("ColdUpgrade (default) or HotUpgrade."),
                },
            ),
        },
    )
    schema["x-kubernetes-preserve-unknown-fields"] = True  # every field of a core/v1 Container
    return schema


def sidecarset_spec(version: str) -> Schema:
    properties: dict[str, Schema] = {
        "containers": array(
            "Sidecar containers injected into matching pods.", sidecar_container("A sidecar.")
        ),
        "imagePullSecrets": array(
            "Pull secrets added to matching pods.",
            {
                "type": "object",
                "properties": {"name": string("Secret name.", default="")},
                "x-kubernetes-map-type": "atomic",
            },
        ),
        "initContainers": array("Init containers injected into matching pods.", sidecar_container("One.")),
        "injectionStrategy": obj(
            "Which revision new pods get.",
            {
                "paused": boolean("Inject nothing into new pods."),
                "revision": obj(
                    "A fixed revision to inject instead of the latest.",
                    {
                        "customVersion": string("The revision with this custom version label."),
                        "policy": string(
                            "Always or Partial (only pods not yet updated).",
                            enum=["Always", "Partial"],
                            default="Always",
                        ),
                        "revisionName": string("The ControllerRevision with this name."),
                    },
                ),
            },
        ),
        "namespaceSelector": label_selector("Namespaces whose pods are injected."),
        "patchPodMetadata": array(
            "Annotations patched onto matching pods.",
            obj(
                "",
                {
                    "annotations": string_map("Annotations."),
                    "patchPolicy": string("Retain, Overwrite or MergePatchJson."),
                },
            ),
        ),
        "revisionHistoryLimit": int32("ControllerRevisions kept (default 10)."),
        "selector": label_selector("Pods the sidecars are injected into."),
        "updateStrategy": obj(
            "How sidecars of running pods are upgraded in place.",
            {
                "maxUnavailable": int_or_percent("Pods unavailable at once (number or percent)."),
                "partition": int_or_percent("Pods kept at the old revision (number or percent)."),
                "paused": boolean("Upgrade no running pod."),
                "priorityStrategy": priority_strategy(),
                "scatterStrategy": scatter_strategy(),
                "selector": label_selector("Only pods matching this are upgraded."),
                "type": string("RollingUpdate (default) or NotUpdate."),
            },
        ),
        "volumes": array("Volumes added to matching pods.", opaque("A core/v1 Volume.")),
    }
    if version == "v1alpha1":
        properties["namespace"] = string("Only pods in this namespace (deprecated for namespaceSelector).")
    else:
        properties["customVersion"] = string("A custom version label written on this SidecarSet's revisions.")
    return obj("The desired state of the SidecarSet.", dict(sorted(properties.items())))


def sidecarset_status() -> Schema:
    return obj(
        "The observed state of the SidecarSet, written by its controller.",
        {
            "collisionCount": int32("Revision hash collisions seen."),
            "latestRevision": string("The latest ControllerRevision's name."),
            "matchedPods": int32("Pods matching the selector."),
            "observedGeneration": int64("The generation this status describes."),
            "readyPods": int32("Matched pods ready."),
            "updatedPods": int32("Matched pods running the latest sidecars."),
            "updatedReadyPods": int32("Updated pods ready."),
        },
        ["matchedPods", "readyPods", "updatedPods"],
    )


def sidecarset_crd() -> Schema:
    columns = [
        {
            "name": "MATCHED",
            "type": "integer",
            "jsonPath": ".status.matchedPods",
            "description": "Matched pods.",
        },
        {
            "name": "UPDATED",
            "type": "integer",
            "jsonPath": ".status.updatedPods",
            "description": "Updated pods.",
        },
        {"name": "READY", "type": "integer", "jsonPath": ".status.readyPods", "description": "Ready pods."},
        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "Age."},
    ]
    versions: list[Schema] = [
        {
            "name": version,
            "served": version == "v1alpha1",
            "storage": version == "v1alpha1",
            "additionalPrinterColumns": columns,
            "schema": {
                "openAPIV3Schema": obj(
                    "Sidecar containers injected into, and upgraded in place in, the pods it selects.",
                    {**type_meta(), "spec": sidecarset_spec(version), "status": sidecarset_status()},
                )
            },
            "subresources": {"status": {}},
        }
        for version in ("v1alpha1", "v1beta1")
    ]
    return crd("SidecarSet", "sidecarsets", "Cluster", versions)


# --- the CRD object ------------------------------------------------------------------------------------


def crd(
    kind: str, plural: str, scope: str, versions: list[Schema], short_names: list[str] | None = None
) -> Schema:
    names: Schema = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = short_names
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "rollbook"},
        },
        "spec": {"group": GROUP, "names": names, "scope": scope, "versions": versions},
    }
