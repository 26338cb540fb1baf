"""A run of consecutive order statistics of one column in scope, for the smooth
sensitivity (privacy/smooth_sensitivity.py) and the exponential mechanism
(privacy/inverse_sensitivity.py): ranks first..last as one
``ORDER BY … LIMIT … OFFSET …`` over the scope (clipped under DP), which both engines
answer with a bounded top-k sort instead of ranking every row."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import cache, lru_cache

from sqlglot import exp

from proxy.backends.base import Capabilities, GroupedRanks
from proxy.errors import BackendFailed
from proxy.guards import snap
from proxy.pushdown import ungrouped
from proxy.pushdown.grouped import numbered, rank_sql
from proxy.pushdown.grouped_lists import grouped_list_statistics
from proxy.pushdown.scope import Execute, group_keys, is_group, scope_select
from proxy.pushdown.ungrouped import quantiles
from proxy.pushdown.values import literal
from proxy.statistics import BOTTOM, PCT, TOP, ColumnNeeds, ColumnStats, Fetch, RankRef
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
    from that end (``rank_window`` without OFFSET). Any other run costs about one scan:
    two values that bracket ranks first and last, and one grouped scan the values between
    them with their multiplicities and the count below; the ranks are laid out here.
    The bracket comes from a pilot on a block sample of the scope where it is large
    (``_pilot_ends``; used only when the scan shows it holds every rank asked, so exact
    whatever the sample), else from the backend's percentile at ranks first and last
    (``ungrouped.quantiles``), a sort of the scope. (An OFFSET into the middle made
    DuckDB sort ten times longer than its median: 13 s against 1.3 s at 10 M rows.)"""
    ascending = rank_window(plan, need, dialect, clip_rows_per_unit, execute, key=key)
    descending = rank_window(plan, need, dialect, clip_rows_per_unit, execute, True, key)
    scope = _group_scope(plan, need, clip_rows_per_unit, key)

    def between(first: int, last: int, low: float, high: float) -> list[float] | None:
        """Ranks first..last from the values in [low, high] with their multiplicities and
        the count below low (the NULL bucket, ordered first, so a running sum gives each
        value's highest rank); only the values whose ranks meet first..last come back,
        however wide the bracket. None when they do not hold every rank asked."""
        value = exp.column("c0")
        low_sql, high_sql = exp.Literal.number(repr(low)), exp.Literal.number(repr(high))
        bucket = exp.case().when(value < low_sql, exp.null()).else_(value)
        grouped = (exp.select(exp.alias_(bucket, "v"), exp.alias_(exp.Count(this=exp.Star()), "k"))
                   .from_(scope().subquery("s"), copy=False)  # the one copy of the scope
                   .where(value <= high_sql, copy=False).group_by(bucket.copy(), copy=False))
        running = exp.Window(this=exp.Sum(this=exp.column("k")), order=exp.Order(expressions=[
            exp.Ordered(this=exp.column("v"), nulls_first=True)]), spec=exp.WindowSpec(
                kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW"))
        ranked = exp.select("v", "k", exp.alias_(running, "b")).from_(
            grouped.subquery("g", copy=False), copy=False)
        through, count = exp.column("b"), exp.column("k")
        wanted = exp.and_(exp.column("v").is_(exp.null()).not_(),
                          through >= exp.Literal.number(first),
                          exp.Sub(this=through.copy(), expression=count) < exp.Literal.number(last))
        rows = execute(exp.select("v", "k", "b").from_(ranked.subquery("r", copy=False),
                                                       copy=False)
                       .where(wanted, copy=False).sql(dialect=dialect, copy=False))
        found = []
        for v, k, b in sorted((need.clamp_to_domain(v), int(k), int(b)) for v, k, b in rows):
            found += [v] * (min(b, last) - max(b - k + 1, first) + 1)
        return found if len(found) == last - first + 1 else None

    def fetch(first: int, last: int) -> list[float]:
        if first == 1:
            return ascending(first, last)
        if last == n:
            return descending(1, n + 1 - first)[::-1]
        if (clip_rows_per_unit is None and not key
                and n * ungrouped.PILOT_PERCENT // 100 >= ungrouped.PILOT_MIN_VALUES):
            ends = _pilot_ends(plan, need, dialect, execute, n, first, last)
            if ends is not None and (found := between(first, last, *ends)) is not None:
                return found
        ends = exp.select(quantiles(exp.column("c0"), [(first - 0.5) / n, (last - 0.5) / n]))
        low, high = (need.clamp_to_domain(v) for v in execute(
            ends.from_(scope().subquery("s")).sql(dialect=dialect, copy=False))[0][0])
        found = between(first, last, low, high)
        if found is None:
            raise BackendFailed("a run of ranks read back with the wrong number of values")
        return found

    return fetch


def _pilot_ends(plan: QueryPlan, need: ColumnNeeds, dialect: str, execute: Execute, n: int,
                first: int, last: int) -> tuple[float, float] | None:
    """Values that likely bracket ranks first..last: the pilot's (a block sample of the
    scope, ``ungrouped.PILOT_PERCENT``) percentiles at their fractions widened by
    ``ungrouped.BRACKET_SIGMAS``
    standard errors, as ``ungrouped._bracketed`` takes them. None when the sample has
    none (the caller then reads the exact ends)."""
    margin = ungrouped.BRACKET_SIGMAS * 0.5 / math.sqrt(n * ungrouped.PILOT_PERCENT / 100)
    fractions = [min(max(q, 0.0), 1.0) for q in ((first - 0.5) / n - margin,
                                                (last - 0.5) / n + margin)]
    sampled = scope_select(plan, (need,), None, sample_percent=ungrouped.PILOT_PERCENT)
    pilot = exp.select(quantiles(exp.column("c0"), fractions)).from_(
        sampled.subquery("s", copy=False), copy=False)
    ends = execute(pilot.sql(dialect=dialect, copy=False))[0][0]
    if not ends or None in ends:
        return None
    return need.clamp_to_domain(ends[0]), need.clamp_to_domain(ends[1])


# A read's width against the window a draw asks for: the first read then holds two ×4
# widenings (privacy/inverse_sensitivity.py), which at 10 M rows most draws needed
WIDENING = 16
# Values read at most for the widened first windows of every group of a GROUP BY
GROUPED_VALUES = 250_000
# Values one widened read holds at most (the widest window a draw asks for: 2^17 ranks
# each side), and the deepest extremes read with the statistics (``with_window_extremes``)
WIDE_VALUES = (1 << 18) + 1
LISTED_EXTREMES = 20_000


def widened_spans(spans: list[tuple[RankRef, int]], groups: int) -> list[tuple[RankRef, int]]:
    """``spans`` (target, reach) of the first windows of every group's draws
    (``grouped_windows``), each reach ``WIDENING`` (else 4) times as far where all the
    groups' values stay within ``GROUPED_VALUES``: a draw that widens its window is then
    answered from that one read instead of two reads per group. From public numbers only
    (the groups of the plan, and the reaches: ε, s, the grid)."""
    for factor in (WIDENING, 4):
        if groups * sum(2 * reach * factor + 1 for _, reach in spans) <= GROUPED_VALUES:
            return [(target, reach * factor) for target, reach in spans]
    return spans


def with_window_extremes(needs: tuple[ColumnNeeds, ...],
                         spans_of: dict[str, list[tuple[RankRef, int]]]
                         ) -> tuple[ColumnNeeds, ...]:
    """``needs`` with the extremes that hold the first windows of each MAX and MIN drawn
    over them (``spans_of``: privacy/inverse_sensitivity.first_windows), widened
    ``WIDENING`` times (up to ``LISTED_EXTREMES`` deep; a deeper one, at a tiny ε, reads
    its windows itself), as ranks counted from their end: read in the statistics' first
    pass (DuckDB's ``max(v, k)``, pushdown/ungrouped.first_pass), where the count the
    draw's target rank needs is read too, a drawn MAX costs one scan (``by_rank``)."""
    extra: dict[str, frozenset[RankRef]] = {}
    for column, spans in spans_of.items():
        for target, reach in spans:
            depth = target.offset + WIDENING * reach + 1
            if target.anchor != PCT and depth <= LISTED_EXTREMES:  # else its own reads
                extra[column] = extra.get(column, frozenset()) | _from_end(
                    target.anchor, depth)
    return tuple(_merged(need, extra[need.column]) if need.column in extra else need
                 for need in needs)


@lru_cache(maxsize=64)
def _from_end(anchor: str, depth: int) -> frozenset[RankRef]:
    """The ranks 0..depth − 1 from one end (the same few depths come back: kept)."""
    return frozenset(RankRef(anchor, offset) for offset in range(depth))


@lru_cache(maxsize=64)
def _merged(need: ColumnNeeds, ranks: frozenset[RankRef]) -> ColumnNeeds:
    return replace(need, ranks=need.ranks | ranks)


def by_rank(stats: ColumnStats) -> dict[int, float]:
    """The values read for one column, by their rank among its n values."""
    return {ref.rank(stats.n): value for ref, value in stats.values.items()
            if value is not None}


def widened(fetch: Fetch, n: int, factor: int = WIDENING) -> Fetch:
    """``fetch``, each read made ``factor`` times as wide (half of it on each side, all
    of it away from the end a window starts at; within 1..n; at most ``WIDE_VALUES`` values unless the
    window asked is wider) and kept: a draw that widens its window
    ×4 until its tails are light (privacy/inverse_sensitivity.py) is answered from the
    first read, whose cost hardly grows with its width (a top-k, or a scan that groups
    the values inside a bracket). Only what is read changes, never a value at a rank."""
    kept: dict[int, float] = {}

    def fetch_wide(first: int, last: int) -> list[float]:
        if not all(rank in kept for rank in range(first, last + 1)):
            width = last - first + 1
            extra = min(width * (factor - 1), max(0, WIDE_VALUES - width))
            if first == 1 or last == n:  # a window at an end widens away from it
                low = 1 if first == 1 else max(1, first - extra)
                high = n if last == n else min(n, last + extra)
            else:
                low, high = max(1, first - extra // 2), min(n, last + extra // 2)
            kept.update(zip(range(low, high + 1), fetch(low, high)))
        return [kept[rank] for rank in range(first, last + 1)]

    return fetch_wide


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
            return {key: by_rank(group.columns[need.column]) for key, group in groups.items()}
    if capabilities.bucketed_ranks and (found := bucketed_windows(
            plan, need, capabilities.dialect, clip_rows_per_unit, execute, spans)) is not None:
        return found
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


# Buckets of the declared domain per group in ``bucketed_windows``' histogram, and the
# most conditions (key tests and brackets) its second statement may hold
BUCKETS = 1024
BRACKET_CONNECTORS = 192


def bucketed_windows(plan: QueryPlan, need: ColumnNeeds, dialect: str,
                     clip_rows_per_unit: int | None, execute: Execute,
                     spans: list[tuple[RankRef, int]]) -> dict[tuple, dict[int, float]] | None:
    """``grouped_windows`` without ranking every row (``Capabilities.bucketed_ranks``:
    Sail sorted 10 M rows for a ROW_NUMBER in 4.6 s, 12x its grouped median): a
    histogram of each group's values over ``BUCKETS`` equal parts of the declared
    domain (their counts, least and greatest values), then, for each group, the
    distinct values and their multiplicities between the least value of the bucket
    holding its first wanted rank and the greatest of the one holding its last; ranks
    are laid out here from the count below. Exact whatever the data: a bucket's index
    never falls as the value grows, so the values of earlier buckets are all below the
    bracket (checked: the values read must be as many as the histogram counts). None,
    for the window statement, when the domain is not declared or narrower than a
    double's ``BUCKETS`` parts (below about 5.7·10⁻³⁰⁶ the buckets' scale is infinite,
    which was sent as the literal ``inf``: a review of 2026-11-29), the groups need
    more conditions than ``BRACKET_CONNECTORS``, or the brackets hold more than
    ``2 * GROUPED_VALUES`` values (data where one bucket holds most values)."""
    keys, value = group_keys(plan), exp.column("c0")
    if (need.lower is None or need.upper is None or not need.lower < need.upper
            or not math.isfinite(BUCKETS / (need.upper - need.lower))
            or len(plan.group_keys()) * (len(keys) + 3) > BRACKET_CONNECTORS):
        return None
    scope = scope_select(plan, (need,), clip_rows_per_unit)
    width = exp.Literal.number(repr(BUCKETS / (need.upper - need.lower)))
    # snapped: a product below 2⁻¹⁰⁷⁴ fails on PostgreSQL (underflow)
    bucket = exp.Floor(this=exp.Mul(this=snap(exp.paren(exp.Sub(
        this=value.copy(), expression=literal(float(need.lower))))), expression=width))
    histogram = (exp.select(*keys, exp.alias_(bucket, "b"), exp.Count(this=exp.Star()),
                            exp.Min(this=value.copy()), exp.Max(this=value.copy()))
                 .from_(scope.subquery("s"), copy=False)
                 .where(value.is_(exp.null()).not_(), copy=False)
                 .group_by(*keys, bucket.copy(), copy=False))
    by_group: dict[tuple, list[tuple[float, int, float, float]]] = {}
    for row in execute(histogram.sql(dialect=dialect, copy=False)):
        by_group.setdefault(tuple(row[:len(keys)]), []).append(
            (float(row[-4]), int(row[-3]), float(row[-2]), float(row[-1])))
    wanted, brackets = {}, []
    for key, buckets in by_group.items():
        buckets.sort()
        n = sum(count for _, count, _, _ in buckets)
        ranks = set()
        for target, reach in spans:
            at = max(1, min(n, target.rank(n)))
            ranks.update(range(max(1, at - reach), min(n, at + reach) + 1))
        first, last, below, through = min(ranks), max(ranks), 0, 0
        low = high = None
        for _, count, least, greatest in buckets:
            if through + count < first:
                below += count
            elif low is None:
                low = least
            if through < last:
                high = greatest
            through += count
            if through >= last and low is not None:
                break
        inside = through - below
        wanted[key] = (ranks, below, inside)
        brackets.append((key, low, high))
    if (len(brackets) * (len(keys) + 3) > BRACKET_CONNECTORS  # keys beyond those declared
            or sum(inside for _, _, inside in wanted.values()) > 2 * GROUPED_VALUES):
        return None
    if not brackets:
        return {}
    # every bracket's range first: a plain comparison that leaves the per-group tests few rows
    within = exp.and_(value.between(literal(min(low for _, low, _ in brackets)),
                                    literal(max(high for _, _, high in brackets))),
                      exp.paren(exp.or_(*[exp.and_(is_group(key), value.between(
                          literal(low), literal(high))) for key, low, high in brackets])))
    counted = (exp.select(*keys, exp.alias_(value.copy(), "v"), exp.Count(this=exp.Star()))
               .from_(scope.subquery("s"), copy=False).where(within, copy=False)
               .group_by(*keys, value.copy(), copy=False))
    values: dict[tuple, list[tuple[float, int]]] = {}
    for row in execute(counted.sql(dialect=dialect, copy=False)):
        values.setdefault(tuple(row[:len(keys)]), []).append((row[-2], int(row[-1])))
    found: dict[tuple, dict[int, float]] = {}
    for key, (ranks, below, inside) in wanted.items():
        listed = sorted(values.get(key, []))
        if sum(count for _, count in listed) != inside:
            return None  # not the histogram's bracket: the window statement reads them
        rank, at = below, {}
        for v, count in listed:
            for r in range(rank + 1, rank + count + 1):
                if r in ranks:
                    at[r] = need.clamp_to_domain(v)
            rank += count
        found[key] = at
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
