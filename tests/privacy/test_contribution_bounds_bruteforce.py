"""The automatic clipping bound of SUM and AVG (proxy/privacy/contribution_bounds.py),
by brute force: for small data sets (units of several records, ties, bounds, NaN, ±inf,
overflow-sized values, records leaving the scope and moving between groups, group size
g > 1) and every neighbour, no rung's count of units beyond ±B_k moves by more than g
(the exponential mechanism's utility sensitivity) and no rung's clipped sum by more
than g·w_k (the Laplace noise's scale numerator); both reached. Clipped across groups
(L1), no rung's count of units whose total lies beyond B_k moves by more than g, nor
its vector of group sums by more than g·2B_k in L1; both reached. The backend's
statement computes the reference's numbers (tests/privacy/test_contribution_bounds.py);
the counts' bound is reached."""

from __future__ import annotations

import pytest

from proxy.privacy.contribution_bounds import rungs
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
from tests.privacy.reference import normalise

TWO_SIDED = (-5.0, 5.0)
SIGNED_GRID = [-5.0, -2.0, 0.0, 1.5, 5.0]


def ladder_of(records: list[Record], lower: float, upper: float, ladder: tuple[float, ...],
              groups: int, contribution: Contribution) -> dict:
    """(group, k, "beyond" | "clipped") -> the number, as the backend computes it: each
    unit's (x − origin)^power of its normalised values x in scope summed per group
    (none: 0), then counted beyond ±B_k and clipped to [−B_k, B_k]."""
    sums: dict[tuple[int, object], float] = {}
    for record in records:
        value = normalise(record.value, lower, upper)
        if record.in_scope and value is not None:
            key = (record.group, record.unit)
            term = (value - contribution.origin) ** contribution.power
            sums[key] = sums.get(key, 0.0) + term
    out = {}
    for group in range(groups):
        # by |x|, each rung taking in the values up to it (the ladder rises): those
        # beyond count, and clip to ±B_k by their sign
        mine = sorted((total for (g, _), total in sums.items() if g == group), key=abs)
        within, inside, signs = 0, 0.0, sum(1 if x > 0 else -1 if x < 0 else 0 for x in mine)
        for k, bound in enumerate(ladder):
            while within < len(mine) and abs(mine[within]) <= bound:
                x = mine[within]
                inside += x
                signs -= 1 if x > 0 else -1 if x < 0 else 0
                within += 1
            out[group, k, "beyond"] = len(mine) - within
            out[group, k, "clipped"] = inside + signs * bound
    return out


def changes(before: dict, after: dict) -> dict:
    return {key: abs(after[key] - before[key]) for key in before}


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("domain,origin,power", [((LOWER, UPPER), 0.0, 1), (TWO_SIDED, 0.0, 1),
                                                 (TWO_SIDED, -5.0, 1), (TWO_SIDED, -5.0, 2)])
@pytest.mark.parametrize("groups", [1, 2])
def test_each_rung_moves_within_its_sensitivity(units, rows, group_size, domain, origin, power,
                                                groups):
    """SUM's contributions (origin 0) on a one- and a two-sided domain, and the moments'
    (origin L, x − L and (x − L)², one-sided by construction)."""
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


def joint_ladder_of(records: list[Record], lower: float, upper: float,
                    ladder: tuple[float, ...], groups: int) -> dict:
    """(k, "beyond") -> the units whose total |contribution| T over the groups exceeds
    B_k; (k, "clipped") -> each group's sum of contributions scaled by min(1, B_k/T):
    SUM's contributions clipped across groups, as the backend computes them."""
    sums: dict[tuple[int, object], float] = {}
    for record in records:
        value = normalise(record.value, lower, upper)
        if record.in_scope and value is not None:
            sums[record.group, record.unit] = sums.get((record.group, record.unit), 0.0) + value
    totals: dict[object, float] = {}
    for (_, unit), value in sums.items():
        totals[unit] = totals.get(unit, 0.0) + abs(value)
    parts: list[list[tuple[float, float]]] = [[] for _ in range(groups)]
    for (group, unit), value in sums.items():
        parts[group].append((value, totals[unit]))
    out: dict = {}
    for k, bound in enumerate(ladder):
        out[k, "beyond"] = sum(1 for total in totals.values() if total > bound)
        out[k, "clipped"] = tuple(
            sum(value * (bound / total if total > bound else 1.0) for value, total in part)
            for part in parts)
    return out


def l1_changes(before: dict, after: dict) -> dict:
    """A count's |Δ|, a vector's L1 change."""
    return {key: abs(after[key] - before[key]) if key[1] == "beyond" else
            sum(abs(a - b) for a, b in zip(after[key], before[key])) for key in before}


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("domain", [(LOWER, UPPER), TWO_SIDED])
@pytest.mark.parametrize("groups", [3])
def test_contributions_clipped_across_groups_move_within_2b(units, rows, group_size, domain,
                                                           groups):
    """A unit's vector of contributions, scaled to a total of at most B before and
    after, moves the groups' clipped sums by at most 2B in L1 (g units: 2gB), whatever
    the domain's sign: all of it may leave one group for another."""
    lower, upper = domain
    ladder = rungs(Contribution("x"), Column("x", "float", lower, upper,
                                             declared_resolution=0.5), rows)
    grid = GRID if lower >= 0 else SIGNED_GRID
    data = [[r._replace(value=(r.value if r.value not in GRID else
                               grid[GRID.index(r.value) % len(grid)]))
             for r in records] for records in datasets(31 + rows, 10, units, rows, groups)]
    bounds = {(k, part): group_size * (1 if part == "beyond" else 2 * bound)
              for k, bound in enumerate(ladder) for part in ("beyond", "clipped")}
    outcomes = assert_sound(lambda records: joint_ladder_of(records, lower, upper, ladder,
                                                            groups),
                            lambda records: bounds, data,
                            modifying(grid + EXTREME, group_size, groups), change=l1_changes)
    reached = {key: max(outcome.worst[key] for outcome in outcomes) for key in bounds}
    for k in range(len(ladder) - 1):  # the top rung clips nothing: its count never moves
        assert reached[k, "beyond"] >= group_size - 1e-9, (k, reached)
    # 2gB where the data sets hold g units whose totals reach B (at some rung, at least)
    assert any(reached[k, "clipped"] >= bounds[k, "clipped"] - 1e-9
               for k in range(len(ladder))), reached


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
