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


# Command groups: every module in this package with a `register(app)` function adds its commands.
# Discovered rather than listed so that adding a command never edits this file.
def _register_command_modules() -> None:
    import importlib
    import pkgutil

    import services.cli as package

    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if module_info.name == "main":
            continue
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(app)


_register_command_modules()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
