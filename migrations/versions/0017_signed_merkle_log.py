"""A Merkle tree over the event log, its signed checkpoints and the keys that sign them (docs/audit.md).

Revision ID: 0017_signed_merkle_log
Revises: 0016_database_roles
Create Date: 2026-12-06

``merkle_nodes`` keeps the hashes of the tree's perfect subtrees of 256 leaves and more (level >= 8: node
(level, idx) covers leaves [idx * 2**level, (idx + 1) * 2**level)); a level-8 row also names the first and
last global position of its 256 events. Everything below level 8 is recomputed from those events'
``stream_hash`` when a proof needs it (services/model/merkle.py defines the leaves), so the table holds
about n / 128 rows for n events, and an inclusion proof reads one row range of ``events`` and about
2 log2(n) rows of this table. Rows are only ever inserted (a complete subtree never changes) by the
auditor; nothing here is trusted: every proof is checked against a signed root, and `audit verify`
recomputes the tree from the events.

``signed_checkpoints`` keeps each signed tree head (a C2SP signed note) the auditor published; copies live
outside the database (JetStream, files), where they count. ``audit_keys`` publishes the public keys that
signed them; a verifier trusts a key given to it, never one only found here.

The auditor builds the tree over the events already stored, and signs a first checkpoint, when it starts:
nothing is computed here.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017_signed_merkle_log"
down_revision: str | None = "0016_database_roles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE merkle_nodes (
            level          smallint NOT NULL CHECK (level >= 8),
            idx            bigint   NOT NULL CHECK (idx >= 0),
            hash           bytea    NOT NULL CHECK (length(hash) = 32),
            first_position bigint,
            last_position  bigint,
            PRIMARY KEY (level, idx),
            CHECK ((level = 8) = (first_position IS NOT NULL AND last_position IS NOT NULL))
        )
        """
    )
    op.execute("CREATE INDEX merkle_blocks_by_position ON merkle_nodes (last_position) WHERE level = 8")
    op.execute(
        "COMMENT ON TABLE merkle_nodes IS 'perfect subtrees of >= 256 leaves of the Merkle tree over events"
        " (RFC 6962 hashing; leaf = position || stream_hash): docs/audit.md'"
    )
    op.execute(
        """
        CREATE TABLE signed_checkpoints (
            tree_size       bigint      PRIMARY KEY CHECK (tree_size >= 0),
            global_position bigint      NOT NULL,
            root_hash       bytea       NOT NULL,
            key_name        text        NOT NULL,
            key_id          bytea       NOT NULL,
            note            text        NOT NULL,
            created_at      timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE signed_checkpoints IS 'signed tree heads of the event log (C2SP signed notes);"
        " copies are kept outside the database: docs/audit.md'"
    )
    op.execute(
        """
        CREATE TABLE audit_keys (
            verifier_key text        PRIMARY KEY,
            key_name     text        NOT NULL,
            key_id       bytea       NOT NULL,
            created_at   timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE audit_keys IS 'public keys (C2SP verifier keys) that sign checkpoints; verifiers"
        " trust a key given to them, not this table'"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS audit_keys")
    op.execute("DROP TABLE IF EXISTS signed_checkpoints")
    op.execute("DROP TABLE IF EXISTS merkle_nodes")
