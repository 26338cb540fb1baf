"""NaN, ±inf and overflow-sized values in protected float columns, on both backends.

One database per backend holds them (loaded once for the module). Every statistic the
pushdown computes — counts, exact sums, order statistics through each path (top-k,
backend percentile, pilot bracket, DuckDB list aggregates, the window statement, DP
clipping), the smooth sensitivity's window and one unit's value — equals the statistic
of the values normalised in Python (``proxy.statistics.normalise``: NaN as NULL, the
rest clamped to the declared bound or ±MAGNITUDE_CAP); every released value and bound
is finite; and the reproductions of issue 13 item 1 no longer happen.
"""

from __future__ import annotations

import csv
import math
import os
import random
from fractions import Fraction

import psycopg
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.noisy_answers import column_needs
from proxy.privacy.sensitivity import (
    local_sensitivity_of_max,
    local_sensitivity_of_percentile,
    local_sensitivity_of_winsorized_sum,
)
from proxy.privacy.smooth_noise import admissible
from proxy.privacy.smooth_sensitivity import (
    smooth_sensitivity_of_max,
    smooth_sensitivity_of_min,
    smooth_sensitivity_of_percentile,
)
from proxy.publish.request import prepare
from proxy.publish.run import run_release
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from proxy.statistics import MAGNITUDE_CAP, clamp_to_domain, percentile_rank
from proxy.vocabulary import parse_prior
from tests.databases import load_table
from tests.factories import open_engine
from tests.privacy.laws import SeededSource
from tests.privacy.reference import by_hand, order_values

RULES = parse_rules("""
[defaults]
report_scale = "rounded"
noise_scale = "local"  # raw iDP: its statistics and sensitivities over non-finite values
epsilon_per_query = 0.5
[analysts.ann]
budget = 10000

[tables.t]
[tables.t.columns]
id = { type = "int", public = true }
grp = { type = "text", keys = ["a", "b"] }
x = { type = "float", domain = [0, 100] }
xl = { type = "float", lower = 0 }
xu = { type = "float", upper = 100 }
xn = { type = "float" }
y = { type = "int", domain = [-50, 50] }

[tables.u]
privacy_unit = "unit"
max_rows_per_unit = 2
[tables.u.columns]
unit = { type = "int" }
x = { type = "float", domain = [0, 100] }

[tables.num]
[tables.num.columns]
v = { type = "float", domain = [0, 100] }
r = { type = "float", domain = [0, 100] }

[tables.p]
privacy_unit = "person_id"
individual_queries = true
[tables.p.columns]
person_id = { type = "int" }
income = { type = "float", domain = [0, 1000000] }
m = { type = "float", lower = 0 }
""")

NAN, INF = float("nan"), float("inf")
EXTREME = [NAN, INF, -INF, 1e308, -1e308, 1e300, -1e300, 5e15, -5e15]


def _column(rng: random.Random, n: int) -> list[float | None]:
    """Ordinary values (ties, some outside [0, 100]), NULLs and every extreme value."""
    values = [rng.choice([None, -20.0, 0.0, 3.0, 12.5, 40.0, 55.0, 55.0, 100.0, 130.0])
              for _ in range(n - 2 * len(EXTREME))] + EXTREME * 2
    rng.shuffle(values)
    return values


