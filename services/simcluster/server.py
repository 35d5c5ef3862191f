"""The HTTP side: the Kubernetes REST API (discovery, CRUD, status subresource, patch, watch) over aiohttp."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from services.model.json_copy import json_copy
from services.model.jsondepth import depth_over

from . import errors, event_versions, managed_fields, openapi, patch, rbac, resources
from .admission import Admission
from .auth import Auth, subject_access_review_status, token_review_status
from .controllers.base import utc_now
from .controllers.disruption import evict, matching_pods_budgets
from .conversion import VersionView
from .defaults import apply_defaults
from .errors import ApiError
from .faults import Faults
from .plugins import admit_pod, check_namespace
from .resources import NAMESPACES, PDBS, PODS, SERVICE_ACCOUNTS, ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .store import Store, Watcher, WatchEvent
from .tables import PLAIN, Rendering, negotiate, partial, partial_list, to_table
from .validation import ensure_kind

Obj = dict[str, Any]
RESIZE_SUBRESOURCE = "pods/resize"

SERVER_VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-simcluster",
    "gitCommit": "simcluster",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# kube-apiserver's JSON decoder takes objects nested up to this depth (and stores them where a schema
# preserves unknown fields); a deeper body is a 400.
MAX_JSON_DEPTH = 10_000
# Python's recursion limit while simcluster runs: what decoding, copying, patching and encoding an
# object MAX_JSON_DEPTH deep (twice that after a patch nests one into another) needs, with room.
RECURSION_LIMIT = 3 * MAX_JSON_DEPTH


def allow_deep_json() -> None:
    """Let this process handle objects as deep as kube-apiserver stores (msgspec, json and copy all
    recurse once per level, up to Python's recursion limit: 1,000 by default)."""
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)


