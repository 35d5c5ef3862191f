"""Checks of the audit trail, in SQL over the events table (what an operator can run against Postgres)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from services.infra.bus import MSG_ID, Bus
from services.infra.database import asyncpg_url

# Per workload: after each observation of one of its pods, how many of its pods were available (Ready
# and not terminating), folding every pod's latest observation up to that moment.
AVAILABILITY_SQL = """
WITH obs AS (
    SELECT global_position AS pos,
           payload->>'name' AS pod,
           (payload->>'change' <> 'DELETED'
            AND payload->'object'->'metadata'->>'deletionTimestamp' IS NULL
            AND EXISTS (SELECT 1
                        FROM jsonb_array_elements(coalesce(payload->'object'->'status'->'conditions', '[]'))
                             AS c
                        WHERE c->>'type' = 'Ready' AND c->>'status' = 'True')) AS available
    FROM events
    WHERE stream = $1 AND type = 'ObjectObserved' AND payload->>'kind' = 'Pod'
),
latest AS (
    SELECT m.pos, o.pod, o.available,
           row_number() OVER (PARTITION BY m.pos, o.pod ORDER BY o.pos DESC) AS rn
    FROM (SELECT DISTINCT pos FROM obs) AS m
    JOIN obs AS o ON o.pos <= m.pos
)
SELECT pos, count(*) FILTER (WHERE available) AS available
FROM latest
WHERE rn = 1
GROUP BY pos
ORDER BY pos
"""

# Every requested action and how many terminal outcomes it has (must be exactly one each).
TERMINALS_SQL = """
SELECT r.payload->>'action_id' AS action_id, r.payload->>'action' AS action, count(t.event_id) AS terminals,
       count(t.event_id) FILTER (WHERE t.type = 'PodActionSucceeded'
                                 AND NOT coalesce((t.payload->>'already_applied')::boolean, false)) AS applied
FROM events AS r
LEFT JOIN events AS t
       ON t.type IN ('PodActionSucceeded', 'PodActionFailed')
      AND t.payload->>'action_id' = r.payload->>'action_id'
WHERE r.type = 'PodActionRequested'
GROUP BY 1, 2
"""

# Pods created under one action id: more than one uid would mean the create was applied twice.
CREATED_UIDS_SQL = """
SELECT payload->'object'->'metadata'->'annotations'->>'rollbook.io/action-id' AS action_id,
       count(DISTINCT payload->>'uid') AS uids
FROM events
WHERE type = 'ObjectObserved' AND payload->>'kind' = 'Pod' AND payload->>'change' = 'ADDED'
  AND payload->'object'->'metadata'->'annotations' ? 'rollbook.io/action-id'
GROUP BY 1
"""

ROLLOUT_WINDOW_SQL = """
SELECT min(global_position) FILTER (WHERE type = 'RolloutStarted' AND payload->>'to_revision' = $2),
       max(global_position) FILTER (WHERE type = 'RolloutCompleted' AND payload->>'revision' = $2)
FROM events WHERE stream = $1
"""


async def fetch(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def min_available_during_rollout(database_url: str, namespace: str, name: str, revision: str) -> int:
    window = (await fetch(database_url, ROLLOUT_WINDOW_SQL, f"CloneSet/{namespace}/{name}", revision))[0]
    start, end = window[0], window[1]
    assert start is not None and end is not None, f"rollout to {revision} not both started and completed"
    rows = await fetch(database_url, AVAILABILITY_SQL, f"CloneSet/{namespace}/{name}/observed")
    during = [r["available"] for r in rows if start <= r["pos"] <= end]
    assert during, "no pod observation during the rollout"
    return min(during)


async def available_at_completion(database_url: str, namespace: str, name: str, revision: str) -> int:
    """How many pods were available (as observed) when the rollout to ``revision`` was recorded complete."""
    window = (await fetch(database_url, ROLLOUT_WINDOW_SQL, f"CloneSet/{namespace}/{name}", revision))[0]
    end = window[1]
    assert end is not None, f"rollout to {revision} not completed"
    rows = await fetch(database_url, AVAILABILITY_SQL, f"CloneSet/{namespace}/{name}/observed")
    before = [r["available"] for r in rows if r["pos"] <= end]
    assert before, "no pod observation before the completion"
    return int(before[-1])


async def action_terminals(database_url: str) -> list[asyncpg.Record]:
    return await fetch(database_url, TERMINALS_SQL)


async def created_uids(database_url: str) -> list[asyncpg.Record]:
    return await fetch(database_url, CREATED_UIDS_SQL)


async def stored_event_ids(database_url: str) -> list[str]:
    return [str(r[0]) for r in await fetch(database_url, "SELECT event_id FROM events")]


async def published_event_ids(bus: Bus) -> list[str]:
    """The event id of every event message in the stream (one entry per stored message): its Nats-Msg-Id,
    less the ``@<position>`` the relay adds to an event published again after a database failover."""
    sub = await bus.js.pull_subscribe(
        f"{bus.prefix}.ev.>",
        stream=bus.stream,
        config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0
        ),
    )
    ids: list[str] = []
    # Right after a stream leader's node is killed, JetStream answers 503 until the new leader serves the
    # consumer (the services retry the same way); nothing was delivered, so the read goes on where it was.
    unavailable_until = asyncio.get_running_loop().time() + 30.0
    try:
        while True:
            try:
                msgs = await sub.fetch(500, timeout=1.0)
            except (TimeoutError, nats.errors.TimeoutError):  # nats-py raises either
                break
            except nats.js.errors.ServiceUnavailableError:
                if asyncio.get_running_loop().time() > unavailable_until:
                    raise
                await asyncio.sleep(0.5)
                continue
            ids += [(m.headers or {}).get(MSG_ID, "").split("@", 1)[0] for m in msgs]
    finally:
        await sub.unsubscribe()
    return ids
