"""QueryPlan + statistics needs → the backend SQL that computes them, rendered by sqlglot.

Only counts, sums and the values at a few ranks leave the backend; no row of a
protected table is fetched. Without GROUP BY the statistics come at about the cost of
the plain aggregate (``ungrouped``). With GROUP BY the backend's capabilities choose
(``GroupedRanks``): list aggregates answer per group in two hash-aggregate passes
(``grouped_lists``, DuckDB), an ordered-set aggregate in a counting pass and one sort
per group (``grouped_ranks``, PostgreSQL); elsewhere, or when the lists do not reach a
rank, one statement ranks every group's values with a window (``grouped``).
"""

from __future__ import annotations

from proxy.backends.base import Capabilities, GroupedRanks
from proxy.pushdown.grouped import statistics_query
from proxy.pushdown.grouped_lists import grouped_list_statistics
from proxy.pushdown.grouped_ranks import grouped_rank_statistics
from proxy.pushdown.scope import Execute, unit_bound_sql
from proxy.pushdown.ungrouped import ungrouped_statistics
from proxy.statistics import ColumnNeeds, GroupStats
from proxy.vocabulary import QueryPlan


def compute_statistics(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], capabilities: Capabilities,
    clip_rows_per_unit: int | None, execute: Execute,
) -> dict[tuple, GroupStats]:
    """Every group's statistics (key ``()`` without GROUP BY), through ``execute``, by
    the strategies the backend's ``capabilities`` allow."""
    if not plan.group_by:
        return {(): ungrouped_statistics(plan, needs, capabilities, clip_rows_per_unit,
                                         execute)}
    if capabilities.grouped_ranks is GroupedRanks.LISTS:
        groups = grouped_list_statistics(plan, needs, clip_rows_per_unit, execute)
        if groups is not None:
            return groups
    if capabilities.grouped_ranks is GroupedRanks.ORDERED_SET:
        return grouped_rank_statistics(plan, needs, clip_rows_per_unit, execute)
    query = statistics_query(plan, needs, capabilities.dialect, clip_rows_per_unit)
    return query.read(execute(query.sql))


__all__ = ["compute_statistics", "statistics_query", "unit_bound_sql"]
