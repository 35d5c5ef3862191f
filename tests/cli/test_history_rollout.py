"""`history --rollout` names one rollout: a full id, or an id without its `#<n>` (as printed before rollouts
were numbered) only when one rollout went to that revision."""

from __future__ import annotations

import pytest

from services.cli.errors import CommandError
from services.cli.history import resolve_rollout, sequence_of

RECORDED = ["default/web@web-b#1", "default/web@web-a#2", "default/web@web-b#3"]


def test_a_full_id_or_the_one_rollout_to_a_revision() -> None:
    assert resolve_rollout(RECORDED, "default/web@web-b#3") == "default/web@web-b#3"
    assert resolve_rollout(RECORDED, "default/web@web-a") == "default/web@web-a#2"
    assert sequence_of("default/web@web-a#2") == "2"


def test_an_id_naming_several_rollouts_is_refused_listing_them() -> None:
    with pytest.raises(CommandError, match=r"names 2 rollouts \(default/web@web-b#1, default/web@web-b#3\)"):
        resolve_rollout(RECORDED, "default/web@web-b")
