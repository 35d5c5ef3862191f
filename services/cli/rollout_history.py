"""`rollbook rollout history` and `rollbook rollout undo` for a CloneSet, as kubectl's rollout verbs behave
for a Deployment, with the revisions read from the audit trail (rollbook keeps a CloneSet's revisions
there, as ``RevisionCreated`` / ``RevisionsPruned``, not as ControllerRevisions in the cluster).

    history                 every revision kept: its number, name, when it was recorded, who changed the
                            template to it and how (the CloneSet's rollbook.io/changed-by and
                            rollbook.io/change annotations, or kubectl's kubernetes.io/change-cause,
                            written in the same change), and what changed against the revision before
    history --revision N    revision N's pod template, and its diff against the revision before it
    undo [--to-revision N]  put revision N's template back (0, the default: the revision before the
                            latest) with one JSON patch through the API server, as kubectl does; the
                            planner then records it as a rollout of its own (a new rollout id)

As kubectl: a paused CloneSet is not rolled back (resume it first), a template that already matches is
"skipped rollback", an unknown revision is an error. A revision whose recorded template holds redacted
values (env values, denied annotations: docs/events.md "Redaction") cannot be restored from the trail and
is refused, naming the fields: the real values were never recorded.

The fold, the attribution, the diff and the choice of revision are pure functions; reading the trail and
patching are at the edges.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.cli.errors import CommandError

CHANGED_BY = "rollbook.io/changed-by"
CHANGE = "rollbook.io/change"
CHANGE_CAUSE = "kubernetes.io/change-cause"  # kubectl's (--record)
DIGEST_PREFIX = "hmac-sha256:"  # a redacted value (services/model/redaction.py)


@dataclass(frozen=True)
class Revision:
    number: int
    name: str
    template: dict[str, Any]
    recorded: datetime | None  # when this number was given (a rollback renumbers an old revision)
    position: int  # global position of that RevisionCreated
    changed_by: str = "-"
    change: str = "-"


@dataclass(frozen=True)
class Observation:
    """A CloneSet as the watcher recorded it: where, its pod template and its annotations."""

    position: int
    template: dict[str, Any]
    annotations: dict[str, str]


def fold_revisions(events: Iterable[tuple[str, int, datetime | None, Mapping[str, Any]]]) -> list[Revision]:
    """The revisions kept after these decision events (type, position, when, payload), in trail order, by
    number: a ``RevisionCreated`` of a known name renumbers it; ``RevisionsPruned`` drops names."""
    from services.model.revision_hash import strip_patch

    kept: dict[str, Revision] = {}
    for kind, position, when, payload in events:
        if kind == "RevisionCreated":
            name, template = str(payload.get("name", "")), payload.get("template")
            if name and isinstance(template, dict) and isinstance(payload.get("revision"), int):
                kept[name] = Revision(int(payload["revision"]), name, strip_patch(template), when, position)
        elif kind == "RevisionsPruned":
            for name in payload.get("names") or []:
                kept.pop(str(name), None)
    return sorted(kept.values(), key=lambda r: r.number)


def attribute(revisions: Sequence[Revision], observations: Sequence[Observation]) -> list[Revision]:
    """Each revision with who changed the template to it and how: the annotations of the observation that
    brought the template (the last one before the revision was recorded whose template differs from the
    one before it), when that same change wrote them (they differ from the observation before); "-" when
    nobody said (an edit that did not annotate, a trail recorded before the annotations)."""
    changes: list[tuple[Observation, Observation | None]] = []
    previous: Observation | None = None
    for seen in observations:
        if previous is None or seen.template != previous.template:
            changes.append((seen, previous))
        previous = seen
    attributed = []
    for revision in revisions:
        brought = [(seen, before) for seen, before in changes if seen.position < revision.position]
        who, what = "-", "-"
        if brought:
            seen, before = brought[-1]
            earlier = before.annotations if before is not None else {}
            if seen.annotations.get(CHANGE) and seen.annotations.get(CHANGE) != earlier.get(CHANGE):
                who, what = seen.annotations.get(CHANGED_BY) or "-", seen.annotations[CHANGE]
            elif seen.annotations.get(CHANGE_CAUSE) and seen.annotations.get(CHANGE_CAUSE) != earlier.get(
                CHANGE_CAUSE
            ):
                what = seen.annotations[CHANGE_CAUSE]
        attributed.append(
            Revision(revision.number, revision.name, revision.template, revision.recorded, revision.position,
                     who, what)
        )  # fmt: skip
    return attributed


def _flatten(value: Any, path: str, into: dict[str, Any]) -> dict[str, Any]:
    """Leaf paths of a template; list items that are objects with a name are keyed by it
    (``spec.containers[main].image``), so a reordering is no change."""
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            _flatten(value[key], f"{path}.{key}" if path else str(key), into)
    elif isinstance(value, list) and value:
        named = all(isinstance(v, Mapping) and isinstance(v.get("name"), str) for v in value)
        for i, item in enumerate(value):
            _flatten(item, f"{path}[{item['name'] if named else i}]", into)
    else:
        into[path] = value
    return into


def _shown(value: Any, width: int = 48) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def template_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What changed from ``old`` to ``new``, one line per leaf: ``path: a → b``, ``+path: b``, ``-path: a``
    (everything is new when there is no ``old``)."""
    before = _flatten(old or {}, "", {})
    after = _flatten(new, "", {})
    lines = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            lines.append(f"+{path}: {_shown(after[path])}")
        elif path not in after:
            lines.append(f"-{path}: {_shown(before[path])}")
        elif before[path] != after[path]:
            lines.append(f"{path}: {_shown(before[path])} → {_shown(after[path])}")
    return lines


