"""The terminal the commands print rich output to, made at first use: importing rich costs start-up time
that `rollbook --help`, `plan` and `inject` do not need."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@cache
def console() -> Console:
    from rich.console import Console

    return Console()
