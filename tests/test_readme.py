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


def test_docs_are_readable_pages() -> None:
    # A bad scripted edit once repeated one paragraph after every character of docs/sidecarset.md (7 MB).
    docs = Path(__file__).resolve().parents[1] / "docs"
    pages = sorted(docs.glob("*.md"))
    assert pages
    oversized = [(p.name, p.stat().st_size) for p in pages if p.stat().st_size > 100_000]
    assert oversized == []
    for page in pages:
        text = page.read_text()
        assert text.startswith("# "), f"{page.name} has no title"
        assert max(len(line) for line in text.splitlines()) < 1_000, f"{page.name} has a runaway line"
