"""Prometheus metrics shared by the four services (one process = one service, so the default registry
holds exactly one service's figures; the ``service`` label keeps them apart when scraped together)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS_HANDLED = Counter(
    "rollbook_events_handled_total", "Events handled by a service, by event type", ["service", "type"]
)
EVENTS_APPENDED = Counter(
    "rollbook_events_appended_total", "Events a service appended to the event store", ["service", "type"]
)
STORE_APPENDS = Counter(
    "rollbook_store_appends_total", "Appends (one store transaction each) a service made", ["service"]
)
CONSUMER_LAG = Gauge(
    "rollbook_consumer_lag",
    "Messages the durable consumer has not yet delivered (num_pending); for the auditor's audit, stream"
    " sequences not yet audited",
    ["service", "consumer"],
)
CONSUMER_ACK_PENDING = Gauge(
    "rollbook_consumer_ack_pending", "Messages delivered but not yet acknowledged", ["service", "consumer"]
)
ACTIONS_APPLIED = Counter(
    "rollbook_actions_applied_total",
    "Pod actions carried out (already_applied=true: a redelivery found the action id on the object)",
    ["action", "already_applied"],
)
ACTIONS_FAILED = Counter("rollbook_actions_failed_total", "Pod actions that failed", ["action", "reason"])
PLANNING_SECONDS = Histogram(
    "rollbook_planning_seconds",
    "Time of one planning round (fold, decide, append)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
PLANNING_PART_SECONDS = Counter(
    "rollbook_planning_part_seconds_total",
    "Time planning rounds spent in each part: catch_up (read the workload's new events from the store and "
    "fold them), decide (build the decision input and decide: CPU), append (store the round)",
    ["part"],
)
OBSERVATIONS = Counter(
    "rollbook_observations_total",
    "Watch events seen, by kind and outcome (emitted, ignored, own_status, superseded or rejected)",
    ["kind", "outcome"],
)
KIND_SERVED = Gauge(
    "rollbook_kind_served",
    "1 while the API server serves a kind the service watches, 0 while it answers 404 (CRD not installed)",
    ["service", "kind"],
)
LEADER = Gauge(
    "rollbook_leader",
    "1 while this process holds its service's leader Lease (or leader election is off), 0 on standby",
    ["service"],
)
PARTITIONS_OWNED = Gauge(
    "rollbook_partitions_owned",
    "Bus partitions whose work this process owns by Lease (the planner; docs/services.md)",
    ["service"],
)
WATCH_RESTARTS = Counter(
    "rollbook_watch_restarts_total", "Watch streams restarted, by kind and reason", ["kind", "reason"]
)
RELAY_POSITION = Gauge("rollbook_relay_position", "Global position of the last event the relay published")
RELAY_PUBLISHED = Counter("rollbook_relay_published_total", "Events the relay published (incl. duplicates)")
RELAY_BUS_LOSSES = Counter(
    "rollbook_relay_bus_losses_total",
    "Times the relay found the bus had lost events it had published (stream gone, recreated or shortened)",
    ["reason"],
)
RELAY_STORE_LOST = Counter(
    "rollbook_relay_store_lost_events_total",
    "Events the relay had published that the store no longer holds (a failover to a standby without them)",
)
RELAY_STORE_RESOLVED = Counter(
    "rollbook_relay_store_lost_resolved_total",
    "Published events the store lost, by what became of them: put back from the bus as themselves"
    " (recovered), or named as lost for good (unrecoverable; docs/reliability.md)",
    ["outcome"],
)
RELAY_BUS_GAP = Gauge(
    "rollbook_relay_bus_gap_events",
    "Stored events the bus lost that the relay has yet to publish again (0: the bus holds what it held)",
)
RELAY_REFERENCES = Counter(
    "rollbook_relay_references_total",
    "Events larger than a bus message the relay published as a reference to their stored body",
)
BEFORE_ACTING_PREPARED = Counter(
    "rollbook_executor_prepared_checks_total",
    "Pod actions whose before-acting store read was made in one statement with the batch fetched with them",
)
EXECUTOR_REFUSED = Counter(
    "rollbook_executor_refused_total",
    "Bus messages the executor refused to act on: no such event in the store, or another content",
    ["type"],
)
AUDIT_INGESTED = Counter(
    "rollbook_audit_events_total",
    "Events the auditor saw on the bus, by outcome (present, quarantined, out_of_order)",
    ["outcome"],
)
AUDIT_READS = Counter(
    "rollbook_audit_reads_total",
    "Stream sequences the audit read because the relay beside it did not publish them, by what was there:"
    " event (audited), other (not an event subject), gone (no message any more)",
    ["found"],
)
KUBE_EVENTS = Counter(
    "rollbook_kube_events_total",
    "Kubernetes Events of rollout decisions: created, series (an Event's count updated), counted (within"
    " the rate limit), gone, none",
    ["outcome"],
)
STATUS_WRITES = Counter(
    "rollbook_status_writes_total",
    "Planned workload statuses the executor wrote, or skipped because a later one was planned already",
    ["outcome"],
)
KUBE_API_REQUESTS = Histogram(
    "rollbook_kube_api_request_seconds",
    "Kubernetes API requests by method, and their time (after any client-side throttling)",
    ["client", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
KUBE_API_THROTTLED = Counter(
    "rollbook_kube_api_throttled_seconds_total",
    "Seconds requests waited for the client-side rate limit (kube_api_qps, kube_api_burst)",
    ["client"],
)
KUBE_API_THROTTLED_REQUESTS = Counter(
    "rollbook_kube_api_throttled_requests_total", "Requests that had to wait for the rate limit", ["client"]
)
RETRIES = Counter(
    "rollbook_retries_total",
    "Attempts retried after a transient error (database or bus unreachable), by what was retried",
    ["what"],
)
TASK_FAILURES = Counter(
    "rollbook_task_failures_total", "Background tasks of a service that ended with an error", ["task"]
)
