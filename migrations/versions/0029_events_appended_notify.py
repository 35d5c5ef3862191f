"""Every committed append tells listeners so: ``NOTIFY rollbook_events_appended``.

Revision ID: 0029_events_appended_notify
Revises: 0028_event_keys
Create Date: 2026-12-07

The auditor's relay read the store every 20 to 100 ms to find new events, which cost an idle cluster a
query every 100 ms and a rollout up to 100 ms per hop (a request waits for the relay before the executor
hears of it, an outcome before the planner does). Now a statement-level ``AFTER INSERT`` trigger on
``events`` calls ``pg_notify('rollbook_events_appended', '')``; the relay LISTENs on that channel and reads
when told (services/infra/appended.py), with a slow poll kept for a lost notification.

A trigger rather than a NOTIFY in the store's append: every writer is covered, whichever code path or
process appends (the store's appends, the webhook, ``rollbook import``, a restore by COPY, which fires
statement triggers too), and a notification is only ever sent for rows that committed: Postgres delivers
it at commit and drops it with a rolled-back transaction. Identical notifications of one transaction are
delivered once, so a transaction's statements cost one notification together.

The trigger is on the partitioned ``events`` (statement triggers on a partitioned table fire for an
insert through it, on Postgres 11 and later, so 15 and 18 alike); rows go in through ``events`` only
(0026). Its function runs as whoever inserts (no SECURITY DEFINER: it touches no table, and
``pg_notify`` is executable by everyone), is owned by the owner role like every function (0016), and names
``pg_catalog.pg_notify`` so a function of that name elsewhere on the search path cannot stand in.

Postgres keeps notifications in a queue until every listening session has read them, and once the
queue is full every commit that notifies fails ("too many notifications in the NOTIFY queue"). A listener
that is alive but never reads would fill it: a stopped (not dead) auditor, or anyone with a database
login who LISTENs and then sits idle in a transaction. So the function notifies only while
``pg_catalog.pg_notification_queue_usage()`` is below one half (executable by every role, as
``pg_notify``): above that appends commit without a notification, and the relay finds them with its safety
poll (every 2 s while listening), so nothing is lost, only latency. The queue holds 8 GB by default
(``max_notify_queue_pages`` from Postgres 17); Postgres warns in its log from half full. A dead session's
notifications are dropped with it.

Nothing recorded changes: existing rows, hashes and checkpoints are untouched. The downgrade drops the
trigger and its function.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0029_events_appended_notify"
down_revision: str | None = "0028_event_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION events_notify_appended() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            -- A listener that never reads must not fill the queue: a full queue fails every notifying commit.
            IF pg_catalog.pg_notification_queue_usage() < 0.5 THEN
                PERFORM pg_catalog.pg_notify('rollbook_events_appended', '');
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "COMMENT ON FUNCTION events_notify_appended() IS 'tells LISTENers on rollbook_events_appended that"
        " events were appended (delivered at commit, once per transaction; none while the notification queue"
        " is half full, where the relay polls): the relay reads then'"
    )
    op.execute(
        "CREATE TRIGGER events_notify_appended AFTER INSERT ON events"
        " FOR EACH STATEMENT EXECUTE FUNCTION events_notify_appended()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER events_notify_appended ON events")
    op.execute("DROP FUNCTION events_notify_appended()")
