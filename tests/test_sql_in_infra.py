"""Every SQL text of rollbook lives in services/infra (the event store and its named queries:
services/infra/store.py, audit_queries.py): a service, the CLI or replay asks for a named query, never
writes SQL or drives a database connection itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[1] / "services"
INFRA = SERVICES / "infra"

# asyncpg's and the event store's ways to run a statement text.
DRIVER_CALLS = frozenset(
    {"fetch", "fetchrow", "fetchval", "executemany", "copy_records_to_table", "query", "execute_many"}
)
SQL = re.compile(
    r"^\s*(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|WITH\s+\w+\s+AS|CREATE\s+(TABLE|DATABASE|ROLE"
    r"|INDEX|VIEW)|DROP\s+(TABLE|DATABASE|ROLE|VIEW)|ALTER\s+TABLE|LOCK\s+TABLE|SHOW\s+\w+|TRUNCATE|DO\s+\$)\b"
)


def _is_sql(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(SQL.match(node.value))
    if isinstance(node, ast.JoinedStr) and node.values:
        return _is_sql(node.values[0])
    return False


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def sql_outside_infra(source: str, where: str) -> list[str]:
    """``where:line what`` for each SQL text, SQLAlchemy ``text(...)`` or driver call in ``source``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    sqlalchemy_text = any(
        isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("sqlalchemy")
        and any(alias.name == "text" for alias in node.names)
        for node in ast.walk(tree)
    )
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in DRIVER_CALLS:
                found.append(f"{where}:{line} .{func.attr}(...)")
            elif isinstance(func, ast.Attribute) and func.attr == "execute" and node.args:
                if _is_sql(node.args[0]) or isinstance(node.args[0], ast.Call):
                    found.append(f"{where}:{line} .execute(<SQL>)")
            elif (isinstance(func, ast.Name) and func.id == "text" and sqlalchemy_text) or (
                isinstance(func, ast.Attribute) and func.attr == "text" and _names(func.value, "sqlalchemy")
            ):
                found.append(f"{where}:{line} sqlalchemy text(...)")
        elif _is_sql(node) and id(node) not in docstrings:
            if isinstance(node, ast.Constant) or isinstance(node, ast.JoinedStr):
                found.append(f"{where}:{line} SQL text")
    return found


def _names(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def test_no_sql_outside_services_infra() -> None:
    found = []
    for path in sorted(SERVICES.rglob("*.py")):
        if INFRA in path.parents:
            continue
        found += sql_outside_infra(path.read_text(), str(path.relative_to(SERVICES.parent)))
    assert not found, "SQL outside services/infra (add a named query there):\n" + "\n".join(found)


def test_the_check_finds_each_way_sql_is_written() -> None:
    """The scan itself: each form SQL took before it moved to services/infra is caught; prose is not."""
    caught = {
        'X = """\nSELECT pod FROM pod_actions WHERE rollout_id = $1\n"""': "SQL text",
        "async def f(c):\n    await c.fetch(ROLLOUTS)": ".fetch(",
        "async def f(c):\n    await c.fetchval('SELECT 1')": ".fetchval(",
        "async def f(store):\n    await store.query(SQL, 1)": ".query(",
        "async def f(c):\n    await c.execute(f'CREATE DATABASE \"{name}\"')": ".execute(<SQL>)",
        "async def f(c):\n    await c.execute(assume_sql('reader'))": ".execute(<SQL>)",
        "from sqlalchemy import text\nq = text(SQL)": "text(",
        "import sqlalchemy\nq = sqlalchemy.text(SQL)": "text(",
        "x = 'UPDATE events SET payload = $2 WHERE global_position = $1'": "SQL text",
        "x = f'DROP ROLE IF EXISTS \"{role}\"'": "SQL text",
    }
    for source, what in caught.items():
        found = sql_outside_infra(source, "m.py")
        assert any(what in f for f in found), (source, found)
    prose = [
        '"""Read back from SQL (SELECT … FROM rollouts)."""',
        "title = 'rollouts (SELECT … FROM rollouts)'",
        "async def f(executor, envelope):\n    await executor.execute(envelope, payload)",
        "def f(t):\n    return t.text()",
        "line = 'Select the pods'",
    ]
    for source in prose:
        assert sql_outside_infra(source, "m.py") == [], source
