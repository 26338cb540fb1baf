"""Per-group order statistics on PostgreSQL by its ordered-set aggregate, in two passes.

The window path (``grouped``) numbers every value of every group (a sort of the whole
scope by key and value, two window functions over it, then a hash aggregate of every
row; at 10 M rows a grouped MEDIAN cost 3.3 times PostgreSQL's own). Here a first pass
reads each group's counts and sums (one hash aggregate, no sort); the second asks
``PERCENTILE_DISC(ARRAY[…]) WITHIN GROUP (ORDER BY value)`` for every wanted rank at
once, which sorts each group's values once, as the plain ``percentile_cont`` does.

The wanted ranks depend on each group's n, so the fractions are constants written per
group: a direct argument of an ordered-set aggregate is evaluated once per group and may
read the grouping columns, so a CASE on the key picks the group's array. Rank r of n is
asked as the fraction (r − ½)/n: PostgreSQL answers the value at ⌈f·n⌉, and ⌈r − ½ ± ulp⌉
is r for every n below 2⁵⁰, so float rounding cannot move it. Both passes run in the
caller's snapshot, so the counts and the ranks see the same rows.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.interrupts import checkpoint
from proxy.pushdown.grouped_lists import counting_items, read_groups
from proxy.pushdown.scope import Execute, group_keys, is_group, scope_select
from proxy.pushdown.values import case_of, literal
from proxy.statistics import ColumnNeeds, GroupStats
from proxy.vocabulary import QueryPlan


def grouped_rank_statistics(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], clip_rows_per_unit: int | None,
    execute: Execute,
) -> dict[tuple, GroupStats]:
    """Every group's statistics, as ``statistics_query`` reads them, on PostgreSQL."""
    keys = group_keys(plan)
    scope = scope_select(plan, needs, clip_rows_per_unit).subquery("s", copy=False)
    checkpoint()  # each copy of a scope with many group keys takes a fraction of a second
    items, readers = counting_items(plan, needs)
    counting = exp.select(*keys, *items).from_(scope.copy(), copy=False).group_by(*keys,
                                                                              copy=False)
    checkpoint()
    groups, _ = read_groups(execute(counting.sql(dialect="postgres", copy=False)), keys, needs,
                            readers)
    ranked = [(index, need) for index, need in enumerate(needs) if need.ranks]
    items, asked = [], []  # asked[i][group key]: the ranks of items[i]'s array, in order
    for index, need in ranked:
        branches, ranks_of = [], {}
        for key, group in groups.items():
            stats = group.columns[need.column]
            for ref in need.ranks:  # None unless the rank is one of 1..n
                stats.values[ref] = None
            ranks = sorted({rank for rank in (ref.rank(stats.n) for ref in need.ranks)
                            if 1 <= rank <= stats.n})
            if ranks:
                fractions = [literal((rank - 0.5) / stats.n) for rank in ranks]
                branches.append((is_group(key), exp.cast(
                    exp.Array(expressions=fractions), "DOUBLE PRECISION[]")))
                ranks_of[key] = ranks
        if ranks_of:  # case_of: Case.when would copy every branch so far (quadratic)
            order = exp.Order(expressions=[exp.Ordered(this=exp.column(f"c{index}"))])
            items.append(exp.WithinGroup(this=exp.PercentileDisc(this=case_of(*branches)),
                                         expression=order))
            asked.append((need, ranks_of))
    if not items:
        return groups
    statement = exp.select(*keys, *items).from_(scope, copy=False).group_by(*keys, copy=False)
    for row in execute(statement.sql(dialect="postgres", copy=False)):
        key = tuple(row[: len(keys)])
        for (need, ranks_of), values in zip(asked, row[len(keys):]):
            if key not in ranks_of:
                continue
            at = dict(zip(ranks_of[key], values))
            stats = groups[key].columns[need.column]
            for ref in need.ranks:
                rank = ref.rank(stats.n)
                if rank in at:
                    stats.values[ref] = need.clamp_to_domain(at[rank])
    return groups
