"""The statistics query returns the same numbers on DuckDB and PostgreSQL, and they are
the order statistics a direct computation over the rows gives."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends import GroupedRanks, open_backend
from proxy.engine import Engine
from proxy.privacy.noisy_answers import column_needs
from proxy.pushdown import compute_statistics, unit_bound_sql
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import BOTTOM, TOP, ColumnNeeds
from tests.contract import (
    DEEP_GROUPED,
    DEEP_RULES,
    QUERIES,
    RULES,
    RULES_TEXT,
    TYPES,
    load_deep,
    table_rows,
)
from tests.databases import load_table
from tests.privacy.reference import order_values


def _statistics(url: str | Engine, sql: str):
    """The plan of ``sql`` and the statistics an engine over ``url`` computes for it (an
    engine already open: the one a test's loop asks all its queries of, as a server's
    engine answers many)."""
    if isinstance(url, Engine):
        plan = analyze(parse_statements(sql)[0], RULES, Settings())
        shift, groups, _ = url.statistics(plan)
        return plan, shift, groups
    with _engine(url) as engine:
        return _statistics(engine, sql)


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    backend = open_backend(url)
    try:
        yield Engine(RULES, backend)
    finally:
        backend.close()


@pytest.mark.postgres
@pytest.mark.parametrize("sql", QUERIES)
def test_same_statistics_on_duckdb_and_postgres(sql, duckdb_url, fresh_postgres):
    data = table_rows()
    load_table(duckdb_url, "t", data, TYPES)
    load_table(fresh_postgres, "t", data, TYPES)
    assert _statistics(duckdb_url, sql)[2] == _statistics(fresh_postgres, sql)[2]


@pytest.mark.postgres
def test_statistics_equal_a_direct_computation(backend_url):
    data = table_rows(seed=5)
    load_table(backend_url, "t", data, TYPES)
    sql = "SELECT grp, MEDIAN(x), MAX(y), SUM(x) FROM t WHERE y >= -20 GROUP BY grp"
    plan, shift, groups = _statistics(backend_url, sql)
    per_unit = {}
    for unit in data["unit"]:
        per_unit[unit] = per_unit.get(unit, 0) + 1
    assert shift == max(per_unit.values())
    rows = list(zip(data["grp"], data["x"], data["y"]))
    needs = {n.column: n for n in column_needs(plan, shift)}
    for key in ("a", "b", "c"):
        scope = [(x, y) for g, x, y in rows if g == key and y is not None and y >= -20]
        xs = sorted(min(max(x, 0.0), 100.0) for x, _ in scope if x is not None)
        ys = sorted(float(min(max(y, -50), 50)) for _, y in scope)
        stats = groups[(key,)]
        assert stats.rows == len(scope)
        assert stats.columns["x"].n == len(xs)
        assert stats.columns["x"].total == pytest.approx(sum(xs))
        assert stats.columns["x"].values == order_values(xs, needs["x"].ranks)
        assert stats.columns["y"].values == order_values(ys, needs["y"].ranks)
    assert ("zzz",) not in groups  # rows outside the declared keys belong to no group


def test_unit_bound_query_counts_rows_of_the_busiest_unit(duckdb_url):
    load_table(duckdb_url, "t", {"unit": [1, 1, 2, 3, 3, 3], "grp": list("aaaaaa"),
                                 "x": [1.0] * 6, "y": [1] * 6}, TYPES)
    backend = open_backend(duckdb_url)
    assert backend.query(unit_bound_sql("t", "unit", "duckdb")) == [(3,)]


def test_percentile_rank_matches_the_backends_percentile_disc(duckdb_url):
    """Our integer rank ⌈p·n⌉ is the rank PERCENTILE_DISC answers."""
    import duckdb

    from proxy.statistics import percentile_rank
    con = duckdb.connect()
    for n in (1, 2, 3, 10, 11, 101):
        for p in (Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), Fraction(1)):
            (value,) = con.execute(
                f"SELECT quantile_disc(x, {float(p)}) FROM range(1, {n + 1}) t(x)").fetchone()
            assert value == percentile_rank(n, p)


@pytest.mark.postgres
@pytest.mark.parametrize("sql", [
    ("SELECT MEDIAN(x), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x), MAX(y), MIN(x), "
     "SUM(x) FROM t WHERE unit < {k}"),
    "SELECT MAX(y) FROM t WHERE unit < {k}",
    "SELECT MIN(x), COUNT(*) FROM t WHERE unit < {k}",
])
def test_ungrouped_statistics_equal_a_direct_computation(backend_url, sql):
    """The fast path (counts, top-k lists, backend percentiles at (k − ½)/n) returns the
    exact order statistics, for scopes from empty to a few dozen values."""
    data = table_rows(seed=9, units=30)
    load_table(backend_url, "t", data, TYPES)
    rows = list(zip(data["unit"], data["x"], data["y"]))
    with _engine(backend_url) as engine:
        results = {k: _statistics(engine, sql.format(k=k)) for k in (0, 1, 2, 3, 5, 8, 13, 30)}
    for k, (plan, shift, groups) in results.items():
        needs = {n.column: n for n in column_needs(plan, shift)}
        scope = [(x, y) for unit, x, y in rows if unit < k]
        xs = sorted(min(max(x, 0.0), 100.0) for x, _ in scope if x is not None)
        ys = sorted(float(min(max(y, -50), 50)) for _, y in scope if y is not None)
        stats = groups[()]
        for column, values in (("x", xs), ("y", ys)):
            if column in needs:
                assert stats.columns[column].values == order_values(values, needs[column].ranks)
        if "x" in needs and needs["x"].total:
            assert stats.columns["x"].n == len(xs)
            assert stats.columns["x"].total == pytest.approx(sum(xs))
        if "COUNT(*)" in sql:
            assert stats.rows == len(scope)


@pytest.mark.postgres
def test_dp_clipping_keeps_at_most_the_declared_rows_per_unit(backend_url):
    """Under DP a unit's in-scope rows beyond max_rows_per_unit are dropped before any
    statistic, so the declared bound really bounds its contribution (SPEC §5.2)."""
    data = table_rows(seed=11, units=40)
    load_table(backend_url, "t", data, TYPES)
    rules = parse_rules(RULES_TEXT.replace('privacy_unit = "unit"',
                                           'privacy_unit = "unit"\nmax_rows_per_unit = 2'))
    backend = open_backend(backend_url)
    plan = analyze(parse_statements("SELECT COUNT(*), SUM(y) FROM t WHERE x < 60")[0], rules,
                   Settings(model="dp"))
    shift, groups, _ = Engine(rules, backend).statistics(plan)
    in_scope: dict[int, int] = {}
    for unit, x in zip(data["unit"], data["x"]):
        if x is not None and x < 60:
            in_scope[unit] = in_scope.get(unit, 0) + 1
    assert shift == 2
    assert groups[()].rows == sum(min(2, rows) for rows in in_scope.values())


@pytest.mark.postgres
@pytest.mark.parametrize("sigmas", [6, 0, -50])
def test_bracketed_percentiles_are_exact_or_fall_back(backend_url, monkeypatch, sigmas):
    """The pilot bracket (forced here on a small table by sampling all of it) gives the
    exact order statistics; a bracket that misses the ranks (negative margin) falls back
    to the backend's percentile, with the same result."""
    from proxy.pushdown import ungrouped

    monkeypatch.setattr(ungrouped, "PILOT_PERCENT", 100)
    monkeypatch.setattr(ungrouped, "PILOT_MIN_VALUES", 1)
    monkeypatch.setattr(ungrouped, "BRACKET_SIGMAS", sigmas)
    outcomes = []
    monkeypatch.setattr(ungrouped, "_bracketed", _recording(ungrouped._bracketed, outcomes))
    data = table_rows(seed=13, units=80)
    load_table(backend_url, "t", data, TYPES)
    sql = ("SELECT MEDIAN(x), PERCENTILE_DISC(0.95) WITHIN GROUP (ORDER BY y) FROM t "
           "WHERE unit < 70")
    plan, shift, groups = _statistics(backend_url, sql)
    needs = {n.column: n for n in column_needs(plan, shift)}
    scope = [(x, y) for unit, x, y in zip(data["unit"], data["x"], data["y"]) if unit < 70]
    xs = sorted(min(max(x, 0.0), 100.0) for x, _ in scope if x is not None)
    ys = sorted(float(min(max(y, -50), 50)) for _, y in scope if y is not None)
    assert groups[()].columns["x"].values == order_values(xs, needs["x"].ranks)
    assert groups[()].columns["y"].values == order_values(ys, needs["y"].ranks)
    assert outcomes == [sigmas >= 0] * 2  # bracketed both columns, or fell back for both


