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

from services.model.sidecarset.conflicts import (
    conflict_errors,
    find_conflicts,
    scopes_overlap,
    selectors_overlap,
)
from services.model.sidecarset.core import (
    AFTER_APP,
    API_VERSION,
    BEFORE_APP,
    CUSTOM_VERSION_LABEL,
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_MAX_UNAVAILABLE,
    DUPLICATE,
    HASH_ANNOTATION,
    HASH_WITHOUT_IMAGE_ANNOTATION,
    INJECTED_ENV,
    INJECTED_LIST_ANNOTATION,
    INJECTION_ID_ANNOTATION,
    INVALID,
    KIND,
    REQUIRED,
    InjectionError,
    InjectionRecord,
    KruiseError,
    PodSidecarRevision,
    SidecarSet,
    SidecarSetError,
    aggregate,
    json_object,
)
from services.model.sidecarset.hashes import sidecarset_hash, sidecarset_hash_without_image
from services.model.sidecarset.injection import apply_patch, format_time, inject, json_patch
from services.model.sidecarset.resources import computed_resources
from services.model.sidecarset.revisions import (
    REVISION_FIELDS,
    SIDECARSET_NAME_LABEL,
    PinnedRevision,
    fold_revision,
    history_sidecarset,
    injected_sidecarsets,
    injects_history,
    partial_draw,
    pin_resolves,
    pinned_revision,
    pod_sidecar_revisions,
    recorded_revision,
    revision_data,
    revision_to_inject,
    unpinned,
)
from services.model.sidecarset.selection import (
    injection_order,
    is_active,
    matches_pod,
    named_namespaces,
    pod_namespace,
    select_sidecarsets,
)
from services.model.sidecarset.sharing import transfer_envs
from services.model.sidecarset.validation import parse_sidecarset, validate_update

__all__ = [
    "AFTER_APP",
    "API_VERSION",
    "BEFORE_APP",
    "CUSTOM_VERSION_LABEL",
    "DEFAULT_EXCLUDED_NAMESPACES",
    "DEFAULT_MAX_UNAVAILABLE",
    "HASH_ANNOTATION",
    "HASH_WITHOUT_IMAGE_ANNOTATION",
    "INJECTED_ENV",
    "INJECTED_LIST_ANNOTATION",
    "INJECTION_ID_ANNOTATION",
    "InjectionError",
    "InjectionRecord",
    "KIND",
    "PinnedRevision",
    "PodSidecarRevision",
    "REVISION_FIELDS",
    "revision_data",
    "SIDECARSET_NAME_LABEL",
    "SidecarSet",
    "SidecarSetError",
    "KruiseError",
    "aggregate",
    "REQUIRED",
    "INVALID",
    "DUPLICATE",
    "apply_patch",
    "computed_resources",
    "find_conflicts",
    "conflict_errors",
    "fold_revision",
    "format_time",
    "history_sidecarset",
    "inject",
    "injected_sidecarsets",
    "injection_order",
    "injects_history",
    "is_active",
    "json_object",
    "json_patch",
    "matches_pod",
    "named_namespaces",
    "parse_sidecarset",
    "partial_draw",
    "pin_resolves",
    "pinned_revision",
    "pod_namespace",
    "pod_sidecar_revisions",
    "recorded_revision",
    "revision_to_inject",
    "unpinned",
    "scopes_overlap",
    "select_sidecarsets",
    "selectors_overlap",
    "sidecarset_hash",
    "sidecarset_hash_without_image",
    "transfer_envs",
    "validate_update",
]
