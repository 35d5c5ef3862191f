"""Observed pod actions from two consecutive observations of a pod (services/planner/observed_actions.py)."""

from __future__ import annotations

import pytest

from services.planner.observed_actions import PodView, changes, pod_view

OLD = (("nginx", "nginx:alpine"),)
NEW = (("nginx", "nginx:mainline"),)


def view(
    uid: str = "u1",
    revision: str = "sample-old",
    images: tuple[tuple[str, str], ...] = OLD,
    ready: bool = True,
    in_service: bool | None = None,
    terminating: bool = False,
) -> PodView:
    return PodView(uid, revision, images, ready, ready if in_service is None else in_service, terminating)


CASES = [
    ("appears not ready", None, view(ready=False), False, ["createPod"]),
    ("appears ready", None, view(), False, ["createPod", "becameReady"]),
    ("appears under a name used before", None, view(ready=False), True, ["recreatePod"]),
    ("appears already terminating", None, view(terminating=True), False, ["createPod", "deletePod"]),
    ("gone", view(), None, False, ["deletePod"]),
    ("gone after terminating", view(terminating=True), None, False, []),
    ("never seen, gone", None, None, False, []),
    ("starts terminating", view(), view(terminating=True), False, ["deletePod"]),
    ("still terminating", view(terminating=True), view(terminating=True, ready=False), False, []),
    ("replaced by another uid", view(), view(uid="u2", ready=False), False, ["deletePod", "recreatePod"]),
    (
        "replaced after terminating",
        view(terminating=True),
        view(uid="u2", ready=False),
        False,
        ["recreatePod"],
    ),
    ("new revision and image", view(ready=False), view(revision="sample-new", images=NEW, ready=False), False,
     ["updateInPlace"]),
    ("new image only", view(), view(images=NEW, ready=False), False, ["updateInPlace"]),
    ("updated and back at once", view(ready=False), view(revision="sample-new", images=NEW), False,
     ["updateInPlace", "becameReady"]),
    ("leaves service (gate off)", view(), view(ready=True, in_service=False), False, ["leftService"]),
    ("leaves service (not ready)", view(), view(ready=False), False, ["leftService"]),
    ("back in service", view(ready=False), view(), False, ["becameReady"]),
    ("nothing changed", view(), view(), False, []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "after", "name_used", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_changes(before: PodView | None, after: PodView | None, name_used: bool, expected: list[str]) -> None:
    assert [c.action for c in changes(before, after, name_used=name_used)] == expected


def test_an_update_names_both_revisions_and_images() -> None:
    [update] = changes(view(), view(revision="sample-new", images=NEW, ready=False))
    assert (update.from_revision, update.revision, update.from_images, update.images) == (
        "sample-old",
        "sample-new",
        OLD,
        NEW,
    )


def test_pod_view_reads_what_the_api_returns() -> None:
    pod = {
        "metadata": {"uid": "u9", "labels": {"controller-revision-hash": "sample-abc"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "InPlaceUpdateReady", "status": "False"},
            ]
        },
    }
    assert pod_view(pod) == PodView("u9", "sample-abc", OLD, True, False, False)
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    assert pod_view(pod).terminating
