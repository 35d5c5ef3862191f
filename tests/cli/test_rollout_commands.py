"""`rollbook rollout pause|resume|restart|status` (kubectl-kruise's verbs): what each patches, its refusals
with kubectl-kruise's wording, and who did it recorded on the object the trail observes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from services.cli.errors import CommandError
from services.cli.rollout import CHANGE, CHANGED_BY, RESTARTED_AT, change_patch, parse_target
from services.simcluster import SimCluster
from tests.cli.test_refusals import SEED, rollbook
from tests.e2e.cluster import Cluster
from tests.plugins.simcluster import api_client_for

NOW = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def cloneset(paused: bool | None = None) -> dict[str, Any]:
    strategy = {} if paused is None else {"paused": paused}
    return {"metadata": {"namespace": "ops", "name": "web"}, "spec": {"updateStrategy": strategy}}


def test_each_verb_patches_what_kubectl_kruise_does() -> None:
    pause = change_patch("pause", cloneset(), "rollbook-cli ann@host", NOW)
    assert pause["spec"] == {"updateStrategy": {"paused": True}}
    assert pause["metadata"]["annotations"][CHANGED_BY] == "rollbook-cli ann@host"
    assert pause["metadata"]["annotations"][CHANGE].startswith("pause at ")
    assert change_patch("resume", cloneset(True), "x", NOW)["spec"] == {"updateStrategy": {"paused": False}}
    restart = change_patch("restart", cloneset(False), "x", NOW)
    assert set(restart["spec"]["template"]["metadata"]["annotations"]) == {RESTARTED_AT}


def test_a_verb_with_nothing_to_do_is_refused() -> None:
    with pytest.raises(CommandError, match="^CloneSet ops/web is already paused$"):
        change_patch("pause", cloneset(True), "x", NOW)
    with pytest.raises(CommandError, match="^CloneSet ops/web is not paused$"):
        change_patch("resume", cloneset(), "x", NOW)
    with pytest.raises(CommandError, match="is paused: resume it first"):
        change_patch("restart", cloneset(True), "x", NOW)


def test_targets_as_kubectl_writes_them() -> None:
    assert parse_target("cloneset/web", "ops") == ("ops", "web")
    assert parse_target("clone/web", None) == ("default", "web")
    assert parse_target("ops/web", None) == ("ops", "web")
    assert parse_target("web", "ops") == ("ops", "web")
    with pytest.raises(CommandError, match="names namespace ops, -n says dev"):
        parse_target("ops/web", "dev")


@pytest.mark.asyncio(loop_scope="session")
async def test_pause_resume_restart_through_the_api_server(simcluster: SimCluster, tmp_path: Path) -> None:
    env = {"ROLLBOOK_KUBECONFIG": str(simcluster.kubeconfig_path)}
    manifest = tmp_path / "cs.yaml"
    manifest.write_text((SEED / "cloneset-sample.yaml").read_text().replace("name: sample", "name: verbs", 1))
    assert (await asyncio.to_thread(rollbook, "apply", "-f", str(manifest), **env))[0] == 0

    async def read() -> dict[str, Any]:
        async with await api_client_for(simcluster) as api:
            return await Cluster(api, namespace="default").cloneset("verbs")

    code, out, err = await asyncio.to_thread(rollbook, "rollout", "pause", "cloneset/verbs", **env)
    assert (code, out.strip()) == (0, "cloneset.apps.kruise.io/verbs paused"), err
    paused = await read()
    assert paused["spec"]["updateStrategy"]["paused"] is True
    assert paused["metadata"]["annotations"][CHANGED_BY].startswith("rollbook-cli ")
    code, _, err = await asyncio.to_thread(rollbook, "rollout", "pause", "default/verbs", **env)
    assert code == 1 and err.strip() == "rollbook: CloneSet default/verbs is already paused"
    code, out, _ = await asyncio.to_thread(
        rollbook, "rollout", "resume", "clone/verbs", "-n", "default", **env
    )
    assert (code, out.strip()) == (0, "cloneset.apps.kruise.io/verbs resumed")
    code, out, _ = await asyncio.to_thread(rollbook, "rollout", "restart", "default/verbs", **env)
    assert (code, out.strip()) == (0, "cloneset.apps.kruise.io/verbs restarted")
    restarted = await read()
    assert RESTARTED_AT in restarted["spec"]["template"]["metadata"]["annotations"]
    assert restarted["metadata"]["generation"] > paused["metadata"]["generation"]
    assert restarted["metadata"]["annotations"][CHANGE].startswith("restart at ")
    code, _, err = await asyncio.to_thread(rollbook, "rollout", "pause", "default/nothere", **env)
    assert code == 1 and err.strip() == "rollbook: CloneSet default/nothere not found"
