"""RBAC authorization as kube-apiserver's RBAC authorizer decides it (`plugin/pkg/auth/authorizer/rbac`),
over the Roles, ClusterRoles and their bindings simcluster stores, and the request attributes the API
server derives from a request (`apiserver/pkg/endpoints/request/requestinfo.go`). Pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
# Granted to every authenticated user by the default ClusterRoles system:discovery, system:basic-user and
# system:public-info-viewer.
DISCOVERY_PATHS = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]


def service_account_user(namespace: str, name: str) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


ADMIN = User("system:admin", (MASTERS, AUTHENTICATED))


@dataclass(frozen=True)
class Request:
    """What is asked: a resource request (verb, group, resource, subresource, namespace, name) or a
    non-resource one (path)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


def verb_of(method: str, has_name: bool, watch: bool) -> str:
    if method == "GET" or method == "HEAD":
        return "watch" if watch else ("get" if has_name else "list")
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if has_name else "deletecollection"
    return method.lower()


def _subject_matches(subject: Obj, user: User, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{subject.get('name')}"
    return False


def _has(values: list[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def rule_allows(rule: Obj, request: Request) -> bool:
    if not _has(rule.get("verbs"), request.verb):
        return False
    if not request.is_resource:
        urls = rule.get("nonResourceURLs") or []
        return any(u == request.path or (u.endswith("*") and request.path.startswith(u[:-1])) for u in urls)
    if not _has(rule.get("apiGroups"), request.group):
        return False
    resources = rule.get("resources") or []
    combined = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    if not (
        "*" in resources
        or combined in resources
        or (request.subresource and f"*/{request.subresource}" in resources)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


def allowed(
    user: User,
    request: Request,
    cluster_role_bindings: list[Obj],
    role_bindings: list[Obj],
    cluster_roles: dict[str, Obj],
    roles: dict[tuple[str, str], Obj],
) -> bool:
    """Whether any binding of ``user`` grants ``request``. ``role_bindings`` are those of the request's
    namespace; ``roles`` are keyed by (namespace, name)."""
    if MASTERS in user.groups:
        return True
    if (
        not request.is_resource
        and request.verb == "get"
        and (request.path in DISCOVERY_PATHS or request.path.startswith(("/api/", "/apis/", "/openapi/")))
    ):
        return True
    for binding in cluster_role_bindings:
        if any(_subject_matches(s, user, "") for s in binding.get("subjects") or []):
            role = cluster_roles.get((binding.get("roleRef") or {}).get("name", ""))
            if role and any(rule_allows(r, request) for r in role.get("rules") or []):
                return True
    if request.namespace:
        for binding in role_bindings:
            namespace = binding["metadata"].get("namespace", "")
            if not any(_subject_matches(s, user, namespace) for s in binding.get("subjects") or []):
                continue
            ref = binding.get("roleRef") or {}
            role = (
                cluster_roles.get(ref.get("name", ""))
                if ref.get("kind") == "ClusterRole"
                else roles.get((namespace, ref.get("name", "")))
            )
            if role and any(rule_allows(r, request) for r in role.get("rules") or []):
                return True
    return False


def forbidden_message(user: User, request: Request) -> str:
    """The RBAC authorizer's denial, as the API server words it (`endpoints/handlers/responsewriters`)."""
    if not request.is_resource:
        return f'forbidden: User "{user.name}" cannot {request.verb} path "{request.path}"'
    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    head = f'{qualified} "{request.name}" is forbidden' if request.name else f"{qualified} is forbidden"
    scope = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    action = f'cannot {request.verb} resource "{resource}" in API group "{request.group}" {scope}'
    return f'{head}: User "{user.name}" {action}'
