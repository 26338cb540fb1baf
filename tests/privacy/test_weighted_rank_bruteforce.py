"""Weighted ranks for percentiles of a user-level table under GROUP BY (docs/privacy.md
§5.3, "Weighted ranks"), by brute force: the proof's claims on a reference written from
the definition, over the product's candidates (``ranked_grid``) and snapping
(``snapped``); then the pushdown's own SQL in DuckDB (``weighted_windows``) and the
mechanism's own blocks (``weighted_blocks``) against that reference, the groups' joint
law at the engine's λ (``weighted_exponent``) within e^ε over every sampled neighbour,
and the draw with narrow windows (tails resolved by ``weighted_counts``' answers) against
the exact law.

Every value v of unit u in scope (NULL and NaN out, the rest clamped, then snapped)
weighs W_u = ⌊2²⁰/n_u⌋, n_u the unit's values in scope over all groups; in a group,
A(y) and B(y) are the weights below and at or below y, N their total, t = p·N, and

    d(y) = max(0, A(y) − t, t − B(y)) / 2²⁰.

Claims: a neighbour that modifies every record of g units (values to ties, both bounds,
NaN, ±inf and overflow-sized, in or out of the WHERE, in any group, so n_u changes)
moves the groups' d together by at most g·min(2·max(p, 1 − p), G), and that bound is
reached; the groups' joint law at λ = ε/(2·that) moves by at most e^ε. And the two
rules it rests on are needed: over all rows (each row weighing 2²⁰) or with n_u counted
per group the bound is exceeded.
"""

from __future__ import annotations

import bisect
import itertools
import random
import zlib
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy.analyze import analyze, parse_statements
from proxy.engine import answered
from proxy.privacy import inverse_sensitivity
from proxy.privacy.inverse_sensitivity import (
    WEIGHTED,
    draw_scope,
    ranked_grid,
    snapped,
    weighted_blocks,
    weighted_exponent,
    weighted_release,
)
from proxy.privacy.requests import WeightCountRequest, WeightRequest
from proxy.pushdown.weighted import weighted_counts, weighted_windows
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import WEIGHT_UNIT, ColumnNeeds
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
from tests.privacy.laws import ALPHA, SeededSource, groups_loss, pooled
from tests.privacy.reference import normalise

ONE = WEIGHT_UNIT  # a unit's whole weight


class _Column:
    lower, upper, resolution, type = LOWER, UPPER, 512.0, "float"


GRID = ranked_grid(_Column, True)  # steps of ½ on [0, 10]: 21 candidates
CANDIDATES = [GRID.value(k) for k in range(GRID.first, GRID.last + 1)]
NEIGHBOUR_VALUES = [LOWER, 3.5, 5.0, UPPER] + EXTREME[:3]


