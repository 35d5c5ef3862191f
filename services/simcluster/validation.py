"""422 Invalid checks as kube-apiserver words them: object names (RFC 1123 subdomain, namespaces an RFC
1123 label), label keys and values, annotation size, container names, volume mounts naming a volume,
requests not above limits, the pod and CloneSet basics, and pod spec immutability. Messages follow
`k8s.io/apimachinery/pkg/util/validation` and `pkg/apis/core/validation`.

Pod spec immutability is Kubernetes' rule: after creation only container/initContainer `image`,
`activeDeadlineSeconds` and added tolerations may change. With ``extended_inplace`` (the second seed's
customised kubelet) container `env`, `envFrom`, `volumeMounts`, pod `volumes` and probes may change too.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from fractions import Fraction
from typing import Any

from services.model.labels import SelectorError, matches, validate_selector

from .errors import ApiError, invalid
from .resources import CLONESETS, NAMESPACES, NETWORK_POLICIES, PODS, ResourceType

_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT = _DNS_LABEL_FMT + "(\\." + _DNS_LABEL_FMT + ")*"
_DNS_SUBDOMAIN = re.compile(f"^{_DNS_SUBDOMAIN_FMT}$")
_DNS_LABEL = re.compile(f"^{_DNS_LABEL_FMT}$")
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(f"^{_QUALIFIED_NAME_FMT}$")
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{_DNS_SUBDOMAIN_FMT}')"
)
_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    f"'{_DNS_LABEL_FMT}')"
)
_NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    f"'{_QUALIFIED_NAME_FMT}')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    f"regex used for validation is '{_LABEL_VALUE_FMT}')"
)
_ANNOTATIONS_LIMIT = 256 * 1024  # total bytes of keys and values
_POD_STABLE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`, "
    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
    "(only additions to existing tolerations)"
)
_EXTENDED_CONTAINER_FIELDS = (
    "env",
    "envFrom",
    "volumeMounts",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
)

Cause = tuple[str, str, str]


def _quote(value: Any) -> str:
    """A value as Go's %q / field.Invalid prints it."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def _bad(field: str, value: Any, detail: str) -> Cause:
    return (field, "FieldValueInvalid", f"Invalid value: {_quote(value)}: {detail}")


