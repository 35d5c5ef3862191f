"""The installation's redaction key: generated once (0600) in the data directory, shared by every process
that starts at the same time; a configured file must exist and be long enough."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from services.infra.redaction_key import RedactionKeyError, key_path, load_key, load_policy
from services.infra.settings import Settings


def test_a_key_is_generated_once_with_mode_0600_and_shared(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"))
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: load_key(settings), range(16)))
    assert len(keys) == 1 and len(next(iter(keys))) >= 32
    path = key_path(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert load_policy(settings).policy_id == load_policy(settings).policy_id


def test_a_configured_key_file_must_exist_and_be_long_enough(tmp_path: Path) -> None:
    missing = Settings(data_dir=str(tmp_path), redaction_key_file=str(tmp_path / "absent"))
    with pytest.raises(RedactionKeyError, match="cannot read the redaction key"):
        load_key(missing)
    assert not (tmp_path / "absent").exists()  # never generated where a Secret should be mounted
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(RedactionKeyError, match="at least 16"):
        load_key(Settings(redaction_key_file=str(short)))
