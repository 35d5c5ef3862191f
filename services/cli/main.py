"""The `rollbook` command. Each command group lives in its own module here and registers itself."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="rollbook",
    help="Event-sourced CloneSet and SidecarSet controller: rollouts you can replay, verify and query"
    " with SQL.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Keeps `rollbook` a group of subcommands even while only one is registered."""


# Command groups: one module each, registered here.
from services.cli import inject, plan, selfcheck, simcluster, webhook  # noqa: E402
from services.cli import replay as replay_commands  # noqa: E402
from services.cli import services as service_commands  # noqa: E402

selfcheck.register(app)
simcluster.register(app)
plan.register(app)
inject.register(app)
webhook.register(app)
service_commands.register(app)
replay_commands.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
