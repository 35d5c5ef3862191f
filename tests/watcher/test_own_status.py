"""The watcher's two tests of a CloneSet status write it may leave unstored, as tables: which fields
rollbook's executor changed by the managedFields (``own_status_write``), and whether those counts are a
status rollbook planned (``carried_plan``): a field manager's name is whatever the writer claims."""

from __future__ import annotations

from typing import Any

import pytest

from services.kinds.cloneset import POD_COUNTS
from services.model.streams import STATUS_FIELD_MANAGER
from services.watcher.objects import carried_plan, comparable, own_status_write

OWN = STATUS_FIELD_MANAGER
STEADY = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updateRevision": "r1"}


def written(status: dict[str, Any], *owners: tuple[str, str | None, tuple[str, ...]]) -> dict[str, Any]:
    """A CloneSet with ``status``, whose managedFields give each (manager, subresource) its status fields."""
    managed = [
        {
            "manager": manager,
            "operation": "Update",
            **({"subresource": subresource} if subresource else {}),
            "fieldsV1": {"f:status": {f"f:{field}": {} for field in fields}},
        }
        for manager, subresource, fields in owners
    ]
    return {
        "kind": "CloneSet",
        "metadata": {"name": "web", "resourceVersion": "7", "managedFields": managed},
        "spec": {"replicas": 2},
        "status": status,
    }


FLAPPED = {**STEADY, "readyReplicas": 1, "availableReplicas": 1}
COUNTS_OURS = (OWN, "status", ("readyReplicas", "availableReplicas"))


@pytest.mark.parametrize(
    ("after", "owners", "changed"),
    [
        # rollbook's executor wrote both changed counts through the status subresource.
        (FLAPPED, [COUNTS_OURS], {"readyReplicas", "availableReplicas"}),
        # another manager also claims one of them (it wrote it last on a real API server): not ours.
        (FLAPPED, [COUNTS_OURS, ("kruise-manager", "status", ("readyReplicas",))], set()),
        # written by rollbook's name but not through the status subresource.
        (FLAPPED, [(OWN, None, ("readyReplicas", "availableReplicas"))], set()),
        # a changed count nobody of rollbook's name owns.
        (FLAPPED, [(OWN, "status", ("readyReplicas",))], set()),
        # a change beside the counts (the planner reads revisions back).
        ({**FLAPPED, "updateRevision": "r2"}, [(OWN, "status", (*COUNTS_OURS[2], "updateRevision"))], set()),
        # a count removed is nobody's write.
        ({k: v for k, v in STEADY.items() if k != "readyReplicas"}, [COUNTS_OURS], set()),
        # nothing changed.
        (STEADY, [COUNTS_OURS], set()),
    ],
)  # fmt: skip
def test_own_status_write_names_the_counts_rollbooks_executor_changed(
    after: dict[str, Any], owners: list[tuple[str, str | None, tuple[str, ...]]], changed: set[str]
) -> None:
    before = comparable(written(STEADY, ("kruise-manager", "status", tuple(STEADY))))
    obj = written(after, *owners)
    assert own_status_write(before, comparable(obj), obj, POD_COUNTS) == changed


def test_own_status_write_is_nothing_for_a_spec_change_or_no_counted_fields() -> None:
    before = comparable(written(STEADY))
    obj = written(FLAPPED, COUNTS_OURS)
    scaled = {**obj, "spec": {"replicas": 3}}
    assert own_status_write(before, comparable(scaled), scaled, POD_COUNTS) == frozenset()
    assert own_status_write(before, comparable(obj), obj, frozenset()) == frozenset()


READY = frozenset({"readyReplicas"})
BOTH = frozenset({"readyReplicas", "availableReplicas"})
UNREADY = {**STEADY, "readyReplicas": 0, "availableReplicas": 0}
NO_REPLICAS = {k: v for k, v in FLAPPED.items() if k != "replicas"}


@pytest.mark.parametrize(
    ("status", "changed", "planned", "after", "found"),
    [
        # the status the executor merged: every count it planned shows.
        (FLAPPED, BOTH, [(3, FLAPPED)], 0, 3),
        # the planner planned again since: an earlier plan of the latest few is still found.
        (FLAPPED, BOTH, [(9, STEADY), (8, UNREADY), (7, FLAPPED)], 0, 7),
        # a plan carrying only the counts (and other fields the observed status need not show).
        (FLAPPED, BOTH, [(4, {"readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 9})], 0, 4),
        # two plans of the same counts: the oldest, so the newer one is left to the writes to come.
        (FLAPPED, BOTH, [(9, FLAPPED), (8, STEADY), (7, FLAPPED)], 0, 7),
        # the oldest newer than the plan rollbook's previous write carried out.
        (FLAPPED, BOTH, [(9, FLAPPED), (8, STEADY), (7, FLAPPED)], 8, 9),
        # counts set back to a plan rollbook already wrote: not rollbook's (it writes each plan once).
        (FLAPPED, BOTH, [(9, STEADY), (8, FLAPPED)], 9, None),
        (FLAPPED, BOTH, [(9, STEADY), (8, FLAPPED)], 8, None),
        # counts rollbook never planned.
        (UNREADY, BOTH, [(2, FLAPPED), (1, STEADY)], 0, None),
        # nothing planned (none stored, or the store could not be read).
        (FLAPPED, BOTH, [], 0, None),
        # counts mixed from two plans: readyReplicas 1 is FLAPPED's, availableReplicas 2 STEADY's.
        ({**STEADY, "readyReplicas": 1}, READY, [(2, FLAPPED), (1, STEADY)], 0, None),
        # a plan without the changed count does not vouch for it.
        (FLAPPED, BOTH, [(5, {"readyReplicas": 1})], 0, None),
        # the same number in another JSON type is another value.
        ({**STEADY, "readyReplicas": True}, READY, [(5, {**STEADY, "readyReplicas": 1})], 0, None),
        ({**STEADY, "readyReplicas": 1.0}, READY, [(5, {**STEADY, "readyReplicas": 1})], 0, None),
        # a planned count removed (a merge patch's null) shows as absent.
        (NO_REPLICAS, BOTH, [(5, {**FLAPPED, "replicas": None})], 0, 5),
        # something other than a status among the planned ones is skipped.
        (FLAPPED, BOTH, [(6, "not a status"), (5, FLAPPED)], 0, 5),
    ],
)  # fmt: skip
def test_carried_plan_finds_the_plan_a_write_carried_out(
    status: dict[str, Any],
    changed: frozenset[str],
    planned: list[tuple[int, Any]],
    after: int,
    found: int | None,
) -> None:
    assert carried_plan(status, changed, POD_COUNTS, planned, after) == found
