"""QueryPlan + statistics needs → the backend SQL that computes them, rendered by sqlglot.

Only counts, sums and the values at a few ranks leave the backend; no row of a
protected table is fetched. Without GROUP BY the statistics come at about the cost of
the plain aggregate (``ungrouped``); with GROUP BY one statement ranks the values of
every group with a window (``grouped``).
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.analyze.plan import QueryPlan
from proxy.pushdown.grouped import statistics_query
from proxy.pushdown.scope import unit_bound_sql
from proxy.pushdown.ungrouped import ungrouped_statistics
from proxy.statistics import ColumnNeeds, GroupStats


def compute_statistics(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], dialect: str,
    clip_rows_per_unit: int | None, execute: Callable[[str], list[tuple]],
) -> dict[tuple, GroupStats]:
    """Every group's statistics (key ``()`` without GROUP BY), through ``execute``."""
    if not plan.group_by:
        return {(): ungrouped_statistics(plan, needs, dialect, clip_rows_per_unit, execute)}
    query = statistics_query(plan, needs, dialect, clip_rows_per_unit)
    return query.read(execute(query.sql))


__all__ = ["compute_statistics", "statistics_query", "unit_bound_sql"]