# The review APIs: (group, version, path) -> (plural, kind).
_REVIEWS: dict[tuple[str, str, tuple[str, ...]], tuple[str, str]] = {
    ("authentication.k8s.io", "v1", ("tokenreviews",)): ("tokenreviews", "TokenReview"),
    ("authorization.k8s.io", "v1", ("subjectaccessreviews",)): (
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
}
# How often a PATCH is re-applied when another write lands between its read and its write (the API
# server's own bound for patches that carry no resourceVersion).
PATCH_ATTEMPTS_ON_CONFLICT = 5
USER_KEY = web.RequestKey("user", rbac.User)  # the authenticated user, when auth is on


def _resource_version(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


def _path_get(obj: Obj, path: str) -> Any:
    """The value at a CRD scale path such as ``.spec.replicas``."""
    value: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _path_set(obj: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    target = obj
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value


def _error_response(exc: ApiError) -> web.Response:
    response = _json(exc.status(), exc.code)
    if exc.code == 429:
        response.headers["Retry-After"] = "1"
    return response


class ApiServer:
    def __init__(
        self,
        store: Store,
        admission: Admission,
        faults: Faults,
        *,
        bookmark_interval: float = 5.0,
        default_watch_timeout: float = 1800.0,
        disabled_resources: tuple[str, ...] = (),
        auth: Auth | None = None,
    ) -> None:
        self.auth = auth
        # (namespace, pod, container) -> the log of a container run as a process, None for simulated ones
        self.process_logs: Callable[[str, str, str], str | None] | None = None
        allow_deep_json()
        # Resources this server does not serve (a cluster without a CRD): 404 and absent from discovery.
        # ``pods/resize`` is served unless disabled (a cluster before Kubernetes 1.33, or with the
        # InPlacePodVerticalScaling gate off): 404 there and absent from discovery.
        self.resize_served = RESIZE_SUBRESOURCE not in disabled_resources
        self.served = resources.served(tuple(d for d in disabled_resources if d != RESIZE_SUBRESOURCE))
        self._by_path = {r.key: r for r in self.served}
        # Served versions that are not their CRD's storage version: converted on every read and write.
        self.views: dict[ResourceType, VersionView] = {}
        if resources.EVENTS in self.served:  # events.k8s.io/v1: a view of the core/v1 Events stored
            self.serve(event_versions.EVENTS_V1, VersionView(resources.EVENTS, event_versions.convert))
        self.store = store
        self.admission = admission
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    def serve(self, rt: ResourceType, view: VersionView | None = None) -> None:
        """Serve a resource defined at run time (a CRD established); ``view`` when its objects are stored
        at another version."""
        if rt not in self.served:
            self.served = (*self.served, rt)
        self._by_path[rt.key] = rt
        if view is None:
            self.views.pop(rt, None)
        else:
            self.views[rt] = view

    def stop_serving(self, rt: ResourceType) -> None:
        self.served = tuple(r for r in self.served if r is not rt)
        self.views.pop(rt, None)
        if self._by_path.get(rt.key) is rt:
            del self._by_path[rt.key]

    # ---- versions: objects of a view are stored at its CRD's storage version ----------------------

    def _stored(self, rt: ResourceType) -> ResourceType:
        view = self.views.get(rt)
        return view.storage if view is not None else rt

    async def _out(self, rt: ResourceType, objs: list[Obj]) -> list[Obj]:
        """Stored objects as the version asked for."""
        view = self.views.get(rt)
        return objs if view is None or not objs else await view.convert(objs, rt.api_version)

    async def _one_out(self, rt: ResourceType, obj: Obj) -> Obj:
        return (await self._out(rt, [obj]))[0]

    async def _in(self, rt: ResourceType, obj: Obj, old: Obj | None, sub: str | None) -> Obj:
        """A write at ``rt``, checked against that version's schema, as the storage version."""
        view = self.views.get(rt)
        if view is None:
            return obj
        checked = self.store.check(rt, obj, old, subresource=sub)
        return (await view.convert([checked], view.storage.api_version))[0]

    # ---- plumbing ----------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        delay = self.faults.latency()
        if delay > 0:
            await asyncio.sleep(delay)
        if self.auth is not None:
            try:
                request[USER_KEY] = self.auth.authenticate(request.headers.get("Authorization", ""))
                if not request.path.startswith(("/api/", "/apis/")):
                    # Non-resource paths; resource requests (and their discovery) are checked once routed.
                    self.auth.authorize(request[USER_KEY], rbac.Request("get", path=request.path))
            except ApiError as exc:
                return _error_response(exc)
        write = request.method in _WRITE_METHODS and request.path.startswith(("/api/", "/apis/"))
        if write:
            code = self.faults.write_error(request.path)
            if code is not None:
                injected = _error_response(ApiError(code, f"simcluster: injected fault ({code})"))
                if code == 429:  # the Retry-After the fault configuration asks for
                    injected.headers["Retry-After"] = str(self.faults.config.retry_after_seconds)
                return injected
        try:
            response = await handler(request)
        except ApiError as exc:
            return _error_response(exc)
        except RecursionError:
            # Whatever part of a request nests too deep to handle is the client's input, never a 500.
            return _error_response(ApiError(400, "the request nests too deep to be handled", "BadRequest"))
        if write and response.status < 300:
            lost = self.faults.lost_response(request.path)
            if lost is not None:
                return self._lose_response(request, lost)
        return response

    @staticmethod
    def _lose_response(request: web.Request, mode: str) -> web.Response:
        """The write is committed; the client learns nothing reliable about it."""
        if mode == "reset":
            if request.transport is not None:
                request.transport.abort()  # connection cut: the client sees it close with no answer
            return web.Response(status=500)
        if mode == "timeout":
            return _error_response(
                ApiError(
                    504,
                    "Timeout: request did not complete within requested timeout - context deadline exceeded",
                    "Timeout",
                )
            )
        return _error_response(ApiError(500, "simcluster: injected fault after the write (500)"))

    def cut_watches(self) -> None:
        """End every open watch stream now, as a dropped connection would."""
        for watcher in list(self.store.watchers):
            watcher.queue.put_nowait(None)  # type: ignore[arg-type]

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json(
                {"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz", "/openapi/v2", "/openapi/v3"]}
            )
        head = parts[0]
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if head == "version":
            return _json(SERVER_VERSION)
        if head == "openapi" and parts[1:] == ["v2"]:
            # An empty OpenAPI v2 protobuf document: clients (kubectl) then skip schema validation for every
            # kind, which is what they do for kinds a real server publishes no schema for.
            return web.Response(
                body=b"", content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
            )
        if head == "openapi" and parts[1:2] == ["v3"]:
            return self._openapi_v3("/".join(parts[2:]))
        if head == "api":
            if len(parts) == 1:
                return _json(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                        ],
                    }
                )
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return _json(self._group_list())
            if len(parts) == 2:
                return self._group(parts[1])
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        if not rest:
            return self._resource_list(group, version)
        review = _REVIEWS.get((group, version, tuple(rest)))
        if review is not None:
            return await self._review(request, group, *review)
        return await self._resource_request(request, group, version, rest)

    async def _review(self, request: web.Request, group: str, plural: str, kind: str) -> web.Response:
        """TokenReview and SubjectAccessReview: created, answered with a status, never stored. Creating
        one needs RBAC's ``create`` on it (the ``system:auth-delegator`` ClusterRole grants both)."""
        if request.method != "POST":
            raise errors.ApiError(405, f"{request.method} is not supported on {plural}", "MethodNotAllowed")
        if self.auth is not None:
            self.auth.authorize(request[USER_KEY], rbac.Request("create", group, plural))
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.ApiError(400, "the request body must be an object")
        if body.get("kind") not in (None, kind):
            raise errors.ApiError(400, f"the request body must be a {kind}, not {body.get('kind')!r}")
        answer = token_review_status if plural == "tokenreviews" else subject_access_review_status
        status = answer(self.auth, body)
        return _json({**body, "apiVersion": f"{group}/v1", "kind": kind, "status": status}, 201)

    # ---- discovery ---------------------------------------------------------------------------------

    def _openapi_v3(self, path: str) -> web.Response:
        """The OpenAPI v3 index (``path`` empty) or one group version's document (services/simcluster/
        openapi.py): the schemas of the custom resources served now."""
        docs = openapi.documents(self._served_schemas(), SERVER_VERSION["gitVersion"])
        if not path:
            return _json(openapi.discovery(docs))
        if path not in docs:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        return _json(docs[path])

    def _served_schemas(self) -> list[tuple[str, str, str, str, bool, Any]]:
        """Every custom resource served with its schema: a stored CRD's, else for simcluster's own
        CloneSets and SidecarSets the schema of rollbook's CRD for them (kruise_crds.py)."""
        from .kruise_crds import cloneset_crd, sidecarset_crd

        defined = openapi.crd_schemas(self.store.objects.get(resources.CRDS, {}).values())
        own = openapi.crd_schemas([cloneset_crd(), sidecarset_crd()])
        served = []
        for rt in self.served:
            key = (rt.group, rt.version, rt.kind)
            schema = (defined.get(key) or own.get(key)) if rt.custom else defined.get(key)
            if schema is not None:
                served.append((rt.group, rt.version, rt.kind, rt.plural, rt.namespaced, schema))
        return served

    def _group_entry(self, group: str, versions: list[str]) -> Obj:
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    def _group_list(self) -> Obj:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group_entry(g, vs) for g, vs in resources.groups(self.served).items()],
        }

    def _group(self, group: str) -> web.Response:
        versions = resources.groups(self.served).get(group)
        if not versions:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        return _json({"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(group, versions)})

    def _resource_list(self, group: str, version: str) -> web.Response:
        served = [r for r in self.served if r.group == group and r.version == version]
        if not served:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        entries: list[Obj] = []
        for r in served:
            entries.append(
                {
                    "name": r.plural,
                    "singularName": r.singular or r.kind.lower(),
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": list(r.verbs),
                    "shortNames": list(r.short_names),
                    "categories": list(r.categories),
                }
            )
            if r.scale is not None:
                entries.append(
                    {
                        "name": f"{r.plural}/scale",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "group": "autoscaling",
                        "version": "v1",
                        "kind": "Scale",
                        "verbs": ["get", "patch", "update"],
                    }
                )
            if r is PODS:
                # What kubectl drain looks for to evict rather than delete.
                entries.append(
                    {
                        "name": "pods/eviction",
                        "singularName": "",
                        "namespaced": True,
                        "group": "policy",
                        "version": "v1",
                        "kind": "Eviction",
                        "verbs": ["create"],
                    }
                )
            if r is PODS and self.resize_served:
                # How clients discover that the cluster resizes pods in place.
                entries.append(
                    {
                        "name": "pods/resize",
                        "singularName": "",
                        "namespaced": True,
                        "kind": "Pod",
                        "verbs": ["get", "patch", "update"],
                    }
                )
            if r.has_status:
                entries.append(
                    {
                        "name": f"{r.plural}/status",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return _json(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": entries,
            }
        )

    # ---- resources ---------------------------------------------------------------------------------

    def _route(self, group: str, version: str, rest: list[str]) -> tuple[ResourceType, str | None, str, str]:
        """(resource type, namespace or None, name, subresource)."""
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = self._by_path.get((group, version, rest[2]))
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = self._by_path.get((group, version, rest[0]))
        if rt is None or len(rest) > 3:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        allowed = (
            (sub == "status" and rt.has_status)
            or (sub == "scale" and rt.scale is not None)
            or (sub == "log" and rt is PODS)
            or (sub == "eviction" and rt is PODS)
            or (sub == "resize" and rt is PODS and self.resize_served)
        )
        if sub and not allowed:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        return rt, namespace, name, sub

    async def _resource_request(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        rt, namespace, name, sub = self._route(group, version, rest)
        if rt.namespaced and name and namespace is None:
            raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
        if self.auth is not None:
            watching = request.query.get("watch", "").lower() in ("true", "1")
            asked = rbac.Request(
                rbac.verb_of(request.method, bool(name), watching),
                rt.group,
                rt.plural,
                sub,
                namespace or "",
                name,
            )
            self.auth.authorize(request[USER_KEY], asked)
        ns = namespace or ""
        query = request.query
        if query.get("dryRun"):
            raise errors.ApiError(400, "simcluster does not support dryRun")
        method = request.method
        if sub == "scale":
            return await self._scale(request, rt, ns, name)
        if sub == "log" and method == "GET":
            return self._log(rt, ns, name, query.get("container"))
        if sub == "eviction":
            if method != "POST":
                raise errors.ApiError(405, f"{method} is not supported on eviction", "MethodNotAllowed")
            return await self._evict(request, ns, name)
        if method == "GET":
            rendering = self._rendering(request)
            if name:
                obj = await self._one_out(rt, self.store.get(self._stored(rt), ns, name))
                if rendering.kind == "table":
                    meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
                    return _json(to_table(rt, [obj], meta, rendering))
                if rendering.kind == "partial":
                    return _json(partial(obj, rendering.version))
                return _json(obj)
            if query.get("watch", "").lower() in ("true", "1"):
                return await self._watch(request, rt, namespace)
            return await self._list(request, rt, namespace)
        if method == "POST" and not name:
            return await self._create(request, rt, ns)
        if method == "PUT" and name:
            body = await self._body(request)
            if not isinstance(body, dict):
                raise errors.ApiError(400, "the request body must be an object")
            ensure_kind(rt, body)
            old = await self._one_out(rt, self.store.get(self._stored(rt), ns, name))
            if not sub:
                body = await self._admit(rt, "UPDATE", body, old, ns)
            body = await self._in(rt, body, old, sub or None)
            _managed(request, rt, body, old, sub)
            updated = self.store.update(
                self._stored(rt), ns, name, body, subresource=sub or None, require_resource_version=rt.custom
            )
            return _json(await self._one_out(rt, updated))
        if method == "PATCH" and name:
            return await self._patch(request, rt, ns, name, sub)
        if method == "DELETE" and name and not sub:
            options = await self._delete_options(request)
            return _json(await self._one_out(rt, self.store.delete(self._stored(rt), ns, name, **options)))
        if method == "DELETE" and not name:
            return await self._delete_collection(request, rt, namespace)
        raise errors.ApiError(405, f"{method} is not supported here", "MethodNotAllowed")

    async def _scale(self, request: web.Request, rt: ResourceType, ns: str, name: str) -> web.Response:
        """The scale subresource (autoscaling/v1 Scale) over the resource's replicas paths, for `kubectl
        scale` and autoscalers."""
        assert rt.scale is not None
        spec_path, status_path, selector_path = rt.scale

        def as_scale(obj: Obj) -> Obj:
            meta = obj["metadata"]
            replicas = _path_get(obj, spec_path)
            return {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {
                    k: meta[k]
                    for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                    if k in meta
                },
                "spec": {"replicas": replicas if isinstance(replicas, int) else 1},
                "status": {
                    "replicas": _path_get(obj, status_path) or 0,
                    "selector": (_path_get(obj, selector_path) or "") if selector_path else "",
                },
            }

        rt = self._stored(rt)  # the replicas paths are the same at every version of a CRD
        current = self.store.get(rt, ns, name)
        if request.method == "GET":
            return _json(as_scale(current))
        body = await self._body(request)
        if request.method == "PUT":
            wanted = body
        elif request.method == "PATCH":
            wanted = patch.apply_patch(
                request.headers.get("Content-Type", ""), as_scale(current), body, False
            )
        else:
            raise errors.ApiError(405, f"{request.method} is not supported on scale", "MethodNotAllowed")
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid(
                "autoscaling",
                "Scale",
                name,
                [("spec.replicas", "FieldValueInvalid", "must be a non-negative integer")],
            )
        updated = json_copy(current)
        _path_set(updated, spec_path, replicas)
        updated["metadata"]["resourceVersion"] = (wanted.get("metadata") or {}).get("resourceVersion") or ""
        return _json(as_scale(self.store.update(rt, ns, name, updated)))

    async def _evict(self, request: web.Request, ns: str, name: str) -> web.Response:
        """``pods/eviction``: delete the pod unless its PodDisruptionBudget allows no disruption (429), as
        kube-apiserver's eviction REST does; the budget's disruptionsAllowed and disruptedPods are updated
        in the same step as the deletion."""
        body = await self._body(request)
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
            raise errors.ApiError(400, "the request body must be an Eviction")
        if (body.get("metadata") or {}).get("name") not in (None, name):
            raise errors.ApiError(400, f"name in URL does not match name in Eviction object: {name}")
        options = body.get("deleteOptions") or {}
        pod = self.store.get(PODS, ns, name)
        pdbs = matching_pods_budgets(self.store, pod) if PDBS in self.served else []
        decided = evict(pod, pdbs, utc_now())
        if decided is not None:
            pdb = pdbs[0]
            self.store.update(
                PDBS, ns, pdb["metadata"]["name"], dict(pdb, status=decided), subresource="status"
            )
        grace = options.get("gracePeriodSeconds")
        preconditions = options.get("preconditions") or {}
        self.store.delete(
            PODS,
            ns,
            name,
            grace_seconds=int(grace) if grace is not None else None,
            precondition_uid=preconditions.get("uid"),
            precondition_rv=preconditions.get("resourceVersion"),
        )
        return _json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
        )

    def _log(self, rt: ResourceType, ns: str, name: str, container: str | None) -> web.Response:
        """`kubectl logs`: simulated containers print what the kubelet did with them."""
        pod = self.store.get(rt, ns, name)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        if container is None:
            if len(containers) > 1:
                raise errors.ApiError(
                    400,
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(containers)}]",
                )
            container = containers[0]
        statuses = {c["name"]: c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        if container not in containers:
            raise errors.ApiError(400, f"container {container} is not valid for pod {name}")
        logged = self.process_logs(ns, name, container) if self.process_logs is not None else None
        if logged is not None:  # a container run as a process (processes.py): what it printed
            return web.Response(text=logged, content_type="text/plain")
        status = statuses.get(container)
        terminated = ((status or {}).get("state") or {}).get("terminated")
        if terminated is not None:  # a finished container's log stays readable (a Job's pods)
            text = (
                f"{terminated.get('startedAt', '')} simcluster: container {container} ran image "
                f"{(status or {}).get('image')} and exited with code {terminated.get('exitCode', 0)}\n"
            )
            return web.Response(text=text, content_type="text/plain")
        if status is None or "running" not in (status.get("state") or {}):
            reason = ((status or {}).get("state") or {}).get("waiting", {}).get("reason", "ContainerCreating")
            raise errors.ApiError(
                400, f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        started = status["state"]["running"].get("startedAt", "")
        text = (
            f"{started} simcluster: container {container} running image {status.get('image')} "
            f"(restart {status.get('restartCount', 0)})\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        nesting = depth_over(raw, MAX_JSON_DEPTH)
        if nesting is not None:
            raise errors.ApiError(
                400, f"the request body nests {nesting} levels deep, over the {MAX_JSON_DEPTH}-level limit"
            )
        try:
            return msgspec.json.decode(raw) if raw else {}
        except msgspec.DecodeError as exc:
            raise errors.ApiError(400, f"the request body is not valid JSON: {exc}") from exc

    def _predicate(self, request: web.Request, rt: ResourceType) -> Callable[[Obj], bool]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), rt.kind)
        return lambda obj: labels((obj.get("metadata") or {}).get("labels") or {}) and fields(obj)

    async def _list(self, request: web.Request, rt: ResourceType, namespace: str | None) -> web.Response:
        try:
            limit = int(request.query.get("limit") or 0)
        except ValueError as exc:
            raise errors.ApiError(400, "limit must be an integer") from exc
        cont = request.query.get("continue") or None
        items, rv, token, remaining = self.store.list(
            self._stored(rt), namespace, self._predicate(request, rt), limit, cont
        )
        items = await self._out(rt, items)
        meta: Obj = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        rendering = self._rendering(request)
        if rendering.kind == "table":
            return _json(to_table(rt, items, meta, rendering))
        if rendering.kind == "partial":
            return _json(partial_list(items, meta, rendering.version))
        return _json(
            {
                "kind": rt.list_kind or f"{rt.kind}List",
                "apiVersion": rt.api_version,
                "metadata": meta,
                "items": items,
            }
        )

    async def _create(self, request: web.Request, rt: ResourceType, ns: str) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.ApiError(400, "the request body must be an object")
        ensure_kind(rt, body)
        if rt.namespaced:
            body.setdefault("metadata", {}).setdefault("namespace", ns)
        if rt is NAMESPACES:
            body["status"] = {"phase": "Active"}
        body = await self._admit(rt, "CREATE", body, None, ns)
        body = await self._in(rt, body, None, None)
        _managed(request, rt, body, None, "")
        created = self.store.create(self._stored(rt), ns, body, defaulted=True)
        return _json(await self._one_out(rt, created), 201)

    async def admitted_create(self, rt: ResourceType, ns: str, body: Obj) -> Obj:
        """A create by an in-process controller (a ReplicaSet's pod), through defaulting, the admission
        plugins and the webhooks as any client's create."""
        body = await self._admit(rt, "CREATE", body, None, ns)
        return self.store.create(rt, ns, body, defaulted=True)

    async def _admit(self, rt: ResourceType, operation: str, body: Obj, old: Obj | None, ns: str) -> Obj:
        """What kube-apiserver does between decoding a write and storing it: defaulting, the compiled-in
        admission plugins, the mutating webhooks (their result defaulted again), the validating webhooks."""
        apply_defaults(rt, body, old)
        if operation == "CREATE":
            meta = body.get("metadata") or {}
            check_namespace(rt, ns, meta.get("name") or "", lambda n: self.store.find(NAMESPACES, "", n))
        if rt is PODS:
            admit_pod(operation, body, self.store.rng, self._service_account_lookup(), old)
        mutated = await self.admission.mutate(rt, operation, body, old, ns)
        if mutated is not body:
            apply_defaults(rt, mutated, old)  # what a webhook added is defaulted too
        # Object validation (a CRD's schema included) comes before the validating webhooks, as in
        # kube-apiserver's registry: a malformed object is refused with its message, unseen by them. An
        # update is checked against the schema only here: its conflict and immutability checks stay first.
        if operation == "CREATE":
            self.store.check(rt, json_copy(mutated), None)
        else:
            self.store.check_schema(rt, mutated)
        await self.admission.validate(rt, operation, mutated, old, ns)
        return mutated

    def _service_account_lookup(self) -> Callable[[str, str], Obj | None] | None:
        """How the ServiceAccount plugin finds a pod's account; None when ServiceAccounts are not served."""
        if SERVICE_ACCOUNTS not in self.served:
            return None
        return lambda namespace, name: self.store.find(SERVICE_ACCOUNTS, namespace, name)

    async def _patch(
        self, request: web.Request, rt: ResourceType, ns: str, name: str, sub: str
    ) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        body = await self._body(request)
        for attempt in range(1, PATCH_ATTEMPTS_ON_CONFLICT + 1):
            old = await self._one_out(rt, self.store.get(self._stored(rt), ns, name))
            patched = patch.apply_patch(content_type, json_copy(old), body, rt.custom)
            # A patch that names no resourceVersion is applied to whatever is current: the API server
            # re-reads and re-applies it when another writer got in between (admission webhooks and
            # conversion are awaited here, so one can). A patch that names one is a precondition.
            pinned = _resource_version(patched) != _resource_version(old)
            if not sub:
                patched = await self._admit(rt, "UPDATE", patched, old, ns)
            patched = await self._in(rt, patched, old, sub or None)
            _managed(request, rt, patched, old, sub)
            try:
                updated = self.store.update(self._stored(rt), ns, name, patched, subresource=sub or None)
            except ApiError as error:
                if error.code != 409 or pinned or attempt == PATCH_ATTEMPTS_ON_CONFLICT:
                    raise
                continue
            return _json(await self._one_out(rt, updated))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request) if request.can_read_body else {}
        body = body if isinstance(body, dict) else {}
        query = request.query
        grace = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
        preconditions = body.get("preconditions") or {}
        propagation = query.get("propagationPolicy") or body.get("propagationPolicy")
        if propagation is None and body.get("orphanDependents") is True:
            propagation = "Orphan"
        return {
            "propagation": propagation,
            "grace_seconds": int(grace) if grace is not None else None,
            "precondition_uid": preconditions.get("uid"),
            "precondition_rv": preconditions.get("resourceVersion"),
        }

    async def _delete_collection(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.Response:
        options = await self._delete_options(request)
        items, _, _, _ = self.store.list(self._stored(rt), namespace, self._predicate(request, rt))
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            with contextlib.suppress(ApiError):
                deleted.append(
                    self.store.delete(
                        self._stored(rt),
                        meta.get("namespace", ""),
                        meta["name"],
                        propagation=options["propagation"],
                        grace_seconds=options["grace_seconds"],
                    )
                )
        return _json(
            {
                "kind": rt.list_kind or f"{rt.kind}List",
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": await self._out(rt, deleted),
            }
        )

    # ---- watch -------------------------------------------------------------------------------------

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        predicate = self._predicate(request, rt)
        stored = self._stored(rt)
        query = request.query
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or self.default_watch_timeout)
        rv_param = query.get("resourceVersion") or ""
        rendering = self._rendering(request)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        # Reading the starting state and registering the watcher happen in one synchronous step:
        # no write can fall between them.
        initial: list[WatchEvent] = []
        if rv_param in ("", "0"):
            items, _, _, _ = self.store.list(stored, namespace, predicate)
            initial = [WatchEvent(0, "ADDED", stored, obj, None) for obj in items]
        else:
            try:
                since = int(rv_param)
            except ValueError:
                since = -1
            if since < self.store.compacted_rv:
                gone = errors.gone(f"too old resource version: {rv_param} ({self.store.compacted_rv + 1})")
                await response.write(msgspec.json.encode({"type": "ERROR", "object": gone.status()}) + b"\n")
                await response.write_eof()
                return response
            history = self.store.history
            watcher_probe = Watcher(stored, namespace)
            for i in range(self.store.next_event_after(since), len(history)):
                if watcher_probe.wants(history[i]):
                    initial.append(history[i])
        watcher = Watcher(stored, namespace)
        self.store.watchers.add(watcher)
        sent = 0
        cut_after = self.faults.config.watch_cut_after_events
        deadline = time.monotonic() + timeout
        try:
            for event in await self._events_out(rt, initial):
                if cut_after and sent >= cut_after:
                    break
                line = self._event_line(event, predicate, rendering)
                if line:
                    await response.write(line)
                    sent += 1
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (cut_after and sent >= cut_after):
                    break
                try:
                    item = await asyncio.wait_for(
                        watcher.queue.get(),
                        min(remaining, self.bookmark_interval) if bookmarks else remaining,
                    )
                except TimeoutError:
                    if bookmarks and watcher.queue.empty() and time.monotonic() < deadline:
                        mark = {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": rt.kind,
                                "apiVersion": rt.api_version,
                                "metadata": {"resourceVersion": str(self.store.rv)},
                            },
                        }
                        await response.write(msgspec.json.encode(mark) + b"\n")
                    continue
                if item is None:
                    break
                chunk = bytearray()
                batch: list[WatchEvent | None] = [item]
                while not watcher.queue.empty() and len(batch) < 512:
                    batch.append(watcher.queue.get_nowait())
                stop = None in batch
                events = [queued for queued in batch if queued is not None]
                if stop:
                    events = events[: batch.index(None)]
                for queued in await self._events_out(rt, events):
                    line = self._event_line(queued, predicate, rendering)
                    if line:
                        chunk += line
                        sent += 1
                        if cut_after and sent >= cut_after:
                            stop = True
                            break
                if chunk:
                    await response.write(bytes(chunk))
                if stop:
                    break
        except ConnectionResetError:
            pass  # the client went away
        except ApiError as exc:  # a conversion failed: the stream ends with the error, as kube-apiserver's
            with contextlib.suppress(ConnectionResetError, RuntimeError):
                await response.write(msgspec.json.encode({"type": "ERROR", "object": exc.status()}) + b"\n")
        finally:
            self.store.watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    async def _events_out(self, rt: ResourceType, events: list[WatchEvent]) -> list[WatchEvent]:
        """Watch events of stored objects as the version watched (one conversion call for them all)."""
        if rt not in self.views or not events:
            return events
        objs = [e.obj for e in events] + [e.prev for e in events if e.prev is not None]
        converted = iter(await self._out(rt, objs))
        out = [WatchEvent(e.rv, e.type, rt, next(converted), None) for e in events]
        for event, original in zip(out, events, strict=True):
            if original.prev is not None:
                event.prev = next(converted)
        return out

    @staticmethod
    def _rendering(request: web.Request) -> Rendering:
        return negotiate(request.headers.get("Accept", ""), request.query.get("includeObject"))

    @staticmethod
    def _event_line(
        event: WatchEvent, predicate: Callable[[Obj], bool], rendering: Rendering = PLAIN
    ) -> bytes | None:
        """Selector-aware, as kube-apiserver's cacheWatcher.convertToWatchEvent: an object entering the
        selection is ADDED; one leaving it is DELETED carrying its previous content (the state that was
        selected) with the event's resourceVersion. Tables (kubectl get -w) and PartialObjectMetadata are
        rendered per event."""
        now = predicate(event.obj)
        event_type: str | None = event.type if now else None
        obj = event.obj
        if event.type == "MODIFIED" and event.prev is not None:
            before = predicate(event.prev)
            event_type = "MODIFIED" if now and before else "ADDED" if now else "DELETED" if before else None
            if event_type == "DELETED":
                rv = event.obj["metadata"].get("resourceVersion", "")
                obj = dict(event.prev, metadata=dict(event.prev["metadata"], resourceVersion=rv))
        if event_type is None:
            return None
        if rendering.kind == "table":
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            rendered = to_table(event.resource, [obj], meta, rendering)
            return msgspec.json.encode({"type": event_type, "object": rendered}) + b"\n"
        if rendering.kind == "partial":
            return (
                msgspec.json.encode({"type": event_type, "object": partial(obj, rendering.version)}) + b"\n"
            )
        if event_type == event.type:
            return event.encoded()
        return msgspec.json.encode({"type": event_type, "object": obj}) + b"\n"


def _managed(request: web.Request, rt: ResourceType, obj: Obj, old: Obj | None, sub: str) -> None:
    """Note a client's write in the object's managedFields (services/simcluster/managed_fields.py)."""
    managed_fields.record(
        obj,
        old,
        manager=managed_fields.manager_of(
            request.query.get("fieldManager"), request.headers.get("User-Agent")
        ),
        content_type=request.headers.get("Content-Type", ""),
        subresource=sub or None,
        api_version=rt.api_version,
        status_takes_metadata=rt is PODS,  # pods/status takes labels and annotations (store.py)
    )