def summary(old: Mapping[str, Any] | None, new: Mapping[str, Any], most: int = 2) -> str:
    if old is None:
        return "first revision"
    lines = template_changes(old, new)
    if not lines:
        return "no template change"
    return "; ".join(lines[:most]) + (f"; +{len(lines) - most} more" if len(lines) > most else "")


def template_yaml(template: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(template), sort_keys=True, default_flow_style=False)


def template_diff(old: Mapping[str, Any] | None, new: Mapping[str, Any], old_name: str, new_name: str) -> str:
    """A unified diff of the two templates as YAML (empty when equal)."""
    return "".join(
        difflib.unified_diff(
            template_yaml(old).splitlines(keepends=True) if old is not None else [],
            template_yaml(new).splitlines(keepends=True),
            fromfile=old_name,
            tofile=new_name,
        )
    )


def redacted_fields(template: Mapping[str, Any]) -> list[str]:
    """Paths of the template whose recorded value is a redaction digest (the real value is not known)."""
    return [
        p for p, v in _flatten(template, "", {}).items() if isinstance(v, str) and v.startswith(DIGEST_PREFIX)
    ]


def undo_target(revisions: Sequence[Revision], to_revision: int, key: str) -> Revision:
    """The revision ``undo --to-revision`` restores (0: the one before the latest), as kubectl picks it."""
    if to_revision < 0:
        raise CommandError(f"--to-revision must be 0 or more, not {to_revision}", exit_code=2)
    if not revisions:
        raise CommandError(f"no rollout history found for cloneset {key}")
    if to_revision == 0:
        if len(revisions) < 2:
            raise CommandError(f"no rollout history found for cloneset {key}: it has one revision only")
        return revisions[-2]
    for revision in revisions:
        if revision.number == to_revision:
            return revision
    raise CommandError(f"unable to find specified revision {to_revision} in history of cloneset {key}")


def same_template(live: Mapping[str, Any], recorded: Mapping[str, Any]) -> bool:
    """Whether the live template is the recorded one (kubectl compares ignoring the pod-template-hash
    label; a CloneSet's revision label is not on its template either)."""
    from services.model.revision_hash import strip_patch

    return json.dumps(strip_patch(dict(live)), sort_keys=True) == json.dumps(dict(recorded), sort_keys=True)


def undo_patch(
    cloneset: Mapping[str, Any], revision: Revision, who: str, stamp: str, key: str
) -> list[dict[str, Any]] | None:
    """The JSON patch that restores ``revision``'s template on ``cloneset`` (None: it already matches),
    guarded by the resourceVersion read; refused for a paused CloneSet (kubectl's rule) and for a template
    whose recorded values are redacted."""
    spec = cloneset.get("spec") or {}
    if (spec.get("updateStrategy") or {}).get("paused") is True:
        raise CommandError(
            f"you cannot rollback a paused cloneset; resume it first with"
            f" 'rollbook rollout resume {key}' and try again"
        )
    hidden = redacted_fields(revision.template)
    if hidden:
        raise CommandError(
            f"revision {revision.number} of cloneset {key} was recorded with redacted values"
            f" ({', '.join(hidden[:3])}{', …' if len(hidden) > 3 else ''}): the trail cannot restore them;"
            " apply that revision's manifest instead"
        )
    if same_template(spec.get("template") or {}, revision.template):
        return None
    metadata = cloneset.get("metadata") or {}
    annotations = {
        **dict(metadata.get("annotations") or {}),
        CHANGED_BY: who,
        CHANGE: f"undo to revision {revision.number} ({revision.name}) at {stamp}",
    }
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata.get("resourceVersion")},
        {"op": "replace", "path": "/spec/template", "value": revision.template},
        {"op": "add", "path": "/metadata/annotations", "value": annotations},
    ]


