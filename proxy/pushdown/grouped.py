"""Statistics per GROUP BY cell in one statement: a window numbers the values of each
group, and a CASE picks the requested ranks (one sort per column that needs ranks).

    WITH scope AS (SELECT keys, needed columns FROM table WHERE predicate),
         base AS (rows per group), s_i AS (per column: count, sum, values at ranks)
    SELECT keys, rows, n_i, total_i, value_i_j ... FROM base LEFT JOIN s_i USING (keys)
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from proxy.interrupts import checkpoint
from proxy.pushdown.scope import (
    count_distinct,
    counts_units,
    exact_sum,
    group_keys,
    read_sum,
    scope_select,
)
from proxy.statistics import BOTTOM, PCT, ColumnNeeds, ColumnStats, GroupStats, RankRef
from proxy.vocabulary import QueryPlan


@dataclass(frozen=True)
class StatisticsQuery:
    """The SQL text and how to read its result columns back."""

    sql: str
    keys: tuple[str, ...]
    needs: tuple[ColumnNeeds, ...]
    units: bool = False  # an n_units column follows n_rows

    def read(self, rows: list[tuple]) -> dict[tuple, GroupStats]:
        """Backend rows → GroupStats per group key tuple."""
        result: dict[tuple, GroupStats] = {}
        for row in rows:
            key, rest = tuple(row[: len(self.keys)]), list(row[len(self.keys):])
            group = GroupStats(rows=int(rest.pop(0) or 0))
            if self.units:
                group.units = int(rest.pop(0) or 0)
            for need in self.needs:
                stats = ColumnStats(n=int(rest.pop(0) or 0))
                if need.total:
                    stats.total = read_sum(rest.pop(0))
                if need.spread:
                    stats.m2 = float(rest.pop(0) or 0) * stats.n
                if need.distinct:
                    stats.distinct = int(rest.pop(0) or 0)
                for ref in _ordered(need.ranks):
                    stats.values[ref] = need.clamp_to_domain(rest.pop(0))
                group.columns[need.column] = stats
            result[key] = group
        return result


def statistics_query(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], dialect: str, clip_rows_per_unit: int | None
) -> StatisticsQuery:
    """The one statement that computes every group's statistics (``plan.group_by`` set;
    ``clip_rows_per_unit`` as in ``scope_select``)."""
    keys = group_keys(plan)
    scope = scope_select(plan, needs, clip_rows_per_unit)
    ctes: list[tuple[str, exp.Expression]] = [("scope", scope)]
    outer = exp.select(*keys, exp.alias_(exp.Count(this=exp.Star()), "n_rows")).from_("scope")
    units = counts_units(plan)
    if units:
        outer = outer.select(exp.alias_(count_distinct(exp.column("u")), "n_units"), copy=False)
    ctes.append(("base", outer.group_by(*keys, copy=False)))
    final = exp.select(*[exp.column(k, "base") for k in keys], exp.column("n_rows", "base"))
    if units:
        final = final.select(exp.column("n_units", "base"), copy=False)
    final = final.from_("base", copy=False)
    for index, need in enumerate(needs):
        checkpoint()
        name = f"c{index}"
        ctes.append((f"s{index}", _column_statistics(name, need, keys)))
        final = final.select(exp.column(f"{name}_n", f"s{index}"), copy=False)
        if need.total:
            final = final.select(exp.column(f"{name}_total", f"s{index}"), copy=False)
        if need.spread:
            final = final.select(exp.column(f"{name}_m2", f"s{index}"), copy=False)
        if need.distinct:
            final = final.select(exp.column(f"{name}_distinct", f"s{index}"), copy=False)
        for j, _ in enumerate(_ordered(need.ranks)):
            final = final.select(exp.column(f"{name}_r{j}", f"s{index}"), copy=False)
        on = exp.and_(*[exp.column(k, "base").eq(exp.column(k, f"s{index}")) for k in keys])
        final = final.join(f"s{index}", on=on, join_type="left", copy=False)
    for alias, cte in ctes:
        checkpoint()
        final = final.with_(alias, as_=cte, copy=False)
    checkpoint()
    return StatisticsQuery(final.sql(dialect=dialect, copy=False), keys, needs, units)


def _column_statistics(name: str, need: ColumnNeeds, keys) -> exp.Select:
    """Per group: non-null count, exact decimal sum and values at the requested ranks."""
    value = exp.column(name)
    ranked = numbered(value, keys, exp.to_table("scope"))
    if not need.ranks:  # no order statistics: a plain aggregate, no sort
        ranked = exp.select(*keys, exp.alias_(value, "v"), exp.alias_(exp.Literal.number(0), "rn"),
                            exp.alias_(exp.Literal.number(0), "n")).from_("scope")
        ranked = ranked.where(value.is_(exp.null()).not_())
    stats = exp.select(*keys, exp.alias_(exp.Count(this=exp.column("v")), f"{name}_n"))
    if need.total:
        stats = stats.select(exp.alias_(exact_sum(exp.column("v"), need.lower, need.upper),
                                          f"{name}_total"), copy=False)
    if need.spread:
        stats = stats.select(exp.alias_(exp.VariancePop(this=exp.column("v")), f"{name}_m2"),
                             copy=False)
    if need.distinct:
        stats = stats.select(exp.alias_(count_distinct(exp.column("v")), f"{name}_distinct"),
                             copy=False)
    for j, ref in enumerate(_ordered(need.ranks)):
        hit = exp.column("rn").eq(rank_sql(ref, exp.column("n")))
        pick = exp.Case().when(hit, exp.column("v"))
        stats = stats.select(exp.alias_(exp.Max(this=pick), f"{name}_r{j}"), copy=False)
    return stats.from_(ranked.subquery("ranked")).group_by(*keys)


def numbered(value: exp.Expression, keys, source: exp.Expression) -> exp.Select:
    """``source``'s non-null ``value`` as v with its rank rn in its group (the keys) and
    the group's count n: one sort of the source, by key and value."""
    partition = [exp.column(k) for k in keys]
    return exp.select(
        *keys, exp.alias_(value, "v"),
        exp.alias_(exp.Window(this=exp.RowNumber(), partition_by=partition,
                              order=exp.Order(expressions=[value.copy()])), "rn"),
        exp.alias_(exp.Window(this=exp.Count(this=exp.Star()),
                              partition_by=[k.copy() for k in partition]), "n"),
    ).from_(source).where(value.is_(exp.null()).not_())


