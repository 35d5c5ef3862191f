"""The terminal the commands print rich output to, made at first use: importing rich costs start-up time
that `rollbook --help`, `plan` and `inject` do not need.

Output that goes to a pipe or a file has no terminal width, so it has no width limit either: a table row,
a rollout id or a command to paste is one line however long (``grep``, ``cut`` and CI logs read it whole).
``COLUMNS`` still sets a width where one is wanted."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Iterable, Sequence
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


def print_table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[str | None]], no_wrap: Collection[str] = ()
) -> None:
    """A table with a left-justified title, as rich prints it (``no_wrap``: columns kept on one line; the
    others fold; a None cell is empty). Output with no width limit and no colour (a pipe, a file, UTF-8)
    that is all plain text is written as rich would write it without rich's layout, which costs ~0.1 ms a cell
    (~450 ms for the 700 pod actions of a 200-pod CloneSet's history) and has nothing to lay out there."""
    shown = console()
    cells = [["" if cell is None else cell for cell in row] for row in rows]
    if (
        shown.width == UNLIMITED_WIDTH
        and shown.color_system is None
        and shown.encoding.startswith("utf")  # else rich draws the box in ASCII
        and not shown.legacy_windows
        and all(plain_cell(cell) for cell in (title, *columns))
        and all(plain_cell(cell) for row in cells for cell in row)
    ):
        shown.file.write(plain_table(title, columns, cells))
        shown.file.flush()
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in no_wrap)
    for row in cells:
        table.add_row(*row)
    shown.print(table)


def plain_cell(text: str) -> bool:
    """Whether rich prints ``text`` as it is: printable characters only (no tab, newline or control
    code), no markup (``[``) and no emoji code (``:name:``)."""
    if not text.isprintable() or "[" in text:
        return False
    if ":" in text:
        from rich.emoji import Emoji

        return Emoji.replace(text) == text
    return True


def plain_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The text rich prints for a table of plain cells (``plain_cell``) with no width limit and no colour:
    its title, a heavy head (rich's default box) and a light body, one line per row."""
    from rich.cells import cell_len

    widths = [cell_len(column) for column in columns]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], cell_len(cell))

    def line(left: str, fill: str, middle: str, right: str) -> str:
        return left + middle.join(fill * (width + 2) for width in widths) + right + "\n"

    def cells(edge: str, values: Sequence[str]) -> str:
        padded = (
            f" {value}{' ' * (width - cell_len(value))} " for value, width in zip(values, widths, strict=True)
        )
        return edge + edge.join(padded) + edge + "\n"

    parts = [title + "\n", line("┏", "━", "┳", "┓"), cells("┃", columns), line("┡", "━", "╇", "┩")]
    parts.extend(cells("│", row) for row in rows)
    parts.append(line("└", "─", "┴", "┘"))
    return "".join(parts)
