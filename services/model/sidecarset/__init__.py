"""SidecarSet rules as pure functions, one module per job.

``core`` (vocabulary: constants, annotations, the parsed SidecarSet), ``validation`` (parse, default,
validate), ``hashes`` (the revision hashes that decide upgrades), ``conflicts`` (SidecarSets that can share
a pod), ``selection`` (which SidecarSets select a pod, in injection order), ``sharing`` (env and volumes a
sidecar takes from the app containers), ``injection`` (the pod as admission creates it) and ``revisions``
(reading back what a pod got).

Shared by the injection webhook, ``rollbook inject`` and the planner (in-place sidecar upgrades). No I/O, no
wall clock: the injection time comes in as an argument. The rules are OpenKruise's (its pod mutating
webhook, SidecarSet validating webhook and sidecarcontrol package); rollbook's choices are in
docs/sidecarset.md. Everything is re-exported here, so ``from services.model import sidecarset`` reaches it.
"""

from services.model.sidecarset.conflicts import find_conflicts, scopes_overlap, selectors_overlap
from services.model.sidecarset.core import (
    AFTER_APP,
    API_VERSION,
    BEFORE_APP,
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_MAX_UNAVAILABLE,
    HASH_ANNOTATION,
    HASH_WITHOUT_IMAGE_ANNOTATION,
    INJECTED_ENV,
    INJECTED_LIST_ANNOTATION,
    INJECTION_ID_ANNOTATION,
    KIND,
    InjectionRecord,
    PodSidecarRevision,
    SidecarSet,
    SidecarSetError,
    json_object,
)
from services.model.sidecarset.hashes import sidecarset_hash, sidecarset_hash_without_image
from services.model.sidecarset.injection import apply_patch, inject, json_patch
from services.model.sidecarset.revisions import injected_sidecarsets, pod_sidecar_revisions
from services.model.sidecarset.selection import is_active, matches_pod, pod_namespace, select_sidecarsets
from services.model.sidecarset.sharing import transfer_envs
from services.model.sidecarset.validation import parse_sidecarset, validate_update

__all__ = [
    "AFTER_APP",
    "API_VERSION",
    "BEFORE_APP",
    "DEFAULT_EXCLUDED_NAMESPACES",
    "DEFAULT_MAX_UNAVAILABLE",
    "HASH_ANNOTATION",
    "HASH_WITHOUT_IMAGE_ANNOTATION",
    "INJECTED_ENV",
    "INJECTED_LIST_ANNOTATION",
    "INJECTION_ID_ANNOTATION",
    "KIND",
    "InjectionRecord",
    "PodSidecarRevision",
    "SidecarSet",
    "SidecarSetError",
    "apply_patch",
    "find_conflicts",
    "inject",
    "injected_sidecarsets",
    "is_active",
    "json_object",
    "json_patch",
    "matches_pod",
    "parse_sidecarset",
    "pod_namespace",
    "pod_sidecar_revisions",
    "scopes_overlap",
    "select_sidecarsets",
    "selectors_overlap",
    "sidecarset_hash",
    "sidecarset_hash_without_image",
    "transfer_envs",
    "validate_update",
]
