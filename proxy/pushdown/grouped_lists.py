"""Per-group statistics from aggregates alone (DuckDB), without sorting the scope.

DuckDB's ``max(x, k)``/``min(x, k)`` return each group's k largest/smallest values and
``quantile_disc`` its percentile in one hash-aggregate pass. The percentile anchors
the ranks: a second pass counts, per group, the values below and at the anchor and
lists the few values just above and below it, from which the value at every wanted
rank follows exactly. The anchor's own rank may be off by one (the backend computes
⌈q·n⌉ in floating point), so the lists reach one value further than the offsets; when
a wanted rank is still not covered, ``None`` tells the caller to use the window path.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.interrupts import checkpoint
from proxy.pushdown.scope import (
    Execute,
    count_distinct,
    counts_units,
    exact_sum,
    extreme_refs,
    fill_extremes,
    group_keys,
    read_sum,
    reused_sql,
    scope_select,
)
from proxy.pushdown.values import literal
from proxy.statistics import (
    BOTTOM,
    PCT,
    TOP,
    ColumnNeeds,
    ColumnStats,
    GroupStats,
    percentile_rank,
)
from proxy.vocabulary import QueryPlan


def grouped_list_statistics(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], clip_rows_per_unit: int | None,
    execute: Execute,
) -> dict[tuple, GroupStats] | None:
    """Pass 1 (``_first_items``), rendered once per plan shape (``reused_sql``: the
    very text a fresh rendering gives), then pass 2 where percentiles are wanted."""
    keys = group_keys(plan)

    def statement(plan: QueryPlan) -> exp.Select:
        scope = scope_select(plan, needs, clip_rows_per_unit).subquery("s", copy=False)
        checkpoint()  # each copy of a scope with many group keys takes a fraction of a second
        items, _, _ = _first_items(plan, needs)
        return exp.select(*keys, *items).from_(scope, copy=False).group_by(*keys, copy=False)

    _, readers, anchors = _first_items(plan, needs)
    sql = reused_sql(plan, ("lists", needs, type(clip_rows_per_unit), clip_rows_per_unit),
                     "duckdb", statement)
    checkpoint()
    groups, anchor_values = read_groups(execute(sql), keys, needs, readers)
    if anchors and not _around_anchors(
            keys, anchors, anchor_values, groups,
            scope_select(plan, needs, clip_rows_per_unit).subquery("s", copy=False), execute):
        return None
    return groups


def _first_items(plan: QueryPlan, needs: tuple[ColumnNeeds, ...]
                 ) -> tuple[list, list, list[tuple[int, ColumnNeeds, object]]]:
    """Pass 1's aggregates, their readers and the percentile anchors: every group's
    counts and sums (``counting_items``), its k largest and smallest values, and its
    percentiles."""
    items, readers = counting_items(plan, needs)
    anchors: list[tuple[int, ColumnNeeds, object]] = []
    for index, need in enumerate(needs):
        column = exp.column(f"c{index}")
        for anchor, kind in ((TOP, exp.Max), (BOTTOM, exp.Min)):
            refs = extreme_refs(need, anchor)
            if refs:
                deepest = max(r.offset for r in refs)
                items.append(kind(this=column, expression=exp.Literal.number(deepest + 1)))
                readers.append(lambda g, a, v, n=need, r=refs: fill_extremes(
                    n, g.columns[n.column], r, v))
        for fraction in sorted({r.fraction for r in need.ranks if r.anchor == PCT}):
            items.append(exp.PercentileDisc(this=column,
                                            expression=exp.Literal.number(repr(float(fraction)))))
            anchors.append((index, need, fraction))
            readers.append(lambda g, a, v: a.append(v))
    return items, readers, anchors


def counting_items(plan: QueryPlan, needs: tuple[ColumnNeeds, ...]) -> tuple[list, list]:
    """The aggregates of one hash-aggregate pass over the scope ``s`` that need no sort
    (rows, units where counted, each column's non-null count, exact sum and spread where
    needed), and a reader per aggregate: (group statistics, that group's anchor values,
    the aggregate's value)."""
    items: list[exp.Expression] = [exp.Count(this=exp.Star())]
    readers = [lambda g, a, v: setattr(g, "rows", int(v or 0))]
    if counts_units(plan):
        items.append(count_distinct(exp.column("u")))
        readers.append(lambda g, a, v: setattr(g, "units", int(v or 0)))
    for index, need in enumerate(needs):
        column = exp.column(f"c{index}")
        items.append(exp.Count(this=column))
        readers.append(lambda g, a, v, c=need.column: setattr(g.columns[c], "n", int(v or 0)))
        if need.total:
            items.append(exact_sum(column, need.lower, need.upper))
            readers.append(lambda g, a, v, c=need.column: setattr(g.columns[c], "total",
                                                                  read_sum(v)))
        if need.spread:
            items.append(exp.VariancePop(this=column))
            readers.append(lambda g, a, v, c=need.column: setattr(
                g.columns[c], "m2", float(v or 0) * g.columns[c].n))
        if need.distinct:
            items.append(count_distinct(column))
            readers.append(lambda g, a, v, c=need.column: setattr(
                g.columns[c], "distinct", int(v or 0)))
    return items, readers


def read_groups(rows, keys: tuple[str, ...], needs: tuple[ColumnNeeds, ...], readers
                ) -> tuple[dict[tuple, GroupStats], dict[tuple, list]]:
    """Each result row (the keys, then one value per reader) read into its group."""
    groups: dict[tuple, GroupStats] = {}
    anchor_values: dict[tuple, list] = {}
    for row in rows:
        checkpoint()  # a group at a time: 990 groups' extremes took 0.45 s of CPU unchecked
        key = tuple(row[: len(keys)])
        groups[key] = GroupStats(columns={need.column: ColumnStats() for need in needs})
        anchor_values[key] = []
        for reader, value in zip(readers, row[len(keys):]):
            reader(groups[key], anchor_values[key], value)
    return groups, anchor_values


def _around_anchors(keys, anchors, anchor_values, groups, scope, execute) -> bool:
    """Pass 2: every percentile rank r ± offset, from the counts and neighbours of the
    per-group anchor value. False when some rank is not covered."""
    names = [f"a{i}" for i in range(len(anchors))]
    rows = [exp.Tuple(expressions=[literal(v) for v in (*key, *values)])
            for key, values in anchor_values.items()]
    if not rows:
        return True
    table = exp.Values(expressions=rows, alias=exp.TableAlias(
        this=exp.to_identifier("a"), columns=[exp.to_identifier(c) for c in (*keys, *names)]))
    items = []
    for i, (index, need, fraction) in enumerate(anchors):
        column, value = exp.column(f"c{index}", "s"), exp.column(names[i], "a")
        offsets = [abs(r.offset) for r in need.ranks if r.anchor == PCT and r.fraction == fraction]
        k = exp.Literal.number(max(offsets) + 2)  # one further: the anchor may be off by one
        items += [
            exp.CountIf(this=column < value), exp.CountIf(this=column <= value),
            exp.Filter(this=exp.Min(this=column, expression=k),
                       expression=exp.Where(this=column > value)),
            exp.Filter(this=exp.Max(this=column, expression=k),
                       expression=exp.Where(this=column < value)),
        ]
    on = exp.and_(*[exp.column(k, "s").eq(exp.column(k, "a")) for k in keys])
    statement = (exp.select(*[exp.column(k, "s") for k in keys], *items).from_(scope, copy=False)
                 .join(table, on=on, copy=False)
                 .group_by(*[exp.column(k, "s") for k in keys], copy=False))
    around = [[r for r in need.ranks if r.anchor == PCT and r.fraction == fraction]
              for _, need, fraction in anchors]  # each anchor's ranks, sorted out once
    answered = set()
    for row in execute(statement.sql(dialect="duckdb", copy=False)):
        checkpoint()  # a group's ranks at a time: thousands of groups take seconds
        key, rest = tuple(row[: len(keys)]), row[len(keys):]
        answered.add(key)
        for i, (_, need, fraction) in enumerate(anchors):
            below, upto, above, under = rest[4 * i: 4 * i + 4]
            stats = groups[key].columns[need.column]
            at = percentile_rank(stats.n, fraction)  # RankRef.rank of each, once
            below, upto = int(below or 0), int(upto or 0)
            above, under = list(above or ()), list(under or ())
            for ref in around[i]:
                found = _value_at(at + ref.offset, stats.n, anchor_values[key][i],
                                  below, upto, above, under)
                if found is False:
                    return False
                stats.values[ref] = None if found is None else need.clamp_to_domain(found)
    return answered == set(groups)  # a group missing here would lack its ranks


def _value_at(rank, n, anchor, below, upto, above, under):
    """The value at ``rank`` from the anchor's rank range (below, upto] and the sorted
    lists of the values just above (ascending) and just below (descending) it; None
    outside 1..n, False when the lists do not reach."""
    if not 1 <= rank <= n:
        return None
    if below < rank <= upto:
        return anchor
    if rank > upto:
        return above[rank - upto - 1] if rank - upto <= len(above) else False
    return under[below - rank] if below - rank < len(under) else False