def name_causes(rt: ResourceType, name: str) -> list[Cause]:
    """metadata.name: a namespace is an RFC 1123 label, every other kind served an RFC 1123 subdomain."""
    if not name:
        return [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")]
    if rt is NAMESPACES:
        return dns_label_causes("metadata.name", name)
    causes = []
    if len(name) > 253:
        causes.append(_bad("metadata.name", name, "must be no more than 253 characters"))
    if not _DNS_SUBDOMAIN.match(name):
        causes.append(_bad("metadata.name", name, _SUBDOMAIN_MESSAGE))
    return causes


def dns_label_causes(field: str, value: str) -> list[Cause]:
    causes = []
    if len(value) > 63:
        causes.append(_bad(field, value, "must be no more than 63 characters"))
    if not _DNS_LABEL.match(value):
        causes.append(_bad(field, value, _LABEL_MESSAGE))
    return causes


@functools.lru_cache(maxsize=4096)  # label and annotation keys repeat across objects
def qualified_name_problems(key: str) -> tuple[str, ...]:
    """IsQualifiedName: an optional DNS-subdomain prefix and '/', then a name part of at most 63."""
    problems = []
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        problems.append("prefix part must be non-empty")
    elif slash:
        if len(prefix) > 253:
            problems.append("prefix part must be no more than 253 characters")
        if not _DNS_SUBDOMAIN.match(prefix):
            problems.append(f"prefix part {_SUBDOMAIN_MESSAGE}")
    if prefix.count("/") > 0:
        problems = [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
            f"for validation is '{_QUALIFIED_NAME_FMT}') with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
        return tuple(problems)
    if not name:
        problems.append("name part must be non-empty")
    else:
        if len(name) > 63:
            problems.append("name part must be no more than 63 characters")
        if not _QUALIFIED_NAME.match(name):
            problems.append(_NAME_PART_MESSAGE)
    return tuple(problems)


def label_causes(labels: Any, field: str = "metadata.labels") -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(labels, dict):
        return causes
    for key, value in labels.items():
        causes += [_bad(field, key, problem) for problem in qualified_name_problems(str(key))]
        if isinstance(value, str):
            causes += [_bad(field, value, problem) for problem in label_value_problems(value)]
    return causes


@functools.lru_cache(maxsize=4096)
def label_value_problems(value: str) -> tuple[str, ...]:
    problems = []
    if len(value) > 63:
        problems.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        problems.append(_LABEL_VALUE_MESSAGE)
    return tuple(problems)


def metadata_causes(meta: dict[str, Any]) -> list[Cause]:
    causes = label_causes(meta.get("labels"))
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            causes += [
                _bad("metadata.annotations", key, problem) for problem in qualified_name_problems(str(key))
            ]
        size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
        if size > _ANNOTATIONS_LIMIT:
            causes.append(
                (
                    "metadata.annotations",
                    "FieldValueTooLong",
                    f"Too long: must have at most {_ANNOTATIONS_LIMIT} bytes",
                )
            )
    return causes


def validate_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    causes = name_causes(rt, name) + metadata_causes(meta)
    if rt is PODS:
        causes += _pod_spec_causes(obj.get("spec") or {})
    if rt is CLONESETS:
        causes += _cloneset_causes(obj.get("spec") or {})
    if rt is NETWORK_POLICIES:
        causes += network_policy_causes(obj.get("spec") or {})
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


def validate_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], extended_inplace: bool
) -> None:
    name = (new.get("metadata") or {}).get("name", "")
    causes: list[Cause] = metadata_causes(new.get("metadata") or {})
    if rt is PODS:
        causes += _pod_spec_causes(new.get("spec") or {})
        if not causes:
            causes += _pod_update_causes(old.get("spec") or {}, new.get("spec") or {}, extended_inplace)
    if rt is CLONESETS:
        causes += _cloneset_causes(new.get("spec") or {})
        old_selector = (old.get("spec") or {}).get("selector")
        if old_selector != (new.get("spec") or {}).get("selector"):
            causes.append(("spec.selector", "FieldValueForbidden", "Forbidden: selector is immutable"))
    if rt is NETWORK_POLICIES:
        causes += network_policy_causes(new.get("spec") or {})
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


_SUFFIXES = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]i?|)$")


