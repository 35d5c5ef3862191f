"""The planner input of each round that started a rollout, kept so what-if can start there.

A rollout's what-if starts from the workload as the planner knew it at the round that started the
rollout. Folding every event of the workload since its creation to rebuild that state was most of what-if's
time on a long-lived workload. ``round_inputs`` keeps that round's input, the exact canonical JSON whose
SHA-256 the round's ``RoundPlanned.input_sha256`` records in the hash chain. A reader uses a stored input
only when its hash is the recorded one, so the table needs no trust of its own: a row that does not match
(written by someone else, or damaged) is ignored and the state is folded from the events, as before.

The writer may insert (the planner writes a row after the round's events are stored) and read, as the
default privileges of 0016 grant; it may not update or delete a row.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0034_round_inputs"
down_revision: str | None = "0033_free_resize_in_service"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE round_inputs (
            round_event_id uuid        PRIMARY KEY,
            input          bytea       NOT NULL,
            recorded_at    timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE round_inputs IS 'the canonical planner input of a round that started a rollout"
        " (the event_id of its RoundPlanned): used only where its SHA-256 is the round''s input_sha256'"
    )


def downgrade() -> None:
    op.execute("DROP TABLE round_inputs")
