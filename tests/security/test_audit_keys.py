"""As the database owner, swapping the published public key, or editing a signed checkpoint: `rollbook
audit verify` trusts the key it is given (the data dir's key file, --public-key), never the database's
alone, and names both. Before, checkpoints carried no signature and no key at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.infra.transparency import trusted_verifiers
from services.model.signed_note import Signer
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import append_rollout, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_swapped_public_key_in_the_database_is_caught(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=20) as trail:
        theirs = Signer.generate("test.rollbook/log").verifier.text()
        await trail.owner(f"UPDATE audit_keys SET verifier_key = '{theirs}'")
        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 1, out
        assert (
            f"KEY-MISMATCH: the database publishes the public key {theirs}, which is not a trusted key" in out
        )
        # Given explicitly, the trusted key is the same answer.
        mine = trusted_verifiers(trail.settings)[0].text()
        code, out = await trail.cli("audit", "verify", "--no-bus", "--public-key", mine)
        assert code == 1 and "KEY-MISMATCH" in out, out
        # And a verifier trusting the swapped key instead finds every checkpoint signed by another.
        code, out = await trail.cli("audit", "verify", "--no-bus", "--public-key", theirs)
        assert code == 1 and "UNTRUSTED-KEY: a checkpoint in database: signed by" in out, out


async def test_an_edited_signed_checkpoint_is_caught(server_urls: ServerUrls, tmp_path: Path) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=20) as trail:
        # The tree size in the note's text lowered by one: the signature no longer covers it.
        await trail.owner(
            "UPDATE signed_checkpoints SET note = regexp_replace(note, E'\\n20\\n', E'\\n19\\n')"
        )
        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 1, out
        assert "SIGNATURE-INVALID: a checkpoint in database: the signature by test.rollbook/log" in out, out


async def test_a_stale_checkpoint_is_caught(server_urls: ServerUrls, tmp_path: Path) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=20) as trail:
        await append_rollout(trail.store, "prod/unsigned", 3)
        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 0, out  # well within the bound
        code, out = await trail.cli("audit", "verify", "--no-bus", "--max-age", "0")
        assert code == 1, out
        assert "STALE-CHECKPOINT: position 20: " in out and "3 events came after it" in out, out


async def test_no_trusted_key_is_one_error_line(server_urls: ServerUrls, tmp_path: Path) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=5) as trail:
        (tmp_path / "audit" / "signing.key").unlink()
        (tmp_path / "audit" / "signing.pub").unlink()
        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 1
        assert out.strip().splitlines() == [
            "rollbook: no trusted public key: give --public-key (`rollbook audit public-key` where the"
            " auditor runs prints it) or set ROLLBOOK_AUDIT_PUBLIC_KEY; the database's own is never trusted"
            " alone"
        ]
