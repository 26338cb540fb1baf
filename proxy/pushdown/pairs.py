"""The two statements behind CORR and its kin (proxy.privacy.correlation), for every
paired aggregate of a plan (by its index): y = its ``column``, x = its ``other``.

1. ``bound_counts``: over the whole scope (no GROUP BY: the bounds are drawn once for
   the query), for each rung b of the public ladders of x and y, how many units have a
   row where both values are present and x − Lx (y − Ly) exceeds b.
2. ``pair_sums``: per group, over the rows where both are present, their count and the
   exact sums of x̃, x̃², ỹ, ỹ² and x̃·ỹ, with x̃ = LEAST(x − Lx, bx) and ỹ alike at the
   drawn bounds.

Both read the normalised values (NaN as NULL, everything clamped into the declared
domain: ``scope_select``), so x − Lx lies in [0, Ux − Lx] and every product within
(2·10¹⁵)²: finite for every row value, and summed by ``shrunk_sum``.
x̃ is snapped (``guards.snap``: below 2⁻⁵⁰³ it is 0), so no product of two underflows
(PostgreSQL raises an error where a product of non-zero doubles is 0).
Only counts and sums leave the backend.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from proxy import guards
from proxy.backends.base import Capabilities
from proxy.pushdown.scope import (
    Execute,
    group_keys,
    read_exact,
    scope_select,
    shrunk_sum,
)
from proxy.pushdown.values import literal
from proxy.statistics import ColumnNeeds, PairSums, sum_shrink
from proxy.vocabulary import QueryPlan


def _needs(plan: QueryPlan, indexes: tuple[int, ...]) -> tuple[ColumnNeeds, ...]:
    names = dict.fromkeys(name for index in indexes for name in
                          (plan.aggregates[index].other, plan.aggregates[index].column))
    return tuple(ColumnNeeds(name, lower=plan.table.columns[name].lower,
                             upper=plan.table.columns[name].upper) for name in names)


def _paired_values(plan: QueryPlan, needs: tuple[ColumnNeeds, ...], index: int,
                   bounds: tuple[float, float] | None = None
                   ) -> tuple[exp.Expression, exp.Expression]:
    """x − Lx and y − Ly of one aggregate's pair (NULL unless both are present), each
    at most its bound when ``bounds`` are given."""
    agg, names = plan.aggregates[index], [need.column for need in needs]
    values = []
    for side, name in enumerate((agg.other, agg.column)):
        value: exp.Expression = exp.Sub(this=exp.column(f"c{names.index(name)}"),
                                        expression=literal(plan.table.columns[name].lower))
        if bounds is not None:  # snapped: no product of two of them underflows
            value = exp.Least(this=guards.snap(value), expressions=[literal(bounds[side])])
        values.append(value)
    absent = exp.or_(exp.column(f"c{names.index(agg.other)}").is_(exp.null()),
                     exp.column(f"c{names.index(agg.column)}").is_(exp.null()), copy=False)
    return tuple(exp.Case().when(absent.copy(), exp.null()).else_(value) for value in values)


def bound_counts(plan: QueryPlan, indexes: tuple[int, ...],
                 ladders: dict[int, tuple[tuple[float, ...], tuple[float, ...]]],
                 capabilities: Capabilities, clip_rows_per_unit: int | None,
                 execute: Execute) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Statement 1: per aggregate index, the units beyond each rung of x's ladder and of
    y's (``ladders[index]``: x's rungs, y's rungs)."""
    whole = replace(plan, group_by=(), joint=())
    needs = _needs(plan, indexes)
    scope = scope_select(whole, needs, clip_rows_per_unit, unit=True)
    largest = []  # per index and side: the unit's largest x − Lx (a row: its own)
    for index in indexes:
        for side, value in enumerate(_paired_values(plan, needs, index)):
            largest.append(exp.alias_(exp.Max(this=value) if plan.table.privacy_unit
                                      else value, f"m{index}_{side}"))
    per_unit = exp.select(*largest).from_(scope.subquery("r", copy=False), copy=False)
    if plan.table.privacy_unit:
        per_unit = per_unit.group_by("u", copy=False)
    counted = []
    for index in indexes:
        for side, rungs in enumerate(ladders[index]):
            for k, bound in enumerate(rungs):
                beyond = exp.GT(this=exp.column(f"m{index}_{side}"), expression=literal(bound))
                counted.append(exp.alias_(exp.Sum(this=exp.Case(
                    ifs=[exp.If(this=beyond, true=exp.Literal.number(1))],
                    default=exp.Literal.number(0))), f"b{index}_{side}_{k}"))
    statement = exp.select(*counted).from_(per_unit.subquery("p", copy=False), copy=False)
    row = list(execute(statement.sql(dialect=capabilities.dialect, copy=False))[0])
    found = {}
    for index in indexes:
        sides = []
        for rungs in ladders[index]:
            sides.append(tuple(int(value or 0) for value in row[:len(rungs)]))
            row = row[len(rungs):]
        found[index] = (sides[0], sides[1])
    return found


def pair_sums(plan: QueryPlan, bounds: dict[int, tuple[float, float]],
              capabilities: Capabilities, clip_rows_per_unit: int | None,
              execute: Execute) -> dict[tuple, dict[int, PairSums]]:
    """Statement 2: per group key (``()`` without GROUP BY) and aggregate index, the
    count and sums at the drawn bounds (``bounds[index]``: bx, by). A group absent from
    the answer has no such rows."""
    indexes = tuple(bounds)
    keys = group_keys(plan)
    needs = _needs(plan, indexes)
    scope = scope_select(plan, needs, clip_rows_per_unit)
    values = []
    for index in indexes:
        x, y = _paired_values(plan, needs, index, bounds[index])
        values += [exp.alias_(x, f"x{index}"), exp.alias_(y, f"y{index}")]
    rows = exp.select(*keys, *values).from_(scope.subquery("r", copy=False), copy=False)
    sums = []
    for index in indexes:
        bx, by = bounds[index]
        x, y = exp.column(f"x{index}"), exp.column(f"y{index}")
        counted = exp.Case(ifs=[exp.If(this=x.is_(exp.null()), true=exp.Literal.number(0))],
                           default=exp.Literal.number(1))
        sums.append(exp.Sum(this=counted))
        for value, bound in ((x, bx), (exp.Mul(this=x.copy(), expression=x.copy()), bx * bx),
                             (y, by), (exp.Mul(this=y.copy(), expression=y.copy()), by * by),
                             (exp.Mul(this=x.copy(), expression=y.copy()), bx * by)):
            sums.append(shrunk_sum(value, 0.0, bound))
    statement = exp.select(*keys, *sums).from_(rows.subquery("s", copy=False), copy=False)
    if keys:
        statement = statement.group_by(*keys, copy=False)
    found: dict[tuple, dict[int, PairSums]] = {}
    width = len(keys)
    for row in execute(statement.sql(dialect=capabilities.dialect, copy=False)):
        rest = row[width:]
        for at, index in enumerate(indexes):
            bx, by = bounds[index]
            n, sx, sxx, sy, syy, sxy = rest[6 * at: 6 * at + 6]
            scales = (bx, bx * bx, by, by * by, bx * by)
            exact = [read_exact(value) * int(sum_shrink(bound))
                     for value, bound in zip((sx, sxx, sy, syy, sxy), scales)]
            found.setdefault(tuple(row[:width]), {})[index] = PairSums(bx, by, int(n or 0),
                                                                       *exact)
    return found
