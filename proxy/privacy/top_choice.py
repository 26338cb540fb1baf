"""The group of the largest SUM, chosen privately, and its value alone (docs/privacy.md
§3.18; TPC-H Q15: the supplier of the largest revenue in a quarter, the customer the
unit).

Releasing every group's noisy sum and keeping the largest picks the group whose noise
is largest about as often as the group whose sum is (of 1,000 suppliers, sums within a
noise scale of the top are many), and its value is then biased upwards by that noise.
Instead the query's ε is split in three public thirds:

1. **The bound** B (ε/3): drawn once for the query from the public ladder of §3.14, β_k
   the units whose largest |contribution| to one group lies beyond B_k (a neighbour
   changes g of them: sensitivity g), with the prior of G groups (``joint_prior``): a
   rung twice as high doubles the noise of the choice among all G groups. (One sum's
   prior, 1/2 a rung, drew B 8 to 32 times above the largest contribution about half
   the time on TPC-H Q15: median relative error 95 % against 30 %.)
2. **The group** (ε/3): the exponential mechanism over the public keys (the public
   table's values, NULL left out; a key without rows has the sum 0), utility the sum of
   the contributions each clipped to ±B in its own group (its negative for the least).
   A neighbour modifies g units; each moves every group's sum by at most w·B (w = 1
   when the domain lies on one side of 0, else 2), plus 10⁻⁶ of the sums' rounding
   (``exact_sum``), and 10⁻⁹·w·B of the doubles the sums are read as: Δ = g·(w·B·(1 +
   10⁻⁹) + 10⁻⁶), the L∞ sensitivity, however many groups a unit touches. Weight of
   group j: exp(−ε_c·(u* − u_j)/(2Δ)) — ε_c-DP (McSherry–Talwar), sampled exactly
   (``exact_choice``: no floating-point rounding in the probabilities).
3. **The value** (ε/3): the chosen group's clipped sum with Laplace noise of scale
   Δ/ε_v on the column's grid (``laplace_real``).

Sequential composition: ε_b + ε_c + ε_v = ε, one query. Only the group's key and value
leave (with the 95 % bound, which tells B: a function of step 1's output).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from proxy.errors import NotSupported
from proxy.loss import Loss
from proxy.privacy.contribution_bounds import (
    BOUND_SHARE,
    RELATIVE,
    ROUNDING,
    clip_width,
    empty_ladder,
    joint_clipped,
    rungs,
)
from proxy.privacy.exact_choice import choose_scaled
from proxy.privacy.mechanisms import grid_step, laplace_real
from proxy.privacy.noisy_answers import Released, signed_sum
from proxy.privacy.sampler import RandomSource
from proxy.statistics import Contribution, GroupStats
from proxy.vocabulary import QueryPlan

MECHANISM = ("exponential mechanism (the group), Laplace (sampled on the column's grid: "
             "its value), the bound by the exponential mechanism")


def refuse_top_choice(plan: QueryPlan) -> None:
    """Refuse, before any debit, a choice whose SUM is not clipped with the automatic
    bound and Laplace noise (``joint_clipped``: DP or iDP with the global scale, a
    declared domain; not Gaussian)."""
    if not joint_clipped(plan, 1) or plan.gaussian(plan.aggregates[0]):
        raise NotSupported("keeping the largest group of a step is answered for a SUM of a "
                           "column (or expression) with a declared domain, under DP or iDP "
                           "with idp.sensitivity = 'global' and Laplace noise, its bound "
                           "drawn per query (docs/privacy.md §3.18)")


def shares(loss: Loss) -> tuple[Loss, Loss, Loss]:
    """(the bound's, the group's, the value's) parts of the aggregate's loss: thirds."""
    rest = 1 - BOUND_SHARE
    return loss.split(BOUND_SHARE, rest / 2, rest / 2)


def choice_sensitivity(bound: float, lower: float, upper: float, group_size: int) -> Fraction:
    """Δ = g·(w·B·(1 + 10⁻⁹) + 10⁻⁶): what a neighbour moves any one group's clipped sum
    by (10⁻⁶ of ``exact_sum``'s rounding, 10⁻⁹ of the doubles the sums are read as:
    §3.14's allowances)."""
    return group_size * (Fraction(clip_width(bound, lower, upper)) * (1 + Fraction(RELATIVE))
                         + Fraction(ROUNDING))


def choice_weights(utilities: list[float], sensitivity: Fraction, epsilon: Fraction
                   ) -> list[tuple[int, Fraction]]:
    """The exponential mechanism's weights e^{−x_j} of ``exact_choice.choose``: x_j =
    ε·(u* − u_j)/(2Δ), exact rationals of the utilities (finite doubles)."""
    exponents, denominator = choice_exponents(utilities, sensitivity, epsilon)
    return [(1, Fraction(n, denominator)) for n in exponents]


def choice_exponents(utilities: list[float], sensitivity: Fraction, epsilon: Fraction
                     ) -> tuple[list[int], int]:
    """``choice_weights``' x_j as integers n_j over one denominator d, for
    ``exact_choice.choose_scaled``: each double u_j is A_j/2^q exactly (2^q the largest
    of their denominators), so x_j = (A* − A_j)·ε/(2Δ·2^q), without a Fraction each
    (TPC-H Q15: 10,000 suppliers)."""
    ratios = [u.as_integer_ratio() for u in utilities]
    common = max(den for _, den in ratios)  # powers of two: each divides it
    scaled = [num * (common // den) for num, den in ratios]
    top = max(scaled)
    factor = epsilon.numerator * sensitivity.denominator
    return ([(top - a) * factor for a in scaled],
            2 * epsilon.denominator * sensitivity.numerator * common)


def top_release(plan: QueryPlan, groups: dict[tuple, GroupStats], shift: int,
                rng: RandomSource) -> tuple[list[tuple], list[list[Released]]]:
    """([the chosen key], [[its released SUM]]), or ([], []) without a key; the bound's
    rung already drawn into the groups' ``joint`` (``draw_joint_bounds``)."""
    keys = [key for key in plan.group_keys() if None not in key]
    if not keys:
        return [], []
    index = joint_clipped(plan, shift)[0]
    agg = plan.aggregates[index]
    column = plan.table.columns[agg.column]
    contribution, group_size = Contribution(agg.column), plan.table.group_size
    ladder_rungs = rungs(contribution, column, shift // group_size)
    none, empty = GroupStats(), empty_ladder(ladder_rungs)  # read, each made once
    ladders = [groups.get(key, none).ladders.get(contribution) or empty for key in keys]
    k = next(group.joint[index] for group in groups.values() if index in group.joint)
    sensitivity = choice_sensitivity(ladder_rungs[k], column.lower, column.upper, group_size)
    _, of_choice, of_value = shares(plan.aggregate_loss)
    sign = -1 if plan.post.smallest else 1
    chosen = choose_scaled(*choice_exponents([sign * ladder.clipped[k] for ladder in ladders],
                                             sensitivity, of_choice.epsilon), rng)
    noisy = laplace_real(ladders[chosen].clipped[k], float(sensitivity), of_value.epsilon,
                         rng, grid_step(column.resolution))
    value: Any = signed_sum(noisy.value, column)
    value = round(value) if column.type == "int" else value
    least = "least" if plan.post.smallest else "largest"
    note = (f"SUM: the group of the {least} sum chosen privately (exponential mechanism, a "
            "third of the epsilon) and only its sum released (a third), each unit's values "
            "in scope summed per group and clipped to a bound drawn privately once for the "
            "query (a third; docs/privacy.md §3.18)")
    return [keys[chosen]], [[Released(value, noisy.ci95, MECHANISM, note)]]
