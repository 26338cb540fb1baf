"""A run of consecutive order statistics of one column in scope, for the smooth
sensitivity (privacy/smooth_sensitivity.py) and the exponential mechanism
(privacy/inverse_sensitivity.py): ranks first..last as one
``ORDER BY … LIMIT … OFFSET …`` over the scope (clipped under DP), which both engines
answer with a bounded top-k sort instead of ranking every row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache

from sqlglot import exp

from proxy.backends.base import Capabilities, GroupedRanks
from proxy.errors import BackendFailed
from proxy.pushdown.grouped import numbered, rank_sql
from proxy.pushdown.grouped_lists import grouped_list_statistics
from proxy.pushdown.scope import Execute, group_keys, is_group, scope_select
from proxy.pushdown.ungrouped import quantiles
from proxy.statistics import BOTTOM, PCT, TOP, ColumnNeeds, Fetch, RankRef
from proxy.vocabulary import QueryPlan


def rank_window(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                clip_rows_per_unit: int | None, execute: Execute,
                from_top: bool = False, key: tuple = ()) -> Fetch:
    """``fetch(first, last)``: the normalised values at ranks first..last
    (1-based, within 1..n; counted from the largest when ``from_top``) among the
    column's non-null values in scope (in the group ``key`` of a GROUP BY)."""
    scope = _group_scope(plan, need, clip_rows_per_unit, key)

    def fetch(first: int, last: int) -> list[float]:
        if last < first:
            return []
        value = exp.column("c0")
        statement = (exp.select(value).from_(scope().subquery("s"), copy=False)  # the one copy
                     .where(value.is_(exp.null()).not_(), copy=False)
                     .order_by(exp.Ordered(this=value, desc=from_top), copy=False)
                     .limit(last - first + 1, copy=False).offset(first - 1, copy=False))
        return [need.clamp_to_domain(row[0]) for row in execute(statement.sql(dialect=dialect, copy=False))]

    return fetch


def _group_scope(plan: QueryPlan, need: ColumnNeeds, clip_rows_per_unit: int | None,
                 key: tuple) -> Callable[[], exp.Select]:
    """The scope's rows of one group (all of them for the key ``()``), built when first
    asked: a fetch per group is made for every group of a GROUP BY, most are answered
    from the grouped first windows, and building the scope (its filter lists every key)
    for each made a thousand-key GROUP BY quadratic."""
    @cache
    def scope() -> exp.Select:
        select = scope_select(plan, (need,), clip_rows_per_unit)
        return select if not key else \
            exp.select("*").from_(select.subquery("g", copy=False), copy=False).where(
                is_group(key), copy=False)

    return scope


def order_statistics(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                     clip_rows_per_unit: int | None, execute: Execute, n: int,
                     key: tuple = ()) -> Fetch:
    """``fetch(first, last)`` of ascending ranks among the n values in scope, for the
    exponential mechanism. A run that starts at rank 1 or ends at rank n is a top-k
    from that end (``rank_window`` without OFFSET). Any other run costs about one
    percentile: the backend's percentile gives the values at ranks first and last
    (``ungrouped.quantiles``), and one grouped scan the values between them with their
    multiplicities and the count below; the ranks are laid out here. (An OFFSET into the
    middle made DuckDB sort ten times longer than its median: 13 s against 1.3 s at
    10 M rows.)"""
    ascending = rank_window(plan, need, dialect, clip_rows_per_unit, execute, key=key)
    descending = rank_window(plan, need, dialect, clip_rows_per_unit, execute, True, key)
    scope = _group_scope(plan, need, clip_rows_per_unit, key)

    def fetch(first: int, last: int) -> list[float]:
        if first == 1:
            return ascending(first, last)
        if last == n:
            return descending(1, n + 1 - first)[::-1]
        value = exp.column("c0")
        ends = exp.select(quantiles(value, [(first - 0.5) / n, (last - 0.5) / n]))
        low, high = (need.clamp_to_domain(v) for v in execute(
            ends.from_(scope().subquery("s")).sql(dialect=dialect, copy=False))[0][0])
        low_sql, high_sql = exp.Literal.number(repr(low)), exp.Literal.number(repr(high))
        bucket = exp.case().when(value < low_sql, exp.null()).else_(value)
        grouped = (exp.select(exp.alias_(bucket, "v"), exp.Count(this=exp.Star()))
                   .from_(scope().subquery("s"), copy=False)  # the one copy of the scope
                   .where(value <= high_sql, copy=False).group_by(bucket.copy(), copy=False))
        counts = execute(grouped.sql(dialect=dialect, copy=False))
        below = sum(int(count) for v, count in counts if v is None)
        found, rank = [], below + 1  # the rank of the next value's first copy
        for v, count in sorted((need.clamp_to_domain(v), int(c)) for v, c in counts if v is not None):
            take = min(rank + count - 1, last) - max(rank, first) + 1
            found += [v] * max(take, 0)
            rank += count
        if len(found) != last - first + 1:
            raise BackendFailed("a run of ranks read back with the wrong number of values")
        return found

    return fetch


