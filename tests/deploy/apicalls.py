"""The Kubernetes API methods a service's code can reach, found by reading its source.

A service's code is its entry module and every module of ``services`` it imports, transitively (imports
inside functions included), plus kubernetes-asyncio's ``leaderelection`` package when imported (its Lease
lock makes the election's calls). In that code, every attribute named like a method of the
kubernetes-asyncio API classes rollbook uses (``read_namespaced_pod``, ``list_cluster_custom_object``...)
is a call the service can make, whether called there or passed on as a list function to a watch.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client

# The API classes rollbook's code uses; each method name belongs to exactly one of them.
API_CLASSES: dict[str, type] = {
    "": client.CoreV1Api,
    "apps": client.AppsV1Api,
    "coordination.k8s.io": client.CoordinationV1Api,
    "admissionregistration.k8s.io": client.AdmissionregistrationV1Api,
    "authentication.k8s.io": client.AuthenticationV1Api,
    "authorization.k8s.io": client.AuthorizationV1Api,
    "*custom*": client.CustomObjectsApi,  # group and resource are in the call's arguments
}
VERBS = {
    "read": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
    "get": "get",  # CustomObjectsApi's get_*_custom_object
}
FOLLOWED = ("services.", "kubernetes_asyncio.leaderelection")


def _api_methods() -> dict[str, str]:
    methods: dict[str, str] = {}
    for group, cls in API_CLASSES.items():
        for name in dir(cls):
            if name.startswith("_") or name.endswith("_with_http_info") or name == "api_client":
                continue
            if name.split("_")[0] in VERBS or name.startswith("delete_collection"):
                methods[name] = group
    return methods


API_METHODS = _api_methods()
# events.k8s.io/v1 Events (EventsV1Api) share their method names with CoreV1Api's core/v1 Events: a call
# on a receiver named ``events`` (services/executor/kube_events.py: ``self.events``) is to EventsV1Api,
# recorded as ``events.k8s.io:<method>``.
EVENTS_V1_RECEIVER = "events"
EVENTS_V1_METHODS = {
    name for name in dir(client.EventsV1Api) if name.split("_")[0] in VERBS and "_with_http_info" not in name
}


@dataclass(frozen=True)
class Call:
    method: str  # the kubernetes-asyncio method name
    module: str  # where it appears
    line: int
    arguments: tuple[object, ...] = ()  # positional arguments whose values are known (custom objects)
    watched: bool = False  # a list method in a module that streams a watch from its list functions

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ModuleNotFoundError, ValueError):  # ``a.b.NAME`` where a.b is a module: not a module
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _imports(tree: ast.AST, module: str) -> set[str]:
    package = module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            # `from services.infra import kube` imports the module services.infra.kube
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith(FOLLOWED) and _module_file(name) is not None}


def closure(entry: str) -> dict[str, ast.Module]:
    """Every module the entry module reaches through imports we follow, parsed."""
    seen: dict[str, ast.Module] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        seen[name] = tree
        todo.extend(_imports(tree, name) - seen.keys())
    return seen


@functools.cache
def _api_calls(entry: str) -> tuple[Call, ...]:
    calls: list[Call] = []
    modules = closure(entry)
    # The watcher lists and watches each registered kind's resources by name (getattr(api, Watched.method)).
    lists_kinds = "services.watcher.service" in modules
    for module, tree in modules.items():
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        # kubernetes-asyncio's Watch, or the watcher's own watch stream (services/watcher/watch_stream.py)
        watches = any(
            (isinstance(node, ast.Attribute) and node.attr == "Watch" and _name(node.value) == "watch")
            or (isinstance(node, ast.Name) and node.id == "watch_events")
            for node in ast.walk(tree)
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in API_METHODS:
                arguments = _arguments(module, node, parents) if API_METHODS[node.attr] == "*custom*" else ()
                watched = watches and node.attr.startswith("list_")
                method = node.attr
                if method in EVENTS_V1_METHODS and _receiver(node) == EVENTS_V1_RECEIVER:
                    method = f"events.k8s.io:{method}"
                calls.append(Call(method, module, node.lineno, arguments, watched))
            elif (
                lists_kinds
                and module.startswith("services.kinds.")
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in API_METHODS
            ):
                # A kind's Watched(method=...): the watcher lists and watches with getattr(api, method).
                calls.append(Call(node.value, module, node.lineno, (), node.value.startswith("list_")))
    return tuple(calls)


def api_calls(entry: str) -> list[Call]:
    """Every API method the entry module's code can call (parsed once per entry)."""
    return list(_api_calls(entry))


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _arguments(module: str, node: ast.Attribute, parents: dict[ast.AST, ast.AST]) -> tuple[object, ...]:
    """The positional arguments of a custom-object call: those of the call itself, or, for a method passed
    on as a list function, the ``args=(...)`` given beside it."""
    parent = parents.get(node)
    nodes: list[ast.expr] = []
    if isinstance(parent, ast.Call) and parent.func is node:
        nodes = list(parent.args)
    elif isinstance(parent, ast.Call):
        for keyword in parent.keywords:
            if keyword.arg == "args" and isinstance(keyword.value, ast.Tuple):
                nodes = list(keyword.value.elts)
    loaded = importlib.import_module(module)
    values: list[object] = []
    for argument in nodes:
        if isinstance(argument, ast.Constant):
            values.append(argument.value)
        elif isinstance(argument, ast.Name) and hasattr(loaded, argument.id):
            values.append(getattr(loaded, argument.id))
        else:
            values.append(None)  # a value only known at run time (a namespace, a name)
    return tuple(values)


def custom_rbac_of(call: Call) -> tuple[str, str, str]:
    """(apiGroup, resource[/status], verb) of a CustomObjectsApi call, from its group and plural
    arguments; ValueError when they are not constants of the module."""
    cluster = "_cluster_" in call.method
    plural_at = 2 if cluster else 3
    if len(call.arguments) <= plural_at or not all(
        isinstance(call.arguments[i], str) for i in (0, plural_at)
    ):
        raise ValueError(f"{call.where}: {call.method} without a constant group and plural")
    group, plural = str(call.arguments[0]), str(call.arguments[plural_at])
    verb = VERBS[call.method.split("_")[0]]
    return group, plural + ("/status" if call.method.endswith("_status") else ""), verb


def _receiver(node: ast.Attribute) -> str | None:
    value = node.value
    return value.attr if isinstance(value, ast.Attribute) else _name(value)


def rbac_of(method: str) -> tuple[str, str, str]:
    """(apiGroup, resource[/subresource], verb) of a typed API method; the custom-object methods name
    their group and resource in their arguments and are listed with them in the declared table."""
    if method.startswith("events.k8s.io:"):
        return ("events.k8s.io", *rbac_of(method.split(":", 1)[1])[1:])
    group = API_METHODS[method]
    if group == "*custom*":
        raise ValueError(f"{method}: group and resource are arguments")
    verb_word = "delete_collection" if method.startswith("delete_collection") else method.split("_")[0]
    rest = method[len(verb_word) + 1 :]
    for prefix in ("namespaced_",):
        rest = rest.removeprefix(prefix)
    rest = rest.removesuffix("_for_all_namespaces")
    subresource = ""
    if rest.endswith("_status"):
        rest, subresource = rest.removesuffix("_status"), "/status"
    elif rest.endswith("_resize"):
        rest, subresource = rest.removesuffix("_resize"), "/resize"
    resource = rest.replace("_", "") + "s"
    verb = "deletecollection" if verb_word == "delete_collection" else VERBS[verb_word]
    return group, resource + subresource, verb
