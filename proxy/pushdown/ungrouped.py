"""Statistics of a query without GROUP BY, at about the cost of the plain aggregate.

Pass 1 is one aggregate over the scope: row and non-null counts and exact sums, with
the few largest/smallest values as top-k ``ORDER BY … LIMIT k`` subqueries. Pass 2, only for percentiles, asks the backend's own
``PERCENTILE_DISC``/``QUANTILE_DISC`` for the exact ranks now that n is known: rank k is
requested as the fraction (k − ½)/n, which both engines map to rank ⌈q·n⌉ = k whatever
the rounding of q. Both passes run in the same snapshot.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from proxy.analyze.plan import COUNT, QueryPlan
from proxy.pushdown.scope import clamped_sum, scope_select
from proxy.statistics import BOTTOM, PCT, TOP, ColumnNeeds, ColumnStats, GroupStats, RankRef

Execute = Callable[[str], list[tuple]]


def ungrouped_statistics(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], dialect: str,
    clip_rows_per_unit: int | None, execute: Execute,
) -> GroupStats:
    scope = scope_select(plan, needs, clip_rows_per_unit)
    group = GroupStats(columns={need.column: ColumnStats() for need in needs})
    items, readers, aggregated = [], [], False
    if any(a.kind == COUNT and a.column is None for a in plan.aggregates):
        items.append(exp.Count(this=exp.Star()))
        readers.append(lambda value: setattr(group, "rows", int(value or 0)))
        aggregated = True
    for index, need in enumerate(needs):
        stats, column = group.columns[need.column], exp.column(f"c{index}")
        if need.count or need.total or any(r.anchor == PCT for r in need.ranks):
            items.append(exp.Count(this=column))
            readers.append(lambda value, s=stats: setattr(s, "n", int(value or 0)))
            aggregated = True
        if need.total:
            items.append(clamped_sum(column, need))
            readers.append(lambda value, s=stats: setattr(s, "total", float(value or 0)))
        for anchor in (TOP, BOTTOM):
            offsets = [r.offset for r in need.ranks if r.anchor == anchor]
            if offsets:
                items.append(_extremes(column, max(offsets) + 1, anchor, scope))
                readers.append(lambda value, n=need, s=stats, a=anchor, o=offsets: _fill_extremes(
                    n, s, a, o, value))
    if items:
        statement = exp.select(*items)
        if aggregated:
            statement = statement.from_(scope.subquery("s"))
        for reader, value in zip(readers, execute(statement.sql(dialect=dialect))[0]):
            reader(value)
    _percentiles(needs, group, scope, dialect, execute)
    return group


def _extremes(column, k: int, anchor: str, scope: exp.Select) -> exp.Expression:
    """The k largest (TOP) or smallest (BOTTOM) non-null values, as an array: a top-k
    ``ORDER BY … LIMIT k``, which both engines answer at the cost of MAX or less."""
    descending = anchor == TOP
    top_k = (
        exp.select(exp.alias_(column, "v")).from_(scope.subquery("s"))
        .where(column.is_(exp.null()).not_())
        .order_by(exp.Ordered(this=column, desc=descending)).limit(k)
    )
    in_order = exp.Order(this=exp.column("v"),
                         expressions=[exp.Ordered(this=exp.column("v"), desc=descending)])
    return exp.select(exp.ArrayAgg(this=in_order)).from_(top_k.subquery("t")).subquery()


def _fill_extremes(need: ColumnNeeds, stats: ColumnStats, anchor: str, offsets: list[int],
                   values) -> None:
    """TOP+j is the (j+1)-th largest value; None when there are not that many."""
    values = list(values or [])
    for offset in offsets:
        stats.values[RankRef(anchor, offset)] = (
            need.clamp(values[offset]) if offset < len(values) else None)


def _percentiles(needs, group: GroupStats, scope: exp.Select, dialect: str,
                 execute: Execute) -> None:
    """Pass 2: the values at the percentile ranks, straight from the backend."""
    items, wanted = [], []
    for index, need in enumerate(needs):
        stats = group.columns[need.column]
        refs = [r for r in need.ranks if r.anchor == PCT]
        for ref in refs:
            stats.values[ref] = None
        inside = [(ref, ref.rank(stats.n)) for ref in refs if 1 <= ref.rank(stats.n) <= stats.n]
        if not inside:
            continue
        fractions = exp.Array(expressions=[exp.Literal.number(repr((rank - 0.5) / stats.n))
                                           for _, rank in inside])
        column = exp.column(f"c{index}")
        if dialect == "duckdb":
            items.append(exp.PercentileDisc(this=column, expression=fractions))
        else:
            items.append(exp.WithinGroup(this=exp.PercentileDisc(this=fractions),
                                         expression=exp.Order(expressions=[exp.Ordered(this=column)])))
        wanted.append((need, stats, inside))
    if not items:
        return
    row = execute(exp.select(*items).from_(scope.subquery("s")).sql(dialect=dialect))[0]
    for (need, stats, inside), values in zip(wanted, row):
        for (ref, _), value in zip(inside, values):
            stats.values[ref] = need.clamp(value)
