"""Statistics of a query without GROUP BY, at about the cost of the plain aggregate.

Pass 1 is one aggregate over the scope: row and non-null counts and exact sums (and,
where the backend asks for it, the per-unit bound's fingerprint in the same scan).
Then the few largest/smallest values, as top-k ``ORDER BY … LIMIT k`` subqueries;
where pass 1 scans for the column anyway (SUM, AVG), they ride in it instead, beyond a
threshold a pilot sample gives (``_pilot_thresholds``). On DuckDB every column's extremes
ride in pass 1 as ``max(v, k)``/``min(v, k)`` (a bounded heap, no pilot), however deep:
a drawn MAX's first windows are thousands of values (pushdown/window.with_window_extremes).
Percentiles come last, when n is known: on a large scope a pilot sample brackets the
wanted ranks, one pass counts the values below and inside the bracket, and the
percentile of the bracket alone picks them (``_bracketed``); else, or when it misses,
the backend's own ``PERCENTILE_DISC``/``QUANTILE_DISC`` is asked for rank k as the
fraction (k − ½)/n, which both engines map to rank ⌈q·n⌉ = k whatever the rounding of
q. All passes run in the same snapshot.

Each statement is built for one execution, so it is built in place and rendered
without sqlglot's defensive copies (``copy=False``): copying the scope at every
builder step, and the whole statement to render it, was most of the proxy's own
time for a SUM (issue 17). The scope itself is shared and is copied once per use.
"""

from __future__ import annotations

import math

from sqlglot import exp

from proxy.backends.base import Capabilities, GroupedRanks
from proxy.pushdown.scope import (
    Execute,
    count_distinct,
    counts_units,
    exact_sum,
    extreme_refs,
    fill_extremes,
    filtered_source,
    linked_if_named,
    needed_value,
    read_sum,
    reused_sql,
    scope_select,
    source_table,
)
from proxy.pushdown.values import DOUBLE, literal
from proxy.statistics import BOTTOM, PCT, TOP, ColumnNeeds, ColumnStats, GroupStats
from proxy.vocabulary import COUNT, DerivedColumn, QueryPlan


def ungrouped_statistics(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], capabilities: Capabilities,
    clip_rows_per_unit: int | None, execute: Execute,
) -> GroupStats:
    dialect, thresholds = capabilities.dialect, {}
    if (clip_rows_per_unit is None
            and capabilities.grouped_ranks is not GroupedRanks.LISTS  # lists need no pilot
            and plan.per_unit is None  # a sample of its rows is no sample of its units
            and any(_first_pass_work(need) for need in needs)):
        thresholds = _pilot_thresholds(plan, needs, dialect, execute)
    group, _ = first_pass(plan, needs, capabilities, clip_rows_per_unit, execute,
                          thresholds=thresholds)
    remaining_passes(plan, needs, group, dialect, clip_rows_per_unit, execute)
    return group


