"""`print_table` writes the bytes rich writes, with or without rich's layout (issue 27: rich's layout of a
200-pod CloneSet's 700 pod actions took ~450 ms of CPU, for output to a pipe that has nothing to lay out)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Sequence

import pytest
from rich.console import Console
from rich.table import Table

from services.cli import terminal
from services.cli.history import print_history
from services.cli.terminal import UNLIMITED_WIDTH, plain_cell, plain_table, print_table


def rich_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[str | None]], width: int = UNLIMITED_WIDTH
) -> str:
    """What rich printed, as the commands' console (services/cli/terminal.py) prints to a pipe."""
    out = io.StringIO()
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=out, width=width, soft_wrap=width == UNLIMITED_WIDTH).print(table)
    return out.getvalue()


TABLES: dict[str, tuple[str, list[str], list[list[str]]]] = {
    "one row": ("rollouts of team-1/svc-25", ["#", "from → to revision"], [["1", "95b6dfb65 → 96c488c6f"]]),
    "no rows": ("pod actions", ["revision", "pod", "outcome"], []),
    "a title wider than the table": ("pod actions (an in-place update spans … markReady)", ["a"], [["x"]]),
    "empty cells and wide characters": (
        "t",
        ["pod", "outcome"],
        [["web-0", ""], ["", "failed: 容器未就绪"], ["wëb-ü", "succeeded"]],
    ),
    "times and a colon that is no emoji code": (
        "t",
        ["requested", "outcome"],
        [["12:07:05.036", "failed: timeout: 30s"], ["-", "a:b"]],
    ),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_plain_table_is_what_rich_prints(name: str) -> None:
    title, columns, rows = TABLES[name]
    assert all(plain_cell(cell) for row in rows for cell in row)
    assert plain_table(title, columns, rows) == rich_table(title, columns, rows)


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("web-0", True),
        ("12:07:05.036", True),
        ("95b6dfb65 → 96c488c6f", True),
        ("failed: [Errno 111] refused", False),  # markup is rich's to read
        ("[bold]x[/bold]", False),
        ("done :thumbs_up:", False),  # an emoji code rich replaces
        ("tab\there", False),
        ("two\nlines", False),
        ("bell\a", False),
        ("", True),
    ],
)
def test_what_counts_as_plain(text: str, plain: bool) -> None:
    assert plain_cell(text) is plain


@contextlib.contextmanager
def printed(width: int | None) -> Iterator[io.StringIO]:
    """What the commands' console prints to a pipe (``COLUMNS`` giving ``width``, or none)."""
    terminal.console.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        if width is None:
            patch.delenv("COLUMNS", raising=False)
        else:
            patch.setenv("COLUMNS", str(width))
        patch.delenv("FORCE_COLOR", raising=False)
        try:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                yield out
        finally:
            terminal.console.cache_clear()


@pytest.mark.parametrize("width", [None, 40], ids=["a pipe", "COLUMNS=40"])
@pytest.mark.parametrize(
    "cells",
    [["web-0", "succeeded"], ["web-1", "failed: [Errno 111] connection refused by the node"]],
    ids=["plain", "markup"],
)
def test_print_table_prints_what_rich_prints(
    width: int | None, cells: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [cells, ["web-2", None]]
    written: list[str] = []

    def without_rich(*args: object) -> str:
        written.append(plain_table(*args))  # type: ignore[arg-type]
        return written[-1]

    monkeypatch.setattr(terminal, "plain_table", without_rich)
    with printed(width) as out:
        print_table("pod actions", ["pod", "outcome"], rows)
    assert out.getvalue() == rich_table("pod actions", ["pod", "outcome"], rows, width or UNLIMITED_WIDTH)
    # Rich lays out what has a width limit or markup; the rest is written without it.
    assert bool(written) is (width is None and "[" not in cells[1])
    if width is not None:
        assert max(len(line) for line in out.getvalue().splitlines()) <= width  # rich folded it


def test_history_prints_the_tables_rich_printed() -> None:
    from datetime import UTC, datetime, timedelta

    at = datetime(2026, 12, 7, 12, 7, 5, 36000, tzinfo=UTC)
    rollouts = [
        dict(rollout_id="ns/web@web-96c488c6f#1", strategy_type="InPlaceIfPossible", driven_by="planner",
             from_revision="web-95b6dfb65", to_revision="web-96c488c6f", started=at,
             duration=timedelta(seconds=240), outcome="succeeded"),
    ]  # fmt: skip
    actions = [
        dict(rollout_id="ns/web@web-96c488c6f#1", pod=f"web-{i}", action="updateInPlace", requested=at,
             duration=timedelta(seconds=2.3), outcome="failed" if i == 2 else "succeeded",
             reason="timeout: not ready" if i == 2 else None)
        for i in range(5)
    ]  # fmt: skip
    with printed(None) as out:
        print_history("ns", "web", rollouts, actions, None)
    expected = rich_table(
        "rollouts of ns/web",
        ["#", "from → to revision", "strategy", "started", "took", "outcome"],
        [["1", "95b6dfb65 → 96c488c6f", "InPlaceIfPossible", at.astimezone().strftime("%H:%M:%S.%f")[:-3],
          "240.00s", "succeeded"]],
    ) + rich_table(
        "pod actions (an in-place update spans its not-ready mark … markReady)",
        ["revision", "pod", "action", "requested", "took", "outcome"],
        [["96c488c6f#1", f"web-{i}", "updateInPlace", at.astimezone().strftime("%H:%M:%S.%f")[:-3], "2.30s",
          "failed: timeout: not ready" if i == 2 else "succeeded"] for i in range(5)],
    )  # fmt: skip
    assert out.getvalue() == expected


def test_a_pipe_that_is_not_utf_8_gets_rich_s_ascii_box(monkeypatch: pytest.MonkeyPatch) -> None:
    def ascii_pipe() -> io.TextIOWrapper[io.BytesIO]:
        return io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="replace")

    rows = [["web-0", "succeeded"]]
    with printed(None):
        out = ascii_pipe()
        with contextlib.redirect_stdout(out):
            print_table("pod actions", ["pod", "outcome"], rows)
    expected = ascii_pipe()
    table = Table(title="pod actions", title_justify="left")
    for column in ("pod", "outcome"):
        table.add_column(column, overflow="fold")
    table.add_row(*rows[0])
    Console(file=expected, width=UNLIMITED_WIDTH, soft_wrap=True).print(table)
    printed_bytes = []
    for stream in (out, expected):
        stream.flush()
        printed_bytes.append(stream.buffer.getvalue())
    assert printed_bytes[0] == printed_bytes[1] and b"+" in printed_bytes[0]
