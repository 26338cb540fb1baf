"""MAX and MIN of a user-level table over one value per unit (docs/privacy.md §5.3, "MAX
and MIN of user-level tables"), by brute force: each unit's (per group: each unit and
group's) MAX or MIN is computed in DuckDB by the pushdown's own SQL (``scope_select``
with ``UnitExtremes``), and the groups' joint law of the exponential mechanism over
those values — with the ε, target rank, candidates and Δu = g the engine uses
(``_targets``) — changes no candidate's probability by more than e^ε over the
neighbours of small data sets: units of up to three rows (beyond DP's bound of two,
which caps a unit at two groups), every row of one unit set to values with ties, both
bounds, NULL, NaN and ±inf, in or out of the WHERE and in any of three groups, under
both models, with the rank target and (v on log-spaced candidates) the scaled distance.
A unit's neighbours are a seeded sample of its modifications.
"""

from __future__ import annotations

import random
import zlib
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.inverse_sensitivity import _targets, draw_scopes, exponent
from proxy.pushdown.scope import scope_select
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import ColumnNeeds, UnitExtremes
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
from tests.privacy.reference import unit_extremes

RULES = {  # v's candidates k/2 (the rank target), or log-spaced (the scaled distance):
    # with resolution 32 its step is 2⁻⁵, so 320 multiples, beyond the uniform 2⁸
    "rank": parse_rules(unit_table_rules(2, "abc")),
    "scaled": parse_rules(unit_table_rules(2, "abc").replace("resolution = 512",
                                                               "resolution = 32")),
}
NEIGHBOUR_VALUES = [LOWER, 3.5, 5.0, UPPER, None] + EXTREME[:3]
QUERIES = {  # (statement, largest, groups)
    "min per group": ("SELECT k, MIN(v) FROM t WHERE w = 1 GROUP BY k", False, 3),
    "max per group": ("SELECT k, MAX(v) FROM t GROUP BY k", True, 3),
    "min": ("SELECT MIN(v) FROM t WHERE w = 1", False, 1),
    "max": ("SELECT MAX(v) FROM t", True, 1),
}


@pytest.mark.parametrize("form", list(RULES))
@pytest.mark.parametrize("model", ["dp", "idp"])
@pytest.mark.parametrize("query", list(QUERIES))
def test_no_candidate_changes_probability_by_more_than_e_to_the_epsilon(unit_table, query, model,
                                                                        form):
    epsilon = 1.0
    statement, largest, groups = QUERIES[query]
    plan = analyze(parse_statements(statement)[0], RULES[form],
                   Settings(model=model, epsilon=epsilon))
    assert draw_scopes(plan) == [UnitExtremes("v", largest)]
    # s over all rows: c·g = 2 under DP; under iDP the data's most rows per unit (3 here)
    shift = 2 if model == "dp" else 3
    ((_, _, target, part, grid, draw, scaled),) = _targets(plan, shift,
                                                           UnitExtremes("v", largest))
    assert draw == 1  # one value per unit (and group): Δu = g
    assert (scaled is not None) == (form == "scaled") == grid.log_spaced
    # a unit's rows (at most 2 groups under DP's cap, 3 under iDP) leave groups and join
    # others: ε/3 each over 3 groups
    assert part == Fraction(epsilon) / groups
    scale = float(exponent(part, draw))
    cap = 2 if model == "dp" else None
    needs = (ColumnNeeds("v", count=True, lower=LOWER, upper=UPPER),)
    sql = scope_select(plan, needs, UnitExtremes("v", largest, cap), unit=True
                       ).sql(dialect="duckdb")

    def laws(records):
        refill(unit_table, "t", [(r.unit, r.value, int(r.in_scope), "abc"[r.group])
                                 for r in records])
        rows = unit_table.execute(sql).fetchall()  # (one, k0 under GROUP BY, c0, u)
        found = [sorted(row[-2] for row in rows if row[-2] is not None
                        and (groups == 1 or row[1] == "abc"[key])) for key in range(groups)]
        # the backend's values are the reference's: each unit's extreme per group, capped
        seen = [r._replace(group=r.group if groups > 1 else 0,
                           in_scope=r.in_scope or "WHERE" not in statement) for r in records]
        assert found == unit_extremes(seen, largest, cap, groups), (records, rows)
        return [law_at_target(values, target, grid, scale, scaled=scaled) for values in found]

    rng = random.Random(zlib.crc32(f"unit extremes {query} {model}".encode()))
    outcomes = assert_sound(
        laws, lambda _: epsilon,
        datasets(zlib.crc32(query.encode()), 4, 4, 3, groups=groups),
        lambda records: neighbours(records, options(groups, NEIGHBOUR_VALUES), limit=8,
                                   rng=rng),
        change=groups_loss)
    assert max(outcome.worst for outcome in outcomes) > epsilon / 4  # neighbours that matter
