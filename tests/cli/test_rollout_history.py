"""`rollbook rollout history` and `rollbook rollout undo` (kubectl's rollout verbs for a CloneSet, revisions
from the audit trail): the fold of recorded revisions, who changed what, the revision undo picks, the patch
it sends and its refusals; then both commands against simcluster and a recorded trail."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.cli.errors import CommandError
from services.cli.rollout_history import (
    CHANGE,
    CHANGE_CAUSE,
    CHANGED_BY,
    Observation,
    Revision,
    attribute,
    fold_revisions,
    summary,
    template_changes,
    undo_patch,
    undo_target,
)
from services.infra.store import EventStore
from services.replay.simulation import WorkloadSimulation, base_cloneset
from services.simcluster import SimCluster
from tests.cli.test_refusals import rollbook
from tests.e2e.cluster import Cluster
from tests.plugins.simcluster import api_client_for

T0 = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def template(image: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web", **labels}},
        "spec": {"containers": [{"name": "main", "image": image}, {"name": "log", "image": "busybox"}]},
    }


def created(name: str, number: int, image: str, position: int) -> tuple[str, int, datetime, dict[str, Any]]:
    payload = {"name": name, "revision": number, "hash": name[-4:], "template": template(image)}
    return ("RevisionCreated", position, T0 + timedelta(seconds=position), payload)


@pytest.mark.pure
def test_revisions_fold_as_kubectl_lists_them_renumbered_on_rollback_and_pruned() -> None:
    events = [
        created("web-aaaa", 1, "nginx:1", 10),
        created("web-bbbb", 2, "nginx:2", 20),
        created("web-cccc", 3, "nginx:3", 30),
        created("web-aaaa", 4, "nginx:1", 40),  # rolled back to the first: it is renumbered
        ("RevisionsPruned", 50, T0, {"names": ["web-bbbb"]}),
    ]
    folded = fold_revisions(events)
    assert [(r.number, r.name, r.position) for r in folded] == [(3, "web-cccc", 30), (4, "web-aaaa", 40)]


@pytest.mark.pure
def test_who_changed_the_template_is_what_that_same_change_wrote() -> None:
    revisions = fold_revisions([created("web-aaaa", 1, "nginx:1", 10), created("web-bbbb", 2, "nginx:2", 25)])
    paused = {CHANGED_BY: "rollbook-cli ann@host", CHANGE: "pause at 06:00"}
    restarted = {CHANGED_BY: "rollbook-cli bob@host", CHANGE: "restart at 06:01"}
    observations = [
        Observation(5, template("nginx:1"), {}),
        Observation(8, template("nginx:1"), paused),  # a pause: no template change
        Observation(21, template("nginx:2"), restarted),  # the change that brought revision 2
        Observation(30, template("nginx:2"), restarted),
    ]
    first, second = attribute(revisions, observations)
    assert (first.changed_by, first.change) == ("-", "-")
    assert (second.changed_by, second.change) == ("rollbook-cli bob@host", "restart at 06:01")
    # Annotations left from an earlier verb are not who made a later edit.
    stale = [Observation(5, template("nginx:1"), paused), Observation(21, template("nginx:2"), paused)]
    assert [(r.changed_by, r.change) for r in attribute(revisions, stale)][1] == ("-", "-")
    # kubectl's change-cause, written by that edit, says what was done.
    cause = [
        Observation(5, template("nginx:1"), {}),
        Observation(21, template("nginx:2"), {CHANGE_CAUSE: "set image"}),
    ]
    assert attribute(revisions, cause)[1].change == "set image"


@pytest.mark.pure
def test_what_changed_between_two_templates() -> None:
    old, new = template("nginx:1"), template("nginx:2", tier="front")
    assert template_changes(old, new) == [
        "+metadata.labels.tier: front",
        "spec.containers[main].image: nginx:1 → nginx:2",
    ]
    reordered = copy.deepcopy(old)
    reordered["spec"]["containers"].reverse()
    assert template_changes(old, reordered) == []  # containers are keyed by name
    assert summary(None, new) == "first revision"
    assert summary(old, old) == "no template change"
    assert summary(old, new, most=1) == "+metadata.labels.tier: front; +1 more"


def revision(number: int, image: str = "nginx:1") -> Revision:
    return Revision(number, f"web-{number}", template(image), T0, number * 10)


@pytest.mark.pure
def test_undo_picks_the_revision_kubectl_would() -> None:
    kept = [revision(2), revision(3), revision(5)]
    assert undo_target(kept, 0, "ops/web").number == 3  # the one before the latest
    assert undo_target(kept, 2, "ops/web").number == 2
    with pytest.raises(
        CommandError, match="^unable to find specified revision 4 in history of cloneset ops/web$"
    ):
        undo_target(kept, 4, "ops/web")
    with pytest.raises(CommandError, match="^no rollout history found for cloneset ops/web: it has one"):
        undo_target(kept[:1], 0, "ops/web")
    with pytest.raises(CommandError, match="^no rollout history found for cloneset ops/web$"):
        undo_target([], 1, "ops/web")


def live(image: str, paused: bool = False) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": "ops",
            "resourceVersion": "41",
            "annotations": {"team": "a"},
        },
        "spec": {"template": template(image), "updateStrategy": {"paused": paused}},
    }


@pytest.mark.pure
def test_the_undo_patch_and_its_refusals() -> None:
    patch = undo_patch(live("nginx:2"), revision(1, "nginx:1"), "rollbook-cli ann@host", "06:00", "ops/web")
    assert patch is not None
    test, replace, annotate = patch
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}  # nothing changed since
    assert replace == {"op": "replace", "path": "/spec/template", "value": template("nginx:1")}
    assert annotate["value"]["team"] == "a" and annotate["value"][CHANGED_BY] == "rollbook-cli ann@host"
    assert annotate["value"][CHANGE] == "undo to revision 1 (web-1) at 06:00"
    # Already there: kubectl's "skipped rollback".
    assert undo_patch(live("nginx:1"), revision(1, "nginx:1"), "x", "t", "ops/web") is None
    with pytest.raises(CommandError, match="^you cannot rollback a paused cloneset; resume it first with"):
        undo_patch(live("nginx:2", paused=True), revision(1), "x", "t", "ops/web")
    secret = revision(1)
    secret.template["spec"]["containers"][0]["env"] = [{"name": "DB", "value": "hmac-sha256:" + "ab" * 32}]
    with pytest.raises(CommandError, match=r"redacted values \(spec.containers\[main\].env\[DB\].value\)"):
        undo_patch(live("nginx:2"), secret, "x", "t", "ops/web")


@pytest.mark.asyncio(loop_scope="session")
async def test_history_and_undo_against_the_api_server_and_the_trail(
    simcluster: SimCluster, event_store: EventStore, database_url: str
) -> None:
    """A trail that recorded web rolled from nginx:alpine (revision 1) to nginx:mainline (revision 2), and
    the CloneSet as it is now: history lists both; undo puts revision 1's template back through the API
    server, saying who did it; a second undo finds nothing to do, as kubectl's "skipped rollback"."""
    namespace = "undo-test"
    history = WorkloadSimulation(namespace, "web", replicas=2, start=T0).run()
    await event_store.import_events(history)
    now = base_cloneset("web", namespace, 2, {"type": "InPlaceIfPossible", "maxUnavailable": 1})
    del now["metadata"]["uid"], now["metadata"]["generation"]
    now["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:mainline"
    env = {"ROLLBOOK_KUBECONFIG": str(simcluster.kubeconfig_path), "ROLLBOOK_DATABASE_URL": database_url}
    async with await api_client_for(simcluster) as api:
        cluster = Cluster(api, namespace=namespace)
        await cluster.core.create_namespace(body={"metadata": {"name": namespace}})
        await cluster.create_cloneset(now)

        code, out, err = await asyncio.to_thread(rollbook, "rollout", "history", f"{namespace}/web", **env)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == "cloneset.apps.kruise.io/web" and lines[1].split()[:2] == ["REVISION", "NAME"]
        assert [line.split()[0] for line in lines[2:]] == ["1", "2"]
        assert lines[3].endswith("spec.containers[main].image: nginx:alpine → nginx:mainline"), lines[3]
        code, out, _ = await asyncio.to_thread(
            rollbook, "rollout", "history", "cloneset/web", "-n", namespace, "--revision", "2", **env
        )
        assert code == 0 and out.startswith("cloneset.apps.kruise.io/web with revision #2 ("), out
        assert "\n-  - image: nginx:alpine\n+  - image: nginx:mainline\n" in out, out

        code, out, err = await asyncio.to_thread(rollbook, "rollout", "undo", f"{namespace}/web", **env)
        assert (code, out.strip()) == (0, "cloneset.apps.kruise.io/web rolled back"), err
        restored = await cluster.cloneset("web")
        assert restored["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:alpine"
        annotations = restored["metadata"]["annotations"]
        assert annotations[CHANGED_BY].startswith("rollbook-cli ") and annotations[CHANGE].startswith(
            "undo to revision 1 ("
        )
        code, out, err = await asyncio.to_thread(rollbook, "rollout", "undo", f"{namespace}/web", **env)
        assert code == 0, err
        assert out.strip() == (
            "cloneset.apps.kruise.io/web skipped rollback (current template already matches revision 1)"
        )
        code, _, err = await asyncio.to_thread(
            rollbook, "rollout", "undo", f"{namespace}/web", "--to-revision", "7", **env
        )
        assert code == 1 and err.strip() == (
            f"rollbook: unable to find specified revision 7 in history of cloneset {namespace}/web"
        )
        code, _, err = await asyncio.to_thread(rollbook, "rollout", "history", f"{namespace}/nothere", **env)
        assert (
            code == 1
            and err.strip() == f"rollbook: no rollout history found for cloneset {namespace}/nothere"
        )
