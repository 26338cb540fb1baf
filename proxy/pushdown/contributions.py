"""Per-unit contributions against a ladder of bounds: the statement behind the automatic
clipping bound of SUM and AVG (proxy.privacy.contribution_bounds).

One statement for every contribution (``statistics.Contribution``: Σ (x − origin)^power
of a column's normalised values) and every group: the scope's rows summed per unit (per
group), then per group and rung k the count of units beyond ±B_k and the sum of the
contributions clipped to [−B_k, B_k]. Only counts and sums leave the backend.
A table without a privacy unit has one record per unit: its rows are the contributions.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.backends.base import Capabilities
from proxy.interrupts import checkpoint
from proxy.pushdown.scope import (
    Execute,
    exact_sum,
    group_keys,
    read_sum,
    scope_select,
)
from proxy.pushdown.values import literal
from proxy.statistics import ColumnNeeds, Contribution, Ladder, sum_shrink
from proxy.vocabulary import QueryPlan


def contribution_sql(plan: QueryPlan, wanted: tuple[Contribution, ...],
                     ladders: tuple[tuple[float, ...], ...],
                     clip_rows_per_unit: int | None,
                     joint: frozenset[Contribution] = frozenset(),
                     largest: bool = False) -> exp.Select:
    """The statement: keys, then per contribution i and rung k ``b_i_k`` (units beyond
    ±B_k) and ``s_i_k`` (their clipped sum, an ``exact_sum``). ``joint`` contributions
    are clipped across groups: by their total over the groups (L1), or, ``largest``,
    each group's to ±B_k with a unit counted beyond by its largest (L∞)."""
    keys = group_keys(plan)
    columns = list(dict.fromkeys(c.column for c in wanted if c.column))
    needs = tuple(ColumnNeeds(name, lower=plan.table.columns[name].lower,
                              upper=plan.table.columns[name].upper) for name in columns)
    scope = scope_select(plan, needs, clip_rows_per_unit, unit=True)
    terms = []
    for contribution in wanted:  # (x − origin)^power of the normalised value c_j
        if not contribution.column:  # COUNT(*): each row once
            terms.append(exp.Literal.number(1))
            continue
        value: exp.Expression = exp.column(f"c{columns.index(contribution.column)}")
        if contribution.power == 0:  # COUNT(col): each normalised value that is not NULL
            terms.append(exp.Case().when(value.is_(exp.null()), exp.Literal.number(0))
                         .else_(exp.Literal.number(1)))
            continue
        if contribution.origin:
            value = exp.paren(exp.Sub(this=value, expression=literal(contribution.origin)))
        if contribution.power == 2:
            value = exp.Mul(this=value, expression=value.copy())
        terms.append(value)
    zero = exp.Literal.number(0)
    if plan.table.privacy_unit is None:  # a NULL (or NaN) value contributes 0
        per_unit = exp.select(*keys, *[exp.alias_(exp.Coalesce(
            this=term, expressions=[zero.copy()]), f"t{i}") for i, term in enumerate(terms)]
        ).from_(scope.subquery("r", copy=False), copy=False)
    else:  # a unit's contribution: the sum over its rows in scope (none: 0)
        per_unit = exp.select(*keys, *[exp.alias_(exp.Coalesce(
            this=exp.Sum(this=term), expressions=[zero.copy()]), f"t{i}")
            for i, term in enumerate(terms)], *(["u"] if joint else [])
        ).from_(scope.subquery("r", copy=False), copy=False).group_by(*keys, "u", copy=False)
    if joint:
        per_unit = _unit_totals(per_unit, keys, [i for i, c in enumerate(wanted) if c in joint],
                                largest)
    columns_out: list[exp.Expression] = []  # one select() at the end: each call copies
    for i, rungs in enumerate(ladders):  # the whole statement (quadratic in the rungs)
        checkpoint()
        columns_out += [column for k, bound in enumerate(rungs)
                        for column in _rung(i, k, bound, wanted[i] in joint, largest)]
    outer = exp.select(*keys, *columns_out).from_(per_unit.subquery("p"), copy=False)
    return outer.group_by(*keys, copy=False) if keys else outer


