"""The automatic clipping bound of SUM and AVG (proxy/privacy/contribution_bounds.py),
by brute force: for small data sets (units of several records, ties, bounds, NaN, ±inf,
overflow-sized values, records leaving the scope and moving between groups, group size
g > 1) and every neighbour, no rung's count of units beyond ±B_k moves by more than g
(the exponential mechanism's utility sensitivity) and no rung's clipped sum by more
than g·w_k (the Laplace noise's scale numerator); both reached. Clipped across groups
(L1), no rung's count of units whose total lies beyond B_k moves by more than g, nor
its vector of group sums by more than g·2B_k in L1; both reached; as the bucketed
statement releases them (each unit's share of its total rounded toward 0 once), by no
more than the engine's g·(2B_k(1 + 10⁻⁹) + G·10⁻⁶). The draw's utility
−(max(0, β_k − q) + max(0, t − β_{k−slack})) moves by at most g per rung, per group
(q = 0) and across groups (the L1 draw's private quantile, q > 0), reached, and the draw's
log-probability of every rung by at most ε_b. The
backend's statement computes the reference's numbers
(tests/privacy/test_contribution_bounds.py); the counts' bound is reached."""

from __future__ import annotations

import functools
import math
import operator
from fractions import Fraction

import pytest

from proxy.privacy.contribution_bounds import (
    PRIOR,
    RELATIVE,
    ROUNDING,
    SHORTFALL,
    joint_prior,
    joint_rule,
    joint_share,
    rung_weights,
    rungs,
)
from proxy.privacy.variance import (
    centred_sensitivity,
    centred_square_sum,
    square_bound,
    unit_square_sensitivity,
)
from proxy.rules import Column
from proxy.statistics import Contribution
from tests.privacy.harness import (
    EXTREME,
    GRID,
    LOWER,
    SETTINGS,
    UPPER,
    Record,
    assert_sound,
    datasets,
    modifying,
)
from tests.privacy.reference import joint_ladder_of, normalise, released_joint_ladder_of

TWO_SIDED = (-5.0, 5.0)
NARROWED = (2.0, UPPER)  # [LOWER, UPPER] as `WHERE x >= 2` leaves it
SIGNED_GRID = [-5.0, -2.0, 0.0, 1.5, 5.0]


def ladder_of(records: list[Record], lower: float, upper: float, ladder: tuple[float, ...],
              groups: int, contribution: Contribution) -> dict:
    """(group, k, "beyond" | "clipped") -> the number, as the backend computes it: each
    unit's (x − origin)^power of its normalised values x in scope summed per group
    (none: 0), then counted beyond ±B_k and clipped to [−B_k, B_k]. (The brute force
    calls it hundreds of thousands of times: the units are sorted into their groups in
    one pass, and the keys made once per shape; the same sums in the same order.)"""
    origin, power = contribution.origin, contribution.power
    sums: dict[tuple[int, object], float] = {}
    for record in records:
        if record.in_scope:
            value = normalise(record.value, lower, upper)
            if value is not None:
                key = (record.group, record.unit)
                sums[key] = sums.get(key, 0.0) + (value - origin) ** power
    totals: dict[int, list[float]] = {group: [] for group in range(groups)}
    for (group, _), total in sums.items():
        if group in totals:
            totals[group].append(total)
    numbers = []
    for mine in totals.values():
        # by |x|, each rung taking in the values up to it (the ladder rises): those
        # beyond count, and clip to ±B_k by their sign
        mine.sort(key=abs)
        size = len(mine)
        within, inside, signs = 0, 0.0, sum(1 if x > 0 else -1 if x < 0 else 0 for x in mine)
        for bound in ladder:
            while within < size and abs(mine[within]) <= bound:
                x = mine[within]
                inside += x
                signs -= 1 if x > 0 else -1 if x < 0 else 0
                within += 1
            numbers += (size - within, inside + signs * bound)
    return dict(zip(_ladder_keys(groups, len(ladder)), numbers))


@functools.cache
def _ladder_keys(groups: int, rungs: int) -> tuple:
    """ladder_of's keys in its order: by group, rung, then "beyond" and "clipped"."""
    return tuple((group, k, part) for group in range(groups) for k in range(rungs)
                 for part in ("beyond", "clipped"))


def changes(before: dict, after: dict) -> dict:
    """|Δ| of each number of two answers of one statistic (ladder_of's, or the tests' own
    built from it): their keys come in one order."""
    return dict(zip(before, map(abs, map(operator.sub, after.values(), before.values()))))


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("domain,origin,power", [((LOWER, UPPER), 0.0, 1), (TWO_SIDED, 0.0, 1),
                                                 (TWO_SIDED, -5.0, 1), (TWO_SIDED, -5.0, 2),
                                                 (NARROWED, 0.0, 1)])
