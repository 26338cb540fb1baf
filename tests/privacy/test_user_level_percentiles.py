"""Percentiles of a user-level table at the default (issue 32): 5,000 people with 0–6
visits each (as the demo's visits), MEDIAN and p90 of a lognormal cost and p90 of a
geometric stay, for the whole table and per department (5 keys), at ε = 1, against the
true PERCENTILE_DISC of all rows. Per department the draw counts each person once
(docs/privacy.md §5.3): before it, at Δu = 6 and ε/5 per department, p90 of cost came
back anywhere up to the domain's end (100,000: median error 5,900 %) and p90 of the
stay off by one in most answers (33 %); over one visit per person 0.7 % and 0 % (MEDIAN
1.3 %); over weighted ranks (2026-11-29) 1.0–1.2 % and 0 % (MEDIAN 0.2 %) in two runs,
and by the exact law (median over departments of E|error|) MEDIAN 1.30 → 0.34 %, p90
of cost 2.09 → 1.46 %.

MAX and MIN are drawn over each person's own MAX or MIN of cost (§5.3, "MAX and MIN of
user-level tables"). Over all rows the draw's Δu was the 6 rows a person may own, so its
target sat K = 315 rows inside the data at ε 1 (the 3 % quantile) and, per department,
a tenth of the rows in (K = 1,577 at ε 5 over 5 departments, capped): far from the
extreme. Over one value per person Δu is 1 and K falls to 52."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from proxy.session import Session
from proxy.statistics import percentile_rank
from tests.factories import Table, engine_fixture
from tests.privacy.laws import SeededSource
from tests.probes import run

pytestmark = pytest.mark.postgres

RULES = """
[defaults]
answer_cache = false
max_epsilon_per_query = 5

[analysts.zoe]
budget = 100000

