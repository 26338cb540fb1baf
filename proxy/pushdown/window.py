"""A run of consecutive order statistics of one column in scope, for the smooth
sensitivity (privacy/smooth_sensitivity.py): ranks first..last as one
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