@pytest.mark.parametrize("groups", [1, 2])
def test_each_rung_moves_within_its_sensitivity(units, rows, group_size, domain, origin, power,
                                                groups):
    """SUM's contributions (origin 0) on a one- and a two-sided domain, and the moments'
    (origin L, x − L and (x − L)², one-sided by construction); and on a domain a WHERE
    narrowed to [2, U] (``key_restriction.narrowed_domains``), whose ladder stops at its
    nearer end 2: every value in scope clamped into it, each record in or out of scope
    whatever its value (a neighbour moves it across the WHERE)."""
    lower, upper = domain
    contribution = Contribution("x", origin, power)
    ladder = rungs(contribution, Column("x", "float", lower, upper, declared_resolution=0.5),
                   rows)
    grid = GRID if lower >= 0 else SIGNED_GRID
    one_sided = lower >= origin or upper <= origin
    width = {k: bound if one_sided else 2 * bound for k, bound in enumerate(ladder)}
    data = [[r._replace(value=(r.value if r.value not in GRID else
                               grid[GRID.index(r.value) % len(grid)]))
             for r in records] for records in datasets(11 + rows, 12, units, rows, groups)]
    bounds = {(group, k, part): group_size * (1 if part == "beyond" else width[k])
              for group in range(groups) for k in range(len(ladder))
              for part in ("beyond", "clipped")}
    outcomes = assert_sound(lambda records: ladder_of(records, lower, upper, ladder, groups,
                                                      contribution),
                            lambda records: bounds, data,
                            modifying(grid + EXTREME, group_size, groups), change=changes)
    # the counts' bound is reached (but the top rung's: no contribution lies beyond the
    # largest one); a clipped sum's is where a unit goes from one clip to the other
    for (group, k, part), bound in bounds.items():
        if part == "beyond" and k < len(ladder) - 1:
            reached = max(outcome.worst[group, k, part] for outcome in outcomes)
            assert reached >= bound - 1e-9, ((group, k, part), reached, bound)


def l1_changes(before: dict, after: dict) -> dict:
    """A count's |Δ|, a vector's L1 change."""
    return {key: abs(after[key] - before[key]) if key[1] == "beyond" else
            sum(map(abs, map(operator.sub, after[key], before[key]))) for key in before}


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("domain,released", [((LOWER, UPPER), False), (TWO_SIDED, False),
                                             (TWO_SIDED, True)])  # released: either sign
@pytest.mark.parametrize("groups", [3])
def test_contributions_clipped_across_groups_move_within_2b(units, rows, group_size, domain,
                                                           groups, released):
    """A unit's vector of contributions, scaled to a total of at most B before and
    after, moves the groups' clipped sums by at most 2B in L1 (g units: 2gB), whatever
    the domain's sign: all of it may leave one group for another. As released (each
    unit's share rounded toward 0 once, each whole contribution to 10⁻⁶), within the
    engine's calibration g·(2B(1 + 10⁻⁹) + G·10⁻⁶) (``joint_sum_at``)."""
    lower, upper = domain
    ladder = rungs(Contribution("x"), Column("x", "float", lower, upper,
                                             declared_resolution=0.5), rows)
    grid = GRID if lower >= 0 else SIGNED_GRID
    data = [[r._replace(value=(r.value if r.value not in GRID else
                               grid[GRID.index(r.value) % len(grid)]))
             for r in records] for records in datasets(31 + rows, 10, units, rows, groups)]
    bounds = {(k, part): group_size * (1 if part == "beyond" else 2 * bound)
              for k, bound in enumerate(ladder) for part in ("beyond", "clipped")}
    if released:
        bounds = {(k, part): group_size * (1 if part == "beyond" else
                                           2 * bound * (1 + RELATIVE) + groups * ROUNDING)
                  for k, bound in enumerate(ladder) for part in ("beyond", "clipped")}
    statistic = released_joint_ladder_of if released else joint_ladder_of
    outcomes = assert_sound(lambda records: statistic(records, lower, upper, ladder, groups),
                            lambda records: bounds, data,
                            modifying(grid + EXTREME, group_size, groups), change=l1_changes)
    reached = {key: max(outcome.worst[key] for outcome in outcomes) for key in bounds}
    for k in range(len(ladder) - 1):  # the top rung clips nothing: its count never moves
        assert reached[k, "beyond"] >= group_size - 1e-9, (k, reached)
    # 2gB where the data sets hold g units whose totals reach B (at some rung, at least)
    # (released: less each unit's rounding, below 10⁻⁶ a group)
    assert any(reached[k, "clipped"] >= group_size * 2 * bound
               - (group_size * groups * ROUNDING if released else 0) - 1e-9
               for k, bound in enumerate(ladder)), reached


