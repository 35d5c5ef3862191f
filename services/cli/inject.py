"""`rollbook inject`: print a pod (or a workload's pod template) as the SidecarSet webhook would admit it.

It builds the AdmissionReview the API server would send, answers it with the webhook's own function
(services.webhook.admission.review_pod) and applies the returned JSONPatch, so the output is what the
cluster would store. Like `istioctl kube-inject`, workloads with a pod template are injected in place.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.infra.settings import Settings

if TYPE_CHECKING:  # imported where used: `rollbook --help` does not need them
    from services.model import sidecarset as ss


class OutputFormat(StrEnum):
    json = "json"
    yaml = "yaml"
    patch = "patch"  # the JSONPatch the webhook answers, per document


class InjectError(Exception):
    """Bad input: printed as the error message, exit code 2."""


def _read_documents(path: str) -> list[Any]:
    import yaml

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


def load_sidecarsets(paths: Iterable[str], existing: Iterable[ss.SidecarSet] = ()) -> list[ss.SidecarSet]:
    """Parse and validate SidecarSets as the validating webhook would, including conflicts between them
    and with ``existing`` ones (the cluster's), which a file's SidecarSet of the same name replaces."""
    from services.model import sidecarset as ss

    accepted: list[ss.SidecarSet] = []
    files: set[str] = set()
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
            if parsed.name in files:
                raise InjectError(f"{path}: SidecarSet {parsed.name!r} is given twice")
            files.add(parsed.name)
            conflicts = ss.find_conflicts(parsed, accepted)
            if conflicts:
                raise InjectError(f"{path}: " + "; ".join(conflicts))
            accepted.append(parsed)
    others = [s for s in existing if s.name not in files]
    for parsed in accepted:
        conflicts = ss.find_conflicts(parsed, others)
        if conflicts:
            raise InjectError("with the cluster's SidecarSets: " + "; ".join(conflicts))
    return others + accepted


async def cluster_state(settings: Settings) -> tuple[list[ss.SidecarSet], dict[str, dict[str, str]]]:
    """The cluster's valid SidecarSets and Namespace labels, read once, as the webhook's watch sees them."""
    from kubernetes_asyncio import client

    from services.infra import kube
    from services.model import sidecarset as ss

    api = await kube.api_client(settings)
    try:
        custom = client.CustomObjectsApi(api)
        listed = await custom.list_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets")
        parsed = []
        for obj in listed.get("items") or []:
            try:
                parsed.append(ss.parse_sidecarset(obj))
            except ss.SidecarSetError as err:  # the webhook skips it too
                name = (obj.get("metadata") or {}).get("name")
                typer.echo(
                    f"warning: the cluster's SidecarSet {name!r} is invalid and ignored: {err}", err=True
                )
        namespaces = await client.CoreV1Api(api).list_namespace()
        labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in namespaces.items}
        return parsed, labels
    finally:
        await api.close()


def _admit(
    pod: dict[str, Any],
    sidecarsets: list[ss.SidecarSet],
    namespace: str | None,
    now: datetime,
    settings: Settings,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The webhook's answer for creating ``pod``, applied as the API server applies it."""
    from services.model import sidecarset as ss
    from services.webhook import admission

    request = admission.pod_review_request(pod, namespace=namespace)
    labels_of_namespace = (namespace_labels or {}).get(request["namespace"])
    excluded = frozenset(n.strip() for n in settings.sidecarset_excluded_namespaces.split(",") if n.strip())
    result = admission.review_pod(
        request,
        sidecarsets,
        now=now,
        excluded_namespaces=excluded,
        namespace_labels=labels_of_namespace,
        sort_containers_by_name=settings.sidecarset_sort_containers_by_name,
    )
    if not result.response["allowed"]:  # the webhook would refuse this pod
        raise InjectError(result.response["status"]["message"])
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
    document: Any,
    sidecarsets: list[ss.SidecarSet],
    namespace: str | None,
    now: datetime,
    settings: Settings,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Any, list[dict[str, Any]]]:
    """One object with sidecars injected: a Pod, or the pod template of a workload; others unchanged."""
    if not isinstance(document, dict):
        return document, []
    if document.get("kind") == "Pod":
        return _admit(document, sidecarsets, namespace, now, settings, namespace_labels)
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
    admitted, patch = _admit(as_pod, sidecarsets, object_namespace, now, settings, namespace_labels)
    if patch:
        template["metadata"] = admitted["metadata"]
        template["spec"] = admitted["spec"]
    return document, patch


def _dump(documents: list[Any], output: OutputFormat) -> str:
    import yaml

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
        list[str] | None,
        typer.Option(
            "--sidecarset",
            help="SidecarSet YAML/JSON file; repeat for several (multi-document files too). With "
            "--from-cluster it replaces the cluster's SidecarSet of the same name (preview an apply).",
        ),
    ] = None,
    from_cluster: Annotated[
        bool,
        typer.Option(
            "--from-cluster",
            help="Also use the SidecarSets (and Namespace labels) in the cluster of ROLLBOOK_KUBECONFIG.",
        ),
    ] = False,
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
    import asyncio

    settings = Settings.from_env()
    now = timestamp.replace(tzinfo=timestamp.tzinfo or UTC) if timestamp else datetime.now(UTC)
    if not sidecarset_files and not from_cluster:
        typer.echo("error: give --sidecarset FILE (repeatable) and/or --from-cluster", err=True)
        raise typer.Exit(2)
    existing: list[ss.SidecarSet] = []
    namespace_labels: dict[str, dict[str, str]] = {}
    if from_cluster:
        import aiohttp
        from kubernetes_asyncio.client.exceptions import ApiException
        from kubernetes_asyncio.config.config_exception import ConfigException

        try:
            existing, namespace_labels = asyncio.run(cluster_state(settings))
        except (ConfigException, ApiException, OSError, aiohttp.ClientError) as err:
            typer.echo(f"error: cannot read SidecarSets from the cluster: {err}", err=True)
            raise typer.Exit(1) from None
    try:
        sidecarsets = load_sidecarsets(sidecarset_files or [], existing)
        documents = _read_documents(filename)
    except InjectError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if not documents:
        typer.echo(f"error: {filename}: no objects", err=True)
        raise typer.Exit(2)
    try:
        results = [
            inject_document(d, sidecarsets, namespace, now, settings, namespace_labels) for d in documents
        ]
    except InjectError as err:  # the webhook would refuse a pod
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if output is OutputFormat.patch:
        patches = [patch for _, patch in results]
        typer.echo(json.dumps(patches[0] if len(patches) == 1 else patches, indent=2))
        return
    typer.echo(_dump([document for document, _ in results], output), nl=False)


def register(app: typer.Typer) -> None:
    app.command("inject")(inject_command)
