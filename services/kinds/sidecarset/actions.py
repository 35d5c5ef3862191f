"""A SidecarSet's pod action as the executor reads it, decoded from ``PodActionRequested.details``
(``services.kinds.registry.requested_action``). It encodes to exactly the details the planner writes
(services/kinds/sidecarset/rules/decisions.py), same keys in the same order (tests/kinds/test_actions.py)."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from services.model.actions import ActionKind


class UpdateSidecarInPlace(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """A pod's sidecar containers upgraded in place to the SidecarSet's revision."""

    uid: str | None | UnsetType = UNSET  # the pod's incarnation the upgrade was planned for
    sidecar_set: str
    from_revision: str | UnsetType = UNSET
    images: dict[str, Any] | UnsetType = UNSET
    patch: dict[str, Any]  # the pod patch: containers and the SidecarSet's annotations


ACTIONS: dict[str, type[UpdateSidecarInPlace]] = {ActionKind.UPDATE_SIDECAR_IN_PLACE: UpdateSidecarInPlace}