[tables.visits]
privacy_unit = "person"
max_rows_per_unit = 6
[tables.visits.columns]
person = { type = "int" }
department = { type = "text", keys = ["a", "b", "c", "d", "e"] }
cost = { type = "float", domain = [0, 100000], resolution = 0.01 }
days = { type = "int", domain = [0, 60] }
"""


def _visits() -> dict[str, list]:
    rng = np.random.default_rng(32)
    person = np.repeat(np.arange(1, 5001), np.minimum(rng.poisson(2.2, 5000), 6))
    n = len(person)
    return {"person": person.tolist(),
            "department": np.array(list("abcde"))[rng.integers(0, 5, n)].tolist(),
            "cost": np.round(rng.lognormal(6, 0.5, n), 2).tolist(),
            "days": np.minimum(rng.geometric(0.45, n) - 1, 60).tolist()}


VISITS = _visits()
engine = engine_fixture(RULES, {"visits": Table(VISITS, {
    "person": "INTEGER", "department": "TEXT", "cost": "DOUBLE PRECISION",
    "days": "INTEGER"})}, shared=True, rng=SeededSource(32))


def _true(department: str | None) -> tuple:
    """MEDIAN(cost), p90(cost), p90(days) of all rows (of one department)."""
    rows = [i for i, d in enumerate(VISITS["department"]) if department in (None, d)]
    found = []
    for column, fraction in (("cost", Fraction(1, 2)), ("cost", Fraction(9, 10)),
                             ("days", Fraction(9, 10))):
        values = sorted(VISITS[column][i] for i in rows)
        found.append(values[percentile_rank(len(values), fraction) - 1])
    return tuple(found)


def test_median_and_p90_within_five_percent_at_epsilon_one(engine):
    session = Session.open(engine, "zoe")
    run(session, "SET idp.epsilon = 1")
    aggregates = ("MEDIAN(cost), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY cost), "
                  "PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY days)")
    errors: dict[tuple[bool, int], list[float]] = {}
    for _ in range(5):
        (grouped,) = run(session, f"SELECT department, {aggregates} FROM visits GROUP BY 1")
        (whole,) = run(session, f"SELECT {aggregates} FROM visits")
        assert "each unit counts once" in " ".join(grouped.privacy["notes"])
        assert "each unit counts once" not in " ".join(whole.privacy["notes"])
        cells = [(True, row[0], row[1:]) for row in grouped.rows] + \
            [(False, None, whole.rows[0])]
        for by_department, department, answers in cells:
            for index, (answer, true) in enumerate(zip(answers, _true(department))):
                errors.setdefault((by_department, index), []).append(abs(answer / true - 1))
    medians = {key: float(np.median(found)) for key, found in errors.items()}
    assert max(medians.values()) <= 0.05, medians


def _quantile(department: str | None, q: float) -> float:
    return float(np.quantile([c for c, d in zip(VISITS["cost"], VISITS["department"])
                              if department in (None, d)], q))


def test_max_and_min_land_among_the_extreme_percent_of_rows(engine):
    """At ε 1 over the whole table every draw lies within the top (bottom) 1 % of the
    11,000 rows, and at ε 5 per department (ε/5 each) within the top (bottom) 5 % of the
    department's 2,200 rows, or beyond the data (the scaled distance's draws, §5.3, often
    land there). A draw misses the stated quantile inside the data with
    probability below 10⁻⁶ (every candidate there is over 40 ranks from the end, the
    weight e^{−20} per candidate), so the medians of 5 draws fail with probability below 10⁻⁴; over all
    rows (main before this) every target lay beyond these quantiles."""
    session = Session.open(engine, "zoe")
    for epsilon, grouped, share in ((1, False, 0.01), (5, True, 0.05)):
        run(session, f"SET idp.epsilon = {epsilon}")
        draws: dict[tuple, list[float]] = {}
        for i in range(5):  # a new WHERE each time: a fresh draw, not a replay
            sql = (f"SELECT {'department, ' if grouped else ''}MIN(cost), MAX(cost) FROM "
                   f"visits WHERE days > {-1 - i}{' GROUP BY 1' if grouped else ''}")
            (answer,) = run(session, sql)
            notes = answer.privacy["notes"]
            assert "each privacy unit's own MIN" in " ".join(notes)
            # each of MIN and MAX named with its mechanism (costs lie on log-spaced
            # candidates: the scaled distance); what the draws mean said once
            assert any(n.startswith("MIN(cost) is drawn by the scaled distance") for n in notes)
            assert any(n.startswith("MAX(cost) is drawn by the scaled distance") for n in notes)
            assert len(notes) == len(set(notes)) and len(
                [n for n in notes if "(docs/privacy.md §5.3) would tell" in n]) == 1, notes
            for row in answer.rows:
                key = row[0] if grouped else None
                draws.setdefault((key, "min"), []).append(row[-2])
                draws.setdefault((key, "max"), []).append(row[-1])
        for (key, kind), found in draws.items():
            median = float(np.median(found))
            if kind == "min":
                assert median <= _quantile(key, share), (epsilon, key, kind, sorted(found))
            else:
                assert median >= _quantile(key, 1 - share), (epsilon, key, kind, sorted(found))


def test_max_per_department_lands_near_its_true_maximum(engine):
    """MAX(cost) per department at ε 5 (ε/5 a department) by the scaled distance (§5.3):
    by the exact law each draw lies within 50 % of its department's largest cost with
    probability at least 0.997 (benchmarks/extreme_targets.scaled_law over these
    values); the rank target's aimed K = 18 units' maxima inside, and in department a,
    whose largest cost 3,181 stands alone above 2,143, it did so with probability 0.014.
    The median of 7 draws misses in some department with probability below 10⁻⁷."""
    largest: dict[str, float] = {}
    for department, cost in zip(VISITS["department"], VISITS["cost"]):
        largest[department] = max(largest.get(department, 0.0), cost)
    session = Session.open(engine, "zoe")
    run(session, "SET idp.epsilon = 5")
    draws: dict[str, list[float]] = {}
    for i in range(7):  # a new WHERE each time: a fresh draw, not a replay
        (answer,) = run(session, f"SELECT department, MAX(cost) FROM visits "
                                 f"WHERE days > {-1 - i} GROUP BY 1")
        assert "scaled rank distance" in answer.privacy["mechanism"]
        for department, value in answer.rows:
            draws.setdefault(department, []).append(value)
    assert set(draws) == set(largest)
    for department, found in draws.items():
        truth = largest[department]
        assert abs(float(np.median(found)) - truth) <= 0.5 * truth, (department, truth, found)
