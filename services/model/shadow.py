"""Which CloneSets rollbook only shadows: observes and records, never acts on (docs/shadow.md).

- ``rollbook up --shadow`` (setting ``ROLLBOOK_SHADOW=true``): every CloneSet; rollbook acts on nothing.
- Per object: the label ``rollbook.io/manage: shadow`` on a CloneSet, whatever the installation's mode.
  The same label's ``true`` / ``false`` opt an object in or out of management (docs/install.md); ``shadow``
  is the third answer: someone else drives it, rollbook keeps the audit trail and says what it would do.

Pure: decided from the CloneSet as observed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.model.management import MANAGE_LABEL, SHADOW


def shadowed(cloneset: Mapping[str, Any] | None, *, shadow_all: bool) -> bool:
    """True when rollbook must only record ``cloneset``: shadow mode for all, or the object's label."""
    if shadow_all:
        return True
    labels = ((cloneset or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGE_LABEL) == SHADOW
