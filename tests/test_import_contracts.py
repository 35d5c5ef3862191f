"""The package layers hold: `lint-imports` checks the contracts in pyproject.toml ([tool.importlinter]).

The model is pure vocabulary (it imports nothing else of rollbook's and no I/O library); cli > replay >
services > infra > model; the services never import each other; replay reaches no service loop and no
NATS or leader code; the planners' decision code imports only the model and its own pure modules; only
the executor, watcher, webhook, infra.kube/leader and the CLI talk to Kubernetes. A broken contract fails
here with import-linter's report of the offending import chain.
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
