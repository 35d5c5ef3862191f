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

    def authorize(self, user: User, request: Request) -> None:
        objects = self.store.objects
        cluster_roles = {key[1]: role for key, role in objects[CLUSTER_ROLES].items()}
        roles = dict(objects[ROLES].items())
        role_bindings = [b for (ns, _), b in objects[ROLE_BINDINGS].items() if ns == request.namespace]
        if allowed(
            user, request, list(objects[CLUSTER_ROLE_BINDINGS].values()), role_bindings, cluster_roles, roles
        ):
            return
        details: Obj = {"name": request.name, "group": request.group, "kind": request.resource}
        raise errors.ApiError(
            403, forbidden_message(user, request), "Forbidden", details if request.is_resource else None
        )
