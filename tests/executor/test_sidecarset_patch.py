"""The executor re-bases a planned sidecar upgrade on the pod as it is now (services/executor/sidecarset.py):
another SidecarSet's entries written since the planner looked are kept."""

from __future__ import annotations

import json
from typing import Any

from services.executor.sidecarset import merged_patch
from services.model.sidecarset import HASH_ANNOTATION
from services.model.sidecarset_streams import SIDECARSET_INPLACE_STATE_ANNOTATION


def test_only_this_sidecarsets_entries_come_from_the_plan() -> None:
    planned: dict[str, Any] = {
        "metadata": {
            "annotations": {
                HASH_ANNOTATION: json.dumps({"tools": {"hash": "new"}, "logging": {"hash": "stale"}}),
                SIDECARSET_INPLACE_STATE_ANNOTATION: json.dumps({"tools": {"revision": "new"}}),
            }
        },
        "spec": {"containers": [{"name": "tools", "image": "centos:7"}]},
    }
    pod_now = {
        "metadata": {
            "annotations": {
                # logging upgraded its sidecar after the planner observed the pod
                HASH_ANNOTATION: json.dumps({"tools": {"hash": "old"}, "logging": {"hash": "fresh"}}),
                SIDECARSET_INPLACE_STATE_ANNOTATION: json.dumps({"logging": {"revision": "fresh"}}),
            }
        }
    }
    patch = merged_patch(planned, pod_now, "tools")
    annotations = patch["metadata"]["annotations"]
    assert json.loads(annotations[HASH_ANNOTATION]) == {
        "tools": {"hash": "new"},
        "logging": {"hash": "fresh"},
    }
    assert json.loads(annotations[SIDECARSET_INPLACE_STATE_ANNOTATION]) == {
        "logging": {"revision": "fresh"},
        "tools": {"revision": "new"},
    }
    assert patch["spec"] == planned["spec"]
    assert json.loads(planned["metadata"]["annotations"][HASH_ANNOTATION])["logging"] == {"hash": "stale"}
