"""JSON patch ``test`` as kube-apiserver runs it (its json-patch library, v4): null matches a member the
object lacks, but not a missing parent; a failed test makes the whole patch 422 with nothing applied."""

from __future__ import annotations

from typing import Any

import pytest

from services.simcluster.errors import ApiError
from services.simcluster.patch import json_patch

DOC: dict[str, Any] = {"metadata": {"labels": {"a": "1"}, "n": 1, "flag": True}, "list": [{"k": "v"}]}


@pytest.mark.parametrize(
    ("path", "value", "passes"),
    [
        ("/metadata/labels/a", "1", True),
        ("/metadata/labels/a", "2", False),
        ("/metadata/labels/b", None, True),  # a missing member tests as null
        ("/metadata/labels/a", None, False),
        ("/metadata/annotations", None, True),
        ("/metadata/annotations/x", None, False),  # its parent is missing
        ("/metadata/n", 1, True),
        ("/metadata/n", 1.0, False),  # compared as JSON text, as the library compares scalars
        ("/metadata/flag", 1, False),
        ("/list/0", {"k": "v"}, True),
        ("/list/0", {"k": "w"}, False),
        ("/list/1", None, False),  # an index out of range
        ("/list", [{"k": "v"}], True),
    ],
)
def test_a_test_operation(path: str, value: Any, passes: bool) -> None:
    operations = [{"op": "test", "path": path, "value": value}, {"op": "add", "path": "/done", "value": 1}]
    if passes:
        assert json_patch(DOC, operations)["done"] == 1
    else:
        with pytest.raises(ApiError) as refused:
            json_patch(DOC, operations)
        assert refused.value.code == 422 and refused.value.reason == "Invalid"
        assert "done" not in DOC
