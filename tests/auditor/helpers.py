"""Helpers of the auditor's tests."""

from __future__ import annotations

import uuid

from services.infra.settings import Settings


def relay_settings(database_url: str, nats_url: str) -> Settings:
    suffix = uuid.uuid4().hex[:10]
    return Settings(
        database_url=database_url,
        nats_url=nats_url,
        stream_name=f"RBRELAY_{suffix}",
        subject_prefix=f"rbrelay{suffix}",
        max_deliver=2,  # a conflicting event is dead-lettered on its second failed delivery
    )
