"""The tests' time limits (tests/timeouts.py) lengthen with GRAE_TEST_TIMEOUT_FACTOR or the machine's load,
never shorten, and stay finite."""

from __future__ import annotations

import pytest

import timeouts


@pytest.fixture
def fresh(monkeypatch):
    """The factor recomputed for this test (it is cached per process), and restored after it."""
    monkeypatch.delenv(timeouts.ENV, raising=False)
    timeouts.factor.cache_clear()
    yield monkeypatch
    timeouts.factor.cache_clear()


def test_the_environment_factor_wins_and_scales_every_limit(fresh):
    fresh.setenv(timeouts.ENV, "2.5")
    fresh.setattr(timeouts.os, "getloadavg", lambda: (40.0, 40.0, 40.0))
    assert timeouts.factor() == 2.5 and timeouts.scaled(600) == 1500.0


@pytest.mark.parametrize("raw", ["0.5", "0", "-1", "fast", "nan"])
def test_a_factor_that_would_shorten_or_is_not_a_number_is_refused(fresh, raw):
    fresh.setenv(timeouts.ENV, raw)
    with pytest.raises(ValueError, match=rf"{timeouts.ENV}=.*expected a number >= 1"):
        timeouts.factor()


@pytest.mark.parametrize(("loads", "cpus", "expected"), [
    ((0.5, 0.2, 0.1), 2, 1.0),    # idle: the bare limits
    ((2.0, 6.0, 3.0), 2, 3.0),    # the largest average over the cores: 6 / 2
    ((10.0, 8.0, 4.0), 4, 2.5),
    ((500.0, 500.0, 500.0), 2, timeouts.MAX_LOAD_FACTOR),  # capped: a hang still fails in bounded time
])
def test_unset_the_factor_is_the_load_per_core_between_1_and_the_cap(fresh, loads, cpus, expected):
    fresh.setattr(timeouts.os, "getloadavg", lambda: loads)
    fresh.setattr(timeouts.os, "cpu_count", lambda: cpus)
    assert timeouts.factor() == pytest.approx(expected)
    assert timeouts.scaled(10) == pytest.approx(10 * expected)


def test_no_load_average_means_the_bare_limits(fresh):
    def unavailable():
        raise OSError("no load average")

    fresh.setattr(timeouts.os, "getloadavg", unavailable)
    assert timeouts.factor() == 1.0
