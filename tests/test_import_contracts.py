"""The package layers hold: `lint-imports` checks the contracts in pyproject.toml ([tool.importlinter]).

The model is pure vocabulary (it imports nothing else of rollbook's and no I/O library); cli > replay >
services > infra > model; the services never import each other; replay reaches no service loop and no
NATS or leader code; every kind's rules (services/kinds/<kind>/rules.py or rules/) are pure by folder,
and the planner's shared core imports only the model, the kinds and its own pure modules; only
the executor, watcher, webhook, the CLI and infra.kube/leader/partition_leases/kruise talk to
Kubernetes. A broken
contract fails here with import-linter's report of the offending import chain.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contracts() -> list[dict[str, object]]:
    with (REPO_ROOT / "pyproject.toml").open("rb") as file:
        return list(tomllib.load(file)["tool"]["importlinter"]["contracts"])


def test_every_import_contract_is_kept() -> None:
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in result.stdout, result.stdout


def test_no_contract_is_papered_over() -> None:
    # A violation is fixed by moving code to the layer it belongs to, never by an exception list.
    assert [c["id"] for c in contracts() if c.get("ignore_imports")] == []


IO_MODULES = {"services.planner.service", "services.planner.shadow_service"}  # the planner service's I/O


def test_every_planner_module_but_the_service_loop_is_held_pure() -> None:
    # A new module of the planner's shared core is checked from the start: it must be listed in the
    # contract (a kind's rules go in services/kinds/<kind>/rules/, covered by kinds-rules-pure unlisted).
    [contract] = [c for c in contracts() if c["id"] == "planner-decisions-pure"]
    planner = REPO_ROOT / "services" / "planner"
    modules = {f"services.planner.{p.stem}" for p in planner.glob("*.py") if p.stem != "__init__"}
    assert sorted(modules - IO_MODULES) == sorted(contract["source_modules"])  # type: ignore[arg-type]


def test_every_infra_module_but_the_kubernetes_clients_is_kept_off_kubernetes() -> None:
    [contract] = [c for c in contracts() if c["id"] == "kubernetes-clients"]
    infra = REPO_ROOT / "services" / "infra"
    modules = {f"services.infra.{p.stem}" for p in infra.glob("*.py") if p.stem != "__init__"}
    clients = {
        "services.infra.kube",
        "services.infra.leader",
        "services.infra.partition_leases",
        "services.infra.kruise",
        "services.infra.api_auth",  # TokenReview and SubjectAccessReview of /history readers
    }
    listed = {m for m in contract["source_modules"] if m.startswith("services.infra.")}  # type: ignore[attr-defined]
    assert sorted(modules - clients) == sorted(listed)


def test_every_sidecarset_rules_module_is_a_layer() -> None:
    # The SidecarSet rules are split by job; a new module must take its place in the layering.
    [contract] = [c for c in contracts() if c["id"] == "sidecarset-jobs"]
    package = REPO_ROOT / "services" / "model" / "sidecarset"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    layered = {m.strip() for layer in contract["layers"] for m in str(layer).split("|")}  # type: ignore[attr-defined]
    assert sorted(modules) == sorted(layered)


def import_cycles() -> list[list[str]]:
    """Each set of rollbook modules that import one another round in a circle (a function-level import
    counts: it is still a dependency; one for type hints alone does not run), found as the strongly
    connected components of the import graph."""
    import grimp

    graph = grimp.build_graph("services", exclude_type_checking_imports=True)
    modules = graph.modules
    imports = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in sorted(modules)}
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in imports:
        if root in index:
            continue
        # Tarjan's algorithm, iterative: (module, position in its import list).
        work = [(root, 0)]
        while work:
            module, position = work.pop()
            if position == 0:
                index[module] = lowest[module] = len(index)
                stack.append(module)
            if position < len(imports[module]):
                work.append((module, position + 1))
                target = imports[module][position]
                if target not in index:
                    work.append((target, 0))
                elif target in stack:
                    lowest[module] = min(lowest[module], index[target])
                continue
            if lowest[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
            if work:
                parent = work[-1][0]
                lowest[parent] = min(lowest[parent], lowest[module])
    return cycles


def test_no_module_imports_itself_round_a_circle() -> None:
    # A circle means neither module can be understood, tested or moved without the other.
    assert import_cycles() == []
