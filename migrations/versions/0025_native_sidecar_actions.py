"""``pod_actions`` finishes a SidecarSet's in-place upgrade of a native sidecar (an init container with
``restartPolicy: Always``) as it finishes an ordinary sidecar's (columns in docs/sql.md).

Revision ID: 0025_native_sidecar_actions
Revises: 0024_resize
Create Date: 2026-12-06

An ``updateSidecarInPlace`` row finishes at the first observation of the pod carrying the action's id,
Running and Ready, with every restarted sidecar on a new image id. A native sidecar reports in
``status.initContainerStatuses``, not ``status.containerStatuses``, so the image ids are now looked up in
both lists (container names are unique across them); before, such a row stayed ``pending``.

The view is edited as the database holds it (``pg_get_viewdef``), so this applies on top of whichever
migration defined it last; its columns are unchanged, so it is replaced in place. Stored events are
untouched. The downgrade removes exactly what the upgrade added.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0025_native_sidecar_actions"
down_revision: str | None = "0024_resize"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATUS = "(((o.payload -> 'object'::text) -> 'status'::text) -> "
_CONTAINERS = f"COALESCE({_STATUS}'containerStatuses'::text), '[]'::jsonb)"
_INIT = f" || COALESCE({_STATUS}'initContainerStatuses'::text), '[]'::jsonb)"
# The sidecar upgrade's lookup of a restarted sidecar's status (``was`` is its row of the image ids recorded
# before the patch; the resize join's lookup reads ``want`` and is left alone).
_LOOKUP = re.compile(
    r"(FROM jsonb_array_elements\()" + re.escape(_CONTAINERS) + r"(\) s\(value\)\s+WHERE \(\(\(s\.value ->> "
    r"'name'::text\) = was\.container\))"
)
_LOOKUP_BOTH = re.compile(
    r"(FROM jsonb_array_elements\()\(?" + re.escape(_CONTAINERS + _INIT) + r"\)?(\) s\(value\)\s+WHERE "
    r"\(\(\(s\.value ->> 'name'::text\) = was\.container\))"
)


def _definition() -> str:
    sql = op.get_bind().execute(text("SELECT pg_get_viewdef('pod_actions'::regclass)")).scalar_one()
    return str(sql).rstrip().rstrip(";")


def native_sidecar_view(sql: str) -> str:
    """``sql`` (the view as the database prints it) with a restarted sidecar looked up in both lists."""
    sql, count = _LOOKUP.subn(lambda m: m.group(1) + _CONTAINERS + _INIT + m.group(2), sql)
    if count != 1:  # not an assert: `python -O` would let a wrong view through
        raise RuntimeError(
            f"pod_actions: expected one sidecar status lookup in its definition, found {count}"
        )
    return sql


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {native_sidecar_view(_definition())}")


def downgrade() -> None:
    sql, count = _LOOKUP_BOTH.subn(lambda m: m.group(1) + _CONTAINERS + m.group(2), _definition())
    if count != 1:
        raise RuntimeError("pod_actions no longer reads as 0025_native_sidecar_actions left it")
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql}")
