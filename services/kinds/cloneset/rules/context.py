"""Everything one round knows: the resolved spec, revisions, owned pods and PVCs, and the time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.kinds.cloneset.rules import resize
from services.kinds.cloneset.rules.inplace import Change, classify, template_from_pod, update_complete
from services.kinds.cloneset.rules.lifecycle import UPDATING
from services.kinds.cloneset.rules.names import (
    CLONESET_KIND,
    INPLACE_GRACE_ANNOTATION,
    INPLACE_GRACE_ANNOTATION_OLD,
    INSTANCE_ID_LABEL,
)
from services.kinds.cloneset.rules.podstate import PodView, PodViews
from services.kinds.cloneset.rules.revisions import RevisionPlan
from services.kinds.cloneset.rules.spec import CloneSetSpec
from services.model import labels as selectors


def owned_by(obj: dict[str, Any], spec: CloneSetSpec) -> bool | None:
    """True/False when the object has a controller owner (this CloneSet or not); None when it has none."""
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            uid = ref.get("uid")
            if uid and spec.uid:
                return bool(uid == spec.uid)
            return bool(ref.get("kind") == CLONESET_KIND and ref.get("name") == spec.name)
    return None


def _is_our_claim(pvc: dict[str, Any], spec: CloneSetSpec) -> bool:
    """Owned by this CloneSet; or without owner but named and labelled as one of its claims."""
    metadata = pvc.get("metadata") or {}
    instance_id = (metadata.get("labels") or {}).get(INSTANCE_ID_LABEL)
    if not instance_id:
        return False
    owner = owned_by(pvc, spec)
    if owner is not None:
        return owner
    names = {f"{t['metadata']['name']}-{spec.name}-{instance_id}" for t in spec.volume_claim_templates}
    return metadata.get("name") in names


@dataclass(slots=True)
class Context:
    spec: CloneSetSpec
    now: float
    now_text: str
    revisions: RevisionPlan
    all_pods: list[PodView]  # owned pods, active or not
    pods: list[PodView]  # owned active pods
    pvcs: list[dict[str, Any]]  # owned PVCs
    cloneset_status: dict[str, Any] = field(default_factory=dict)
    update_hash: str = ""
    _changes: dict[str, Change | None] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        spec: CloneSetSpec,
        now: float,
        now_text: str,
        revisions: RevisionPlan,
        pods: list[dict[str, Any]],
        pvcs: list[dict[str, Any]],
        cloneset_status: dict[str, Any],
        kept: PodViews | None = None,
    ) -> Context:
        """``kept``: the workload's views from its earlier rounds, reused for the pods unchanged since."""
        views = []
        uid = spec.uid
        selector = spec.selector
        # Hot path: a matchLabels-only selector (the usual case) is checked inline.
        match_labels = tuple((selector.get("matchLabels") or {}).items())
        plain = None if selector.get("matchExpressions") else match_labels
        seen: dict[int, tuple[dict[str, Any], PodView]] = {}
        for pod in pods:
            view = PodView(pod) if kept is None else kept.view(pod, seen)
            # Ours: controlled by this CloneSet, or an orphan (OpenKruise adopts those), and matching the
            # selector (OpenKruise releases owned pods that stopped matching; rollbook leaves them alone).
            # The usual pod first: one owner reference, the controller, with our uid.
            if not (uid and view.sole_controller_uid == uid) and owned_by(pod, spec) is False:
                continue
            labels = view.labels
            if plain is None:
                if selectors.matches(selector, labels):
                    views.append(view)
                continue
            for key, value in plain:
                if labels.get(key) != value:
                    break
            else:
                views.append(view)
        if kept is not None:
            kept.keep(seen)
        owned_pvcs = [p for p in pvcs if _is_our_claim(p, spec)]
        active = [v for v in views if v.active]
        update_hash = revisions.update.hash
        return cls(spec, now, now_text, revisions, views, active, owned_pvcs, cloneset_status, update_hash)

    def is_updated(self, pod: PodView) -> bool:
        return pod.revision_hash == self.update_hash

    def runs_update(self, pod: PodView) -> bool:
        """At the update revision and running it: labelled with it, and no in-place update towards it still
        pending (a grace period not over, or containers not restarted on the new images yet). OpenKruise
        counts a pod as updated from the write that starts its in-place update; rollbook reports it updated
        only once its containers run the update revision."""
        if pod.revision_hash != self.update_hash:
            return False
        annotations = pod.annotations
        if INPLACE_GRACE_ANNOTATION in annotations or INPLACE_GRACE_ANNOTATION_OLD in annotations:
            return False
        if pod.lifecycle == UPDATING or pod.inplace_ready is False:
            state = pod.inplace_state
            return state is None or update_complete(pod.obj, state)
        return True

    def old_template(self, pod: PodView) -> dict[str, Any] | None:
        """The template of the pod's revision: recorded, or for a revision rollbook has no record of, as
        the pod shows it (``template_from_pod``); None when neither says."""
        revision = self.revisions.by_hash.get(pod.revision_hash)
        if revision is not None:
            return revision.template
        return template_from_pod(pod.obj, self.revisions.update.template)

    def change_key(self, pod: PodView) -> str:
        """What the pod's change depends on: its revision, or the pod itself for an unrecorded revision."""
        return pod.revision_hash if pod.revision_hash in self.revisions.by_hash else f"pod/{pod.name}"

    def change_for(self, pod: PodView) -> Change | None:
        """The change from the pod's revision to the update revision; None when its template is unknown."""
        key = self.change_key(pod)
        if key not in self._changes:
            old = self.old_template(pod)
            self._changes[key] = (
                None
                if old is None
                else classify(old, self.revisions.update.template, self.spec.extended_inplace)
            )
        return self._changes[key]

    def in_place(self, pod: PodView, change: Change) -> bool:
        """Whether ``change`` can be applied to ``pod`` in place: not Static, and a resize only on a node
        that resizes pods (resize.supported)."""
        return change.in_place and (not change.resize or resize.supported(pod.obj))

    def pvcs_by_instance(self) -> dict[str, list[dict[str, Any]]]:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for pvc in self.pvcs:
            metadata = pvc.get("metadata") or {}
            grouped.setdefault(metadata["labels"][INSTANCE_ID_LABEL], []).append(pvc)
        return grouped
