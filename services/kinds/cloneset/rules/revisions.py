"""Template revisions: hash, name, update/current revision, history pruning.

A revision is the pod template only. Its hash is FNV-1 32 of the canonical JSON of the revision data
(``{"spec":{"template":{...,"$patch":"replace"}}}``, sorted keys, compact), with the collision count
appended as decimal text, written as Kubernetes' SafeEncodeString of the decimal value: at most 10
characters. The revision name is ``<cloneset name truncated to 223>-<hash>``; pods carry only the hash in
``controller-revision-hash`` (the short form, at most 10 characters for any CloneSet name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import msgspec

from services.kinds.cloneset.rules.names import (
    CLONESET_API_VERSION,
    CLONESET_KIND,
    REVISION_HASH_LABEL,
)
from services.kinds.cloneset.rules.spec import CloneSetSpec
from services.model.redaction import MARK
from services.model.revision_hash import canonical_json as canonical_json
from services.model.revision_hash import data_hash as data_hash
from services.model.revision_hash import fnv1_32 as fnv1_32
from services.model.revision_hash import hash_from_fnv, strip_patch, template_fnv
from services.model.revision_hash import revision_data as revision_data
from services.model.revision_hash import safe_encode as safe_encode

NAME_PREFIX_LIMIT = 223


def template_hash(template: dict[str, Any], collision_count: int = 0) -> str:
    return data_hash(revision_data(template), collision_count)


def unclaimed_revision_name(
    owner: str,
    data: Any,
    key: bytes | str,
    taken: Mapping[str, Any],
    collision_count: int,
    fnv: int | None = None,
) -> tuple[str, int]:
    """``<owner>-<hash>`` for ``data`` (whose canonical form is ``key``), the collision count raised while
    the name belongs to other data (``taken``: name -> key), as Kubernetes does; returns the name and
    the count. ``fnv``: the FNV of the real data when ``data`` is its redacted copy (the hash is finished
    from it, so the name is the real data's)."""
    while True:
        hash_ = data_hash(data, collision_count) if fnv is None else hash_from_fnv(fnv, collision_count)
        name = revision_name(owner, hash_)
        if taken.get(name, key) == key:
            return name, collision_count
        collision_count += 1


def revision_name(cloneset_name: str, hash_: str) -> str:
    return f"{cloneset_name[:NAME_PREFIX_LIMIT]}-{hash_}"


def hash_part(revision_or_label: str) -> str:
    """The part after the last '-': the hash, whether the label holds the long or the short form."""
    return revision_or_label.rsplit("-", 1)[-1]


@dataclass(frozen=True, slots=True)
class Revision:
    name: str
    number: int
    template: dict[str, Any]
    template_key: bytes  # canonical JSON of the template, for equality
    # The template as recorded is redacted (docs/events.md, "Redaction"); ``recorded_fnv`` is then the
    # FNV of the real template's revision data, recorded beside it. Trails recorded before redaction
    # hold real templates: their FNV is computed from the template when a comparison needs it.
    redacted: bool = False
    recorded_fnv: int | None = None

    @property
    def hash(self) -> str:
        return hash_part(self.name)

    @property
    def fnv(self) -> int:
        if self.recorded_fnv is not None:
            return self.recorded_fnv
        return _fnv_of(self.template_key)


@lru_cache(maxsize=256)
def _fnv_of(template_key: bytes) -> int:
    return template_fnv(msgspec.json.decode(template_key))


def _same_template(revision: Revision, key: bytes, redacted: bool, fnv: int | None) -> bool:
    """Whether a recorded revision holds the observed template (``key``, redacted or real, ``fnv`` of the
    real one when redacted). Two records of one kind compare as before (equal redacted values are equal
    real values: the digests are keyed HMACs); a real record against a redacted one (a trail recorded
    before redaction, planned on after it) compares the FNV of the real data."""
    if revision.redacted == redacted:
        if revision.template_key != key:
            return False
        return not redacted or revision.recorded_fnv is None or fnv is None or revision.recorded_fnv == fnv
    if fnv is None:  # the observation is real, the record redacted
        return revision.fnv == _fnv_of(key)
    return revision.fnv == fnv


def read_revisions(records: list[dict[str, Any]]) -> list[Revision]:
    """Recorded revisions (ControllerRevision-shaped), oldest number first; malformed records are skipped."""
    revisions = []
    for record in records:
        if not isinstance(record, dict):
            continue
        name = (record.get("metadata") or {}).get("name")
        template = ((record.get("data") or {}).get("spec") or {}).get("template")
        number = record.get("revision")
        if not isinstance(name, str) or not isinstance(template, dict) or not isinstance(number, int):
            continue
        clean = strip_patch(template)
        mark = record.get(MARK)
        fnv = mark.get("templateFnv") if isinstance(mark, dict) else None
        if isinstance(fnv, int):
            revisions.append(Revision(name, number, clean, canonical_json(clean), True, fnv))
        else:
            revisions.append(Revision(name, number, clean, canonical_json(clean)))
    revisions.sort(key=lambda r: (r.number, r.name))
    return revisions


def reported_update_revision(
    spec: CloneSetSpec, recorded: list[Revision], cloneset: dict[str, Any]
) -> Revision | None:
    """The update revision another controller (OpenKruise, before a hand-over) reported for the current
    template, adopted under its name: ``status.updateRevision`` names a revision rollbook has no record
    of, and the status describes this very generation (``observedGeneration == metadata.generation``), so
    that name is this template's revision. Pods it labelled with that name then count as updated instead
    of as pods of an unknown revision. None when there is nothing to adopt."""
    status = cloneset.get("status") or {}
    name = status.get("updateRevision")
    generation = (cloneset.get("metadata") or {}).get("generation")
    if not isinstance(name, str) or not name or generation is None:
        return None
    if status.get("observedGeneration") != generation:
        return None
    if any(r.name == name or r.hash == hash_part(name) for r in recorded):
        return None
    template = strip_patch(spec.template)
    number = max((r.number for r in recorded), default=0) + 1
    redacted = spec.template_fnv is not None
    return Revision(name, number, template, canonical_json(template), redacted, spec.template_fnv)


@dataclass(slots=True)
class RevisionPlan:
    update: Revision
    current: Revision
    collision_count: int
    to_record: list[Revision] = field(default_factory=list)  # new, or re-numbered (a rollback)
    to_delete: list[str] = field(default_factory=list)
    by_hash: dict[str, Revision] = field(default_factory=dict)  # every revision known after this round


def plan_revisions(
    spec: CloneSetSpec, recorded: list[Revision], current_name: str | None, collision_count: int
) -> RevisionPlan:
    """Pick the update revision (reuse, re-number on rollback, or create) and the current revision."""
    template = strip_patch(spec.template)
    key = canonical_json(template)
    fnv = spec.template_fnv  # set when the observed template is redacted
    redacted = fnv is not None
    max_number = max((r.number for r in recorded), default=0)
    equal = [r for r in recorded if _same_template(r, key, redacted, fnv)]
    to_record: list[Revision] = []
    if equal:
        update = equal[-1]
        if redacted and not update.redacted:
            # A revision recorded before redaction, holding this template's real values: recorded again
            # under its name with the redacted template, so later rounds compare redacted with redacted.
            number = update.number if update.number == max_number else max_number + 1
            update = Revision(update.name, number, template, key, True, fnv)
            to_record.append(update)
        elif update.number != max_number:
            update = Revision(
                update.name, max_number + 1, update.template, key, update.redacted, update.recorded_fnv
            )
            to_record.append(update)
    else:
        taken = {r.name: r.template_key for r in recorded}
        name, collision_count = unclaimed_revision_name(
            spec.name, revision_data(template), key, taken, collision_count, fnv
        )
        update = Revision(name, max_number + 1, template, key, redacted, fnv)
        to_record.append(update)
    latest = {r.name: r for r in recorded}
    for revision in to_record:
        latest[revision.name] = revision
    current = latest.get(current_name or "") or update
    by_hash = {hash_part(name): r for name, r in latest.items()}
    return RevisionPlan(update, current, collision_count, to_record, [], by_hash)


def prune_history(plan: RevisionPlan, history_limit: int, live_hashes: set[str]) -> None:
    """Delete, oldest first, revisions neither current, update nor used by a pod, down to the limit."""
    keep = {plan.update.name, plan.current.name}
    spare = sorted(
        (r for r in plan.by_hash.values() if r.name not in keep and r.hash not in live_hashes),
        key=lambda r: (r.number, r.name),
    )
    excess = len(spare) - history_limit
    plan.to_delete = [r.name for r in spare[: max(excess, 0)]]


def revision_object(spec: CloneSetSpec, revision: Revision) -> dict[str, Any]:
    """The revision as a ControllerRevision-shaped object, ready to be recorded and fed back as input."""
    labels = dict((revision.template.get("metadata") or {}).get("labels") or {})
    labels[REVISION_HASH_LABEL] = revision.hash
    owner = {
        "apiVersion": CLONESET_API_VERSION,
        "kind": CLONESET_KIND,
        "name": spec.name,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    if spec.uid:
        owner["uid"] = spec.uid
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision.name,
            "namespace": spec.namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "revision": revision.number,
        "data": revision_data(revision.template),
        **({MARK: {"templateFnv": revision.recorded_fnv}} if revision.redacted else {}),
    }
