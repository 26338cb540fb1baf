"""The 95 % bounds of post-processed columns (proxy.postbounds), over the wire on the
demo: a derived column's bound is the interval rule's, row by row (a difference of two
counts: the sum of their bounds; SQRT, ROUND and a multiple: the image of the count's
interval; MetricFlow's MAX(subq.x) of one row per key: the count's own), a column no
sound rule covers gets none, and the bound of a difference of counts holds for at least
95 % of fresh answers. The rule for sums of several noisy values rests on the noise being
symmetric and log-concave: checked here for the discrete laws and bounds the mechanisms
use."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import numpy as np
import psycopg
import pytest
import sqlglot

from proxy import postbounds
from proxy.postbounds import MAX_ITEMS, MAX_NODES, Bounds, ReleasedTable
from proxy.privacy.mechanisms import discrete_gaussian_interval, discrete_laplace_interval
from proxy.session import Session
from tests.factories import demo_served_fresh, open_engine, table_of_rows

pytestmark = pytest.mark.postgres

MONTHLY = ("SELECT month, visits, visits - LAG(visits) OVER (ORDER BY month) AS change FROM "
           "(SELECT date_trunc('{}', visited_at) AS month, COUNT(*) AS visits FROM visits "
           "GROUP BY 1) m ORDER BY month")


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def served(request, tmp_path_factory):
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with demo_served_fresh(request.param, tmp_path_factory.mktemp("postbounds"),
                           url) as proxy:
        yield proxy


def ask(served, sql: str, intervals: bool = True) -> tuple[list[str], list[tuple], str]:
    """(columns, rows, the NOTICE) of ``sql`` with ``idp.intervals`` on: each bounded
    column followed by its interval's ends."""
    notices: list[str] = []
    with psycopg.connect(served.dsn("alice"), autocommit=True) as con:
        con.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        con.execute(f"SET idp.intervals = {'on' if intervals else 'off'}")
        cursor = con.execute(sql)
        return [c.name for c in cursor.description], cursor.fetchall(), notices[-1]


def spreads(columns: list[str], rows: list[tuple], name: str) -> list[float | None]:
    """Each row's half-width of ``name``'s interval, from its ``_ci95_low/high`` columns."""
    value, low, high = (columns.index(n) for n in (name, f"{name}_ci95_low",
                                                   f"{name}_ci95_high"))
    return [None if row[value] is None else max(float(row[value]) - row[low],
                                                row[high] - float(row[value]))
            for row in rows]


def test_a_difference_of_counts_gets_the_sum_of_their_bounds(served):
    columns, rows, notice = ask(served, MONTHLY.format("month"))
    counts, changes = spreads(columns, rows, "visits"), spreads(columns, rows, "change")
    assert rows[0][columns.index("change")] is None and len(rows) == 24
    for before, now, change in zip(counts, counts[1:], changes[1:]):
        assert change == pytest.approx(before + now)
    widest = re.search(r"change ±(\S+)", notice).group(1)
    assert float(widest) == pytest.approx(max(changes[1:]), rel=1e-3)


def test_a_function_of_one_count_maps_its_interval(served):
    """SQRT, ROUND, a multiple and a cast that rounds (as it rounds the truth): the image
    of [v − B, v + B] (its wider side)."""
    columns, rows, _ = ask(served, "SELECT region, COUNT(*) AS n, SQRT(COUNT(*)) AS root, "
                                   "ROUND(COUNT(*) / 10.0) AS tens, 5 - 2 * COUNT(*) AS affine, "
                                   "CAST(COUNT(*) / 4.0 AS NUMERIC(12, 1)) AS quarter "
                                   "FROM people WHERE age > 30 GROUP BY region")
    for row, bound in zip(rows, spreads(columns, rows, "n")):
        v = row[columns.index("n")]
        low, high = max(v - bound, 0), v + bound
        shown = float(row[columns.index("quarter")])
        by = dict(zip(["root", "tens", "affine", "quarter"], (
            max(math.sqrt(v) - math.sqrt(low), math.sqrt(high) - math.sqrt(v)),
            max(math.floor(v / 10 + .5) - math.floor(low / 10 + .5),
                math.floor(high / 10 + .5) - math.floor(v / 10 + .5)),
            2 * bound,
            max(shown - math.floor(low / 4 * 10) / 10, math.ceil(high / 4 * 10) / 10 - shown))))
        for name, expected in by.items():
            assert spreads(columns, [row], name)[0] == pytest.approx(expected), name


