"""``kubectl get pods`` columns for a pod with a native sidecar, as kubectl's printPod computes them: the
sidecar counts in READY and RESTARTS, and once started it does not hold the STATUS at ``Init:``."""

from __future__ import annotations

from typing import Any

from services.simcluster.tables import _pod_row, pod_status_reason


def pod(proxy_state: dict[str, Any], *, started: bool, ready: bool, restarts: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-0", "creationTimestamp": "2026-12-06T12:00:00Z"},
        "spec": {
            "initContainers": [
                {"name": "setup", "image": "busybox:1"},
                {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "app", "image": "nginx:1"}],
        },
        "status": {
            "phase": "Running",
            "initContainerStatuses": [
                {"name": "setup", "ready": True, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
                {
                    "name": "proxy",
                    "ready": ready,
                    "started": started,
                    "restartCount": restarts,
                    "state": proxy_state,
                },
            ],
            "containerStatuses": [
                {"name": "app", "ready": True, "restartCount": 0, "state": {"running": {}}},
            ],
        },
    }


def test_a_running_native_sidecar_counts_as_a_container() -> None:
    running = pod({"running": {}}, started=True, ready=True, restarts=1)
    row = _pod_row(running)
    assert (row[1], row[2], row[3]) == ("2/2", "Running", 1)


def test_a_restarting_native_sidecar_is_not_ready() -> None:
    restarting = pod({"waiting": {"reason": "ContainerRebuilding"}}, started=False, ready=False, restarts=1)
    assert _pod_row(restarting)[1] == "1/2"
    assert pod_status_reason(restarting) == "Init:ContainerRebuilding"
