"""GroupGetRates: a group's consumeTps per topic is what it pulled over the snapshots of the last minute."""

from __future__ import annotations

import pytest

from rocketmesh.broker.stats import GroupGetRates


def test_the_rate_is_the_pulled_count_over_the_span_of_the_snapshots_kept() -> None:
    pulled: dict[tuple[str, str], float] = {}
    rates = GroupGetRates(lambda: dict(pulled), interval_s=10.0)
    assert rates.tps("T", "g") == 0.0  # nothing sampled yet
    rates.samples.append((100.0, {("T", "g"): 50.0}))
    assert rates.tps("T", "g") == 0.0  # one snapshot is no rate
    rates.samples.append((110.0, {("T", "g"): 150.0, ("U", "g"): 7.0}))
    assert rates.tps("T", "g") == pytest.approx(10.0)
    assert rates.tps("U", "g") == pytest.approx(0.7)  # a pair first seen later counts from 0
    assert rates.tps("T", "other") == 0.0


def test_snapshots_older_than_a_minute_fall_out() -> None:
    rates = GroupGetRates(lambda: {}, interval_s=10.0)
    for i in range(20):
        rates.samples.append((i * 10.0, {("T", "g"): i * 100.0}))
    assert len(rates.samples) == 7  # a minute of 10 s snapshots, both ends included
    assert rates.tps("T", "g") == pytest.approx(10.0)


def test_run_once_takes_a_snapshot_of_the_counts() -> None:
    pulled = {("T", "g"): 3.0}
    rates = GroupGetRates(lambda: dict(pulled))
    rates.run_once()
    pulled[("T", "g")] = 9.0
    rates.run_once()
    assert [s[1][("T", "g")] for s in rates.samples] == [3.0, 9.0]
