"""SUM and AVG with a clipping bound chosen per query, privately (docs/privacy.md §3.14).

Why: calibrated to the declared domain, a SUM's noise is the domain's scale, not the
data's — cost declared [0, 100,000] with 6 visits a person made the noise of a
department's total 10⁷ against a true 5.8·10⁶. Clipping each unit's contribution (the
sum of its values in scope, in each group) to ±B bounds what one unit can move the
sum by to B, whatever the domain; the bound is chosen from the data, privately, as
Amin et al. (ICML 2019) advise near the contribution about 1/ε from the top.

The mechanism, per group, with the aggregate's part ε of the loss:

1. **Rungs** (public): B_K = c·max(|L|, |U|), the most one unit can contribute (c the
   rows one unit may have in scope: under DP its declared bound; under iDP the data's
   largest, which no neighbour changes: records are modified, not added), halved up to
   20 times while at least the column's resolution: B₀ < … < B_K.
2. **The bound** (exponential mechanism, ε_b = ε/3): rung k with probability
   ∝ exp(−λ·u_k − k/4), λ = ε_b/(2g), u_k = β_k + max(0, t − β_{max(k−2, 0)}),
   t = 14g/ε_b: β_k the units whose contribution lies beyond ±B_k, g the units protected
   together (``group_size``). The second term (evidence) charges a rung more than two
   rungs above the t-th largest contribution for the units it lacks: with −β_k alone
   every rung above the largest contribution looked alike, and the draw spread over
   them up to the domain's end (AVG(income) per region 30 % off in the BI corpus).
   Sensitivity g: one unit's change moves β_k and β_{k−2} the same way, each by ≤ 1,
   and t − β is 1-Lipschitz and non-increasing. The −k/4 is a public prior: a rung up
   doubles the noise (Laplace of scale B/ε_s) and spares the units beyond it, even at
   about g/ε_s units (Amin et al.), λ·g/ε_s = ε_b/(2ε_s) = ¼.
3. **The sum** (Laplace, ε_s = 2ε/3): the contributions clipped to [−B_k, B_k], summed,
   plus Laplace noise of scale g·w_k/ε_s, w_k = B_k when the domain lies on one side of
   0 (contributions in [0, B_k] or [−B_k, 0]), else 2B_k: a neighbour moves g clipped
   contributions, each within an interval of width w_k.

Sequential composition: ε_b + ε_s = ε, in each group; the groups share ε as every DP
aggregate's do (one unit's change touches at most so many groups, §3.5). Whether a
unit was clipped is never shown; the bound is (the 95 % interval tells it), as a
function of the private draw. An empty group draws its bound from the prior alone.

**Across groups** (``joint_clipped``): where one unit's rows may fall in m > 2 groups
(m = min(2s, G), §3.5), each group's part would be ε/m. Instead each unit's vector of
contributions over the groups is clipped in L1 norm: scaled by min(1, B/T_u), T_u the
sum of its |contributions| in every group. The rung is drawn once for the query, as in
step 2 with β_k the units whose T_u lies beyond B_k (a neighbour changes g of them),
but aimed at a public count of units instead (``joint_rule``: a private quantile, the
lowest rung with at most q = 4gG/ε_s of them beyond, twice the count where the clipping
and the noise of G groups balance; the draw takes a fifth of the loss over more than 7
groups, ``joint_share``), and every group's sum gets Laplace
noise of scale g·2B/ε_s: a unit's clipped vector, before and after, has L1 norm at
most B each, so the vector of group sums moves by at most g·2B in L1 (plus the sums'
rounding to 10⁻⁶, G·10⁻⁶ a unit, and each changed group's snapping to the noise's grid,
``joint_sensitivity``). The whole ε goes to one draw and one vector instead of m parts:
about m/2 times less noise. A grouped COUNT in a time window (``windowed_counts``: a
WHERE keeping a time column to at most half its declared domain, a public rule) is the
same with each row's value 1 and a tenth of ε for the draw (docs/privacy.md §3.3).

With Gaussian noise (the zcdp accountant) the parts are of the answer's ρ instead: the
draw takes a third, as the exponential mechanism at the largest ε_b (of six places) with
ε_b²/8 within it (an ε-bounded-range mechanism is ε²/8-zCDP: Cesar and Rogers 2021), the
sum two thirds, as the discrete Gaussian of sensitivity g·w_k; zCDP parts add up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from fractions import Fraction

from proxy.loss import Loss
from proxy.privacy.exact_choice import choose_scaled
from proxy.privacy.mechanisms import (
    Noisy,
    OnGrid,
    gaussian_on_grid,
    grid_step,
    laplace_on_grid,
)
from proxy.privacy.sampler import RandomSource
from proxy.privacy.sensitivity import group_share
from proxy.rules import Column
from proxy.statistics import Contribution, GroupStats, Ladder
from proxy.vocabulary import (
    AVG,
    COUNT,
    EXPONENTIAL,
    GLOBAL,
    PIECEWISE,
    SPREADS,
    SUM,
    UNITS,
    QueryPlan,
    TopChoice,
)

BOUND_SHARE = Fraction(1, 3)  # of a SUM's loss, for its bound (AVG: of its sum's half)
# of a COUNT's clipped across groups (§3.3, "Counts in a window"): its ladder s, s/2, …
# is short and the quantile rule's count q = 2gG/ε_b generous, and the noise, 2gB/ε_s,
# is what a count's error is made of (measured: benchmarks/window_counts.py)
COUNT_SHARE = Fraction(1, 10)
HALVINGS = 20  # rungs below the top: a contribution 10⁶ times below it is still seen
# The draw's public prior per rung up (of one group's sum): the noise a rung adds against
# the units it spares, ε_b/(2ε_s) = 1/4 (Amin et al.: clip about g/ε_s units).
PRIOR = Fraction(1, 4)
# A COUNT's (over a chain: a unit's rows in scope, rungs c down to 1): ½, as first built.
# Where a group holds too few units to inform the draw (TPC-H Q21's suppliers), the
# prior alone decides, and a unit's count is mostly 1, the lowest rung: ¼ spread the
# draw up to c (Q21 at SF 0.1: 218 % → 1,354 %).
COUNT_PRIOR = Fraction(1, 2)
# The draw's evidence term: a rung more than SLACK rungs above the t-th largest
# contribution, t = 2g·SHORTFALL/ε_b, loses λ per unit short of t (at most SHORTFALL =
# e^{−7} of the weight): rungs far above the data are drawn with probability ≤ 21·e^{−7}.
SLACK, SHORTFALL = 2, Fraction(7)
_SQUARABLE = 1e150  # a domain's width whose square, times any rows per unit, is finite
# A sum's rounding (exact_sum: each value to 10⁻⁶) and the doubles' relative error in a
# unit's scaled contributions, allowed for in the joint sensitivity.
ROUNDING, RELATIVE = 1e-6, 1e-9


def laddered(plan: QueryPlan) -> tuple[Contribution, ...]:
    """The contributions the plan's SUM, AVG, STDDEV and VARIANCE (and, over a
    ``unit_via`` chain or a join of protected tables, or grouped in a time window
    (``windowed_counts``), COUNT: power 0, a unit's rows in scope, ``column`` "" for
    COUNT(*); in the window COUNT(DISTINCT unit) too, ``units``) are answered from with
    an automatic bound: under DP or iDP with the global scale (the exponential
    mechanism's plans included, which draw only their percentiles, MAX and MIN), over
    one table or a join (each joined row belongs to the unit of the first table's row:
    the protected joins equate units, §3.13; a unit's contribution is the sum over its
    joined rows) or the relation of per-unit values (one record a unit), on a column
    with a declared domain
    (spreads: one whose squared width a double holds). Not over a table without a
    privacy unit joined to public rows several times (a record's rows would count as
    separate contributions)."""
    if not clippable(plan) or plan.mechanism.scale not in (GLOBAL, EXPONENTIAL, PIECEWISE):
        return ()
    wanted: dict[Contribution, None] = {}
    windowed = windowed_counts(plan)
    counts = chained(plan) or windowed
    for agg in plan.aggregates:
        if agg.kind in (COUNT, UNITS):  # over a chain or a join, or in a window: clipped
            if ((counts if agg.kind == COUNT else windowed) and not plan.public(agg)
                    and not plan.gaussian(agg)):
                wanted[contribution_of(agg, plan)] = None
            continue
        column = plan.table.columns.get(agg.column) if agg.column else None
        if column is None or column.lower is None or column.upper is None:
            continue
        if agg.kind in (SUM, AVG):
            wanted[Contribution(agg.column)] = None
            divisor = average_count(plan, agg)
            if divisor is not None:
                wanted[divisor] = None
        elif agg.kind in SPREADS and (column.upper - column.lower) < _SQUARABLE:
            wanted[Contribution(agg.column, column.lower, 1)] = None
            wanted[Contribution(agg.column, column.lower, 2)] = None
    return tuple(wanted)


def average_count(plan: QueryPlan, agg) -> Contribution | None:
    """The count an AVG over a chain or a join, or grouped in a time window
    (``windowed_counts``), is divided by, clipped as a COUNT(col) there is (power 0: a
    unit's values in scope that are not NULL; in a window on the fine ladder, across
    groups where its sum is, else §3.3's count: ``clipped_divisor``), so that its noise
    is of a typical unit's rows, not of c (TPC-H's 178 line items a customer: Q17's
    per-part averages of about 30 line items came back at the domain's ends; the demo's
    AVG(cost) per day of March erred 55 % in the median, its count's noise of scale
    2s/(ε/4) = 48 against 57 visits a day); None elsewhere (the count of §3.4, or
    Gaussian noise). Without a window the clipped count helps little: per day over two
    years 62 → 85 % in the median, per week 13 → 11 %, per month 3.4 → 3.5 %
    (benchmarks/README.md, "AVG in a window")."""
    if agg.kind != AVG or plan.gaussian(agg):
        return None
    if chained(plan):
        return Contribution(agg.column, power=0)
    return Contribution(agg.column, power=0, fine=True) if windowed_counts(plan) else None


def clipped_divisor(plan: QueryPlan, index: int, joint: Collection[int]
                    ) -> Contribution | None:
    """The clipped count the AVG at ``index`` is divided by (``average_count``), given the
    indexes clipped across groups (``joint_clipped``): on the fine ladder only where its
    sum is clipped across groups (with s = 1 a unit touches at most 2 groups, and §3.3's
    count spends nothing on a draw)."""
    found = average_count(plan, plan.aggregates[index])
    return None if found is None or found.fine and index not in joint else found


def count_slot(index: int) -> int:
    """Where ``GroupStats.joint`` keeps the rung drawn for the count of the AVG at
    ``index`` (``average_count``), beside its sum's at ``index``."""
    return -1 - index


def chained(plan: QueryPlan) -> bool:
    """Whether the plan reads a ``unit_via`` chain or a join of protected tables: its
    COUNTs are clipped per group (§3.14, "COUNT over chains"). Not over per-unit values
    (``proxy.analyze.per_unit``): the join is inside the relation, whose record is the
    unit."""
    return plan.per_unit is None and (plan.table.link is not None
                                      or any(join.protected for join in plan.joins))


def windowed_counts(plan: QueryPlan) -> bool:
    """Whether the plan's COUNTs and COUNT(DISTINCT unit)s over one table read on its
    own unit are clipped across groups (§3.3, "Counts in a window"): under GROUP BY of
    more than 2 public keys that are not the unit's own attributes, on a table with a
    privacy unit that may own more than one row, with a WHERE keeping a time column to
    at most half its declared domain (``QueryPlan.window``), where a unit owns mostly
    one row in scope. Text and rules alone; ``joint_clipped`` clips them only where one
    unit's change may touch more than 2 groups (s > 1), else they keep §3.3's noise."""
    table = plan.table
    return (plan.window and bool(plan.group_by) and not plan.groups_fixed
            and plan.group_count > 2 and table.privacy_unit is not None
            and table.max_rows_per_unit != 1 and not chained(plan))


def contribution_of(agg, plan: QueryPlan) -> Contribution:
    """The contribution a clipped aggregate of ``plan`` reads: a COUNT's, a unit's rows
    in scope (power 0; ``column`` "" for COUNT(*)); a COUNT(DISTINCT unit)'s, 1 where the
    unit has rows in the group's scope; in a window (``windowed_counts``) either on the
    window's ladder; a SUM's or AVG's, its values."""
    if agg.kind not in (COUNT, UNITS):
        return Contribution(agg.column)
    return Contribution("" if agg.kind == UNITS else agg.column or "", power=0,
                        units=agg.kind == UNITS, fine=windowed_counts(plan))


def bound_share(agg) -> Fraction:
    """The share of a clipped aggregate's loss its bound is drawn with: a COUNT across
    groups a tenth (``COUNT_SHARE``; COUNT(DISTINCT unit) too), the rest a third."""
    return COUNT_SHARE if agg.kind in (COUNT, UNITS) else BOUND_SHARE


# The share of a SUM's (AVG's sum's) loss a bound drawn once for more than MANY_GROUPS
# groups takes (``joint_share``), and that G.
MANY_SHARE, MANY_GROUPS = Fraction(1, 5), 7


def joint_share(group_count: int) -> Fraction:
    """The share of a SUM's (AVG's sum's) loss its bound drawn once for G groups takes
    (``draw_joint_bounds``, L1; a ``TopChoice``'s keeps a third): a fifth where G > 7, else
    a third. The draw aims at a count q = 4gG/ε_s of units that grows with G, so over
    many groups it tells the rungs apart with less of the loss, while the sums' noise,
    2gB/ε_s in each group, is the answer's error: a fifth instead of a third makes it 6/5
    narrower. Chosen by the exact law over the draw and the noise (benchmarks/
    joint_bounds.py's queries on the demo and the 10,000 people over 8 to 40 weeks of
    tests/privacy/test_contribution_bounds.py, at ε 1 and 0.1; benchmarks/README.md "The
    joint draw's share"): against a third, a quarter and 7/(2G + 7) it gave the least
    expected error in every scope but two useless ones, within 0.5 point there
    (SUM(cost) per month of 2023 at ε 1 2.53 → 2.18 %, all twelve months within 10 % in
    83 → 92 % of answers; per week 11.0 → 9.2 %; per week of 40 at ε 0.1 24.3 → 20.5 %).
    Not over 7 groups or fewer (departments): there a
    fifth halved the chance that every group of few units lies within 10 % (300 people
    per department at ε 1 0.75 → 0.52), the draw then reading few units. Even a tenth
    pulled scopes of few units over many groups to the lowest rungs (300 people per
    month at ε 1 47 → 99 %). A function of G: public."""
    return MANY_SHARE if group_count > MANY_GROUPS else BOUND_SHARE


def joint_bound_share(plan: QueryPlan, agg) -> Fraction:
    """The share of a jointly clipped aggregate's (sum's) loss its bound is drawn with,
    the rest its noise's: a COUNT's a tenth (``COUNT_SHARE``), a ``TopChoice``'s a third
    (its thirds, top_choice.py), a SUM's or AVG's ``joint_share`` of the groups."""
    if agg.kind in (COUNT, UNITS) or isinstance(plan.post, TopChoice):
        return bound_share(agg)
    return joint_share(plan.group_count)


def ladders_alone(plan: QueryPlan, shift: int) -> bool:
    """Whether every aggregate of the plan is answered from its ladders alone at the
    shift s: a SUM of a laddered contribution (``_release_clipped`` reads no count or
    sum of the rows), an AVG over a chain or a join (its count laddered too:
    ``average_count``) or a COUNT over a chain or a join (``_clipped_count``) or in a
    window clipped across groups (``joint_clipped``: in a window with s ≤ 1 it keeps
    §3.3's noise of the true count), on the global scale (no draws, smooth
    sensitivities nor private levels, which read the statistics after them). The
    statistics pass is then read by nothing, and not run (TPC-H Q06, Q14, Q19: a second
    scan of the line items beside the ladders' statement; Q04: the orders' counts per
    priority)."""
    mechanism = plan.mechanism
    if mechanism.exponential or mechanism.local or mechanism.scale != GLOBAL:
        return False
    wanted = laddered(plan)
    joint = joint_clipped(plan, shift)
    return bool(wanted) and all(
        Contribution(agg.column) in wanted if agg.kind == SUM else
        Contribution(agg.column) in wanted and clipped_divisor(plan, index, joint) in wanted
        if agg.kind == AVG else
        agg.kind in (COUNT, UNITS) and not plan.public(agg)
        and (chained(plan) and agg.kind == COUNT or not chained(plan) and index in joint)
        and contribution_of(agg, plan) in wanted
        for index, agg in enumerate(plan.aggregates))


def clippable(plan: QueryPlan) -> bool:
    """Whether the plan's contributions may be clipped to a privately drawn bound: DP or
    iDP (not a prior's refinement, nor one unit's value), without per-unit subqueries,
    and not over a table without a privacy unit joined to public rows several times (a
    record's rows would count as separate contributions). ``laddered`` asks this and the
    global scale; CORR and its kin (privacy/correlation.py) this alone."""
    mechanism = plan.mechanism
    return not (mechanism.model not in ("dp", "idp") or mechanism.prior is not None
                or mechanism.individual
                or (plan.table.privacy_unit is None and plan.multiplicity > 1))


def rungs(contribution: Contribution, column: Column | None, rows_per_unit: int
          ) -> tuple[float, ...]:
    """The public ladder of ``contribution`` of ``column`` (its declared domain, as
    the WHERE narrows it (``key_restriction.narrowed_domains``), down to its end nearer
    the origin where both ends lie on one side, and resolution; a count's: none, its
    rungs rows_per_unit down to 1, halved; a count in a window's, those and every power
    of two up to rows_per_unit: most units own one or two rows in scope, and the rung
    at 1 counts each of them whole) for units of at most ``rows_per_unit`` rows,
    ascending."""
    if contribution.power == 2:  # the squares of the first power's rungs (moments)
        return tuple(bound * bound for bound in rungs(
            Contribution(contribution.column, contribution.origin), column, rows_per_unit))
    if contribution.fine:  # and every power of two: 1, 1.5, 2, 3, 4, 6 for c = 6
        halving = rungs(Contribution("", power=0), None, rows_per_unit)
        return tuple(sorted({*halving, *(2.0 ** k for k in range(HALVINGS + 1)
                                         if 2 ** k <= rows_per_unit)}))
    if contribution.power == 0 or column is None:
        top, floor = float(rows_per_unit), 1.0
    else:
        reach = max(abs(column.lower - contribution.origin),
                    abs(column.upper - contribution.origin))
        # a domain on one side of the origin: every unit in scope with a value
        # contributes at least its nearer end, and a rung below that clips them all
        nearest = max(column.lower - contribution.origin,
                      contribution.origin - column.upper, 0)
        top, floor = rows_per_unit * reach, max(column.resolution, nearest)
    if top <= 0:
        return (0.0,)
    ladder = [top]
    while len(ladder) <= HALVINGS and ladder[-1] / 2 >= floor and ladder[-1] / 2 > 0:
        ladder.append(ladder[-1] / 2)
    return tuple(reversed(ladder))


def empty_ladder(ladder_rungs: tuple[float, ...]) -> Ladder:
    """The ladder of a group with no rows in scope."""
    return Ladder(ladder_rungs, (0,) * len(ladder_rungs), (0.0,) * len(ladder_rungs))


def clipped_sum(ladder: Ladder, loss: Loss, group_size: int, lower: float, upper: float,
                resolution: float, rng: RandomSource, confidence: float = 0.95,
                gaussian: bool = False, prior: Fraction = PRIOR, *,
                kept: dict | None = None) -> tuple[Noisy, int]:
    """(the noisy clipped sum, the rung drawn) for one group: steps 2 and 3 above, of the
    loss's ε, or of its ρ where the sum's noise is Gaussian (``kept``: ``sum_at``'s)."""
    alike = None if kept is None else kept.get(_DRAW)
    if alike is None:
        of_bound, of_sum = loss.split(BOUND_SHARE, 1 - BOUND_SHARE, by_rho=gaussian)
        epsilon = bounded_range_epsilon(of_bound.rho) if gaussian else of_bound.epsilon
        alike = (of_sum, _exponent_scale(epsilon, group_size, prior, Fraction(0), SHORTFALL))
        if kept is not None:
            kept[_DRAW] = alike
    of_sum, scale = alike
    k = choose_scaled(*_exponents(ladder.beyond, scale, True, SLACK), rng)  # ``draw_rung``
    return sum_at(ladder, k, of_sum, group_size, lower, upper, resolution, rng,
                  confidence, gaussian, kept=kept), k


def draw_rung(beyond: tuple[int, ...], epsilon: Fraction, group_size: int,
               rng: RandomSource, prior: Fraction = PRIOR, evidence: bool = True) -> int:
    """Step 2: rung k with probability ∝ e^{−x_k} (``rung_weights``)."""
    return choose_scaled(*rung_exponents(beyond, epsilon, group_size, prior, evidence), rng)


def rung_weights(beyond: tuple[int, ...], epsilon: Fraction, group_size: int,
                 prior: Fraction = PRIOR, evidence: bool = True, *,
                 allowance: Fraction = Fraction(0), shortfall: Fraction = SHORTFALL,
                 slack: int = SLACK) -> list[tuple[int, Fraction]]:
    """Step 2's weights e^{−x_k} (``exact_choice.choose``): x_k = max(0, λ·β_k −
    allowance) + prior·k, λ = ε/(2g), plus with ``evidence`` the shortfall max(0,
    shortfall − λ·β_{max(k − slack, 0)}) = λ·max(0, t − β_{k−slack}), t =
    2g·shortfall/ε: a rung more than ``slack`` rungs above the t-th largest contribution
    is penalised as though it clipped the units it lacks (utility −(max(0, β_k − q) +
    max(0, t − β_{k−slack})), q = allowance/λ the units a rung may clip for free,
    sensitivity g: §3.14). By default (no allowance, SHORTFALL, SLACK) the per-group
    draw; ``joint_rule`` the one across groups."""
    exponents, denominator = rung_exponents(beyond, epsilon, group_size, prior, evidence,
                                            allowance=allowance, shortfall=shortfall,
                                            slack=slack)
    return [(1, Fraction(n, denominator)) for n in exponents]


def rung_exponents(beyond: tuple[int, ...], epsilon: Fraction, group_size: int,
                   prior: Fraction = PRIOR, evidence: bool = True, *,
                   allowance: Fraction = Fraction(0), shortfall: Fraction = SHORTFALL,
                   slack: int = SLACK) -> tuple[list[int], int]:
    """``rung_weights``' x_k as integers n_k over one denominator d (x_k = n_k/d), for
    ``exact_choice.choose_scaled``: the same rationals without a Fraction each (a draw
    per group: TPC-H Q21's 10,000)."""
    return _exponents(beyond, _exponent_scale(epsilon, group_size, prior, allowance,
                                              shortfall), evidence, slack)


def _exponent_scale(epsilon: Fraction, group_size: int, prior: Fraction,
                    allowance: Fraction, shortfall: Fraction) -> tuple[int, ...]:
    """``rung_exponents``' one denominator d and λ, the allowance, the prior and the
    shortfall over it: alike in every group of a release (``clipped_sum``'s ``kept``)."""
    d = math.lcm(epsilon.denominator * 2 * group_size, allowance.denominator,
                 prior.denominator, shortfall.denominator)
    return (d, epsilon.numerator * (d // (epsilon.denominator * 2 * group_size)),
            allowance.numerator * (d // allowance.denominator),
            prior.numerator * (d // prior.denominator),
            shortfall.numerator * (d // shortfall.denominator))


def _exponents(beyond: tuple[int, ...], scale: tuple[int, ...], evidence: bool,
               slack: int) -> tuple[list[int], int]:
    d, lam, allow, step, short = scale
    exponents = []
    for index, count in enumerate(beyond):
        n = max(0, lam * count - allow) + step * index
        if evidence:
            n += max(0, short - lam * beyond[max(index - slack, 0)])
        exponents.append(n)
    return exponents, d


_DRAW = "draw"  # ``clipped_sum``'s kept loss part and exponents' scale (its rungs: ints)


def joint_prior(group_count: int) -> Fraction:
    """The public prior per rung of a bound drawn for G groups at once where one group's
    sum alone is released (a ``TopChoice``'s L∞ bound, top_choice.py): min(G/2, 4).
    A rung twice as high doubles the noise in each of G groups, while a clipped unit's
    loss is spread over its groups, so the draw should need about G times as many
    spared units to go up as for one sum (where the prior is 1/2); capped at 4 so that
    a query of few units over many groups is not pulled to the lowest rungs (answers
    near 0). Until 2026-11-28 the L1 draw's too (``joint_rule``)."""
    return min(Fraction(group_count, 2), Fraction(4))


# The L1 draw across groups (``joint_rule``): its prior per rung, and the evidence term's
# reach (a rung is charged for the units short of t beyond the rung just below it).
JOINT_PRIOR, JOINT_SLACK = Fraction(1), 1


def joint_rule(group_count: int, share: Fraction | None = None) -> dict:
    """``rung_weights``' public parameters for a bound drawn once for G groups whose
    every sum is released (L1, ``draw_joint_bounds``): a private quantile. The error of
    the G sums, clipping plus noise, Σ_u (T_u − B)⁺ + G·2gB/ε_s, falls as B rises while
    more than 2gG/ε_s totals lie beyond B, then rises (Amin et al.'s balance, over G
    groups); q = twice that, 4gG/ε_s = 2gG/ε_b units (ε_s = 2ε_b), may be clipped for
    free (allowance λ·q = G), and a rung is charged for the units short of t = max(q,
    2g·SHORTFALL/ε_b) beyond the rung below it (shortfall λ·t = max(G, 7)): utility
    max(0, β_k − q) + max(0, t − β_{k−1}), 0 at the lowest rung with at most q totals
    beyond it when at least t lie beyond the rung below; prior 1 a rung, which breaks
    ties downwards where the units are too few to inform the draw. Public: G and the
    constants (q and t in λ's scale, λq = G: ε and g cancel). ``share``: the draw's
    share of the loss where it is not a third (counts in a window, ``COUNT_SHARE``):
    q = 4gG/ε_s still, λq = 2G·ε_b/ε_s (2G/9), so that a draw with a tenth of ε does not
    allow five times the clipped units."""
    allowance = Fraction(group_count) if share is None else 2 * group_count * share / (1 - share)
    return {"prior": JOINT_PRIOR, "allowance": allowance,
            "shortfall": max(allowance, SHORTFALL), "slack": JOINT_SLACK}


def joint_clipped(plan: QueryPlan, shift: int) -> tuple[int, ...]:
    """The indexes of the plan's SUM and AVG (and COUNT in a window,
    ``windowed_counts``, or over a chain or a join) whose units are clipped across
    groups (L1,
    above): clipped (``laddered``), under GROUP BY with a privacy unit, Laplace noise,
    where one unit's change may touch more than 2 groups (below that, per group is
    cheaper: a one-signed sum moves by B in each of m ≤ 2 groups, the joint one by 2B).
    A function of the plan and of s, which no neighbour changes. Under a ``TopChoice``
    (one group chosen, its sum alone released: ``top_choice.py``) each group's part is
    clipped on its own, its bound drawn once from each unit's largest part (L∞)."""
    if isinstance(plan.post, TopChoice):
        clipped = laddered(plan)
        return tuple(index for index, agg in enumerate(plan.aggregates)
                     if agg.kind == SUM and Contribution(agg.column) in clipped)
    if (not plan.group_by or plan.table.privacy_unit is None
            or group_share(plan, shift) <= 2):
        return ()
    clipped, counts = laddered(plan), windowed_counts(plan) or chained(plan)
    return tuple(index for index, agg in enumerate(plan.aggregates)
                 if (agg.kind in (SUM, AVG) or agg.kind == COUNT and counts
                     or agg.kind == UNITS and units_clipped(plan, shift))
                 and not plan.gaussian(agg) and contribution_of(agg, plan) in clipped)


def ladder_reads(plan: QueryPlan, indexes: tuple[int, ...]
                 ) -> tuple[tuple[Contribution, ...], frozenset[Contribution]]:
    """The contributions the bucketed statement reads, given the aggregates clipped
    across groups (``indexes``, ``joint_clipped``), and those of them clipped across
    groups (each such aggregate's, and an AVG's count). A count on the fine ladder is
    read only where it is clipped across groups: elsewhere §3.3's noise reads the
    statistics' plain count."""
    joint = frozenset(contribution for index in indexes for contribution in (
        contribution_of(plan.aggregates[index], plan),
        average_count(plan, plan.aggregates[index])) if contribution is not None)
    return tuple(contribution for contribution in laddered(plan)
                 if not contribution.fine or contribution in joint), joint


def units_clipped(plan: QueryPlan, shift: int) -> bool:
    """Whether a COUNT(DISTINCT unit) in a window (``windowed_counts``) is clipped across
    groups at the shift s: where its own noise, of scale g·min(2s, G)/ε a group (one
    unit's s records may leave s groups and join s others, §3.3), is wider than the
    clipped form's at the halving ladder's second rung B₁ (c, c/2, … ≥ 1: 3 for c = 6),
    2g·B₁/ε_s with ε_s = 9ε/10. Unlike a COUNT's rows (§3.3's 2s/ε whatever G), distinct
    units over a few groups are already counted once a group: per department in a
    half-year window the clipped form errs 0.34 % against 0.24 %, per day 8 % against
    30 % (benchmarks/window_counts.py --distinct). Public: s, G and the ladder."""
    ladder = rungs(Contribution("", power=0), None,  # the halving one: c, c/2, …
                   shift // plan.table.group_size)
    return (windowed_counts(plan) and len(ladder) > 1
            and min(2 * shift, plan.group_count) * (1 - COUNT_SHARE)
            > 2 * plan.table.group_size * ladder[1])


def sum_loss(plan: QueryPlan, agg) -> tuple[Loss | None, Loss]:
    """(the count's part, the clipped sum's part) of a jointly clipped aggregate's whole
    loss: SUM and COUNT (none, all of it); AVG a quarter and three quarters."""
    loss = plan.aggregate_loss
    return loss.split(1, 3) if agg.kind == AVG else (None, loss)


def draw_joint_bounds(plan: QueryPlan, indexes: tuple[int, ...], shift: int,
                      groups: dict[tuple, GroupStats], rng: RandomSource) -> None:
    """Step 2 once for all groups, for each aggregate of ``indexes`` (``joint_clipped``):
    β_k summed over the groups (the statement counts each unit in one group,
    ``first``), drawn by ``joint_rule`` (a ``TopChoice``'s L∞ bound: the per-group
    utility with ``joint_prior``), the rung recorded in every group's ``joint``."""
    top = isinstance(plan.post, TopChoice)
    for index in indexes:
        agg = plan.aggregates[index]
        of_count, of_sum = sum_loss(plan, agg)
        share = joint_bound_share(plan, agg)
        draws = [(index, contribution_of(agg, plan), of_sum.split(share, 1 - share)[0],
                  share)]
        divisor = average_count(plan, agg)
        if divisor is not None:  # its count across groups too, as a COUNT's
            draws.append((count_slot(index), divisor,
                          of_count.split(COUNT_SHARE, 1 - COUNT_SHARE)[0], COUNT_SHARE))
        for slot, contribution, of_bound, drawn_with in draws:
            ladder_rungs = rungs(contribution, plan.table.columns.get(agg.column or ""),
                                 shift // plan.table.group_size)
            beyond = [sum(counts) for counts in zip(  # rung by rung (Q15: 10,000 groups)
                [0] * len(ladder_rungs), *(group.ladders[contribution].beyond
                                           for group in groups.values()
                                           if contribution in group.ladders))]
            # each draw aimed with its own share of the loss (a count's tenth over a chain
            # as in a window: with a third's rule it let 4.5 times the units be clipped)
            rule = {"prior": joint_prior(plan.group_count)} if top and not contribution.fine \
                else joint_rule(plan.group_count, drawn_with)
            k = choose_scaled(*rung_exponents(
                tuple(beyond), of_bound.epsilon, plan.table.group_size, **rule), rng)
            for key in plan.group_keys():
                GroupStats.of(groups, key).joint[slot] = k


def joint_sum_at(ladder: Ladder, k: int, loss: Loss, group_size: int, group_count: int,
                 resolution: float, rng: RandomSource, confidence: float = 0.95,
                 share: Fraction = BOUND_SHARE, *, shift: int, kept: dict | None = None
                 ) -> Noisy:
    """Step 3 of a jointly clipped sum, in one group: Laplace of scale Δ/ε_s, Δ the L1
    sensitivity of the vector of group sums (``joint_sensitivity``), ε_s the rest of the
    sum's loss once the bound's ``share`` is taken (two thirds; a COUNT's nine tenths).
    ``kept``: the noise of each rung worked out once for every group of one release
    (``noise_at``)."""
    known = None if kept is None else kept.get(k)  # ``noise_at``, without a closure
    if known is not None:
        return known.release(ladder.clipped[k], rng)

    def noise() -> OnGrid:
        of_sum = loss.split(share, 1 - share)[1]
        step = grid_step(resolution)
        sensitivity = joint_sensitivity(ladder.rungs[k], group_size, group_count, shift,
                                        step)
        return laplace_on_grid(sensitivity, of_sum.epsilon, step, confidence)
    return noise_at(kept, k, noise).release(ladder.clipped[k], rng)


def noise_at(kept: dict | None, k: int, noise: Callable[[], OnGrid]) -> OnGrid:
    """Rung k's noise, from ``kept`` where an earlier group of the same release (the
    same aggregate, loss, ladder and confidence: only the rung differs) worked it out,
    else ``noise()`` (kept there). The same calls of the sampler either way; the rungs
    are public and the one drawn is released with the bound, so what is kept tells
    nothing a release does not."""
    known = None if kept is None else kept.get(k)
    if known is None:
        known = noise()
        if kept is not None:
            kept[k] = known
    return known


def joint_sensitivity(bound: float, group_size: int, group_count: int, shift: int,
                      step: float) -> float:
    """Δ of the vector of G group sums clipped across groups at B, sampled on the grid Λ
    = ``step``: g·(2B(1 + 10⁻⁹) + G·10⁻⁶) (g units' clipped vectors of L1 norm ≤ B each,
    before and after, and each scaled contribution's rounding), plus (m − 1)·Λ, m =
    min(2s, G) the groups whose sum a neighbour can change (s = c·g rows, each in one
    group before and one after): ``laplace_real`` snaps each group's sum to the grid
    (±Λ/2) and allows one step for it, so the snapped vector moves by at most Δ/Λ + m
    steps, which ⌈(Δ + (m − 1)Λ)/Λ⌉ + 1 covers (docs/privacy.md §3.14, "Across
    groups")."""
    touched = min(2 * shift, group_count)
    return (group_size * (2 * bound * (1 + RELATIVE) + group_count * ROUNDING)
            + (touched - 1) * step)


def bounded_range_epsilon(rho: Fraction) -> Fraction:
    """The largest ε of six places whose exponential mechanism is within ρ-zCDP
    (ε²/8 ≤ ρ: ε ≤ √(8ρ), rounded down)."""
    return Fraction(math.isqrt(math.floor(8 * rho * 10 ** 12)), 10 ** 6)


def clip_width(bound: float, lower: float, upper: float) -> float:
    """w_k: how far one unit's contribution clipped to ±B moves a sum: B where the
    domain lies on one side of 0 (its contributions share a sign), else 2B."""
    return bound if lower >= 0 or upper <= 0 else 2 * bound


def sum_at(ladder: Ladder, k: int, loss: Loss, group_size: int, lower: float, upper: float,
           resolution: float, rng: RandomSource, confidence: float = 0.95,
           gaussian: bool = False, *, kept: dict | None = None) -> Noisy:
    """The contributions clipped to rung k (a public or already drawn choice) with
    Laplace noise of scale g·w_k/ε (step 3), or the discrete Gaussian at the loss's ρ
    (``kept``: as ``joint_sum_at``'s)."""
    def noise() -> OnGrid:
        width = clip_width(ladder.rungs[k], lower, upper)
        if gaussian:
            return gaussian_on_grid(group_size * width, loss.rho, grid_step(resolution),
                                    confidence)
        return laplace_on_grid(group_size * width, loss.epsilon, grid_step(resolution),
                               confidence)
    return noise_at(kept, k, noise).release(ladder.clipped[k], rng)


def bound_note(rows_per_unit: int, table_has_unit: bool, gaussian: bool = False) -> str:
    """What a release says of its bound: the same text in every group (the bound drawn
    follows from the 95 % bound)."""
    whose = "each unit's values in scope, summed," if table_has_unit and rows_per_unit > 1 \
        else "each value"
    return (f"{whose} clipped to a bound drawn privately per group from a public ladder "
            f"with a third of the {'rho' if gaussian else 'epsilon'} (docs/privacy.md §3.14)")


def joint_note(rows_per_unit: int, share: Fraction = BOUND_SHARE) -> str:
    """What a jointly clipped release says of its bound (the same in every group), drawn
    with ``share`` of the (sum's) epsilon (``joint_share``: public)."""
    whose = "each unit's values in scope, summed per group," if rows_per_unit > 1 \
        else "each unit's value"
    return (f"{whose} clipped to a bound drawn privately once for the query from a public "
            f"ladder with {share_words(share)} of the epsilon, as their total over the "
            "groups (docs/privacy.md §3.14)")


def share_words(share: Fraction) -> str:
    """"a third", "a fifth", else the fraction ("7/31")."""
    words = {Fraction(1, 3): "a third", Fraction(1, 4): "a quarter",
             Fraction(1, 5): "a fifth", Fraction(1, 10): "a tenth"}
    return words.get(share, f"{share.numerator}/{share.denominator}")
