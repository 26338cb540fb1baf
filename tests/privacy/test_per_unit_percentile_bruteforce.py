"""Piecewise percentiles of a user-level table over one row per unit (docs/privacy.md
§5.3, "Percentiles of user-level tables"; the step form draws over weighted ranks
instead: tests/privacy/test_weighted_rank_bruteforce.py) under GROUP BY, by brute force: the row a unit keeps
is chosen in DuckDB by the pushdown's own SQL (``scope_select`` with ``HashedClip(1)``,
an MD5 of each row's values), and the two groups' joint law of the exponential
mechanism over the values read — with the ε, candidates and Δu = g the engine uses
(``_targets``, ``sampled_shift``) — changes no candidate's probability by more than
e^ε over the neighbours of small data sets: units of up to three rows, every row of one
unit set to values with ties, both bounds, NaN and ±inf, in or out of the WHERE and in
either group. A unit's neighbours are a seeded sample of its 28^rows modifications (7
values, in or out of scope, either group).
"""

from __future__ import annotations

import random
import zlib
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.inverse_sensitivity import (
    ONE_ROW,
    _targets,
    exponent,
    one_row_per_unit,
    sampled_shift,
)
from proxy.pushdown.scope import HashedClip, scope_select
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import ColumnNeeds
from tests.databases import refill
from tests.privacy.harness import (
    EXTREME,
    LOWER,
    UPPER,
    assert_sound,
    datasets,
    neighbours,
    options,
    unit_table_rules,
)
from tests.privacy.laws import groups_loss, law_at_target

RULES = parse_rules(unit_table_rules(3, "ab"))
NEIGHBOUR_VALUES = [LOWER, 3.5, 5.0, UPPER] + EXTREME[:3]
QUERIES = {
    "median": "SELECT k, MEDIAN(v) FROM t WHERE w = 1 GROUP BY k",
    "p90": "SELECT k, PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY v) FROM t WHERE w = 1 "
           "GROUP BY k",
    "min": "SELECT k, PERCENTILE_DISC(0) WITHIN GROUP (ORDER BY v) FROM t GROUP BY k",
}


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("epsilon", [1.0])
def test_no_candidate_changes_probability_by_more_than_e_to_the_epsilon(unit_table, query,
                                                                         epsilon):
    plan = analyze(parse_statements(QUERIES[query])[0], RULES,
                   Settings(model="dp", epsilon=epsilon, sensitivity="piecewise"))
    assert one_row_per_unit(plan) and sampled_shift(plan) == 1
    ((_, _, target, part, grid, _, _),) = _targets(plan, 3, ONE_ROW)
    # the unit's one row may leave one group and join the other: ε/2 each
    assert part == Fraction(epsilon) / 2
    scale = float(exponent(part, 1))
    needs = (ColumnNeeds("v", count=True, lower=LOWER, upper=UPPER),)
    sql = scope_select(plan, needs, HashedClip(1), unit=True).sql(dialect="duckdb")

    def laws(records):
        refill(unit_table, "t", [(r.unit, r.value, int(r.in_scope), "ab"[r.group])
                                 for r in records])
        rows = unit_table.execute(sql).fetchall()  # (one, k0 under GROUP BY, c0, u)
        assert len({row[-1] for row in rows}) == len(rows)  # one row a unit
        found = []
        for key in "ab":
            values = sorted(row[-2] for row in rows if row[-2] is not None and row[1] == key)
            found.append(law_at_target(values, target, grid, scale, piecewise=True))
        return found

    rng = random.Random(zlib.crc32(f"per unit {query} {epsilon}".encode()))
    choices = options(2, NEIGHBOUR_VALUES)
    outcomes = assert_sound(
        laws, lambda _: epsilon,
        datasets(zlib.crc32(query.encode()), 4, 4, 3, groups=2),
        lambda records: neighbours(records, choices, limit=15, rng=rng),
        change=groups_loss)
    assert max(outcome.worst for outcome in outcomes) > epsilon / 4  # neighbours that matter
