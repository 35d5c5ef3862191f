"""Which CloneSets and SidecarSets rollbook acts on (docs/install.md, "Which objects rollbook manages").

On a cluster that also runs OpenKruise's kruise-manager, both controllers would act on every CloneSet
and fight, so the choice is explicit:

- the label ``rollbook.io/manage`` on the object: ``"true"`` opts it in, ``"false"`` opts it out, in
  either mode (any other value counts as absent, and the verdict says so);
- the mode (``ROLLBOOK_MANAGE``): ``all`` manages every object not opted out (a cluster where rollbook is
  the only CloneSet controller), ``labelled`` only those opted in;
- in ``labelled`` mode, CloneSets in the namespaces of ``ROLLBOOK_MANAGE_NAMESPACES`` count as opted in
  (SidecarSets are cluster-scoped: only their label counts);
- ``all`` is refused when kruise-manager is found running: the mode becomes ``labelled``
  (``refuse_all_beside_kruise``).

Pure: the services call ``manages`` with the object as observed; the watcher still observes everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

MANAGE_LABEL = "rollbook.io/manage"
OPT_IN = "true"
OPT_OUT = "false"
# Someone else drives the object; rollbook only records it (shadow mode, docs/shadow.md).
SHADOW = "shadow"


class ManageMode(StrEnum):
    ALL = "all"
    LABELLED = "labelled"


def parse_mode(raw: str) -> ManageMode:
    """The mode named by ``ROLLBOOK_MANAGE``; ValueError naming the setting otherwise."""
    try:
        return ManageMode(raw.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in ManageMode)
        raise ValueError(f"ROLLBOOK_MANAGE: expected one of {choices}, got {raw!r}") from None


def parse_namespaces(raw: str) -> frozenset[str]:
    """``ROLLBOOK_MANAGE_NAMESPACES``: comma-separated namespace names, blanks ignored."""
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


@dataclass(frozen=True)
class Verdict:
    managed: bool
    reason: str

    def __bool__(self) -> bool:
        return self.managed


@dataclass(frozen=True)
class Selection:
    """The rule deciding, per object, whether rollbook acts on it."""

    mode: ManageMode = ManageMode.ALL
    namespaces: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, mode: str, namespaces: str = "") -> Selection:
        return cls(parse_mode(mode), parse_namespaces(namespaces))

    def verdict(self, obj: Mapping[str, Any]) -> Verdict:
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") or {}
        value = labels.get(MANAGE_LABEL)
        if value == OPT_OUT:
            return Verdict(False, f"labelled {MANAGE_LABEL}={OPT_OUT}")
        if value == SHADOW:
            return Verdict(False, f"labelled {MANAGE_LABEL}={SHADOW}: recorded, never acted on")
        if value == OPT_IN:
            return Verdict(True, f"labelled {MANAGE_LABEL}={OPT_IN}")
        ignored = ""
        if value is not None:
            ignored = f" ({MANAGE_LABEL}={value!r} is none of {OPT_IN}, {OPT_OUT}, {SHADOW})"
        if self.mode is ManageMode.ALL:
            return Verdict(True, f"ROLLBOOK_MANAGE=all{ignored}")
        namespace = metadata.get("namespace") or ""
        if namespace and namespace in self.namespaces:
            return Verdict(True, f"namespace {namespace} is in ROLLBOOK_MANAGE_NAMESPACES{ignored}")
        return Verdict(False, f"ROLLBOOK_MANAGE=labelled and not labelled {MANAGE_LABEL}={OPT_IN}{ignored}")

    def manages(self, obj: Mapping[str, Any]) -> bool:
        return self.verdict(obj).managed


@dataclass(frozen=True)
class KruiseEvidence:
    """What the start-up probe found of OpenKruise's controller; ``unknown`` lists probes that could not
    answer (no permission, API unreachable), which is neither presence nor absence."""

    found: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.found)


@dataclass(frozen=True)
class Resolved:
    selection: Selection
    refused_all: bool  # ROLLBOOK_MANAGE=all was asked for and kruise-manager was found
    message: str


def refuse_all_beside_kruise(selection: Selection, evidence: KruiseEvidence) -> Resolved:
    """The selection to use given what was found of kruise-manager: never ``all`` beside it."""
    if evidence.present and selection.mode is ManageMode.ALL:
        return Resolved(
            Selection(ManageMode.LABELLED, selection.namespaces),
            True,
            f"kruise-manager found ({_joined(evidence.found)}): refusing ROLLBOOK_MANAGE=all, managing only "
            f"objects labelled {MANAGE_LABEL}={OPT_IN}"
            + (f" and CloneSets in {_joined(sorted(selection.namespaces))}" if selection.namespaces else ""),
        )
    if evidence.present:
        message = f"kruise-manager found ({_joined(evidence.found)}); managing only opted-in objects"
    elif evidence.unknown:
        message = f"could not tell whether kruise-manager runs ({_joined(evidence.unknown)})"
    else:
        message = "kruise-manager not found"
    return Resolved(selection, False, f"{message}; ROLLBOOK_MANAGE={selection.mode.value}")


def _joined(items: Iterable[str]) -> str:
    return ", ".join(items)
