"""``unavailability`` counts a pod available as the planner and OpenKruise do (services/model/availability.py)

Revision ID: 0032_openkruise_availability
Revises: 0031_exceeded_steps_once
Create Date: 2026-12-08

The view counted a pod available when it was not terminating, Ready and its InPlaceUpdateReady condition
not False. The planner (OpenKruise's ``IsPodAvailable``) also asks for the lifecycle state to be empty or
``Normal``, the phase to be ``Running``, InPlaceUpdateReady to be absent or ``True`` and Ready to have lasted
longer than the workload's ``minReadySeconds``. So the audit could disagree with the planner: a Ready pod
still ``PreparingNormal`` counted as available, and scale-in deleting it (which OpenKruise does without
using up maxUnavailable: the pod is unavailable already) showed as a pod taken out of service at that
moment. Now one rule, as SQL functions the view calls (each mirrors its namesake in availability.py, and
tests/infra/test_availability_sql.py holds them to the same table of pods):

- ``pod_in_service(pod jsonb)``: available at minReadySeconds 0;
- ``pod_ready_since(pod jsonb)``: the Ready condition's lastTransitionTime (RFC 3339; NULL otherwise);
- ``pod_available(pod jsonb, min_ready_seconds integer, at timestamptz)``: the whole rule at a time;
- ``workload_min_ready_seconds(workload jsonb)``: its spec.minReadySeconds (0 when absent or not an int).

A pod becomes available minReadySeconds after its Ready time, with nothing observed then; the view's rows
are observations. So each pod observation is held to the minReadySeconds its workload had when it was
observed (the workload's latest observation, as ``replicas`` is), and judged at the time of the latest
observation of the workload so far (``occurred_at``, never going back); a pod not yet available at its own
observation becomes so at the first later moment past its Ready time plus minReadySeconds (a ``promotion``
row, folded into the running sums and not shown), unless observed again before. With minReadySeconds 0 on
every workload the moments, their order and every column are as before, but for the pods the new rule
counts differently.

Columns and their types are unchanged, so CREATE OR REPLACE keeps the comment, the grants,
``unavailability_of`` and ``max_unavailable_exceeded``. Nothing recorded changes. The downgrade puts the
view back as 0009 and 0019 left it, then drops the functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from services.infra.database import migration_module

revision: str = "0032_openkruise_availability"
down_revision: str | None = "0031_exceeded_steps_once"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# As services/model/availability.py has them (written out: a migration's SQL must not change after it ran).
READY_CONDITION = "Ready"
INPLACE_READY_CONDITION = "InPlaceUpdateReady"
LIFECYCLE_STATE_LABEL = "lifecycle.apps.kruise.io/state"
RUNNING = "Running"
RFC3339_PATTERN = (
    r"^[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-4]):[0-5][0-9])$"
)


def _condition(kind: str) -> str:
    """The pod's first condition of ``kind`` (NULL when none; ``strict``: a non-array or non-object is none,
    as in Python)."""
    return (
        "jsonb_path_query_first(pod -> 'status' -> 'conditions',"
        f" 'strict $[*] ? (@.type == \"{kind}\")', '{{}}', true)"
    )


_READY = _condition(READY_CONDITION)
_IN_PLACE = _condition(INPLACE_READY_CONDITION)
_SINCE = f"({_READY} ->> 'lastTransitionTime')"

FUNCTIONS = {
    "pod_in_service(pod jsonb)": f"""
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT coalesce(pod -> 'metadata' ->> 'deletionTimestamp', '') = ''
   AND coalesce(pod -> 'metadata' -> 'labels' ->> '{LIFECYCLE_STATE_LABEL}', '') IN ('', 'Normal')
   AND coalesce(pod -> 'status' ->> 'phase' = '{RUNNING}', false)
   AND coalesce({_READY} ->> 'status' = 'True', false)
   AND coalesce(coalesce({_IN_PLACE}, '{{"status": "True"}}') ->> 'status' = 'True', false)
