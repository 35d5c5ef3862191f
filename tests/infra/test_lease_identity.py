"""Who a process is in the Leases it holds (services/infra/leader.py, services/infra/supervisor.py): a
stable ``ROLLBOOK_INSTANCE`` when one is given, so a restarted replica takes its own Lease back at once;
otherwise a name of its own, new at every start; and under the supervisor, one per child that every
restart of that child keeps and no other live process has."""

from __future__ import annotations

import pytest

from services.infra.leader import lease_identity
from services.infra.partition_leases import predecessor_members
from services.infra.supervisor import child_instance


@pytest.mark.parametrize(
    ("instance", "identity"),
    [
        ("rollbook-planner-7d9f-x2x4q", "rollbook-planner-7d9f-x2x4q"),  # the pod's name
        ("  pod-a\n", "pod-a"),  # as a shell or a manifest may pass it
        ("", "host-1/42/abcd1234"),  # none given: hostname, pid and a random token
        ("   ", "host-1/42/abcd1234"),
    ],
)
def test_the_instance_is_the_identity_when_given_else_a_new_one_per_process(
    instance: str, identity: str
) -> None:
    assert lease_identity(instance, hostname="host-1", pid=42, token="abcd1234") == identity


def test_without_an_instance_two_processes_never_share_an_identity() -> None:
    # Two containers sharing a hostname (Compose's network_mode: service:...), both pid 1.
    first = lease_identity("", hostname="shared", pid=1, token="aaaa0000")
    second = lease_identity("", hostname="shared", pid=1, token="bbbb1111")
    assert first != second


def test_each_child_of_a_supervisor_keeps_its_own_instance_across_restarts() -> None:
    assert child_instance("host-1/0f3c9a2b", "planner") == child_instance("host-1/0f3c9a2b", "planner")
    names = ["watcher", "planner", "planner-2", "executor", "auditor"]
    assert len({child_instance("host-1/0f3c9a2b", n) for n in names}) == len(names)
    # Two supervisors (two `rollbook up`, or two pods each running one): never the same child instance.
    assert child_instance("host-1/0f3c9a2b", "planner") != child_instance("host-1/77aa01cd", "planner")
    assert child_instance("rollbook-0", "planner") != child_instance("rollbook-1", "planner")


@pytest.mark.parametrize(
    ("records", "own", "predecessors"),
    [
        # Claimed member-0 afresh; member-2 still names this instance: the dead predecessor's.
        ({"m-0": ("me", 1), "m-1": ("other", 1), "m-2": ("me", 0)}, "m-0", ["m-2"]),
        # Took its predecessor's slot back: nothing left over.
        ({"m-0": ("other", 1), "m-1": ("me", 2)}, "m-1", []),
        # No slot yet: every one under this identity is a predecessor's.
        ({"m-0": ("me", 0), "m-1": (None, None)}, None, ["m-0"]),
        ({"m-0": ("other", 1)}, None, []),
    ],
)
def test_member_leases_left_under_this_identity_are_a_predecessors(
    records: dict[str, tuple[str | None, object]], own: str | None, predecessors: list[str]
) -> None:
    assert predecessor_members(records, "me", own) == predecessors
