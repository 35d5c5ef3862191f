"""`rollbook apply -f FILE`: create or update the objects of a YAML file in the configured cluster.

Any kind the API server serves works (CloneSet, SidecarSet, Namespace, Pod, ...): kinds are resolved through
the server's discovery with kubernetes-asyncio's DynamicClient. An object that does not exist is created;
one that exists gets the manifest as a JSON merge patch (RFC 7386), so every field the file sets is set and
fields it leaves out are kept (lists are replaced whole, as with any merge patch). That is the update a
user expects from editing a manifest and applying it again, without kubectl's last-applied bookkeeping.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer

from services.infra.settings import Settings
from services.model.strategic_merge import merge_patch

if TYPE_CHECKING:  # imported where used: `rollbook --help` must not pay for kubernetes_asyncio
    from kubernetes_asyncio import client
    from kubernetes_asyncio.dynamic import DynamicClient


class ManifestError(ValueError):
    """A document that cannot be applied (the message names the file and document)."""


def load_documents(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``text``, each checked to name apiVersion, kind and metadata.name."""
    import yaml

    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise ManifestError(f"{source}: not valid YAML: {error}") from None
    for index, document in enumerate(documents, 1):
        where = f"{source} document {index}"
        if not isinstance(document, dict):
            raise ManifestError(f"{where}: expected a mapping, got {type(document).__name__}")
        missing = [f for f in ("apiVersion", "kind") if not document.get(f)]
        if not (document.get("metadata") or {}).get("name"):
            missing.append("metadata.name")
        if missing:
            raise ManifestError(f"{where}: missing {', '.join(missing)}")
        _check_integer_fields(document, where)
    return documents


# Integer fields of the workloads rollbook runs, by kind: a value of another type in the YAML
# (`replicas: "ten"`) is named with its type here, before the API server's range message would hide it.
INTEGER_FIELDS = {
    "CloneSet": (("spec", "replicas"), ("spec", "revisionHistoryLimit"), ("spec", "minReadySeconds")),
}


def _check_integer_fields(document: dict[str, Any], where: str) -> None:
    for path in INTEGER_FIELDS.get(str(document.get("kind")), ()):
        value: Any = document
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            shown = f"the string {value!r}" if isinstance(value, str) else f"{type(value).__name__} {value!r}"
            raise ManifestError(f"{where}: {'.'.join(path)} must be an integer, not {shown}")


YAML_SUFFIXES = (".yaml", ".yml", ".json")


def manifest_files(file: Path) -> list[Path]:
    """``file``, or for a directory (as `kubectl apply -f DIR`) its .yaml, .yml and .json files in name
    order, not descending into subdirectories; a directory with none of them is an error."""
    if str(file) == "-" or not file.is_dir():
        return [file]
    found = sorted(p for p in file.iterdir() if p.is_file() and p.suffix in YAML_SUFFIXES)
    if not found:
        raise ManifestError(f"{file}: a directory with no .yaml, .yml or .json files")
    return found


async def apply_documents(
    api: client.ApiClient, documents: Iterable[dict[str, Any]], default_namespace: str = "default"
) -> list[str]:
    """Create or merge-patch each document in order; returns one line per object (`Kind ns/name created`)."""
    from kubernetes_asyncio.dynamic import DynamicClient

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rollbook-discovery-") as cache_dir:
        dynamic = await DynamicClient(api, cache_file=str(Path(cache_dir) / "discovery.json"))
        for document in documents:
            lines.append(await _apply_one(dynamic, document, default_namespace))
    return lines


