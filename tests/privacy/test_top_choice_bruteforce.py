"""The private choice of the largest group (proxy/privacy/top_choice.py, TPC-H Q15), by
brute force: for small data sets (units of several records in three groups, ties,
domain bounds, NULL, NaN, ±inf and overflow-sized values, records leaving the scope
and moving between groups, group size g > 1) and every neighbour, the probability of
every outcome of the two draws that read the data's order — the bound's rung k and the
group j — changes by at most e^{ε_b + ε_c}, computed exactly from the weights the
engine samples (``rung_weights``, ``choice_weights``); the chosen group's clipped sum,
released with Laplace noise of scale Δ/ε_v, moves by at most Δ
(``choice_sensitivity``). The backend computes the reference's ladder
(tests/analyze/test_top_choice.py)."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import pytest

from proxy.loss import Loss
from proxy.privacy.contribution_bounds import joint_prior, rung_weights, rungs
from proxy.privacy.top_choice import choice_sensitivity, choice_weights, shares
from proxy.rules import Column
from proxy.statistics import Contribution
from tests.privacy.harness import SETTINGS, assert_sound, datasets, modifying
from tests.privacy.reference import normalise

GROUPS = 3
EPSILON = Fraction(1)
BOUND, CHOICE, VALUE = shares(Loss.of(EPSILON))
# what a modified record may hold: both bounds, a tie, NULL, NaN, ±inf, overflow-sized
OPTIONS = {(0.0, 10.0): [0.0, 5.0, 10.0, None, math.nan, math.inf, -math.inf, 1e308],
           (-5.0, 5.0): [-5.0, 0.0, 5.0, None, math.nan, math.inf, -1e308]}


def contributions(records, lower: float, upper: float) -> dict[tuple[int, object], float]:
    """(group, unit) -> the unit's normalised values in scope summed in the group."""
    sums: dict[tuple[int, object], float] = {}
    for record in records:
        value = normalise(record.value, lower, upper)
        if record.in_scope and value is not None:
            sums[record.group, record.unit] = sums.get((record.group, record.unit), 0.0) + value
    return sums


def ladder_of(records, lower: float, upper: float, ladder: tuple[float, ...]) -> tuple:
    """(β_k: the units whose largest |sum| in one group exceeds B_k, (each group's sum
    clipped to ±B_k per unit …)) per rung, as the backend's L∞ ladder computes them."""
    sums = contributions(records, lower, upper)
    largest: dict[object, float] = {}
    for (_, unit), value in sums.items():
        largest[unit] = max(largest.get(unit, 0.0), abs(value))
    return tuple((sum(1 for top in largest.values() if top > bound),
                  tuple(sum(min(max(value, -bound), bound) for (g, _), value in sums.items()
                            if g == group) for group in range(GROUPS)))
                 for bound in ladder)


@functools.lru_cache(maxsize=None)
def law(found: tuple, ladder: tuple[float, ...], lower: float, upper: float,
        group_size: int, smallest: bool) -> dict[tuple, float]:
    """("rung", k) -> log P(rung k): ∝ e^{−x_k} of ``rung_weights`` (ε_b, the prior of G
    groups); ("group", k, j) -> log P(group j | rung k): ∝ e^{−x_j} of
    ``choice_weights`` (ε_c, Δ at B_k) over the groups' clipped sums (negated for the
    least)."""
    rung = _logs(rung_weights(tuple(beyond for beyond, _ in found), BOUND.epsilon,
                              group_size, joint_prior(GROUPS)))
    out: dict[tuple, float] = {("rung", k): p for k, p in enumerate(rung)}
    for k, (_, sums) in enumerate(found):
        sensitivity = choice_sensitivity(ladder[k], lower, upper, group_size)
        group = _logs(choice_weights([-s if smallest else s for s in sums], sensitivity,
                                     CHOICE.epsilon))
        out.update((("group", k, j), p) for j, p in enumerate(group))
    return out


def _logs(weights: list[tuple[int, Fraction]]) -> list[float]:
    """log(m_j·e^{−x_j} / Σ m_i·e^{−x_i}) of each weight."""
    exponents = [math.log(m) - float(x) for m, x in weights]
    top = max(exponents)
    total = top + math.log(sum(math.exp(e - top) for e in exponents))
    return [e - total for e in exponents]


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("domain", list(OPTIONS))
@pytest.mark.parametrize("smallest", [False, True])
def test_the_rung_and_the_group_are_chosen_within_their_epsilon(units, rows, group_size,
                                                                domain, smallest):
    """Each draw on its own: P(rung k) within e^{ε_b}, P(group j | rung k) within e^{ε_c}
    (so P(k, j) within e^{ε_b + ε_c}: sequential composition). Where a unit's rows can
    lower one group's sum by B and raise the two others' (two rows, one-signed domain),
    the group's log-ratio passes ε_c/2 (of 3 groups' worst, log(e^{ε_c/2}·(1 +
    2e^{ε_c/2})/(e^{ε_c/2} + 2)) ≈ 0.67·ε_c): weights without EM's factor 2 would pass
    ε_c and fail."""
    lower, upper = domain
    ladder = rungs(Contribution("x"), Column("x", "float", lower, upper,
                                             declared_resolution=0.5), rows)
    data = list(datasets(41 + rows + group_size, 4, units, rows, GROUPS))
    keys = {("rung", k): float(BOUND.epsilon) for k in range(len(ladder))}
    keys.update({("group", k, j): float(CHOICE.epsilon) for k in range(len(ladder))
                 for j in range(GROUPS)})

    def statistic(records):
        return law(ladder_of(records, lower, upper, ladder), ladder, lower, upper,
                   group_size, smallest)

    outcomes = assert_sound(statistic, lambda records: keys, data,
                            modifying(OPTIONS[domain], group_size, GROUPS))
    worst = {part: max(w for outcome in outcomes for key, w in outcome.worst.items()
                       if key[0] == part) for part in ("rung", "group")}
    assert worst["rung"] > 0 and worst["group"] > 0, worst  # both read the data
    if rows > 1 and lower >= 0:
        assert worst["group"] > float(CHOICE.epsilon) / 2, worst


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("domain", list(OPTIONS))
def test_a_groups_clipped_sum_moves_within_the_values_sensitivity(units, rows, group_size,
                                                                  domain):
    """Every group's clipped sum at every rung moves by at most Δ = g·(w·B_k + 10⁻⁶)
    (w = 1 on a one-signed domain, else 2) — the choice's utility and the released
    value; a unit's part w·B_k reached but for the rounding slack, where it goes from
    one clip to the other."""
    lower, upper = domain
    ladder = rungs(Contribution("x"), Column("x", "float", lower, upper,
                                             declared_resolution=0.5), rows)

    def statistic(records):
        found = ladder_of(records, lower, upper, ladder)
        return {(k, j): sums[j] for k, (_, sums) in enumerate(found) for j in range(GROUPS)}

    bounds = {(k, j): float(choice_sensitivity(b, lower, upper, group_size))
              for k, b in enumerate(ladder) for j in range(GROUPS)}
    outcomes = assert_sound(statistic, lambda records: bounds,
                            datasets(43 + rows, 4, units, rows, GROUPS),
                            modifying(OPTIONS[domain], group_size, GROUPS))
    assert any(max(outcome.worst[key] for outcome in outcomes) >= limit / group_size - 1e-5
               for key, limit in bounds.items())
