"""`rollbook inject`: print a pod (or a workload's pod template) as the SidecarSet webhook would admit it.

It builds the AdmissionReview the API server would send, answers it with the webhook's own function
(services.webhook.admission.review_pod) and applies the returned JSONPatch, so the output is what the
cluster would store. Like `istioctl kube-inject`, workloads with a pod template are injected in place.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from services.domain import sidecarset as ss
from services.domain.settings import Settings
from services.webhook import admission


class OutputFormat(StrEnum):
    json = "json"
    yaml = "yaml"
    patch = "patch"  # the JSONPatch the webhook answers, per document


class InjectError(Exception):
    """Bad input: printed as the error message, exit code 2."""


def _read_documents(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as err:
        raise InjectError(f"{path}: {err.strerror}") from None
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise InjectError(f"{path}: not YAML/JSON: {err}") from None
    flattened: list[Any] = []
    for document in documents:  # a `kind: List` (kubectl get -o yaml) holds its objects in items
        if isinstance(document, dict) and document.get("kind") == "List":
            flattened.extend(document.get("items") or [])
        else:
            flattened.append(document)
    return flattened


def load_sidecarsets(paths: Iterable[str]) -> list[ss.SidecarSet]:
    """Parse and validate SidecarSets as the validating webhook would, including conflicts between them."""
    accepted: list[ss.SidecarSet] = []
    for path in paths:
        for document in _read_documents(path):
            if not isinstance(document, dict) or document.get("kind") != ss.KIND:
                kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
                raise InjectError(f"{path}: expected kind SidecarSet, got {kind!r}")
            name = (document.get("metadata") or {}).get("name")
            try:
                parsed = ss.parse_sidecarset(document)
            except ss.SidecarSetError as err:
                raise InjectError(f"{path}: SidecarSet {name!r} is invalid: {err}") from None
            if any(other.name == parsed.name for other in accepted):
                raise InjectError(f"{path}: SidecarSet {parsed.name!r} is given twice")
            conflicts = ss.find_conflicts(parsed, accepted)
            if conflicts:
                raise InjectError(f"{path}: " + "; ".join(conflicts))
            accepted.append(parsed)
    return accepted


def _admit(
    pod: dict[str, Any],
    sidecarsets: list[ss.SidecarSet],
    namespace: str | None,
    now: datetime,
    settings: Settings,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The webhook's answer for creating ``pod``, applied as the API server applies it."""
    request = admission.pod_review_request(pod, namespace=namespace)
    excluded = frozenset(n.strip() for n in settings.sidecarset_excluded_namespaces.split(",") if n.strip())
    result = admission.review_pod(request, sidecarsets, now=now, excluded_namespaces=excluded)
    if "patch" not in result.response:
        return pod, []
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(result.response["patch"]))
    return ss.apply_patch(pod, patch), patch


def _pod_template(document: dict[str, Any]) -> dict[str, Any] | None:
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return None
    if isinstance(spec.get("template"), dict):  # Deployment, CloneSet, StatefulSet, Job, ...
        template: dict[str, Any] = spec["template"]
        return template
    job_template = spec.get("jobTemplate")  # CronJob
    if isinstance(job_template, dict) and isinstance((job_template.get("spec") or {}).get("template"), dict):
        nested: dict[str, Any] = job_template["spec"]["template"]
        return nested
    return None


def inject_document(
    document: Any, sidecarsets: list[ss.SidecarSet], namespace: str | None, now: datetime, settings: Settings
) -> tuple[Any, list[dict[str, Any]]]:
    """One object with sidecars injected: a Pod, or the pod template of a workload; others unchanged."""
    if not isinstance(document, dict):
        return document, []
    if document.get("kind") == "Pod":
        return _admit(document, sidecarsets, namespace, now, settings)
    template = _pod_template(document)
    if template is None:
        return document, []
    object_namespace = namespace or (document.get("metadata") or {}).get("namespace")
    as_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": dict(template.get("metadata") or {}),
        "spec": template.get("spec") or {},
    }
    admitted, patch = _admit(as_pod, sidecarsets, object_namespace, now, settings)
    if patch:
        template["metadata"] = admitted["metadata"]
        template["spec"] = admitted["spec"]
    return document, patch


def _dump(documents: list[Any], output: OutputFormat) -> str:
    if output is OutputFormat.yaml:
        return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False)
    payload = (
        documents[0] if len(documents) == 1 else {"apiVersion": "v1", "kind": "List", "items": documents}
    )
    return json.dumps(payload, indent=2) + "\n"


def inject_command(
    filename: Annotated[
        str, typer.Option("-f", "--filename", help="Pod or workload YAML/JSON ('-' for stdin).")
    ],
    sidecarset_files: Annotated[
        list[str],
        typer.Option(
            "--sidecarset", help="SidecarSet YAML/JSON file; repeat for several (multi-document files too)."
        ),
    ],
    namespace: Annotated[
        str | None,
        typer.Option(
            "-n", "--namespace", help="Namespace the pod is created in (default: its own, else 'default')."
        ),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="json, yaml, or patch.")
    ] = OutputFormat.json,
    timestamp: Annotated[
        datetime | None,
        typer.Option(
            "--timestamp",
            help="Injection time written in the annotations (default: now); for reproducible output.",
        ),
    ] = None,
) -> None:
    """Print the pod as the SidecarSet webhook would admit it (same code path as the webhook)."""
    settings = Settings.from_env()
    now = timestamp.replace(tzinfo=timestamp.tzinfo or UTC) if timestamp else datetime.now(UTC)
    try:
        sidecarsets = load_sidecarsets(sidecarset_files)
        documents = _read_documents(filename)
    except InjectError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if not documents:
        typer.echo(f"error: {filename}: no objects", err=True)
        raise typer.Exit(2)
    results = [inject_document(d, sidecarsets, namespace, now, settings) for d in documents]
    if output is OutputFormat.patch:
        patches = [patch for _, patch in results]
        typer.echo(json.dumps(patches[0] if len(patches) == 1 else patches, indent=2))
        return
    typer.echo(_dump([document for document, _ in results], output), nl=False)


def register(app: typer.Typer) -> None:
    app.command("inject")(inject_command)
