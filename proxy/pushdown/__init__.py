"""QueryPlan + statistics needs → one backend SQL statement, rendered by sqlglot.

The statement returns, per group, the row count in scope and for each needed column
its non-null count, its clamped sum and its values at the requested ranks. Only these
few numbers leave the backend; no row of a protected table is fetched.

Shape (one statement, any dialect sqlglot renders):

    WITH scope AS (SELECT keys, clamped columns FROM table WHERE predicate),
         ranked_i AS (per column: ROW_NUMBER and COUNT over the group, non-null only)
    SELECT keys, rows, n_i, total_i, value_i_j ...
    FROM (rows per group) LEFT JOIN (per-column statistics per group) USING (keys)
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from proxy.analyze.plan import QueryPlan
from proxy.statistics import BOTTOM, PCT, ColumnNeeds, ColumnStats, GroupStats, RankRef

_DOUBLE = exp.DataType.build("double")
_DECIMAL = exp.DataType.build("decimal(38, 6)")


@dataclass(frozen=True)
class StatisticsQuery:
    """The SQL text and how to read its result columns back."""

    sql: str
    keys: tuple[str, ...]
    needs: tuple[ColumnNeeds, ...]

    def read(self, rows: list[tuple]) -> dict[tuple, GroupStats]:
        """Backend rows → GroupStats per group key tuple."""
        result: dict[tuple, GroupStats] = {}
        for row in rows:
            key, rest = tuple(row[: len(self.keys)]), list(row[len(self.keys):])
            group = GroupStats(rows=int(rest.pop(0) or 0))
            for need in self.needs:
                stats = ColumnStats(n=int(rest.pop(0) or 0))
                if need.total:
                    total = rest.pop(0)
                    stats.total = float(total) if total is not None else 0.0
                for ref in _ordered(need.ranks):
                    value = rest.pop(0)
                    stats.values[ref] = None if value is None else float(value)
                group.columns[need.column] = stats
            result[key] = group
        return result


def statistics_query(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], dialect: str, clip_rows_per_unit: int | None
) -> StatisticsQuery:
    """Build the one statement that computes every statistic the release needs.

    ``clip_rows_per_unit`` (DP with a privacy unit) keeps at most that many in-scope
    rows per unit, chosen by the unit's own values, so one unit's contribution is
    bounded whatever the data (SPEC §5.2, global sensitivity).
    """
    keys = tuple(f"k{i}" for i in range(len(plan.group_by)))
    scope = _scope(plan, needs, keys, clip_rows_per_unit)
    ctes: list[tuple[str, exp.Expression]] = [("scope", scope)]
    outer = exp.select(*keys, exp.alias_(exp.Count(this=exp.Star()), "n_rows")).from_("scope")
    if keys:
        outer = outer.group_by(*keys)
    ctes.append(("base", outer))
    final = exp.select(*[exp.column(k, "base") for k in keys], exp.column("n_rows", "base"))
    final = final.from_("base")
    for index, need in enumerate(needs):
        name = f"c{index}"
        ctes.append((f"s{index}", _column_statistics(name, need, keys)))
        final = final.select(exp.column(f"{name}_n", f"s{index}"))
        if need.total:
            final = final.select(exp.column(f"{name}_total", f"s{index}"))
        for j, _ in enumerate(_ordered(need.ranks)):
            final = final.select(exp.column(f"{name}_r{j}", f"s{index}"))
        on = exp.and_(*[exp.column(k, "base").eq(exp.column(k, f"s{index}")) for k in keys]) \
            if keys else exp.true()
        final = final.join(f"s{index}", on=on, join_type="left")
    for alias, cte in ctes:
        final = final.with_(alias, as_=cte)
    return StatisticsQuery(final.sql(dialect=dialect), keys, needs)


def unit_bound_sql(table: str, unit: str, dialect: str) -> str:
    """The largest number of rows one privacy unit owns in the whole table (c of §5.2)."""
    per_unit = (
        exp.select(exp.alias_(exp.Count(this=exp.Star()), "cnt"))
        .from_(exp.to_table(table, quoted=True))
        .group_by(exp.column(unit, quoted=True))
    )
    query = exp.select(exp.func("coalesce", exp.Max(this=exp.column("cnt")), exp.Literal.number(0)))
    return query.from_(per_unit.subquery("per_unit")).sql(dialect=dialect)


def _scope(plan: QueryPlan, needs, keys, clip_rows_per_unit: int | None) -> exp.Select:
    """The rows in scope: group keys and clamped columns, after WHERE (and clipping)."""
    table = plan.table
    selected = [exp.alias_(exp.Literal.number(1), "one")]  # a scope may need no column
    selected += [exp.alias_(exp.column(col, quoted=True), key) for col, key in zip(plan.group_by, keys)]
    for index, need in enumerate(needs):
        selected.append(exp.alias_(_clamped(table.columns[need.column], need.column), f"c{index}"))
    scope = exp.select(*selected).from_(exp.to_table(table.name, quoted=True))
    if plan.where is not None:
        scope = scope.where(plan.where.copy())
    for col in plan.group_by:  # rows outside the declared keys belong to no group
        scope = scope.where(exp.column(col, quoted=True).isin(
            *[_literal(v) for v in table.columns[col].keys]))
    if clip_rows_per_unit is None:
        return scope
    unit = exp.column(table.privacy_unit, quoted=True)
    order = [exp.column(col, quoted=True) for col in sorted(table.columns) if col != table.privacy_unit]
    row_in_unit = exp.Window(
        this=exp.RowNumber(), partition_by=[unit], order=exp.Order(expressions=order)
    )
    scope = scope.select(exp.alias_(row_in_unit, "row_in_unit"))
    clipped = exp.select(*keys, *[f"c{i}" for i in range(len(needs))]).from_(scope.subquery("u"))
    return clipped.where(exp.column("row_in_unit") <= clip_rows_per_unit)


def _clamped(column, name: str) -> exp.Expression:
    """Numeric values clamped to the declared domain, as DOUBLE; others as they are.

    A CASE rather than GREATEST/LEAST, which skip NULLs and would turn them into a bound.
    """
    value = exp.cast(exp.column(name, quoted=True), _DOUBLE)
    if not column.numeric:
        return exp.column(name, quoted=True)
    clamp = exp.Case()
    if column.lower is not None:
        clamp = clamp.when(value < _literal(column.lower), _literal(column.lower))
    if column.upper is not None:
        clamp = clamp.when(value > _literal(column.upper), _literal(column.upper))
    return clamp.else_(value) if clamp.args.get("ifs") else value


def _column_statistics(name: str, need: ColumnNeeds, keys) -> exp.Select:
    """Per group: non-null count, exact decimal sum and values at the requested ranks."""
    value = exp.column(name)
    partition = [exp.column(k) for k in keys]
    ranked = exp.select(
        *keys, exp.alias_(value, "v"),
        exp.alias_(exp.Window(this=exp.RowNumber(), partition_by=partition,
                              order=exp.Order(expressions=[value])), "rn"),
        exp.alias_(exp.Window(this=exp.Count(this=exp.Star()), partition_by=partition), "n"),
    ).from_("scope").where(value.is_(exp.null()).not_())
    if not need.ranks:  # no order statistics: a plain aggregate, no sort
        ranked = exp.select(*keys, exp.alias_(value, "v"), exp.alias_(exp.Literal.number(0), "rn"),
                            exp.alias_(exp.Literal.number(0), "n")).from_("scope")
        ranked = ranked.where(value.is_(exp.null()).not_())
    stats = exp.select(*keys, exp.alias_(exp.Count(this=exp.column("v")), f"{name}_n"))
    if need.total:
        stats = stats.select(exp.alias_(exp.Sum(this=exp.cast(exp.column("v"), _DECIMAL)),
                                        f"{name}_total"))
    for j, ref in enumerate(_ordered(need.ranks)):
        hit = exp.column("rn").eq(_rank_sql(ref, exp.column("n")))
        pick = exp.Case().when(hit, exp.column("v"))
        stats = stats.select(exp.alias_(exp.Max(this=pick), f"{name}_r{j}"))
    stats = stats.from_(ranked.subquery("ranked"))
    return stats.group_by(*keys) if keys else stats


def _rank_sql(ref: RankRef, n: exp.Expression) -> exp.Expression:
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
    if ref.anchor == BOTTOM:
        return exp.Literal.number(1 + ref.offset)
    return exp.Sub(this=n, expression=exp.Literal.number(ref.offset))


def _ordered(refs) -> list[RankRef]:
    return sorted(refs, key=lambda r: (r.anchor, r.offset, r.fraction or 0))


def _literal(value) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(repr(value))
    return exp.Literal.string(str(value))
