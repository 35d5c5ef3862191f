"""Costs of the signed Merkle log (docs/audit.md, "Costs"). Prints figures; not a test.

    .venv/bin/python bench/audit.py append [--seconds 6] [--rounds 3] [--every 10000] [--interval 60]
    .venv/bin/python bench/audit.py prove [--events 1000000] [--proofs 300]
    .venv/bin/python bench/audit.py receipt [--pods 1000]
    .venv/bin/python bench/audit.py redact [--workloads 20]
    .venv/bin/python bench/audit.py all [any of the options above]

append   Append throughput (append_many of 20 events, one stream each, as the planner's rounds do) with
         and without the auditor's checkpoint loop running beside it in the same process (the default
         settings: a signed checkpoint every 10,000 events or 60 s), alternating runs; prints both
         rates, their ratio, and the loop's own time per event against the append time per event
         (steadier than the ratio on a shared machine).
prove    A log of --events events loaded with COPY-speed SQL (the hash-chain and append-only triggers
         off: the rows carry synthetic stream hashes, which is all the tree reads), the tree built over it
         by the auditor's code (MerkleLog.extend, timed), one signed checkpoint, then `audit prove` of
         --proofs random positions (the same function the command runs): median, p99 and max.
receipt  A rollout of --pods pods (5 events per pod: requested, started, succeeded, and two
         observations) among other workloads' events, its receipt exported, then verified offline
         (services.model.receipt and docs/verify_receipt.py): times and size.
redact   --workloads simulated CloneSets rolled in place with a secret in their env and last-applied
         annotation (services/replay/simulation.py), stored and signed; then `rollbook audit redact`'s
         steps timed: the audit of the trail as it is, the rewrite (plan, verify, re-chain), and the
         re-signing (tree rebuilt, checkpoint signed); and one `audit verify` of the result beside them.

Each mode creates its own database (random name) on the server of --database-url / ROLLBOOK_DATABASE_URL
(default postgresql://root@127.0.0.1:5432/test), migrates it, and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.transparency import (
    MerkleLog,
    checkpoint_loop,
    checkpointer_for,
    export_receipt,
    prove,
    trusted_verifiers,
)
from services.model.events import PodActionSucceeded, new_event
from services.model.receipt import canonical_json, verify_receipt
from tests.plugins.database import drop_database_and_roles

T0 = datetime(2026, 12, 6, tzinfo=UTC)
SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "verify_receipt.py"


async def fresh(server: str) -> str:
    name = f"rollbook_bench_audit_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(asyncpg_url(server))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = server.rsplit("/", 1)[0] + "/" + name
    await upgrade_async(url)
    return url


async def drop(server: str, url: str) -> None:
    await drop_database_and_roles(server, url.rsplit("/", 1)[1])


def settings_for(url: str, data_dir: str, **changes: object) -> Settings:
    return Settings(database_url=url, data_dir=data_dir, audit_key_name="bench.rollbook/log", **changes)  # type: ignore[arg-type]


async def bench_append(server: str, seconds: float, rounds: int, every: int, interval: float) -> None:
    url = await fresh(server)
    store = await EventStore.connect(url)
    versions: dict[str, int] = {}

    async def append_for(duration: float) -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < duration:
            stream = f"CloneSet/bench/w{done % 500}/actions"
            version = versions.get(stream, 0)
            batch = [
                new_event(PodActionSucceeded(action_id=f"{stream}-{version + i + 1}"), stream=stream,
                          stream_version=version + i + 1, occurred_at=T0)
                for i in range(20)
            ]  # fmt: skip
            await store.append(batch, expected_version=version)
            versions[stream] = version + 20
            done += 20
        return done / (time.perf_counter() - start)

    try:
        with tempfile.TemporaryDirectory() as data_dir:
            settings = settings_for(
                url, data_dir, checkpoint_interval=interval, checkpoint_every_events=every
            )
            without, with_ = [], []

            alone: list[tuple[int, float, float]] = []  # (events, wall s, process CPU s) of one checkpoint
            for _ in range(rounds):
                without.append(await append_for(seconds))
                # The same work with nothing beside it: one checkpoint over the events just appended.
                isolated = checkpointer_for(store, settings, None)
                await isolated.tree.load()
                before = (await store.query("SELECT coalesce(max(tree_size), 0) FROM signed_checkpoints"))[0][
                    0
                ]
                wall, cpu = time.perf_counter(), time.process_time()
                taken = await isolated.checkpoint()
                assert taken is not None
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                alone.append((taken.body.tree_size - before, wall, cpu))
                checkpointer = checkpointer_for(store, settings, None)
                stopping = asyncio.Event()
                loop = asyncio.create_task(checkpoint_loop(checkpointer, settings, stopping))
                with_.append(await append_for(seconds))
                stopping.set()
                await loop
            head = (await store.query("SELECT count(*) FROM signed_checkpoints"))[0][0]
        a, b = statistics.median(without), statistics.median(with_)
        print(f"append_many(20): without checkpoints {[round(x) for x in without]} events/s, median {a:.0f}")
        print(
            f"append_many(20): with the checkpoint loop (every {every} events or {interval:g} s)"
            f" {[round(x) for x in with_]},"
            f" median {b:.0f} ({head} checkpoints signed)"
        )
        print(f"ratio with/without: {b / a:.3f} (cost {100 * (1 - b / a):.1f}%)")
        events = sum(n for n, _, _ in alone)
        wall = sum(w for _, w, _ in alone) / events * 1e6
        cpu = sum(c for _, _, c in alone) / events * 1e6
        print(
            f"one checkpoint alone over the events of each run before it ({events:,} events): {wall:.1f} us"
            f" wall, {cpu:.1f} us of this process's CPU per event, against {1e6 / a:.0f} us per appended"
            f" event: {100 * wall * a / 1e6:.1f}% of append time"
        )
    finally:
        await store.close()
        await drop(server, url)


async def synthetic_log(url: str, events: int) -> None:
    """``events`` rows, 10,000 streams, synthetic hashes, loaded by the server in 1M-row statements."""
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        await conn.execute("SET session_replication_role = replica")  # no trigger: rows as stored
        for start in range(1, events + 1, 1_000_000):
            end = min(events, start + 999_999)
            await conn.execute(
                "INSERT INTO events (global_position, event_id, stream, stream_version, type, schema_version,"
                " occurred_at, recorded_at, correlation_id, payload, stream_hash, chain_hash)"
                " OVERRIDING SYSTEM VALUE"
                " SELECT g, gen_random_uuid(), 'CloneSet/bench/w' || (g % 10000) || '/actions',"
                " g / 10000 + 1,"
                " 'PodActionSucceeded', 1, $3, $3, 'bench/w' || (g % 10000) || '@rev', '{}'::jsonb,"
                " sha256(int8send(g)), sha256(int8send(-g)) FROM generate_series($1::bigint, $2::bigint) g",
                start,
                end,
                T0,
            )
        await conn.execute(f"SELECT setval(pg_get_serial_sequence('events', 'global_position'), {events})")
        await conn.execute("ANALYZE events")
    finally:
        await conn.close()


async def bench_prove(server: str, events: int, proofs: int) -> None:
    url = await fresh(server)
    store = await EventStore.connect(url)
    try:
        started = time.perf_counter()
        await synthetic_log(url, events)
        print(f"load {events:,} events: {time.perf_counter() - started:.1f} s")
        with tempfile.TemporaryDirectory() as data_dir:
            settings = settings_for(url, data_dir)
            started = time.perf_counter()
            head = await MerkleLog(store).extend()
            built = time.perf_counter() - started
            nodes = (await store.query("SELECT count(*) FROM merkle_nodes"))[0][0]
            print(
                f"tree over {head.size:,} leaves: {built:.1f} s ({head.size / built:,.0f} leaves/s),"
                f" {nodes:,} rows"
            )
            checkpointer = checkpointer_for(store, settings, None)
            assert await checkpointer.checkpoint() is not None
            trusted = trusted_verifiers(settings)
            timings = []
            rng = random.Random(7)
            await prove(store, trusted, position=1)  # connection warm
            for _ in range(proofs):
                position = rng.randint(1, events)
                start = time.perf_counter()
                proof = await prove(store, trusted, position=position)
                timings.append((time.perf_counter() - start) * 1000)
                assert proof.leaf_index == position - 1
            timings.sort()
            print(
                f"audit prove at {events:,} events ({len(proof.proof)} hashes per proof): median"
                f" {statistics.median(timings):.2f} ms, p99 {timings[int(len(timings) * 0.99) - 1]:.2f} ms,"
                f" max {timings[-1]:.2f} ms over {proofs} random positions"
            )
    finally:
        await store.close()
        await drop(server, url)


async def bench_receipt(server: str, pods: int) -> None:
    url = await fresh(server)
    store = await EventStore.connect(url)
    try:
        rollout = "prod/big@rev"
        versions: dict[str, int] = {}
        for pod in range(pods):
            batch = []
            for stream in (
                "CloneSet/prod/big/actions",
                "CloneSet/prod/big/observed",
                f"CloneSet/prod/other{pod % 50}/actions",
            ):
                count = 3 if stream.endswith("big/actions") else 2
                for _ in range(count):
                    versions[stream] = versions.get(stream, 0) + 1
                    action = PodActionSucceeded(action_id=f"{stream}-{versions[stream]}-pod-{pod}")
                    correlation = rollout if "big" in stream else "prod/other@rev"
                    batch.append(
                        new_event(action, stream=stream, stream_version=versions[stream], occurred_at=T0,
                                  correlation_id=correlation)
                    )  # fmt: skip
            await store.append_many(batch)
        with tempfile.TemporaryDirectory() as data_dir:
            settings = settings_for(url, data_dir)
            checkpointer = checkpointer_for(store, settings, None)
            assert await checkpointer.checkpoint() is not None
            trusted = trusted_verifiers(settings)
            start = time.perf_counter()
            receipt = await export_receipt(store, trusted, rollout)
            exported = time.perf_counter() - start
            data = canonical_json(receipt)
            start = time.perf_counter()
            result = verify_receipt(data, trusted)
            checked = time.perf_counter() - start
            spec = importlib.util.spec_from_file_location("verify_receipt", SCRIPT)
            assert spec is not None and spec.loader is not None
            script = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(script)
            start = time.perf_counter()
            script.verify(data, trusted[0].text())
            scripted = time.perf_counter() - start
        print(
            f"receipt of a {pods}-pod rollout: {result.events:,} events of a {result.tree_size:,}-event log,"
            f" {len(data) / 1e6:.1f} MB; export {exported:.2f} s; verify offline {checked:.3f} s"
            f" (rollbook), {scripted:.3f} s (docs/verify_receipt.py)"
        )
    finally:
        await store.close()
        await drop(server, url)


async def bench_redact(server: str, workloads: int) -> None:
    from services.cli.replay import verify_trail
    from services.model.redaction import LAST_APPLIED_ANNOTATION, RedactionPolicy
    from services.replay import simulation
    from services.replay.redact import redact_trail

    plain = simulation.base_cloneset

    def with_secret(*args: object, **kwargs: object) -> dict[str, object]:
        cloneset = plain(*args, **kwargs)  # type: ignore[arg-type]
        cloneset["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "API_TOKEN", "value": "s3cr3t"}
        ]
        cloneset["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: '{"token":"s3cr3t"}'}
        return cloneset

    simulation.base_cloneset = with_secret  # type: ignore[assignment]
    url = await fresh(server)
    store = await EventStore.connect(url)
    try:
        for w in range(workloads):
            for envelope in simulation.WorkloadSimulation(f"team-{w}", "web", replicas=4, start=T0).run():
                await store.append([envelope], expected_version=envelope.stream_version - 1)
        with tempfile.TemporaryDirectory() as data_dir:
            settings = settings_for(url, data_dir, audit_checkpoint_dir=str(Path(data_dir) / "checkpoints"))
            checkpointer = checkpointer_for(store, settings, None)
            assert await checkpointer.checkpoint() is not None
            trusted = trusted_verifiers(settings)
            spent: dict[str, float] = {"audit": 0.0, "tree": 0.0, "sign": 0.0}

            async def audit() -> object:
                start = time.perf_counter()
                report = await verify_trail(store, settings, trusted, max_age=float("inf"), bus=False)
                spent["audit"] += time.perf_counter() - start
                return report

            async def tree_head() -> tuple[int, bytes]:
                start = time.perf_counter()
                head = await MerkleLog(store).extend()
                spent["tree"] += time.perf_counter() - start
                return head.size, head.root

            async def sign() -> object:
                start = time.perf_counter()
                checkpointer.tree = MerkleLog(store)
                checkpointer.last = None
                signed = await checkpointer.checkpoint(force=True)
                spent["sign"] += time.perf_counter() - start
                return signed

            start = time.perf_counter()
            result = await redact_trail(
                store, url, RedactionPolicy(b"bench-redaction-key" * 2),
                audit=audit, tree_head=tree_head, sign=sign,  # type: ignore[arg-type]
            )  # fmt: skip
            total = time.perf_counter() - start
            start = time.perf_counter()
            after = await verify_trail(store, settings, trusted, bus=False)
            verified = time.perf_counter() - start
        assert result.record is not None and after.clean, [f.describe() for f in after.findings]
        rewrite = total - sum(spent.values())
        signing = spent["tree"] + spent["sign"]
        rewritten = len(result.record.positions)
        print(
            f"audit redact of {result.plan.events:,} events ({workloads} workloads, {rewritten:,} rewritten):"
            f" {total:.2f} s = audit first {spent['audit']:.2f} s + rewrite {rewrite:.2f} s"
            f" + tree head before and re-signing {signing:.2f} s ({100 * signing / total:.1f}% of it);"
            f" one audit verify of the result {verified:.2f} s (redact / verify: {total / verified:.1f})"
        )
    finally:
        simulation.base_cloneset = plain  # type: ignore[assignment]
        await store.close()
        await drop(server, url)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["append", "prove", "receipt", "redact", "all"])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLBOOK_DATABASE_URL") or "postgresql://root@127.0.0.1:5432/test",
    )
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every", type=int, default=Settings().checkpoint_every_events)
    parser.add_argument("--interval", type=float, default=Settings().checkpoint_interval)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--proofs", type=int, default=300)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=20)
    args = parser.parse_args()
    if args.mode in ("append", "all"):
        asyncio.run(bench_append(args.database_url, args.seconds, args.rounds, args.every, args.interval))
    if args.mode in ("prove", "all"):
        asyncio.run(bench_prove(args.database_url, args.events, args.proofs))
    if args.mode in ("receipt", "all"):
        asyncio.run(bench_receipt(args.database_url, args.pods))
    if args.mode in ("redact", "all"):
        asyncio.run(bench_redact(args.database_url, args.workloads))


if __name__ == "__main__":
    main()