def test_a_joined_metric_of_one_row_per_key_keeps_its_bound(served):
    """MetricFlow's MAX(subq.x) over a FULL OUTER JOIN on the key: the count's own
    bound; their ratio (two noisy values) none."""
    columns, rows, notice = ask(served, (
        "SELECT COALESCE(a.k, b.k) AS k, MAX(a.x) AS long_stays, MAX(b.y) AS visits, "
        "MAX(a.x) / NULLIF(MAX(b.y), 0) AS ratio FROM (SELECT department AS k, "
        "SUM(CASE WHEN days > 7 THEN 1 ELSE 0 END) AS x FROM visits GROUP BY 1) a FULL "
        "OUTER JOIN (SELECT department AS k, COUNT(*) AS y FROM visits WHERE days > 0 GROUP "
        "BY 1) b ON a.k = b.k GROUP BY COALESCE(a.k, b.k)"), intervals=False)
    assert "long_stays ±" in notice and "visits ±" in notice and "ratio ±" not in notice
    *_, alone = ask(served, "SELECT department AS k, COUNT(*) AS y FROM visits WHERE "
                            "days > 0 GROUP BY 1", intervals=False)
    assert re.search(r"visits ±(\S+)", notice).group(1) == \
        re.search(r"y ±(\S+)", alone).group(1)


def test_an_aggregate_beside_a_mode_keeps_its_bound(served):
    """MODE is a part of its own, its arg-max a step over its counts' release: its column
    has no bound, and the AVG beside it keeps its own (it lost it when one untraced
    release stopped the tracing of all)."""
    columns, rows, _ = ask(served, "SELECT sex, MODE() WITHIN GROUP (ORDER BY region) AS m, "
                                   "AVG(age) AS a FROM people GROUP BY sex ORDER BY sex")
    assert [row[0] for row in rows] == ["f", "m"] and "m_ci95_low" not in columns
    assert all(0 < spread < 5 for spread in spreads(columns, rows, "a"))


def test_a_step_of_table_calculations_carries_its_bounds(served):
    """Lightdash's metrics CTE and table-calculations step read by ``SELECT *``: the
    count keeps its bound through the step, the running total gets the sum of the
    bounds so far, the percent of total (a ratio) none; a step that filters on the
    count leaves its window without one."""
    columns, rows, notice = ask(served, (
        "WITH metrics AS (SELECT region AS r, COUNT(*) AS n FROM people WHERE age > 30 "
        "GROUP BY 1), table_calculations AS (SELECT *, SUM(n) OVER (ORDER BY r ROWS BETWEEN "
        "UNBOUNDED PRECEDING AND CURRENT ROW) AS running, n / SUM(n) OVER () AS pct FROM "
        "metrics) SELECT * FROM table_calculations ORDER BY r"))
    counts, running = spreads(columns, rows, "n"), spreads(columns, rows, "running")
    assert "pct_ci95_low" not in columns and len(rows) == 4
    assert running == pytest.approx([sum(counts[: i + 1]) for i in range(len(counts))])
    assert "n ±" in notice and "running ±" in notice and "pct ±" not in notice
    _, _, notice = ask(served, (
        "WITH metrics AS (SELECT region AS r, COUNT(*) AS n FROM people WHERE age > 30 "
        "GROUP BY 1), kept AS (SELECT * FROM metrics WHERE n > 10) SELECT r, n, SUM(n) OVER "
        "() AS total FROM kept"))
    assert "n ±" in notice and "total ±" not in notice


