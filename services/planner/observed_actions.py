"""What happened to a CloneSet's pod between two consecutive observations of it: the pod actions someone
else took (docs/shadow.md, "Observed pod actions"). The rule is the flight recorder's
(services/kinds/recorded/rules.py, ``changes``), read with the CloneSet's revision label and without telling
an eviction from a deletion (both ``deletePod`` in a shadow trail, as recorded)."""

from __future__ import annotations

from typing import Any

from services.kinds.cloneset.rules.names import REVISION_LABEL
from services.kinds.recorded import rules
from services.kinds.recorded.rules import Change, PodView, changes

__all__ = ["Change", "PodView", "changes", "pod_view"]


def pod_view(obj: dict[str, Any]) -> PodView:
    return rules.pod_view(obj, REVISION_LABEL, evictions=False)
