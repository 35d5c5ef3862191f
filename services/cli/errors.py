"""The CLI's one error boundary: what a failed command prints instead of a traceback.

``services.cli.main.main`` runs every command inside ``boundary``; a command raises, it never catches to
print. ``describe`` turns an exception into one line and an exit code: a user's mistake (a missing file, a
bad target, an object that does not exist) and a server that cannot be reached each say what and where;
anything else is an internal error, still one line, with a hint to rerun with ``--debug`` (which prints
the traceback instead).

Exit codes: 1 for everything below unless the error carries its own (``CommandError.exit_code``);
2 stays click's, for usage errors; 130 for Ctrl-C.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import NoReturn


class CommandError(Exception):
    """A failure the user can act on; the message names the object and says what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_range(
    option: str, value: float | None, low: float, high: float | None = None, what: str = ""
) -> None:
    """A number option out of its range is a usage error (exit 2) in one line, before anything runs."""
    if value is None:
        return
    if value < low or (high is not None and value > high):
        wanted = f"from {low:g} to {high:g}" if high is not None else f"{low:g} or more"
        raise CommandError(f"{option} must be {wanted}{what}, not {value:g}", exit_code=2)


def _type_name(error: BaseException) -> str:
    return f"{type(error).__module__}.{type(error).__qualname__}"


def _api_exception(error: BaseException) -> str | None:
    """kubernetes_asyncio's ApiException, described without importing the package."""
    if _type_name(error) != "kubernetes_asyncio.client.exceptions.ApiException":
        return None
    status, reason = getattr(error, "status", None), getattr(error, "reason", None)
    said = api_message(getattr(error, "body", None))
    return f"the Kubernetes API server answered {status} {reason}" + (f": {said}" if said else "")


def api_message(body: object) -> str:
    """The reason an API server gives in its answer: a ``Status`` object's message (a conversion webhook
    that cannot be reached, a missing resource, a refusal), else the body's first line as text."""
    import json

    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.strip():
        return ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.strip().splitlines()[0][:300]
    if isinstance(parsed, dict):
        return str(parsed.get("message") or parsed.get("reason") or "")
    return ""


def _os_error(error: OSError) -> str:
    import errno

    if error.errno == errno.EADDRINUSE:
        return f"cannot listen: {error.strerror or error} (another process holds that port)"
    if error.filename is not None and error.errno == errno.EISDIR:
        return f"{error.filename} is a directory, not a file"
    if error.filename is not None:
        return f"cannot read {error.filename}: {error.strerror or error}"
    return f"cannot connect: {error}"


def describe(error: BaseException) -> tuple[str, int]:
    """One line and an exit code for ``error`` (never raises)."""
    if isinstance(error, CommandError):
        return str(error), error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", 130
    name = _type_name(error)
    api = _api_exception(error)
    if api is not None:
        return api, 1
    if name == "kubernetes_asyncio.config.config_exception.ConfigException":
        return (
            f"no usable kubeconfig: {error}; set ROLLBOOK_KUBECONFIG, e.g. to the file"
            " `rollbook simcluster` writes (.rollbook/simcluster/kubeconfig)",
            1,
        )
    if name.startswith("asyncpg.") and type(error).__name__ in (
        "UndefinedTableError",
        "UndefinedColumnError",
    ):
        return f"{error}: the database schema is older than this code, run `rollbook db upgrade`", 1
    if name.startswith("asyncpg."):
        return f"the database answered: {error}", 1
    if name.startswith("msgspec.") or isinstance(error, ValueError | LookupError) and _is_domain(error):
        return str(error), 1
    if isinstance(error, TimeoutError):
        return f"timed out: {error or 'no answer'}", 1
    if isinstance(error, OSError):
        return _os_error(error), 1
    if isinstance(error, RuntimeError) and _is_domain(error):
        return str(error), 1
    return f"internal error: {type(error).__name__}: {error} (run with --debug for the traceback)", 1


def is_configuration_error(error: BaseException) -> bool:
    """A failure that starting the same process again cannot mend: no usable kubeconfig, a setting out of
    its range, or a port another process holds. A supervisor stops on it rather than restart for ever
    (services/infra/supervisor.py)."""
    import errno

    if _type_name(error) in (
        "kubernetes_asyncio.config.config_exception.ConfigException",
        "services.infra.settings.SettingsError",
    ):
        return True
    return isinstance(error, OSError) and error.errno == errno.EADDRINUSE


def _is_domain(error: BaseException) -> bool:
    """Errors rollbook's own modules raise on purpose carry messages written for the user."""
    return type(error).__module__.startswith("services.")


def boundary(command: Callable[[], object], *, program: str, debug: bool) -> NoReturn:
    """Run ``command`` (the click app in standalone mode, which exits itself) and turn an escaping error
    into one line on stderr and an exit code; with ``debug`` the traceback is printed too."""
    try:
        command()
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - this is the one place errors end
        message, code = describe(error)
        if debug:
            traceback.print_exception(error)
        print(f"{program}: {message}", file=sys.stderr)
        sys.exit(code)
    sys.exit(0)
