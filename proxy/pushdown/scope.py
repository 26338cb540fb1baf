"""The rows in scope, as a sqlglot SELECT shared by every statistics query.

Group keys become ``k0, k1 ...``, the needed columns ``c0, c1 ...`` normalised
(``normalised``: NaN as NULL, values clamped to the declared domain or ±MAGNITUDE_CAP),
so every count, sum and order statistic computed from the scope is of normalised values.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from proxy.analyze.expressions import DerivedColumn
from proxy.analyze.plan import UNITS, QueryPlan
from proxy.pushdown.group_sql import group_filter, group_value
from proxy.pushdown.values import normalised, snapped
from proxy.rules import Table
from proxy.statistics import ColumnNeeds, ColumnStats, RankRef

Execute = Callable[[str], list[tuple]]

DECIMAL = exp.DataType.build("decimal(38, 6)")


def scope_select(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], clip_rows_per_unit: int | None,
    sample_percent: int | None = None,
) -> exp.Select:
    """The rows in scope: group keys and needed columns, after WHERE (and clipping).

    ``clip_rows_per_unit`` (DP with a privacy unit) keeps at most that many in-scope
    rows per unit, chosen by the unit's own values, so one unit's contribution is
    bounded whatever the data (SPEC §5.2, global sensitivity). ``sample_percent`` reads
    a block sample of the table instead (a pilot; never for released statistics).
    """
    table = plan.table
    keys = group_keys(plan)
    selected = [exp.alias_(exp.Literal.number(1), "one")]  # a scope may need no column
    selected += [exp.alias_(group_value(term, table), key)
                 for term, key in zip(plan.group_by, keys)]
    for index, need in enumerate(needs):
        selected.append(exp.alias_(needed_value(table, need), f"c{index}"))
    if counts_units(plan):
        selected.append(exp.alias_(exp.column(table.privacy_unit, quoted=True), "u"))
    source = exp.to_table(table.name, quoted=True)
    if sample_percent is not None:
        source.set("sample", exp.TableSample(method=exp.var("SYSTEM"),
                                             percent=exp.Literal.number(sample_percent)))
    scope = exp.select(*selected).from_(source)
    if plan.where is not None:
        scope = scope.where(plan.where.copy())
    for term in plan.group_by:  # rows outside the declared keys belong to no group
        scope = scope.where(group_filter(term, table))
    if clip_rows_per_unit is None:
        return scope
    unit = exp.column(table.privacy_unit, quoted=True)
    order = [exp.column(col, quoted=True) for col in sorted(table.columns)
             if col != table.privacy_unit and not isinstance(table.columns[col], DerivedColumn)]
    row_in_unit = exp.Window(
        this=exp.RowNumber(), partition_by=[unit], order=exp.Order(expressions=order)
    )
    scope = scope.select(exp.alias_(row_in_unit, "row_in_unit"))
    columns = ["one", *keys, *[f"c{i}" for i in range(len(needs))]]
    columns += ["u"] if counts_units(plan) else []
    clipped = exp.select(*columns).from_(scope.subquery("u"))
    return clipped.where(exp.column("row_in_unit") <= clip_rows_per_unit)


def counts_units(plan: QueryPlan) -> bool:
    """Whether the plan asks COUNT(DISTINCT unit): the scope then carries the unit as ``u``."""
    return any(agg.kind == UNITS for agg in plan.aggregates)


def distinct_units(column: exp.Expression) -> exp.Expression:
    return exp.Count(this=exp.Distinct(expressions=[column]))


def group_keys(plan: QueryPlan) -> tuple[str, ...]:
    return tuple(f"k{i}" for i in range(len(plan.group_by)))


def unit_bound_sql(table: str, unit: str, dialect: str) -> str:
    """The largest number of rows one privacy unit owns in the whole table (c of §5.2)."""
    per_unit = (
        exp.select(exp.alias_(exp.Count(this=exp.Star()), "cnt"))
        .from_(exp.to_table(table, quoted=True))
        .group_by(exp.column(unit, quoted=True))
    )
    query = exp.select(exp.func("coalesce", exp.Max(this=exp.column("cnt")), exp.Literal.number(0)))
    return query.from_(per_unit.subquery("per_unit")).sql(dialect=dialect)


def needed_value(table: Table, need: ColumnNeeds) -> exp.Expression:
    """The normalised value of a needed column, or of a derived one (an aggregate's
    expression, proxy.analyze.expressions): its columns normalised as for a plain
    column, the expression computed on them, the result normalised to its derived domain."""
    column = table.columns.get(need.column)
    if isinstance(column, DerivedColumn):
        value = column.render(lambda name: normalised(
            exp.column(name, quoted=True), table.columns[name].lower, table.columns[name].upper))
        # innermost first, so that no product is computed unsnapped (values.snapped)
        for node in reversed(list(value.find_all(exp.Mul, exp.Div, bfs=True))):
            node.set("this", snapped(node.this))
            if isinstance(node, exp.Mul):
                node.set("expression", snapped(node.expression))
    else:
        value = exp.column(need.column, quoted=True)
    return normalised(value, need.lower, need.upper)


def exact_sum(value: exp.Expression) -> exp.Expression:
    """SUM of normalised values in exact decimal arithmetic (so both engines give the
    same number). Each value is within ±MAGNITUDE_CAP = 10^15, so DECIMAL(38, 6) holds
    it, and the sum of fewer than 10^17 of them (|Σ| < 10^32, 32 digits before the point)."""
    return exp.Sum(this=exp.cast(value, DECIMAL))


def fill_extremes(need: ColumnNeeds, stats: ColumnStats, anchor: str, offsets, values) -> None:
    """From a list of the largest (TOP) or smallest (BOTTOM) values, most extreme first:
    TOP+j is the (j+1)-th largest; None when there are not that many. NULLs, which a
    top-k query lists only when fewer than k values exist, are dropped."""
    values = [value for value in values or () if value is not None]
    for offset in offsets:
        stats.values[RankRef(anchor, offset)] = (
            need.normalise(values[offset]) if offset < len(values) else None)
