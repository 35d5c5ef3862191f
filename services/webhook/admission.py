"""AdmissionReview v1 in, AdmissionReview v1 out: the webhook's decisions as pure functions.

The HTTP server and ``rollbook inject`` both go through ``review_pod`` so that what the CLI prints is
exactly what the cluster admits.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.model import sidecarset as ss
from services.model.cloneset_conversion import ConversionError, as_v1alpha1
from services.model.cloneset_validation import Invalid, field_error, validate
from services.model.management import Selection

REVIEW_API_VERSION = "admission.k8s.io/v1"
ALL = Selection()  # every SidecarSet: rollbook alone on the cluster, `rollbook inject`


class ReviewError(ValueError):
    """The AdmissionReview itself is malformed (answered with HTTP 400)."""


@dataclass(frozen=True)
class PodAdmission:
    response: dict[str, Any]  # the AdmissionResponse
    pod: dict[str, Any]  # the pod as admitted (after the patch)
    patch: list[dict[str, Any]]
    records: list[ss.InjectionRecord] = field(default_factory=list)
    dry_run: bool = False


def request_of(review: Any) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview v1, checked enough to answer it."""
    if not isinstance(review, Mapping):
        raise ReviewError("body must be a JSON AdmissionReview object")
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected kind AdmissionReview, apiVersion {REVIEW_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("request.uid is required")
    return dict(request)


def review_envelope(response: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": dict(response)}


def _response(uid: str, *, allowed: bool = True, message: str = "", code: int = 0) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if message or code:
        response["status"] = {"message": message, "code": code or (200 if allowed else 403)}
        if not allowed:
            response["status"]["reason"] = {422: "Invalid", 500: "InternalError"}.get(code, "Forbidden")
    return response


def refuse_pod(uid: str, reason: str) -> dict[str, Any]:
    """The answer refusing a pod the webhook cannot inject as asked (code 500, as OpenKruise answers)."""
    return _response(uid, allowed=False, code=500, message=f"sidecar injection: {reason}")


def _pod_create(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod of a pod CREATE review (the only one injected), else None."""
    pod = request.get("object")
    resource = (request.get("resource") or {}).get("resource", "pods")
    if (
        request.get("operation", "CREATE") != "CREATE"
        or resource != "pods"
        or request.get("subResource")
        or not isinstance(pod, Mapping)
    ):
        return None
    return pod


def pinned_sidecarsets(
    request: Mapping[str, Any],
    sidecarsets: Iterable[ss.SidecarSet],
    *,
    excluded_namespaces: frozenset[str] = ss.DEFAULT_EXCLUDED_NAMESPACES,
    namespace_labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Names of the SidecarSets injecting into this review's pod that pin a recorded revision
    (``injectionStrategy.revision``): their revisions must be read before ``review_pod``."""
    pod = _pod_create(request)
    pinning = [s for s in sidecarsets if ss.pinned_revision(s) is not None]
    if pod is None or not pinning:  # the common case: no selection pass at all
        return []
    selected = ss.select_sidecarsets(
        pod,
        pinning,
        request.get("namespace") or None,
        namespace_labels=namespace_labels,
        excluded_namespaces=excluded_namespaces,
    )
    return [s.name for s in selected]


# What the webhook does with a pod whose pinning SidecarSet's revisions cannot be read
# (settings.sidecarset_revisions_unavailable).
UNAVAILABLE_SKIP, UNAVAILABLE_LATEST, UNAVAILABLE_REFUSE = "skip", "latest", "refuse"
UNAVAILABLE_CHOICES = (UNAVAILABLE_SKIP, UNAVAILABLE_LATEST, UNAVAILABLE_REFUSE)


def unavailable_pins(
    sidecarsets: Iterable[ss.SidecarSet],
    revisions: Mapping[str, Sequence[Mapping[str, Any]]],
    failed: Mapping[str, str],
) -> dict[str, str]:
    """Per pinning SidecarSet whose read failed (``failed``: name -> why), why its pinned revision is not
    known: it was never read, or what was read before does not hold it (it may have been recorded
    since). One whose earlier read holds the pinned revision is not in the result: that is injected."""
    by_name = {s.name: s for s in sidecarsets}
    return {
        name: reason
        for name, reason in failed.items()
        if name in by_name and (name not in revisions or not ss.pin_resolves(by_name[name], revisions[name]))
    }


def unresolved_pins(
    sidecarsets: Iterable[ss.SidecarSet], revisions: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[str]:
    """Names in ``revisions`` whose SidecarSet pins a revision those records do not hold."""
    return [s.name for s in sidecarsets if s.name in revisions and not ss.pin_resolves(s, revisions[s.name])]


def fallback_sidecarsets(
    sidecarsets: Iterable[ss.SidecarSet], unavailable: Iterable[str], action: str
) -> list[ss.SidecarSet]:
    """The SidecarSets to inject when those named in ``unavailable`` cannot inject their pinned revision:
    without them (skip), or with their latest spec (latest)."""
    names = set(unavailable)
    if action == UNAVAILABLE_SKIP:
        return [s for s in sidecarsets if s.name not in names]
    if action == UNAVAILABLE_LATEST:
        return [ss.unpinned(s) if s.name in names else s for s in sidecarsets]
    raise ValueError(f"no fallback for {action!r}: expected one of {', '.join(UNAVAILABLE_CHOICES)}")


def review_pod(
    request: Mapping[str, Any],
    sidecarsets: Iterable[ss.SidecarSet],
    *,
    now: datetime,
    excluded_namespaces: frozenset[str] = ss.DEFAULT_EXCLUDED_NAMESPACES,
    namespace_labels: Mapping[str, str] | None = None,
    revisions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    sort_containers_by_name: bool = False,
) -> PodAdmission:
    """Inject sidecars into a pod being created. Anything else (UPDATE, subresources) passes unchanged.

    A pod that cannot be injected as its SidecarSets ask (``ss.InjectionError``: a pinned revision not
    recorded, a resourcesPolicy with no target container, an expression that fails) is refused with
    code 500 and the reason, as OpenKruise's webhook refuses it.
    """
    uid = str(request["uid"])
    pod = _pod_create(request)
    if pod is None:
        passed = request.get("object")
        return PodAdmission(
            response=_response(uid), pod=dict(passed) if isinstance(passed, Mapping) else {}, patch=[]
        )
    try:
        injected, records = ss.inject(
            pod,
            sidecarsets,
            now=now,
            namespace=request.get("namespace") or None,
            namespace_labels=namespace_labels,
            excluded_namespaces=excluded_namespaces,
            injection_id=uid,
            revisions=revisions,
            sort_containers_by_name=sort_containers_by_name,
        )
    except ss.InjectionError as err:
        return PodAdmission(response=refuse_pod(uid, str(err)), pod=dict(pod), patch=[])
    if not records:
        return PodAdmission(response=_response(uid), pod=injected, patch=[])
    patch = ss.json_patch(pod, injected)
    response = _response(uid)
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    return PodAdmission(
        response=response, pod=injected, patch=patch, records=records, dry_run=bool(request.get("dryRun"))
    )


def review_sidecarset(
    request: Mapping[str, Any], existing: Iterable[ss.SidecarSet], selection: Selection = ALL
) -> dict[str, Any]:
    """Refuse an invalid SidecarSet, or one whose containers clash with another SidecarSet's, as OpenKruise's
    validating webhook refuses it: code 500 (its handler answers a failed validation with
    ``admission.Errored(InternalServerError)``) and its ``field.Error`` wording (``ss.KruiseError``).
    A SidecarSet rollbook does not manage (``selection``) passes untouched: its controller judges it."""
    uid = str(request["uid"])
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return _response(uid)
    obj = request.get("object")
    if isinstance(obj, Mapping) and not selection.manages(obj):
        return _response(uid)
    try:
        candidate = ss.parse_sidecarset(obj or {})
        old = request.get("oldObject")
        if request.get("operation") == "UPDATE" and isinstance(old, Mapping):
            ss.validate_update(ss.parse_sidecarset(old), candidate)
    except ss.SidecarSetError as err:
        return _errored(uid, err.admission_message())
    conflicts = ss.conflict_errors(candidate, existing)
    if conflicts:
        return _errored(uid, ss.aggregate(conflicts))
    return _response(uid)


def _errored(uid: str, message: str) -> dict[str, Any]:
    """controller-runtime's ``admission.Errored(500, err)``: a code and a message, no reason."""
    return {"uid": uid, "allowed": False, "status": {"code": 500, "message": message}}


def cloneset_problem(obj: Any) -> Invalid | None:
    """What the planner would reject in a CloneSet (v1alpha1, or v1beta1 converted as the planner reads it),
    as the shared validation says it (services/model/cloneset_validation.py); None when it can be planned."""
    try:
        planned = as_v1alpha1(obj) if isinstance(obj, dict) else obj
    except ConversionError as error:
        return Invalid(error.field, error.reason)
    return validate(planned)


def review_cloneset(request: Mapping[str, Any], selection: Selection = ALL) -> dict[str, Any]:
    """Refuse, with 422 Invalid and OpenKruise's message and field path, a CloneSet the planner would
    reject, so `kubectl apply` fails instead of the spec being stored and then rejected. A CloneSet rollbook
    does not manage (``selection``) passes untouched: its controller judges it."""
    uid = str(request["uid"])
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return _response(uid)
    if not selection.manages(obj):
        return _response(uid)
    problem = cloneset_problem(dict(obj))
    if problem is None:
        return _response(uid)
    response = _response(uid, allowed=False, code=422, message=field_error(problem))
    name = str((obj.get("metadata") or {}).get("name", ""))
    response["status"]["details"] = {
        "name": name,
        "group": "apps.kruise.io",
        "kind": "CloneSet",
        "causes": [{"reason": "FieldValueInvalid", "message": field_error(problem), "field": problem.field}],
    }
    return response


def mutate_sidecarset(request: Mapping[str, Any], selection: Selection = ALL) -> dict[str, Any]:
    """Write ``kruise.io/sidecarset-hash`` and ``-hash-without-image`` on a SidecarSet, as OpenKruise's
    SidecarSet webhook does, so ``kubectl get sidecarset -o yaml`` shows the revision pods are compared to.
    An invalid SidecarSet passes untouched: refusing it is the validating webhook's job."""
    uid = str(request["uid"])
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return _response(uid)
    if not selection.manages(obj):
        return _response(uid)
    try:
        parsed = ss.parse_sidecarset(obj)
    except ss.SidecarSetError:
        return _response(uid)
    annotations = dict((obj.get("metadata") or {}).get("annotations") or {})
    wanted = {
        ss.HASH_ANNOTATION: parsed.hash,
        ss.HASH_WITHOUT_IMAGE_ANNOTATION: parsed.hash_without_image,
    }
    if all(annotations.get(k) == v for k, v in wanted.items()):
        return _response(uid)
    patched = {
        **dict(obj),
        "metadata": {**dict(obj.get("metadata") or {}), "annotations": {**annotations, **wanted}},
    }
    response = _response(uid)
    response["patchType"] = "JSONPatch"
    patch = ss.json_patch(obj, patched)
    response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    return response


def pod_review_request(
    pod: Mapping[str, Any], *, namespace: str | None = None, uid: str = "", dry_run: bool = True
) -> dict[str, Any]:
    """The AdmissionReview request the API server sends when ``pod`` is created (`rollbook inject`)."""
    ns = ss.pod_namespace(pod, namespace)
    return {
        "uid": uid,  # empty: no injection-id annotation (no real admission happened)
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": ns,
        "name": (pod.get("metadata") or {}).get("name", ""),
        "operation": "CREATE",
        "object": dict(pod),
        "dryRun": dry_run,
    }
