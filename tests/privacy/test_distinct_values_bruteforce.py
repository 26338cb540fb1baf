"""COUNT(DISTINCT col) of a column other than the unit (docs/privacy.md §3.7), by brute
force: the distinct counts the backend computes by the pushdown's own SQL
(``compute_statistics`` on DuckDB, its list strategy; the others are held equal to it by
the contract tests) move,
over neighbours that modify all records of one unit (values with ties, both bounds,
NULL, NaN, ±inf and overflow-sized, in or out of the WHERE, in any group or in one no
key answers), in each group by at most the unit's rows in scope there (before or
after, the larger), so in L1 by at most its rows before and after together — a COUNT's
histogram bound (§3.3: 2s) — reached; and the engine gives them a COUNT's share of ε in
each group, so their noise, a COUNT's, loses at most ε."""

from __future__ import annotations

import dataclasses
import random
import zlib

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends import GroupedRanks
from proxy.backends.duckdb_backend import DuckDBBackend
from proxy.privacy.noisy_answers import Calibration, _part, column_needs
from proxy.pushdown import compute_statistics
from proxy.rules import parse_rules
from proxy.settings import Settings
from tests.databases import refill
from tests.privacy.harness import (
    EXTREME,
    LOWER,
    UPPER,
    datasets,
    neighbours,
    options,
    unit_table_rules,
)

RULES = parse_rules(unit_table_rules(3, "abc"))
VALUES = [LOWER, 3.5, 5.0, UPPER, None] + EXTREME[:4]
KEYS = "abcz"  # a record's group index 3 is a key the rules do not declare
QUERIES = {  # (statement, grouped, whether its WHERE narrows the scope)
    "grouped": ("SELECT k, COUNT(DISTINCT v) FROM t WHERE w = 1 GROUP BY k", True),
    "ungrouped": ("SELECT COUNT(DISTINCT v) FROM t WHERE w = 1", False),
    "keys": ("SELECT COUNT(DISTINCT k) FROM t", False),
}


def _plan(sql: str):
    return analyze(parse_statements(sql)[0], RULES, Settings())


# DuckDB's list strategy; the window strategy (Spark's, and any dialect's) gives the same
# counts (tests/pushdown/test_pushdown.py's contract queries, every strategy)
@pytest.mark.parametrize("query,strategy", [
    ("grouped", GroupedRanks.LISTS), ("ungrouped", GroupedRanks.LISTS),
    ("keys", GroupedRanks.LISTS)])
def test_a_units_change_moves_the_distinct_counts_as_a_counts_rows(unit_table, query,
                                                                   strategy):
    statement, grouped = QUERIES[query]
    plan = _plan(statement)
    counted = _plan(statement.replace("DISTINCT v", "*").replace("DISTINCT k", "*"))
    for shift in (1, 3, 6):  # a COUNT's share of ε in each group, whatever s
        cal = Calibration("idp", shift)
        assert _part(plan, plan.aggregates[0], cal) == _part(counted, counted.aggregates[0],
                                                             cal)
    column, needs = plan.aggregates[0].column, column_needs(plan, 1)
    capabilities = dataclasses.replace(DuckDBBackend.capabilities, grouped_ranks=strategy)
    answered = [(key,) for key in "abc"] if grouped else [()]

    def distinct(records) -> dict:
        refill(unit_table, "t", [(r.unit, r.value, int(r.in_scope), KEYS[r.group])
                                 for r in records])
        found = compute_statistics(plan, needs, capabilities, None,
                                   lambda sql: unit_table.execute(sql).fetchall())
        return {key: found[key].column(column).distinct if key in found else 0
                for key in answered}

    def reference(records) -> dict:
        """The distinct values in scope, normalised as every statistic is (NaN as NULL,
        the rest clamped to the domain), per answered group."""
        values = {key: set() for key in answered}
        for r in records:
            key = (KEYS[r.group],) if grouped else ()
            value = KEYS[r.group] if query == "keys" else None if r.value is None or \
                r.value != r.value else min(max(r.value, LOWER), UPPER)
            if key in values and value is not None and (r.in_scope or "WHERE" not in statement):
                values[key].add(value)
        return {key: len(found) for key, found in values.items()}

    def rows(records, unit) -> dict:
        """The unit's rows in scope per answered group."""
        return {key: sum(r.unit == unit and (r.in_scope or "WHERE" not in statement)
                         and (not grouped or (KEYS[r.group],) == key) for r in records)
                for key in answered}

    rng = random.Random(zlib.crc32(f"distinct {query} {strategy}".encode()))
    reached = False
    for records in datasets(zlib.crc32(query.encode()), 6, 4, 3, groups=4):
        before = distinct(records)
        assert before == reference(records), records
        for other in neighbours(records, options(4, VALUES), limit=10, rng=rng):
            changed = {r.unit for r, s in zip(records, other) if r != s}
            if not changed:
                continue
            (unit,) = changed
            after, was, now = distinct(other), rows(records, unit), rows(other, unit)
            for key in answered:
                assert abs(after[key] - before[key]) <= max(was[key], now[key]), \
                    (key, records, other)
            change = sum(abs(after[key] - before[key]) for key in answered)
            limit = sum(was.values()) + sum(now.values()) if grouped else \
                max(was[()], now[()])
            assert change <= limit
            reached = reached or (change == limit > 0)
    assert reached
