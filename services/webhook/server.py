"""The webhook's HTTPS server: /mutate-pod, /validate-sidecarset, /mutate-sidecarset, /convert (CloneSet
versions, conversion.py), /healthz, /readyz, /metrics."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import prometheus_client
import structlog
from aiohttp import web

from services.model import sidecarset as ss
from services.model.redaction import RedactionPolicy, contains_digest, digest_map, restore
from services.webhook import admission, conversion
from services.webhook.cache import NamespaceLabels, SidecarSetCache
from services.webhook.recorder import InjectionRecorder, injection_events
from services.webhook.revisions import Recorded, RevisionSource
from services.webhook.tls import RELOAD_SECONDS, ReloadingContext, ServingCertificate

log = structlog.get_logger("rollbook.webhook")

MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server caps objects at ~1.5 MiB; a review carries up to two


@dataclass
class Metrics:
    registry: prometheus_client.CollectorRegistry = field(default_factory=prometheus_client.CollectorRegistry)

    def __post_init__(self) -> None:
        self.reviews = prometheus_client.Counter(
            "rollbook_webhook_reviews",
            "AdmissionReviews answered, by endpoint and outcome",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.latency = prometheus_client.Histogram(
            "rollbook_webhook_review_seconds",
            "Time to answer an AdmissionReview",
            ["endpoint"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=self.registry,
        )
        self.kind_served = prometheus_client.Gauge(
            "rollbook_webhook_kind_served",
            "1 while the API server serves a kind the webhook watches, 0 while it answers 404",
            ["kind"],
            registry=self.registry,
        )
        self.revisions_unavailable = prometheus_client.Counter(
            "rollbook_webhook_revisions_unavailable",
            "Pods matched by a SidecarSet pinning a revision that could not be read, by SidecarSet and "
            "what was done (skip, latest, refuse)",
            ["sidecarset", "action"],
            registry=self.registry,
        )
        self.injections = prometheus_client.Counter(
            "rollbook_webhook_injections",
            "Sidecar injections by SidecarSet",
            ["sidecarset"],
            registry=self.registry,
        )


@dataclass
class WebhookState:
    sidecarsets: SidecarSetCache
    namespaces: NamespaceLabels
    recorder: InjectionRecorder
    excluded_namespaces: frozenset[str] = ss.DEFAULT_EXCLUDED_NAMESPACES
    # Where the recorded revisions of SidecarSets pinning one come from (None: no event store, so they
    # are always unavailable).
    revisions: RevisionSource | None = None
    # What to do when they are unavailable (settings.sidecarset_revisions_unavailable).
    revisions_unavailable: str = admission.UNAVAILABLE_SKIP
    # Whether the revisions of the pinning SidecarSets known at start were read (/readyz waits for it).
    revisions_loaded: Callable[[], bool] = lambda: True
    # OpenKruise's EnableSortSidecarContainerByName gate (settings.sidecarset_sort_containers_by_name).
    sort_containers_by_name: bool = False
    # Set once the caches are filled; until then the webhook is not ready (see /mutate-pod).
    synced: Callable[[], bool] = lambda: True
    # Kind -> whether the API server serves it (False: 404, CRD not installed); None while unknown.
    served: Callable[[], dict[str, bool | None]] = dict
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    metrics: Metrics = field(default_factory=Metrics)
    # Restores the values recorded revisions hold as digests (None: a revision holding one is unavailable).
    policy: RedactionPolicy | None = None


STATE_KEY = web.AppKey("webhook_state", WebhookState)


async def _read_review(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (ValueError, web.HTTPRequestEntityTooLarge) as err:
        raise admission.ReviewError(f"body is not JSON: {err}") from None
    return admission.request_of(body)


def _bad_request(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def mutate_pod(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    started = time.perf_counter()
    try:
        review = await _read_review(request)
    except admission.ReviewError as err:
        state.metrics.reviews.labels("mutate-pod", "bad-request").inc()
        return _bad_request(str(err))
    if not state.synced():
        # The SidecarSets are not known yet, so we cannot tell whether this pod is selected. Pods
        # must never be blocked by us: admit unchanged, and say so loudly (Kubernetes shows warnings).
        state.metrics.reviews.labels("mutate-pod", "not-synced").inc()
        log.error("admitted_without_injection", reason="sidecarset cache not synced", uid=review["uid"])
        response = {"uid": review["uid"], "allowed": True, "warnings": ["rollbook webhook not synced yet"]}
        return web.json_response(admission.review_envelope(response))
    namespace = review.get("namespace") or ""
    now = state.clock()
    namespace_labels = state.namespaces.get(namespace)
    snapshot = state.sidecarsets.snapshot()
    warnings: list[str] = []
    try:
        pinned = admission.pinned_sidecarsets(
            review, snapshot, excluded_namespaces=state.excluded_namespaces, namespace_labels=namespace_labels
        )
        recorded = await _recorded_revisions(state, pinned, snapshot)
        unavailable = admission.unavailable_pins(snapshot, recorded.revisions, recorded.failed)
        if unavailable and state.revisions_unavailable == admission.UNAVAILABLE_REFUSE:
            for name in unavailable:
                state.metrics.revisions_unavailable.labels(name, admission.UNAVAILABLE_REFUSE).inc()
            reason = "; ".join(unavailable[name] for name in sorted(unavailable))
            state.metrics.reviews.labels("mutate-pod", "refused").inc()
            log.warning("pod_refused", uid=review["uid"], namespace=namespace, reason=reason)
            return web.json_response(
                admission.review_envelope(admission.refuse_pod(str(review["uid"]), reason))
            )
        if unavailable:
            snapshot = tuple(
                admission.fallback_sidecarsets(snapshot, unavailable, state.revisions_unavailable)
            )
            warnings = _unavailable_warnings(state, unavailable, review, namespace)
        result = admission.review_pod(
            review,
            snapshot,
            now=now,
            excluded_namespaces=state.excluded_namespaces,
            namespace_labels=namespace_labels,
            revisions=recorded.revisions,
            sort_containers_by_name=state.sort_containers_by_name,
        )
    except Exception as err:  # a pod shape we did not foresee: fail open, as failurePolicy Ignore would
        state.metrics.reviews.labels("mutate-pod", "error").inc()
        log.exception("injection_failed", uid=review["uid"], namespace=namespace)
        warning = f"rollbook sidecar injection failed, pod admitted unchanged: {err!r}"
        response = {"uid": review["uid"], "allowed": True, "warnings": [warning[:500]]}
        return web.json_response(admission.review_envelope(response))
    if warnings and result.response["allowed"]:
        result.response["warnings"] = [*result.response.get("warnings", []), *warnings]
    if not result.response["allowed"]:
        state.metrics.reviews.labels("mutate-pod", "refused").inc()
        reason = result.response["status"]["message"]
        log.warning("pod_refused", uid=review["uid"], namespace=namespace, reason=reason)
        return web.json_response(admission.review_envelope(result.response))
    if result.records and not result.dry_run:
        state.recorder.submit(
            injection_events(result.records, admission_uid=str(review["uid"]), occurred_at=now)
        )
        for record in result.records:
            state.metrics.injections.labels(record.sidecarset).inc()
        log.info(
            "pod_injected",
            uid=review["uid"],
            namespace=namespace,
            pod=result.records[0].pod,
            sidecarsets=[r.sidecarset for r in result.records],
        )
    state.metrics.reviews.labels("mutate-pod", "injected" if result.records else "unchanged").inc()
    state.metrics.latency.labels("mutate-pod").observe(time.perf_counter() - started)
    return web.json_response(admission.review_envelope(result.response))


async def _recorded_revisions(
    state: WebhookState, names: list[str], sidecarsets: tuple[ss.SidecarSet, ...]
) -> Recorded:
    if not names:
        return Recorded(revisions={})
    if state.revisions is None:
        reason = "this webhook reads no event store (rollbook webhook --record log)"
        return Recorded(revisions={}, failed={name: reason for name in names})
    recorded = await state.revisions.recorded(names)
    # A pinned revision not found in what was read moments ago may have been recorded since: read again.
    missed = admission.unresolved_pins(sidecarsets, recorded.revisions)
    if missed:
        again = await state.revisions.recorded(missed, recheck=True)
        recorded = Recorded(
            revisions={**recorded.revisions, **again.revisions},
            failed={**{n: r for n, r in recorded.failed.items() if n not in missed}, **again.failed},
        )
    return _with_real_values(state.policy, recorded, sidecarsets)


def _with_real_values(
    policy: RedactionPolicy | None, recorded: Recorded, sidecarsets: tuple[ss.SidecarSet, ...]
) -> Recorded:
    """The recorded revisions with the values the trail holds as digests restored from the live SidecarSet
    (a pinned revision usually differs from it in images only). A revision holding a value the live
    SidecarSet no longer has is left out: its pin is unavailable, and the webhook does what
    ``sidecarset_revisions_unavailable`` says, naming why."""
    live = {s.name: s for s in sidecarsets}
    revisions: dict[str, list[dict[str, Any]]] = {}
    failed = dict(recorded.failed)
    for name, records in recorded.revisions.items():
        kept = []
        for record in records:
            if not contains_digest(record.get("data")):
                kept.append(record)
                continue
            source = live.get(name)
            digests = digest_map(policy, [source.spec]) if policy is not None and source is not None else {}
            restored, missing = restore(record, digests)
            if missing:
                failed[name] = (
                    "its recorded revision holds redacted values the live SidecarSet no longer holds"
                )
                continue
            kept.append(restored)
        revisions[name] = kept
    return Recorded(revisions=revisions, failed=failed)


def _unavailable_warnings(
    state: WebhookState, unavailable: dict[str, str], review: dict[str, Any], namespace: str
) -> list[str]:
    """Count and log the pinning SidecarSets admitted by the fallback; the warnings the user sees."""
    action = state.revisions_unavailable
    done = "not injected" if action == admission.UNAVAILABLE_SKIP else "injected at its latest spec"
    warnings = []
    for name in sorted(unavailable):
        state.metrics.revisions_unavailable.labels(name, action).inc()
        log.error(
            "pinned_revision_unavailable",
            uid=review["uid"],
            namespace=namespace,
            sidecarset=name,
            action=action,
            reason=unavailable[name],
        )
        warnings.append(
            f"rollbook: SidecarSet {name!r} {done}, its pinned revision is unknown: {unavailable[name]}"[:500]
        )
    return warnings


async def validate_sidecarset(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    started = time.perf_counter()
    try:
        review = await _read_review(request)
    except admission.ReviewError as err:
        state.metrics.reviews.labels("validate-sidecarset", "bad-request").inc()
        return _bad_request(str(err))
    response = admission.review_sidecarset(review, state.sidecarsets.snapshot(), state.sidecarsets.selection)
    outcome = "allowed" if response["allowed"] else "refused"
    if not response["allowed"]:
        log.info("sidecarset_refused", uid=review["uid"], message=response["status"]["message"])
    state.metrics.reviews.labels("validate-sidecarset", outcome).inc()
    state.metrics.latency.labels("validate-sidecarset").observe(time.perf_counter() - started)
    return web.json_response(admission.review_envelope(response))


async def validate_cloneset(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    started = time.perf_counter()
    try:
        review = await _read_review(request)
    except admission.ReviewError as err:
        state.metrics.reviews.labels("validate-cloneset", "bad-request").inc()
        return _bad_request(str(err))
    response = admission.review_cloneset(review, state.sidecarsets.selection)
    outcome = "allowed" if response["allowed"] else "refused"
    if not response["allowed"]:
        log.info("cloneset_refused", uid=review["uid"], message=response["status"]["message"])
    state.metrics.reviews.labels("validate-cloneset", outcome).inc()
    state.metrics.latency.labels("validate-cloneset").observe(time.perf_counter() - started)
    return web.json_response(admission.review_envelope(response))


async def mutate_sidecarset(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    started = time.perf_counter()
    try:
        review = await _read_review(request)
    except admission.ReviewError as err:
        state.metrics.reviews.labels("mutate-sidecarset", "bad-request").inc()
        return _bad_request(str(err))
    response = admission.mutate_sidecarset(review, state.sidecarsets.selection)
    state.metrics.reviews.labels("mutate-sidecarset", "patched" if "patch" in response else "unchanged").inc()
    state.metrics.latency.labels("mutate-sidecarset").observe(time.perf_counter() - started)
    return web.json_response(admission.review_envelope(response))


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if not state.synced():
        return web.Response(status=503, text="sidecarset cache not synced")
    if not state.revisions_loaded():
        return web.Response(status=503, text="revisions of the pinning SidecarSets not read yet")
    missing = sorted(kind for kind, served in state.served().items() if served is False)
    return web.Response(text=f"ok (not served by the API server: {', '.join(missing)})" if missing else "ok")


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    for kind, served in state.served().items():
        if served is not None:
            state.metrics.kind_served.labels(kind).set(1 if served else 0)
    state.metrics.registry.collect()
    return web.Response(
        body=prometheus_client.generate_latest(state.metrics.registry),
        headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
    )


def build_app(state: WebhookState) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[STATE_KEY] = state
    app.router.add_post("/mutate-pod", mutate_pod)
    app.router.add_post("/validate-sidecarset", validate_sidecarset)
    app.router.add_post("/validate-cloneset", validate_cloneset)
    app.router.add_post("/mutate-sidecarset", mutate_sidecarset)
    conversion.add_routes(app, state.metrics.reviews, state.metrics.latency)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


@dataclass
class RunningServer:
    runner: web.AppRunner
    base_url: str  # https://host:port
    port: int
    tls: ReloadingContext | None = None
    reloading: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        if self.reloading is not None:
            self.reloading.cancel()
            await asyncio.gather(self.reloading, return_exceptions=True)
        await self.runner.cleanup()


async def start_server(
    state: WebhookState,
    certificate: ServingCertificate,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    reload_seconds: float = RELOAD_SECONDS,
) -> RunningServer:
    """Serve HTTPS on host:port (0 = a free port); returns where it listens. The certificate files are
    looked at every ``reload_seconds`` and a new pair is served without a restart (tls.ReloadingContext)."""
    runner = web.AppRunner(build_app(state), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    tls = ReloadingContext(certificate)
    site = web.TCPSite(runner, host, port, ssl_context=tls.context)
    await site.start()
    # The runner's public list of bound addresses: asyncio's and uvloop's servers are different classes.
    bound_port = int(runner.addresses[0][1])
    url_host = f"[{host}]" if ":" in host else host
    reloading = asyncio.create_task(tls.follow(reload_seconds), name="webhook-certificate-reload")
    return RunningServer(
        runner=runner,
        base_url=f"https://{url_host}:{bound_port}",
        port=bound_port,
        tls=tls,
        reloading=reloading,
    )
