"""A CloneSet's life as OpenKruise's controller would write it, as the watcher's observations: for the
shadow trail's pure tests. Revision names use another hash than rollbook's, as OpenKruise's do."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from services.kinds.registry import CLONESET
from services.model.events import Envelope, ObjectObserved, new_event
from services.model.streams import derived_id

GATE = "InPlaceUpdateReady"
START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def kruise_revision(name: str, template: dict[str, Any]) -> str:
    """Not rollbook's hash (that is the point): OpenKruise hashes Go's JSON of the template."""
    return f"{name}-{hashlib.sha1(json.dumps(template).encode()).hexdigest()[:10]}"  # noqa: S324


class KruiseLog:
    """Objects in a namespace and their observations, one per change, a second apart."""

    def __init__(
        self, name: str = "web", namespace: str = "default", replicas: int = 3, **strategy: Any
    ) -> None:
        self.name, self.namespace = name, namespace
        self.version = 0
        self.clock = START
        self.envelopes: list[Envelope] = []
        self.cloneset: dict[str, Any] = {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "CloneSet",
            "metadata": {"name": name, "namespace": namespace, "uid": "cs-uid", "generation": 1},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "main", "image": "nginx:1.0"}]},
                },
                "updateStrategy": {"type": "InPlaceIfPossible", **strategy},
            },
            "status": {},
        }
        self.pods: dict[str, dict[str, Any]] = {}
        self.observe_cloneset()

    # --- observations ---

    def _emit(self, kind: str, obj: dict[str, Any], change: str) -> None:
        self.version += 1
        self.clock += timedelta(seconds=1)
        metadata = obj["metadata"]
        self.envelopes.append(
            new_event(
                ObjectObserved(
                    kind=kind,
                    namespace=self.namespace,
                    name=metadata["name"],
                    uid=metadata["uid"],
                    resource_version=str(self.version),
                    change=change,  # type: ignore[arg-type]
                    object=copy.deepcopy(obj),
                ),
                stream=CLONESET.observed_stream(self.namespace, self.name),
                stream_version=self.version,
                occurred_at=self.clock,
                event_id=derived_id("test-observation", self.name, self.version),
            )
        )

    def observe_cloneset(self) -> None:
        self._emit("CloneSet", self.cloneset, "MODIFIED" if self.version else "ADDED")

    # --- the controller's moves ---

    @property
    def revision(self) -> str:
        return kruise_revision(self.name, self.cloneset["spec"]["template"])

    def write_status(self, *, current: str | None = None) -> None:
        pods = [p for p in self.pods.values() if not p["metadata"].get("deletionTimestamp")]
        update = self.revision
        updated = [p for p in pods if p["metadata"]["labels"]["controller-revision-hash"] == update]
        replicas = self.cloneset["spec"]["replicas"]
        ready = [p for p in updated if _ready(p)]
        done = len(updated) == replicas == len(pods)
        self.cloneset["status"] = {
            "observedGeneration": self.cloneset["metadata"]["generation"],
            "replicas": len(pods),
            "updatedReplicas": len(updated),
            "updatedReadyReplicas": len(ready),
            "updateRevision": update,
            "currentRevision": update
            if done
            else (current or self.cloneset["status"].get("currentRevision") or update),
        }
        self.observe_cloneset()

    def set_image(self, image: str) -> None:
        self.cloneset["spec"]["template"]["spec"]["containers"][0]["image"] = image
        self.cloneset["metadata"]["generation"] += 1
        self.observe_cloneset()

    def create_pod(self, instance: str, *, ready: bool = True) -> str:
        name = f"{self.name}-{instance}"
        template = self.cloneset["spec"]["template"]
        pod = {
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": f"{name}-uid-{self.version}",
                "creationTimestamp": (self.clock + timedelta(seconds=1)).isoformat().replace("+00:00", "Z"),
                "labels": {
                    **template["metadata"]["labels"],
                    "controller-revision-hash": self.revision,
                    "apps.kruise.io/cloneset-instance-id": instance,
                },
                "ownerReferences": [
                    {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": self.name,
                     "uid": "cs-uid", "controller": True}
                ],
            },
            "spec": {**copy.deepcopy(template["spec"]), "readinessGates": [{"conditionType": GATE}]},
            "status": {"phase": "Running", "conditions": _conditions(ready, ready)},
        }  # fmt: skip
        self.pods[name] = pod
        self._emit("Pod", pod, "ADDED")
        return name

    def set_ready(self, pod: str, ready: bool = True) -> None:
        self.pods[pod]["status"]["conditions"] = _conditions(ready, ready)
        self._emit("Pod", self.pods[pod], "MODIFIED")

    def start_in_place(self, pod: str) -> None:
        """OpenKruise's first write of an in-place update: InPlaceUpdateReady=False (so Ready=False)."""
        self.pods[pod]["status"]["conditions"] = _conditions(False, False)
        self._emit("Pod", self.pods[pod], "MODIFIED")

    def patch_in_place(self, pod: str) -> None:
        """The pod update: revision label and images of the template."""
        obj = self.pods[pod]
        obj["metadata"]["labels"]["controller-revision-hash"] = self.revision
        obj["spec"]["containers"] = copy.deepcopy(self.cloneset["spec"]["template"]["spec"]["containers"])
        self._emit("Pod", obj, "MODIFIED")

    def delete_pod(self, pod: str) -> None:
        obj = self.pods.pop(pod)
        self._emit("Pod", obj, "DELETED")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])


def _conditions(ready: bool, gate: bool) -> list[dict[str, str]]:
    return [
        {"type": "InPlaceUpdateReady", "status": str(gate)},
        {"type": "Ready", "status": str(ready)},
    ]
