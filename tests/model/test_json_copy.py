"""json_copy: what what-if and simcluster copy objects with, instead of copy.deepcopy."""

import pytest

from services.model.json_copy import json_copy


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": {"name": "web-0", "labels": {"app": "web"}}, "spec": {"containers": [{"image": "a:1"}]}},
        [1, 2.5, "x", None, True, {"nested": [[]]}],
        "text",
        7,
    ],
)
def test_a_copy_equals_the_original(obj: object) -> None:
    assert json_copy(obj) == obj


def test_a_copy_shares_nothing_with_the_original() -> None:
    pod = {"metadata": {"labels": {"app": "web"}}, "status": {"conditions": [{"type": "Ready"}]}}
    copied = json_copy(pod)
    copied["metadata"]["labels"]["app"] = "other"
    copied["status"]["conditions"].append({"type": "PodScheduled"})
    assert pod == {"metadata": {"labels": {"app": "web"}}, "status": {"conditions": [{"type": "Ready"}]}}


def test_what_json_cannot_hold_comes_back_as_json_or_is_refused() -> None:
    assert json_copy({"pair": (1, 2), 1: "a number key"}) == {"pair": [1, 2], "1": "a number key"}
    with pytest.raises(TypeError):
        json_copy({"opaque": object()})
