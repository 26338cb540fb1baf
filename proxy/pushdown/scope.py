"""The rows in scope, as a sqlglot SELECT shared by every statistics query.

Group keys become ``k0, k1 ...``, the needed columns ``c0, c1 ...`` as stored; clamping
to the declared domain happens inside sums (``clamped_sum``) and, for order statistics,
after they are read (``ColumnNeeds.clamp``): the backend can then use its fastest plans.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from sqlglot import exp

from proxy.analyze.plan import QueryPlan
from proxy.statistics import ColumnNeeds, ColumnStats, RankRef

Execute = Callable[[str], list[tuple]]

DOUBLE = exp.DataType.build("double")
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
    selected += [exp.alias_(exp.column(col, quoted=True), key)
                 for col, key in zip(plan.group_by, keys)]
    for index, need in enumerate(needs):
        selected.append(exp.alias_(exp.column(need.column, quoted=True), f"c{index}"))
    source = exp.to_table(table.name, quoted=True)
    if sample_percent is not None:
        source.set("sample", exp.TableSample(method=exp.var("SYSTEM"),
                                             percent=exp.Literal.number(sample_percent)))
    scope = exp.select(*selected).from_(source)
    if plan.where is not None:
        scope = scope.where(plan.where.copy())
    for col in plan.group_by:  # rows outside the declared keys belong to no group
        scope = scope.where(exp.column(col, quoted=True).isin(
            *[literal(v) for v in table.columns[col].keys]))
    if clip_rows_per_unit is None:
        return scope
    unit = exp.column(table.privacy_unit, quoted=True)
    order = [exp.column(col, quoted=True) for col in sorted(table.columns)
             if col != table.privacy_unit]
    row_in_unit = exp.Window(
        this=exp.RowNumber(), partition_by=[unit], order=exp.Order(expressions=order)
    )
    scope = scope.select(exp.alias_(row_in_unit, "row_in_unit"))
    columns = ["one", *keys, *[f"c{i}" for i in range(len(needs))]]
    clipped = exp.select(*columns).from_(scope.subquery("u"))
    return clipped.where(exp.column("row_in_unit") <= clip_rows_per_unit)


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


def clamped_sum(value: exp.Expression, need: ColumnNeeds) -> exp.Expression:
    """SUM of the values clamped to the declared domain, in exact decimal arithmetic
    (so both engines give the same number). A CASE rather than GREATEST/LEAST, which
    skip NULLs and would turn them into a bound."""
    value = exp.cast(value, DOUBLE)
    clamp = exp.Case()
    if need.lower is not None:
        clamp = clamp.when(value < literal(need.lower), literal(need.lower))
    if need.upper is not None:
        clamp = clamp.when(value > literal(need.upper), literal(need.upper))
    clamped = clamp.else_(value) if clamp.args.get("ifs") else value
    return exp.Sum(this=exp.cast(clamped, DECIMAL))


def literal(value) -> exp.Expression:
    """A constant (from the rules or the backend, never an analyst's text) as SQL."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, float):
        return exp.Literal.number(repr(value))
    if isinstance(value, (int, Decimal)):
        return exp.Literal.number(str(value))
    return exp.Literal.string(str(value))


def fill_extremes(need: ColumnNeeds, stats: ColumnStats, anchor: str, offsets, values) -> None:
    """From a list of the largest (TOP) or smallest (BOTTOM) values, most extreme first:
    TOP+j is the (j+1)-th largest; None when there are not that many. NULLs, which a
    top-k query lists only when fewer than k values exist, are dropped."""
    values = [value for value in values or () if value is not None]
    for offset in offsets:
        stats.values[RankRef(anchor, offset)] = (
            need.clamp(values[offset]) if offset < len(values) else None)
