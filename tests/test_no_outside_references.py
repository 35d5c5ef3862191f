"""Nothing in the repository points at files a user does not have: the team's notes outside it, absolute
paths of one machine, or section ids of a document that is not shipped. State the rule itself instead."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("services", "tests", "docs", "bench", "scripts", "migrations", "deploy", ".ci")
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".txt", ".ini", ".cfg", ""}
# Built from parts so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            "/" + "work/",  # an absolute path on one machine
            r"\.\./" + "shared",
            "shared/" + "(?:design|seeds)",
            "design " + "card",
            r"\b(?:CS|SS|G)-\d+\b",  # a section id of a document that is not in the repository
        ]
    )
)


def test_no_file_points_outside_the_repository() -> None:
    found = []
    files = [REPO_ROOT / "README.md", REPO_ROOT / "pyproject.toml"]
    for folder in SCANNED:
        files += [p for p in (REPO_ROOT / folder).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    for path in files:
        if "__pycache__" in path.parts:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()[:120]}")
    assert found == [], "\n".join(found)
