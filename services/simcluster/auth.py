"""Bearer-token authentication and RBAC authorization, on with ``SimConfig(auth=True)`` (``rollbook
simcluster --auth``). The kubeconfig SimCluster writes carries an administrator's token (group
``system:masters``); ``SimCluster.service_account_kubeconfig`` writes one per ServiceAccount, whose requests
are then allowed only by the RBAC objects stored in the cluster (rbac.py). A missing or unknown token is
401 Unauthorized, as is the token of a ServiceAccount that has been deleted; a denied request is 403."""

from __future__ import annotations

import secrets
from typing import Any

from . import errors
from .rbac import ADMIN, Request, User, allowed, forbidden_message, service_account_user
from .resources import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ROLE_BINDINGS, ROLES, SERVICE_ACCOUNTS
from .store import Store

Obj = dict[str, Any]


def token_review_status(auth: Auth | None, review: Obj) -> Obj:
    """The ``status`` kube-apiserver gives a TokenReview (``authentication.k8s.io/v1``): who the token in
    ``spec.token`` authenticates as, or ``authenticated: false``. Without auth no token is known."""
    token = str((review.get("spec") or {}).get("token") or "")
    if auth is None or not token:
        return {"authenticated": False, "error": "no token, or the cluster runs without authentication"}
    try:
        user = auth.authenticate("Bearer " + token)
    except errors.ApiError:
        return {"authenticated": False, "error": "invalid bearer token"}
    return {"authenticated": True, "user": {"username": user.name, "groups": list(user.groups)}}


def subject_access_review_status(auth: Auth | None, review: Obj) -> Obj:
    """The ``status`` of a SubjectAccessReview (``authorization.k8s.io/v1``): whether the RBAC objects
    stored allow ``spec.user``/``spec.groups`` the resource or non-resource request asked. Without auth
    every request is allowed, as with kube-apiserver's AlwaysAllow authorizer."""
    spec = review.get("spec") or {}
    if not isinstance(spec, dict) or not (spec.get("user") or spec.get("groups")):
        raise errors.ApiError(422, "spec.user or spec.groups is required", "Invalid")
    if auth is None:
        return {"allowed": True, "reason": "the cluster runs without authorization"}
    user = User(str(spec.get("user") or ""), tuple(str(g) for g in spec.get("groups") or []))
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(resource, dict):
        request = Request(
            str(resource.get("verb") or ""),
            str(resource.get("group") or ""),
            str(resource.get("resource") or ""),
            str(resource.get("subresource") or ""),
            str(resource.get("namespace") or ""),
            str(resource.get("name") or ""),
        )
    elif isinstance(non_resource, dict):
        request = Request(str(non_resource.get("verb") or ""), path=str(non_resource.get("path") or ""))
    else:
        raise errors.ApiError(
            422, "exactly one of spec.resourceAttributes, spec.nonResourceAttributes is required", "Invalid"
        )
    if auth.permits(user, request):
        return {"allowed": True, "reason": "allowed by RBAC"}
    return {"allowed": False, "reason": forbidden_message(user, request)}


def unauthorized() -> errors.ApiError:
    return errors.ApiError(401, "Unauthorized", "Unauthorized")


class Auth:
    def __init__(self, store: Store, admin_token: str | None = None) -> None:
        self.store = store
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self._accounts: dict[str, tuple[str, str, str]] = {}  # token -> (namespace, name, uid)

    def issue(self, namespace: str, name: str) -> str:
        """A token for the ServiceAccount (which must exist), valid while that account does."""
        account = self.store.get(SERVICE_ACCOUNTS, namespace, name)
        token = secrets.token_urlsafe(24)
        self._accounts[token] = (namespace, name, account["metadata"]["uid"])
        return token

    def authenticate(self, authorization: str) -> User:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if secrets.compare_digest(token, self.admin_token):
            return ADMIN
        account = self._accounts.get(token)
        if account is None:
            raise unauthorized()
        namespace, name, uid = account
        current = self.store.find(SERVICE_ACCOUNTS, namespace, name)
        if current is None or current["metadata"]["uid"] != uid:
            raise unauthorized()
        return service_account_user(namespace, name)

    def permits(self, user: User, request: Request) -> bool:
        objects = self.store.objects
        cluster_roles = {key[1]: role for key, role in objects[CLUSTER_ROLES].items()}
        roles = dict(objects[ROLES].items())
        role_bindings = [b for (ns, _), b in objects[ROLE_BINDINGS].items() if ns == request.namespace]
        return allowed(
            user, request, list(objects[CLUSTER_ROLE_BINDINGS].values()), role_bindings, cluster_roles, roles
        )

    def authorize(self, user: User, request: Request) -> None:
        if self.permits(user, request):
            return
        details: Obj = {"name": request.name, "group": request.group, "kind": request.resource}
        raise errors.ApiError(
            403, forbidden_message(user, request), "Forbidden", details if request.is_resource else None
        )