@pytest.mark.postgres
@pytest.mark.parametrize("sigmas", [6, 0, -50])
def test_a_run_of_ranks_in_the_middle_is_bracketed_or_falls_back(backend_url, monkeypatch,
                                                                 sigmas):
    """The exponential mechanism's runs of ranks in the middle of the scope
    (``order_statistics``): bracketed by the pilot (forced on a small table by sampling
    all of it) they are the exact ranks, without the backend's percentile over the whole
    scope; a bracket that misses them (negative margin) falls back to that percentile,
    with the same result. Runs at either end are top-k reads."""
    from proxy.pushdown import ungrouped, window

    monkeypatch.setattr(ungrouped, "PILOT_PERCENT", 100)
    monkeypatch.setattr(ungrouped, "PILOT_MIN_VALUES", 1)
    monkeypatch.setattr(ungrouped, "BRACKET_SIGMAS", sigmas)
    data = table_rows(seed=13, units=80)
    load_table(backend_url, "t", data, TYPES)
    plan = analyze(parse_statements("SELECT MEDIAN(x) FROM t WHERE unit < 70")[0], RULES,
                   Settings())
    xs = sorted(min(max(x, 0.0), 100.0) for unit, x in zip(data["unit"], data["x"])
                if unit < 70 and x is not None)
    n, sent = len(xs), []
    runs = [(2, n - 1), (n // 3, n // 2), (n // 2, n // 2), (n - 5, n - 1), (1, 4), (n - 3, n)]
    with _engine(backend_url) as engine, engine.backend.transaction(snapshot=True) as tx:
        def execute(sql):
            sent.append(sql)
            return tx.execute(sql)

        fetch = window.order_statistics(plan, ColumnNeeds("x", lower=0.0, upper=100.0),
                                        engine.backend.dialect, None, execute, n)
        assert [fetch(first, last) for first, last in runs] == [
            xs[first - 1: last] for first, last in runs]
    whole = [sql for sql in sent if "PERCENTILE" in sql.upper() or "QUANTILE" in sql.upper()]
    sampled = [sql for sql in whole if "SAMPLE" in sql.upper()]
    assert len(sampled) == 4  # each run in the middle asked the pilot first
    assert len(whole) - len(sampled) == (0 if sigmas >= 0 else 4)


def test_a_widened_read_answers_the_wider_windows_and_stays_bounded():
    """``window.widened``: every window comes back as the ranks asked; the first read is
    16 times as wide (within 1..n), so the ×4 widenings of a draw read nothing more; a
    read holds at most WIDE_VALUES values unless the window asked is wider."""
    from proxy.pushdown import window

    n, reads = 10**7, []

    def fetch(first, last):
        reads.append((first, last))
        return [float(rank) for rank in range(first, last + 1)]

    wide = window.widened(fetch, n)
    rank, reach = n // 2, 400
    for grown in (reach, 4 * reach, 16 * reach):
        assert wide(rank - grown, rank + grown) == [
            float(r) for r in range(rank - grown, rank + grown + 1)]
    assert len(reads) == 1 and reads[0][0] <= rank - 16 * reach <= rank + 16 * reach <= reads[0][1]
    top = window.widened(fetch, n)
    assert top(n - 1000, n) == [float(r) for r in range(n - 1000, n + 1)]
    assert reads[-1] == (n - 1000 - 15 * 1001, n)  # at the top: all of it below
    huge = window.widened(fetch, n)
    assert len(huge(rank - 100_000, rank + 100_000)) == 200_001
    assert reads[-1][1] - reads[-1][0] + 1 <= window.WIDE_VALUES
    assert len(huge(rank - 300_000, rank + 300_000)) == 600_001  # wider: as asked
    assert reads[-1] == (rank - 300_000, rank + 300_000)


def _recording(function, outcomes):
    def recorded(*args, **kwargs):
        outcomes.append(function(*args, **kwargs))
        return outcomes[-1]
    return recorded


@pytest.mark.postgres
@pytest.mark.parametrize("seed", range(5))
def test_random_queries_match_a_direct_computation(backend_url, monkeypatch, seed):
    """Random data (ties, NULLs, values outside the domain) and random queries: every
    order statistic, count and sum the engine computes equals the direct computation,
    with and without GROUP BY, with the pilot bracket forced on or off."""
    from proxy.pushdown import ungrouped

    rng = random.Random(seed)
    monkeypatch.setattr(ungrouped, "PILOT_PERCENT", 100)
    monkeypatch.setattr(ungrouped, "PILOT_MIN_VALUES", rng.choice([1, 10**9]))
    data = table_rows(seed=100 + seed, units=rng.randint(5, 60))
    load_table(backend_url, "t", data, TYPES)
    rows = list(zip(data["unit"], data["grp"], data["x"], data["y"]))
    asked = []
    with _engine(backend_url) as engine:  # one engine asked the four queries
        for _ in range(4):
            p = rng.choice(["0", "0.1", "0.5", "0.77", "1"])
            limit = rng.randint(-60, 60)
            grouped = rng.random() < 0.5
            sql = (f"SELECT {'grp, ' if grouped else ''}COUNT(*), "
                   f"PERCENTILE_DISC({p}) WITHIN GROUP (ORDER BY x), MAX(y), MIN(x), SUM(y) "
                   f"FROM t WHERE y < {limit} OR x IS NULL{' GROUP BY grp' if grouped else ''}")
            asked.append((limit, grouped, _statistics(engine, sql)))
    for limit, grouped, (plan, shift, groups) in asked:
        needs = {n.column: n for n in column_needs(plan, shift)}
        for key in (("a",), ("b",), ("c",)) if grouped else ((),):
            scope = [(x, y) for _, g, x, y in rows
                     if (y is not None and y < limit or x is None) and (not key or g == key[0])]
            xs = sorted(min(max(x, 0.0), 100.0) for x, _ in scope if x is not None)
            ys = sorted(float(min(max(y, -50), 50)) for _, y in scope if y is not None)
            stats = groups.get(key)
            if stats is None:  # a declared key without rows in scope
                assert not scope
                continue
            assert stats.rows == len(scope)
            assert stats.columns["x"].values == order_values(xs, needs["x"].ranks)
            assert stats.columns["y"].values == order_values(ys, needs["y"].ranks)
            assert stats.columns["y"].total == pytest.approx(sum(ys))


@pytest.mark.parametrize("force_fallback", [False, True])
def test_duckdb_group_statistics_from_list_aggregates(duckdb_url, monkeypatch, force_fallback):
    """DuckDB answers GROUP BY ranks with list aggregates (no window); when they do not
    reach a rank the window statement answers instead, with the same numbers."""
    from proxy import pushdown
    from proxy.pushdown import grouped_lists

    if force_fallback:
        monkeypatch.setattr(grouped_lists, "_value_at", lambda *args: False)
    else:
        monkeypatch.setattr(pushdown, "statistics_query", _must_not_run)
    data = table_rows(seed=21, units=70)
    load_table(duckdb_url, "t", data, TYPES)
    rows = list(zip(data["grp"], data["x"], data["y"]))
    sql = ("SELECT grp, MEDIAN(x), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY y), "
           "MAX(y), MIN(x), SUM(x), COUNT(y) FROM t WHERE y > -40 OR y IS NULL GROUP BY grp")
    plan, shift, groups = _statistics(duckdb_url, sql)
    needs = {n.column: n for n in column_needs(plan, shift)}
    for key in ("a", "b", "c"):
        scope = [(x, y) for g, x, y in rows if g == key and (y is None or y > -40)]
        xs = sorted(min(max(x, 0.0), 100.0) for x, _ in scope if x is not None)
        ys = sorted(float(min(max(y, -50), 50)) for _, y in scope if y is not None)
        stats = groups[(key,)]
        assert stats.rows == len(scope)
        assert stats.columns["x"].values == order_values(xs, needs["x"].ranks)
        assert stats.columns["y"].values == order_values(ys, needs["y"].ranks)
        assert stats.columns["x"].total == pytest.approx(sum(xs))
        assert stats.columns["y"].n == len(ys)


@pytest.mark.parametrize("sql", QUERIES)
def test_the_declared_capabilities_choose_the_sql_not_the_numbers(duckdb_url, sql):
    """Pushdown reads what a backend declares, not which backend it is: on DuckDB, its
    list aggregates or the window under GROUP BY, the projected scope or the table read
    directly in the first pass, each as its capabilities say, read the same statistics."""
    load_table(duckdb_url, "t", table_rows(seed=11), TYPES)
    plan = analyze(parse_statements(sql)[0], RULES, Settings())
    needs = column_needs(plan, 3)
    backend = open_backend(duckdb_url)
    statistics, sent = {}, {}
    try:
        for grouped, projected in itertools.product(
                (GroupedRanks.LISTS, GroupedRanks.WINDOW), (True, False)):
            declared = replace(backend.capabilities, grouped_ranks=grouped,
                               projected_scope=projected)
            sent[grouped, projected] = statements = []

            def execute(statement: str, statements=statements) -> list[tuple]:
                statements.append(statement)
                return backend.query(statement)

            statistics[grouped, projected] = compute_statistics(plan, needs, declared, None,
                                                                execute)
    finally:
        backend.close()
    first = statistics[GroupedRanks.LISTS, True]
    assert all(groups == first for groups in statistics.values())
    for (grouped, projected), statements in sent.items():
        if plan.group_by:  # the window numbers the rows; the lists do not
            assert ("ROW_NUMBER" in statements[0]) == (grouped is GroupedRanks.WINDOW)
        else:  # the first pass counts the projected scope's c0, or the table's own values
            assert projected == any("COUNT(c0)" in statement for statement in statements)


@pytest.mark.postgres
@pytest.mark.parametrize("seed", range(3))
def test_postgres_group_ranks_from_its_ordered_set_aggregate(fresh_postgres, monkeypatch, seed):
    """PostgreSQL answers GROUP BY ranks with PERCENTILE_DISC over per-group fractions
    (a counting pass, then one sort per group), never the window statement; every rank
    equals the direct computation, through ties, NULLs, groups of one value or none,
    and ranks beyond the ends (an extreme's offsets on a tiny group)."""
    from proxy import pushdown

    monkeypatch.setattr(pushdown, "statistics_query", _must_not_run)
    rng = random.Random(seed)
    data = table_rows(seed=300 + seed, units=rng.randint(3, 40))
    data["unit"] += [900, 901]  # group b: one more value; c: a row whose values are NULL
    data["grp"] += ["b", "c"]
    data["x"] += [rng.choice([0.0, 100.0, 50.0]), None]
    data["y"] += [None, None]
    load_table(fresh_postgres, "t", data, TYPES)
    rows = list(zip(data["grp"], data["x"], data["y"]))
    p = rng.choice(["0", "0.25", "0.5", "0.9", "1"])
    limit = rng.randint(-60, 60)
    sql = (f"SELECT grp, PERCENTILE_DISC({p}) WITHIN GROUP (ORDER BY x), MEDIAN(y), MAX(y), "
           f"MIN(x), COUNT(*) FROM t WHERE y < {limit} OR y IS NULL GROUP BY grp")
    plan, shift, groups = _statistics(fresh_postgres, sql)
    needs = {n.column: n for n in column_needs(plan, shift)}
    for key in ("a", "b", "c"):
        scope = [(x, y) for g, x, y in rows if g == key and (y is None or y < limit)]
        xs = sorted(min(max(x, 0.0), 100.0) for x, _ in scope if x is not None)
        ys = sorted(float(min(max(y, -50), 50)) for _, y in scope if y is not None)
        stats = groups.get((key,))
        if stats is None:
            assert not scope
            continue
        assert stats.rows == len(scope)
        assert stats.columns["x"].n == len(xs)
        assert stats.columns["x"].values == order_values(xs, needs["x"].ranks)
        assert stats.columns["y"].values == order_values(ys, needs["y"].ranks)


@pytest.mark.postgres
def test_drawn_windows_are_read_on_postgres_as_on_duckdb(fresh_postgres, tmp_path,
                                                         monkeypatch):
    """PostgreSQL reads an ungrouped drawn MAX or MIN's first windows (thousands of
    values) in the statistics' first pass, beyond a pilot's threshold
    (``extremes_in_pass``), and under GROUP BY each group's from a histogram and the
    brackets that hold them (``bucketed_ranks``), not by a ROW_NUMBER over every row:
    the same values as DuckDB's, hence the same draws from the same random source,
    through ties, NULL, NaN, ±inf and values beyond the domain, a NULL key and a key the
    rules do not list."""
    from proxy.pushdown import window
    from tests.privacy.laws import SeededSource

    monkeypatch.setattr(window, "numbered", _must_not_run)
    duckdb_url = f"duckdb:///{tmp_path / 'deep.duckdb'}"
    load_deep(fresh_postgres)
    load_deep(duckdb_url)
    backends = open_backend(fresh_postgres), open_backend(duckdb_url)
    try:
        for sql in ("SELECT MAX(x) FROM deep", "SELECT MIN(x) FROM deep WHERE a < 8",
                    *DEEP_GROUPED):
            plan = analyze(parse_statements(sql)[0], DEEP_RULES, Settings())
            engines = [Engine(DEEP_RULES, backend, rng=SeededSource(7)) for backend in backends]
            (_, on_postgres, _), (_, on_duckdb, _) = (e.statistics(plan) for e in engines)
            assert on_postgres == on_duckdb, sql
            if "GROUP BY" not in sql:
                assert len(on_postgres[()].columns["x"].values) > 1000  # the deep windows
            assert all(group.instance for group in on_postgres.values())  # drawn from
            for engine in engines:
                engine.ledger.close()
    finally:
        for backend in backends:
            backend.close()


def _must_not_run(*args, **kwargs):
    raise AssertionError("the window statement was used")


HUGE_RULES = parse_rules("""
[defaults]
noise_scale = "local"  # raw iDP: its SUMs released from the statistics pass's exact sums
[analysts.ann]
budget = 100
[tables.huge]
[tables.huge.columns]
g = { type = "int", keys = [0, 1] }
w = { type = "float", domain = [-1e15, 1e15] }
d = { type = "float", domain = [-9e12, 9e12] }
""")
# Rows of ``huge``: DuckDB's over several of its row groups (122,880 rows each), whose
# partial sums it combines; PostgreSQL's fewer (its sums are NUMERIC however they are
# combined, and its clipping-bound statement over 300,000 rows took 10 s of the suite)
HUGE_ROWS = {"duckdb": 300_000, "postgres": 30_000}


@pytest.mark.postgres
@pytest.mark.parametrize("sql", ["SELECT SUM(w), SUM(d) FROM huge",
                                 "SELECT g, SUM(w), AVG(d) FROM huge GROUP BY g"])
def test_sums_at_the_largest_values_do_not_overflow(backend_url, sql):
    """The exact sum's integers (proxy.pushdown.scope.exact_sum) at the extremes: w
    has the widest domain allowed (±10¹⁵, the split sum), d the widest domain summed as one BIGINT per
    value (±9·10¹²); most rows at the upper end, one at the lower, one fraction of 10⁻⁶,
    far beyond a BIGINT in total. Both engines give the exact sum."""
    backend = open_backend(backend_url)
    rows = HUGE_ROWS[backend.dialect]
    series = ("range(1, {n} + 1) AS r(i)" if backend.dialect == "duckdb"
              else "generate_series(1, {n}) AS r(i)").format(n=rows)
    with backend.transaction() as tx:
        tx.execute(
            "CREATE TABLE huge AS SELECT CAST(i % 2 AS INTEGER) AS g, "
            "CAST(CASE WHEN i = 1 THEN -1e15 WHEN i = 2 THEN 0.000001 ELSE 1e15 END AS DOUBLE PRECISION) AS w, "
            "CAST(CASE WHEN i = 1 THEN -9e12 WHEN i = 2 THEN 0.000001 ELSE 9e12 END AS DOUBLE PRECISION) AS d "
            f"FROM {series}")
    try:
        plan = analyze(parse_statements(sql)[0], HUGE_RULES, Settings())
        _, groups, _ = Engine(HUGE_RULES, backend).statistics(plan)
    finally:
        backend.close()
    tiny = Decimal("0.000001")
    for cap, column in ((Decimal(10**15), "w"), (Decimal(9 * 10**12), "d")):
        if plan.group_by:  # i = 1 (the lower end) in group 1, i = 2 (the fraction) in 0
            expected = {(0,): tiny + cap * (rows // 2 - 1),
                        (1,): -cap + cap * (rows // 2 - 1)}
        else:
            expected = {(): -cap + tiny + cap * (rows - 2)}
        assert cap * rows * 10**6 > 2**63  # the scaled total is beyond a BIGINT
        for key, total in expected.items():
            assert groups[key].columns[column].total == float(total), (column, key)


@pytest.mark.postgres
@pytest.mark.parametrize("checked", [False, True], ids=["kth", "checked"])
@pytest.mark.parametrize("seed", range(3))
def test_extremes_ride_in_the_first_pass_whatever_the_pilot(backend_url, monkeypatch, seed,
                                                           checked):
    """SUM's extremes come from the first pass, beyond a threshold from the pilot
    (proxy.pushdown.ungrouped._pilot_thresholds): any sample of the scope gives the
    exact ranks 1–3 and n−2..n, ties at the threshold and at the domain's ends included.
    The pilot is replaced here by the k-th value of a random subset of the scope (what
    a block sample can be), and no top-k scan runs. A checked threshold (a deep
    window's, nearer the end than the k-th: ``_sample_rank``) is any value of the
    subset: the first pass counts the values at or beyond it, and where fewer than k
    are, the top-k scan reads them; exact either way."""
    from proxy.pushdown import ungrouped

    rng = random.Random(seed)
    units = rng.randint(20, 120)  # one row per unit: s = 1, so SUM needs the extremes
    special = [None, math.nan, math.inf, -math.inf, 1e308, -1e300, 100.0, 0.0]
    data = {"unit": list(range(units)), "grp": ["a"] * units,
            "x": [rng.choice([*special, rng.random() * 100]) for _ in range(units)],
            "y": [rng.choice([None, -70, -50, 50, 60, rng.randint(-50, 50)]) for _ in range(units)]}
    load_table(backend_url, "t", data, TYPES)
    ys = sorted(float(min(max(y, -50), 50)) for y in data["y"] if y is not None)
    xs = sorted(min(max(x, 0.0), 100.0) for x in data["x"] if x is not None and not math.isnan(x))
    values = {"y": ys, "x": xs}
    short = []  # checked thresholds with fewer than k values at or beyond them

    def pilot(plan, needs, dialect, execute):
        thresholds = {}
        for index, need in enumerate(needs):
            sample = [v for v in values[need.column] if rng.random() < 0.3]
            sample = sample if len(sample) >= 3 else values[need.column]
            for anchor, ordered in ((TOP, sorted(sample, reverse=True)), (BOTTOM, sorted(sample))):
                k = max(r.offset for r in need.ranks if r.anchor == anchor) + 1
                if checked:
                    t = rng.choice(ordered)
                    thresholds[index, anchor] = (t, True)
                    reached = [v for v in values[need.column] if (v >= t if anchor == TOP
                                                                  else v <= t)]
                    short.extend([1] if len(reached) < k else [])
                elif len(ordered) >= k:
                    thresholds[index, anchor] = (ordered[rng.randrange(k - 1, len(ordered))
                                                         if rng.random() < 0.3 else k - 1],
                                                 False)
        return thresholds

    scans = []

    def extremes(*args):
        scans.append(args)
        return real_extremes(*args)

    real_extremes = ungrouped._extremes
    monkeypatch.setattr(ungrouped, "_pilot_thresholds", pilot)
    monkeypatch.setattr(ungrouped, "_extremes", extremes)
    plan, shift, groups = _statistics(backend_url, "SELECT SUM(y), AVG(x) FROM t")
    assert shift == 1
    for need in column_needs(plan, shift):
        assert len(need.ranks) == 6
        stats = groups[()].columns[need.column]
        assert stats.values == order_values(values[need.column], need.ranks)
        assert stats.total == pytest.approx(sum(values[need.column]))
    assert bool(scans) >= bool(short)  # a short threshold's extremes: the top-k scan
    if not checked:
        assert not scans


def test_a_deep_extreme_is_checked_against_the_pilot_and_a_shallow_one_is_not():
    """The pilot's rank for k extremes: the k-th for a few (exact whatever the sample),
    about 1 % of k plus six standard errors, checked in the first pass, for many."""
    from proxy.pushdown.ungrouped import _sample_rank

    assert [_sample_rank(k) for k in (1, 2, 3)] == [(1, False), (2, False), (3, False)]
    rank, checked = _sample_rank(9712)
    assert checked and 97 < rank < 97 + 7 * math.sqrt(97) + 2
