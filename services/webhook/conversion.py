"""The CloneSet conversion webhook: ``POST /convert`` answers a ConversionReview
(``apiextensions.k8s.io/v1``) by converting every object to ``request.desiredAPIVersion`` with
services/model/cloneset_conversion.py, as the API server asks when a client reads or writes CloneSets at a
version other than the stored one (the CRD's ``spec.conversion.strategy: Webhook``).

Conversion never refuses a well-formed object (what admission refuses, admission refuses; an object stored
once must stay readable at every served version). A review asking for a version or kind this webhook does
not convert is answered ``result.status: Failure`` with the reason, which the API server returns to its
client; a body that is not a ConversionReview is HTTP 400. It needs no cache, so it answers from the first
request on, before the SidecarSet caches are synced.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Histogram

from services.model import cloneset_conversion as conv

REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
REVIEW_KIND = "ConversionReview"
_CONVERTERS = {conv.V1ALPHA1: conv.to_v1alpha1, conv.V1BETA1: conv.to_v1beta1}


class ConversionReviewError(ValueError):
    """The body is not a ConversionReview v1 this webhook can answer (HTTP 400)."""


def request_of(review: Any) -> dict[str, Any]:
    """The ``request`` of a ConversionReview v1, checked enough to answer it."""
    if not isinstance(review, Mapping):
        raise ConversionReviewError("body must be a JSON ConversionReview object")
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != REVIEW_KIND:
        raise ConversionReviewError(f"expected kind {REVIEW_KIND}, apiVersion {REVIEW_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ConversionReviewError("request.uid is required")
    if not isinstance(request.get("objects"), list):
        raise ConversionReviewError("request.objects must be a list")
    return dict(request)


def convert_object(obj: Any, desired: str) -> dict[str, Any]:
    """One object at ``desired`` (apiVersion); ValueError with the reason when it cannot be."""
    if not isinstance(obj, dict):
        raise ValueError("every object must be a JSON object")
    if obj.get("kind") != "CloneSet":
        raise ValueError(f"only CloneSets are converted here, not {obj.get('kind')!r}")
    if obj.get("apiVersion") not in _CONVERTERS:
        raise ValueError(f"cannot convert from apiVersion {obj.get('apiVersion')!r}")
    if obj["apiVersion"] == desired:
        return obj
    return _CONVERTERS[desired](obj)


def review_conversion(request: Mapping[str, Any]) -> dict[str, Any]:
    """The ConversionResponse: every object converted, or none and the reason."""
    uid = str(request["uid"])
    desired = request.get("desiredAPIVersion")
    if desired not in _CONVERTERS:
        return _failure(uid, f"cannot convert to {desired!r}: this webhook serves {', '.join(_CONVERTERS)}")
    try:
        converted = [convert_object(obj, str(desired)) for obj in request["objects"]]
    except ValueError as err:
        return _failure(uid, str(err))
    return {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}}


def _failure(uid: str, message: str) -> dict[str, Any]:
    return {"uid": uid, "convertedObjects": [], "result": {"status": "Failure", "message": message}}


def review_envelope(response: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": dict(response)}


def add_routes(app: web.Application, reviews: Counter, latency: Histogram) -> None:
    """``POST /convert``, counted in ``reviews`` (endpoint ``convert``; outcome ``converted``, ``failed``
    or ``bad-request``) and timed in ``latency``."""

    async def convert(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            body = await request.json(loads=json.loads)
            review = request_of(body)
        except (ValueError, web.HTTPRequestEntityTooLarge) as err:
            reviews.labels("convert", "bad-request").inc()
            return web.json_response({"error": f"not a ConversionReview: {err}"}, status=400)
        response = review_conversion(review)
        reviews.labels(
            "convert", "converted" if response["result"]["status"] == "Success" else "failed"
        ).inc()
        latency.labels("convert").observe(time.perf_counter() - started)
        return web.json_response(review_envelope(response))

    app.router.add_post("/convert", convert)
