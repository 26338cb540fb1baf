"""Weighted ranks of a column in scope, for the grouped percentiles of a user-level
table (docs/privacy.md §5.3, "Weighted ranks"; privacy/inverse_sensitivity.py's
``weighted_release``): each non-null value in scope weighs ⌊2²⁰/n_u⌋, n_u its unit's
non-null values in scope over all groups, a ``COUNT(*)`` window over the unit and an
integer division (n_u ≥ 1 on every row it weighs: no division by zero; total on every
engine). The draws read each group's distinct values with their weights and running
weights around the target (``weighted_windows``: all groups in one statement, or one
group) and, for a candidate drawn from a tail, the weights below it and below the next
candidate (``weighted_counts``). Integers throughout: the weights and their sums are
exact, so the mechanism's distances are exact rationals."""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from proxy.pushdown.scope import Execute, group_keys, is_group, scope_select
from proxy.statistics import WEIGHT_UNIT, ColumnNeeds
from proxy.vocabulary import QueryPlan


def weighted_scope(plan: QueryPlan, need: ColumnNeeds, key: tuple | None = None
                   ) -> exp.Select:
    """The scope's non-null values of ``need`` with their group keys and weights ``w``
    (every group's; only ``key``'s when given, filtered after the weights, which count
    the unit's values in every group)."""
    keys = group_keys(plan)
    base = scope_select(plan, (need,), None, unit=True).subquery("s", copy=False)
    count = exp.Window(this=exp.Count(this=exp.Star()), partition_by=[exp.column("u")])
    weight = exp.IntDiv(this=exp.Literal.number(WEIGHT_UNIT), expression=count)
    weighed = exp.select(*keys, "c0", exp.alias_(weight, "w")).from_(base, copy=False) \
        .where(exp.column("c0").is_(exp.null()).not_(), copy=False)
    if key is None:
        return weighed
    return exp.select("*").from_(weighed.subquery("w", copy=False), copy=False) \
        .where(is_group(key), copy=False)


def weighted_windows(plan: QueryPlan, need: ColumnNeeds, dialect: str, execute: Execute,
                     fraction: Fraction, reach: int, key: tuple | None = None
                     ) -> dict[tuple, tuple[int, int, list[tuple[float, int]]]]:
    """Per group (only ``key``'s when given): (N, the weight below the first value
    returned, [(value, weight)] ascending) for the distinct values whose interval
    [B − w, B] of running weight meets [t − reach·2²⁰, t + reach·2²⁰], t = fraction·N.
    The SQL's comparison is in floating point and only decides how much is read: the
    values returned are consecutive (B and B − w grow with the value), and the
    mechanism's distances come from the integers returned, exactly."""
    keys = group_keys(plan)
    scope = weighted_scope(plan, need, key).subquery("x", copy=False)
    merged = exp.select(*keys, exp.alias_(exp.column("c0"), "v"),
                        exp.alias_(exp.Sum(this=exp.column("w")), "k")) \
        .from_(scope, copy=False).group_by(*keys, "c0", copy=False)
    partition = [exp.column(k) for k in keys]
    running = exp.Window(this=exp.Sum(this=exp.column("k")), partition_by=partition,
                         order=exp.Order(expressions=[exp.Ordered(this=exp.column("v"))]),
                         spec=exp.WindowSpec(kind="ROWS", start="UNBOUNDED",
                                             start_side="PRECEDING", end="CURRENT ROW"))
    total = exp.Window(this=exp.Sum(this=exp.column("k")),
                       partition_by=[exp.column(k) for k in keys])
    ranked = exp.select(*keys, "v", "k", exp.alias_(running, "b"), exp.alias_(total, "n")) \
        .from_(merged.subquery("m", copy=False), copy=False)
    target = exp.Mul(this=exp.cast(exp.column("n"), "DOUBLE"),
                     expression=exp.Literal.number(repr(float(fraction))))
    margin = exp.Literal.number(reach * WEIGHT_UNIT)
    within = exp.and_(
        exp.GTE(this=exp.column("b"), expression=exp.Sub(this=target, expression=margin)),
        exp.LTE(this=exp.Sub(this=exp.column("b"), expression=exp.column("k")),
                expression=exp.Add(this=target.copy(), expression=margin.copy())))
    statement = exp.select(*keys, "v", "k", "b", "n").from_(
        ranked.subquery("r", copy=False), copy=False).where(within, copy=False)
    rows: dict[tuple, list] = {}
    for row in execute(statement.sql(dialect=dialect, copy=False)):
        rows.setdefault(tuple(row[:len(keys)]), []).append(row[len(keys):])
    found = {}
    for group, values in rows.items():
        values.sort(key=lambda row: row[0])
        first_value, first_weight, first_through, total = values[0]
        found[group] = (int(total), int(first_through) - int(first_weight),
                        [(need.clamp_to_domain(v), int(k)) for v, k, _, _ in values])
    return found


def weighted_counts(plan: QueryPlan, need: ColumnNeeds, dialect: str, execute: Execute,
                    key: tuple):
    """``count(y, after)``: the weight of the group's values below y and below
    ``after`` (None: all of them), one scan. y and after are candidates of the rules'
    grid, never an analyst's literal."""
    def count(point: float, after: float | None) -> tuple[int, int]:
        value, weight = exp.column("c0"), exp.column("w")
        zero = exp.Literal.number(0)

        def below(bound: float | None) -> exp.Expression:
            return exp.Sum(this=weight.copy() if bound is None else exp.case().when(
                value.copy() < exp.Literal.number(repr(bound)), weight.copy()).else_(zero))

        statement = exp.select(below(point), below(after)).from_(
            weighted_scope(plan, need, key).subquery("x", copy=False), copy=False)
        ((a, b),) = execute(statement.sql(dialect=dialect, copy=False))
        return int(a or 0), int(b or 0)

    return count