@pytest.mark.parametrize("sql,bounded,unbounded", [
    # a share: a ratio of two noisy values (their intervals hold together with 90 %)
    ("SELECT region, COUNT(*) AS n, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER () AS share FROM "
     "people WHERE age > 30 GROUP BY region", ["n"], ["share"]),
    # a product; LAG over rows ordered by a noisy count; RANK of noisy counts
    ("SELECT region, COUNT(*) * COUNT(*) AS sq, LAG(COUNT(*)) OVER (ORDER BY COUNT(*)) AS "
     "prev, RANK() OVER (ORDER BY COUNT(*)) AS place, COUNT(*) - LAG(COUNT(*)) OVER "
     "(ORDER BY region) AS step FROM people WHERE age > 30 GROUP BY region", ["step"],
     ["sq", "prev", "place"]),
    # AVGs are not of additive noise: alone (and rounded) bounded, their difference not
    ("SELECT region, AVG(age) AS a, ROUND(AVG(age)) AS r, AVG(age) - LAG(AVG(age)) OVER "
     "(ORDER BY region) AS d FROM people GROUP BY region", ["a", "r"], ["d"]),
    # a window over rows a noisy value filters
    ("SELECT r, n, SUM(n) OVER () AS total, n + 1 AS more FROM (SELECT region AS r, "
     "COUNT(*) AS n FROM people WHERE age > 30 GROUP BY 1) s WHERE n > 100", ["n", "more"],
     ["total"]),
])
def test_a_column_without_a_sound_rule_gets_no_bound(served, sql, bounded, unbounded):
    columns, rows, notice = ask(served, sql)
    assert rows
    for name in bounded:
        assert f"{name}_ci95_low" in columns and f"{name} ±" in notice, name
    for name in unbounded:
        assert f"{name}_ci95_low" not in columns and f"{name} ±" not in notice, name


def test_the_bound_of_a_difference_holds_for_95_percent_of_fresh_answers(served):
    """Day over day: ~730 differences of two fresh noisy counts, each against the truth
    (neighbouring rows share a count: the margin allows twice a binomial's variance)."""
    sql = MONTHLY.format("day")
    columns, rows, _ = ask(served, sql)
    truth = {day: change for day, _, change in
             served.server.engine.backend.query_with_columns(sql)[1]}
    changes = spreads(columns, rows, "change")
    at, change = columns.index("month"), columns.index("change")
    judged = [(row[change], truth[row[at]], bound) for row, bound in zip(rows, changes)
              if row[change] is not None]
    outside = sum(abs(value - true) > bound for value, true, bound in judged)
    n = len(judged)
    assert n > 700
    assert outside / n <= 0.05 + 3 * math.sqrt(2 * 0.05 * 0.95 / n), (outside, n)


def _law(kind: str, scale: float, width: int) -> tuple[np.ndarray, int]:
    """(P(Z = z) for |z| ≤ width, the mechanism's 95 % bound) of the discrete Laplace of
    this scale or the discrete Gaussian of this σ."""
    z = np.arange(-width, width + 1)
    if kind == "laplace":
        p = math.exp(-1 / scale) ** np.abs(z)
        bound = discrete_laplace_interval(Fraction(scale).limit_denominator(100))
    else:
        p = np.exp(-z * z / (2 * scale * scale))
        bound = discrete_gaussian_interval(Fraction(scale * scale).limit_denominator(100))
    return p / p.sum(), bound


