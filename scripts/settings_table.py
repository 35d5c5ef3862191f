"""Print the README's configuration table from the Settings class: one row per field, its environment
variable, its default and the comment above it in services/infra/settings.py.

    python scripts/settings_table.py        # tests/test_readme.py checks README.md holds this output
"""

from __future__ import annotations

import ast
import inspect

import msgspec

from services.infra import settings as settings_module
from services.infra.settings import Settings


def field_comments() -> dict[str, str]:
    source = inspect.getsource(settings_module)
    lines = source.splitlines()
    comments: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    above: list[str] = []
                    index = statement.lineno - 2
                    while index >= 0 and lines[index].strip().startswith("#"):
                        above.insert(0, lines[index].strip().lstrip("#").strip())
                        index -= 1
                    comments[statement.target.id] = " ".join(above)
    return comments


def table() -> str:
    comments = field_comments()
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for field in msgspec.structs.fields(Settings):
        default = field.default
        shown = (
            f"`{str(default).lower() if isinstance(default, bool) else default}`"
            if default != ""
            else "(empty)"
        )
        meaning = comments.get(field.name, "").replace("|", "\\|")
        rows.append(f"| `ROLLBOOK_{field.name.upper()}` | {shown} | {meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
