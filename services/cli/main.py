"""The `rollbook` command. Each command group lives in its own module here and registers itself."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="rollbook",
    help="Event-sourced CloneSet and SidecarSet controller: rollouts you can replay, verify and query with SQL.",
    no_args_is_help=True,
    add_completion=False,
)


# Command groups: each module registers its commands on `app` (one line per module).
from services.cli import inject, webhook  # noqa: E402

inject.register(app)
webhook.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
