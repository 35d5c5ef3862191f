"""The simulated image puller: the first pull of an image on a node takes ``Timing.pull_cold``, later ones
``pull_cached``; ``failing_images`` never pull (ImagePullBackOff) and ``crashing_images`` start and then
exit with an error (fnmatch patterns). Records the Pulling / Pulled / Failed events."""

from __future__ import annotations

import fnmatch

from .nodes import EventRecorder, NodeState, Timing
from .store import Obj


class ImagePuller:
    def __init__(
        self,
        timing: Timing,
        events: EventRecorder,
        failing_images: tuple[str, ...] = (),
        crashing_images: tuple[str, ...] = (),
    ) -> None:
        self.timing = timing
        self.events = events
        self.failing_images = failing_images
        self.crashing_images = crashing_images

    def pull_seconds(self, node: NodeState | None, image: str) -> float:
        if node is None or image in node.images:
            return self.timing.pull_cached
        return self.timing.pull_cold

    def fails(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.failing_images)

    def crashes(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.crashing_images)

    def plan(self, pod: Obj, node: NodeState | None, images: list[str]) -> dict[str, float]:
        """Seconds each image takes on this node; records Pulling, or Pulled for one already there."""
        pulls = {image: self.pull_seconds(node, image) for image in images}
        for image in pulls:
            if node is not None and image in node.images:
                self.events.emit(pod, "Pulled", f'Container image "{image}" already present on machine')
            else:
                self.events.emit(pod, "Pulling", f'Pulling image "{image}"')
        return pulls

    def finish(self, pod: Obj, node: NodeState | None, pulls: dict[str, float]) -> None:
        """The pulls are over: successful ones are recorded (event, and the image is on the node now)."""
        for image, seconds in pulls.items():
            if (node is None or image not in node.images) and not self.fails(image):
                self.events.emit(pod, "Pulled", f'Successfully pulled image "{image}" in {seconds:.3f}s')
        for image in pulls:
            if node is not None and not self.fails(image):
                node.images.add(image)

    def report_failure(self, pod: Obj, image: str) -> None:
        self.events.emit(
            pod,
            "Failed",
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = '
            f'failed to pull and unpack image "{image}": not found',
            warning=True,
        )
