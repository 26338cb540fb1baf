"""The bucketed statement behind the automatic clipping bound (proxy/pushdown/contributions.py,
``bucket_sql``) gives exactly the per-rung statement's numbers and a Python reference's,
on both backends: every group's count of units beyond each rung and the clipped sum at
each rung (integers of 10⁻⁶ before reading), over random units of a signed domain with
NULL, NaN, ±inf, values beyond the domain and at its ends, unit totals exactly on rungs,
a domain wide enough that the top rungs' sums split each value (``exact_sum``), several
contributions at once (grouping sets), GROUP BY, a table without a privacy unit, an empty
scope, a one-rung ladder of 0, and squared rungs beyond 10¹⁵ (summed shrunk)."""

from __future__ import annotations

import math
import random

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.contribution_bounds import laddered, rungs
from proxy.pushdown.contributions import contribution_ladders, per_rung_ladders
from proxy.pushdown.scope import read_sum, rounded_scaled, wide_sum
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import Contribution, clamp_to_domain
from tests.factories import Table, engine_fixture

# units' totals on a grid of quarters (sums exact in any order), many on the rungs of
# [-8, 8] × 3 rows (24, 12, 6, 3, 1.5, 0.75, 0.375); w reaches beyond 9·10¹² (wide sums)
SMALL = [-8.0, -5.5, -3.0, -0.25, 0.0, 0.25, 0.75, 1.5, 3.0, 4.5, 6.0, 8.0, 9.0, -12.0,
         math.nan, math.inf, -math.inf, 1e300, None]
WIDE = [-1e13, -4.5e12, 0.5, 3e12 + 0.5, 4.5e12, 9.5e12, 1e13, 2e13, math.nan, None]


def _tables() -> dict[str, Table]:
    rng = random.Random(37)
    unit, group, x, w = [], [], [], []
    for person in range(120):
        for _ in range(rng.randint(1, 3)):
            unit.append(person)
            group.append(rng.choice("ab"))
            x.append(rng.choice(SMALL))
            w.append(rng.choice(WIDE))
    types = {"unit": "INTEGER", "g": "TEXT", "x": "DOUBLE PRECISION", "w": "DOUBLE PRECISION"}
    columns = {"unit": unit, "g": group, "x": x, "w": w}
    return {"t": Table(columns, types), "r": Table(columns, types)}


RULES = """
[defaults]
model = "idp"
[analysts.zoe]
[tables.t]
privacy_unit = "unit"
[tables.t.columns]
unit = { type = "int" }
g = { type = "text", keys = ["a", "b"] }
x = { type = "float", domain = [-8, 8], resolution = 0.25 }
w = { type = "float", domain = [-1e13, 1e13], resolution = 1e6 }
[tables.r.columns]
g = { type = "text", keys = ["a", "b"] }
x = { type = "float", domain = [-8, 8], resolution = 0.25 }
w = { type = "float", domain = [-1e13, 1e13], resolution = 1e6 }
"""

engine = engine_fixture(RULES, _tables, shared=True)


def _reference(plan, wanted, ladders) -> dict[tuple, dict[Contribution, tuple]]:
    """(beyond, clipped) per group and contribution, by hand: each unit's Σ (x − origin)^power
    of its normalised values in scope (a row of ``r`` its own unit), counted beyond ±B_k,
    clipped to [−B_k, B_k] and summed as exact_sum does (each rounded to 10⁻⁶)."""
    columns = _tables()[plan.table.name].columns
    keyed = bool(plan.group_by)
    totals: dict[tuple, dict[int, float]] = {}
    for row in range(len(columns["unit"])):
        key = (columns["g"][row],) if keyed else ()
        unit = columns["unit"][row] if plan.table.privacy_unit else row
        per_unit = totals.setdefault(key, {}).setdefault(unit, [0.0] * len(wanted))
        for i, contribution in enumerate(wanted):
            column = plan.table.columns[contribution.column]
            value = clamp_to_domain(columns[contribution.column][row], column.lower, column.upper)
            if value is not None:
                per_unit[i] += (value - contribution.origin) ** contribution.power
    out: dict[tuple, dict[Contribution, tuple]] = {}
    for key, units in totals.items():
        for i, (contribution, ladder) in enumerate(zip(wanted, ladders)):
            mine = [values[i] for values in units.values()]
            out.setdefault(key, {})[contribution] = (
                tuple(sum(1 for t in mine if abs(t) > bound) for bound in ladder),
                tuple(read_sum(sum(rounded_scaled(min(max(t, -bound), bound),
                                                  wide_sum(-bound, bound)) for t in mine))
                      for bound in ladder))
    return out


@pytest.mark.parametrize("query", [
    "SELECT SUM(x) FROM t",
    "SELECT SUM(w), AVG(x) FROM t",
    "SELECT g, SUM(x), STDDEV(x), SUM(w) FROM t GROUP BY g",
    "SELECT SUM(x), VARIANCE(x) FROM r",
    "SELECT g, SUM(w) FROM r GROUP BY g",
    "SELECT SUM(x), SUM(w) FROM t WHERE x BETWEEN 100 AND 200",
    # the moments' squared rungs beyond 10¹⁵: summed divided by a power of two (sum_shrink)
    "SELECT g, STDDEV(w) FROM t GROUP BY g",
])
def test_the_buckets_give_every_rungs_numbers(engine, query):
    plan = analyze(parse_statements(query)[0], parse_rules(RULES), Settings())
    wanted = laddered(plan)
    ladders = tuple(rungs(c, plan.table.columns[c.column], 3) for c in wanted)
    if " r" in query:  # any ascending ladder: one of 0, one off the halvings
        ladders = tuple(((0.0,), (0.25, 1.5, 6.0, 7.0, 24.0))[i % 2] for i in range(len(wanted)))
    with engine.view(plan) as view:
        args = (plan, wanted, ladders, engine.backend.capabilities, None, view.tx.execute)
        bucketed, per_rung = contribution_ladders(*args), per_rung_ladders(*args)
    assert bucketed == per_rung
    expected = _reference(plan, wanted, ladders) if plan.where is None else {
        (): {c: ((0,) * len(ladder), (0.0,) * len(ladder)) for c, ladder in zip(wanted, ladders)}}
    assert {key: {c: (ladder.beyond, ladder.clipped) for c, ladder in found.items()}
            for key, found in bucketed.items()} == expected
    assert any(any(ladder.beyond) for found in bucketed.values()
               for ladder in found.values()) or plan.where is not None
