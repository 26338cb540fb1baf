"""The exponential mechanism of privacy/inverse_sensitivity.py by brute force, in its
step form ('instance') and its piecewise form ('piecewise'), each test over both.

- Its blocks, from any window of ranks holding r, give every candidate the distance a
  direct count gives — in the piecewise form the distance from r to the set of u where
  the interpolation of L, the sorted values and U equals y (tail blocks: a lower bound
  of it).
- ε-DP: on small data sets (ties, domain bounds, records leaving the scope, several rows
  per unit, g > 1, raw values NaN, ±inf or overflow-sized, in data and neighbours,
  normalised as the backend does), the probability of every candidate, computed from
  the mechanism's own block weights, changes by at most a factor e^ε over every
  neighbour.
- GROUP BY: each group's draw at ε divided by the groups a unit can touch composes to
  ε over records moving between groups.
- The sampler, reading a narrow window and resolving tail draws by counting, follows the
  exact law of the full mechanism (χ² at significance ALPHA, seeded).
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy.privacy import inverse_sensitivity
from proxy.privacy.exact_choice import choose
from proxy.privacy.inverse_sensitivity import (
    Grid,
    blocks,
    candidate_grid,
    distance,
    exponent,
    instance_release,
    ordinal,
)
from proxy.privacy.sensitivity import groups_touched
from proxy.statistics import BOTTOM, TOP, RankRef, percentile_rank
from tests.privacy.harness import (
    EXTREME,
    LOWER,
    UPPER,
    Record,
    assert_sound,
    datasets,
    modifying,
)
from tests.privacy.laws import (
    ALPHA,
    SeededSource,
    draws_with_tails,
    expanded,
    groups_loss,
    law_at_target,
    log_probabilities,
)
from tests.privacy.reference import by_hand, in_domain

INTEGERS = candidate_grid(LOWER, UPPER, 1.0, integers=True)  # 0 .. 10
HALVES = Grid(Fraction(1, 2), 0, 20, LOWER, UPPER)  # 0, 0.5 .. 10: candidates between values
# offsets of at most 2 significant bits from the origin 4 (``candidate_grid``'s form, its
# origin and digits made small so that [0, 10] holds both its kinds of spacing):
# 0, 1, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 7, 8, 10
GEOMETRIC = Grid(Fraction(1, 2), ordinal(-8, 2), ordinal(12, 2), LOWER, UPPER, False, 8, 2)
GRIDS = [INTEGERS, HALVES, GEOMETRIC]
# what a neighbour may set a record to: both bounds, ties with the data, NaN and ±inf
NEIGHBOUR_VALUES = [LOWER, 3.5, 5.0, UPPER] + EXTREME[:3]
RANKS = {
    "median": lambda n: percentile_rank(n, Fraction(1, 2)),
    "p90": lambda n: percentile_rank(n, Fraction(9, 10)),
    "max": lambda n: max(n, 1),
    "min": lambda n: 1,
}


FORMS = pytest.mark.parametrize("piecewise", [False, True], ids=["step", "piecewise"])


def _direct(values: list[float], rank: int, grid: Grid, piecewise: bool = False) -> list:
    """d(y) of every candidate: by counting the values below it and those below the next
    candidate (the step form counts each value at the greatest candidate at or below
    it: ``inverse_sensitivity.snapped``); in the piecewise form from its definition,
    dist(r, {u ∈ [0, n + 1] : Q(u) = y}) with Q the linear interpolation of (0, L),
    (i, x₍ᵢ₎), (n + 1, U)."""
    found = []
    points = [Fraction(v) for v in [LOWER, *sorted(values), UPPER]]
    for k in range(grid.first, grid.last + 1):
        y = Fraction(grid.value(k))
        if not piecewise:
            following = Fraction(grid.value(k + 1)) if k < grid.last else None
            found.append(distance(sum(v < y for v in values), sum(
                following is None or v < following for v in values), rank))
            continue
        at = [u for u, x in enumerate(points) if x == y]
        if at:  # G(y) = [first, last] of the ranks holding y (0 and n + 1 for L and U)
            found.append(max(0, at[0] - rank, rank - at[-1]))
            continue
        u = max(u for u, x in enumerate(points) if x < y)
        found.append(abs(rank - u - (y - points[u]) / (points[u + 1] - points[u])))
    return found


@FORMS
@pytest.mark.parametrize("grid", GRIDS, ids=["integers", "halves", "geometric"])
def test_blocks_give_every_candidate_its_distance_from_any_window(grid, piecewise):
    for index, records in enumerate(datasets(zlib.crc32(b"instance windows"), 40, 8, 1)):
        values = in_domain(records)
        n = len(values)
        for name, rank_of in RANKS.items():
            rank = rank_of(n)
            direct = _direct(values, rank, grid, piecewise)
            if n == 0:
                assert expanded(blocks(0, rank, grid, 1, [], piecewise), grid, rank) == [
                    (d, True) for d in direct]
                continue
            for low in range(1, rank + 1):
                for high in range(rank, n + 1):
                    got = expanded(blocks(n, rank, grid, low, values[low - 1: high],
                                           piecewise), grid, rank)
                    for (d, exact), true in zip(got, direct):
                        assert d == true if exact else d <= true, (values, name, low, high)


@FORMS
@pytest.mark.parametrize("units,rows,group_size", [(5, 1, 1), (3, 2, 1), (3, 1, 2)])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_no_candidate_changes_probability_by_more_than_e_to_the_epsilon(units, rows,
                                                                        group_size, epsilon,
                                                                        piecewise):
    """The largest change of log P(candidate), over every candidate and every rank
    (median, p90, max, min), is at most ε."""
    shift = rows * group_size  # DP: the declared bound c times g
    scale = float(exponent(Fraction(epsilon), shift))  # the mechanism's own λ
    seed = zlib.crc32(f"instance dp {units} {rows} {group_size} {epsilon}".encode())
    worst = 0.0
    for index, records in enumerate(datasets(seed, 6, units, rows)):
        grid = GRIDS[index % 3]

        def laws(records, grid=grid):
            values = in_domain(records)
            return {name: log_probabilities(values, rank_of(len(values)), grid, scale,
                                            piecewise) for name, rank_of in RANKS.items()}

        (outcome,) = assert_sound(laws, lambda _: dict.fromkeys(RANKS, epsilon), [records],
                                  modifying(NEIGHBOUR_VALUES, group_size),
                                  change=lambda before, after: {
                                      name: float(np.abs(before[name] - after[name]).max())
                                      for name in before})
        worst = max(worst, *outcome.worst.values())
    assert worst > epsilon / 4  # the enumeration reaches neighbours that matter


@FORMS
@pytest.mark.parametrize("grid", GRIDS, ids=["integers", "halves", "geometric"])
def test_the_sampler_with_tails_follows_the_exact_law(grid, piecewise, monkeypatch):
    """A window of one rank each side, kept however heavy the tails (the envelope's
    rejection step runs often): the draws follow the full mechanism's law."""
    monkeypatch.setattr(inverse_sensitivity, "first_reach", lambda scale, grid: 1)
    monkeypatch.setattr(inverse_sensitivity, "_TAIL_SHARE", 1.0)
    values = sorted([0.0, 1.0, 2.0, 2.0, 2.0, 3.5, 5.0, 5.0, 7.0, 9.0, 10.0, 10.0, 4.0])
    rank, epsilon = percentile_rank(len(values), Fraction(1, 2)), Fraction(1, 2)
    draws = 1500
    sampled, counts = draws_with_tails(values, rank, epsilon, grid,
                                       f"instance law {grid.step} {grid.digits} {piecewise}",
                                       draws, piecewise=piecewise)
    assert counts  # the tails were drawn and resolved
    expected = np.exp(log_probabilities(values, rank, grid, float(epsilon) / 2,
                                         piecewise)) * draws
    observed = np.zeros(grid.count)
    for value in sampled:
        observed[grid.at_or_below(value) - 1] += 1  # the cell holding the answer
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_exact_choice_follows_its_weights():
    """Weights from e^0 to e^−200 and counts up to 2^62: the index law by χ² (the
    negligible ones pooled with the smallest index) and none of the negligible drawn."""
    weights = [(3, Fraction(0)), (1, Fraction(1, 3)), (2 ** 62, Fraction(44)),
               (5, Fraction(7, 2)), (1, Fraction(200))]
    true = np.array([m * math.exp(-float(x)) for m, x in weights])
    rng = SeededSource(19)
    draws = [choose(weights, rng) for _ in range(2000)]
    observed = np.bincount(draws, minlength=len(weights)).astype(float)
    assert observed[4] == 0
    expected = true / true.sum() * len(draws)
    assert stats.chisquare(observed[:4], expected[:4] * len(draws) / expected[:4].sum()
                           ).pvalue > ALPHA


