"""The counts a partition selection needs (``proxy.privacy.partition_selection``): per
key of one GROUP BY term, how many privacy units hold it in scope, each unit counted
in at most k of its keys; one statement, one row per key of the data.

    WITH scope AS (SELECT key AS k, unit AS u FROM table WHERE predicate
                   AND key IS NOT NULL AND the other terms' filters),
         pairs AS (SELECT DISTINCT k, u FROM scope),
         ranked AS (SELECT k, ROW_NUMBER() OVER (PARTITION BY u ORDER BY k) AS r FROM pairs)
    SELECT k, COUNT(*) FROM ranked WHERE r <= K GROUP BY k

A unit keeps its K smallest keys: a choice that depends on its own records only, so a
neighbour (all records of some units modified) changes the kept keys of those units
alone. Rows without a unit (NULL) count as one unit, as everywhere (docs/privacy.md
§3.10). Without a privacy unit every row is its own unit (K = 1): the count is the row
count. NULL is no key, nor on an int column a value beyond ±MAGNITUDE_CAP (NaN and
±inf of a column stored as floats: they belong to no group, as everywhere), so every
key read back renders as a literal the statistics can compare. These rows reach the proxy only to be thresholded: the keys
that are not released go nowhere (docs/privacy.md §3.12).
"""

from __future__ import annotations

from sqlglot import exp

from proxy.pushdown.group_sql import group_filter, group_value
from proxy.pushdown.scope import filtered_source
from proxy.pushdown.values import literal
from proxy.rules import Table
from proxy.statistics import MAGNITUDE_CAP
from proxy.vocabulary import SELECTED, GroupKey, QueryPlan


def key_counts_sql(plan: QueryPlan, index: int, keys_per_unit: int, dialect: str) -> str:
    """The per-key unit counts of ``plan.group_by[index]`` (columns: key, count)."""
    table = plan.table
    key = group_value(plan.group_by[index], table)
    source, where = filtered_source(plan)
    scope = exp.select(exp.alias_(key, "k")).from_(source)
    if where is not None:
        scope = scope.where(where)
    for term in plan.group_by:  # rows in no group of another term are in no answer
        scope = scope.where(_is_key(term, table) if term.kind == SELECTED
                            else group_filter(term, table))
    count = exp.alias_(exp.Count(this=exp.Star()), "n")
    if table.privacy_unit is None:
        query = exp.select("k", count).from_(scope.subquery("scope")).group_by("k")
        return query.sql(dialect=dialect)
    scope = scope.select(exp.alias_(exp.column(table.privacy_unit, quoted=True), "u"))
    pairs = exp.select("k", "u").distinct().from_(scope.subquery("scope"))
    rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("u")],
                      order=exp.Order(expressions=[exp.column("k")]))
    ranked = exp.select("k", exp.alias_(rank, "r")).from_(pairs.subquery("pairs"))
    query = (exp.select("k", count).from_(ranked.subquery("ranked"))
             .where(exp.column("r") <= exp.Literal.number(keys_per_unit)).group_by("k"))
    return query.sql(dialect=dialect)


def _is_key(term: GroupKey, table: Table) -> exp.Expression:
    """The rows whose value of a selected term can be a key: not NULL and, for numbers,
    finite (within ±MAGNITUDE_CAP)."""
    value = group_value(term, table)
    if table.columns[term.column].type != "int":
        return value.is_(exp.null()).not_()
    return exp.Between(this=value, low=literal(-MAGNITUDE_CAP), high=literal(MAGNITUDE_CAP))
