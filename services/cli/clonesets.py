"""Reading CloneSets from the API server for the CLI (`status`, `get -w`, `rollout`): one list or get, and
what an error answer means in one clear line."""

from __future__ import annotations

from typing import Any

from services.cli.errors import CommandError
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION


async def read_clonesets(api: Any, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
    """The CloneSet ``namespace/name``, or every CloneSet sorted by namespace and name, through ``api`` (a
    kubernetes-asyncio ApiClient); a missing CloneSet or an unreachable server is one clear error."""
    from kubernetes_asyncio import client

    custom = client.CustomObjectsApi(api)
    try:
        if name is not None and namespace is not None:
            return [
                await custom.get_namespaced_custom_object(
                    CLONESET_GROUP, CLONESET_VERSION, namespace, CLONESET_PLURAL, name
                )
            ]
        listing = await custom.list_cluster_custom_object(CLONESET_GROUP, CLONESET_VERSION, CLONESET_PLURAL)
    except client.ApiException as error:
        raise CommandError(cloneset_read_error(error.status, error.body, namespace, name)) from None
    except OSError as error:
        raise CommandError(
            f"cannot reach the Kubernetes API server at {api.configuration.host}: {error}"
        ) from None
    items: list[dict[str, Any]] = listing.get("items") or []
    return sorted(items, key=lambda c: (c["metadata"].get("namespace", ""), c["metadata"]["name"]))


def cloneset_read_error(status: int | None, body: object, namespace: str | None, name: str | None) -> str:
    """What an error answer to reading CloneSets means: the CloneSet is not there, the cluster does not
    serve CloneSets (no CRD: a 404 that is not a Status about the object), or the API server's own reason
    (a 500 from a conversion webhook it cannot reach says so in its message)."""
    from services.cli.errors import api_message

    said = api_message(body)
    served = f"{CLONESET_GROUP}/{CLONESET_VERSION}"
    if status == 404 and name is not None and f'"{name}" not found' in said:  # the object, not the kind
        return f"CloneSet {namespace}/{name} not found"
    if status == 404:
        return (
            f"the cluster does not serve CloneSets ({served}): is the CloneSet CRD installed?"
            f" (`kubectl apply -k deploy/standalone`; the API server said: {said or 'not found'})"
        )
    if status is not None and status >= 500 and "conversion webhook" in said:
        return (
            f"the API server cannot convert CloneSets to {served}: their conversion webhook cannot be"
            f" reached (the API server said: {said})"
        )
    return f"the Kubernetes API server answered {status} reading CloneSets: {said or 'no reason given'}"