def first_pass(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], capabilities: Capabilities,
    clip_rows_per_unit: int | None, execute: Execute,
    whole_table: list[exp.Expression] = (),
    thresholds: dict[tuple[int, str], float] | None = None,
) -> tuple[GroupStats, list]:
    """Counts and sums in one aggregate pass (they do not depend on the shift s).

    The pass reads the table itself, as the plain aggregate would (the clipped scope
    under DP). ``whole_table``: more aggregates over every row of the table (the
    per-unit bound's fingerprint) in the same scan; the scope's aggregates then take
    the predicate as ``FILTER (WHERE …)``. Returns the statistics and the values of the
    ``whole_table`` aggregates. ``thresholds`` (from ``_pilot_thresholds``): the
    extremes of those columns and ends ride along in the same scan (``_beyond``).

    Where the backend's capabilities ask for a ``projected_scope``, the pass reads the
    scope as a subquery (``scope_select``), so each normalised value is computed once
    per row however many aggregates use it: DuckDB evaluates a repeated CASE once per
    use (the folded extremes use it four times; at 1 M rows the pass took 13-15 ms,
    8-9 ms from the subquery). PostgreSQL keeps the form its pass was measured in (the
    table read directly)."""
    group = GroupStats(columns={need.column: ColumnStats() for need in needs})
    clipped = clip_rows_per_unit is not None
    assert not (clipped and whole_table), "DP clipping needs no per-unit bound"
    projected = clipped or (capabilities.projected_scope and not whole_table)
    # DuckDB's max(v, k)/min(v, k): every column's extremes in this scan, a bounded heap
    # each, however deep (a drawn MAX's first windows: thousands of values)
    listed = projected and capabilities.grouped_ranks is GroupedRanks.LISTS
    filtered = bool(whole_table) and plan.where is not None
    items, readers = [], []

    def scoped(aggregate: exp.Expression) -> exp.Expression:
        if not filtered:
            return aggregate
        return exp.Filter(this=aggregate, expression=exp.Where(this=plan.where.copy()))

    if any(a.kind == COUNT and a.column is None for a in plan.aggregates):
        items.append(scoped(exp.Count(this=exp.Star())))
        readers.append(lambda value: setattr(group, "rows", int(value or 0)))
    if counts_units(plan):
        unit = exp.column("u") if projected else exp.column(plan.table.privacy_unit, quoted=True)
        items.append(scoped(count_distinct(unit)))
        readers.append(lambda value: setattr(group, "units", int(value or 0)))
    for index, need in enumerate(needs):
        stats = group.columns[need.column]
        column = exp.column(f"c{index}") if projected else needed_value(plan.table, need)
        if need.count or need.total or any(r.anchor == PCT for r in need.ranks):
            items.append(scoped(exp.Count(this=column)))
            readers.append(lambda value, s=stats: setattr(s, "n", int(value or 0)))
        if need.total:
            items.append(scoped(exact_sum(column, need.lower, need.upper)))
            readers.append(lambda value, s=stats: setattr(s, "total", read_sum(value)))
        if need.spread:
            items.append(scoped(exp.VariancePop(this=column)))
            readers.append(lambda value, s=stats: setattr(s, "m2", float(value or 0) * s.n))
        if need.distinct:
            items.append(scoped(count_distinct(column)))
            readers.append(lambda value, s=stats: setattr(s, "distinct", int(value or 0)))
        for anchor in (TOP, BOTTOM):
            if (index, anchor) in (thresholds or {}) and not whole_table:
                refs = extreme_refs(need, anchor)
                (threshold, checked), deepest = thresholds[index, anchor], max(r.offset for r in refs)
                raw = (None if projected or isinstance(plan.table.columns.get(need.column),
                                                       DerivedColumn)
                       else exp.column(need.column, quoted=True))
                reached = {}  # a checked threshold's count of the values at or beyond it
                if checked:
                    items.append(exp.CountIf(this=_beyond_test(column, threshold, anchor, raw,
                                                               inclusive=True)))
                    readers.append(lambda value, r=reached: r.setdefault("n", int(value or 0)))
                items.append(_beyond(column, threshold, deepest + 1, anchor, raw))
                readers.append(lambda value, n=need, s=stats, r=refs, t=threshold,
                               k=deepest + 1, reached=reached:
                               _fill_checked(n, s, r, value, t, k, reached.get("n", k)))
            elif listed and (refs := extreme_refs(need, anchor)):
                kind = exp.Max if anchor == TOP else exp.Min
                items.append(kind(this=column.copy(), expression=exp.Literal.number(
                    max(r.offset for r in refs) + 1)))
                readers.append(lambda value, n=need, s=stats, r=refs: fill_extremes(
                    n, s, r, value))
    if not items and not whole_table:
        return group, []
    built = []

    def statement(plan: QueryPlan) -> exp.Select:
        parts = [item.copy() for item in items] if built else items  # built in place
        built.append(plan)
        if projected:
            return exp.select(*parts).from_(scope_select(plan, needs, clip_rows_per_unit)
                                            .subquery("s", copy=False), copy=False)
        unit = counts_units(plan) or bool(whole_table)
        if filtered:  # the WHERE is in each aggregate's FILTER
            source, where = source_table(plan, None, unit), None
        else:
            source, where = filtered_source(plan, None, unit)
        select = exp.select(*parts, *whole_table).from_(source, copy=False)
        if where is not None:
            select = select.where(where, copy=False)
        if not unit:
            linked_if_named(select, plan)
        return select

    if whole_table:  # a fingerprint's aggregates: not kept
        sql = statement(plan).sql(dialect=capabilities.dialect, copy=False)
    else:
        sql = reused_sql(plan, (needs, type(clip_rows_per_unit), clip_rows_per_unit,
                                tuple(sorted((thresholds or {}).items())), projected),
                         capabilities.dialect, statement)
    row = execute(sql)[0]
    for reader, value in zip(readers, row):
        reader(value)
    return group, list(row[len(items):])


