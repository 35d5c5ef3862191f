"""Every printed URL goes through one helper (services/infra/redact.py): no password, token or secret
query parameter reaches a terminal or a log."""

from __future__ import annotations

import pytest

from services.cli.up_summary import summary
from services.infra.database import asyncpg_url
from services.infra.redact import redacted
from services.infra.settings import Settings

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    ("url", "shown", "usable"),
    [
        ("postgresql://root@127.0.0.1:5432/test", None, None),  # nothing secret: unchanged
        ("nats://127.0.0.1:4222", None, None),
        (
            f"postgresql://rollbook:{SECRET}@db:5432/rollbook",
            "postgresql://rollbook:***@db:5432/rollbook",
            "postgresql://rollbook@db:5432/rollbook",
        ),
        (
            f"postgresql://u@db/x?sslmode=require&password={SECRET}",
            "postgresql://u@db/x?sslmode=require&password=***",
            "postgresql://u@db/x?sslmode=require",
        ),
        (f"nats://{SECRET}@nats:4222", "nats://***@nats:4222", "nats://nats:4222"),  # a NATS token
        (
            f"nats://executor:{SECRET}@n1:4222,nats://executor:{SECRET}@n2:4222",
            "nats://executor:***@n1:4222,nats://executor:***@n2:4222",
            "nats://executor@n1:4222,nats://executor@n2:4222",
        ),
        (
            f"postgresql://u:{SECRET}@[::1]:5432/db",
            "postgresql://u:***@[::1]:5432/db",
            "postgresql://u@[::1]:5432/db",
        ),
        (f"postgresql://u:{SECRET}@db:99999/x", "***", "***"),  # cannot be taken apart: nothing of it
    ],
)
def test_a_url_is_printed_without_its_secret(url: str, shown: str | None, usable: str | None) -> None:
    assert redacted(url) == (shown or url)
    assert redacted(url, mask="") == (usable or url)
    assert SECRET not in redacted(url) + redacted(url, mask="")


def test_the_up_summary_prints_no_password() -> None:
    settings = Settings(
        database_url=f"postgresql://rollbook:{SECRET}@db:5432/rollbook",
        nats_url=f"nats://{SECRET}@nats:4222",
    )
    text = summary(settings, {"auditor": 8080}, 0.0)
    assert SECRET not in text
    assert "postgresql://rollbook:***@db:5432/rollbook" in text and "nats://***@nats:4222" in text


def test_a_bad_database_url_is_named_without_its_password() -> None:
    with pytest.raises(ValueError) as refused:
        asyncpg_url(f"mysql://rollbook:{SECRET}@db/rollbook")
    assert SECRET not in str(refused.value) and "rollbook:***@db" in str(refused.value)