def rank_sql(ref: RankRef, n: exp.Expression) -> exp.Expression:
    """The rank of ``ref`` as SQL over the group's non-null count n (integer arithmetic)."""
    if ref.anchor == PCT:
        p = ref.fraction
        numerator = exp.Mul(this=exp.Literal.number(p.numerator), expression=n)
        ceiling = exp.IntDiv(
            this=exp.paren(exp.Add(this=numerator, expression=exp.Literal.number(p.denominator - 1))),
            expression=exp.Literal.number(p.denominator),
        )
        rank = exp.func("greatest", exp.Literal.number(1), ceiling)
        return exp.Add(this=rank, expression=exp.Literal.number(ref.offset))
    aside: exp.Expression = exp.Literal.number(ref.offset)
    if ref.fraction is not None:  # the offset kept within ⌊f·n⌋ (RankRef.rank)
        share = exp.IntDiv(this=exp.Mul(this=exp.Literal.number(ref.fraction.numerator),
                                        expression=n.copy()),
                           expression=exp.Literal.number(ref.fraction.denominator))
        aside = exp.func("least", aside, share)
    if ref.anchor == BOTTOM:
        return exp.Add(this=exp.Literal.number(1), expression=aside)
    return exp.Sub(this=n, expression=aside)


def _ordered(refs) -> list[RankRef]:
    return sorted(refs, key=lambda r: (r.anchor, r.offset, r.fraction or 0))


