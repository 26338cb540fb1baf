"""DP percentiles, MAX and MIN by the exponential mechanism (``SET idp.sensitivity =
'instance'`` and its ``'piecewise'`` form) through SQL on both backends: what the backend
computes for the mechanism (windows of ranks from either end, counts and the nearest
values around a candidate) equals what the loaded values give; the law drawn from the
backend's reads on an int column matches the exact mechanism's, in both forms (χ² at
significance ALPHA); WHERE, user-level bounds, the metadata, and refusals that spend
nothing."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from proxy import engine as engine_module
from proxy.analyze import analyze, parse_statements
from proxy.errors import BadSetting, NotSupported
from proxy.privacy import inverse_sensitivity, refuse_unanswerable
from proxy.privacy.requests import (
    CountRequest,
    RankRequest,
    WeightCountRequest,
    WeightRequest,
)
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from proxy.statistics import clamp_to_domain, percentile_rank
from tests.factories import Table, engine_fixture
from tests.privacy.harness import Record
from tests.privacy.laws import ALPHA, SeededSource, log_probabilities
from tests.privacy.reference import remembered, unit_extremes
from tests.probes import run

pytestmark = pytest.mark.postgres

RULES = """
[defaults]
answer_cache = false

[analysts.zoe]
budget = 100000

[tables.scores]
privacy_unit = "id"
max_rows_per_unit = 1
[tables.scores.columns]
score = { type = "float", domain = [0, 100] }
age = { type = "int", domain = [0, 10] }
kind = { type = "text", keys = ["a", "b"] }

[tables.visits]
privacy_unit = "person"
max_rows_per_unit = 2
[tables.visits.columns]
stay = { type = "int", domain = [0, 10] }
ward = { type = "text", keys = ["a", "b"] }

