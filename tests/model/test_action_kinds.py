"""One definition of the action kinds (services/model/actions.py): the plan's action types are tagged with
them, and what classifies an action's failure covers every pod action a plan can hold."""

from __future__ import annotations

import typing

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.status import ACTION_CLASSES
from services.model.actions import ActionKind


def test_every_plan_action_is_tagged_with_a_defined_kind() -> None:
    tags = {ActionKind(str(cls.__struct_config__.tag)) for cls in typing.get_args(model.Action)}
    # What a plan cannot hold: the podsToDelete write-back (the plan's podsToDelete field) and the
    # SidecarSet planner's sidecar upgrade.
    assert tags == set(ActionKind) - {ActionKind.SET_PODS_TO_DELETE, ActionKind.UPDATE_SIDECAR_IN_PLACE}


def test_a_failed_plan_action_is_a_failed_scale_or_update() -> None:
    plan_kinds = {ActionKind(str(cls.__struct_config__.tag)) for cls in typing.get_args(model.Action)}
    assert set(ACTION_CLASSES) == plan_kinds


def test_a_kind_equals_the_string_recorded_before_it_existed() -> None:
    assert ActionKind.UPDATE_IN_PLACE == "updateInPlace"
    assert {"deletePod": 1}[ActionKind.DELETE_POD] == 1  # recorded strings and kinds key the same entries
    assert f"{ActionKind.MARK_READY}" == "markReady"
