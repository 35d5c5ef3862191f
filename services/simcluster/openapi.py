"""OpenAPI v3 as kube-apiserver publishes it, for the custom resources simcluster serves, so that
``kubectl explain cloneset.spec`` works against it.

    GET /openapi/v3                        {"paths": {"apis/<group>/<version>": {"serverRelativeURL": ...}}}
    GET /openapi/v3/apis/<group>/<version> one document: components.schemas, each schema named after its
                                           group (reversed), version and kind, and tagged with
                                           x-kubernetes-group-version-kind, which kubectl looks the kind up by

A resource defined by a stored CustomResourceDefinition publishes each served version's
``openAPIV3Schema``; simcluster's own CloneSets and SidecarSets, served without a CRD, publish the schemas
of rollbook's CRDs (services/simcluster/kruise_crds.py). Built-in kinds (Pod, Node, ...) publish none, as
before: kubectl explain of those is not served. Pure functions of what is served.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]


def group_version_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def schema_name(group: str, version: str, kind: str) -> str:
    """kube-apiserver's component name: the group reversed, the version, the kind."""
    return (
        ".".join([*reversed(group.split(".")), version, kind])
        if group
        else f"io.k8s.api.core.{version}.{kind}"
    )


def crd_schemas(crds: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Obj]:
    """(group, version, kind) -> openAPIV3Schema of every served version of these CRDs."""
    found: dict[tuple[str, str, str], Obj] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        kind = (spec.get("names") or {}).get("kind")
        for version in spec.get("versions") or []:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if version.get("served") and kind and isinstance(schema, dict):
                found[(str(spec.get("group", "")), str(version.get("name")), str(kind))] = schema
    return found


def documents(served: Iterable[tuple[str, str, str, str, bool, Obj]], server_version: str) -> dict[str, Obj]:
    """One OpenAPI v3 document per group version, by its path (``apis/<group>/<version>``), from the
    resources served: (group, version, kind, plural, namespaced, schema). Each resource's paths carry its
    kind on their operations (``x-kubernetes-group-version-kind``), as kubectl explain finds a kind from the
    resource it was asked for."""
    docs: dict[str, Obj] = {}
    for group, version, kind, plural, namespaced, schema in sorted(served, key=lambda s: s[:4]):
        path = group_version_path(group, version)
        doc = docs.setdefault(
            path,
            {
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": server_version},
                "paths": {},
                "components": {"schemas": {}},
            },
        )
        gvk = {"group": group, "kind": kind, "version": version}
        name = schema_name(group, version, kind)
        reference = {"$ref": f"#/components/schemas/{name}"}
        collections = [f"/{path}/{plural}"]
        if namespaced:
            collections.append(f"/{path}/namespaces/{{namespace}}/{plural}")
        for collection in collections:
            for at in (collection, f"{collection}/{{name}}"):
                doc["paths"][at] = {
                    "get": {
                        "x-kubernetes-group-version-kind": gvk,
                        "responses": {"200": {"content": {"application/json": {"schema": reference}}}},
                    }
                }
        doc["components"]["schemas"][name] = {**schema, "x-kubernetes-group-version-kind": [gvk]}
    return docs


def discovery(docs: Mapping[str, Obj]) -> Obj:
    """The /openapi/v3 index: each document's URL, with a hash of its content (clients cache by it)."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(doc)}"}
            for path, doc in sorted(docs.items())
        }
    }


def _hash(doc: Obj) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()
