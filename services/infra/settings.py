"""The one settings object. Every service and command reads configuration from here, nowhere else.

Values come from environment variables prefixed ``ROLLBOOK_``. An empty database or NATS URL means
"start the embedded server" (see ``services.infra.embedded``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    # Postgres URL (postgresql://user@host:port/db). Empty: start embedded Postgres under data_dir.
    database_url: str = ""
    # NATS URL (nats://host:port), or several servers of one cluster, comma-separated (the client fails
    # over between them). Empty: start an embedded nats-server under data_dir.
    nats_url: str = ""
    # Where embedded servers keep their data, and where `rollbook simcluster` writes its kubeconfig.
    data_dir: str = ".rollbook"
    # Kubeconfig file the services use to reach Kubernetes. Empty: in-cluster config, then ~/.kube/config.
    kubeconfig: str = ""
    # JetStream stream holding every rollbook subject. Tests set a unique one per run.
    stream_name: str = "ROLLBOOK"
    # First token of every subject (`<prefix>.ev.…`, `<prefix>.dlq.…`). Tests set a unique one per run.
    subject_prefix: str = "rollbook"
    # Deliveries before a message that cannot be handled is moved to the dead-letter subject.
    max_deliver: int = 5
    # Events are spread over this many bus partitions by workload (crc32 of Kind/namespace/name); every
    # publisher and consumer of one stream must agree on it. See docs/bus.md. Planner replicas share the
    # partitions out (one Lease each), so it bounds how many planners work at once.
    bus_partitions: int = 16
    # Member Leases planner replicas claim to count each other (rollbook-planner-member-<k>, k below
    # this), so at most this many planner replicas work at once; one more waits, not ready, for a free
    # slot. deploy/base/rbac.yaml names every partition and member Lease: keep it in step with this and
    # bus_partitions (docs/services.md).
    partition_member_slots: int = 16
    # Seconds JetStream remembers an event_id (Nats-Msg-Id) to drop a republished event.
    bus_dedup_window: int = 600
    # Replicas of rollbook's JetStream streams (their consumers inherit it): 3 on a 3-node cluster, so
    # losing a node loses nothing and a new leader takes over (docs/reliability.md). At most the
    # cluster's size; 1 for a single server.
    bus_replicas: int = 1
    # Emulate/expect the second seed's extended in-place kubelet (env and volume changes in place,
    # probe changes with no restart). Off by default: stock Kubernetes refuses those changes.
    extended_inplace: bool = False
    # Namespaces a cluster-wide SidecarSet skips (comma-separated). The seed's default; set it empty to
    # behave like OpenKruise >= 1.3, which excludes none (docs/sidecarset.md).
    sidecarset_excluded_namespaces: str = "kube-system,kube-public"
    # OpenKruise's EnableSortSidecarContainerByName feature gate (off there by default): the sidecar
    # containers of all SidecarSets injecting into a pod are sorted by name before placement.
    sidecarset_sort_containers_by_name: bool = False
    # Seconds the webhook waits for the event store when it reads the recorded revisions of a SidecarSet
    # that pins one (injectionStrategy.revision). Keep it well below the webhook's timeoutSeconds (5 in
    # deploy/): the API server gives up on the whole admission after that.
    sidecarset_revisions_timeout: float = 2.0
    # What the webhook does with a pod matched by a pinning SidecarSet whose revisions cannot be read
    # (the event store is down and this process has not read them, or not the pinned one): skip (admit
    # the pod without that SidecarSet's sidecars, as a webhook outage or the not-yet-synced webhook
    # would), latest (inject the SidecarSet's latest spec instead of the pinned revision) or refuse
    # (OpenKruise's answer when its API server cannot be read). skip and latest add a warning to the
    # admission and count it (rollbook_webhook_revisions_unavailable). docs/sidecarset.md.
    sidecarset_revisions_unavailable: str = "skip"
    # Host the services' /healthz, /readyz and /metrics endpoints listen on.
    http_host: str = "127.0.0.1"
    # Base port of those endpoints (0 = pick free ports).
    http_port: int = 0
    # Seconds between checkpoints of the event hash chain, taken by the auditor when the log moved
    # (database, JetStream stream <stream_name>_CHECKPOINTS, and checkpoint_file if set). 0 turns them off.
    checkpoint_interval: float = 60.0
    # Append-only JSON-lines file the auditor also writes checkpoints to (empty: none). docs/replay.md.
    checkpoint_file: str = ""
    # Largest event the watcher stores, in bytes (the encoded ObjectObserved). An object beyond it is
    # recorded as ObservationRejected instead. Events larger than a NATS message (max_payload, 1 MiB by
    # default) still travel: the bus carries a reference and consumers read them from the store.
    max_event_bytes: int = 8 * 1024 * 1024
    # Python log level: DEBUG, INFO, WARNING, ERROR.
    log_level: str = "INFO"
    # Run the watcher's work only while holding its Lease (rollbook-watcher; services/infra/leader.py), so
    # several replicas can run: one works, the others stand by; and each planner's work only on the bus
    # partitions whose Leases it holds (rollbook-planner-p<N>; services/infra/partition_leases.py), so
    # every planner replica works on its share. Turn it off only where exactly one of each runs and no
    # Lease API is reachable.
    leader_election: bool = True
    # Namespace of those Leases.
    leader_election_namespace: str = "default"
    # Whole seconds a standby waits after the holder's last renewal before it takes the Lease over.
    leader_lease_duration: int = 15
    # Seconds the holder keeps trying to renew before it gives up and stops working (< lease duration).
    leader_renew_deadline: float = 10.0
    # Seconds between the holder's renewals and between a standby's attempts to acquire (>= 1).
    leader_retry_period: float = 2.0
    # This process's name in the Leases it holds, stable across restarts of the same replica and never
    # shared by two live processes: the pod's name in Kubernetes (downward API, deploy/base/services.yaml),
    # `<supervisor>/<child>` under `rollbook up` (set by the supervisor). A restarted process finding the
    # Lease held under its own name takes it at once instead of waiting for it to expire. Empty: a name
    # of its own, `<hostname>/<pid>/<random>` (docs/services.md, "Running several replicas").
    instance: str = ""
    # Pod actions one executor carries out at once (different pods in parallel; one pod's in order).
    # docs/performance.md.
    executor_concurrency: int = 64
    # Kubernetes Events (events.k8s.io/v1) of a CloneSet or SidecarSet: at most one write per object and
    # reason per this many seconds; repeats within it are counted into the Event's series (docs/services.md).
    kube_event_interval: float = 30.0
    # Client-side rate limit of each process toward the Kubernetes API, as client-go's QPS: requests per
    # second, shared by every request the process sends (leader election has its own). <= 0: no limit.
    kube_api_qps: float = 100.0
    # Requests the rate limit lets through at once after a quiet spell (client-go's Burst): the size of
    # the token bucket that kube_api_qps refills. docs/performance.md.
    kube_api_burst: int = 200
    # Which CloneSets and SidecarSets rollbook acts on: all (every one not labelled rollbook.io/manage=false;
    # a cluster where rollbook is the only CloneSet controller) or labelled (only those labelled
    # rollbook.io/manage=true, plus CloneSets in manage_namespaces). all is refused, as labelled, when
    # kruise-manager is found at start. docs/install.md, "Which objects rollbook manages".
    manage: str = "all"
    # Namespaces (comma-separated) whose CloneSets count as opted in when manage is labelled.
    manage_namespaces: str = ""
    # Shadow mode (`rollbook up --shadow`): act on nothing; the planner records, for every CloneSet, the pod
    # actions its real controller took and what rollbook would have done (docs/shadow.md). One CloneSet
    # alone: label it rollbook.io/manage=shadow.
    shadow: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in msgspec.structs.fields(cls):
            raw = env.get("ROLLBOOK_" + field.name.upper())
            if raw is None:
                continue
            values[field.name] = _convert(field.name, raw, field.type)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).resolve()


def _convert(name: str, raw: str, typ: object) -> object:
    if typ is bool:
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(f"ROLLBOOK_{name.upper()}: expected a boolean, got {raw!r}")
    if typ is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"ROLLBOOK_{name.upper()}: expected a number, got {raw!r}") from None
    if typ is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"ROLLBOOK_{name.upper()}: expected an integer, got {raw!r}") from None
    return raw
