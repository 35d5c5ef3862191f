"""Upcasting: events stored with an older ``schema_version`` are read through upcasters, so old rollouts
replay after the event schema evolves (docs/replay.md, "Upcasting").

An upcaster turns the JSON payload of one event type from version N into version N+1 (a plain dict ->
dict function: rename a field, split one, fill a new required field from what the old one said). Reading
chains them up to the type's current version, then decodes into the current Struct. Stored rows are never
rewritten: the store keeps what was recorded (the hash chain covers it), and the reader adapts it.

Adding a version of an event type:
  1. change the Struct in services/model/events.py and raise its entry in ``SCHEMA_VERSIONS`` there;
  2. register ``@upcaster("TypeName", from_version=N)`` here for the N -> N+1 step;
  3. add a test that stores a version-N row and reads it (tests/replay/test_upcasting.py shows how).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from services.model.actions import ActionKind
from services.model.events import SCHEMA_VERSIONS, Envelope, Event, RolloutStarted
from services.model.streams import ROLLOUT_SEQUENCE_MARK, sequenced_rollout_id

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# (event type, from_version) -> the step to from_version + 1. Production upcasters register here.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, *, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(function: Upcaster) -> Upcaster:
        UPCASTERS[(event_type, from_version)] = function
        return function

    return register


class UpcastError(ValueError):
    """A stored event cannot be read by this code: no upcaster path, or a version from the future."""


class PayloadDecoder:
    """Decodes stored payload JSON into the event union, upcasting rows of older schema versions.

    The common case (a row at its type's current version) is one msgspec decode; only older rows take the
    dict path through their upcasters."""

    def __init__(
        self,
        union: Any = Event,
        versions: Mapping[str, int] = SCHEMA_VERSIONS,
        upcasters: Mapping[tuple[str, int], Upcaster] | None = None,
    ) -> None:
        self.versions = dict(versions)
        self.upcasters = UPCASTERS if upcasters is None else dict(upcasters)
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(union)
        # The payload of a row at its type's current version (``versions.get(type, 1)``): one msgspec
        # decode, no upcasting. Bulk readers check the version themselves and call this directly.
        self.decode_current: Callable[[bytes | str], Any] = self._decoder.decode
        self._convert_type = union
        self._raw = msgspec.json.Decoder(dict[str, Any])

    def decode(self, event_type: str, schema_version: int, payload: bytes | str) -> Any:
        current = self.versions.get(event_type, 1)
        if schema_version == current:
            return self._decoder.decode(payload)
        if schema_version > current:
            raise UpcastError(
                f"{event_type} was stored with schema_version {schema_version}, newer than this code's"
                f" {current}: upgrade rollbook to read it"
            )
        data = self._raw.decode(payload)
        for version in range(schema_version, current):
            step = self.upcasters.get((event_type, version))
            if step is None:
                raise UpcastError(
                    f"no upcaster for {event_type} from schema_version {version} to {version + 1}"
                )
            data = step(data)
            data["type"] = event_type
        return msgspec.convert(data, self._convert_type)


@upcaster("PodActionRequested", from_version=1)
def _workload_action_target(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: an action on the workload itself (setPodsToDelete) named its CloneSet in ``pod``; v2 names
    it in ``workload`` and leaves ``pod`` empty. Pod actions are unchanged."""
    if data.get("action") != ActionKind.SET_PODS_TO_DELETE:
        return data
    return {**data, "pod": "", "workload": data.get("pod", "")}


DEFAULT_DECODER = PayloadDecoder()


# --- Rollout ids recorded before rollouts were numbered ------------------------------------------------


class RolloutSequence:
    """Numbers the rollout ids of one stream as it is read in order, from its first event.

    Since CloneSet rules 14 (SidecarSet rules 4) a rollout id ends in ``#<sequence>``, the number of
    ``RolloutStarted`` events of its stream so far (services/model/streams.py). Events recorded before
    carry ``<ns>/<name>@<revision>``, the same id for a rollback and the rollout it returns to. No single
    event says which rollout it belongs to, so this upcaster is not a per-row one: it counts the stream's
    ``RolloutStarted`` events as they pass and gives each old id the sequence in force at its position,
    exactly as the planner numbers rollouts now and as the SQL function ``rollout_of`` (migration 0018)
    does. A numbered id passes unchanged."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        self.started = 0

    def payload(self, payload: Any) -> Any:
        if isinstance(payload, RolloutStarted):
            self.started += 1
        return numbered(payload, self.started)

    def correlation(self, correlation_id: str | None) -> str | None:
        if correlation_id is None or "@" not in correlation_id or ROLLOUT_SEQUENCE_MARK in correlation_id:
            return correlation_id  # not a rollout id (a webhook's admission uid), or numbered
        return sequenced_rollout_id(correlation_id, self.started)


def numbered(payload: Any, started: int) -> Any:
    """``payload`` with its rollout id numbered ``started`` (the stream's RolloutStarted events up to and
    including it) if it was recorded before rollouts were numbered; otherwise ``payload`` itself."""
    rollout = getattr(payload, "rollout_id", None)
    if rollout is None or ROLLOUT_SEQUENCE_MARK in rollout:
        return payload
    return msgspec.structs.replace(payload, rollout_id=sequenced_rollout_id(rollout, started))


def rollout_stream_of(stream: str) -> str | None:
    """The stream whose ``RolloutStarted`` events number the rollouts an event of ``stream`` belongs to: a
    decisions or shadow stream numbers its own; an executor's outcome belongs to its workload's decisions;
    observations name a revision, not a rollout (None)."""
    if stream.endswith("/observed"):
        return None
    if stream.endswith("/actions"):
        base = stream[: -len("/actions")]
        return f"{base}/decisions" if base.startswith("SidecarSet/") else base
    return stream


def number_rollouts(envelopes: Iterable[Envelope]) -> list[Envelope]:
    """Envelopes of whole streams (each from its first event, in global order) with every rollout id and
    rollout correlation id numbered (``RolloutSequence``); events already numbered are returned as they
    are, so a trail recorded by this rollbook goes through unchanged."""
    sequences: dict[str, RolloutSequence] = {}
    result: list[Envelope] = []
    for envelope in envelopes:
        key = rollout_stream_of(envelope.stream)
        if key is None:
            result.append(envelope)
            continue
        sequence = sequences.get(key)
        if sequence is None:  # not setdefault: that would make a sequence for every event
            sequence = sequences[key] = RolloutSequence()
        if key == envelope.stream:
            payload = sequence.payload(envelope.payload)
        else:
            payload = envelope.payload  # an outcome: its request carries the rollout id
        correlation = sequence.correlation(envelope.correlation_id)
        if payload is envelope.payload and correlation == envelope.correlation_id:
            result.append(envelope)
        else:
            result.append(msgspec.structs.replace(envelope, payload=payload, correlation_id=correlation))
    return result
