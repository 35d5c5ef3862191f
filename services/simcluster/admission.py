"""Admission webhooks, as the API server calls them. Registered MutatingWebhookConfigurations are called
one after the other with an AdmissionReview v1 over HTTP(S) and their JSONPatch is applied; then every
matching ValidatingWebhookConfiguration webhook is called (concurrently, as kube-apiserver does) on the
mutated object, and any denial refuses the write. `failurePolicy`, `timeoutSeconds`, rules, namespace and
object selectors are honoured. Only `clientConfig.url` can be reached (there are no Services to route to).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import uuid
from typing import Any

import aiohttp
import jsonpatch

from services.model.labels import matches

from .errors import ApiError
from .resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS, ResourceType
from .routing import ServiceRouter
from .store import Store


def _rule_matches(rule: dict[str, Any], rt: ResourceType, operation: str) -> bool:
    def has(values: list[str] | None, value: str) -> bool:
        return bool(values) and ("*" in values or value in values)  # type: ignore[operator]

    scope = rule.get("scope", "*")
    if scope == "Namespaced" and not rt.namespaced or scope == "Cluster" and rt.namespaced:
        return False
    return (
        has(rule.get("operations"), operation)
        and has(rule.get("apiGroups"), rt.group)
        and has(rule.get("apiVersions"), rt.version)
        and (has(rule.get("resources"), rt.plural) or has(rule.get("resources"), f"{rt.plural}/*"))
    )


class Admission:
    def __init__(self, store: Store, router: ServiceRouter) -> None:
        self.store = store
        self.router = router
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _webhooks_for(
        self, configurations: ResourceType, rt: ResourceType, operation: str, obj: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The webhooks of every ``configurations`` object (mutating or validating) that this request
        matches, in configuration-name order."""
        chosen = []
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        ns_obj = self.store.find(NAMESPACES, "", namespace) if namespace else None
        ns_labels = ((ns_obj or {}).get("metadata") or {}).get("labels") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for config in sorted(
            self.store.objects[configurations].values(), key=lambda c: c["metadata"]["name"]
        ):
            for hook in config.get("webhooks") or []:
                if not any(_rule_matches(rule, rt, operation) for rule in hook.get("rules") or []):
                    continue
                if rt.namespaced and not matches(hook.get("namespaceSelector"), ns_labels):
                    continue
                if not matches(hook.get("objectSelector"), labels):
                    continue
                chosen.append(hook)
        return chosen

    async def mutate(
        self,
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        namespace: str,
    ) -> dict[str, Any]:
        """Run the mutating webhooks in turn; each sees the previous one's result."""
        for hook in self._webhooks_for(MUTATING_WEBHOOKS, rt, operation, obj):
            answer = await self._review_honouring_policy(hook, rt, operation, obj, old, namespace)
            if answer is None or not answer.get("patch"):
                continue
            try:
                obj = _apply_patch(answer, obj)
            except Exception as exc:  # noqa: BLE001 - a patch we cannot apply is a failed call
                if hook.get("failurePolicy", "Fail") == "Ignore":
                    continue
                raise _call_failed(hook, str(exc)) from exc
        return obj

    async def validate(
        self,
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        namespace: str,
    ) -> None:
        """Run the validating webhooks concurrently on the (mutated) object; the first refusal, in
        configuration order, refuses the write. A patch in a validating answer is ignored."""
        hooks = self._webhooks_for(VALIDATING_WEBHOOKS, rt, operation, obj)
        if not hooks:
            return
        outcomes = await asyncio.gather(
            *(self._review_honouring_policy(hook, rt, operation, obj, old, namespace) for hook in hooks),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _review_honouring_policy(
        self,
        hook: dict[str, Any],
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        namespace: str,
    ) -> dict[str, Any] | None:
        """The webhook's allowing answer; None when it could not be called and its failurePolicy is
        Ignore. A denial is an ApiError whatever the policy (the webhook did answer)."""
        try:
            return await self._call(hook, rt, operation, obj, old, namespace)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to reach or understand the webhook
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return None
            raise _call_failed(hook, str(exc)) from exc

    async def _call(
        self,
        hook: dict[str, Any],
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        namespace: str,
    ) -> dict[str, Any]:
        client_config = hook.get("clientConfig") or {}
        url, server_name = self.router.target(client_config, float(hook.get("timeoutSeconds", 10)))
        ssl_context = webhook_ssl(client_config, url)
        meta = obj.get("metadata") or {}
        request_uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": request_uid,
                "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
                "requestKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                "requestResource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
                "name": meta.get("name", ""),
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
                "object": obj,
                "oldObject": old,
                "dryRun": False,
                "options": {
                    "kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions",
                    "apiVersion": "meta.k8s.io/v1",
                },
            },
        }
        if self._session is None:
            self._session = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=float(hook.get("timeoutSeconds", 10)))
        async with self._session.post(
            url, json=review, ssl=ssl_context, timeout=timeout, server_hostname=server_name
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"webhook answered HTTP {response.status}")
            body = await response.json(content_type=None)
        answer = body.get("response") or {}
        if answer.get("uid") != request_uid:
            raise RuntimeError("webhook response uid does not match the request uid")
        if not answer.get("allowed"):
            # As kube-apiserver's webhook ToStatusErr: a code below 400 becomes 403; the message is the
            # webhook's, else its reason, else "without explanation".
            status = answer.get("status") or {}
            code = int(status.get("code") or 0)
            code = code if code >= 400 else 403
            denied = f'admission webhook "{hook.get("name")}" denied the request'
            explanation = status.get("message") or status.get("reason")
            message = f"{denied}: {explanation}" if explanation else f"{denied} without explanation"
            raise ApiError(code, message, status.get("reason") or ("Forbidden" if code == 403 else None))
        return dict(answer)


def webhook_ssl(client_config: dict[str, Any], url: str) -> ssl.SSLContext | bool:
    """How a webhook's TLS is checked: against its ``caBundle`` when set, not at all otherwise (no
    cert-manager CA injection runs here)."""
    if url.startswith("https") and client_config.get("caBundle"):
        return ssl.create_default_context(cadata=base64.b64decode(client_config["caBundle"]).decode())
    return False


def _apply_patch(answer: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    if answer.get("patchType", "JSONPatch") != "JSONPatch":
        raise ValueError(f"unsupported patchType {answer.get('patchType')!r}")
    operations = jsonpatch.JsonPatch.from_string(base64.b64decode(answer["patch"]).decode())
    patched: dict[str, Any] = operations.apply(obj)
    return patched


def _call_failed(hook: dict[str, Any], reason: str) -> ApiError:
    return ApiError(500, f'Internal error occurred: failed calling webhook "{hook.get("name")}": {reason}')
