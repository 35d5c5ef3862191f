"""`rollbook rollout undo` end to end: the services running on simcluster, a CloneSet rolled to a new image,
then rolled back with the CLI as with `kubectl rollout undo`. The pods go back to the first image, and the
trail records the rollback as a rollout of its own (a new rollout id, from revision 2 to revision 1),
which `rollbook rollout history` then lists as revision 3, changed by rollbook-cli."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from tests.cli.test_refusals import rollbook
from tests.e2e.cluster import Cluster, image_of, is_ready, seed_cloneset, with_image
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "undo-web"


def cloneset() -> dict[str, Any]:
    obj = seed_cloneset("cloneset-sample.yaml", replicas=3, updateStrategy={"maxUnavailable": 1})
    obj["metadata"]["name"] = NAME
    obj["metadata"]["labels"] = {"app": NAME}
    obj["spec"]["selector"] = {"matchLabels": {"app": NAME}}
    obj["spec"]["template"]["metadata"]["labels"] = {"app": NAME}
    return obj


async def on_image(cluster: Cluster, image: str) -> bool:
    pods = await cluster.pods(NAME)
    return len(pods) == 3 and all(is_ready(p) and image_of(p) == image for p in pods.values())


async def rollouts(database_url: str) -> list[Any]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return list(
            await connection.fetch(
                "SELECT rollout_id, from_revision, to_revision, outcome FROM rollouts"
                " WHERE namespace = 'default' AND workload = $1 ORDER BY started_position",
                NAME,
            )
        )
    finally:
        await connection.close()


async def test_undo_rolls_back_and_the_trail_records_a_rollout_of_its_own(
    stack: Stack, cluster: Cluster
) -> None:
    settings = stack.settings
    await stack.start("auditor", "watcher", "planner", "executor")
    await cluster.create_cloneset(cloneset())
    await wait_for(lambda: on_image(cluster, "nginx:alpine"), within=60, what="3 ready pods")
    await cluster.patch_cloneset(NAME, with_image(cloneset(), "nginx:mainline"))
    await wait_for(lambda: on_image(cluster, "nginx:mainline"), within=90, what="3 pods on nginx:mainline")

    async def finished(count: int) -> list[Any]:
        found = await rollouts(settings.database_url)
        done = all(r["outcome"] not in (None, "in progress") for r in found)
        return found if len(found) >= count and done else []

    before = await wait_for(lambda: finished(1), within=60, what="the rollout to nginx:mainline recorded")
    rolled = before[-1]
    env = {"ROLLBOOK_KUBECONFIG": settings.kubeconfig, "ROLLBOOK_DATABASE_URL": settings.database_url}
    code, out, err = await asyncio.to_thread(rollbook, "rollout", "undo", f"cloneset/{NAME}", **env)
    assert (code, out.strip()) == (0, f"cloneset.apps.kruise.io/{NAME} rolled back"), err
    await wait_for(lambda: on_image(cluster, "nginx:alpine"), within=90, what="3 pods back on nginx:alpine")

    after = await wait_for(lambda: finished(len(before) + 1), within=60, what="the rollback recorded")
    rollback = after[-1]
    assert rollback["rollout_id"] not in {r["rollout_id"] for r in before}  # its own id
    assert (rollback["from_revision"], rollback["to_revision"]) == (
        rolled["to_revision"],
        rolled["from_revision"],
    )
    assert rollback["outcome"] == "succeeded"

    async def listed() -> str:
        code, out, _ = await asyncio.to_thread(rollbook, "rollout", "history", f"default/{NAME}", **env)
        return out if code == 0 and len(out.splitlines()) == 4 else ""

    lines = (await wait_for(listed, within=30, what="history with the renumbered revision")).splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["2", "3"]  # revision 1 came back as 3, as kubectl
    assert lines[3].split()[1] == rolled["from_revision"]
    assert "rollbook-cli " in lines[3] and "undo to revision 1 (" in lines[3]
    assert stack.dead() == []
