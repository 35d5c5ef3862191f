"""How fast the audit views answer on a long log (docs/sql.md).

    ROLLBOOK_DATABASE_URL=postgresql://... .venv/bin/python bench/audit_views.py [--workloads N]
        [--pods N] [--rollouts N]

Builds, in a scratch database (dropped afterwards), the trail the services would write for N workloads
of P pods going through R in-place rollouts each: per pod and rollout a markNotReady / updateInPlace /
markReady request with its outcome and four pod observations (not ready, restarting, ready), one partition
step and the rollout start/completion. Then times the operator's queries: the issue's "pods updated in
place in rollout X and how long each took", one workload's history, and the two whole-log checks.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import asyncpg  # noqa: E402

from services.infra.database import asyncpg_url, upgrade_async  # noqa: E402
from services.infra.settings import Settings  # noqa: E402
from tests.plugins.database import drop_database_and_roles  # noqa: E402

# One statement per event kind, set-based (generate_series), so building a million rows takes seconds.
# w = workload, r = rollout, p = pod; every workload's events are in its own streams. Rollout ids are
# as the planner records them since migration 0018: <ns>/<name>@<revision>#<sequence in the stream>.
FILL = """
WITH ids AS (
    SELECT w, r, p,
           'ns' || w AS ns, 'CloneSet/ns' || w || '/web' AS stream,
           'ns' || w || '/web@web-' || r || '#' || r AS rollout,
           timestamptz '2026-01-01' + make_interval(secs => w * 100000 + r * 1000 + p * 5) AS t0
    FROM generate_series(1, $1::int) AS w, generate_series(1, $3::int) AS r, generate_series(1, $2::int) AS p
),
rows AS (
    SELECT stream, t0, rollout, 'PodActionRequested' AS type, 0 AS k,
           jsonb_build_object('type', 'PodActionRequested', 'action_id', rollout || '/' || p || '/mark',
                              'action', 'markNotReady', 'namespace', ns, 'pod', 'web-' || p,
                              'rollout_id', rollout) AS payload
    FROM ids
    UNION ALL
    SELECT stream || '/actions', t0 + interval '0.1 s', rollout, 'PodActionSucceeded', 1,
           jsonb_build_object('type', 'PodActionSucceeded', 'action_id', rollout || '/' || p || '/mark')
    FROM ids
    UNION ALL
    SELECT stream || '/observed', t0 + interval '0.2 s', NULL, 'ObjectObserved', 2,
           jsonb_build_object('type', 'ObjectObserved', 'kind', 'Pod', 'namespace', ns, 'name', 'web-' || p,
                              'uid', 'u' || p, 'resource_version', '1', 'change', 'MODIFIED',
                              'object', jsonb_build_object('status', jsonb_build_object('conditions',
                                  jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', 'False')))))
    FROM ids
    UNION ALL
    SELECT stream, t0 + interval '2 s', rollout, 'PodActionRequested', 3,
           jsonb_build_object('type', 'PodActionRequested', 'action_id', rollout || '/' || p || '/update',
                              'action', 'updateInPlace', 'namespace', ns, 'pod', 'web-' || p,
                              'rollout_id', rollout)
    FROM ids
    UNION ALL
    SELECT stream || '/actions', t0 + interval '2.1 s', rollout, 'PodActionSucceeded', 4,
           jsonb_build_object('type', 'PodActionSucceeded', 'action_id', rollout || '/' || p || '/update')
    FROM ids
    UNION ALL
    SELECT stream, t0 + interval '3 s', rollout, 'PodActionRequested', 5,
           jsonb_build_object('type', 'PodActionRequested', 'action_id', rollout || '/' || p || '/ready',
                              'action', 'markReady', 'namespace', ns, 'pod', 'web-' || p,
                              'rollout_id', rollout)
    FROM ids
    UNION ALL
    SELECT stream || '/actions', t0 + interval '3.1 s', rollout, 'PodActionSucceeded', 6,
           jsonb_build_object('type', 'PodActionSucceeded', 'action_id', rollout || '/' || p || '/ready')
    FROM ids
    UNION ALL
    SELECT stream || '/observed', t0 + interval '3.2 s', NULL, 'ObjectObserved', 7,
           jsonb_build_object('type', 'ObjectObserved', 'kind', 'Pod', 'namespace', ns, 'name', 'web-' || p,
                              'uid', 'u' || p, 'resource_version', '2', 'change', 'MODIFIED',
                              'object', jsonb_build_object('status', jsonb_build_object('conditions',
                                  jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', 'True')))))
    FROM ids
)
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, correlation_id,
                    payload)
SELECT gen_random_uuid(), stream, 1000000 + row_number() OVER (PARTITION BY stream ORDER BY t0, k), type, 1,
       t0, rollout, payload
FROM rows
ORDER BY t0, k
"""

ROLLOUT_FRAME = """
WITH ids AS (
    SELECT w, r, 'ns' || w AS ns, 'CloneSet/ns' || w || '/web' AS stream,
           'ns' || w || '/web@web-' || r || '#' || r AS rollout,
           timestamptz '2026-01-01' + make_interval(secs => w * 100000 + r * 1000) AS t0
    FROM generate_series(1, $1::int) AS w, generate_series(1, $3::int) AS r
),
rows AS (
    SELECT stream, t0 - interval '1 s' AS t, rollout, 'RolloutStarted' AS type,
           jsonb_build_object('type', 'RolloutStarted', 'rollout_id', rollout,
                              'from_revision', 'web-' || (r - 1), 'to_revision', 'web-' || r,
                              'replicas', $2::int,
                              'strategy', jsonb_build_object('type', 'InPlaceIfPossible')) AS payload
    FROM ids
    UNION ALL
    SELECT stream, t0 - interval '0.5 s', rollout, 'PartitionStepPlanned',
           jsonb_build_object('type', 'PartitionStepPlanned', 'rollout_id', rollout, 'partition', 0,
                              'replicas', $2::int, 'expected_updated', $2::int, 'max_unavailable', 1,
                              'max_surge', 0)
    FROM ids
    UNION ALL
    SELECT stream, t0 + make_interval(secs => $2::int * 5 + 10), rollout, 'RolloutCompleted',
           jsonb_build_object('type', 'RolloutCompleted', 'rollout_id', rollout, 'revision', 'web-' || r,
                              'outcome', 'succeeded')
    FROM ids
)
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, correlation_id,
                    payload)
SELECT gen_random_uuid(), stream, 2000000 + row_number() OVER (PARTITION BY stream ORDER BY t), type, 1, t,
       rollout, payload
FROM rows
"""

# Before the rollouts: each workload observed with P replicas and its P pods ready. Each statement's
# versions lie above the previous ones' (a stream's versions rise: 0028).
INITIAL = """
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, payload)
SELECT gen_random_uuid(), 'CloneSet/ns' || w || '/web/observed', 1 + p, 'ObjectObserved', 1,
       timestamptz '2026-01-01' + make_interval(secs => w * 100000 - 100 + p),
       CASE WHEN p = 0 THEN
           jsonb_build_object('type', 'ObjectObserved', 'kind', 'CloneSet', 'namespace', 'ns' || w,
                              'name', 'web', 'uid', 'cs', 'resource_version', '1', 'change', 'ADDED',
                              'object', jsonb_build_object('spec', jsonb_build_object('replicas', $2::int)))
       ELSE
           jsonb_build_object('type', 'ObjectObserved', 'kind', 'Pod', 'namespace', 'ns' || w,
                              'name', 'web-' || p, 'uid', 'u' || p, 'resource_version', '0',
                              'change', 'ADDED',
                              'object', jsonb_build_object('status', jsonb_build_object('conditions',
                                  jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', 'True')))))
       END
FROM generate_series(1, $1::int) AS w, generate_series(0, $2::int) AS p
"""

QUERIES = {
    "pods updated in place in one rollout, with durations": (
        # The fill numbers each rollout as the planner records it (rollout_of); the key finds it by index.
        "SELECT pod, duration FROM pod_actions"
        " WHERE rollout_key = 'ns1/web@web-1' AND rollout_id = 'ns1/web@web-1#1' AND in_place",
    ),
    "one workload's rollouts": ("SELECT * FROM rollouts WHERE namespace = 'ns1' AND workload = 'web'",),
    "one workload's pod actions (rollbook history)": (
        "SELECT * FROM pod_actions WHERE namespace = 'ns1' AND workload = 'web'",
    ),
    "check: actions without exactly one terminal event (whole log)": (
        "SELECT count(*) FROM actions_without_one_terminal",
    ),
    "check: maxUnavailable exceeded (whole log)": ("SELECT count(*) FROM max_unavailable_exceeded",),
}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=50)
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--rollouts", type=int, default=5)
    args = parser.parse_args()
    server = Settings.from_env().database_url
    if not server:
        sys.exit("set ROLLBOOK_DATABASE_URL to a Postgres server (a scratch database is created there)")
    name = f"rollbook_bench_views_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(asyncpg_url(server))
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = asyncpg_url(server).rsplit("/", 1)[0] + "/" + name
    try:
        await upgrade_async(url)
        connection = await asyncpg.connect(url)
        try:
            started = time.perf_counter()
            await connection.execute(INITIAL, args.workloads, args.pods)
            await connection.execute(FILL, args.workloads, args.pods, args.rollouts)
            await connection.execute(ROLLOUT_FRAME, args.workloads, args.pods, args.rollouts)
            await connection.execute("ANALYZE events")
            count = await connection.fetchval("SELECT count(*) FROM events")
            print(f"{count} events ({args.workloads} workloads x {args.pods} pods x {args.rollouts} rollouts)"
                  f" written in {time.perf_counter() - started:.1f}s")  # fmt: skip
            for label, (sql,) in QUERIES.items():
                await connection.fetch(sql)  # warm the cache: figures are for a warm server
                runs = []
                for _ in range(3):
                    started = time.perf_counter()
                    rows = await connection.fetch(sql)
                    runs.append(time.perf_counter() - started)
                answer = f"count {rows[0][0]}" if "count(*)" in sql else f"{len(rows)} rows"
                print(f"  {min(runs) * 1000:9.1f} ms  {label} ({answer})")
        finally:
            await connection.close()
    finally:
        await admin.close()
        await drop_database_and_roles(server, name)


if __name__ == "__main__":
    asyncio.run(main())