[tables.trips]
privacy_unit = "person"
max_rows_per_unit = 2
[tables.trips.columns]
cost = { type = "float", domain = [0, 100] }
zone = { type = "text", keys = ["a", "b", "c"] }
paid = { type = "int" }
"""

_RAW = [float(v) for v in np.round(np.random.default_rng(19).normal(50, 10, 40), 2)]
SCORES = _RAW + [50.0, 50.0, 0.0, 100.0, float("nan"), float("inf"), float("-inf"), 250.0,
                 None]
AGES = [int(v) for v in np.random.default_rng(3).integers(2, 8, len(SCORES))]
KINDS = ["a", "b"] * (len(SCORES) // 2) + ["a"] * (len(SCORES) % 2)
VISITS = {"person": [1, 1, 1, 2, 2, 3, 4, 4, 5, 6], "stay": [3, 9, 9, 4, 4, 5, 6, 1, 7, 5],
          "ward": ["a"] * 10}
# (person, cost, zone, paid): several rows a person (beyond the bound of 2, across 3
# zones), NULL, NaN, ±inf, values beyond the domain, ties, rows outside the WHERE
TRIPS = [(1, 5.0, "a", 1), (1, 2.0, "a", 1), (1, 70.0, "b", 1), (1, 250.0, "c", 1),
         (2, float("nan"), "a", 1), (2, None, "b", 1), (2, 40.0, "b", 0),
         (3, float("-inf"), "c", 1), (3, 30.0, "c", 1), (3, 30.0, "a", 1),
         (4, 60.0, "a", 0), (4, 55.0, "b", 1), (4, float("inf"), "b", 1), (4, 8.0, "c", 1),
         (5, 30.0, "a", 1), (6, None, "c", 1), (7, 99.5, "b", 1), (7, -3.0, "a", 1)]


engine = engine_fixture(RULES, {
    "scores": Table({"id": list(range(len(SCORES))), "score": SCORES, "age": AGES, "kind": KINDS},
                    {"id": "INTEGER", "score": "DOUBLE PRECISION", "age": "INTEGER",
                     "kind": "TEXT"}),
    "visits": Table(VISITS, {"person": "INTEGER", "stay": "INTEGER", "ward": "TEXT"}),
    "trips": Table({name: [row[i] for row in TRIPS] for i, name in
                    enumerate(("person", "cost", "zone", "paid"))},
                   {"person": "INTEGER", "cost": "DOUBLE PRECISION", "zone": "TEXT",
                    "paid": "INTEGER"})},
    shared=True)


def _instance_session(engine, epsilon="1", form="instance"):
    session = Session.open(engine, "zoe")
    run(session, f"SET idp.model = 'dp'; SET idp.sensitivity = '{form}'; "
                 f"SET idp.epsilon = {epsilon}")
    return session


def _in_scope(values, keep=None):
    return sorted(v for v in (clamp_to_domain(x, 0, 100) for i, x in enumerate(values)
                              if keep is None or keep(i)) if v is not None)


def test_the_backend_reads_what_the_mechanism_needs(engine, monkeypatch):
    """Every run of ranks the engine reads (from an end by a top-k, in the middle by the
    percentile and a grouped scan) and every count it makes are the loaded values'
    (NULL, NaN out; ±inf, 250 clamped; ties at 50, 0 and 100), with and without a
    WHERE, and per group of a GROUP BY."""
    seen = []

    def recording(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        windows, counts = [], []
        for a, b in ((1, n), (1, 3), (n - 2, n), (rank, rank), (2, n - 1),
                     (max(1, rank - 3), min(n, rank + 2))):
            windows.append((yield RankRequest(column, a, b, group=key)))
        for y in (0.0, 50.0, 51.5, 100.0):
            counts.append((yield CountRequest(column, y, key)))
        seen.append((n, rank, epsilon, windows, counts))
        return grid.value(grid.first)

    monkeypatch.setattr(inverse_sensitivity, "instance_release", recording)
    session = _instance_session(engine)
    run(session, "SELECT MEDIAN(score), MAX(score) FROM scores")
    run(session, "SELECT MIN(score) FROM scores WHERE kind = 'b'")
    run(session, "SELECT kind, MEDIAN(score) FROM scores WHERE age > 3 GROUP BY kind")
    everything, b_only = _in_scope(SCORES), _in_scope(SCORES, lambda i: KINDS[i] == "b")
    older = [_in_scope(SCORES, lambda i, kind=kind: KINDS[i] == kind and AGES[i] > 3)
             for kind in "ab"]

    def median(values):
        return percentile_rank(len(values), Fraction(1, 2))
    # MAX aims K values below the top, MIN K above the bottom, at most a tenth of n
    aside = inverse_sensitivity.extreme_offset(Fraction(1), 1, inverse_sensitivity.candidate_grid(
        0, 100, engine.rules.tables["scores"].columns["score"].resolution, False))
    # over GROUP BY each group's ε is divided by the groups one record can touch (2)
    assert len(seen) == 5
    for (n, rank, epsilon, windows, counts), values, expected_rank, share in zip(
            seen, (everything, everything, b_only, *older),
            (median(everything), len(everything) - min(aside, len(everything) // 10),
             1 + min(aside, len(b_only) // 10),
             median(older[0]), median(older[1])),
            (1, 1, 1, 2, 2)):
        assert (n, rank, epsilon) == (len(values), expected_rank, Fraction(1, share))
        assert windows == [values, values[:3], values[-3:], [values[rank - 1]], values[1:-1],
                           values[max(0, rank - 4): rank + 2]]
        assert counts == [(sum(v < y for v in values), sum(v <= y for v in values),
                           max((v for v in values if v < y), default=None),
                           min((v for v in values if v > y), default=None))
                          for y in (0.0, 50.0, 51.5, 100.0)]


def test_group_by_reads_every_groups_first_windows_at_once(engine, monkeypatch):
    """Under GROUP BY the first window of every group's draw comes from one ranked read
    per column (``grouped_windows``), not a percentile and a scan per group: with the
    per-group reads made to fail, the draws still read each group's values around its
    own target rank (K ranks each side), equal to the loaded values'."""
    seen = []

    def recording(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        reach = inverse_sensitivity.first_reach(inverse_sensitivity.exponent(epsilon, shift),
                                                grid)
        seen.append((n, rank, (yield RankRequest(column, max(1, rank - reach),
                                                 min(n, rank + reach), group=key))))
        return grid.value(grid.first)

    def per_group(*args):
        def fetch(first, last):
            raise AssertionError(f"ranks {first}..{last} read for one group")
        return fetch

    monkeypatch.setattr(inverse_sensitivity, "instance_release", recording)
    monkeypatch.setattr(engine_module, "order_statistics", per_group)
    monkeypatch.setattr(inverse_sensitivity, "first_reach", lambda scale, grid: 3)
    run(_instance_session(engine), "SELECT kind, MEDIAN(score), MIN(age), MAX(score) "
                                   "FROM scores WHERE age > 2 GROUP BY kind")
    expected = []
    columns = engine.rules.tables["scores"].columns
    aside = {name: inverse_sensitivity.extreme_offset(Fraction(1, 2), 1, inverse_sensitivity.candidate_grid(
        0, columns[name].upper, columns[name].resolution, name == "age")) for name in ("age", "score")}
    for kind in "ab":
        keep = [i for i in range(len(SCORES)) if KINDS[i] == kind and AGES[i] > 2]
        scores = _in_scope(SCORES, lambda i, keep=keep: i in keep)
        ages = sorted(AGES[i] for i in keep)
        for values, rank in ((scores, percentile_rank(len(scores), Fraction(1, 2))),
                             (ages, 1 + min(aside["age"], len(ages) // 10)),
                             (scores, len(scores) - min(aside["score"], len(scores) // 10))):
            expected.append((len(values), rank,
                             values[max(0, rank - 4): min(len(values), rank + 3)]))
    assert seen == expected


def test_user_level_reads_the_clipped_scope_with_s_records(engine, monkeypatch):
    """max_rows_per_unit = 2: the window holds at most two rows per person (person 1's
    3, 9, 9 become 3, 9) and the exponent's Δu is s = 2; under a GROUP BY a person may
    span, a percentile is drawn over weighted ranks (docs/privacy.md §5.3): every row in
    scope, none clipped, weighing ⌊2²⁰/n⌋ for its person's n rows, a ward's values
    merged with their weights, and a tail's weights below a candidate and the next."""
    seen = []

    def recording(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        seen.append((n, shift, (yield RankRequest(column, 1, n, group=key)),
                     (yield CountRequest(column, 5, key))))
        return grid.value(grid.first)

    monkeypatch.setattr(inverse_sensitivity, "instance_release", recording)
    run(_instance_session(engine), "SELECT MEDIAN(stay) FROM visits")
    clipped = [1.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 7.0, 9.0]
    assert seen == [(9, 2, clipped, (4, 6, 4.0, 6.0))]
    seen.clear()

    def weighing(fraction, scale, grid, rng, column, key):
        seen.append((key, scale, (yield WeightRequest(column, fraction, 1 << 30, key)),
                     (yield WeightRequest(column, fraction, 1, key)),
                     (yield WeightCountRequest(column, 5, 6, key)),
                     (yield WeightCountRequest(column, 5, None, key))))
        return grid.value(grid.first)

    monkeypatch.setattr(inverse_sensitivity, "weighted_release", weighing)
    run(_instance_session(engine), "SELECT ward, MEDIAN(stay) FROM visits GROUP BY ward")
    third, half, whole = 2 ** 20 // 3, 2 ** 19, 2 ** 20  # persons of 3, 2 and 1 rows
    weights = [(1.0, half), (3.0, third), (4.0, 2 * half), (5.0, 2 * whole), (6.0, half),
               (7.0, whole), (9.0, 2 * third)]
    total = sum(w for _, w in weights)
    assert seen == [(("a",), Fraction(1, 2), (total, 0, weights),
                     (total, half + third + 2 * half, weights[3:5]),  # meets N/2 ± a person
                     (half + third + 2 * half, half + third + 2 * half + 2 * whole),
                     (half + third + 2 * half, total)),
                    (("b",), Fraction(1, 2), (0, 0, []), (0, 0, []), (0, 0), (0, 0))]


@pytest.mark.parametrize("model", ["dp", "idp"])
def test_user_level_max_and_min_read_each_units_own_extreme(engine, monkeypatch, model):
    """A user-level MAX or MIN is drawn over one value per person (per person and zone
    under GROUP BY): the person's largest (least) cost in scope, NaN and NULL out, ±inf
    and 250 clamped to the domain, a person whose costs are all NULL or NaN absent; under
    DP at most 2 zones a person (the bound), those of its most extreme values; Δu = g = 1.
    The windows and counts both backends return equal the reference's (tests/privacy/
    reference.unit_extremes) for every group."""
    seen = []

    def recording(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        seen.append((key, n, shift, (yield RankRequest(column, 1, n, group=key)),
                     (yield CountRequest(column, 30.0, key))))
        return grid.value(grid.first)

    monkeypatch.setattr(inverse_sensitivity, "instance_release", recording)
    session = _instance_session(engine)
    run(session, f"SET idp.model = '{model}'")
    records = [Record(person, cost, paid == 1, "abc".index(zone))
               for person, cost, zone, paid in TRIPS]
    everywhere = [r._replace(group=0) for r in records]
    cap = 2 if model == "dp" else None
    for sql, largest, grouped, where in (
            ("SELECT MIN(cost) FROM trips", False, False, False),
            ("SELECT MAX(cost) FROM trips WHERE paid = 1", True, False, True),
            ("SELECT zone, MIN(cost) FROM trips GROUP BY zone", False, True, False),
            ("SELECT zone, MAX(cost) FROM trips WHERE paid = 1 GROUP BY zone", True, True,
             True)):
        seen.clear()
        run(session, sql)
        scoped = [r._replace(in_scope=r.in_scope or not where)
                  for r in (records if grouped else everywhere)]
        expected = unit_extremes(scoped, largest, cap, 3 if grouped else 1, 0, 100)
        keys = [(zone,) for zone in "abc"] if grouped else [()]
        assert [(key, n, shift, window) for key, n, shift, window, _ in seen] == [
            (key, len(values), 1, values) for key, values in zip(keys, expected)], sql
        assert [count for *_, count in seen] == [
            (sum(v < 30 for v in values), sum(v <= 30 for v in values),
             max((v for v in values if v < 30), default=None),
             min((v for v in values if v > 30), default=None)) for values in expected]


@pytest.mark.parametrize("form", ["instance", "piecewise"])
def test_the_law_drawn_from_the_backend_is_the_exact_mechanisms(engine, monkeypatch, form):
    """MEDIAN of an int column in [0, 10] with ties (values 2..7: in the piecewise form
    0, 1, 8, 9 and 10 lie inside the gaps to the domain's ends): the mechanism reads a
    window of one rank each side and resolves tail draws by the backend's counts and
    nearest values (memoised: the draws repeat the same reads); the draws' frequencies
    against the exact mechanism's candidate probabilities."""
    captured = []
    real = inverse_sensitivity.instance_release

    def drawing(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        """The draws, in the query's snapshot, from the backend's (memoised) reads."""
        seeded, found, draws = SeededSource(2019), {}, []
        for _ in range(1500):
            draws.append((yield from remembered(
                real(n, rank, shift, epsilon, grid, seeded, piecewise, column, key, scaled),
                found)))
        captured.append((n, rank, epsilon, grid, piecewise, draws))
        return draws[0]

    monkeypatch.setattr(inverse_sensitivity, "instance_release", drawing)
    monkeypatch.setattr(inverse_sensitivity, "first_reach", lambda scale, grid: 1)
    monkeypatch.setattr(inverse_sensitivity, "_TAIL_SHARE", 1.0)
    run(_instance_session(engine, "0.5", form), "SELECT MEDIAN(age) FROM scores")
    ((n, rank, epsilon, grid, piecewise, draws),) = captured
    assert piecewise == (form == "piecewise")
    assert all(isinstance(v, int) and 0 <= v <= 10 for v in draws)
    values = sorted(float(a) for a in AGES)
    assert (n, rank, epsilon) == (len(values), percentile_rank(n, Fraction(1, 2)),
                                  Fraction(1, 2))
    expected = np.exp(log_probabilities(values, rank, grid, 0.25, piecewise)) * len(draws)
    observed = np.bincount(draws, minlength=11).astype(float)
    big = expected >= 5  # the candidates far from the median pooled into one cell
    assert stats.chisquare(np.append(observed[big], observed[~big].sum()),
                           np.append(expected[big], expected[~big].sum())).pvalue > ALPHA


def test_answers_metadata_and_user_level_bounds(engine):
    session = _instance_session(engine)
    (answer,) = run(session, "SELECT MEDIAN(score), COUNT(*), MAX(age) FROM scores "
                             "WHERE kind = 'a'")
    median, _, oldest = answer.rows[0]
    assert 0 <= median <= 100 and isinstance(oldest, int)
    assert answer.privacy["ci95"]["median"] == [None]
    assert "exponential mechanism" in answer.privacy["mechanism"]
    assert answer.privacy["sensitivity"].startswith("instance")
    assert engine.ledger.entries("zoe")[-1][5] == "dp instance: median,count,max"
    (answer,) = run(_instance_session(engine, form="piecewise"),
                    "SELECT MEDIAN(score), MIN(age) FROM scores")
    assert 0 <= answer.rows[0][0] <= 100 and isinstance(answer.rows[0][1], int)
    assert "piecewise Laplace" in answer.privacy["mechanism"]
    assert answer.privacy["sensitivity"].startswith("piecewise")
    assert engine.ledger.entries("zoe")[-1][5] == "dp piecewise: median,min"
    (answer,) = run(session, "SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY stay) "
                             "FROM visits")
    assert isinstance(answer.rows[0][0], int) and 0 <= answer.rows[0][0] <= 10


@pytest.mark.parametrize("settings,sql,error", [
    # raw iDP is the owner's opt-in (docs/privacy.md §2), not an analyst's setting
    ("SET idp.sensitivity = 'local'", "SELECT MEDIAN(score) FROM scores", BadSetting),
    ("SET idp.model = 'dp'; SET idp.sensitivity = 'instance'",
     "SELECT MEDIAN(kind) FROM scores", NotSupported),
    # ranks are ⌈p·n⌉ in 64-bit integers: p's numerator times n must not overflow
    ("SET idp.model = 'dp'",
     "SELECT PERCENTILE_DISC(0.1234567) WITHIN GROUP (ORDER BY score) FROM scores",
     NotSupported),
    ("SET idp.model = 'idp'",
     ("SELECT kind, PERCENTILE_DISC(0.123456789012345) WITHIN GROUP (ORDER BY score) "
      "FROM scores GROUP BY kind"), NotSupported),
])
def test_refusals_spend_nothing(engine, settings, sql, error):
    session = Session.open(engine, "zoe")
    run(session, settings)
    before = engine.ledger.entries(), engine.ledger.budgets()
    with pytest.raises(error) as caught:
        run(session, sql)
    assert "\n" not in str(caught.value)
    assert (engine.ledger.entries(), engine.ledger.budgets()) == before


def test_a_domain_without_candidates_is_refused_at_analysis():
    """An int column declared within (0.2, 0.8) has no integer to answer: refused in
    one line before anything is read or charged (no backend here at all)."""
    rules = parse_rules("""
[analysts.zoe]
budget = 1
[tables.t]
[tables.t.columns]
x = { type = "int", domain = [0.2, 0.8] }
""", "test rules")
    settings = Settings(model="dp", sensitivity="instance")
    with pytest.raises(NotSupported, match="holds no integer") as caught:
        refuse_unanswerable(analyze(parse_statements("SELECT MEDIAN(x) FROM t")[0], rules,
                                    settings))
    assert "\n" not in str(caught.value)
    six = "SELECT PERCENTILE_DISC(0.123456) WITHIN GROUP (ORDER BY x) FROM t"
    globally = Settings(model="dp", sensitivity="global")
    assert analyze(parse_statements(six)[0], rules, globally).aggregates[0].fraction == \
        Fraction(123456, 10**6)  # six decimal places are taken
    # a plan without percentiles, MAX or MIN draws nothing by the mechanism
    assert not analyze(parse_statements("SELECT COUNT(x) FROM t")[0], rules,
                       settings).mechanism.exponential