def parse_quantity(value: Any) -> Fraction | None:
    """A resource.Quantity's value (``500m``, ``1Gi``, ``2``, ``1e3``), or None when it is not one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Fraction(value)
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    try:
        number = Fraction(match.group(1))
    except ValueError:
        return None
    suffix = match.group(2)
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    if suffix == "n":
        return number * Fraction(1, 10**9)
    if suffix == "u":
        return number * Fraction(1, 10**6)
    scale = _SUFFIXES.get(suffix)
    return None if scale is None else number * scale


def _resource_causes(where: str, resources: Any) -> list[Cause]:
    """Quantities must parse, and a request may not exceed the limit of the same resource."""
    if not isinstance(resources, dict):
        return []
    causes: list[Cause] = []
    parsed: dict[str, dict[str, Fraction]] = {"limits": {}, "requests": {}}
    for part in ("limits", "requests"):
        for resource, value in (resources.get(part) or {}).items():
            quantity = parse_quantity(value)
            if quantity is None:
                causes.append(
                    _bad(
                        f"{where}.resources.{part}[{resource}]",
                        value,
                        "quantities must match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                )
            else:
                parsed[part][resource] = quantity
    for resource, request in parsed["requests"].items():
        limit = parsed["limits"].get(resource)
        if limit is not None and request > limit:
            causes.append(
                _bad(
                    f"{where}.resources.requests",
                    resources["requests"][resource],
                    f"must be less than or equal to {resource} limit of {resources['limits'][resource]}",
                )
            )
    return causes


def _pod_spec_causes(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [("spec.containers", "FieldValueRequired", "Required value")]
    volumes = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)}
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            where = f"spec.{field}[{i}]"
            if not isinstance(container, dict):
                causes.append((where, "FieldValueInvalid", "Invalid value: must be an object"))
                continue
            cname = container.get("name")
            if not cname:
                causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
            elif cname in seen:
                causes.append((f"{where}.name", "FieldValueDuplicate", f"Duplicate value: {_quote(cname)}"))
            else:
                seen.add(cname)
                causes += dns_label_causes(f"{where}.name", str(cname))
            if not container.get("image"):
                causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
            causes += _resource_causes(where, container.get("resources"))
            for j, mount in enumerate(container.get("volumeMounts") or []):
                mount_name = mount.get("name") if isinstance(mount, dict) else None
                if mount_name not in volumes:
                    causes.append(
                        (
                            f"{where}.volumeMounts[{j}].name",
                            "FieldValueNotFound",
                            f"Not found: {_quote(mount_name)}",
                        )
                    )
    return causes


def pod_spec_causes(spec: dict[str, Any]) -> list[Cause]:
    """What a pod spec is refused for on any write (``validatePodMetadataAndSpec``'s part here)."""
    return _pod_spec_causes(spec)


def _pod_update_causes(old: dict[str, Any], new: dict[str, Any], extended: bool) -> list[Cause]:
    def masked(spec: dict[str, Any]) -> dict[str, Any]:
        out = dict(spec)
        out.pop("activeDeadlineSeconds", None)
        out.pop("tolerations", None)
        for field in ("containers", "initContainers"):
            items = []
            for container in spec.get(field) or []:
                c = {k: v for k, v in container.items() if k != "image"}
                if extended:
                    for extra in _EXTENDED_CONTAINER_FIELDS:
                        c.pop(extra, None)
                items.append(c)
            out[field] = items
        if extended:
            out.pop("volumes", None)
        return out

    if masked(old) != masked(new):
        return [("spec", "FieldValueForbidden", f"Forbidden: {_POD_STABLE_MESSAGE}")]
    old_tolerations = old.get("tolerations") or []
    new_tolerations = new.get("tolerations") or []
    if any(t not in new_tolerations for t in old_tolerations):
        return [
            ("spec.tolerations", "FieldValueForbidden", "Forbidden: existing toleration can not be modified")
        ]
    return []


def _cloneset_causes(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    selector = spec.get("selector")
    if not selector:
        causes.append(("spec.selector", "FieldValueRequired", "Required value"))
    else:
        try:
            validate_selector(selector)
        except SelectorError as exc:
            causes.append((exc.field, "FieldValueInvalid", exc.reason))
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        causes.append(("spec.replicas", "FieldValueInvalid", "must be greater than or equal to 0"))
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if selector and not causes and not matches(selector, template_labels):
        causes.append(
            (
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                "`selector` does not match template `labels`",
            )
        )
    return causes


def _selector_causes(selector: Any, field: str) -> list[Cause]:
    try:
        validate_selector(selector, field)
    except SelectorError as exc:
        return [(exc.field, "FieldValueInvalid", exc.reason)]
    return []


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> Cause:
    choices = ", ".join(_quote(s) for s in supported)
    return (
        field,
        "FieldValueNotSupported",
        f"Unsupported value: {_quote(value)}: supported values: {choices}",
    )


def _network_cidr(
    field: str, value: Any
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network | None, list[Cause]]:
    if not value:
        return None, [(field, "FieldValueRequired", "Required value")]
    try:
        return ipaddress.ip_network(str(value), strict=False), []
    except ValueError:
        return None, [_bad(field, value, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")]


def _peer_causes(peer: Any, field: str) -> list[Cause]:
    """A peer is pods and/or namespaces by selector, or an ipBlock alone (ValidateNetworkPolicyPeer)."""
    if not isinstance(peer, dict):
        return [_bad(field, peer, "must be an object")]
    causes: list[Cause] = []
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            causes += _selector_causes(peer[key], f"{field}.{key}")
    block = peer.get("ipBlock")
    if block is not None:
        block = block if isinstance(block, dict) else {}
        cidr, problems = _network_cidr(f"{field}.ipBlock.cidr", block.get("cidr"))
        causes += problems
        for i, text in enumerate(block.get("except") or []):
            where = f"{field}.ipBlock.except[{i}]"
            excluded, problems = _network_cidr(where, text)
            causes += problems
            if (
                cidr is not None
                and excluded is not None
                and not (
                    excluded.version == cidr.version and excluded.subnet_of(cidr) and excluded != cidr  # type: ignore[arg-type]
                )
            ):
                causes.append(_bad(where, text, "must be a strict subset of `cidr`"))
    present = sum(peer.get(k) is not None for k in ("podSelector", "namespaceSelector", "ipBlock"))
    if present == 0:
        causes.append((field, "FieldValueRequired", "Required value: must specify a peer"))
    elif present > 1 and block is not None:
        causes.append(
            (field, "FieldValueForbidden", "Forbidden: may not specify both ipBlock and another peer")
        )
    return causes


def _port_causes(port: Any, field: str) -> list[Cause]:
    if not isinstance(port, dict):
        return [_bad(field, port, "must be an object")]
    causes: list[Cause] = []
    protocol = port.get("protocol", "TCP")
    if protocol not in ("TCP", "UDP", "SCTP"):
        causes.append(_unsupported(f"{field}.protocol", protocol, ("SCTP", "TCP", "UDP")))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int) and not 1 <= number <= 65535:
        causes.append(_bad(f"{field}.port", number, "must be between 1 and 65535, inclusive"))
    elif isinstance(number, str) and not re.fullmatch(
        r"(?=.*[a-z])[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?", number
    ):
        causes.append(_bad(f"{field}.port", number, "must be a valid port name (IANA_SVC_NAME)"))
    if end is not None:
        if not isinstance(number, int):
            causes.append(
                (
                    f"{field}.endPort",
                    "FieldValueRequired",
                    "Required value: may not be specified when `port` is not a number",
                )
            )  # noqa: E501
        elif not isinstance(end, int) or end < number:
            causes.append(_bad(f"{field}.endPort", end, "must be greater than or equal to `port`"))
    return causes


def network_policy_causes(spec: dict[str, Any]) -> list[Cause]:
    """networking.k8s.io/v1 NetworkPolicy as ValidateNetworkPolicySpec words it: the pod selector, each
    rule's ports and peers, and the policy types."""
    causes = _selector_causes(spec.get("podSelector"), "spec.podSelector")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            where = f"spec.{direction}[{i}]"
            rule = rule if isinstance(rule, dict) else {}
            for j, port in enumerate(rule.get("ports") or []):
                causes += _port_causes(port, f"{where}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers) or []):
                causes += _peer_causes(peer, f"{where}.{peers}[{j}]")
    types = spec.get("policyTypes") or []
    for i, kind in enumerate(types):
        if kind not in ("Ingress", "Egress"):
            causes.append(_unsupported(f"spec.policyTypes[{i}]", kind, ("Egress", "Ingress")))
    if len(types) > 2:
        causes.append(_bad("spec.policyTypes", types, "may not specify more than two policyTypes"))
    return causes


def ensure_kind(rt: ResourceType, obj: dict[str, Any]) -> None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind and kind != rt.kind:
        raise ApiError(400, f"the kind of the object ({kind}) does not match the endpoint ({rt.kind})")
    if api_version and api_version != rt.api_version:
        raise ApiError(
            400, f"the API version in the data ({api_version}) does not match the endpoint ({rt.api_version})"
        )