def test_the_bounds_of_the_discrete_laws_add_up_at_95_percent():
    """P(|e₁ ± e₂| > B₁ + B₂) ≤ 5 % for two independent draws of the discrete Laplace and
    Gaussian laws at the bounds the mechanisms give, over a grid of scales, also where a
    count is clamped at 0 (e = max(Z, −t)), and for sums of up to 12 draws: the rule for
    sums in proxy.postbounds, checked exactly by convolution."""
    scales = [0.4, 1, 2.5, 6, 15, 40]
    worst = 0.0
    for (k1, s1), (k2, s2) in itertools.combinations_with_replacement(
            itertools.product(("laplace", "gaussian"), scales), 2):
        width = int(30 * max(s1, s2)) + 20
        (p1, b1), (p2, b2) = _law(k1, s1, width), _law(k2, s2, width)
        for t in (None, 0, b1 // 2) if k1 == "laplace" else (None,):
            q1 = p1 if t is None else _clamped(p1, t, width)
            total = np.convolve(q1, p2)
            z = np.arange(-2 * width, 2 * width + 1)
            worst = max(worst, total[np.abs(z) > b1 + b2].sum())
    rng = np.random.default_rng(7)
    for n in (3, 5, 12):
        for _ in range(4):
            laws = [_law(str(rng.choice(["laplace", "gaussian"])), float(rng.choice(scales)),
                         300) for _ in range(n)]
            total, bound = laws[0]
            for p, b in laws[1:]:
                total, bound = np.convolve(total, p), bound + b
            z = np.arange(len(total)) - len(total) // 2
            worst = max(worst, total[np.abs(z) > bound].sum())
    assert worst <= 0.05


def _clamped(p: np.ndarray, t: int, width: int) -> np.ndarray:
    """The law of max(Z, −t): a count of true value t released as max(t + Z, 0)."""
    out = p.copy()
    out[: width - t] = 0
    out[width - t] = p[: width - t + 1].sum()
    return out


def test_ends_that_would_grow_past_their_budget_give_no_bound_and_cost_little(monkeypatch):
    """A product by a column doubles its ends (LEAST and GREATEST of both): nested 40
    deep, the item gets no bound, and no pair of ends built on the way grows past a
    few times MAX_NODES (unguarded, the 40th would hold about 2⁴⁰ nodes); a difference
    beside it keeps its own. Past MAX_ITEMS computed columns, none gets one."""
    deep = "n"
    for _ in range(40):
        deep = f"({deep} * k + n)"
    tree = sqlglot.parse_one(f"SELECT {deep} AS deep, n - LAG(n) OVER (ORDER BY k) AS d "
                             "FROM released AS r", read="postgres")
    rule = Bounds(tree, [ReleasedTable("r", ("k", "n"), {"n": "__idp_b1"}, frozenset({"n"}))])
    measured = postbounds._size

    def size(interval):
        nodes = measured(interval)
        assert nodes <= 4 * MAX_NODES, f"ends of {nodes} nodes were built"
        return nodes
    monkeypatch.setattr(postbounds, "_size", size)
    found = [rule.interval(item.unalias()) for item in tree.expressions]
    assert found[0] is None and found[1] is not None
    wide = sqlglot.parse_one("SELECT " + ", ".join(f"n + {i}" for i in range(MAX_ITEMS + 6))
                             + " FROM released AS r", read="postgres")
    rule = Bounds(wide, [ReleasedTable("r", ("k", "n"), {"n": "__idp_b1"}, frozenset({"n"}))])
    bounded = [rule.interval(item) is not None for item in wide.expressions]
    assert bounded == [True] * MAX_ITEMS + [False] * 6  # the first 64 computed columns


def test_a_window_over_rows_a_limit_chose_by_noisy_values_gets_no_bound(served):
    """The subquery's five largest noisy counts: their LAG and total may not be the true
    five's; each count keeps its own bound."""
    columns, _, notice = ask(served, (
        "SELECT k, n, n - LAG(n) OVER (ORDER BY k) AS step, SUM(n) OVER () AS total FROM "
        "(SELECT date_trunc('month', visited_at) AS k, COUNT(*) AS n FROM visits GROUP BY 1 "
        "ORDER BY n DESC LIMIT 5) s"))
    assert "n_ci95_low" in columns and "n ±" in notice
    assert "step ±" not in notice and "total ±" not in notice


NEIGHBOUR_RULES = """
[defaults]
model = "dp"
epsilon_per_query = 0.5
[analysts.eve]
budget = 1000

[tables.t]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.t.columns]
person_id = { type = "int" }
region = { type = "text", keys = ["a", "b", "c"] }
x = { type = "float", domain = [0, 100], resolution = 0.01 }
"""
DERIVED = ("SELECT r, n, n - LAG(n) OVER (ORDER BY r) AS step, SQRT(n) AS root, s - LAG(s) "
           "OVER (ORDER BY r) AS ds, n * 1.0 / SUM(n) OVER () AS share, ROUND(s) AS rs FROM "
           "(SELECT region AS r, COUNT(*) AS n, SUM(x) AS s FROM t WHERE x > 10 GROUP BY 1) q")


@pytest.mark.parametrize("change", ["none", "removed", None, float("nan"), float("inf"),
                                    float("-inf"), 100.0, 0.0, 10.0, "tie"])
def test_derived_bounds_are_a_function_of_the_releases_for_every_neighbour(tmp_path, change):
    """Over a data set and each neighbour (person 1 removed, or x of person 1 NULL, NaN,
    ±inf, at the domain's ends, at the WHERE's edge, tied with person 2): the same
    columns are bounded, and each derived bound is the rule's over the answer's own
    released values and bounds, nothing else (the counts' bounds public under DP, so
    the difference's is the same number for every neighbour)."""
    rows = [(i, "abc"[i % 3], 5.0 + 2.5 * i) for i in range(1, 41)]
    if change == "removed":
        rows = rows[1:]
    elif change == "tie":
        rows[0] = (1, rows[0][1], rows[1][2])
    elif change != "none":
        rows[0] = (1, rows[0][1], change)
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    types = {"person_id": "INTEGER", "region": "TEXT", "x": "DOUBLE PRECISION"}
    with open_engine(url, NEIGHBOUR_RULES, {"t": table_of_rows(rows, types)}) as engine:
        (answer,) = Session.open(engine, "eve").execute(DERIVED)
    bounds, columns = answer.privacy["ci95"], answer.columns
    assert set(bounds) == {"n", "step", "root", "rs"}  # share, ds (clipped SUMs): no rule
    n = [row[columns.index("n")] for row in answer.rows]
    assert bounds["step"] == [0.0] + [a + b for a, b in zip(bounds["n"], bounds["n"][1:])]
    assert bounds["step"][1:] == [2 * bounds["n"][0]] * 2  # public: s/ε
    for v, b, root in zip(n, bounds["n"], bounds["root"]):
        assert root == pytest.approx(max(math.sqrt(v) - math.sqrt(max(v - b, 0)),
                                         math.sqrt(v + b) - math.sqrt(v)))


def test_an_outer_query_prepared_once_gives_what_a_fresh_one_gives(monkeypatch):
    """``run_outer`` keeps its statement per outer query and what its releases are made
    of (columns, types, which columns have bounds, postprocess._prepared), never their
    values: releases of other rows and bounds give what a fresh preparation gives, and
    other bounded columns, none, or other types are prepared afresh."""
    from collections import OrderedDict

    from proxy import postprocess
    from proxy.analyze.outer import OuterQuery

    outer = OuterQuery("SELECT s.a - s.b AS d, s.a, 100.0 * s.a / s.b AS r FROM released AS s",
                       ("s",))
    rows = [(5, 3), (7, 1)]
    cases = [
        ([(["a", "b"], ["bigint", "bigint"], rows)],
         [({"a": [1.0, 2.0], "b": [0.5, 0.5]}, frozenset({"a", "b"}), True)]),
        ([(["a", "b"], ["bigint", "bigint"], rows)],
         [({"a": [1.0, 2.0]}, frozenset({"a", "b"}), True)]),
        ([(["a", "b"], ["bigint", "bigint"], rows)], None),
        ([(["a", "b"], ["double precision", "bigint"], [(5.5, 3), (7.5, 2)])],
         [({"a": [3.0, 4.0], "b": [1.5, 0.5]}, frozenset({"a"}), False)]),
        ([(["a", "b"], ["bigint", "bigint"], [(9, 4)])],
         [({"a": [2.0], "b": [0.25]}, frozenset({"a", "b"}), True)]),
    ]
    monkeypatch.setattr(postprocess, "_prepared_kept", OrderedDict())
    kept = [postprocess.run_outer(outer, *case) for case in cases for _ in range(2)]
    fresh = []
    for case in cases:
        monkeypatch.setattr(postprocess, "_prepared_kept", OrderedDict())
        fresh += [postprocess.run_outer(outer, *case)] * 2
    assert kept == fresh
    # the first three differ in which columns have bounds only, and so in what is derived
    assert len({repr(answer[5]) for answer in fresh[:6:2]}) == 3
