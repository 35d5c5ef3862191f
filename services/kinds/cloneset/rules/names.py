"""Label, annotation and condition names rollbook reads and writes (OpenKruise-compatible)."""

from __future__ import annotations

from services.model import availability
from services.model.cloneset import INPLACE_STATE_ANNOTATION as INPLACE_STATE_ANNOTATION  # the executor's
from services.model.cloneset import INSTANCE_ID_LABEL as INSTANCE_ID_LABEL  # shared with the executor

REVISION_LABEL = "controller-revision-hash"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION_HASH_LABEL = "controller.kubernetes.io/hash"  # on ControllerRevisions
SPECIFIED_DELETE_LABEL = "apps.kruise.io/specified-delete"
LIFECYCLE_STATE_LABEL = availability.LIFECYCLE_STATE_LABEL
LIFECYCLE_TIMESTAMP_ANNOTATION = "lifecycle.apps.kruise.io/timestamp"
# The CloneSet label switching excludePreparingDelete on in v1alpha1 (v1beta1: a scaleStrategy field).
EXCLUDE_PREPARING_DELETE_LABEL = "apps.kruise.io/cloneset-scaling-exclude-preparing-delete"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"

INPLACE_GRACE_ANNOTATION = "apps.kruise.io/inplace-update-grace"
INPLACE_READY_CONDITION = availability.INPLACE_READY_CONDITION
# Legacy keys OpenKruise still reads and removes on its next write.
from services.model.cloneset import INPLACE_STATE_ANNOTATION_OLD as INPLACE_STATE_ANNOTATION_OLD  # noqa: E402

INPLACE_GRACE_ANNOTATION_OLD = "inplace-update-grace"
# The readiness gate lifecycle hooks with markPodNotReady hold a pod unready through (apis/apps/pub).
KRUISE_POD_READY_CONDITION = "KruisePodReady"

# rollbook's switch for the extended in-place mode (docs/plan.md): probes Dynamic, env/volumes Rebuild.
INPLACE_MODE_ANNOTATION = "rollbook.io/inplace-mode"
INPLACE_MODE_EXTENDED = "extended"

REJECTED_CONDITION = "Rejected"

CLONESET_API_VERSION = "apps.kruise.io/v1alpha1"
CLONESET_KIND = "CloneSet"

# Kubernetes' SafeEncodeString alphabet (no vowels, no confusable characters): hashes and instance ids.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