def test_an_integer_column_answers_integers_and_ties_exactly():
    """All values tied at 4 on an int column: 4 is the answer with the law's weight
    (the tie is one candidate at distance 0, not an interval of width 0)."""
    rng = SeededSource(7)
    values = [4.0] * 9
    answers = [by_hand(instance_release(9, 5, 1, Fraction(4), INTEGERS, rng), values)
               for _ in range(400)]
    assert all(isinstance(a, int) for a in answers)
    logs = log_probabilities(values, 5, INTEGERS, 2.0)
    share = sum(a == 4 for a in answers) / len(answers)
    assert abs(share - math.exp(logs[4])) < 0.06  # 4.6 standard deviations at 400 draws


@FORMS
@pytest.mark.parametrize("units,rows", [(4, 1), (3, 2)])
def test_grouped_draws_compose_to_epsilon(units, rows, piecewise):
    """GROUP BY over two groups, records moving between them: each group's draw at
    ε / groups_touched(s, 2) (as the engine spends it), and the joint law of both draws
    (independent, so its log-ratio is at most the sum of the groups' worst ones) moves
    by at most e^ε over every neighbour."""
    epsilon, shift = 1.0, rows
    scale = float(exponent(Fraction(epsilon) / groups_touched(shift, 2), shift))
    seed = zlib.crc32(f"instance groups {units} {rows}".encode())
    rank_of = RANKS["median"]
    for index, records in enumerate(datasets(seed, 5, units, rows, groups=2)):
        grid = GRIDS[index % 3]

        def laws(records, grid=grid):
            groups = (in_domain([r for r in records if r.group == g]) for g in (0, 1))
            return [log_probabilities(v, rank_of(len(v)), grid, scale, piecewise)
                    for v in groups]

        assert_sound(laws, lambda _: epsilon, [records],
                     modifying([LOWER, 5.0, UPPER, EXTREME[0]], groups=2),
                     change=groups_loss)


