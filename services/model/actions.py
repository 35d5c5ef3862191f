"""The kinds of action the planners request (``PodActionRequested.action``) and the executor carries out:
one definition, matched everywhere an action's kind is (docs/plan.md, "Actions"; docs/events.md).

``ActionKind`` is a ``StrEnum``: a member equals its string, so events recorded with a plain string
compare equal to it, and the planner's plan model uses the values as the tags of its action union.
"""

from __future__ import annotations

from enum import StrEnum


class ActionKind(StrEnum):
    # CloneSet pods and claims (the CloneSet planner's plan actions, services/kinds/cloneset/rules/model.py)
    CREATE_PVC = "createPVC"
    CREATE_POD = "createPod"
    DELETE_POD = "deletePod"
    DELETE_PVC = "deletePVC"
    RECREATE_POD = "recreatePod"
    UPDATE_IN_PLACE = "updateInPlace"
    # container resources resized in the running pod through pods/resize (Kubernetes 1.33+)
    RESIZE = "resize"
    MARK_NOT_READY = "markNotReady"
    MARK_READY = "markReady"
    PATCH_POD = "patchPod"
    # the CloneSet itself: write the pruned spec.scaleStrategy.podsToDelete (targets the workload, no pod)
    SET_PODS_TO_DELETE = "setPodsToDelete"
    # a pod's sidecar containers, upgraded in place by its SidecarSet
    UPDATE_SIDECAR_IN_PLACE = "updateSidecarInPlace"


# Actions on claims, not pods: they wait for nothing a pod observation shows.
PVC_ACTIONS = frozenset({ActionKind.CREATE_PVC, ActionKind.DELETE_PVC})
# Actions on an existing pod (the request names the pod's uid so a later pod of that name is not mistaken
# for it).
EXISTING_POD_ACTIONS = frozenset(
    {
        ActionKind.UPDATE_IN_PLACE,
        ActionKind.RESIZE,
        ActionKind.RECREATE_POD,
        ActionKind.MARK_NOT_READY,
        ActionKind.MARK_READY,
        ActionKind.PATCH_POD,
    }
)

# Not an action anyone requests: shadow mode's observation that a pod another controller changed is ready
# again (``PodActionObserved.action``, next to the action kinds it observes).
BECAME_READY = "becameReady"
