"""SidecarSet revisions as pure functions: OpenKruise's ControllerRevisions of a SidecarSet
(``pkg/controller/sidecarset/sidecarset_processor.go`` ``registerLatestRevision`` / ``truncateHistory``,
``pkg/control/sidecarcontrol/history_control.go``), recorded by rollbook as ``RevisionCreated`` /
``RevisionsPruned`` events on the SidecarSet's decisions stream (docs/sidecarset.md, "Revisions").

- A revision's data is ``{"spec": {"$patch": "replace", "containers", "initContainers", "volumes",
  "imagePullSecrets", "patchPodMetadata"}}`` of the defaulted spec (absent fields as null, as Go encodes
  them): any change to one of these fields records a new revision; selector, strategies, scope do not.
- Name ``<sidecarset>-<hash>``: the Kubernetes ``controller/history`` form, hash = SafeEncode of the
  decimal FNV-1 32 of the canonical data (the collision count appended when non-zero), the same helpers as
  the CloneSet's (``services/kinds/cloneset/rules/revisions.py``).
- Number: one more than the highest recorded. Data equal to the latest revision: nothing new. Equal to an
  older revision (a rollback): that revision is re-numbered (same name, highest number + 1).
- History: at most ``max(1, spec.revisionHistoryLimit)`` (default 10) revisions, counting the latest;
  beyond that the oldest are dropped, except the latest and any a pod still names in its
  ``kruise.io/sidecarset-hash`` ``controllerRevision`` (or ``injectionStrategy.revision.revisionName``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.kinds.cloneset.rules.revisions import canonical_json, unclaimed_revision_name
from services.model import sidecarset as ss
from services.model.redaction import MARK
from services.model.revision_hash import data_fnv
from services.model.sidecarset import SIDECARSET_NAME_LABEL

DEFAULT_HISTORY_LIMIT = 10


revision_data = ss.revision_data  # what a SidecarSet revision stores (copySidecarSetSpecRevision)


@dataclass(frozen=True, slots=True)
class SidecarSetRevision:
    name: str
    number: int
    data: dict[str, Any]
    key: bytes  # canonical JSON of data, for equality
    sidecarset_hash: str = ""  # the SidecarSet's kruise.io/sidecarset-hash at this revision
    sidecarset_hash_without_image: str = ""
    custom_version: str = ""  # the SidecarSet's custom version when the revision was recorded
    # ``data`` is redacted; ``recorded_fnv`` is then the real data's FNV, recorded beside it (see
    # services/kinds/cloneset/rules/revisions.py: the same rules as a CloneSet's revisions).
    redacted: bool = False
    recorded_fnv: int | None = None

    @property
    def fnv(self) -> int:
        return self.recorded_fnv if self.recorded_fnv is not None else data_fnv(self.data)


def _same_data(revision: SidecarSetRevision, key: bytes, data: dict[str, Any], fnv: int | None) -> bool:
    redacted = fnv is not None
    if revision.redacted == redacted:
        return revision.key == key
    if fnv is None:  # the SidecarSet is real, the record redacted
        return revision.fnv == data_fnv(data)
    return revision.fnv == fnv


@dataclass(frozen=True, slots=True)
class RevisionDecision:
    """This round's revision record: the latest revision (what ``status.latestRevision`` names), the one to
    record (new, or re-numbered for a rollback; None when the latest is already recorded), the names to
    prune, and the collision count to report."""

    latest: SidecarSetRevision
    record: SidecarSetRevision | None
    pruned: list[str] = field(default_factory=list)
    collision_count: int = 0


def read_revisions(records: Iterable[Mapping[str, Any]]) -> list[SidecarSetRevision]:
    """Recorded revisions (ControllerRevision-shaped), lowest number first; malformed records are skipped."""
    result = []
    for record in records:
        if not isinstance(record, Mapping):
            continue
        metadata = record.get("metadata") or {}
        name = metadata.get("name")
        number = record.get("revision")
        data = record.get("data")
        if not isinstance(name, str) or not isinstance(number, int) or not isinstance(data, dict):
            continue
        annotations = metadata.get("annotations") or {}
        labels = metadata.get("labels") or {}
        mark = record.get(MARK)
        fnv = mark.get("dataFnv") if isinstance(mark, Mapping) else None
        result.append(
            SidecarSetRevision(
                name,
                number,
                data,
                canonical_json(data),
                str(annotations.get(ss.HASH_ANNOTATION) or ""),
                str(annotations.get(ss.HASH_WITHOUT_IMAGE_ANNOTATION) or ""),
                str(labels.get(ss.CUSTOM_VERSION_LABEL) or ""),
                isinstance(fnv, int),
                fnv if isinstance(fnv, int) else None,
            )
        )
    result.sort(key=lambda r: (r.number, r.name))
    return result


def history_limit(spec: Mapping[str, Any]) -> int:
    value = spec.get("revisionHistoryLimit")
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_HISTORY_LIMIT
    return max(1, value)


def revisions_in_use(sidecarset: ss.SidecarSet, pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """Revision names a pod records for this SidecarSet, plus the one ``injectionStrategy`` pins."""
    names = set()
    for pod in pods:
        recorded = ss.pod_sidecar_revisions(pod).get(sidecarset.name)
        if recorded is not None and recorded.controller_revision:
            names.add(recorded.controller_revision)
    pinned = ((sidecarset.spec.get("injectionStrategy") or {}).get("revision") or {}).get("revisionName")
    if isinstance(pinned, str) and pinned:
        names.add(pinned)
    return names


def plan_revision(
    sidecarset: ss.SidecarSet,
    recorded: Iterable[Mapping[str, Any]],
    collision_count: int,
    in_use: set[str],
) -> RevisionDecision:
    """Register the SidecarSet's latest revision and truncate the history (pure)."""
    records = list(recorded)
    revisions = read_revisions(records)
    data = revision_data(sidecarset.spec)
    key = canonical_json(data)
    # Numbers of records without data (written before revisions carried it) still count.
    numbers = [r.get("revision") for r in records if isinstance(r, Mapping)]
    next_number = max((n for n in numbers if isinstance(n, int)), default=0) + 1
    fnv = sidecarset.revision_fnv  # set when the spec is redacted
    redacted = fnv is not None
    equal = [r for r in revisions if _same_data(r, key, data, fnv)]
    record: SidecarSetRevision | None = None
    if equal and redacted and not equal[-1].redacted:
        # Recorded before redaction with these real values: recorded again under its name, redacted.
        old = equal[-1]
        number = old.number if old is revisions[-1] else next_number
        latest = record = SidecarSetRevision(
            old.name,
            number,
            data,
            key,
            old.sidecarset_hash or sidecarset.hash,
            old.sidecarset_hash_without_image or sidecarset.hash_without_image,
            old.custom_version,
            True,
            fnv,
        )
        revisions = [r for r in revisions if r.name != old.name] + [latest]
    elif equal and equal[-1] is revisions[-1]:
        latest = revisions[-1]
    elif equal:  # a rollback: the equal revision becomes the newest
        old = equal[-1]
        latest = record = SidecarSetRevision(
            old.name,
            next_number,
            old.data,
            old.key,
            sidecarset.hash,
            sidecarset.hash_without_image,
            old.custom_version,
            old.redacted,
            old.recorded_fnv,
        )
        revisions = [r for r in revisions if r.name != old.name] + [latest]
    else:
        taken = {r.name: r.key for r in revisions}
        name, collision_count = unclaimed_revision_name(
            sidecarset.name, data, key, taken, collision_count, fnv
        )
        latest = record = SidecarSetRevision(
            name,
            next_number,
            data,
            key,
            sidecarset.hash,
            sidecarset.hash_without_image,
            sidecarset.custom_version,
            redacted,
            fnv,
        )
        revisions = [r for r in revisions if r.name != name] + [latest]
    excess = len(revisions) - history_limit(sidecarset.spec)
    pruned = []
    for revision in revisions[:-1]:
        if excess <= 0:
            break
        if revision.name not in in_use:
            pruned.append(revision.name)
            excess -= 1
    return RevisionDecision(latest, record, pruned, collision_count)


def revision_object(sidecarset: str, revision: SidecarSetRevision) -> dict[str, Any]:
    """The revision as a ControllerRevision-shaped object (what the fold keeps and later rounds read):
    labelled with the SidecarSet's name (and its custom version when it had one), its two hashes as
    annotations, as OpenKruise's ``NewRevision``."""
    labels = {SIDECARSET_NAME_LABEL: sidecarset}
    if revision.custom_version:
        labels[ss.CUSTOM_VERSION_LABEL] = revision.custom_version
    annotations = {
        ss.HASH_ANNOTATION: revision.sidecarset_hash,
        ss.HASH_WITHOUT_IMAGE_ANNOTATION: revision.sidecarset_hash_without_image,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision.name,
            "labels": labels,
            "annotations": annotations,
        },
        "revision": revision.number,
        "data": revision.data,
        **({MARK: {"dataFnv": revision.recorded_fnv}} if revision.redacted else {}),
    }
