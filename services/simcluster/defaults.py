"""Defaulting the API server applies when it decodes a request body, on create and update (so a client's PUT
without the defaulted fields is not mistaken for a spec change). The rules are Kubernetes' `SetDefaults_*`
functions of `pkg/apis/core/v1/defaults.go` and `pkg/apis/apps/v1/defaults.go` for the fields clients
read back; the admission plugins that fill in more (service account, tolerations, priority) are in
`plugins.py`."""

from __future__ import annotations

from typing import Any

from .resources import NAMESPACES, NETWORK_POLICIES, PODS, PVCS, SERVICES, ResourceType

Obj = dict[str, Any]

# Label the API server sets on every namespace (immutable, equal to its name) since Kubernetes 1.21.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_FILE_MODE = 420  # 0644, the default mode of secret, configMap, projected and downwardAPI volumes


def _pull_policy(image: str) -> str:
    """Always for ``:latest`` or an untagged image, IfNotPresent for a tag or a digest."""
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def qos_class(spec: Obj) -> str:
    resources = [
        c.get("resources") or {}
        for field in ("initContainers", "containers")
        for c in spec.get(field) or []
        if isinstance(c, dict)
    ]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k)
        and (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k)) == (r.get("limits") or {}).get(k)
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def apply_defaults(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Default ``obj`` in place (idempotent: defaulting an already defaulted object changes nothing)."""
    if rt is PODS:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            default_pod_spec(spec)
    elif rt is PVCS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
    elif rt is NAMESPACES:
        meta = obj.setdefault("metadata", {})
        if meta.get("name"):
            # The namespace strategy sets it on create and update, overriding whatever the client sent.
            meta["labels"] = dict(meta.get("labels") or {}, **{NAMESPACE_NAME_LABEL: meta["name"]})
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("finalizers", ["kubernetes"])
    elif rt is SERVICES:
        _service(obj)
    elif rt is NETWORK_POLICIES:
        _network_policy(obj)
    elif rt.kind in _BY_KIND and rt.group in ("apps", "batch"):
        _BY_KIND[rt.kind](obj)


def initial_status(rt: ResourceType, obj: Obj) -> None:
    """The status the registry gives a new pod or PVC (PrepareForCreate): whatever the client sent is
    replaced; controllers fill in the rest."""
    if rt is PODS:
        spec = obj.get("spec")
        status: Obj = {"phase": "Pending"}
        if isinstance(spec, dict):
            status["qosClass"] = qos_class(spec)
        obj["status"] = status
    elif rt is PVCS:
        obj["status"] = {"phase": "Pending"}


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec, SetDefaults_Pod and the per-container, port, probe and volume defaults."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    if spec.get("serviceAccountName"):
        # v1 mirrors the deprecated field from the current one when it converts a pod.
        spec["serviceAccount"] = spec["serviceAccountName"]
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        if isinstance(containers, list):
            spec[field] = [_container_defaults(c) if isinstance(c, dict) else c for c in containers]
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        spec["volumes"] = [_volume_defaults(v) if isinstance(v, dict) else v for v in volumes]


def _container_defaults(container: Obj) -> Obj:
    out = dict(container)
    out.setdefault("terminationMessagePath", "/dev/termination-log")
    out.setdefault("terminationMessagePolicy", "File")
    resources = out.get("resources")
    if not isinstance(resources, dict):
        resources = {}
    limits = resources.get("limits")
    if isinstance(limits, dict) and limits:
        # SetDefaults_Pod: a limit without a request requests the limit.
        requests = dict(resources.get("requests") or {})
        for name, value in limits.items():
            requests.setdefault(name, value)
        resources = dict(resources, requests=requests)
    out["resources"] = resources
    if isinstance(out.get("image"), str):
        out.setdefault("imagePullPolicy", _pull_policy(out["image"]))
    ports = out.get("ports")
    if isinstance(ports, list):
        out["ports"] = [
            dict(p, protocol=p.get("protocol") or "TCP") if isinstance(p, dict) else p for p in ports
        ]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(out.get(probe), dict):
            out[probe] = _probe_defaults(out[probe])
    env = out.get("env")
    if isinstance(env, list):
        out["env"] = [_env_defaults(e) if isinstance(e, dict) else e for e in env]
    return out


def _probe_defaults(probe: Obj) -> Obj:
    out = dict(probe)
    out.setdefault("timeoutSeconds", 1)
    out.setdefault("periodSeconds", 10)
    out.setdefault("successThreshold", 1)
    out.setdefault("failureThreshold", 3)
    if isinstance(out.get("httpGet"), dict):
        http = dict(out["httpGet"])
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")
        out["httpGet"] = http
    return out


def _env_defaults(env: Obj) -> Obj:
    field_ref = (env.get("valueFrom") or {}).get("fieldRef")
    if isinstance(field_ref, dict) and "apiVersion" not in field_ref:
        return dict(env, valueFrom=dict(env["valueFrom"], fieldRef=dict(field_ref, apiVersion="v1")))
    return env


_MODE_SOURCES = ("secret", "configMap", "projected", "downwardAPI")
_VOLUME_SOURCES = (
    "emptyDir",
    "hostPath",
    "secret",
    "configMap",
    "projected",
    "downwardAPI",
    "persistentVolumeClaim",
    "nfs",
    "csi",
    "ephemeral",
)


def _volume_defaults(volume: Obj) -> Obj:
    out = dict(volume)
    if not any(source in out for source in _VOLUME_SOURCES) and len(out) == 1:
        out["emptyDir"] = {}  # SetDefaults_Volume: a volume with no source is an emptyDir
    for source in _MODE_SOURCES:
        if isinstance(out.get(source), dict) and "defaultMode" not in out[source]:
            out[source] = dict(out[source], defaultMode=_FILE_MODE)
    if isinstance(out.get("hostPath"), dict):
        out["hostPath"] = dict(out["hostPath"], type=out["hostPath"].get("type", ""))
    return out


def _template_defaults(spec: Obj) -> None:
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"])


def _deployment(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template_defaults(spec)


def _job(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    _template_defaults(spec)


def _service(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("internalTrafficPolicy", "Cluster")
    ports = spec.get("ports")
    if isinstance(ports, list):
        spec["ports"] = [
            dict(p, protocol=p.get("protocol") or "TCP", targetPort=p.get("targetPort", p.get("port")))
            if isinstance(p, dict)
            else p
            for p in ports
        ]


def _network_policy(obj: Obj) -> None:
    """SetDefaults_NetworkPolicy: policyTypes is Ingress, plus Egress when there are egress rules; a
    port's protocol is TCP."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("podSelector", {})
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or []:
            for port in (rule.get("ports") or []) if isinstance(rule, dict) else []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _replica_set(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _template_defaults(spec)


def _stateful_set(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    _template_defaults(spec)


_BY_KIND = {
    "Deployment": _deployment,
    "Job": _job,
    "ReplicaSet": _replica_set,
    "StatefulSet": _stateful_set,
}


def generated_selector(rt: ResourceType, obj: Obj) -> None:
    """The Job strategy's PrepareForCreate once the uid is known: unless ``spec.manualSelector``, the
    selector is ``batch.kubernetes.io/controller-uid`` and the template carries the controller-uid and
    job-name labels (both the ``batch.kubernetes.io/`` and the legacy unprefixed ones)."""
    if rt.kind != "Job" or rt.group != "batch":
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    meta = obj["metadata"]
    uid, name = meta["uid"], meta.get("name", "")
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = dict(
            tmeta.get("labels") or {},
            **{
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            },
        )
