"""A rollout's receipt checks offline, with no database and no server, by `rollbook audit verify-receipt`
and by docs/verify_receipt.py (hashlib and cryptography only); one byte changed anywhere in it, or another
key pinned, and it is refused."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from services.infra.transparency import trusted_verifiers
from services.model.receipt import ReceiptError, verify_receipt
from services.model.signed_note import Signer
from tests.plugins.servers import ServerUrls
from tests.security.signed_trail import REPO_ROOT, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")
SCRIPT = REPO_ROOT / "docs" / "verify_receipt.py"
NO_SERVER = {
    "ROLLBOOK_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none",
    "ROLLBOOK_NATS_URL": "nats://127.0.0.1:9",
}


def script_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_receipt_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    """The script as a customer runs it: isolated mode, outside the repository (no rollbook importable)."""
    return subprocess.run(
        [sys.executable, "-I", str(SCRIPT), *args], cwd="/", capture_output=True, text=True, timeout=60
    )


async def test_a_receipt_verifies_offline_and_refuses_any_changed_byte(
    server_urls: ServerUrls, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=2, events=300) as trail:
        receipt = tmp_path / "receipt.json"
        code, out = await trail.cli("audit", "export", "prod/w1", "--rollout", "rev", "-o", str(receipt))
        assert code == 0 and out.startswith(f"{receipt}: 300 events of prod/w1@rev"), out
        key = trusted_verifiers(trail.settings)[0].text()
        # Offline: the database and NATS given point nowhere; the command must not need them.
        code, out = await trail.cli("audit", "verify-receipt", str(receipt), "--public-key", key, **NO_SERVER)
        assert code == 0, out
        assert out.startswith(
            f"OK: 300 events of prod/w1@rev in the log of 600 events (up to position 600), signed by {key}"
        )
        done = run_script(str(receipt), key)
        assert done.returncode == 0 and done.stdout.startswith("OK: 300 events of prod/w1@rev"), done
        data = receipt.read_bytes()
        script = script_module()
        trusted = trusted_verifiers(trail.settings)
        # One byte changed, at ~400 places spread over the whole file (payloads, proofs, the checkpoint,
        # its signature, the key, the JSON between them): every change is refused by both verifiers.
        for at in range(0, len(data), max(1, len(data) // 400)):
            changed = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
            with pytest.raises(ReceiptError):
                verify_receipt(changed, trusted)
            with pytest.raises((script.Refused, ValueError, KeyError, TypeError, IndexError, AttributeError)):
                script.verify(changed, key)
        payload_at = data.index(b"prod/w1-") + len(b"prod/w1-")  # a digit of an action id in a payload
        changed = data[:payload_at] + bytes([data[payload_at] ^ 0x01]) + data[payload_at + 1 :]
        (tmp_path / "changed.json").write_bytes(changed)
        code, out = await trail.cli("audit", "verify-receipt", str(tmp_path / "changed.json"), **NO_SERVER)
        assert code == 1 and out.startswith("rollbook: receipt refused: event at position"), out
        done = run_script(str(tmp_path / "changed.json"))
        assert done.returncode == 1 and done.stderr.startswith("REFUSED: event at position"), done
        # The receipt's own key replaced with another's, re-signed: refused against the pinned key.
        forged = json.loads(data)
        other = Signer.generate("test.rollbook/log")
        from services.model.signed_note import sign_note, split_note

        text, _ = split_note(forged["checkpoint"])
        forged["checkpoint"], forged["public_key"] = sign_note(text, [other]), other.verifier.text()
        from services.model.receipt import canonical_json

        (tmp_path / "forged.json").write_bytes(canonical_json(forged))
        code, out = await trail.cli(
            "audit", "verify-receipt", str(tmp_path / "forged.json"), "--public-key", key, **NO_SERVER
        )
        assert (
            code == 1 and "rollbook: receipt refused: the checkpoint: signed by test.rollbook/log" in out
        ), out
        assert run_script(str(tmp_path / "forged.json"), key).returncode == 1
