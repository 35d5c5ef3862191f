"""The SidecarSet injection webhook (``rollbook webhook``).

- ``admission``: AdmissionReview v1 in/out as pure functions (``review_pod``, ``review_sidecarset``),
  shared with ``rollbook inject``.
- ``server``: the aiohttp HTTPS app (/mutate-pod, /validate-sidecarset, /healthz, /readyz, /metrics).
- ``cache``: SidecarSets and Namespace labels kept by list+watch (kubernetes-asyncio).
- ``recorder`` / ``sinks``: ``SidecarInjected`` events recorded after the answer, in the event store.
- ``register``: Mutating/ValidatingWebhookConfigurations (URL- or Service-based) and their registration.
- ``tls``: the self-signed CA and serving certificate made at start when none is given.
- ``service``: ``run_webhook(settings, options, sink)`` wires it all together.

The injection rules themselves are in ``services.model.sidecarset`` (pure, shared with the planner).
"""
