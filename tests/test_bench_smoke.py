"""Every benchmark in bench/ still runs: each script at the smallest sizes that still go through all of its
code, against this session's Postgres and NATS, must exit 0 and print its figures. Not a timed test: no
speed is asserted (the figures are only checked to be there); bench/ is where speed is measured.

bench/eventstore.py crashed for a while after migration 0004 (its COPY table inherited NOT NULL hash
columns) and nobody noticed; this keeps that from happening again. A new script in bench/ must be added
to RUNS or SKIPPED below (test_every_bench_script_is_covered); a module named with a leading "_" is a
part the scripts share.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.db_roles import DUTIES, PREFIX_LENGTH
from tests.plugins.servers import ServerUrls

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH = REPO_ROOT / "bench"
NUMBER = r"[\d,]+(?:\.\d+)?"

# script -> (smallest arguments that still exercise every case, patterns that must be in the output)
RUNS: dict[str, tuple[list[str], list[str]]] = {
    "store_authority.py": (
        ["--actions", "20", "--rounds", "1"],
        [
            rf"the check costs +-?{NUMBER} +-?{NUMBER} +-?{NUMBER}",
            r"ceiling: [\d,]+ checked actions/s",
            rf"added CPU at that rate: -?{NUMBER}% of one core",
        ],
    ),
    "archive.py": (
        ["--events", "600"],
        [
            rf"archive \(write, fsync, drop\) +[\d,]+ +[\d,]+ +{NUMBER}",
            rf"audit verify --archive +[\d,]+ +[\d,]+ +{NUMBER}",
            r"archived 512 events into \d+ bytes/event",
        ],
    ),
    "append_cost.py": (
        ["--statements", "3", "--preload", "14", "--rounds", "1"],
        [
            rf"append \(unnest\) +{NUMBER} +\+0\.0",
            rf"executemany \(row per INSERT\) +{NUMBER}",
            rf"append without events_type_stream_idx +{NUMBER}",
            rf"append without every secondary index +{NUMBER}",
            rf"append without the hash chain +{NUMBER}",
            rf"append without the uniqueness check \(0026\) +{NUMBER}",
            rf"EXPLAIN \(ANALYZE, BUFFERS, WAL\) of one 7-row append: {NUMBER} ms; WAL {NUMBER} bytes",
        ],
    ),
    "eventstore.py": (
        # 1,000 events: every batch size (1, 100, 1000, and the 10,000 case as one batch) and every case runs.
        ["--events", "1000", "--singles", "3", "--replay-events", "500", "--rounds", "1"],
        [
            rf"\| append-1 +\| +{NUMBER} \| copy-10000",
            rf"\| append-1000 +\| +{NUMBER} \| copy-10000",
            rf"\| append_many-1000 +\| +{NUMBER} \| copy-10000",
            rf"\| import-10000 +\| +{NUMBER} \| copy-10000",
            rf"\| append_many-100 +\| +{NUMBER} \| copy-100 ",
            rf"\| append_many-1000 +\| +(?:{NUMBER}|n/a) \| +{NUMBER} \|",  # CPU per event
            rf"\| store\.read_all +\| +{NUMBER} \| cursor\+decode",
            rf"\| cursor\+decode +\| +{NUMBER} \| cursor-nodecode",
        ],
    ),
    "replay.py": (
        ["--events", "300", "--replicas", "3"],
        [
            rf"replay: \d+ events, \d+ workloads in {NUMBER}s: {NUMBER} events/s",
            rf"verify: \d+ events, \d+ rounds, \d+ workloads in {NUMBER}s: {NUMBER} events/s.*divergences: 0",
            rf"audit verify \(hash chain\): \d+ events in {NUMBER}s: {NUMBER} events/s.*findings: 0",
        ],
    ),
    "audit.py": (
        [
            "all",
            "--seconds",
            "0.5",
            "--rounds",
            "1",
            "--every",
            "50",
            "--events",
            "600",
            "--proofs",
            "5",
            "--pods",
            "4",
            "--workloads",
            "1",
        ],
        [
            rf"ratio with/without: {NUMBER}",
            rf"one checkpoint alone over .* {NUMBER}% of append time",
            rf"tree over 600 leaves: {NUMBER} s",
            rf"audit prove at 600 events \(10 hashes per proof\): median {NUMBER} ms",
            rf"receipt of a 4-pod rollout: 20 events of a 28-event log, .* verify offline {NUMBER} s",
            rf"audit redact of {NUMBER} events \(1 workloads, {NUMBER} rewritten\): {NUMBER} s = audit first",
        ],
    ),
    "audit_views.py": (
        ["--workloads", "2", "--pods", "3", "--rollouts", "2"],
        [
            rf"{NUMBER} ms +pods updated in place in one rollout, with durations \(3 rows\)",
            rf"{NUMBER} ms +check: actions without exactly one terminal event \(whole log\) \(count 0\)",
            rf"{NUMBER} ms +check: maxUnavailable exceeded \(whole log\) \(count 0\)",
        ],
    ),
    "auditor.py": (
        ["--events", "50", "--trickle", "20"],
        [
            rf"live +50 events in {NUMBER} s: auditor {NUMBER} ms/event, postgres {NUMBER} ms/event",
            rf"backlog +50 events in {NUMBER} s: auditor {NUMBER} ms/event, postgres {NUMBER} ms/event",
            rf"trickle +20 events in {NUMBER} s: .* store->audit {NUMBER} ms mean, {NUMBER} ms p95",
        ],
    ),
    "bus_throughput.py": (
        ["20"],
        [rf"publish_many +20 events +{NUMBER} events/s", rf"consume \(ack\) +20 events +{NUMBER} events/s"],
    ),
    "call_path.py": (
        ["--size", "5"],
        [r"read once: \d+ files, \d+ returns to a file already left", r"as run: +\d+ files, \d+ returns"],
    ),
    "planner.py": (
        ["--sizes", "50", "--repeat", "1"],
        [rf"50 ReCreate +{NUMBER} +{NUMBER}", rf"50 InPlaceIfPossible +{NUMBER} +{NUMBER}"],
    ),
    "shadow.py": (
        ["--pods", "3", "--repeat", "1"],
        [rf" +3 +\d+ +\d+ +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}"],
    ),
    "sidecarset_round.py": (
        ["10"],
        [rf"10 matched pods: plan_sidecarset p50 +{NUMBER} ms +p99 +{NUMBER} ms"],
    ),
    "simcluster.py": (
        ["--pods", "20", "--watchers", "2", "--concurrency", "4"],
        [
            rf"create +20 pods \(4 concurrent\): {NUMBER} s",
            r"watch +2 watchers each saw all 20 ADDED",
            rf"list +20 pods .*median of \d+: response read {NUMBER} ms",
        ],
    ),
    "webhook_admission.py": (
        ["--requests", "20", "--concurrency", "2", "--sidecarsets", "3"],
        [
            rf"HTTPS selected pod \(injected\) n= +20 +p50= +{NUMBER} ms",
            rf"HTTPS unselected pod \(no patch\) n= +20 +p50= +{NUMBER} ms",
            r"SidecarInjected events recorded: 20",
        ],
    ),
    "postgres_statements.py": (
        # bench/scale.py at 6 pods against a Postgres of its own with pg_stat_statements; ~60 s.
        ["--replicas", "6", "--max-unavailable", "2"],
        [
            rf"postgres over the in-place rollout of 6 pods: server CPU {NUMBER} ms/pod",
            r"function events_chain: ",
            r"WITH current AS \(SELECT coalesce\(\(SELECT h\.stream_version",  # the append, ranked
        ],
    ),
    "scale.py": (
        # 6 pods, 2 CloneSets of 2 with 1 and 2 planners: every phase; ~50 s (simcluster, nats-server and
        # four services start as processes).
        [
            "--replicas",
            "6",
            "--max-unavailable",
            "2",
            "--writers",
            "2",
            "--nodes",
            "2",
            "--small-clonesets",
            "2",
            "--small-replicas",
            "2",
            "--planners",
            "1,2",
        ],
        [
            rf"creates {NUMBER}/s, patches {NUMBER}/s, deletes {NUMBER}/s; load",
            rf"scale 0->6: +{NUMBER} pods/s = +{NUMBER}% of raw creates",
            rf"in-place rollout: +{NUMBER} pods/s = +{NUMBER}% of raw patches",
            rf"ReCreate rollout: +{NUMBER} pods/s = +{NUMBER}% of raw delete\+create",
            rf"planner peak memory: {NUMBER} MiB",
            rf"1 planner\(s\): +{NUMBER} pods/s",
            rf"2 planner\(s\): +{NUMBER} pods/s",
        ],
    ),
    "watcher_appends.py": (
        ["--events", "200", "--clonesets", "5"],
        [
            rf"one at a time +{NUMBER} events/s, +{NUMBER} us CPU per event; +200 appends, +1\.0 events per"
            " append",
            rf"batched +{NUMBER} events/s, +{NUMBER} us CPU per event; +\d+ appends, +{NUMBER} events per"
            " append",
            rf"batched / one at a time: {NUMBER}x",
        ],
    ),
    "redaction.py": (
        ["--objects", "20", "--repeat", "1"],
        [
            rf"Pod +{NUMBER} bytes +redaction +{NUMBER} us +decode \(ceiling\) +{NUMBER} us",
            rf"CloneSet +{NUMBER} bytes +redaction +{NUMBER} us +decode \(ceiling\) +{NUMBER} us",
        ],
    ),
    "cli_startup.py": (
        ["--repeat", "1"],
        [
            rf"python -c pass \(ceiling\) +{NUMBER} +{NUMBER} +1\.0 +{NUMBER}",
            rf"--help +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}  none",
            rf"plan -f state\.json +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}  none",
            rf"inject -f pod\.yaml +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}  none",
        ],
    ),
    "idle.py": (
        # 4 pods, one flap (two ready changes) in a 6-second window; four service processes start first.
        [
            *("--replicas", "4", "--flap-share", "0.5", "--minutes", "0.1", "--down", "1", "--quiet", "2"),
            *("--idle-seconds", "2"),
        ],
        [
            rf"idle CPU over 2 s, ms a second: {NUMBER} \(.*planner {NUMBER}.*\)",
            r"real changes of a pod's ready state \(pod watch\): 2 on 1 pods",
            rf"rows appended: \d+, {NUMBER} KiB",
            rf"rows per real change: {NUMBER}  goal <= 1",
            rf"rows per hour at this rate: {NUMBER}; bytes per hour: {NUMBER} KiB",
            r"rows a pod's ready change explains: 2",
        ],
    ),
    "resize.py": (
        # 4 replicas: both changes, in place then recreated, on Timing.realistic (about 30-60 s).
        ["--replicas", "4", "--max-unavailable", "2"],
        [
            rf"scale 0->4: +{NUMBER} s",
            rf"resize in place \(NotRequired\) +{NUMBER} s +{NUMBER} pods/s  container restarts 0"
            rf"  pods recreated 0  unready per pod +{NUMBER} s",
            rf"recreate \(ReCreate\) +{NUMBER} s +{NUMBER} pods/s  container restarts \d+  pods recreated 4",
            rf"recreate / resize time: {NUMBER}x",
        ],
    ),
    "trail.py": (
        # 5,000 events (every template simulated, one wave), every read, one incremental checkpoint, a full
        # verify; 30-90 s (the 200-pod template alone is simulated in ~10 s).
        ["--events", "5000", "--samples", "2", "--checkpoints", "1"],
        [
            rf"seeded 5,000 events \(\d+ signed checkpoints\) in {NUMBER} s: {NUMBER} events/s;"
            rf" .* ratio {NUMBER}",
            rf"\| history NS/NAME \| 2 \| {NUMBER} \| {NUMBER} \| (met|MISSED) \|",
            rf"\| view max_unavailable_exceeded \| 2 \| {NUMBER} \| {NUMBER} \| (met|MISSED) \|",
            rf"\| what-if ROLLOUT --set maxUnavailable=2 \| 2 \| {NUMBER} \| {NUMBER} \| (met|MISSED) \|",
            r"what-if started at the round's stored input for 2 of 2 samples",
            rf"\| UI GET /api/rollout\?id=ROLLOUT \| 2 \| {NUMBER} \| {NUMBER} \| (met|MISSED) \|",
            rf"\| audit checkpoint \(new events since the last\) \| 1 \| {NUMBER} \| {NUMBER} \|",
            rf"full audit verify \(one process\): [\d,]+ events at {NUMBER} events/s .* ratio {NUMBER}",
            rf"full audit verify \(2 processes, 1 range\(s\)\): [\d,]+ events at {NUMBER} events/s"
            rf" .* ratio {NUMBER}",
        ],
    ),
    "services_rollout.py": (
        # 2 replicas, maxUnavailable 1: both phases, two rollout steps; 7-10 s (four service processes start).
        ["--replicas", "2", "--max-unavailable", "1", "--executors", "1"],
        [
            rf"scale 0->2: +{NUMBER} s",
            rf"in-place rollout: +{NUMBER} s",
            r"events stored: +\d+ .*PodActionSucceeded",
            rf"planning calls: +\d+ +mean {NUMBER} ms",
        ],
    ),
}

SKIPPED: dict[str, str] = {
    # It starts its own Postgres and 3-node NATS cluster and runs one rollout per fault (minutes);
    # tests/reliability/test_chaos_slice.py runs a slice of it and checks every row.
    "chaos.py": "tests/reliability/test_chaos_slice.py runs a slice of the fault matrix",
    # One run is a whole `rollbook demo` (~30 s on the 2-core machine, 60 s goal): too long for a smoke run,
    # and the demo command itself is tested by tests/cli/test_demo.py. Its --help is still checked below.
    "demo.py": "one run is a whole `rollbook demo` (about 30 s); tests/cli/test_demo.py tests the demo",
}

# Generous: only against a hang on a loaded machine. These runs take 0.2-10 s each; no speed is asserted.
HANG_TIMEOUT = 180.0
# Scripts that start a whole stack of processes (simcluster, nats-server, five services): ~50 s alone,
# several minutes on a loaded 2-core machine, where each process start alone takes 10-30 s.
# bench/trail.py simulates its workload templates first (~10 s alone, minutes on a loaded machine).
SLOW_START_TIMEOUTS = {"scale.py": 600.0, "postgres_statements.py": 600.0, "trail.py": 600.0}


def bench_scripts() -> list[str]:
    # A module whose name starts with "_" is a part the scripts share, not a script.
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


async def run_script(script: str, args: list[str], server_urls: ServerUrls | None) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS="200")
    if server_urls is not None:
        env.update(ROLLBOOK_DATABASE_URL=server_urls.database_url, ROLLBOOK_NATS_URL=server_urls.nats_url)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(BENCH / script), *args,
        cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        output, _ = await asyncio.wait_for(
            process.communicate(), SLOW_START_TIMEOUTS.get(script, HANG_TIMEOUT)
        )
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return process.returncode or 0, output.decode(errors="replace")


def test_every_bench_script_is_covered() -> None:
    scripts = bench_scripts()
    assert scripts, "no bench scripts found"
    uncovered = [s for s in scripts if s not in RUNS and s not in SKIPPED]
    assert not uncovered, f"add these bench scripts to RUNS (or SKIPPED, with the reason): {uncovered}"
    assert not (set(RUNS) | set(SKIPPED)) - set(scripts), "RUNS/SKIPPED name scripts that no longer exist"


@pytest.mark.parametrize("script", bench_scripts())
async def test_bench_help(script: str) -> None:
    code, output = await run_script(script, ["--help"], None)
    assert code == 0, output
    assert "usage:" in output, output


@pytest.mark.parametrize("script", bench_scripts())
async def test_bench_runs_and_prints_figures(script: str, server_urls: ServerUrls) -> None:
    if script in SKIPPED:
        pytest.skip(SKIPPED[script])
    assert script in RUNS, f"bench/{script} has no smoke run: add it to RUNS (or SKIPPED, with the reason)"
    args, patterns = RUNS[script]
    orphans_before = await orphan_roles(server_urls.database_url)
    code, output = await run_script(script, args, server_urls)
    assert code == 0, f"bench/{script} {' '.join(args)} exited {code}:\n{output}"
    missing = [p for p in patterns if not re.search(p, output)]
    assert not missing, f"bench/{script} did not print {missing}:\n{output}"
    # Its scratch database's roles (migration 0016 makes four per database) go with it: left behind on
    # the user's server, they pile up run after run. Another test's database may be between its drop and
    # its roles' at this moment: that lasts milliseconds, so a few looks tell it from a leak.
    for _ in range(20):
        left = await orphan_roles(server_urls.database_url) - orphans_before
        if not left:
            break
        await asyncio.sleep(0.25)
    assert not left, f"bench/{script} left roles without their database: {sorted(left)}"


async def orphan_roles(database_url: str) -> set[str]:
    """rollbook's duty roles (``<database>_<duty>``) on the server whose database is gone."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        roles = [r[0] for r in await connection.fetch("SELECT rolname FROM pg_roles")]
        databases = {r[0][:PREFIX_LENGTH] for r in await connection.fetch("SELECT datname FROM pg_database")}
    finally:
        await connection.close()
    return {
        role
        for role in roles
        for duty in DUTIES
        if role.startswith("rollbook")
        and role.endswith(f"_{duty}")
        and role[: -len(duty) - 1] not in databases
    }
