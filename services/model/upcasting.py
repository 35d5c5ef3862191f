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

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from services.model.actions import ActionKind
from services.model.events import SCHEMA_VERSIONS, Event

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
