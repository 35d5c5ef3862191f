"""Which objects rollbook acts on (services/model/management.py): one row per rule."""

from __future__ import annotations

from typing import Any

import pytest

from services.model.management import (
    MANAGE_LABEL,
    KruiseEvidence,
    ManageMode,
    Selection,
    refuse_all_beside_kruise,
)

ALL = Selection(ManageMode.ALL)
LABELLED = Selection(ManageMode.LABELLED)
LABELLED_TEAM = Selection(ManageMode.LABELLED, frozenset({"team-a"}))


def cloneset(namespace: str = "default", label: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": namespace, "labels": {"app": "web"}}
    if label is not None:
        metadata["labels"][MANAGE_LABEL] = label
    return {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": metadata}


def sidecarset(label: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "logs"}
    if label is not None:
        metadata["labels"] = {MANAGE_LABEL: label}
    return {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": metadata}


@pytest.mark.parametrize(
    ("selection", "obj", "managed", "reason"),
    [
        (ALL, cloneset(), True, "ROLLBOOK_MANAGE=all"),
        (ALL, cloneset(label="false"), False, "labelled rollbook.io/manage=false"),
        (ALL, cloneset(label="true"), True, "labelled rollbook.io/manage=true"),
        (ALL, sidecarset(), True, "ROLLBOOK_MANAGE=all"),
        (ALL, sidecarset(label="false"), False, "labelled rollbook.io/manage=false"),
        (LABELLED, cloneset(), False, "ROLLBOOK_MANAGE=labelled and not labelled rollbook.io/manage=true"),
        (LABELLED, cloneset(label="true"), True, "labelled rollbook.io/manage=true"),
        (LABELLED, sidecarset(), False, "ROLLBOOK_MANAGE=labelled and not labelled rollbook.io/manage=true"),
        (LABELLED, sidecarset(label="true"), True, "labelled rollbook.io/manage=true"),
        # Someone else drives it: recorded (shadow mode), never acted on, whatever the mode.
        (ALL, cloneset(label="shadow"), False, "labelled rollbook.io/manage=shadow"),
        (LABELLED_TEAM, cloneset("team-a"), True, "namespace team-a is in ROLLBOOK_MANAGE_NAMESPACES"),
        (LABELLED_TEAM, cloneset("team-b"), False, "not labelled"),
        # The object's own opt-out wins over its namespace's opt-in.
        (LABELLED_TEAM, cloneset("team-a", label="false"), False, "labelled rollbook.io/manage=false"),
        # A cluster-scoped SidecarSet is in no namespace: only its label counts.
        (LABELLED_TEAM, sidecarset(), False, "not labelled"),
        # A value that is none of true, false, shadow counts as absent, and the verdict says so.
        (LABELLED, cloneset(label="yes"), False, "'yes' is none of true, false, shadow"),
        (ALL, cloneset(label="True"), True, "'True' is none of true, false, shadow"),
    ],
)
def test_verdict(selection: Selection, obj: dict[str, Any], managed: bool, reason: str) -> None:
    verdict = selection.verdict(obj)
    assert verdict.managed is managed and selection.manages(obj) is managed
    assert reason in verdict.reason


def test_an_object_without_metadata_is_judged_by_the_mode() -> None:
    assert ALL.manages({}) and not LABELLED.manages({})


@pytest.mark.parametrize(
    ("mode", "namespaces", "expected"),
    [
        ("all", "", Selection(ManageMode.ALL)),
        (" Labelled ", "team-a, ,team-b,", Selection(ManageMode.LABELLED, frozenset({"team-a", "team-b"}))),
    ],
)
def test_parse(mode: str, namespaces: str, expected: Selection) -> None:
    assert Selection.parse(mode, namespaces) == expected


def test_a_mode_that_does_not_exist_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="ROLLBOOK_MANAGE: expected one of all, labelled, got 'some'"):
        Selection.parse("some")


FOUND = KruiseEvidence(found=("Deployment kruise-system/kruise-controller-manager",))


def test_all_is_refused_beside_kruise_manager() -> None:
    resolved = refuse_all_beside_kruise(Selection(ManageMode.ALL, frozenset({"team-a"})), FOUND)
    assert resolved.refused_all
    assert resolved.selection == Selection(ManageMode.LABELLED, frozenset({"team-a"}))
    assert "kruise-system/kruise-controller-manager" in resolved.message
    assert "refusing ROLLBOOK_MANAGE=all" in resolved.message and "team-a" in resolved.message
    # What that means for objects: an unlabelled CloneSet is left to kruise-manager.
    assert not resolved.selection.manages(cloneset())
    assert resolved.selection.manages(cloneset(label="true"))


@pytest.mark.parametrize(
    ("selection", "evidence", "message"),
    [
        (LABELLED, FOUND, "kruise-manager found"),
        (ALL, KruiseEvidence(), "kruise-manager not found"),
        (ALL, KruiseEvidence(unknown=("Deployment x: HTTP 403 Forbidden",)), "could not tell"),
        (LABELLED, KruiseEvidence(), "kruise-manager not found"),
    ],
)
def test_the_selection_is_kept_otherwise(
    selection: Selection, evidence: KruiseEvidence, message: str
) -> None:
    resolved = refuse_all_beside_kruise(selection, evidence)
    assert resolved.selection == selection and not resolved.refused_all
    assert message in resolved.message and f"ROLLBOOK_MANAGE={selection.mode.value}" in resolved.message