$$""",
    "pod_ready_since(pod jsonb)": f"""
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN {_READY} ->> 'status' = 'True'
             AND jsonb_typeof({_READY} -> 'lastTransitionTime') = 'string'
             AND {_SINCE} ~ '{RFC3339_PATTERN}'
            THEN (jsonb_path_query_first(to_jsonb(regexp_replace({_SINCE}, 'Z$', '+00:00')),
                                         '$.datetime()', '{{}}', true) #>> '{{}}')::timestamptz
       END
$$""",
    "pod_available(pod jsonb, min_ready_seconds integer, at timestamptz)": """
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT pod_in_service(pod)
   AND (coalesce(min_ready_seconds, 0) = 0
        OR coalesce(pod_ready_since(pod) + make_interval(secs => min_ready_seconds) < at, false))
$$""",
    "workload_min_ready_seconds(workload jsonb)": """
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN jsonb_typeof(workload -> 'spec' -> 'minReadySeconds') = 'number'
             AND workload -> 'spec' ->> 'minReadySeconds' ~ '^-?[0-9]{1,9}$'
            THEN (workload -> 'spec' ->> 'minReadySeconds')::integer
            ELSE 0
       END
$$""",
}
COMMENTS = {
    "pod_in_service(jsonb)": "a pod is available at minReadySeconds 0: not terminating, lifecycle state empty"
    " or Normal, Running, Ready, InPlaceUpdateReady absent or True (services/model/availability.py)",
    "pod_ready_since(jsonb)": "the pod's Ready=True lastTransitionTime (RFC 3339), NULL otherwise",
    "pod_available(jsonb, integer, timestamptz)": "the pod is available at the time: in service and Ready for"
    " longer than minReadySeconds (OpenKruise's IsPodAvailable)",
    "workload_min_ready_seconds(jsonb)": "spec.minReadySeconds of a workload object, 0 when absent",
}

# The rows: a pod's or the workload's observation, or a SidecarSet's partition step (its total). What each
# pod observation needs: present (not terminating), in service, Ready since.
_WORKLOAD_ROW = "e.payload ->> 'kind' = split_part(e.stream, '/', 1) AND e.payload ->> 'change' <> 'DELETED'"
_POD_ROW = "e.payload ->> 'kind' = 'Pod' AND e.payload ->> 'change' <> 'DELETED'"


def _pod_window(t: str) -> str:
    """One pod's rows of a workload in log order (``t``: the relation)."""
    return (
        f"PARTITION BY {_workload(t)}, {t}.kind, {t}.object_namespace, {t}.name ORDER BY {t}.global_position"
    )


def _workload(t: str) -> str:
    return f"{t}.workload_kind, {t}.namespace, {t}.workload"


UNAVAILABILITY = f"""
WITH observed AS (
    SELECT split_part(e.stream, '/', 1) AS workload_kind,
           split_part(e.stream, '/', 2) AS namespace,
           split_part(e.stream, '/', 3) AS workload,
           e.global_position,
           e.occurred_at,
           e.payload ->> 'kind' AS kind,
           e.payload ->> 'namespace' AS object_namespace,
           e.payload ->> 'name' AS name,
           CASE WHEN {_WORKLOAD_ROW} THEN (e.payload -> 'object' -> 'spec' ->> 'replicas')::integer END
               AS replicas,
           CASE WHEN {_WORKLOAD_ROW} THEN workload_min_ready_seconds(e.payload -> 'object') END
               AS min_ready_seconds,
           (e.payload ->> 'change' <> 'DELETED'
            AND coalesce(e.payload -> 'object' -> 'metadata' ->> 'deletionTimestamp', '') = '')::integer
               AS present,
           CASE WHEN {_POD_ROW} THEN pod_in_service(e.payload -> 'object') ELSE false END AS in_service,
           CASE WHEN {_POD_ROW} THEN pod_ready_since(e.payload -> 'object') END AS ready_since
    FROM events AS e
    WHERE e.type = 'ObjectObserved'
      AND ((e.payload ->> 'kind' IN ('Pod', 'CloneSet') AND e.stream LIKE 'CloneSet/%/observed')
           OR (e.payload ->> 'kind' IN ('Pod', 'SidecarSet') AND e.stream LIKE 'SidecarSet/%/observed')
           OR (e.payload ->> 'kind' IN ('Pod', split_part(e.stream, '/', 1))
               AND e.stream ~ '^[^/]+/[^/]*/[^/]*/observed$'
               AND split_part(e.stream, '/', 1) NOT IN ('CloneSet', 'SidecarSet')))
    UNION ALL
    SELECT 'SidecarSet', split_part(e.stream, '/', 2), split_part(e.stream, '/', 3), e.global_position,
           e.occurred_at, 'PartitionStep', NULL, NULL, (e.payload ->> 'replicas')::integer, NULL, 0, false,
           NULL
    FROM events AS e
    WHERE e.type = 'PartitionStepPlanned' AND e.stream LIKE 'SidecarSet/%/decisions'
),
clocked AS (
    -- clock: the latest observation's time so far (it never goes back, so it orders rows as positions do)
    SELECT o.*,
           count(o.replicas) OVER workload AS replicas_group,
           count(o.min_ready_seconds) OVER workload AS min_ready_group,
           max(o.occurred_at) OVER workload AS clock,
           CASE WHEN o.kind = 'Pod' THEN o.present - coalesce(lag(o.present) OVER pod, 0) ELSE 0 END
               AS present_change
    FROM observed AS o
    WINDOW pod AS ({_pod_window("o")}),
           workload AS (PARTITION BY {_workload("o")} ORDER BY o.global_position)
),
held AS (
    -- the workload's latest replicas and minReadySeconds at each row
    SELECT c.*,
           max(c.replicas) OVER (PARTITION BY {_workload("c")}, c.replicas_group) AS total,
           coalesce(max(c.min_ready_seconds)
                        OVER (PARTITION BY {_workload("c")}, c.min_ready_group), 0) AS min_ready
    FROM clocked AS c
),
timed AS (
    -- ready_at: the time after which the observed pod is available (NULL: not in service)
    SELECT h.*,
           CASE WHEN NOT h.in_service THEN NULL
                WHEN h.min_ready = 0 THEN '-infinity'::timestamptz
                ELSE coalesce(h.ready_since + make_interval(secs => h.min_ready), 'infinity'::timestamptz)
           END AS ready_at
    FROM held AS h
),
changes AS (
    SELECT t.*,
           lag(t.ready_at) OVER pod AS ready_at_before,
           lead(t.clock) OVER pod AS clock_next
    FROM timed AS t
    WINDOW pod AS ({_pod_window("t")})
),
moves AS (
    -- each row's change to the count, and a promotion where a pod's minReadySeconds passes before its next
    -- observation
    SELECT ch.workload_kind, ch.namespace, ch.workload, ch.global_position, ch.occurred_at, ch.kind,
           ch.object_namespace, ch.name, ch.total, p.promotion,
           CASE WHEN p.promotion THEN ch.ready_at ELSE ch.clock END AS moment,
           CASE WHEN p.promotion THEN 0 ELSE ch.present_change END AS present_change,
           CASE WHEN p.promotion THEN 1
                WHEN ch.kind = 'Pod' THEN coalesce(ch.ready_at < ch.clock, false)::integer
                                          - coalesce(ch.ready_at_before < ch.clock, false)::integer
                ELSE 0
           END AS available_change
    FROM changes AS ch
    CROSS JOIN LATERAL (VALUES (false), (true)) AS p(promotion)
    WHERE NOT p.promotion
       OR (ch.kind = 'Pod' AND ch.ready_at >= ch.clock AND ch.ready_at < 'infinity'::timestamptz
           AND (ch.clock_next IS NULL OR ch.ready_at < ch.clock_next))
),
running AS (
    SELECT m.*,
           sum(m.present_change) OVER w AS pods,
           sum(m.available_change) OVER w AS available
    FROM moves AS m
    WINDOW w AS (PARTITION BY {_workload("m")} ORDER BY m.moment, m.promotion, m.global_position
                 ROWS UNBOUNDED PRECEDING)
)
SELECT workload_kind AS kind,
       namespace,
       workload,
       global_position AS position,
       occurred_at AS at,
       CASE WHEN workload_kind = 'SidecarSet' AND kind = 'Pod'
            THEN 'Pod/' || object_namespace || '/' || name
            ELSE kind || '/' || name END AS observed,
       total AS replicas,
       pods::integer AS pods,
       available::integer AS available,
       greatest(coalesce(total, 0) - available, 0)::integer AS unavailable
FROM running
WHERE NOT promotion AND kind <> 'PartitionStep'
"""


def upgrade() -> None:
    for signature, definition in FUNCTIONS.items():
        op.execute(f"CREATE FUNCTION {signature} {definition}")
    for signature, comment in COMMENTS.items():
        quoted = comment.replace("'", "''")
        op.execute(f"COMMENT ON FUNCTION {signature} IS '{quoted}'")
    # Same columns in the same order and types: CREATE OR REPLACE keeps the comment, the grants and what
    # reads the view (unavailability_of, max_unavailable_exceeded).
    op.execute(f"CREATE OR REPLACE VIEW unavailability AS {UNAVAILABILITY}")


def downgrade() -> None:
    # As 0009 wrote it, then as 0019 rewrote it (from the stored definition, as 0019 did).
    migration_module("0009_operator_inplace_unavail.py").upgrade()
    recorded = migration_module("0019_recorded_kinds.py")
    recorded._replace(
        "unavailability",
        [
            (recorded._CLONESET_REPLICAS, recorded._WORKLOAD_REPLICAS),
            (recorded._SIDECARSET_STREAMS, recorded._RECORDED_STREAMS),
        ],
    )
    for signature in COMMENTS:
        op.execute(f"DROP FUNCTION {signature}")
