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
from services.cli import plan as _plan  # noqa: E402
from services.cli import selfcheck  # noqa: E402
from services.cli import services as service_commands  # noqa: E402

selfcheck.register(app)
_plan.register(app)
service_commands.register(app)


def main() -> None:
    app()


# Command groups register themselves on `app` when imported: one import line per group.
from services.cli import apply as _apply  # noqa: E402
from services.cli import demo as _demo  # noqa: E402
from services.cli import history as _history  # noqa: E402
from services.cli import simcluster as _simcluster  # noqa: E402,F401
from services.cli import status as _status  # noqa: E402

_apply.register(app)
_demo.register(app)
_history.register(app)
_status.register(app)

if __name__ == "__main__":
    # Under `python -m` this file runs as `__main__`; the groups registered on `services.cli.main.app`.
    from services.cli.main import main as _main

    _main()
