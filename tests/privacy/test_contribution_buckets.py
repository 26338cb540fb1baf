"""The bucketed statement behind the automatic clipping bound (proxy/pushdown/contributions.py,
``bucket_sql``) gives exactly the per-rung statement's numbers and a Python reference's,
on both backends: every group's count of units beyond each rung and the clipped sum at
each rung (integers of 10⁻⁶ before reading), over random units of a signed domain with
NULL, NaN, ±inf, values beyond the domain and at its ends, unit totals exactly on rungs,
a domain wide enough that the top rungs' sums split each value (``exact_sum``), several
contributions at once (grouping sets; or grouped by all their buckets at once, as
``crossed_buckets`` asks, the same numbers), GROUP BY, a table without a privacy unit, an empty
scope, a one-rung ladder of 0, and squared rungs beyond 10¹⁵ (summed shrunk). Clipped
across groups (L∞: the same numbers; L1: each unit's share rounded once, not at each
rung) the reference's numbers, and the per-rung statement's within the proven distance."""

from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.contribution_bounds import laddered, rungs
from proxy.pushdown.contributions import (
    SHARE_SCALE,
    bucket_sql,
    contribution_ladders,
    per_rung_ladders,
)
from proxy.pushdown.scope import read_sum, rounded_scaled, wide_sum
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import Contribution, clamp_to_domain, sum_shrink
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


def _crossing(args: tuple, at: int) -> tuple:
    """``args`` with the capabilities at ``at`` asking for crossed buckets
    (``crossed_buckets``)."""
    capabilities = dataclasses.replace(args[at], crossed_buckets=True)
    return (*args[:at], capabilities, *args[at + 1:])


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
        crossed = contribution_ladders(*_crossing(args, 3))
    assert bucketed == per_rung == crossed
    statement = bucket_sql(plan, wanted, ladders, None, crossed=True).sql()
    # crossed up to 4,096 cells: here up to three contributions (22·22, 8·9·9), not four
    assert ("GROUPING SETS" in statement) == (len(wanted) > 3)
    expected = _reference(plan, wanted, ladders) if plan.where is None else {
        (): {c: ((0,) * len(ladder), (0.0,) * len(ladder)) for c, ladder in zip(wanted, ladders)}}
    assert {key: {c: (ladder.beyond, ladder.clipped) for c, ladder in found.items()}
            for key, found in bucketed.items()} == expected
    assert any(any(ladder.beyond) for found in bucketed.values()
               for ladder in found.values()) or plan.where is not None


def _joint_reference(plan, wanted, ladders, joint, largest):
    """Clipped across groups, by hand: per group and contribution (beyond, clipped) —
    beyond B_k the units counted in their first group (by key) whose total Σ|t| over
    the groups (``largest``: max |t|) exceeds B_k; clipped in L1 as the bucketed
    statement defines it, each unit of a total ≤ B_k rounded as exact_sum rounds it and
    each above as B_k·trunc(t/T·SHARE_SCALE)/SHARE_SCALE, summed exactly and read back
    once; in L∞ each part clipped to ±B_k as per group. And per group and rung the units
    beyond (whose total exceeds B_k) there."""
    columns = _tables()[plan.table.name].columns
    parts: dict[tuple, dict[int, list[float]]] = {}
    for row in range(len(columns["unit"])):
        mine = parts.setdefault((columns["g"][row],), {}).setdefault(
            columns["unit"][row], [0.0] * len(wanted))
        for i, contribution in enumerate(wanted):
            column = plan.table.columns[contribution.column]
            value = clamp_to_domain(columns[contribution.column][row], column.lower, column.upper)
            if value is not None:
                mine[i] += value
    out, scaled = {}, {}
    for i, (contribution, ladder) in enumerate(zip(wanted, ladders)):
        if contribution not in joint:
            continue
        totals: dict[int, float] = {}
        for units in parts.values():
            for unit, values in units.items():
                norm = abs(values[i])
                totals[unit] = max(totals.get(unit, 0.0), norm) if largest else \
                    totals.get(unit, 0.0) + norm
        first = {unit: min(key for key, units in parts.items() if unit in units)
                 for unit in totals}
        for key, units in parts.items():
            beyond, clipped, over = [], [], []
            for bound in ladder:
                shrink = sum_shrink(bound)
                wide = wide_sum(-bound / shrink, bound / shrink)
                beyond.append(sum(1 for unit in units
                                  if first[unit] == key and totals[unit] > bound))
                over.append(sum(1 for unit in units if totals[unit] > bound))
                if largest:
                    clipped.append(read_sum(sum(rounded_scaled(min(max(v[i], -bound), bound),
                                                               wide) for v in units.values())))
                    continue
                whole = sum(rounded_scaled(v[i] * (1 / shrink), wide) for unit, v in units.items()
                            if totals[unit] <= bound)
                shares = sum(math.trunc(v[i] / totals[unit] * SHARE_SCALE)
                             for unit, v in units.items() if totals[unit] > bound)
                clipped.append(float(Fraction(whole, 10**6) * Fraction(shrink)
                                     + Fraction(bound) * Fraction(shares, SHARE_SCALE)))
            out.setdefault(key, {})[contribution] = (tuple(beyond), tuple(clipped))
            scaled.setdefault(key, {})[contribution] = tuple(over)
    return out, scaled


