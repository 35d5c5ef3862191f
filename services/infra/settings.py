"""The one settings object. Every service and command reads configuration from here, nowhere else.

Values come from environment variables prefixed ``ROLLBOOK_``. An empty database or NATS URL means
"start the embedded server" (see ``services.infra.embedded``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec


class SettingsError(ValueError):
    """A setting's value is not one rollbook can run with; the message names the variable."""


# The pace interval's ceiling: a cycle of the planner, the watcher or the relay waits at most this long,
# which also bounds what pacing adds to a shutdown (a value meant as milliseconds is refused, not obeyed).
MAX_PACE_INTERVAL = 1.0
EVENT_LOOPS = ("uvloop", "asyncio")  # ROLLBOOK_EVENT_LOOP


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    # Postgres URL (postgresql://user@host:port/db). Empty: start embedded Postgres under data_dir.
    database_url: str = ""
    # Postgres URL the migrations run with (`rollbook db upgrade`, embedded start, deploy/'s Job): a login
    # that may act as the database's owner role (docs/security-database.md). Empty: database_url.
    database_owner_url: str = ""
    # Postgres URL read commands, `rollbook ui` and the auditor's /history use, as the reader role; may
    # name a streaming standby, so audit queries never load the primary (docs/reliability.md).
    # Empty: database_url (the session then acts as the reader role when that login may).
    database_reader_url: str = ""
    # The webhook's Postgres URL as its own login, read only by `rollbook db upgrade --set-passwords`
    # (deploy/'s migration Job) to give that login the password in it; the webhook itself connects with
    # database_url from its own Secret.
    database_webhook_url: str = ""
    # NATS URL (nats://host:port), or several servers of one cluster, comma-separated (the client fails
    # over between them). Empty: start an embedded nats-server under data_dir.
    nats_url: str = ""
    # Directory of this process's NATS password, one file per identity, named after it (auditor, planner,
    # executor, operator, admin): each process connects as its own identity, whose permissions limit it to
    # the subjects it needs (docs/security-bus.md). Empty: the one `rollbook up` makes under data_dir for
    # its embedded nats-server; none against a configured NATS URL (a server without authentication).
    nats_credentials_dir: str = ""
    # CA bundle (PEM) the services verify the NATS server with; with the two below, the embedded
    # nats-server requires TLS on client and route connections and a client certificate signed by it.
    nats_tls_ca: str = ""
    # Client certificate (PEM) the services present to NATS (and the embedded server's own certificate).
    nats_tls_cert: str = ""
    # Private key (PEM) of nats_tls_cert.
    nats_tls_key: str = ""
    # Where embedded servers keep their data, and where `rollbook simcluster` writes its kubeconfig.
    data_dir: str = ".rollbook"
    # Kubeconfig file the services use to reach Kubernetes. Empty: in-cluster config, then ~/.kube/config.
    kubeconfig: str = ""
    # Folder of the in-cluster ServiceAccount token and CA (token, ca.crt), read when kubeconfig is empty.
    # Another path for a token projected elsewhere, or for simcluster's process runtime, which maps mount
    # paths named in env values (docs/simcluster.md).
    service_account_dir: str = "/var/run/secrets/kubernetes.io/serviceaccount"
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
    # How a bearer token for trail data over HTTP (the auditor's /history, `rollbook ui` beyond the
    # loopback) is checked: token (the content of api_token_file) or kubernetes (TokenReview, then RBAC's
    # `get` on history.rollbook.io by SubjectAccessReview). docs/security.md.
    api_auth: str = "token"
    # File of the token for api_auth=token (empty: <data_dir>/api-token, generated 0600 at first use;
    # `rollbook api-token` prints it).
    api_token_file: str = ""
    # Deepest JSON nesting of an object the watcher records (levels of objects and arrays); a deeper one
    # is recorded as ObservationRejected. Far below what the JSON decoders of every reader can take.
    max_object_depth: int = 200
    # Seconds between signed checkpoints of the event log (Merkle tree head, Ed25519), taken by the auditor
    # when the log moved: database, JetStream stream <stream_name>_CHECKPOINTS, audit_checkpoint_dir and
    # checkpoint_file if set (docs/audit.md). 0 turns them off.
    checkpoint_interval: float = 60.0
    # Also sign a checkpoint as soon as this many events arrived since the last one, before the interval
    # is up (0: by time only).
    checkpoint_every_events: int = 10000
    # Append-only JSON-lines file the auditor also writes checkpoints to (empty: none). docs/audit.md.
    checkpoint_file: str = ""
    # Directory the auditor writes each signed checkpoint to, one read-only file each, never overwritten
    # (and the public key); one directory per log. Empty: <data_dir>/audit/checkpoints when the data dir
    # holds the embedded Postgres, else none. "none": no directory (deploy/ relies on JetStream).
    # docs/audit.md.
    audit_checkpoint_dir: str = ""
    # The auditor's Ed25519 signing key (a C2SP signer key, PRIVATE+KEY+...). Empty:
    # <data_dir>/audit/signing.key, created (mode 0600) if missing; a file named here must exist. Never in
    # the database. docs/audit.md.
    audit_key_file: str = ""
    # Key name (and checkpoint origin) of a signing key the auditor creates.
    audit_key_name: str = "rollbook"
    # Public keys `rollbook audit verify` trusts (C2SP verifier keys <name>+<id>+<key>, or files holding
    # one a line), comma-separated. Empty: the public half of audit_key_file if readable. Never taken from
    # the database alone.
    audit_public_key: str = ""
    # Seconds the newest signed checkpoint may lag behind the log before `rollbook audit verify` reports
    # it stale (events after it are not yet protected).
    audit_max_checkpoint_age: float = 900.0
    # Processes `rollbook audit verify` reads and checks the log with, each a range between signed
    # checkpoints over its own connection (0: one per CPU this process may use, at most 8; 1: one range,
    # in this process).
    audit_verify_processes: int = 0
    # Largest event the watcher stores, in bytes (the encoded ObjectObserved). An object beyond it is
    # recorded as ObservationRejected instead. Events larger than a NATS message (max_payload, 1 MiB by
    # default) still travel: the bus carries a reference and consumers read them from the store.
    max_event_bytes: int = 8 * 1024 * 1024
    # File holding this installation's redaction key (at least 16 bytes; a Secret mounted as a file in
    # deploy/ and docker-compose.yml). Every recorded env value, last-applied annotation and deny-listed
    # annotation/label value is an HMAC-SHA256 digest under it (docs/events.md, "Redaction"). Empty:
    # <data_dir>/redaction.key, generated (mode 0600) when missing. Keep it: another key gives other digests.
    redaction_key_file: str = ""
    # Annotation keys, label keys and env names (shell globs, comma-separated, case-insensitive) whose
    # values are recorded only as digests (every literal env value is digested whatever its name).
    redact_deny: str = "*TOKEN*,*PASSWORD*,*PASSWD*,*SECRET*,*KEY*,*CREDENTIAL*"
    # Seconds JetStream keeps an event on rollbook's stream (the event store is the record; a consumer
    # further behind reads from it: docs/bus.md, "Retention"). 0: no age limit.
    bus_max_age: float = 7 * 24 * 3600.0
    # Bytes rollbook's JetStream stream holds at most; the oldest messages go first. -1: no size limit.
    bus_max_bytes: int = 1024 * 1024 * 1024
    # Calendar months each partition of the events table covers (1, 2, 3, 4, 6 or 12): the unit
    # `rollbook archive --before DATE` drops. The auditor keeps two partitions ready ahead of now; rows
    # nothing covers land in the default partition. docs/retention.md.
    events_partition_months: int = 1
    # Python log level: DEBUG, INFO, WARNING, ERROR.
    log_level: str = "INFO"
    # The event loop every command runs on: uvloop (where it is installed, else asyncio's own) or asyncio.
    # uvloop costs each service less CPU (docs/performance.md); asyncio is the way back without reinstalling.
    event_loop: str = "uvloop"
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
    # Shortest time in seconds between the starts of two planning rounds of one workload, two watcher
    # appends and two relay reads: what arrives sooner waits out the rest and goes with what else arrives
    # meanwhile (a lone event after a quiet spell does not wait). Cuts the CPU each pod costs where events
    # trickle in; adds at most this much to each hop. 0: none. docs/performance.md.
    pace_interval: float = 0.05
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
    # The flight recorder for Deployments and StatefulSets, which rollbook never drives (docs/kinds.md): the
    # watcher records their revisions, rollouts, steps and pod actions. `off`; `label` (those labelled
    # rollbook.io/record=true); `all`; or comma-separated namespaces (theirs, and labelled ones anywhere).
    record: str = "off"

    def __post_init__(self) -> None:
        if self.event_loop not in EVENT_LOOPS:
            wanted = " or ".join(EVENT_LOOPS)
            raise SettingsError(f"ROLLBOOK_EVENT_LOOP: expected {wanted}, got {self.event_loop!r}")
        if not (math.isfinite(self.pace_interval) and 0 <= self.pace_interval <= MAX_PACE_INTERVAL):
            wanted = f"seconds from 0 to {MAX_PACE_INTERVAL:g}"
            raise SettingsError(f"ROLLBOOK_PACE_INTERVAL: expected {wanted}, got {self.pace_interval!r}")

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

    def url_for(self, duty: str) -> str:
        """The Postgres URL of a duty (services/infra/db_roles.py): owner, reader, else the services'."""
        if duty == "owner":
            return self.database_owner_url or self.database_url
        if duty == "reader":
            return self.database_reader_url or self.database_url
        return self.database_url

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
        raise SettingsError(f"ROLLBOOK_{name.upper()}: expected a boolean, got {raw!r}")
    if typ is float:
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"ROLLBOOK_{name.upper()}: expected a number, got {raw!r}") from None
    if typ is int:
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"ROLLBOOK_{name.upper()}: expected an integer, got {raw!r}") from None
    return raw
