"""`rollbook rollout pause|resume|restart|status|history|undo`: the verbs of kubectl-kruise's `rollout` for
a CloneSet, acting through the API server as kubectl does (a patch, field manager ``rollbook-cli``).

    pause    spec.updateStrategy.paused: true     ("already paused": exit 1)
    resume   spec.updateStrategy.paused: false    ("not paused": exit 1)
    restart  the template annotation kubectl.kubernetes.io/restartedAt, so every pod is updated again
    status   follow the rollout until it ends, with the exit codes of `get -w` (0 finished, 3 spec
             rejected, 4 failed or superseded, 5 --timeout)
    history  the revisions recorded in the trail, who changed what (services/cli/rollout_history.py)
    undo     restore a recorded revision's template (services/cli/rollout_history.py)

Each change is recorded as who did what: the CloneSet's annotations ``rollbook.io/changed-by`` (the
local user and host) and ``rollbook.io/change`` (the verb and when) travel in the same patch, so the
watcher's observation of the change, in the audit trail, carries them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import typer

from services.cli.errors import CommandError
from services.infra.settings import Settings
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION

FIELD_MANAGER = "rollbook-cli"
CHANGED_BY = "rollbook.io/changed-by"
CHANGE = "rollbook.io/change"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # kubectl's own annotation: `kubectl rollout restart`
KINDS = ("cloneset", "clonesets", "clone", "cloneset.apps.kruise.io")


def parse_target(target: str, namespace: str | None) -> tuple[str, str]:
    """``cloneset/web`` (kubectl's form, namespace from -n) or ``NS/NAME`` -> (namespace, name)."""
    first, slash, rest = target.partition("/")
    if slash and first.lower() in KINDS:
        name, found = rest, namespace or "default"
    elif slash:
        if namespace and namespace != first:
            raise CommandError(f"{target} names namespace {first}, -n says {namespace}", exit_code=2)
        found, name = first, rest
    else:
        found, name = namespace or "default", target
    if not name or "/" in name:
        raise CommandError(f"expected cloneset/NAME or NAMESPACE/NAME, got {target!r}", exit_code=2)
    return found, name


def change_patch(verb: str, cloneset: dict[str, Any], who: str, now: datetime) -> dict[str, Any]:
    """The merge patch ``verb`` makes to ``cloneset`` (pure); a verb with nothing to do is a CommandError
    worded as kubectl-kruise's."""
    metadata = cloneset.get("metadata") or {}
    key = f"{metadata.get('namespace', 'default')}/{metadata.get('name', '')}"
    paused = ((cloneset.get("spec") or {}).get("updateStrategy") or {}).get("paused") is True
    stamp = now.astimezone().isoformat(timespec="seconds")
    spec: dict[str, Any]
    if verb == "pause":
        if paused:
            raise CommandError(f"CloneSet {key} is already paused")
        spec = {"updateStrategy": {"paused": True}}
    elif verb == "resume":
        if not paused:
            raise CommandError(f"CloneSet {key} is not paused")
        spec = {"updateStrategy": {"paused": False}}
    elif verb == "restart":
        if paused:
            raise CommandError(f"CloneSet {key} is paused: resume it first (`rollbook rollout resume`)")
        spec = {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}
    else:
        raise ValueError(f"unknown verb {verb}")
    return {"metadata": {"annotations": {CHANGED_BY: who, CHANGE: f"{verb} at {stamp}"}}, "spec": spec}


def who_am_i() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{FIELD_MANAGER} {user}@{socket.gethostname()}"


DONE = {"pause": "paused", "resume": "resumed", "restart": "restarted"}


async def change(settings: Settings, verb: str, namespace: str, name: str) -> str:
    from datetime import UTC

    from kubernetes_asyncio import client

    from services.cli.clonesets import cloneset_read_error
    from services.infra.kube import api_client

    api = await api_client(settings)
    async with api:
        custom = client.CustomObjectsApi(api)
        try:
            cloneset = await custom.get_namespaced_custom_object(
                CLONESET_GROUP, CLONESET_VERSION, namespace, CLONESET_PLURAL, name
            )
            patch = change_patch(verb, cloneset, who_am_i(), datetime.now(UTC))
            await custom.patch_namespaced_custom_object(
                CLONESET_GROUP, CLONESET_VERSION, namespace, CLONESET_PLURAL, name, patch,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",  # type: ignore[call-arg]
            )  # fmt: skip
        except client.ApiException as error:
            raise CommandError(cloneset_read_error(error.status, error.body, namespace, name)) from None
    return f"cloneset.apps.kruise.io/{name} {DONE[verb]}"


def register(app: typer.Typer) -> None:
    rollout = typer.Typer(
        help="Manage a CloneSet's rollout as kubectl-kruise does: pause, resume, restart, status, history,"
        " undo.",
        no_args_is_help=True,
    )
    app.add_typer(rollout, name="rollout")

    def verb_command(verb: str, summary: str) -> None:
        def command(
            target: str = typer.Argument(..., help="cloneset/NAME (with -n) or NAMESPACE/NAME"),
            namespace: str = typer.Option(None, "-n", "--namespace", help="Namespace (default: default)."),
        ) -> None:
            import asyncio

            found_namespace, name = parse_target(target, namespace)
            typer.echo(asyncio.run(change(Settings.from_env(), verb, found_namespace, name)))

        command.__doc__ = summary
        rollout.command(verb)(command)

    verb_command("pause", "Pause the rollout (spec.updateStrategy.paused: true); exit 1 if already paused.")
    verb_command("resume", "Resume a paused rollout; exit 1 if it is not paused.")
    verb_command("restart", "Update every pod again (template annotation kubectl.kubernetes.io/restartedAt).")

    @rollout.command("status")
    def status_command(
        target: str = typer.Argument(..., help="cloneset/NAME (with -n) or NAMESPACE/NAME"),
        namespace: str = typer.Option(None, "-n", "--namespace", help="Namespace (default: default)."),
        timeout: float = typer.Option(None, "--timeout", help="Give up after this many seconds (exit 5)."),
    ) -> None:
        """Follow the rollout until it ends: 0 finished, 3 spec rejected, 4 failed or superseded, 5 timed
        out (the exit codes of `rollbook get -w`)."""
        import asyncio

        from services.cli.errors import check_range
        from services.cli.watch import follow

        check_range("--timeout", timeout, 0, what=" seconds")
        found_namespace, name = parse_target(target, namespace)
        raise typer.Exit(
            asyncio.run(
                follow(
                    Settings.from_env(),
                    f"{found_namespace}/{name}",
                    watch=True,
                    timeout=timeout,
                    interval=1.0,
                )
            )
        )

    @rollout.command("history")
    def history_command(
        target: str = typer.Argument(..., help="cloneset/NAME (with -n) or NAMESPACE/NAME"),
        namespace: str = typer.Option(None, "-n", "--namespace", help="Namespace (default: default)."),
        revision: int = typer.Option(
            None, "--revision", help="Show this revision's pod template and its diff against the one before."
        ),
    ) -> None:
        """The revisions recorded in the audit trail: number, name, when, who changed the template to it
        and how, and what changed."""
        import asyncio

        from services.cli.errors import check_range
        from services.cli.rollout_history import history_text, read_revisions

        check_range("--revision", revision, 1)
        found_namespace, name = parse_target(target, namespace)
        revisions = asyncio.run(read_revisions(Settings.from_env(), found_namespace, name))
        typer.echo(history_text(revisions, found_namespace, name, revision))

    @rollout.command("undo")
    def undo_command(
        target: str = typer.Argument(..., help="cloneset/NAME (with -n) or NAMESPACE/NAME"),
        namespace: str = typer.Option(None, "-n", "--namespace", help="Namespace (default: default)."),
        to_revision: int = typer.Option(
            0, "--to-revision", help="The revision to roll back to (0: the one before the latest)."
        ),
    ) -> None:
        """Roll back to a recorded revision's pod template (kubectl's `rollout undo`); the planner records
        it as a rollout of its own."""
        import asyncio

        from services.cli.errors import check_range
        from services.cli.rollout_history import undo

        check_range("--to-revision", to_revision, 0)
        found_namespace, name = parse_target(target, namespace)
        settings = Settings.from_env()
        rolled = undo(
            settings, found_namespace, name, to_revision, who=who_am_i(), field_manager=FIELD_MANAGER
        )
        typer.echo(asyncio.run(rolled))