def remaining_passes(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], group: GroupStats, dialect: str,
    clip_rows_per_unit: int | None, execute: Execute,
) -> None:
    """The order statistics, whose ranks depend on the shift s: the extremes in one
    statement of top-k subqueries, then the percentiles."""
    if not any(need.ranks for need in needs):
        return
    if not any(r.anchor == PCT or r not in group.columns[need.column].values
               for need in needs for r in need.ranks):
        return  # the extremes came with the first pass, and no percentile is wanted
    scope = scope_select(plan, needs, clip_rows_per_unit)
    items, readers = [], []
    for index, need in enumerate(needs):
        stats, column = group.columns[need.column], exp.column(f"c{index}")
        for anchor in (TOP, BOTTOM):
            refs = extreme_refs(need, anchor)
            if refs and not all(r in stats.values for r in refs):
                items.append(_extremes(column, max(r.offset for r in refs) + 1, anchor, scope))
                readers.append(lambda value, n=need, s=stats, r=refs: fill_extremes(
                    n, s, r, value))
    if items:
        for reader, value in zip(readers, execute(exp.select(*items).sql(dialect=dialect, copy=False))[0]):
            reader(value)
    _percentiles(plan, needs, group, scope, dialect, clip_rows_per_unit, execute)


def _first_pass_work(need: ColumnNeeds) -> bool:
    """Whether the first pass scans for this column anyway (a count or a sum) and it
    needs extremes, which can then ride along (a lone MAX keeps its top-k scan)."""
    return (need.total or need.count) and any(r.anchor in (TOP, BOTTOM) for r in need.ranks)


def _pilot_thresholds(plan: QueryPlan, needs, dialect: str, execute: Execute
                      ) -> dict[tuple[int, str], tuple[float, bool]]:
    """For each column and end whose extremes can ride in the first pass: a threshold
    (and whether it must be checked), the r-th largest (TOP) or smallest (BOTTOM) value
    of a block sample of the scope (the pilot, ``PILOT_PERCENT``), k the number of
    extremes wanted. The sample's values are some of the scope's (the same snapshot, the
    same WHERE; not under DP clipping, which this is never used with), so with r = k the
    scope's k largest values are all ≥ the sample's k-th largest: whatever the sample,
    the values beyond the threshold and the threshold itself give the scope's k largest
    exactly (``_beyond``, ``_with_ties``). Where k is deep (a drawn MAX's first windows,
    ``extremes_in_pass``) that threshold would list a hundred times k values, so r is
    the sample's expected share of k, ``BRACKET_SIGMAS`` standard errors further in
    (``_sample_rank``): the first pass then also counts the values at or beyond it, and
    they are used only when at least k are (else the top-k scan reads them): exact
    whatever the sample. An end whose sample holds fewer than r values gets no
    threshold (its extremes come from the top-k scan)."""
    sampled = scope_select(plan, needs, None, sample_percent=PILOT_PERCENT)
    wanted = [(index, anchor, _sample_rank(max(r.offset for r in refs) + 1))
              for index, need in enumerate(needs) if _first_pass_work(need)
              for anchor in (TOP, BOTTOM) if (refs := extreme_refs(need, anchor))]
    if not wanted:
        return {}
    row = execute(exp.select(*[_extremes(exp.column(f"c{index}"), rank, anchor, sampled)
                               for index, anchor, (rank, _) in wanted])
                  .sql(dialect=dialect, copy=False))[0]
    thresholds = {}
    for (index, anchor, (rank, checked)), values in zip(wanted, row):
        values = [value for value in values or () if value is not None]
        if len(values) >= rank:
            thresholds[index, anchor] = (float(values[rank - 1]), checked)
    return thresholds


def _sample_rank(k: int) -> tuple[int, bool]:
    """The pilot's rank whose value likely has k of the scope's values at or beyond it,
    and whether that must be checked (it is fewer than k): the sample holds about
    ``PILOT_PERCENT`` % of them, widened by ``BRACKET_SIGMAS`` standard errors."""
    share = k * PILOT_PERCENT / 100
    rank = math.ceil(share + BRACKET_SIGMAS * math.sqrt(share)) + 1
    return (rank, True) if rank < k else (k, False)