def _tables() -> dict[str, dict[str, list]]:
    rng = random.Random(13)
    raw = _column(rng, 60)
    t = {"id": list(range(60)), "grp": [rng.choice("abz") for _ in range(60)],
         "x": raw, "xl": raw, "xu": raw, "xn": raw,
         "y": [rng.choice([None, -60, -5, 0, 7, 7, 49, 80]) for _ in range(60)]}
    u = {"unit": [i // 2 for i in range(60)], "x": _column(rng, 60)}
    income = [float(rng.randint(20, 90) * 1000) for _ in range(60)]
    income[7], income[8] = 30000.0, 52000.0
    income[44:48] = [NAN, INF, -INF, 1e308]
    m = [float(rng.randint(0, 50)) for _ in range(60)]
    m[1:4] = [100.0, NAN, INF]
    return {"t": t, "u": u, "p": {"person_id": list(range(60)), "income": income, "m": m}}


TABLES = _tables()
TYPES = {"id": "INTEGER", "grp": "TEXT", "x": "DOUBLE PRECISION", "xl": "DOUBLE PRECISION",
         "xu": "DOUBLE PRECISION", "xn": "DOUBLE PRECISION", "y": "INTEGER",
         "unit": "INTEGER", "person_id": "INTEGER", "income": "DOUBLE PRECISION",
         "m": "DOUBLE PRECISION"}


@pytest.fixture(scope="module", params=["duckdb", pytest.param("postgres",
                                                             marks=pytest.mark.postgres)])
def url(request, tmp_path_factory):
    """One database per backend with the three tables, shared by the module's tests."""
    if request.param == "duckdb":
        url = f"duckdb:///{tmp_path_factory.mktemp('nonfinite') / 'data.duckdb'}"
        _load(url)
        yield url
        return
    server = request.getfixturevalue("postgres_url")
    name = f"nonfinite_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    url = server.rsplit("/", 1)[0] + f"/{name}"
    _load(url)
    yield url
    with psycopg.connect(server, autocommit=True) as con:
        con.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _load(url: str) -> None:
    for table, columns in TABLES.items():
        load_table(url, table, columns, {name: TYPES[name] for name in columns})
    # Other column types: a decimal (PostgreSQL's NUMERIC holds NaN and values beyond
    # any DOUBLE; DuckDB's DECIMAL neither) and a single-precision float.
    if url.startswith("duckdb"):
        load_table(url, "num", {"v": [None, 1e30, -1e30, 5.0, 150.0], "r": NUM_REAL},
                   {"v": "DECIMAL(38, 3)", "r": "REAL"})
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE num (v NUMERIC, r REAL)")
        con.execute("INSERT INTO num SELECT * FROM unnest(ARRAY['NaN', '1e400', '-1e400', "
                    "'5', '150']::numeric[], %s::real[])", [NUM_REAL])


NUM_REAL = [NAN, INF, -INF, 5.0, 150.0]


@pytest.fixture(scope="module")
def engine(url):
    """Drawing from a seeded source: the laws are tested elsewhere; here only that
    every answer is finite."""
    with open_engine(url, RULES, rng=SeededSource(5)) as engine:
        yield engine


def _plan(sql: str, **settings):
    return analyze(parse_statements(sql)[0], RULES, Settings(**settings))


def _normalised(table: str, column: str, keep) -> list[float]:
    """The sorted normalised values of the rows ``keep(row)`` selects."""
    declared = RULES.tables[table].columns[column]
    rows = [dict(zip(TABLES[table], values)) for values in zip(*TABLES[table].values())]
    values = (clamp_to_domain(row[column], declared.lower, declared.upper) for row in rows
              if keep(row))
    return sorted(v for v in values if v is not None)


# (SQL, the table, the WHERE as a Python predicate, GROUP BY column or None, settings)
QUERIES = [
    (("SELECT MEDIAN(x), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x), MAX(x), MIN(x), "
     "MAX(xl), MIN(xu), SUM(x), AVG(x), COUNT(xn) FROM t WHERE id < 50"),
     "t", lambda r: r["id"] < 50, None, {}),
    ("SELECT grp, MEDIAN(x), MAX(xl), MIN(xu), SUM(x), COUNT(xn) FROM t GROUP BY grp",
     "t", lambda r: True, "grp", {}),
    ("SELECT MEDIAN(y), SUM(y), MAX(y) FROM t", "t", lambda r: True, None, {}),
    ("SELECT SUM(x), MEDIAN(x), MAX(x), COUNT(x) FROM u WHERE unit < 25",
     "u", lambda r: r["unit"] < 25, None, {}),
    ("SELECT SUM(x), MEDIAN(x), MIN(x), COUNT(x) FROM u WHERE unit < 25",
     "u", lambda r: r["unit"] < 25, None, {"model": "dp"}),
]


@pytest.mark.parametrize("path", ["plain", "bracketed", "window"])
@pytest.mark.parametrize("query", range(len(QUERIES)))
def test_statistics_are_those_of_the_normalised_values(engine, monkeypatch, query, path):
    """Counts, sums and every order statistic, ungrouped and grouped, each backend path."""
    from proxy.pushdown import grouped_lists, ungrouped

    if path == "bracketed":  # the pilot bracket, forced on this small table
        monkeypatch.setattr(ungrouped, "PILOT_PERCENT", 100)
        monkeypatch.setattr(ungrouped, "PILOT_MIN_VALUES", 1)
    if path == "window":  # DuckDB's GROUP BY through the window statement too
        monkeypatch.setattr(grouped_lists, "_value_at", lambda *args: False)
    sql, table, keep, group_by, settings = QUERIES[query]
    plan = _plan(sql, **settings)
    shift, groups, _ = engine.statistics(plan)
    for key in (("a",), ("b",)) if group_by else ((),):
        stats = groups[key]
        for need in column_needs(plan, shift):
            values = _normalised(table, need.column,
                                 lambda r, key=key: keep(r) and (not key or r[group_by] == key[0]))
            column = stats.column(need.column)
            assert column.values == order_values(values, need.ranks), (need.column, key)
            if need.count or need.total:
                assert column.n == len(values)
            if need.total:
                assert column.total == pytest.approx(sum(values))
                assert math.isfinite(column.total)


def test_decimal_and_single_precision_columns_are_normalised(engine):
    """NaN → NULL, beyond the domain → its bound, and no cast of a NUMERIC beyond 1e308
    to DOUBLE (which would fail on the data)."""
    plan = _plan("SELECT MEDIAN(v), SUM(v), MAX(v), MIN(v), MEDIAN(r), SUM(r), MIN(r) FROM num")
    shift, groups, _ = engine.statistics(plan)
    for need in column_needs(plan, shift):
        stats = groups[()].column(need.column)
        assert stats.values == order_values([0.0, 5.0, 100.0, 100.0], need.ranks)
        assert (stats.n, stats.total) == (4, 205.0)


def test_smooth_sensitivity_window_reads_normalised_values(engine):
    plan = _plan("SELECT MEDIAN(x), MAX(x), MIN(x) FROM u WHERE unit < 25",
                 model="dp", sensitivity="smooth")
    shift, groups, _ = engine.statistics(plan)
    values = _normalised("u", "x", lambda r: r["unit"] < 25)
    n, beta = len(values), admissible(float(plan.epsilon), plan.mechanism.gamma)[1]
    assert groups[()].smooth == pytest.approx({
        0: by_hand(smooth_sensitivity_of_percentile(n, percentile_rank(n, Fraction(1, 2)),
                                                    shift, beta, 0.0, 100.0), values),
        1: by_hand(smooth_sensitivity_of_max(n, shift, beta, 0.0, 100.0), values),
        2: by_hand(smooth_sensitivity_of_min(n, shift, beta, 0.0, 100.0), values),
    })


@pytest.mark.parametrize("person,value", [(44, None), (45, 1e6), (46, 0.0), (47, 1e6), (7, 3e4)])
def test_one_units_value_is_normalised(engine, person, value):
    plan = _plan(f"SELECT income FROM p WHERE person_id = {person}",
                 prior=parse_prior("uniform(0, 1000000)"))
    assert engine.unit_value(plan)[0] == value


SESSIONS = {
    "idp": ([], [
        ("SELECT MEDIAN(x), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x), MAX(x), MIN(x), "
        "MAX(xl), MIN(xu), SUM(x), AVG(x), COUNT(xn), COUNT(x) FROM t WHERE id < 50"),
        "SELECT grp, MEDIAN(x), MAX(xl), MIN(xu), SUM(x), AVG(x), COUNT(xn) FROM t GROUP BY grp",
        "SELECT SUM(x), AVG(x), MEDIAN(x), MAX(x) FROM u",
        "SELECT MEDIAN(income), MAX(income), SUM(income), AVG(income), MAX(m) FROM p"]),
    "dp": (["SET idp.model = 'dp'"], [
        "SELECT MEDIAN(x), MAX(x), MIN(x), SUM(x), AVG(x), COUNT(xn) FROM t WHERE id < 50",
        "SELECT grp, MEDIAN(x), SUM(x), AVG(x) FROM t GROUP BY grp",
        "SELECT SUM(x), AVG(x), MEDIAN(x), MAX(x) FROM u"]),
    "smooth": (["SET idp.model = 'dp'", "SET idp.sensitivity = 'smooth'"], [
        "SELECT MEDIAN(x), MAX(x), MIN(x) FROM t WHERE id < 50",
        "SELECT MEDIAN(x), MAX(x), MIN(x) FROM u"]),
}


@pytest.mark.parametrize("model", SESSIONS)
def test_every_released_value_and_bound_is_finite(engine, model):
    session = Session.open(engine, "ann")
    settings, queries = SESSIONS[model]
    for statement in settings:
        list(session.execute(statement))
    for sql in queries:
        for answer in session.execute(sql):
            _assert_finite(answer.rows)
            _assert_finite(answer.privacy["ci95"])


def _assert_finite(found) -> None:
    if isinstance(found, dict):
        found = list(found.values())
    if isinstance(found, (list, tuple)):
        for item in found:
            _assert_finite(item)
    elif isinstance(found, float):
        assert math.isfinite(found)


def _statistics(engine, sql):
    plan = _plan(sql)
    shift, groups, _ = engine.statistics(plan)
    return plan, shift, groups[()]


def test_a_nan_in_scope_does_not_shrink_the_median_sensitivity(engine):
    """Issue 13: person 44's NaN sorted above every value made LS NaN, rounded to 1, and
    the median printed person 7's income to ±30. NaN is not counted now: LS is that of
    {30000, 52000}."""
    sql = "SELECT MEDIAN(income) FROM p WHERE person_id IN (44, 7, 8)"
    _, shift, group = _statistics(engine, sql)
    stats = group.column("income")
    assert stats.n == 2
    answer, ls = local_sensitivity_of_percentile(stats.n, stats.values, Fraction(1, 2), shift,
                                                 0.0, 1e6)
    assert (answer, ls) == (30000.0, 30000.0)  # max(52000 − 30000, 30000 − L)
    (released,) = Session.open(engine, "ann").execute(sql)
    ((bound,),) = released.privacy["ci95"].values()
    assert bound >= ls


@pytest.mark.parametrize("people", [(1, 2), (1, 3)])
def test_max_without_upper_over_nan_or_inf_has_sensitivity_at_least_100(engine, people):
    """Issue 13: MAX(m), only lower declared, data {100, NaN} or {100, inf}: scale 1."""
    sql = f"SELECT MAX(m) FROM p WHERE person_id IN {people}"
    _, shift, group = _statistics(engine, sql)
    _, ls = local_sensitivity_of_max(group.column("m").values, shift, 0.0, None)
    assert 100 <= ls <= MAGNITUDE_CAP
    (released,) = Session.open(engine, "ann").execute(sql)
    ((bound,),) = released.privacy["ci95"].values()
    assert bound >= ls


def test_sum_and_avg_over_a_nan_are_finite_and_noisy(engine):
    """Issue 13: SUM over a NaN came back NaN, "exact (sensitivity 0)"; AVG exactly 0
    with bound ±nan."""
    sql = "SELECT SUM(income), AVG(income) FROM p WHERE person_id IN (44, 45, 7, 8)"
    _, _, group = _statistics(engine, sql)
    stats = group.column("income")
    assert (stats.n, stats.total) == (3, 1e6 + 30000 + 52000)  # NaN dropped, inf → U
    total, ls = local_sensitivity_of_winsorized_sum(stats.n, stats.total, stats.values,
                                                    0.0, 1e6)
    assert math.isfinite(total) and math.isfinite(ls) and ls > 0
    (released,) = Session.open(engine, "ann").execute(sql)
    _assert_finite([released.rows, released.privacy["ci95"]])
    assert all(bound is not None and bound > 0 for (bound,) in released.privacy["ci95"].values())
    assert "exact" not in released.privacy["mechanism"]


def test_max_over_a_nan_is_answered(engine):
    """Issue 13: 'cannot convert NaN to integer ratio' after the debit."""
    (released,) = Session.open(engine, "ann").execute("SELECT MAX(income) FROM p")
    _assert_finite(released.rows)
    assert 0 <= released.rows[0][0] <= 1e6


@pytest.mark.parametrize("method,columns", [("idp-cbls", "x,xn"), ("idp-ls", "x"),
                                            ("dp-um", "x")])
def test_a_release_masks_only_normalised_values(engine, tmp_path, method, columns):
    """NaN rows are in no cluster (their masked value is NULL); ±inf and overflow-sized
    values count as the bound (±MAGNITUDE_CAP without a domain); everything released,
    and the information loss, is finite. --alpha reads a finite maximum."""
    out = tmp_path / f"{method}.csv"
    alpha = 1.5 if method == "idp-cbls" else None
    job = prepare(RULES, engine.backend, "t", columns, 3, "1", method, "equal", alpha, (),
                  "id", str(out))
    assert all(bound is None or math.isfinite(bound) for domain in job.domains
               for bound in domain)
    engine.ledger.ensure_analyst("ann")
    report = run_release(engine.backend, engine.ledger, job, "ann", rng=SeededSource(3))
    assert math.isfinite(report.mean_sse)
    raw = dict(zip(TABLES["t"]["id"], TABLES["t"]["x"]))
    with out.open() as handle:
        for row in csv.DictReader(handle):
            nan = raw[int(row["id"])] is not None and math.isnan(raw[int(row["id"])])
            assert (row["x"] == "") == (nan or raw[int(row["id"])] is None)
            for name in columns.split(","):
                assert row[name] == "" or math.isfinite(float(row[name]))
