"""The terminal the commands print rich output to, made at first use: importing rich costs start-up time
that `rollbook --help`, `plan` and `inject` do not need.

Output that goes to a pipe or a file has no terminal width, so it has no width limit either: a table row,
a rollout id or a command to paste is one line however long (``grep``, ``cut`` and CI logs read it whole).
``COLUMNS`` still sets a width where one is wanted."""

from __future__ import annotations

import os
import sys
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

# rich needs a number; this many columns is as good as none for anything rollbook prints.
UNLIMITED_WIDTH = 100_000


def output_width(is_terminal: bool, columns: str | None) -> int | None:
    """The width to print at: None (the terminal's own) on a terminal, else ``COLUMNS`` if set, else no
    limit."""
    if is_terminal:
        return None
    if columns and columns.isdigit() and int(columns) > 0:
        return int(columns)
    return UNLIMITED_WIDTH


@cache
def console() -> Console:
    from rich.console import Console

    width = output_width(sys.stdout.isatty(), os.environ.get("COLUMNS"))
    return Console(width=width, soft_wrap=width == UNLIMITED_WIDTH)


def invocation(argv0: str | None = None, cwd: str | None = None, path: str | None = None) -> str:
    """How to type rollbook again in this shell, for commands printed to paste: ``rollbook`` when that
    name on PATH is the program that runs now, else the path it was run by (``.venv/bin/rollbook``, the
    README's install), relative to the working directory when under it; ``python -m services.cli.main``
    when run as a module."""
    import shutil

    argv0 = sys.argv[0] if argv0 is None else argv0
    cwd = os.getcwd() if cwd is None else cwd
    if argv0.endswith(".py") or argv0 in ("-m", "-c", ""):
        return f"{_shell_word(sys.executable)} -m services.cli.main"
    if "/" not in argv0:  # found on PATH by the shell
        return _shell_word(argv0)
    program = os.path.abspath(os.path.join(cwd, argv0))
    on_path = shutil.which("rollbook", path=os.environ.get("PATH") if path is None else path)
    if on_path and os.path.realpath(on_path) == os.path.realpath(program):
        return "rollbook"
    relative = os.path.relpath(program, cwd)
    shown = relative if not relative.startswith("..") else program
    return _shell_word(shown if "/" in shown else f"./{shown}")


def _shell_word(word: str) -> str:
    import shlex

    return shlex.quote(word)
