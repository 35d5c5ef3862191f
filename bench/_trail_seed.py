"""A long, realistic trail, fast: workloads simulated once through the planner's code path
(services/replay/simulation.py: observations, rounds, requests, outcomes, several rollouts each), then
stamped out as many workloads of other names, ids and times, interleaved as concurrent workloads
interleave in a real log.

A template is one simulated workload's events with every name, UUID and timestamp in its payloads turned
into a ``str.format`` field, so a copy costs one ``format_map`` per event. A copy's UUIDs are the
template's hashed with the workload number (distinct per workload, the same references between events:
causation ids, action ids, uids), its times the template's shifted by the workload's offset. The rows are
the columns ``EventStore.import_events`` copies (the payload as the store encodes it), so the database
writes them as it writes any append: the chain trigger hashes every row.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import random
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import msgspec

from services.infra.store import IMPORT_COLUMNS
from services.model.events import Envelope
from services.replay.simulation import T0, WorkloadSimulation

__all__ = ["T0"]

# The columns of the store's COPY (EventStore.import_events), in its order.
COLUMNS = IMPORT_COLUMNS
Row = tuple[str, str, int, str, int, datetime, str | None, str | None, str]

NAMESPACE, NAME = "zzns", "zzwl"  # the template's names: tokens found nowhere else in its events
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"
_FIELD = re.compile(f"({_UUID})|({_TIME})|({NAMESPACE})|({NAME})")
_encoder = msgspec.json.Encoder()  # what the store writes (services/infra/store.py, _payload_encoder)

# (replicas, rollouts after the first scale-out, weight): most CloneSets small, a few large.
MIX: tuple[tuple[int, int, int], ...] = ((3, 2, 30), (10, 3, 40), (30, 4, 20), (100, 3, 8), (200, 2, 2))
ROLLOUT_GAP_SECONDS = 120.0  # between a template's template changes


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Template:
    replicas: int
    rollouts: int
    uuids: list[bytes]  # the template's UUIDs, field u<i>
    times: list[datetime]  # its timestamps, field t<i>
    rows: list[tuple[str, str, int, str, int, datetime, str | None, str | None, str]]
    # per event: event_id field, stream format, version, type, schema, occurred_at, causation field,
    # correlation format, payload format
    # per round that started a rollout: its event_id field and its stored input's format; the round's
    # payload names the input's SHA-256 as field h<i> (a copy's input differs from the template's)
    inputs: list[tuple[str, str]]

    @property
    def events(self) -> int:
        return len(self.rows)


def simulate(replicas: int, rollouts: int) -> tuple[list[Envelope], dict[uuid.UUID, bytes]]:
    """One CloneSet scaled out to ``replicas`` and rolled in place ``rollouts`` times, as recorded, and the
    inputs of the rounds that started its rollouts, as the planner stores them."""
    sim = WorkloadSimulation(NAMESPACE, NAME, replicas=replicas, start=T0)
    spec = copy.deepcopy(sim.model.cloneset)
    for k in range(2, rollouts + 1):  # the simulation's own rollout is the first
        spec = copy.deepcopy(spec)
        spec["spec"]["template"]["spec"]["containers"][0]["image"] = f"nginx:1.{k}"
        spec["metadata"]["generation"] = k + 1
        sim.model.schedule_spec(30.0 + ROLLOUT_GAP_SECONDS * k, spec)
    return sim.run(limit=10_000_000), sim.rollout_inputs


def template(replicas: int, rollouts: int) -> Template:
    events, inputs = simulate(replicas, rollouts)
    uuids: dict[str, int] = {}
    times: dict[str, int] = {}

    def fields(text: str) -> str:
        def field(match: re.Match[str]) -> str:
            found, moment, namespace, _name = match.groups()
            if found is not None:
                return "{u%d}" % uuids.setdefault(found, len(uuids))  # noqa: UP031 - a format field
            if moment is not None:
                # Only a time that prints back the same is shifted; any other is left as recorded.
                if _iso(datetime.fromisoformat(moment)) != moment:
                    return moment
                return "{t%d}" % times.setdefault(moment, len(times))  # noqa: UP031
            return "{ns}" if namespace is not None else "{wl}"

        return _FIELD.sub(field, text.replace("{", "{{").replace("}", "}}"))

    digests = {round_id: hashlib.sha256(data).hexdigest() for round_id, data in inputs.items()}
    order = list(inputs)

    def payload(e: Envelope) -> str:
        text = fields(_encoder.encode(e.payload).decode())
        if e.event_id in digests:  # the copy's round names its copy's input
            text = text.replace(digests[e.event_id], "{h%d}" % order.index(e.event_id))  # noqa: UP031
        return text

    rows = [
        (
            fields(str(e.event_id)),
            fields(e.stream),
            e.stream_version,
            e.type,
            e.schema_version,
            e.occurred_at,
            None if e.causation_id is None else fields(str(e.causation_id)),
            None if e.correlation_id is None else fields(e.correlation_id),
            payload(e),
        )
        for e in events
    ]
    return Template(
        replicas,
        rollouts,
        [uuid.UUID(u).bytes for u in uuids],
        [datetime.fromisoformat(t) for t in times],
        rows,
        [(fields(str(round_id)), fields(inputs[round_id].decode())) for round_id in order],
    )


def templates() -> list[Template]:
    return [template(replicas, rollouts) for replicas, rollouts, _ in MIX]


@dataclass(frozen=True)
class Workload:
    number: int
    template: int  # index into templates()
    namespace: str
    name: str
    offset: float  # seconds after T0 its template's events are moved to


InputRow = tuple[str, bytes]  # a round's event id, its stored input (``round_inputs``)


def stamp(t: Template, w: Workload) -> tuple[list[Row], list[InputRow]]:
    """The template's events as workload ``w``'s, and the inputs of its rounds that started rollouts."""
    salt = w.number.to_bytes(8, "big")
    shift = timedelta(seconds=w.offset)
    mapping: dict[str, str] = {"ns": w.namespace, "wl": w.name}
    for i, raw in enumerate(t.uuids):
        mapping[f"u{i}"] = str(uuid.UUID(bytes=hashlib.md5(raw + salt, usedforsecurity=False).digest()))
    for i, moment in enumerate(t.times):
        mapping[f"t{i}"] = _iso(moment + shift)
    inputs: list[InputRow] = []
    for i, (round_id, data) in enumerate(t.inputs):
        stamped = data.format_map(mapping).encode()
        mapping[f"h{i}"] = hashlib.sha256(stamped).hexdigest()
        inputs.append((round_id.format_map(mapping), stamped))
    rows = [
        (
            event_id.format_map(mapping),
            stream.format_map(mapping),
            version,
            kind,
            schema,
            occurred + shift,
            None if causation is None else causation.format_map(mapping),
            None if correlation is None else correlation.format_map(mapping),
            payload.format_map(mapping),
        )
        for event_id, stream, version, kind, schema, occurred, causation, correlation, payload in t.rows
    ]
    return rows, inputs


def plan_workloads(count: int, seed: int, *, concurrent: int, spacing: float) -> list[Workload]:
    """``count`` workloads of the mix, in waves of ``concurrent`` that overlap in time (their events
    interleave in the log), each wave ``spacing`` seconds after the one before; 1 namespace per 20."""
    rng = random.Random(seed)
    weights = [weight for _, _, weight in MIX]
    planned = []
    for number in range(count):
        wave = number // concurrent
        planned.append(
            Workload(
                number=number,
                template=rng.choices(range(len(MIX)), weights)[0],
                namespace=f"team-{number // 20}",
                name=f"svc-{number}",
                offset=wave * spacing + rng.uniform(0, spacing),
            )
        )
    return planned


_TEMPLATES: list[Template] = []


def wave_rows(workloads: list[Workload]) -> tuple[list[Row], list[InputRow]]:
    """The events of workloads that run at the same time, in time order (each workload's own order kept:
    a merge, never a sort that could swap two events of one stream), and their rounds' stored inputs."""
    if not _TEMPLATES:
        _TEMPLATES.extend(templates())
    stamped = [stamp(_TEMPLATES[w.template], w) for w in workloads]
    rows = list(heapq.merge(*(r for r, _ in stamped), key=lambda row: row[5]))
    return rows, [i for _, inputs in stamped for i in inputs]


def events_per_workload() -> float:
    """The mix's mean events per workload (from the templates, simulated in this process)."""
    if not _TEMPLATES:
        _TEMPLATES.extend(templates())
    total = sum(weight for _, _, weight in MIX)
    return sum(t.events * weight for t, (_, _, weight) in zip(_TEMPLATES, MIX, strict=True)) / total
