"""CRD version conversion, as apiextensions-apiserver does it: a CRD serving several versions stores every
object once, in its storage version, and converts on the way in (a write at another version is converted
to the storage version before it is stored) and on the way out (a read, list or watch event at another
version is converted from it).

``spec.conversion.strategy: None`` only rewrites ``apiVersion``. ``Webhook`` sends a ConversionReview
(``apiextensions.k8s.io/v1``) to the webhook over HTTP(S) and checks its answer as kube-apiserver does: the
same ``uid``, ``result.status: Success``, one converted object per object sent, each at the desired version
and of the same kind; of the metadata only labels and annotations may change (the rest is restored).
A failure is the API server's 500 ``conversion webhook for <group/version, Kind> failed: …``, so a client
reading or writing at a non-storage version gets nothing while the webhook is down.

The webhook is reached at ``clientConfig.url``, or for ``clientConfig.service`` through the Service's
endpoints (routing.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from services.model.json_copy import json_copy

from .admission import webhook_ssl
from .errors import ApiError
from .resources import ResourceType
from .routing import ServiceRouter

Obj = dict[str, Any]
Convert = Callable[[list[Obj], str], Awaitable[list[Obj]]]
REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
WEBHOOK_TIMEOUT_SECONDS = 30.0  # kube-apiserver's fixed timeout for conversion webhooks


@dataclass(frozen=True)
class VersionView:
    """A served version that is not the storage version: its objects live under ``storage``."""

    storage: ResourceType
    convert: Convert


def _failed(rt: ResourceType, reason: str) -> ApiError:
    return ApiError(
        500,
        f"Internal error occurred: conversion webhook for {rt.group}/{rt.version}, Kind={rt.kind} failed: "
        f"{reason}",
    )


class Conversions:
    """Builds the converter of a CRD; owns the HTTP session its webhooks are called with."""

    def __init__(self, router: ServiceRouter) -> None:
        self.router = router
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def converter(self, crd: Obj, rt: ResourceType) -> Convert:
        """How objects of the CRD are converted; ``rt`` (the version asked for) names it in errors."""
        conversion = crd["spec"].get("conversion") or {}
        if conversion.get("strategy", "None") != "Webhook":
            return _rewrite_api_version
        webhook = conversion.get("webhook") or {}

        async def convert(objects: list[Obj], desired: str) -> list[Obj]:
            todo = [i for i, obj in enumerate(objects) if obj.get("apiVersion") != desired]
            if not todo:
                return objects
            converted = await self._call(webhook, rt, [objects[i] for i in todo], desired)
            out = list(objects)
            for i, obj in zip(todo, converted, strict=True):
                out[i] = obj
            return out

        return convert

    async def _call(self, webhook: Obj, rt: ResourceType, objects: list[Obj], desired: str) -> list[Obj]:
        client_config = webhook.get("clientConfig") or {}
        if "v1" not in (webhook.get("conversionReviewVersions") or []):
            raise _failed(rt, "the webhook does not accept ConversionReview v1")
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": REVIEW_API_VERSION,
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
        }
        try:
            url, server_name = self.router.target(client_config, WEBHOOK_TIMEOUT_SECONDS)
            ssl_context = webhook_ssl(client_config, url)
            if self._session is None:
                self._session = aiohttp.ClientSession()
            timeout = aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_SECONDS)
            async with self._session.post(
                url, json=review, ssl=ssl_context, timeout=timeout, server_hostname=server_name
            ) as response:
                if response.status != 200:
                    raise RuntimeError(f"the server responded with HTTP {response.status}")
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError) as exc:
            raise _failed(rt, str(exc) or type(exc).__name__) from exc
        return _checked(rt, body, uid, objects, desired)


def _checked(rt: ResourceType, body: Any, uid: str, objects: list[Obj], desired: str) -> list[Obj]:
    answer = body.get("response") if isinstance(body, dict) else None
    if not isinstance(answer, dict):
        raise _failed(rt, "the webhook returned no ConversionReview response")
    if answer.get("uid") != uid:
        raise _failed(rt, f"expected response uid {uid}, got {answer.get('uid')!r}")
    result = answer.get("result") or {}
    if result.get("status") != "Success":
        raise _failed(rt, str(result.get("message") or "the webhook answered Failure without a message"))
    converted = answer.get("convertedObjects")
    if not isinstance(converted, list) or len(converted) != len(objects):
        count = len(converted) if isinstance(converted, list) else 0
        raise _failed(rt, f"expected {len(objects)} converted objects, got {count}")
    out = []
    for original, new in zip(objects, converted, strict=True):
        if not isinstance(new, dict) or new.get("apiVersion") != desired:
            raise _failed(rt, f"invalid converted object: apiVersion is not {desired}")
        if new.get("kind") != original.get("kind"):
            raise _failed(rt, f"invalid converted object: kind changed to {new.get('kind')!r}")
        out.append(_restore_metadata(original, new))
    return out


def _restore_metadata(original: Obj, converted: Obj) -> Obj:
    """Only labels and annotations of the webhook's metadata are kept, as kube-apiserver's
    restoreObjectMeta does."""
    meta = dict(original.get("metadata") or {})
    new_meta = converted.get("metadata") or {}
    for field in ("labels", "annotations"):
        if new_meta.get(field):
            meta[field] = new_meta[field]
        else:
            meta.pop(field, None)
    return dict(converted, metadata=meta)


async def _rewrite_api_version(objects: list[Obj], desired: str) -> list[Obj]:
    out = []
    for obj in objects:
        copied = json_copy(obj)
        copied["apiVersion"] = desired
        out.append(copied)
    return out
