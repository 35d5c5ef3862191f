"""When the audit settles a relayed message without writing: only for the very event stored at the
position the message carries."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from services.auditor.service import KnownStored, relayed_position, stored_as_relayed
from services.infra.store import EventIdentity
from tests.infra.store_helpers import pod_action

EVENT = pod_action("CloneSet/default/web", 3)
STORED = EventIdentity(41, EVENT.event_id, EVENT.stream, 3)


@pytest.mark.parametrize(
    ("stored", "position", "settled"),
    [
        (STORED, 41, True),
        (None, 41, False),  # not known to be stored
        (STORED, 42, False),  # stored, but the message claims another position
        (STORED._replace(stream_version=4), 41, False),  # the stored event holds another version
        (STORED._replace(stream="CloneSet/default/other"), 41, False),
        (STORED._replace(event_id=uuid.uuid4()), 41, False),  # another event holds that position
    ],
)
def test_stored_as_relayed(stored: EventIdentity | None, position: int, settled: bool) -> None:
    assert stored_as_relayed(stored, EVENT, position) is settled


def test_a_different_event_with_the_same_id_is_not_settled() -> None:
    other_slot = msgspec.structs.replace(EVENT, stream_version=9)
    assert not stored_as_relayed(STORED, other_slot, 41)


@pytest.mark.parametrize(
    ("headers", "position"),
    [
        ({"Rollbook-Position": "17"}, 17),
        ({"Nats-Msg-Id": "x"}, None),  # published directly
        (None, None),
        ({"Rollbook-Position": ""}, None),
        ({"Rollbook-Position": "-3"}, None),
        ({"Rollbook-Position": "12a"}, None),
    ],
)
def test_relayed_position(headers: dict[str, str] | None, position: int | None) -> None:
    assert relayed_position(headers) == position


def test_known_stored_keeps_the_newest_and_gives_each_identity_once() -> None:
    known = KnownStored(capacity=2)
    identities = [EventIdentity(p, uuid.uuid4(), "CloneSet/default/web", p) for p in (1, 2, 3)]
    for identity in identities:
        known.add(identity)
    assert len(known) == 2
    assert known.take(identities[0].event_id) is None  # the oldest went first
    assert known.take(identities[2].event_id) == identities[2]
    assert known.take(identities[2].event_id) is None