@pytest.mark.parametrize("query,largest", [
    ("SELECT g, SUM(x) FROM t GROUP BY g", False),
    ("SELECT g, SUM(x), STDDEV(x), SUM(w) FROM t GROUP BY g", False),
    ("SELECT g, SUM(x) FROM t GROUP BY g", True),
    ("SELECT g, SUM(x), VARIANCE(x), SUM(w) FROM t GROUP BY g", True),
])
def test_the_buckets_give_the_rungs_clipped_across_groups(engine, query, largest):
    """Clipped across groups (L1 and L∞), beside contributions clipped per group: the
    counts beyond are the per-rung statement's exactly, and so are L∞'s clipped sums and
    every sum clipped per group; L1's clipped sums are the reference's exactly (one
    share per unit and group, rounded toward 0) and within the proven distance of the
    per-rung statement's (each unit above B_k rounded at each rung): per unit above,
    2·10⁻¹²·B_k + 0.5·10⁻⁶·S_k (docs/privacy.md §3.14), and the two doubles' rounding."""
    plan = analyze(parse_statements(query)[0], parse_rules(RULES), Settings())
    wanted = laddered(plan)
    ladders = tuple(rungs(c, plan.table.columns[c.column], 3) for c in wanted)
    joint = frozenset(c for c in wanted if c.power == 1 and c.origin == 0 and not c.centres)
    assert joint
    with engine.view(plan) as view:
        args = (plan, wanted, ladders, engine.backend.capabilities, None, view.tx.execute,
                joint, largest)
        bucketed, per_rung = contribution_ladders(*args), per_rung_ladders(*args)
        assert contribution_ladders(*_crossing(args, 3)) == bucketed
    expected, over = _joint_reference(plan, wanted, ladders, joint, largest)
    assert bucketed.keys() == per_rung.keys() == {("a",), ("b",)}
    moved = False
    for key, found in bucketed.items():
        for contribution, ladder in found.items():
            other = per_rung[key][contribution]
            assert ladder.rungs == other.rungs and ladder.beyond == other.beyond
            if contribution not in joint or largest:
                assert ladder.clipped == other.clipped, (key, contribution)
            if contribution not in joint:
                continue
            assert (ladder.beyond, ladder.clipped) == expected[key][contribution]
            for k, (bound, mine, theirs) in enumerate(zip(ladder.rungs, ladder.clipped,
                                                          other.clipped)):
                allowed = (over[key][contribution][k] * (2e-12 * bound + 0.5e-6 * sum_shrink(bound))
                           + 4.5e-16 * max(abs(mine), abs(theirs)))
                assert abs(mine - theirs) <= allowed, (key, contribution, k, mine, theirs)
                moved |= mine != theirs
    assert any(any(ladder.beyond) for found in bucketed.values() for ladder in found.values())
    assert moved or largest  # the rounding differs somewhere: the bound is exercised