def grouped_windows(plan: QueryPlan, need: ColumnNeeds, capabilities: Capabilities,
                    clip_rows_per_unit: int | None, execute: Execute,
                    spans: list[tuple[RankRef, int]]) -> dict[tuple, dict[int, float]]:
    """Every group's values at the ranks within ``reach`` of each ``target`` (a span is
    (target, reach)), by group key and rank, for all groups at once: under GROUP BY the
    exponential mechanism's first windows then cost a pass or two over the scope, where
    ``order_statistics`` costs a percentile and a scan per group (it still serves a draw
    that asks for a wider window: ``near``). Where the backend has list aggregates
    (``GroupedRanks.LISTS``) the ranks are read as order statistics of the grouped lists
    (two hash aggregates, no sort: ``grouped_list_statistics``); elsewhere, or where
    those lists do not reach, by a ROW_NUMBER over the scope partitioned by the key (one
    sort), the targets' ranks computed from each group's n in SQL's integer arithmetic."""
    if capabilities.grouped_ranks is GroupedRanks.LISTS:
        refs = {RankRef(target.anchor, offset, target.fraction if target.anchor == PCT
                        else None)
                for target, reach in spans
                for offset in range(target.offset - reach if target.anchor == PCT
                                    else 0 if target.fraction is not None  # kept nearer
                                    else max(0, target.offset - reach),
                                    target.offset + reach + 1)}
        # a MAX or MIN aimed beyond a small group's other end is drawn at that end
        refs |= {RankRef(BOTTOM if target.anchor == TOP else TOP, offset)
                 for target, reach in spans if target.anchor != PCT and target.offset
                 for offset in range(reach + 1)}
        ranked = replace(need, ranks=frozenset(refs), total=False, spread=False)
        groups = grouped_list_statistics(plan, (ranked,), clip_rows_per_unit, execute)
        if groups is not None:
            return {key: {ref.rank(stats.n): value for ref, value in stats.values.items()
                          if value is not None}
                    for key, group in groups.items()
                    for stats in (group.columns[need.column],)}
    keys = group_keys(plan)
    ranked = numbered(exp.column("c0"), keys,
                      scope_select(plan, (need,), clip_rows_per_unit).subquery("s", copy=False))
    within = exp.or_(*[exp.column("rn").between(
        exp.Sub(this=_target_sql(target), expression=exp.Literal.number(reach)),
        exp.Add(this=_target_sql(target), expression=exp.Literal.number(reach)))
        for target, reach in spans])
    statement = exp.select(*keys, "v", "rn").from_(ranked.subquery("w")).where(within)
    found: dict[tuple, dict[int, float]] = {}
    for row in execute(statement.sql(dialect=capabilities.dialect, copy=False)):
        found.setdefault(tuple(row[:len(keys)]), {})[int(row[-1])] = need.clamp_to_domain(row[-2])
    return found


def _target_sql(target: RankRef) -> exp.Expression:
    """A draw's target rank over the group's n, kept in 1..n as the draw keeps it."""
    n = exp.column("n")
    return exp.func("greatest", exp.Literal.number(1), exp.func("least", n, rank_sql(target, n)))


def near(values: dict[int, float], fetch: Fetch) -> Fetch:
    """``fetch``, answered from ``values`` (by rank) when they hold every rank asked."""
    def fetch_near(first: int, last: int) -> list[float]:
        if all(rank in values for rank in range(first, last + 1)):
            return [values[rank] for rank in range(first, last + 1)]
        return fetch(first, last)

    return fetch_near


def rank_counts(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                clip_rows_per_unit: int | None, execute: Execute, key: tuple = ()):
    """``count(y)``: the column's values in scope below y and at or below y, and the
    largest below y and the smallest above it (None where there is none; the piecewise
    form's gap around y), one scan (privacy/inverse_sensitivity.py, for a candidate
    drawn from a tail). ``y`` is a candidate of the rules' grid, never an analyst's
    literal."""
    scope = _group_scope(plan, need, clip_rows_per_unit, key)

    def count(y: float) -> tuple[int, int, float | None, float | None]:
        value, point = exp.column("c0"), exp.Literal.number(repr(y))
        below = exp.Sum(this=exp.case().when(value < point, exp.Literal.number(1))
                        .else_(exp.Literal.number(0)))
        through = exp.Sum(this=exp.case().when(value <= point, exp.Literal.number(1))
                          .else_(exp.Literal.number(0)))
        under = exp.Max(this=exp.case().when(value < point, value.copy()))
        over = exp.Min(this=exp.case().when(value > point, value.copy()))
        statement = exp.select(below, through, under, over).from_(scope().subquery("s"))
        ((a, b, low, high),) = execute(statement.sql(dialect=dialect, copy=False))
        return (int(a or 0), int(b or 0), None if low is None else need.clamp_to_domain(low),
                None if high is None else need.clamp_to_domain(high))

    return count