async def _apply_one(dynamic: DynamicClient, document: dict[str, Any], default_namespace: str) -> str:
    from kubernetes_asyncio.dynamic.exceptions import ResourceNotFoundError

    api_version, kind = document["apiVersion"], document["kind"]
    try:
        resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        raise ManifestError(f"the cluster does not serve {kind} in {api_version}") from None
    name = document["metadata"]["name"]
    namespace = (document["metadata"].get("namespace") or default_namespace) if resource.namespaced else None
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    current = await dynamic.get(resource, name=name, namespace=namespace)
    existing = _failure(current)
    if existing is not None and existing[0] != 404:
        raise ManifestError(f"{label}: reading it failed: {existing[0]} {existing[1]}")
    if kind == "CloneSet" and str(api_version).startswith("apps.kruise.io/"):
        # Refused here as the validating webhook refuses it, with the same message (one validation for
        # the webhook, the planner and apply): nothing invalid is sent, so nothing is half-applied.
        stored = None if existing is not None else _as_dict(current)
        refuse_invalid_cloneset(label, document if stored is None else merge_patch(stored, document))
    if existing is not None:
        failed = _failure(await dynamic.create(resource, body=document, namespace=namespace))
        verb = "created"
    else:
        failed = _failure(
            await dynamic.patch(
                resource, body=document, name=name, namespace=namespace,
                content_type="application/merge-patch+json",
            )
        )  # fmt: skip
        verb = "configured"
    if failed is not None:
        raise ManifestError(f"{label}: the API server refused it: {failed[0]} {failed[1]}")
    return f"{label} {verb}"


def refuse_invalid_cloneset(label: str, cloneset: dict[str, Any]) -> None:
    """Raise ManifestError naming the first problem the planner would reject ``cloneset`` for."""
    from services.model.cloneset_validation import field_error
    from services.webhook.admission import cloneset_problem

    problem = cloneset_problem(cloneset)
    if problem is not None:
        raise ManifestError(f"{label} is invalid: {field_error(problem)}")


def _as_dict(result: Any) -> dict[str, Any]:
    body = result.to_dict() if hasattr(result, "to_dict") else result
    return body if isinstance(body, dict) else {}


def _failure(result: Any) -> tuple[int, str] | None:
    """(code, message) when the API answered with a failed Status (the dynamic client does not raise)."""
    body = result.to_dict() if hasattr(result, "to_dict") else result
    if isinstance(body, dict) and body.get("kind") == "Status" and body.get("status") == "Failure":
        return int(body.get("code") or 0), str(body.get("message") or body.get("reason") or "")
    return None


def _read(file: Path) -> str:
    return sys.stdin.read() if str(file) == "-" else file.read_text()


def apply(
    file: Annotated[
        list[Path], typer.Option("--filename", "-f", help="YAML file to apply ('-' reads stdin); repeatable.")
    ],
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace for objects that name none.")
    ] = "default",
) -> None:
    """Create or update the objects of YAML files in the cluster of ROLLBOOK_KUBECONFIG."""
    import asyncio

    from kubernetes_asyncio import client

    from services.cli.errors import CommandError, describe
    from services.infra.kube import api_client

    settings = Settings.from_env()

    try:
        files = [found for f in file for found in manifest_files(f)]
        documents = [d for f in files for d in load_documents(_read(f), str(f))]
    except ManifestError as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(describe(error)[0]) from None

    async def run() -> list[str]:
        api = await api_client(settings)
        async with api:
            return await apply_documents(api, documents, namespace)

    try:
        lines = asyncio.run(run())
    except ManifestError as error:
        raise CommandError(str(error)) from None
    except client.ApiException as error:
        raise CommandError(f"the API server refused: {_api_message(error)}") from None
    except Exception as error:  # dynamic client wraps ApiException in its own classes
        summary = getattr(error, "summary", None)
        if not callable(summary):
            raise  # the error boundary describes it (a kubeconfig, a server that does not answer)
        raise CommandError(str(summary())) from None
    for line in lines:
        typer.echo(line)


def _api_message(error: client.ApiException) -> str:
    try:
        body = msgspec.json.decode(error.body or b"{}")
        return f"{error.status} {body.get('message') or error.reason}"
    except msgspec.DecodeError:
        return f"{error.status} {error.reason}"


def register(application: typer.Typer) -> None:
    application.command("apply")(apply)
