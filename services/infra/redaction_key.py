"""The installation's redaction key, kept outside the event store: a file (in Kubernetes, a Secret mounted
as a file), named by ``settings.redaction_key_file``; empty means ``<data_dir>/redaction.key``, generated
with mode 0600 by the first process that needs it (``rollbook up`` and every embedded-mode command share
the data directory, so they share the key)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from services.infra.settings import Settings
from services.model.redaction import RedactionPolicy, parse_patterns

KEY_FILE_NAME = "redaction.key"
MIN_KEY_BYTES = 16


class RedactionKeyError(RuntimeError):
    """The key file cannot be read or is too short: nothing is recorded without it."""


def key_path(settings: Settings) -> Path:
    return Path(settings.redaction_key_file or Path(settings.data_dir) / KEY_FILE_NAME)


def _generate(path: Path) -> None:
    """Write a new key atomically: services started together either make it or read the one made first,
    never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        try:
            os.link(temporary, path)  # fails if another process made it first: theirs is kept
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


def load_key(settings: Settings) -> bytes:
    path = key_path(settings)
    if not settings.redaction_key_file and not path.exists():
        _generate(path)
    try:
        key = path.read_bytes().strip()
    except OSError as error:
        raise RedactionKeyError(
            f"cannot read the redaction key {path} (ROLLBOOK_REDACTION_KEY_FILE): {error.strerror}"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise RedactionKeyError(
            f"the redaction key {path} holds {len(key)} bytes; it needs at least {MIN_KEY_BYTES}"
        )
    return key


def load_policy(settings: Settings) -> RedactionPolicy:
    """The policy every recorder applies: the key file's key and the ``redact_deny`` patterns."""
    return RedactionPolicy(load_key(settings), parse_patterns(settings.redact_deny))