def weighted_scores(records, groups: int, fraction: Fraction, per_group: bool = False,
                    unweighted: bool = False) -> list[list[Fraction]]:
    """d of every candidate in every group (``per_group``: n_u counted in each group, the
    rule the proof rejects; ``unweighted``: every row weighs a whole unit)."""
    kept = [(r.unit, r.group, normalise(r.value, LOWER, UPPER)) for r in records
            if r.in_scope]
    kept = [(u, k, v) for u, k, v in kept if v is not None]
    count: dict = {}
    for u, k, _ in kept:
        count[(u, k) if per_group else u] = count.get((u, k) if per_group else u, 0) + 1
    found = []
    for group in range(groups):
        mine = [(v, ONE if unweighted else ONE // count[(u, k) if per_group else u])
                for u, k, v in kept if k == group]
        pairs = sorted(zip(snapped(GRID, [v for v, _ in mine]), (w for _, w in mine)))
        points = [v for v, _ in pairs]
        through = list(itertools.accumulate((w for _, w in pairs), initial=0))
        target = fraction * through[-1]
        found.append([max(Fraction(0), through[bisect.bisect_left(points, y)] - target,
                          target - through[bisect.bisect_right(points, y)]) / ONE
                      for y in CANDIDATES])
    return found


def _logs(scores: list[Fraction], scale: Fraction) -> np.ndarray:
    logs = np.array([-float(scale * d) for d in scores])
    return logs - np.logaddexp.reduce(logs)


def _scores_moved(before, after) -> float:
    """Σ over groups of the largest change of a candidate's d."""
    return float(sum(max(abs(b - a) for b, a in zip(bs, as_)) for bs, as_ in zip(before, after)))


CASES = {  # name: (fraction, groups, group size)
    "median, 2 groups": (Fraction(1, 2), 2, 1),
    "p90, 3 groups": (Fraction(9, 10), 3, 1),
    "p0, 3 groups": (Fraction(0), 3, 1),
    "p95, 3 groups, g 2": (Fraction(19, 20), 3, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_weighted_scores_move_by_at_most_two_per_unit_and_the_law_by_e_to_the_epsilon(case):
    fraction, groups, g = CASES[case]
    epsilon = Fraction(1)
    bound = min(2 * g * max(fraction, 1 - fraction), g * groups)
    scale = epsilon / (2 * bound)
    sets = list(datasets(zlib.crc32(case.encode()), 4, 4, 3, groups=groups))
    choices = options(groups, NEIGHBOUR_VALUES)
    rng = random.Random(zlib.crc32(f"weighted {case}".encode()))

    def nearby(records):
        return neighbours(records, choices, g, limit=25, rng=rng)

    outcomes = assert_sound(lambda records: weighted_scores(records, groups, fraction),
                            lambda _: float(bound), sets, nearby, change=_scores_moved)
    assert max(outcome.worst for outcome in outcomes) >= float(bound) - 1e-9  # reached
    assert_sound(lambda records: [_logs(s, scale) for s in
                                  weighted_scores(records, groups, fraction)],
                 lambda _: float(epsilon), sets, nearby, change=groups_loss, tolerance=1e-9)


@pytest.mark.parametrize("rule", ["unweighted", "per_group"])
def test_the_proof_needs_weights_over_the_whole_scope(rule):
    """The median over three groups, whose bound is 1: over all rows (a unit of three
    rows moves a group's d by up to 3) or with n_u counted per group (its weight whole in
    each of its groups, three of them) a neighbour moves the groups' d by more."""
    groups, fraction = 3, Fraction(1, 2)
    rng = random.Random(7)
    choices = options(groups, NEIGHBOUR_VALUES)
    worst = 0.0
    for records in datasets(11, 6, 4, 3, groups=groups):
        base = weighted_scores(records, groups, fraction, **{rule: True})
        for other in neighbours(records, choices, 1, limit=25, rng=rng):
            worst = max(worst, _scores_moved(
                base, weighted_scores(other, groups, fraction, **{rule: True})))
    assert worst > 1


# -- the product: its SQL in DuckDB, its blocks, its λ, its draw --------------------------

RULES = parse_rules(unit_table_rules(3, "abc"))
PRODUCT = {  # name: (statement, p, groups)
    "median": ("SELECT k, MEDIAN(v) FROM t WHERE w = 1 GROUP BY k", Fraction(1, 2), 3),
    "p90": ("SELECT k, PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY v) FROM t WHERE w = 1 "
            "GROUP BY k", Fraction(9, 10), 3),
}


def _expanded(found) -> list[Fraction]:
    out = []
    for block in found:
        assert block.first == GRID.first + len(out) and block.exact
        out += [block.distance] * block.count
    assert len(out) == GRID.count
    return out


@pytest.mark.parametrize(("query", "model"), [("median", "dp"), ("p90", "idp")])
def test_the_pushdown_and_the_blocks_give_the_reference_and_the_law_moves_by_e_to_the_epsilon(
        unit_table, query, model):
    statement, fraction, groups = PRODUCT[query]
    epsilon = Fraction(1)
    plan = analyze(parse_statements(statement)[0], RULES,
                   Settings(model=model, epsilon=float(epsilon)))
    assert draw_scope(plan, plan.aggregates[0]) == WEIGHTED
    assert ranked_grid(RULES.tables["t"].columns["v"], True) == GRID
    scale = weighted_exponent(plan, epsilon, fraction)
    assert scale == epsilon / (4 * max(fraction, 1 - fraction))
    need = ColumnNeeds("v", count=True, lower=LOWER, upper=UPPER)

    def read(records):
        refill(unit_table, "t", [(r.unit, r.value, int(r.in_scope), "abc"[r.group])
                                 for r in records])
        found = weighted_windows(plan, need, "duckdb",
                                 lambda sql: unit_table.execute(sql).fetchall(), fraction,
                                 1 << 30)
        return [_expanded(weighted_blocks(total, fraction, GRID, below, rows))
                for total, below, rows in (found.get((key,), (0, 0, [])) for key in "abc")]

    def laws(records):
        scores = read(records)
        assert scores == weighted_scores(records, groups, fraction)  # the reference's d
        return [_logs(found, scale) for found in scores]

    rng = random.Random(zlib.crc32(f"weighted product {query} {model}".encode()))
    choices = options(groups, NEIGHBOUR_VALUES)
    outcomes = assert_sound(
        laws, lambda _: float(epsilon),
        datasets(zlib.crc32(query.encode()), 3, 4, 3, groups=groups),
        lambda records: neighbours(records, choices, limit=10, rng=rng),
        change=groups_loss, tolerance=1e-9)
    assert max(outcome.worst for outcome in outcomes) > float(epsilon) / 4


def _answer(pairs: list[tuple[float, int]], request):
    """What the engine answers, from one group's (normalised value, weight) pairs."""
    if isinstance(request, WeightCountRequest):
        return (sum(w for v, w in pairs if v < request.point),
                sum(w for v, w in pairs if request.after is None or v < request.after))
    merged: dict[float, int] = {}
    for v, w in sorted(pairs):
        merged[v] = merged.get(v, 0) + w
    total = sum(merged.values())
    t, margin = float(request.fraction * total), request.reach * WEIGHT_UNIT
    rows, through = [], 0
    for v, w in merged.items():
        through += w
        if through >= t - margin and through - w <= t + margin:
            rows.append((v, w))
    below = sum(w for v, w in merged.items() if rows and v < rows[0][0])
    return total, below, rows


def test_the_draw_with_narrow_windows_follows_the_exact_law(monkeypatch):
    """Windows of one unit's weight each side, kept however heavy the tails: the draws,
    tails resolved by their weights, follow the law of the full window by χ²."""
    monkeypatch.setattr(inverse_sensitivity, "first_reach", lambda scale, grid: 1)
    monkeypatch.setattr(inverse_sensitivity, "_TAIL_SHARE", 1.0)
    values = [0.0, 1.0, 2.0, 2.0, 2.0, 3.5, 5.0, 5.0, 7.0, 9.0, 10.0, 10.0, 4.0, 2.5]
    units = [0, 0, 1, 2, 2, 2, 3, 4, 4, 5, 6, 6, 6, 7]
    count = {u: units.count(u) for u in units}
    pairs = [(v, ONE // count[u]) for v, u in zip(values, units)]
    fraction, scale = Fraction(1, 2), Fraction(1, 2)
    asked = []

    def read(request):
        asked.append(type(request))
        return _answer(pairs, request)

    rng = SeededSource(zlib.crc32(b"weighted law"))
    draws = 1000
    sampled = [answered(weighted_release(fraction, scale, GRID, rng), read)
               for _ in range(draws)]
    assert WeightCountRequest in asked  # the tails were drawn and resolved
    full = _answer(pairs, WeightRequest("v", fraction, 1 << 30))
    expected = np.exp(_logs(_expanded(weighted_blocks(full[0], fraction, GRID, *full[1:])),
                            scale)) * draws
    observed = np.zeros(GRID.count)
    for value in sampled:
        observed[GRID.at_or_below(value) - 1] += 1  # the cell holding the answer
    assert stats.chisquare(*pooled(observed, expected)).pvalue > ALPHA


def test_the_pushdown_reads_narrow_windows_and_counts_as_the_reference(unit_table):
    """Narrow windows and a tail's weights read by the SQL equal the reference's."""
    plan = analyze(parse_statements(PRODUCT["median"][0])[0], RULES, Settings(model="dp"))
    need = ColumnNeeds("v", count=True, lower=LOWER, upper=UPPER)
    rng = random.Random(5)
    rows = [(u, rng.choice([0.0, 1.0, 2.5, 3.5, 5.0, 10.0, float("nan"), float("inf")]),
             int(rng.random() < 0.8), rng.choice("abc")) for u in range(40)
            for _ in range(rng.randint(1, 3))]
    refill(unit_table, "t", rows)
    execute = lambda sql: unit_table.execute(sql).fetchall()  # noqa: E731
    weights: dict[int, int] = {}
    for u, v, w, _ in rows:
        if w and normalise(v, LOWER, UPPER) is not None:
            weights[u] = weights.get(u, 0) + 1
    for key in "abc":
        pairs = [(normalise(v, LOWER, UPPER), ONE // weights[u]) for u, v, w, k in rows
                 if w and k == key and normalise(v, LOWER, UPPER) is not None]
        for reach in (1, 2, 5):
            request = WeightRequest("v", Fraction(1, 2), reach, (key,))
            assert weighted_windows(plan, need, "duckdb", execute, Fraction(1, 2), reach,
                                    (key,))[(key,)] == _answer(pairs, request)
            assert weighted_windows(plan, need, "duckdb", execute, Fraction(1, 2), reach
                                    )[(key,)] == _answer(pairs, request)
        for point, after in ((2.5, 3.0), (0.0, 0.5), (10.0, None)):
            assert weighted_counts(plan, need, "duckdb", execute, (key,))(point, after) == \
                _answer(pairs, WeightCountRequest("v", point, after))