# data sets of 9–12 records around the size where MAX's and MIN's target K ranks inside
# (``extreme_offset``) starts to bind over the cap ⌊n/10⌋: ties at the top and bottom,
# both bounds, raw NaN, ±inf and overflow-sized values, records out of scope
EXTREME_TARGET_DATA = [
    [0.0, 1.0, 2.0, 3.5, 5.0, 5.0, 7.0, 7.0, 10.0, 10.0],
    [0.0, 0.0, 1.0, 2.0, 3.5, 5.0, 7.0, 7.0, 10.0, float("nan"), float("inf")],
    [5.0] * 10,
    [-1e308, 1.0, 1.0, 2.0, 3.5, 3.5, 5.0, 7.0, 1e300, float("-inf"), 10.0, 2.0],
]


@FORMS
@pytest.mark.parametrize("epsilon", [3.0, 5.0])
def test_the_extremes_target_keeps_every_neighbour_within_e_to_the_epsilon(epsilon,
                                                                          piecewise):
    """MAX and MIN aimed K = ``extreme_offset`` ranks inside (K ≥ 1 on every grid at
    these ε, at most ⌊n/10⌋): over every neighbour of data sets whose size crosses 10
    (a record entering or leaving the scope, set to NaN, ±inf, a bound or a tie), which
    moves the target between the cap and K, no candidate's probability changes by more
    than e^ε."""
    scale = float(exponent(Fraction(epsilon), 1))
    seed = zlib.crc32(f"extremes target {epsilon}".encode())
    records = [[Record(unit, value, unit != 4 or index != 2)
                for unit, value in enumerate(values)]
               for index, values in enumerate(EXTREME_TARGET_DATA)]
    worst = 0.0
    for index, found in enumerate([*records, *datasets(seed, 4, 12, 1)]):
        grid = GRIDS[index % 3]
        offset = inverse_sensitivity.extreme_offset(Fraction(epsilon), 1, grid)
        assert offset >= 1  # K binds wherever n ≥ 10
        targets = {kind: RankRef(kind, offset, inverse_sensitivity.EXTREME_SHARE)
                   for kind in (TOP, BOTTOM)}

        def laws(records, grid=grid, targets=targets):
            values = in_domain(records)
            return {kind: law_at_target(values, target, grid, scale, piecewise)
                    for kind, target in targets.items()}

        (outcome,) = assert_sound(laws, lambda _: dict.fromkeys(targets, epsilon), [found],
                                  modifying(NEIGHBOUR_VALUES),
                                  change=lambda before, after: {
                                      kind: float(np.abs(before[kind] - after[kind]).max())
                                      for kind in before})
        worst = max(worst, *outcome.worst.values())
    assert worst > epsilon / 4  # the enumeration reaches neighbours that matter
