"""README promises that must stay true."""

from __future__ import annotations

from pathlib import Path

from scripts.settings_table import table

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_configuration_table_matches_the_settings_object() -> None:
    assert table() in README, "README's configuration table is stale: run python scripts/settings_table.py"


def test_the_test_command_is_what_ci_runs() -> None:
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "scripts/test" in README and "scripts/test" in ci