def _beyond(column: exp.Expression, threshold: float, k: int, anchor: str,
            raw: exp.Expression | None = None) -> exp.Expression:
    """The (at most) k most extreme values strictly beyond the threshold, most extreme
    first, as an aggregate of the first pass: ``(ARRAY_AGG(v ORDER BY v DESC) FILTER
    (WHERE v > t))[1:k]`` (ascending and ``<`` for BOTTOM). Only the few values beyond
    the pilot's k-th are sorted."""
    descending = anchor == TOP
    beyond = _beyond_test(column, threshold, anchor, raw)
    in_order = exp.Order(this=column.copy(),
                         expressions=[exp.Ordered(this=column.copy(), desc=descending)])
    listed = exp.Filter(this=exp.ArrayAgg(this=in_order), expression=exp.Where(this=beyond))
    return exp.Bracket(this=exp.paren(listed), expressions=[
        exp.Slice(this=exp.Literal.number(1), expression=exp.Literal.number(k))])


def _beyond_test(column: exp.Expression, threshold: float, anchor: str,
                 raw: exp.Expression | None, inclusive: bool = False) -> exp.Expression:
    """v strictly beyond the threshold (``inclusive``: at or beyond, ``v >= t``, what
    a checked threshold counts). The threshold is a DOUBLE parsed from its shortest
    repr (exactly the value read; a decimal literal could round differently).

    ``raw``: the stored column, tested first against a slightly looser plain literal
    (a cheap comparison in the column's own type, no cast of the column), so the
    normalising CASE runs only for the few rows near the end. It only narrows: the
    normalised value v lies in [L, U] and so does t (a normalised value), and v > t
    implies raw > t (v = raw in range; raw > U ≥ v > t above it; below, v = L ≤ t fails);
    the literal's margin (10⁻⁹ relative) covers any rounding of a decimal literal. At
    or beyond, it may drop a value equal to a threshold at the domain's other end, so a
    count can only come out fewer: the check it serves stays safe."""
    descending = anchor == TOP
    bound = exp.cast(exp.Literal.string(repr(threshold)), DOUBLE)
    if inclusive:
        beyond = column.copy() >= bound if descending else column.copy() <= bound
    else:
        beyond = column.copy() > bound if descending else column.copy() < bound
    if raw is not None:
        margin = abs(threshold) * 1e-9 + 1e-9
        loose = literal(threshold - margin if descending else threshold + margin)
        beyond = exp.and_(raw.copy() > loose if descending else raw.copy() < loose, beyond)
    return beyond


def _fill_checked(need: ColumnNeeds, stats: ColumnStats, refs, values, threshold: float,
                  k: int, reached: int) -> None:
    """The k extremes from the values beyond a threshold with ``reached`` values (at
    least) at or beyond it: used when that is k or more, or every one of the column's n
    (read before, in the same pass); else left for the top-k scan (``remaining_passes``)."""
    if reached >= k or reached == stats.n:
        fill_extremes(need, stats, refs, _with_ties(values, threshold, min(k, reached)))


def _with_ties(values, threshold: float, k: int) -> list:
    """The k most extreme values from those strictly beyond the threshold (most extreme
    first): the rest are the threshold itself, which at least k − len(values) values of
    the scope equal (at least k are at or beyond it)."""
    values = [value for value in values or () if value is not None][:k]
    return values + [threshold] * (k - len(values))


def _extremes(column, k: int, anchor: str, scope: exp.Select) -> exp.Expression:
    """The k largest (TOP) or smallest (BOTTOM) values, as an array: a top-k
    ``ORDER BY … NULLS LAST LIMIT k``, which both engines answer at the cost of MAX or
    less (a ``WHERE … IS NOT NULL`` would cost PostgreSQL 10 %). NULLs, present only
    when fewer than k values exist, are dropped when read."""
    descending = anchor == TOP
    top_k = (  # built in place (copy=False): each builder step copied the scope again
        exp.select(exp.alias_(column, "v")).from_(scope.subquery("s"), copy=False)
        .order_by(exp.Ordered(this=column, desc=descending, nulls_first=False), copy=False)
        .limit(k, copy=False)
    )
    in_order = exp.Order(this=exp.column("v"),
                         expressions=[exp.Ordered(this=exp.column("v"), desc=descending)])
    return (exp.select(exp.ArrayAgg(this=in_order))
            .from_(top_k.subquery("t", copy=False), copy=False).subquery(copy=False))



