"""The one judgement (stats/judgement.py): compare's fixed-level test and --until-decided's
looks both call it, so an interval means the same verdict whichever made it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fwbench.collector.stats import judgement, sequential, significance
from fwbench.collector.stats.judgement import EQUIVALENT, FASTER, SLOWER, UNDECIDED, judge


def test_an_interval_beyond_the_floor_differs_and_one_within_the_margin_is_the_same() -> None:
    assert judge(1.10, 1.20, 0.03, 0.05) == FASTER
    assert judge(0.80, 0.90, 0.03, 0.05) == SLOWER
    assert judge(0.97, 1.03, 0.03, 0.05) == EQUIVALENT
    assert judge(0.90, 1.10, 0.03, 0.05) == UNDECIDED  # neither
    assert judge(1.01, 1.025, 0.03, 0.01) == EQUIVALENT  # the floor, larger than the margin
    assert judge(1.10, 1.20, 0.03, 0.05, may_differ=False) == UNDECIDED  # p does not allow it
    assert judge(0.97, 1.03, 0.03, 0.05, may_be_same=False) == UNDECIDED
    # An equivalence is judged on its own interval (the two one-sided tests'), when given.
    assert judge(0.90, 1.10, 0.03, 0.05, near=(0.96, 1.04)) == EQUIVALENT


def test_compare_and_the_looks_both_call_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def spy(*args: Any, **kwargs: Any) -> str:
        calls.append(args)
        return judgement.judge(*args, **kwargs)

    monkeypatch.setattr(significance, "judge", spy)
    monkeypatch.setattr(sequential, "judge", spy)
    estimate = significance.RatioEstimate(1.2, 1.1, 1.3, 0.001)
    assert significance.verdict(estimate, 0.001, 0.03) == FASTER
    rng = np.random.default_rng(0)
    base = [0.010 * rng.lognormal(0, 0.01, 30) for _ in range(6)]
    other = [0.008 * rng.lognormal(0, 0.01, 30) for _ in range(6)]
    seen = sequential.look(base, other, 0.01, 0.01, 0.03, 0.05)
    assert seen.verdict == FASTER and len(calls) == 2
    assert calls[1][:2] == pytest.approx((seen.ci_low, seen.ci_high))  # the interval it reports