# --- the edges: the trail, the API server, the terminal -------------------------------------------------


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def recorded_revisions(connection: Any, namespace: str, name: str) -> list[Revision]:
    from services.infra import audit_queries
    from services.kinds.registry import CLONESET

    events = [
        (r["type"], r["global_position"], r["occurred_at"], _json(r["payload"]) or {})
        for r in await audit_queries.revision_events(connection, CLONESET.decisions_stream(namespace, name))
    ]
    observations = [
        Observation(r["global_position"], _json(r["template"]) or {}, _json(r["annotations"]) or {})
        for r in await audit_queries.observed_templates(
            connection, CLONESET.observed_stream(namespace, name), CLONESET.name
        )
    ]
    return attribute(fold_revisions(events), observations)


async def read_revisions(settings: Any, namespace: str, name: str) -> list[Revision]:
    from services.cli.history import QueryError, connect

    try:
        async with connect(settings) as connection:
            return await recorded_revisions(connection, namespace, name)
    except QueryError as error:
        raise CommandError(str(error)) from None


def history_text(revisions: Sequence[Revision], namespace: str, name: str, revision: int | None) -> str:
    key = f"{namespace}/{name}"
    if not revisions:
        raise CommandError(f"no rollout history found for cloneset {key}")
    if revision is not None:
        index = next((i for i, r in enumerate(revisions) if r.number == revision), None)
        if index is None:
            raise CommandError(f"unable to find the specified revision {revision} of cloneset {key}")
        chosen = revisions[index]
        before = revisions[index - 1] if index > 0 else None
        lines = [
            f"cloneset.apps.kruise.io/{name} with revision #{chosen.number} ({chosen.name})",
            f"Recorded: {_when(chosen.recorded)}",
            f"Changed by: {chosen.changed_by}",
            f"Change: {chosen.change}",
            "Pod Template:",
            *("  " + line for line in template_yaml(chosen.template).splitlines()),
        ]
        if before is not None:
            diff = template_diff(
                before.template, chosen.template, f"revision {before.number}", f"revision {chosen.number}"
            )
            lines += [
                f"Diff against revision #{before.number} ({before.name}):",
                diff.rstrip("\n") or "  (none)",
            ]
        return "\n".join(lines)
    rows = [("REVISION", "NAME", "RECORDED", "CHANGED BY", "CHANGE", "WHAT CHANGED")]
    for i, r in enumerate(revisions):
        previous = revisions[i - 1].template if i > 0 else None
        rows.append(
            (str(r.number), r.name, _when(r.recorded), r.changed_by, r.change, summary(previous, r.template))
        )
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]) - 1)]
    table = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    ]
    return "\n".join([f"cloneset.apps.kruise.io/{name}", *table])


def _when(moment: datetime | None) -> str:
    return moment.astimezone().isoformat(timespec="seconds") if moment else "-"


async def undo(
    settings: Any, namespace: str, name: str, to_revision: int, *, who: str, field_manager: str
) -> str:
    """Roll ``namespace/name`` back; ``who`` and ``field_manager``: as the other rollout verbs record them
    (services/cli/rollout.py)."""
    from datetime import UTC

    from kubernetes_asyncio import client

    from services.cli.clonesets import cloneset_read_error
    from services.infra.kube import api_client
    from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION

    key = f"{namespace}/{name}"
    api = await api_client(settings)
    async with api:
        custom = client.CustomObjectsApi(api)
        try:
            cloneset = await custom.get_namespaced_custom_object(
                CLONESET_GROUP, CLONESET_VERSION, namespace, CLONESET_PLURAL, name
            )
        except client.ApiException as error:
            raise CommandError(cloneset_read_error(error.status, error.body, namespace, name)) from None
        revisions = await read_revisions(settings, namespace, name)
        target = undo_target(revisions, to_revision, key)
        stamp = datetime.now(UTC).astimezone().isoformat(timespec="seconds")
        patch = undo_patch(cloneset, target, who, stamp, key)
        if patch is None:
            return (
                f"cloneset.apps.kruise.io/{name} skipped rollback"
                f" (current template already matches revision {target.number})"
            )
        try:
            await custom.patch_namespaced_custom_object(
                CLONESET_GROUP, CLONESET_VERSION, namespace, CLONESET_PLURAL, name, patch,
                field_manager=field_manager,
                _content_type="application/json-patch+json",  # type: ignore[call-arg]
            )  # fmt: skip
        except client.ApiException as error:
            if error.status == 422 and "test" in str(error.body).lower():
                raise CommandError(
                    f"cloneset {key} changed while rolling back: run the command again"
                ) from None
            raise CommandError(cloneset_read_error(error.status, error.body, namespace, name)) from None
    return f"cloneset.apps.kruise.io/{name} rolled back"