def _percentiles(plan: QueryPlan, needs, group: GroupStats, scope: exp.Select, dialect: str,
                 clip_rows_per_unit: int | None, execute: Execute) -> None:
    """The values at the percentile ranks: bracketed by a pilot where the scope is large,
    else (or when the bracket misses) straight from the backend's percentile."""
    exact = []
    for index, need in enumerate(needs):
        stats = group.columns[need.column]
        refs = [r for r in need.ranks if r.anchor == PCT]
        for ref in refs:
            stats.values[ref] = None
        inside = [(ref, ref.rank(stats.n)) for ref in refs if 1 <= ref.rank(stats.n) <= stats.n]
        if not inside:
            continue
        pilot_size = stats.n * PILOT_PERCENT // 100
        if clip_rows_per_unit is None and pilot_size >= PILOT_MIN_VALUES and _bracketed(
                plan, needs, index, need, stats, inside, scope, dialect, execute):
            continue
        exact.append((index, need, stats, inside))
    if not exact:
        return
    items = [quantiles(exp.column(f"c{index}"), [(rank - 0.5) / stats.n for _, rank in inside])
             for index, _, stats, inside in exact]
    row = execute(exp.select(*items).from_(scope.subquery("s"), copy=False)
                  .sql(dialect=dialect, copy=False))[0]
    for (_, need, stats, inside), values in zip(exact, row):
        for (ref, _), value in zip(inside, values):
            stats.values[ref] = need.clamp_to_domain(value)


# The pilot reads a 1% block sample; it is used only when that holds enough values to
# place the ranks within ±6 standard errors, and every result is checked exactly.
PILOT_PERCENT = 1
PILOT_MIN_VALUES = 2_000
BRACKET_SIGMAS = 6


def _bracketed(plan, needs, index: int, need: ColumnNeeds, stats: ColumnStats, inside,
               scope: exp.Select, dialect: str, execute: Execute) -> bool:
    """Exact order statistics without selecting over the whole scope.

    A pilot on a block sample estimates values that bracket the wanted ranks; one pass
    counts the values below and inside the bracket, and the backend's percentile over
    the bracket alone picks the ranks. A rank is used only if it provably falls inside
    (below < rank ≤ below + inside), so the result is exact whatever the sample;
    otherwise the caller asks the backend's percentile over the whole scope (the pilot
    only ever changes how long the query takes).
    """
    n, column = stats.n, exp.column(f"c{index}")
    ranks = [rank for _, rank in inside]
    margin = BRACKET_SIGMAS * 0.5 / math.sqrt(n * PILOT_PERCENT / 100)
    fractions = [min(max(q, 0.0), 1.0) for q in ((min(ranks) - 0.5) / n - margin,
                                                (max(ranks) - 0.5) / n + margin)]
    sampled = scope_select(plan, needs, None, sample_percent=PILOT_PERCENT)
    pilot = exp.select(quantiles(column, fractions)).from_(
        sampled.subquery("s", copy=False), copy=False)
    bounds = execute(pilot.sql(dialect=dialect, copy=False))[0][0]
    if not bounds or None in bounds:
        return False
    low, high = (exp.Literal.number(str(value)) for value in bounds)
    in_bracket = column.between(low, high)
    counts = exp.select(exp.CountIf(this=column < low), exp.CountIf(this=in_bracket))
    below, count_inside = (int(value or 0) for value in execute(
        counts.from_(scope.subquery("s"), copy=False).sql(dialect=dialect, copy=False))[0])
    if not all(below < r <= below + count_inside for r in ranks):
        return False
    fractions = [(r - below - 0.5) / count_inside for r in ranks]
    picks = exp.select(quantiles(column, fractions)).from_(scope.subquery("s"), copy=False)
    values = execute(picks.where(in_bracket, copy=False).sql(dialect=dialect, copy=False))[0][0]
    for (ref, _), value in zip(inside, values):
        stats.values[ref] = need.clamp_to_domain(value)
    return True


def quantiles(column: exp.Expression, fractions: list[float]) -> exp.Expression:
    """PERCENTILE_DISC at several fractions, as an array (rank ⌈q·n⌉ for each q). sqlglot
    renders the one node in each backend's form: DuckDB's ``QUANTILE_DISC(x, [q, …])``,
    PostgreSQL's ``PERCENTILE_DISC(ARRAY[q, …]) WITHIN GROUP (ORDER BY x)``, Spark's
    array of ordered-set percentiles (``sparkexact``)."""
    array = exp.Array(expressions=[exp.Literal.number(repr(q)) for q in fractions])
    return exp.PercentileDisc(this=column, expression=array)
