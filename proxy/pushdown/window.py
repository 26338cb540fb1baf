"""A run of consecutive order statistics of one column in scope, for the smooth
sensitivity (privacy/smooth_sensitivity.py) and the exponential mechanism
(privacy/inverse_sensitivity.py): ranks first..last as one
``ORDER BY … LIMIT … OFFSET …`` over the scope (clipped under DP), which both engines
answer with a bounded top-k sort instead of ranking every row."""

from __future__ import annotations

from sqlglot import exp

from proxy.analyze.plan import QueryPlan
from proxy.pushdown.scope import Execute, scope_select
from proxy.statistics import ColumnNeeds, Fetch


def rank_window(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                clip_rows_per_unit: int | None, execute: Execute,
                from_top: bool = False) -> Fetch:
    """``fetch(first, last)``: the normalised values at ranks first..last
    (1-based, within 1..n; counted from the largest when ``from_top``) among the
    column's non-null values in scope."""
    scope = scope_select(plan, (need,), clip_rows_per_unit)

    def fetch(first: int, last: int) -> list[float]:
        if last < first:
            return []
        value = exp.column("c0")
        statement = (exp.select(value).from_(scope.subquery("s"), copy=False)  # the one copy
                     .where(value.is_(exp.null()).not_(), copy=False)
                     .order_by(exp.Ordered(this=value, desc=from_top), copy=False)
                     .limit(last - first + 1, copy=False).offset(first - 1, copy=False))
        return [need.normalise(row[0]) for row in execute(statement.sql(dialect=dialect, copy=False))]

    return fetch


def nearer_end_window(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                      clip_rows_per_unit: int | None, execute: Execute, n: int) -> Fetch:
    """``fetch(first, last)`` of ascending ranks, read from the nearer end of the n
    values: OFFSET near the top would make the backend sort past most of the column."""
    ascending = rank_window(plan, need, dialect, clip_rows_per_unit, execute)
    descending = rank_window(plan, need, dialect, clip_rows_per_unit, execute, from_top=True)

    def fetch(first: int, last: int) -> list[float]:
        if first - 1 <= n - last:
            return ascending(first, last)
        return descending(n + 1 - last, n + 1 - first)[::-1]

    return fetch


def rank_counts(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                clip_rows_per_unit: int | None, execute: Execute):
    """``count(y)``: the column's values in scope below y and at or below y, one scan
    (privacy/inverse_sensitivity.py, for a candidate drawn from a tail). ``y`` is a
    candidate of the rules' grid, never an analyst's literal."""
    scope = scope_select(plan, (need,), clip_rows_per_unit)

    def count(y: float) -> tuple[int, int]:
        value, point = exp.column("c0"), exp.Literal.number(repr(y))
        below = exp.Sum(this=exp.case().when(value < point, exp.Literal.number(1))
                        .else_(exp.Literal.number(0)))
        through = exp.Sum(this=exp.case().when(value <= point, exp.Literal.number(1))
                          .else_(exp.Literal.number(0)))
        statement = exp.select(below, through).from_(scope.subquery("s"))
        ((a, b),) = execute(statement.sql(dialect=dialect))
        return int(a or 0), int(b or 0)

    return count
