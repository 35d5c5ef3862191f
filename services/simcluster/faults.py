"""Fault injection for tests, seeded (a given configuration fails the same requests every run):

- before the write: a share of writes is refused with 500/429 and nothing is stored (``write_error_rate``);
- after the write (``lost_response_rate``): the write commits, then the client gets a 500 ``InternalError``
  (``"error"``), a 504 ``Timeout`` (``"timeout"``, what kube-apiserver's request timeout answers), or the
  connection is cut with no answer at all (``"reset"``). A retried create then meets 409 AlreadyExists and
  a retried patch lands twice, as over a real network;
- latency on every request; watch streams cut after N events.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LOST_RESPONSE_MODES = ("error", "timeout", "reset")


@dataclass
class FaultConfig:
    write_error_rate: float = 0.0  # share of POST/PUT/PATCH/DELETE answered with an error instead
    write_error_codes: tuple[int, ...] = (500, 429)  # chosen from in turn, seeded
    latency_seconds: float = 0.0  # added to every API request
    latency_jitter_seconds: float = 0.0  # plus uniform [0, jitter)
    watch_cut_after_events: int = 0  # end every watch stream after this many events (0: never)
    retry_after_seconds: int = 1  # Retry-After sent with 429
    seed: int = 0
    # Resources (plural) whose writes are never failed. Leases by default: a planner or watcher whose Lease
    # renewals fail past its renew deadline stops and exits by design (docs/services.md, "Running several
    # replicas"), which write errors meant for the controllers' own writes should not trigger.
    spared_resources: tuple[str, ...] = ("leases",)
    # Share of the writes that commit whose answer the client never gets right (spared resources too are
    # exempt); applied to writes that succeeded, after the before-the-write errors.
    lost_response_rate: float = 0.0
    lost_response_modes: tuple[str, ...] = LOST_RESPONSE_MODES  # chosen from, seeded


class Faults:
    def __init__(self, config: FaultConfig | None = None) -> None:
        self.configure(config or FaultConfig())
        self.injected_errors = 0
        self.lost_responses = 0

    def configure(self, config: FaultConfig) -> None:
        unknown = set(config.lost_response_modes) - set(LOST_RESPONSE_MODES)
        if unknown or not config.lost_response_modes:
            choices = ", ".join(LOST_RESPONSE_MODES)
            raise ValueError(f"lost_response_modes: {sorted(unknown) or 'empty'}; choose from {choices}")
        self.config = config
        self.rng = random.Random(config.seed)
        # A second stream, so turning lost responses on does not move which writes fail before the write.
        self.after_rng = random.Random(config.seed + 1)

    def write_error(self, path: str = "") -> int | None:
        """The HTTP status to fail this write (to the API ``path``) with, or None to let it through."""
        rate = self.config.write_error_rate
        if rate <= 0 or resource_of(path) in self.config.spared_resources or self.rng.random() >= rate:
            return None
        self.injected_errors += 1
        return self.rng.choice(self.config.write_error_codes)

    def lost_response(self, path: str = "") -> str | None:
        """How the answer to this committed write (to ``path``) is lost, or None to answer it."""
        rate = self.config.lost_response_rate
        if rate <= 0 or resource_of(path) in self.config.spared_resources or self.after_rng.random() >= rate:
            return None
        self.lost_responses += 1
        return self.after_rng.choice(self.config.lost_response_modes)

    def latency(self) -> float:
        jitter = self.config.latency_jitter_seconds
        return self.config.latency_seconds + (self.rng.random() * jitter if jitter > 0 else 0.0)


def resource_of(path: str) -> str:
    """The resource (plural) an API path names: ``/api/v1/namespaces/ns/pods/x`` -> ``pods``,
    ``/apis/coordination.k8s.io/v1/namespaces/ns/leases/x`` -> ``leases``, ``/api/v1/nodes`` -> ``nodes``."""
    parts = [p for p in path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        return rest[2]
    return rest[0] if rest else ""
