"""The webhook injects, validates and annotates only the SidecarSets rollbook manages
(services/model/management.py); the others are left to their controller (OpenKruise's webhook)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from services.model import sidecarset as ss
from services.model.management import MANAGE_LABEL, ManageMode, Selection
from services.webhook import admission
from services.webhook.cache import SidecarSetCache
from tests.webhook.test_injection_rules import container, make_sidecarset, seed_pod, seed_sidecarset

LABELLED = Selection(ManageMode.LABELLED)
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def labelled(obj: dict[str, Any], value: str = "true") -> dict[str, Any]:
    copied = copy.deepcopy(obj)
    copied["metadata"].setdefault("labels", {})[MANAGE_LABEL] = value
    return copied


def request(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"uid": "u-1", "operation": operation, "object": obj}


def injected_names(cache: SidecarSetCache) -> list[str]:
    result = admission.review_pod(request(seed_pod()), cache.snapshot(), now=NOW)
    return [record.sidecarset for record in result.records]


def test_the_cache_keeps_only_managed_sidecarsets() -> None:
    cache = SidecarSetCache(LABELLED)
    cache.replace([seed_sidecarset()])
    assert cache.snapshot() == () and cache.unmanaged == {"test-sidecarset"}
    assert injected_names(cache) == []  # OpenKruise's webhook injects it, not us

    cache.apply("MODIFIED", labelled(seed_sidecarset()))
    assert cache.unmanaged == set() and injected_names(cache) == ["test-sidecarset"]

    cache.apply("MODIFIED", labelled(seed_sidecarset(), "false"))  # released again
    assert cache.snapshot() == () and injected_names(cache) == []


def test_by_default_every_sidecarset_is_managed() -> None:
    cache = SidecarSetCache()
    cache.replace([seed_sidecarset()])
    assert injected_names(cache) == ["test-sidecarset"]


def test_an_unmanaged_sidecarset_is_neither_annotated_nor_refused() -> None:
    unmanaged = seed_sidecarset()
    assert "patch" not in admission.mutate_sidecarset(request(unmanaged), LABELLED)
    assert "patch" in admission.mutate_sidecarset(request(labelled(unmanaged)), LABELLED)

    # Two SidecarSets injecting the same container name into the same pods conflict (refused when we
    # manage both); an unmanaged newcomer is its own controller's business.
    existing = ss.parse_sidecarset(labelled(make_sidecarset("first", containers=[container("tools")])))
    newcomer = make_sidecarset("second", containers=[container("tools")])
    assert not admission.review_sidecarset(request(labelled(newcomer)), [existing], LABELLED)["allowed"]
    assert admission.review_sidecarset(request(newcomer), [existing], LABELLED)["allowed"]
