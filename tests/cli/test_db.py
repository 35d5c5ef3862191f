"""`rollbook db upgrade / current / downgrade` against a fresh database, as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import sys

from alembic.script import ScriptDirectory

from services.infra.database import REPO_ROOT, alembic_config
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls


def _rollbook(database_url: str, nats_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOOK_DATABASE_URL": database_url, "ROLLBOOK_NATS_URL": nats_url}
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", "db", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_db_upgrade_current_and_a_downgrade_that_needs_yes(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_cli") as url:
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()  # the newest migration
        assert _rollbook(url, server_urls.nats_url, "current").stdout.strip() == "base"
        upgraded = _rollbook(url, server_urls.nats_url, "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        assert _rollbook(url, server_urls.nats_url, "current").stdout.strip() == head

        refused = _rollbook(url, server_urls.nats_url, "downgrade", "--revision", "base")
        assert refused.returncode == 2 and "--yes" in refused.stderr
        assert _rollbook(url, server_urls.nats_url, "current").stdout.strip() == head

        reverted = _rollbook(url, server_urls.nats_url, "downgrade", "--revision", "base", "--yes")
        assert reverted.returncode == 0, reverted.stderr
        assert _rollbook(url, server_urls.nats_url, "current").stdout.strip() == "base"