@functools.cache
def engine_utilities(beyond: tuple[int, ...], epsilon: Fraction, group_size: int,
                     rule: tuple) -> tuple[Fraction, ...]:
    """The utility the engine's weights e^{−x_k} (``rung_weights`` with the ``rule``'s
    parameters, as ``dict(rule)``) draw with, negated: (x_k − prior·k)/λ, λ = ε/(2g) —
    max(0, β_k − q) + max(0, t − β_{max(k − slack, 0)}), q = allowance/λ (0 per group),
    t = 2g·shortfall/ε."""
    lam, prior = epsilon / (2 * group_size), dict(rule)["prior"]
    return tuple(float((x - prior * k) / lam) for k, (_, x) in
                 enumerate(rung_weights(beyond, epsilon, group_size, **dict(rule))))


@functools.cache
def log_odds(beyond: tuple[int, ...], epsilon: Fraction, group_size: int,
             rule: tuple) -> tuple[float, ...]:
    """log P(rung k) of the engine's weights (``rung_weights``), for each k."""
    x = [float(weight) for _, weight in rung_weights(beyond, epsilon, group_size,
                                                     **dict(rule))]
    low = min(x)
    total = math.log(sum(math.exp(low - v) for v in x))
    return tuple(low - v - total for v in x)


# what a neighbour's records may hold here: both bounds, a value between, NaN, ±inf and
# an overflow-sized one (the counts depend on a unit's clamped total alone)
DRAW_VALUES = [0.0, 3.5, 10.0, float("nan"), float("inf"), float("-inf"), 1e308]


@pytest.mark.parametrize("units,rows,group_size", [*SETTINGS, (3, 3, 1)])
@pytest.mark.parametrize("domain", [(LOWER, UPPER), TWO_SIDED])
@pytest.mark.parametrize("joint", [False, True])
def test_the_draws_utility_moves_within_g(units, rows, group_size, domain, joint):
    """Per group and across groups (each unit's total over the two groups), units of up
    to three records: β_k and
    β_{k−slack} move the same way for each unit (a contribution that crosses the higher
    rung crosses the lower one too, or lay between them), β − q is 1-Lipschitz and
    non-decreasing, t − β 1-Lipschitz and non-increasing, so the utility moves by at
    most one per unit: g, reached; read from the engine's weights at ε_b = 2g·7/t for
    evidence counts t of 1 to 3 (which bite on these data sets), per group with its
    prior, across groups with a ``TopChoice``'s (L∞: the per-group utility, its prior
    ``joint_prior``) and with the L1 draw's ``joint_rule`` (slack 1, its allowance q =
    2gG/ε_b a fraction of a unit here; and its form over 12 groups at ``joint_share``'s
    fifth) and the same with q of 1 and 2 units, which bite. Their log-probabilities
    then move by at most ε_b."""
    lower, upper = domain
    groups = 2
    ladder = rungs(Contribution("x"), Column("x", "float", lower, upper,
                                             declared_resolution=0.5), rows)
    grid = GRID if lower >= 0 else SIGNED_GRID
    values = DRAW_VALUES if lower >= 0 else [-5.0, 0.0, 1.5, 5.0, *DRAW_VALUES[3:]]
    if rows > 2:  # units of three records: a bound, a value between, NaN and +inf each
        values = [values[0], values[1], math.nan, math.inf]
    data = [[r._replace(value=(r.value if r.value not in GRID else
                               grid[GRID.index(r.value) % len(grid)]))
             for r in records]
            for records in datasets(53 + rows, 5 if rows <= 2 else 3, units, rows, groups)]
    keys = [None] if joint else list(range(groups))
    rungs_ = range(len(ladder))
    # ε_b = 2g·SHORTFALL/t: evidence counts t of 1, 2 and 3 units, which bite here
    epsilons = {t: 2 * group_size * SHORTFALL / t for t in (1, 2, 3)}

    def rules(epsilon: Fraction) -> dict[str, tuple]:
        if not joint:
            return {"group": (("prior", PRIOR),)}
        lam = epsilon / (2 * group_size)
        l1 = joint_rule(groups)
        return {"top choice": (("prior", joint_prior(groups)),),
                "joint": tuple(l1.items()),
                # over more than 7 groups the draw takes a fifth (``joint_share``): its
                # allowance 2G·(1/5)/(4/5) = 6 nats at G = 12, q a fraction of a unit here
                "joint, a fifth": tuple(joint_rule(12, joint_share(12)).items()),
                **{f"q {q}": tuple({**l1, "allowance": lam * q}.items()) for q in (1, 2)}}
    names = list(rules(Fraction(1)))

    def counts(records) -> dict:
        if joint:
            found = joint_ladder_of(records, lower, upper, ladder, groups)
            return {(None, k): found[k, "beyond"] for k in rungs_}
        found = ladder_of(records, lower, upper, ladder, groups, Contribution("x"))
        return {(group, k): found[group, k, "beyond"] for group in keys for k in rungs_}

    rule_sets = {t: rules(epsilon) for t, epsilon in epsilons.items()}

    @functools.cache
    def drawn(key, beyond: tuple[int, ...]) -> dict:
        """A key's utilities and log-probabilities: a function of its counts beyond
        each rung, worked out once per count vector (a neighbour's are mostly its data
        set's, or another neighbour's)."""
        out = {}
        for t, epsilon in epsilons.items():
            for name, rule in rule_sets[t].items():
                utility = engine_utilities(beyond, epsilon, group_size, rule)
                odds = log_odds(beyond, epsilon, group_size, rule)
                out.update({(key, k, t, name): u for k, u in enumerate(utility)})
                out.update({(key, k, t, name, "log P"): p for k, p in enumerate(odds)})
        return out

    def statistic(records) -> dict:
        found, out = counts(records), {}
        for key in keys:
            out.update(drawn(key, tuple(found[key, k] for k in rungs_)))
        return out

    bound = {(key, k, t, name): group_size for key in keys for k in rungs_ for t in epsilons
             for name in names}
    bound.update({(key, k, t, name, "log P"): float(epsilon) for key in keys for k in rungs_
                  for t, epsilon in epsilons.items() for name in names})
    outcomes = assert_sound(statistic, lambda records: bound, data,
                            modifying(values, group_size, groups), tolerance=1e-9)
    for t in epsilons:  # each evidence count bites, and each rule at some count
        assert max(outcome.worst[key, k, t, name] for outcome in outcomes for key in keys
                   for k in rungs_ for name in names) >= group_size, t
    for name in names:
        assert max(outcome.worst[key, k, t, name] for outcome in outcomes for key in keys
                   for k in rungs_ for t in epsilons) >= group_size, name


