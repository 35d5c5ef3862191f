"""Agreement between a controller's observed pod action and rollbook's decision on the state the controller
acted on (docs/shadow.md, "Agreement"). Pure: the observed action, the decision and a few counts in, a
verdict out.

Both sides are reduced to intents: ``("create", revision)``, ``("update", pod)``, ``("delete", pod)``.
rollbook's ``markNotReady`` / ``updateInPlace`` / ``markReady`` are steps of one in-place update of the pod
(an ``updateInPlace`` may carry its not-ready condition itself, with no ``markNotReady`` before it);
its ``recreatePod`` is a delete of the pod and a create at the update revision. An observed create names a
pod the controller chose at random, so a create is compared by revision, not by name.

- ``agree``: rollbook's decision holds the same intent.
- ``differ``: it does not; the reason says what rollbook would have done instead (other pods, or wait).
- ``unknown``: rollbook had no decision (no CloneSet observed yet, or it would have rejected the spec).

Independent of the verdict, ``pattern`` names a known way a controller goes wrong: ``above
maxUnavailable`` (an update or delete left more pods unavailable than the rollout's maxUnavailable) and
``surge thrash`` (a pod created at the update revision during a rollout deleted before the rollout ended,
as in kruise#2369).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from services.model.actions import ActionKind
from services.model.availability import revision_hash

Intent = tuple[str, str]  # (verb, pod name or revision hash)

_UPDATE_STEPS = (ActionKind.MARK_NOT_READY, ActionKind.UPDATE_IN_PLACE, ActionKind.MARK_READY)
ABOVE_MAX_UNAVAILABLE = "above maxUnavailable"
SURGE_THRASH = "surge thrash"


# The hash part of a revision name: pods may carry the full name or the hash alone.
revision_key = revision_hash


def rollbook_intents(actions: Iterable[Mapping[str, Any]], update_revision: str | None) -> set[Intent]:
    intents: set[Intent] = set()
    for action in actions:
        kind, pod = str(action.get("action")), str(action.get("pod", ""))
        if kind in _UPDATE_STEPS:
            intents.add(("update", pod))
        elif kind == ActionKind.DELETE_POD:
            intents.add(("delete", pod))
        elif kind == ActionKind.CREATE_POD:
            intents.add(("create", revision_key(action.get("revision") or update_revision)))
        elif kind == ActionKind.RECREATE_POD:
            intents.update({("delete", pod), ("create", revision_key(update_revision))})
    return intents


def observed_intent(action: str, pod: str, revision: str | None) -> Intent | None:
    if action in (ActionKind.CREATE_POD, ActionKind.RECREATE_POD):
        return ("create", revision_key(revision))
    if action == ActionKind.DELETE_POD:
        return ("delete", pod)
    if action == ActionKind.UPDATE_IN_PLACE:
        return ("update", pod)
    return None  # becameReady: the kubelet's doing, no controller decision


@dataclass(frozen=True)
class Verdict:
    verdict: str  # agree | differ | unknown
    reason: str
    pattern: str | None = None


_VERB_TEXT = {"create": "created a pod at revision", "update": "updated in place", "delete": "deleted"}


def _describe(intents: set[Intent]) -> str:
    parts = [f"{_VERB_TEXT[verb]} {target}" for verb, target in sorted(intents)]
    return ", ".join(parts)


def compare(
    intent: Intent,
    decision: set[Intent] | None,
    *,
    unavailable: int,
    max_unavailable: int | None,
    thrash: bool = False,
) -> Verdict:
    """``intent``: what the controller did; ``decision``: rollbook's intents on the state it acted on
    (None: no decision); ``unavailable``: pods unavailable once it acted; ``thrash``: the pod deleted was
    created at the update revision during the rollout still running."""
    pattern = None
    if intent[0] in ("update", "delete") and max_unavailable is not None and unavailable > max_unavailable:
        pattern = ABOVE_MAX_UNAVAILABLE
    elif intent[0] == "delete" and thrash:
        pattern = SURGE_THRASH
    verb, target = intent
    if decision is None:
        return Verdict("unknown", "rollbook had no decision on that state", pattern)
    if intent in decision:
        return Verdict("agree", f"rollbook would have {_VERB_TEXT[verb]} {target} too", pattern)
    limit = ""
    if pattern == ABOVE_MAX_UNAVAILABLE:
        limit = f"; {unavailable} pods unavailable, maxUnavailable {max_unavailable}"
    elif pattern == SURGE_THRASH:
        limit = "; the pod was created at the update revision during this rollout"
    same_verb = {i for i in decision if i[0] == verb}
    if same_verb:
        return Verdict("differ", f"rollbook would have {_describe(same_verb)} instead{limit}", pattern)
    if decision:
        return Verdict("differ", f"rollbook would have {_describe(decision)} instead{limit}", pattern)
    return Verdict("differ", f"rollbook would have waited{limit}", pattern)
