"""The `rollbook` command. Each command group lives in its own module here and registers itself.

Start-up stays fast (`rollbook --help`, `plan`, `inject`: bench/cli_startup.py) because command modules
import only typer at their top; kubernetes_asyncio, alembic, sqlalchemy, asyncpg and nats are imported
inside the commands that use them.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from services.cli.errors import boundary

PROGRAM = "rollbook"
DEBUG_FLAG = "--debug"

app = typer.Typer(
    name=PROGRAM,
    help="Event-sourced CloneSet and SidecarSet controller: rollouts you can replay, verify and query"
    " with SQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # errors end in services.cli.errors.boundary, one line each
    context_settings={"max_content_width": 80, "help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version(PROGRAM)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"{PROGRAM} {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(
        False, DEBUG_FLAG, help="On an error, print the traceback, not only its one-line reason."
    ),
) -> None:
    """Keeps `rollbook` a group of subcommands; the options apply to every command."""


# Command groups: every module in this package with a `register(app)` function adds its commands.
# Discovered rather than listed so that adding a command never edits this file.
def _register_command_modules() -> None:
    import importlib
    import pkgutil

    import services.cli as package

    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if module_info.name in ("main", "errors"):
            continue
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(app)


_register_command_modules()


def _plain_metavars(command: Any) -> None:
    """Name each value placeholder after its parameter (`--decide DECIDE`, `TARGET`) where typer would
    print its type in angle brackets (`<str>`); flags keep none, choices keep their list."""
    for param in command.params:
        is_flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
        if param.metavar is None and not is_flag and not hasattr(param.type, "choices"):
            longest = max(param.opts, key=len).lstrip("-") if param.param_type_name == "option" else ""
            param.metavar = (longest or param.name or "value").upper().replace("-", "_")
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


def command_paths() -> list[str]:
    """Every command and group as typed after `rollbook` ("verify", "audit verify", ...)."""
    from typer.main import get_command

    paths: list[str] = []

    def walk(command: Any, prefix: str) -> None:
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            paths.append(f"{prefix}{name}")
            walk(sub, f"{prefix}{name} ")

    walk(get_command(app), "")
    return paths


def main() -> None:
    from typer.main import get_command

    # --debug is accepted anywhere on the line (`rollbook verify --all --debug`): taken out before click
    # parses, so each command need not declare it.
    arguments = sys.argv[1:]
    debug = DEBUG_FLAG in arguments
    arguments = [a for a in arguments if a != DEBUG_FLAG]
    command = get_command(app)
    _plain_metavars(command)
    boundary(lambda: command.main(args=arguments, prog_name=PROGRAM), program=PROGRAM, debug=debug)


if __name__ == "__main__":
    main()