def test_the_ladder_is_public_and_spans_the_largest_contribution():
    """From the largest contribution c·max(|L|, |U|) down by halves, at most 20 times,
    never below the resolution: a function of the rules and c alone."""
    column = Column("cost", "float", 0.0, 100_000.0, declared_resolution=0.01)
    ladder = rungs(Contribution("cost"), column, 6)
    assert ladder[-1] == 600_000 and len(ladder) == 21 and ladder[0] == 600_000 / 2 ** 20
    assert all(b == 2 * a for a, b in zip(ladder, ladder[1:]))
    age = Column("age", "int", 0.0, 120.0)
    assert rungs(Contribution("age"), age, 1) == tuple(120 / 2 ** j for j in range(6, -1, -1))
    assert rungs(Contribution("age", 0.0, 2), age, 2)[-1] == (2 * 120) ** 2


@pytest.mark.parametrize("units,group_size,groups", [(5, 1, 1), (5, 1, 2), (4, 2, 1)])
def test_centred_square_of_clipped_values_moves_within_its_sensitivity(units, group_size,
                                                                      groups):
    """STDDEV of one value per unit (docs/privacy.md §3.14): the sum of squared distances
    of the clipped values x̃ = L + min(x − L, B_k) to a released centre L + a, formed
    from the two ladders' clipped sums and the count (centred_square_sum), is
    Σ(x̃ − L − a)², and no neighbour moves it by more than centred_sensitivity's
    g·max(B_k − a, a)² (plus rounding), for every rung and centres a in [0, B_k] (the
    ends, reached, and inside)."""
    column = Column("x", "float", LOWER, UPPER, declared_resolution=0.5)
    first, second = Contribution("x", LOWER, 1), Contribution("x", LOWER, 2)
    ladder = rungs(first, column, 1)
    shares = (0.0, 0.3, 1.0)  # a = share·B_k

    def statistic(records, check: bool = False):
        moments = (ladder_of(records, LOWER, UPPER, ladder, groups, first),
                   ladder_of(records, LOWER, UPPER, tuple(b * b for b in ladder), groups,
                             second))
        out = {}
        for group in range(groups):
            values = [normalise(r.value, LOWER, UPPER) for r in records
                      if r.in_scope and r.group == group]
            values = [v for v in values if v is not None]
            for k, bound in enumerate(ladder):
                for share in shares:
                    a = share * bound
                    out[group, k, share] = centred_square_sum(
                        moments[1][group, k, "clipped"], moments[0][group, k, "clipped"],
                        len(values), a)
                    if check:
                        direct = sum((min(v - LOWER, bound) - a) ** 2 for v in values)
                        assert out[group, k, share] == pytest.approx(direct, abs=1e-9)
        return out

    bounds = {(group, k, share): centred_sensitivity(group_size, share * bound, bound)
              for group in range(groups) for k, bound in enumerate(ladder)
              for share in shares}
    values = GRID + EXTREME if group_size == 1 else [0.0, 2.0, 5.0, 10.0, *EXTREME[:3]]
    outcomes = assert_sound(statistic, lambda records: statistic(records, True) and bounds,
                            datasets(17, 6, units, 1, groups),
                            modifying(values, group_size, groups), change=changes)
    for k, bound in enumerate(ladder):  # a value from one clip to the other, about an end
        for share in (0.0, 1.0):
            reached = max(o.worst[0, k, share] for o in outcomes)
            assert reached >= group_size * bound * bound - 1e-6, (k, share, reached)