def _unit_totals(per_unit: exp.Select, keys: tuple[str, ...], indexes: list[int],
                 largest: bool = False) -> exp.Select:
    """``per_unit`` with, per unit, ``n{i}`` = T_u, the sum of |t{i}| over its groups
    (``largest``: the largest), and ``f`` = 1 in one group of each unit (its first by
    the keys)."""
    norm = exp.Max if largest else exp.Sum
    first = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("u")],
                       order=exp.Order(expressions=[exp.Ordered(this=exp.column(key))
                                                    for key in keys]))
    totals = [exp.alias_(exp.Window(this=norm(this=exp.Abs(this=exp.column(f"t{i}"))),
                                    partition_by=[exp.column("u")]), f"n{i}")
              for i in indexes]
    return exp.select("*", *totals, exp.alias_(first, "f")).from_(
        per_unit.subquery("j", copy=False), copy=False)


def _rung(i: int, k: int, bound: float, joint: bool, largest: bool = False
          ) -> tuple[exp.Expression, exp.Expression]:
    """``b_i_k`` and ``s_i_k`` of contribution i (``t{i}``, never NULL, finite) at rung k,
    built from fresh nodes (a statement has hundreds: copying shared ones cost more than
    the rest of its building). t is clamped by LEAST and GREATEST: no NULL to guard."""
    def value() -> exp.Expression:
        return exp.column(f"t{i}")

    def total() -> exp.Expression:
        return exp.column(f"n{i}")

    if joint:  # a unit counted beyond in its first group only
        beyond = exp.and_(exp.EQ(this=exp.column("f"), expression=exp.Literal.number(1)),
                          exp.GT(this=total(), expression=literal(bound)), copy=False)
    if joint and largest:  # L∞: each group's contribution clipped to ±B alone
        scaled = value()
    elif joint:  # L1: scaled by min(1, B/T_u)
        scaled = exp.Case(ifs=[exp.If(this=exp.GT(this=total(), expression=literal(bound)),
                                      true=exp.Mul(
            this=value(), expression=exp.paren(exp.Div(this=literal(bound),
                                                        expression=total()), copy=False)))],
                          default=value())
    else:
        beyond = exp.or_(exp.GT(this=value(), expression=literal(bound)),
                         exp.LT(this=value(), expression=literal(-bound)), copy=False)
        scaled = value()
    clipped = exp.Least(this=exp.Greatest(this=scaled, expressions=[literal(-bound)],
                                          ignore_nulls=True),
                        expressions=[literal(bound)], ignore_nulls=True)
    count = exp.Case(ifs=[exp.If(this=beyond, true=exp.Literal.number(1))],
                     default=exp.Literal.number(0))
    shrink = sum_shrink(bound)
    if shrink != 1:
        clipped = exp.Mul(this=clipped, expression=literal(1 / shrink))
    return (exp.alias_(exp.Sum(this=count), f"b_{i}_{k}", copy=False),
            exp.alias_(exact_sum(clipped, -bound / shrink, bound / shrink, copy=False),
                       f"s_{i}_{k}", copy=False))


def contribution_ladders(plan: QueryPlan, wanted: tuple[Contribution, ...],
                         ladders: tuple[tuple[float, ...], ...], capabilities: Capabilities,
                         clip_rows_per_unit: int | None, execute: Execute,
                         joint: frozenset[Contribution] = frozenset(), largest: bool = False
                         ) -> dict[tuple, dict[Contribution, Ladder]]:
    """Every group's ladders (key ``()`` without GROUP BY), by contribution."""
    statement = contribution_sql(plan, wanted, ladders, clip_rows_per_unit, joint, largest)
    width = len(plan.group_by)
    found: dict[tuple, dict[Contribution, Ladder]] = {}
    for row in execute(statement.sql(dialect=capabilities.dialect, copy=False)):
        rest, at = row[width:], 0
        for contribution, rungs in zip(wanted, ladders):
            pairs = rest[at: at + 2 * len(rungs)]
            at += 2 * len(rungs)
            found.setdefault(tuple(row[:width]), {})[contribution] = Ladder(
                rungs, tuple(int(b or 0) for b in pairs[0::2]),
                tuple(read_sum(s) * sum_shrink(bound) for s, bound in zip(pairs[1::2], rungs)))
    return found
