"""`rollbook plan` end to end through the real CLI process, and byte-exact replay of a recorded rollout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec

from services.kinds.cloneset.rules.plan import plan_json
from tests.planner.builders import IDS, cloneset, revision_record, running_pod, with_image
from tests.planner.simulate import Cluster

ROOT = Path(__file__).resolve().parents[2]


def _state() -> bytes:
    v1 = cloneset(strategy={"partition": 2})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = with_image(v1, "nginx:mainline")
    raw = {"cloneSet": v2, "pods": pods, "revisions": [revision_record(v1, 1)], "now": "2026-11-30T12:00:00Z"}
    return msgspec.json.encode(raw)


def test_rollbook_plan_reads_a_file_and_stdin(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_bytes(_state())
    command = [sys.executable, "-m", "services.cli.main", "plan"]
    from_file = subprocess.run([*command, "-f", str(state)], cwd=ROOT, capture_output=True, check=True)
    from_stdin = subprocess.run(
        [*command, "-f", "-"], cwd=ROOT, input=_state(), capture_output=True, check=True
    )
    assert from_file.stdout == from_stdin.stdout
    out = json.loads(from_file.stdout)
    for key in (
        "updateRevision",
        "currentRevision",
        "partition",
        "actions",
        "status",
        "requeueAfterSeconds",
        "rejected",
    ):
        assert key in out
    assert out["partition"] == 2 and out["rejected"] is None
    assert [a["action"] for a in out["actions"]] == ["recreatePod"]


def test_rollbook_plan_prints_a_rejection_for_bad_input(tmp_path: Path) -> None:
    state = tmp_path / "bad.json"
    cs = cloneset(strategy={"partition": "abc"})
    state.write_bytes(msgspec.json.encode({"cloneSet": cs, "now": "2026-11-30T12:00:00Z"}))
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "plan", "-f", str(state)],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    assert json.loads(done.stdout)["rejected"]["field"] == "spec.updateStrategy.partition"


def test_replaying_recorded_observations_reproduces_every_decision_byte_for_byte() -> None:
    v1 = cloneset(
        strategy={"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5}}, replicas=4
    )
    cluster = Cluster(v1, tick_seconds=3)
    cluster.run()
    cluster.cloneset = with_image(cluster.cloneset, "nginx:2")
    recorded: list[tuple[bytes, bytes]] = []
    for _ in range(40):
        observation = msgspec.json.encode(cluster.plan_input())
        decision = plan_json(observation)
        recorded.append((observation, decision))
        cluster.step()
    assert any(b'"updateInPlace"' in d for _, d in recorded)
    for observation, decision in recorded:
        assert plan_json(observation) == decision


def test_plans_do_not_depend_on_the_interpreter_hash_seed() -> None:
    digests = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run(
            [sys.executable, "-m", "tests.planner.replay_digest"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )
        digests.add(done.stdout)
    assert len(digests) == 1