@pytest.mark.parametrize("units,rows,group_size,groups",
                         [(4, 2, 1, 1), (3, 3, 1, 1), (3, 2, 1, 2), (2, 2, 2, 1)])
def test_centred_unit_sums_move_within_their_sensitivity(units, rows, group_size, groups):
    """STDDEV over several rows per unit (docs/privacy.md §3.14): each unit's
    T_u = Σ(x − L − a)² over its normalised values in scope, about a released centre
    L + a (a in [0, U − L]: the ends, reached, and inside), clipped to B₂ =
    ``square_bound``(B₁, a, c) for sums' bounds B₁ small, middling and the largest: no
    count of units beyond B₂ moves by more than g, nor Σ_u min(T_u, B₂) by more than
    ``unit_square_sensitivity``'s g·min(B₂, c·D²) (plus rounding), D = max(U − L − a, a);
    the largest nearly reached (one unit). Units of several rows, ties, NULL, NaN, ±inf,
    overflow-sized values, records leaving the scope or changing group, g = 2."""
    width = UPPER - LOWER
    cases = [(a, first) for a in (0.0, 3.5, width) for first in (0.5, 5.0, rows * width)]

    def statistic(records):
        return {(a, first, *key): value for a, first in cases for key, value in ladder_of(
            records, LOWER, UPPER, (square_bound(first, a, rows),), groups,
            Contribution("x", LOWER + a, 2)).items()}

    bounds = {(a, first, group, 0, part): group_size if part == "beyond" else
              unit_square_sensitivity(group_size, square_bound(first, a, rows), rows, a, width)
              for a, first in cases for group in range(groups)
              for part in ("beyond", "clipped")}
    values = GRID + EXTREME if (rows, group_size, groups) == (2, 1, 1) \
        else [0.0, 3.5, 10.0, *EXTREME[:3]]
    outcomes = assert_sound(statistic, lambda records: bounds,
                            datasets(23 + rows, 8 if rows < 3 else 5, units, rows, groups),
                            modifying(values, group_size, groups), change=changes)
    for a in (0.0, width) if group_size == 1 else ():  # a unit's rows from near the
        # centre to the far end, unclipped
        reached = max(o.worst[a, rows * width, 0, 0, "clipped"] for o in outcomes)
        assert reached >= 0.9 * rows * width ** 2, (a, reached)


def test_the_squares_bound_keeps_every_unit_the_sums_bound_keeps():
    """``square_bound``: a unit of at most c values y = x − L ≥ 0 with Σy ≤ B₁ has
    Σ(y − a)² ≤ B₂ for every a in [0, U − L] (by brute force over a grid of units, the
    bound reached), so S2 clips no unit S1 kept whole."""
    column = Column("x", "float", LOWER, UPPER, declared_resolution=0.5)
    rows = 3
    grid = [0.0, 0.5, 1.25, 2.0, 2.5, 5.0, 10.0]
    units = [(y1, y2, y3)[:size] for y1 in grid for y2 in grid for y3 in grid
             for size in (1, 2, 3)]
    for bound in rungs(Contribution("x", LOWER, 1), column, rows):
        for a in (0.0, 1.0, 4.0, 10.0):
            most = square_bound(bound, a, rows)
            kept = [sum((y - a) ** 2 for y in unit) for unit in units if sum(unit) <= bound]
            assert max(kept) <= most * (1 + 1e-12), (bound, a)
            if bound in grid:
                assert max(kept) == pytest.approx(most), (bound, a)
