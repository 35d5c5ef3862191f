"""Pacing (services/infra/pacing.py): a cycle starts at least the interval after the previous one's start,
at once after a quiet spell."""

from __future__ import annotations

import math

import pytest

from services.infra.pacing import pace_delay
from services.infra.settings import Settings, SettingsError


@pytest.mark.parametrize(
    ("now", "last_start", "interval", "delay"),
    [
        (10.0, None, 0.05, 0.0),  # the first cycle: at once
        (10.0, 9.0, 0.05, 0.0),  # after a quiet spell: at once
        (10.0, 9.95, 0.05, 0.0),  # exactly the interval since the last start
        (10.0, 9.98, 0.05, 0.03),  # within it: the rest of the interval
        (10.0, 10.0, 0.05, 0.05),  # just started: a whole interval
        (10.0, 9.99, 0.0, 0.0),  # no pacing
        (10.0, 9.99, -1.0, 0.0),  # a negative setting is no pacing, not a negative sleep
    ],
)
def test_a_cycle_waits_out_the_rest_of_the_interval(
    now: float, last_start: float | None, interval: float, delay: float
) -> None:
    assert pace_delay(now, last_start, interval) == pytest.approx(delay)


@pytest.mark.parametrize("seconds", [0.0, 0.05, 1.0])
def test_a_pace_interval_from_none_to_a_second_is_accepted(seconds: float) -> None:
    assert Settings.from_env({"ROLLBOOK_PACE_INTERVAL": str(seconds)}).pace_interval == seconds


@pytest.mark.parametrize("seconds", [-0.01, 1.5, 50.0, math.inf, math.nan])
def test_a_pace_interval_out_of_range_is_refused_naming_the_variable(seconds: float) -> None:
    # 50 is what someone meaning milliseconds would write: every cycle 50 s apart, shutdowns past their grace.
    with pytest.raises(SettingsError, match="ROLLBOOK_PACE_INTERVAL: expected seconds from 0 to 1"):
        Settings(pace_interval=seconds)
