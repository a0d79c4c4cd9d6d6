"""The one judgement of a comparison, whoever made its interval: `collector compare`'s fixed-level
test (significance.verdict) and `--until-decided`'s looks (sequential.look) both call judge().
A speedup interval wholly beyond the noise floor is a difference (faster above 1, slower below),
where the test allows one; an interval wholly within the equivalence margin (or the floor, if
larger) is equivalent, where the test allows that; anything else is undecided. Intervals are
of the speedup (baseline time over contender time), not of its log."""

from __future__ import annotations

FASTER, SLOWER, EQUIVALENT, UNDECIDED = "faster", "slower", "equivalent", "undecided"
VERDICTS = (FASTER, SLOWER, EQUIVALENT, UNDECIDED)


def judge(
    low: float,
    high: float,
    floor: float,
    margin: float,
    *,
    near: tuple[float, float] | None = None,
    may_differ: bool = True,
    may_be_same: bool = True,
) -> str:
    """The verdict of a speedup's interval [low, high]: FASTER when low > 1 + floor, SLOWER
    when high < 1 / (1 + floor) (each only if `may_differ`: the test's p allows a
    difference), EQUIVALENT when the equivalence interval (`near`, its two one-sided tests'
    interval; else [low, high]) lies within [1 / b, b], b = 1 + max(margin, floor) (only if
    `may_be_same`), else UNDECIDED."""
    if may_differ and low > 1 + floor:
        return FASTER
    if may_differ and high < 1 / (1 + floor):
        return SLOWER
    near_low, near_high = near if near is not None else (low, high)
    bound = 1 + max(margin, floor)
    if may_be_same and near_low >= 1 / bound and near_high <= bound:
        return EQUIVALENT
    return UNDECIDED
