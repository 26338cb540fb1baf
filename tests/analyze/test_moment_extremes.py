"""MAX and MIN of a date or timestamp column (Metabase's Earliest and Latest; issue 33):
the exponential mechanism draws a whole number of seconds (days) from the declared
domain's end the answer is near, and the answer is that end moved by it
(``expressions.moment_column``, ``guards.moment_number``).

What is checked: the number each backend computes is Python's for every moment — NULL,
±infinity, years 1 and 9999, fractions of a second, leap days, moments beyond the
domain (clamped) — and lies in the derived domain, so the mechanism's proof over a
declared domain applies unchanged (docs/privacy.md §5.3); the answer, noise off, is
PostgreSQL's own MAX and MIN of the clamped moments cut to a whole second (a date's
to a day), as a timestamp or date, on both backends and over the wire; a column without
a declared domain is refused for free. (Metabase's statement over the wire:
tests/analyze/test_time_fields.py, beside the demo's other time statements.)"""

from __future__ import annotations

import datetime as dt

import pytest
from sqlglot import exp

from proxy.analyze.expressions import moment_column
from proxy.rules import parse_rules
from proxy.session import Session
from tests.databases import postgres_truth
from tests.factories import Table, bucket_offset, open_engine
from tests.probes import refused_for_free

pytestmark = pytest.mark.postgres

RULES_TEXT = """
[defaults]
model = "idp"
epsilon_per_query = 1
budget_per_analyst = 100000
answer_cache = false

[analysts.alice]

[tables.visits]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.visits.columns]
person_id  = { type = "int" }
department = { type = "text", keys = ["a", "b"] }
at         = { type = "timestamp", domain = [2023-01-01T00:00:00.5, 2024-12-31T23:59:59.75] }
day        = { type = "date", domain = ["2023-01-01", "2024-12-31"] }
free       = { type = "timestamp" }
"""
RULES = parse_rules(RULES_TEXT, "moments.toml")
TYPES = {"person_id": "INTEGER", "department": "TEXT", "at": "TIMESTAMP", "day": "DATE",
         "free": "TIMESTAMP"}
_T = dt.datetime
FIRST, LAST = RULES.tables["visits"].columns["at"].time_domain
# the extremes each group's draw lands on, noise off: held by more rows than the rank the
# draw aims at (a tenth of the scope at most), so the value at that rank is the extreme
TOP = {"a": _T(2024, 2, 29, 23, 59, 59, 999999), "b": _T(2024, 12, 31, 23, 59, 59, 500000)}
BOTTOM = {"a": _T(2023, 3, 1, 0, 0, 0, 1), "b": _T(2023, 1, 1, 0, 0, 0, 250000)}
EDGES = [None, _T(1, 1, 1), _T(9999, 12, 31, 23, 59, 59, 999999), _T(2022, 12, 31, 23, 59, 59),
         _T(2025, 1, 1, 0, 0, 1), _T(2024, 2, 29, 12), _T(2023, 12, 31, 23, 59, 59, 999999)]
COUNT = 400


def _moment(i: int) -> _T | None:
    group = "ab"[i % 2]
    if i % 10 in (0, 1):
        return TOP[group]
    if i % 10 in (2, 3):
        return BOTTOM[group]
    if i % 10 == 5:  # in b, whose extremes are the domain's ends (the edges clamped)
        return EDGES[i // 10 % len(EDGES)]
    return _T(2023, 3, 2) + dt.timedelta(hours=i * 20, seconds=i * 0.37)


ROWS = {
    "person_id": list(range(1, COUNT + 1)),
    "department": ["ab"[i % 2] for i in range(COUNT)],
    "at": [_moment(i) for i in range(COUNT)],
    "day": [None if (m := _moment(i)) is None else m.date() for i in range(COUNT)],
    "free": [None] * COUNT,
}
# (PostgreSQL's least and greatest skip a NULL: NULL is kept by the CASE)
CLAMPED = ("CASE WHEN {c} IS NOT NULL THEN least(greatest({c}, {first}), {last}) END")


# in b, beside its extremes: ±infinity clamp to the domain's ends
INFINITIES = [f"UPDATE visits SET \"at\" = '{text}', day = '{text}' WHERE person_id = {unit}"
              for text, unit in (("infinity", 2), ("-infinity", 4))]


def _clamped(column: str) -> str:
    if column == "day":
        return CLAMPED.format(c="day", first="DATE '2023-01-01'", last="DATE '2024-12-31'")
    return CLAMPED.format(c="at", first=f"TIMESTAMP '{FIRST}'", last=f"TIMESTAMP '{LAST}'")


@pytest.fixture(scope="module")
def engine(module_backend_url):
    with open_engine(module_backend_url, RULES, {"visits": Table(ROWS, TYPES)},
                     then=tuple(INFINITIES)) as made:
        yield made


@pytest.fixture(scope="module")
def truth(postgres_url):
    with postgres_truth(postgres_url, {"visits": Table(ROWS, TYPES)},
                        tuple(INFINITIES)) as answer:
        yield answer


def test_each_backend_computes_python_s_number_inside_the_derived_domain(engine, truth):
    """Every row's number (what the draw ranks) is the clamped moment's whole seconds
    (days) from the origin, as Python counts them (PostgreSQL's own difference of the
    clamped moment cut to a whole second and the origin), inside the derived domain."""
    table = engine.rules.tables["visits"]
    for name, largest in (("at", True), ("at", False), ("day", True), ("day", False)):
        column = moment_column(exp.column(name), table, lambda node: node.name, largest)
        origin = column.moment.origin
        sql = column.expression.sql(dialect=engine.backend.dialect)
        got = sorted(engine.backend.query(f"SELECT person_id, {sql} FROM visits"),
                     key=lambda row: row[0])
        unit = "second" if name == "at" else "day"
        wanted = truth(f"SELECT person_id, EXTRACT(EPOCH FROM date_trunc('{unit}', "
                       f"CAST({_clamped(name)} AS timestamp)) - TIMESTAMP '{origin}') "
                       f"/ {86400 if name == 'day' else 1} FROM visits ORDER BY 1")
        assert [(p, None if v is None else float(v)) for p, v in got] == [
            (p, None if v is None else float(v)) for p, v in wanted], (name, largest)
        values = [v for _, v in got if v is not None]
        assert column.lower <= min(values) and max(values) <= column.upper
        assert (column.lower, column.upper)[0 if largest else 1] != 0
        assert (column.upper if largest else column.lower) == 0  # dense at its own end


@pytest.mark.usefixtures("no_noise")
def test_the_answer_is_postgresql_s_extreme_of_the_clamped_moments(engine, truth):
    sql = ("SELECT department, MAX(at), MIN(at), MAX(day) AS last_day, MIN(day) "
           "FROM visits GROUP BY 1 ORDER BY 1")
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    wanted = truth(f"SELECT department, date_trunc('second', MAX({_clamped('at')})), "
                   f"date_trunc('second', MIN({_clamped('at')})), MAX({_clamped('day')}), "
                   f"MIN({_clamped('day')}) FROM visits GROUP BY 1 ORDER BY 1")
    assert answer.rows == [tuple(row) for row in wanted]
    assert answer.rows[0][1:3] == (_T(2024, 2, 29, 23, 59, 59), _T(2023, 3, 1))
    assert answer.rows[1][1:3] == (_T(2024, 12, 31, 23, 59, 59), _T(2023, 1, 1))
    assert answer.columns == ["department", "max", "min", "last_day", "min"]
    assert answer.kinds == ["text", "timestamp", "timestamp", "date", "date"]
    assert all(isinstance(row[3], dt.date) and not isinstance(row[3], dt.datetime)
               for row in answer.rows)
    assert answer.privacy["ci95"] == {}
    assert "of their distance from 2024-12-31 23:59:59, every second near it" in answer.notice


@pytest.mark.usefixtures("no_noise")
def test_the_answer_filters_and_sorts_as_a_moment(engine):
    """HAVING and ORDER BY read the released moment as a moment."""
    sql = ("SELECT department, MIN(at) AS first FROM visits GROUP BY 1 "
           "HAVING MIN(at) > TIMESTAMP '2023-02-01' ORDER BY 2 DESC")
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    assert answer.rows == [("a", BOTTOM["a"].replace(microsecond=0))]
    sql = "SELECT department, MIN(day) AS first FROM visits GROUP BY 1 ORDER BY 2 DESC"
    (answer,) = list(Session.open(engine, "alice").execute(sql))
    assert answer.rows == [("a", BOTTOM["a"].date()), ("b", FIRST.date())]


@pytest.mark.usefixtures("no_noise")
def test_the_where_s_range_is_the_window_and_a_kept_plan_reads_it_again(engine, truth):
    """``WHERE at >= '2024-03-01'`` narrows the window the number is counted in (its
    candidates dense at the answer's end of it, not at the domain's); a plan kept for
    one range is not bound to another (the shape cache reads the window again): each
    answer's note names its own origin, each answer PostgreSQL's extreme of the rows in
    scope."""
    session = Session.open(engine, "alice")
    for first in ("2023-06-01", "2023-08-01", "2023-06-01"):
        where = (f"at >= '{first}' AND at < '2023-12-01' AND day <= '2023-11-30' AND "
                 "department = 'a'")
        (answer,) = list(session.execute(f"SELECT MIN(at), MAX(day) FROM visits WHERE {where}"))
        assert f"of their distance from {first} 00:00:00, every second" in answer.notice
        assert "of their distance from 2023-11-30 00:00:00, every day" in answer.notice
        (wanted,) = truth(f"SELECT date_trunc('second', MIN(at)), MAX(day) FROM visits "
                          f"WHERE {where}")
        assert wanted[0] <= answer.rows[0][0] <= _T(2023, 12, 1)
        assert dt.date.fromisoformat(first) <= answer.rows[0][1] <= wanted[1]
    table = engine.rules.tables["visits"]
    where = exp.maybe_parse("at > '2024-06-30 12:00:00.5' AND at <= '2024-07-31'")
    column = moment_column(exp.column("at"), table, lambda node: node.name, False, where)
    assert column.moment.window == (_T(2024, 6, 30, 12, 0, 0, 500000), _T(2024, 7, 31))
    assert (column.moment.origin, column.lower, column.upper) == (
        _T(2024, 6, 30, 12), 0, 31 * 86400 - 12 * 3600)
    empty = exp.maybe_parse("at > '2024-07-31' AND at < '2024-06-30'")
    column = moment_column(exp.column("at"), table, lambda node: node.name, True, empty)
    assert (column.lower, column.upper) == (0, 0)


@pytest.mark.parametrize("sql,sqlstate,fragment", [
    ("SELECT MAX(free) FROM visits", "0A000", "needs a declared domain [first, last] of free"),
    # DuckDB casts the date to compare it, which fails for one beyond year 294276
    ("SELECT COUNT(*) FROM visits WHERE day = at", "0A000", "are of different types"),
    # PostgreSQL has no avg(timestamp): its 42883
    ("SELECT AVG(at) FROM visits", "42883", "needs a numeric column"),
])
def test_a_moment_without_a_domain_or_averaged_is_refused_for_free(engine, sql, sqlstate,
                                                                  fragment):
    refused_for_free(engine, sql, sqlstate, fragment)


@pytest.mark.parametrize("sql", [
    "SELECT MAX(day), MIN(day) FROM visits",
    "SELECT DATE_TRUNC('month', day) AS m, COUNT(*) FROM visits GROUP BY 1",
    "SELECT EXTRACT(YEAR FROM day) AS y, COUNT(*) FROM visits GROUP BY 1",
    "SELECT COUNT(*) FROM visits WHERE EXTRACT(MONTH FROM day) = 3",
    "SELECT AVG(EXTRACT(DOY FROM day)) FROM visits",
    "SELECT COUNT(*) FROM visits WHERE day >= '2024-01-01'",
])
def test_a_date_beyond_the_last_timestamp_is_clamped_not_a_failure(backend_url, sql):
    """PostgreSQL's dates run to year 5874897, its timestamps to 294276: a date column's
    moment is compared with the domain's days before any cast, so one person's far date
    (or ±infinity) neither fails a charged statement nor tells itself by failing (the
    review found MAX(day), date_trunc and extract of it failing after the debit)."""
    far = ("UPDATE visits SET day = '300000-01-01' WHERE person_id = 3",
           "UPDATE visits SET day = '-infinity' WHERE person_id = 5")
    with open_engine(backend_url, RULES, {"visits": Table(ROWS, TYPES)}, then=far) as made:
        (answer,) = list(Session.open(made, "alice").execute(sql))
    assert answer.rows


@pytest.mark.usefixtures("no_noise")
def test_intervals_beside_a_moment_of_a_number_s_name(engine):
    """With ``idp.intervals`` on, a moment named as a released number (``MAX(at) AS t,
    COUNT(*) AS t``; ``MIN(at), MIN(…)``) shows no interval, the number its own; the
    statement was charged, then failed converting the moment to a float (the second
    review's F2)."""
    session = Session.open(engine, "alice")
    list(session.execute("SET idp.intervals = on"))
    (answer,) = list(session.execute("SELECT MAX(at) AS t, COUNT(*) AS t FROM visits"))
    assert answer.columns == ["t", "t", "t_ci95_low", "t_ci95_high"]
    moment, count, low, high = answer.rows[0]
    assert isinstance(moment, dt.datetime) and low == count == high  # no noise: ±0


def test_a_moment_grouped_by_its_own_bucket_stays_in_that_bucket(engine):
    """``GROUP BY date_trunc('quarter', at)`` beside ``MIN(at)``/``MAX(at)``: every row
    of a group lies in its quarter, so its extremes do, and the answer says so whatever
    the draw (post-processing of the released moment and its public key); at ε 0.01 the
    draw over the whole window lands in another quarter in most groups (it did before)."""
    session = Session.open(engine, "alice")
    list(session.execute("SET idp.epsilon = 0.01"))
    for column, cast in (("at", lambda moment: moment), ("day", lambda moment: moment.date())):
        sql = (f"SELECT date_trunc('quarter', {column}) AS q, MIN({column}), "
               f"MAX({column}) FROM visits GROUP BY 1 ORDER BY 1")
        (answer,) = list(session.execute(sql))  # 16 draws, most of them beyond a quarter
        assert len(answer.rows) == 8
        for start, low, high in answer.rows:
            start = start.replace(tzinfo=None)  # a date's bucket: a timestamptz at UTC
            end = dt.datetime(start.year + start.month // 10, (start.month + 2) % 12 + 1, 1)
            assert cast(start) <= low < cast(end), (column, start)
            assert cast(start) <= high < cast(end), (column, start)


def test_a_moment_grouped_by_its_own_bucket_stays_within_the_where(engine):
    """The bucket and the window both hold every row of a group: a draw counted from the
    bucket's end (a month's, a year's) is kept within the WHERE's range too, where it
    came back beyond the WHERE (the review of 2026-11-29: a MAX in December under
    ``at < '2024-02-10'``)."""
    session = Session.open(engine, "alice")
    list(session.execute("SET idp.epsilon = 0.01"))
    low, high = dt.datetime(2023, 1, 15), dt.datetime(2023, 2, 10)
    for unit in ("month", "year"):
        sql = (f"SELECT date_trunc('{unit}', at) AS b, MIN(at), MAX(at) FROM visits "
               "WHERE at >= '2023-01-15' AND at < '2023-02-10' GROUP BY 1")
        (answer,) = list(session.execute(sql))
        assert answer.rows
        for _, least, most in answer.rows:
            assert low <= least < high and low <= most < high, (unit, least, most)


def test_each_backend_counts_a_moment_in_its_own_bucket_as_python(engine, truth):
    """Grouped by ``date_trunc(unit, col)`` the number is the clamped moment's whole
    seconds (days) from its own bucket's start less the anchor (``moment_offset``),
    inside the derived domain, for every row (NULL, ±infinity, leap days, moments
    beyond the domain clamped) on each backend."""
    from proxy.analyze.expressions import BUCKET_WIDTHS
    table = engine.rules.tables["visits"]
    clamped = {name: [None if v is None else v for v in (
        row[0] for row in truth(f"SELECT {_clamped(name)} FROM visits ORDER BY person_id"))]
        for name in ("at", "day")}
    for name in ("at", "day"):
        for bucket in BUCKET_WIDTHS:
            for largest in (True, False):
                column = moment_column(exp.column(name), table, lambda node: node.name,
                                       largest, bucket=bucket)
                sql = column.expression.sql(dialect=engine.backend.dialect)
                got = [v for _, v in sorted(engine.backend.query(
                    f"SELECT person_id, {sql} FROM visits"), key=lambda row: row[0])]
                anchor = column.moment.anchor
                wanted = [None if m is None else bucket_offset(
                    m if name == "at" else dt.datetime(m.year, m.month, m.day),
                    name == "at", bucket) - anchor for m in clamped[name]]
                assert [None if v is None else float(v) for v in got] == wanted, \
                    (name, bucket, largest)
                values = [v for v in got if v is not None]
                assert column.lower <= min(values) and max(values) <= column.upper


@pytest.mark.usefixtures("no_noise")
def test_a_moment_grouped_by_its_own_bucket_is_drawn_within_it(backend_url):
    """``MIN(at)`` and ``MAX(at)`` by month, and of the date by year: each drawn in its
    own bucket's seconds (days), dense at its start (MIN) or end (MAX), so extremes a
    minute from the month's ends come back to the second; counted from the window's
    ends (before), a month in the middle had candidates days apart."""
    months = [_T(2023, m, 1) for m in (1, 3, 5, 7, 8, 10, 12)] + [_T(2024, 3, 1)]
    rows = {name: [] for name in TYPES}
    for month in months:
        last_day = month.replace(day=31)
        for moment in [month + dt.timedelta(seconds=100)] * 40 + [
                last_day.replace(hour=23, minute=58, second=1)] * 40 + [
                month + dt.timedelta(days=10, hours=i) for i in range(40)]:
            rows["person_id"].append(len(rows["person_id"]) + 1)
            rows["department"].append("a")
            rows["at"].append(moment)
            rows["day"].append(moment.date())
            rows["free"].append(None)
    with open_engine(backend_url, RULES, {"visits": Table(rows, TYPES)}) as made:
        session = Session.open(made, "alice")
        (answer,) = list(session.execute(
            "SELECT date_trunc('month', at) AS m, MIN(at), MAX(at) FROM visits "
            "GROUP BY 1 ORDER BY 1"))
        assert [(m, lo, hi) for m, lo, hi in answer.rows if m in months] == [
            (month, month + dt.timedelta(seconds=100),
             month.replace(day=31, hour=23, minute=58, second=1)) for month in months]
        assert "of their distance from the start of each month" in answer.notice
        # beside a coarser bucket of the same column, shown from the month it counted in
        (answer,) = list(session.execute(
            "SELECT date_trunc('quarter', at) AS q, date_trunc('month', at) AS m, MIN(at) "
            "FROM visits GROUP BY 1, 2 ORDER BY 2"))
        assert [(m, lo) for q, m, lo in answer.rows if m in months
                and q == m.replace(month=(m.month - 1) // 3 * 3 + 1)] == [
            (month, month + dt.timedelta(seconds=100)) for month in months]
        (answer,) = list(session.execute(
            "SELECT date_trunc('year', day) AS y, MIN(day), MAX(day) FROM visits "
            "GROUP BY 1 ORDER BY 1"))
    assert [(lo, hi) for _, lo, hi in answer.rows] == [
        (dt.date(2023, 1, 1), dt.date(2023, 12, 31)), (dt.date(2024, 3, 1), dt.date(2024, 3, 31))]


@pytest.mark.usefixtures("no_noise")
def test_the_least_day_is_the_least_moment_s_day(engine):
    """``MIN(CAST(at AS date))`` (Metabase's earliest day, an analyst's ``MIN(at::date)``)
    is ``CAST(MIN(at) AS date)``: a day never falls as the moment rises (it was refused as
    an expression inside an aggregate); the same answer, named as PostgreSQL names it."""
    session = Session.open(engine, "alice")
    (written,) = list(session.execute(
        "SELECT MIN(CAST(at AS date)), MAX(at::date) AS last, MIN(DATE(day)) FROM visits "
        "WHERE department = 'a'"))
    (meant,) = list(session.execute(
        "SELECT CAST(MIN(at) AS date), CAST(MAX(at) AS date) AS last, CAST(MIN(day) AS date) "
        "FROM visits WHERE department = 'a'"))
    assert written.rows == meant.rows and isinstance(written.rows[0][0], dt.date)
    assert written.columns == ["min", "last", "min"]


def test_a_rows_min_and_max_of_one_moment_keep_their_order(backend_url):
    """Each is drawn from its own end of its bucket, so in a group of one moment (a
    month's every visit at 10:00 on its 2nd) the two draws crossed: MAX 07:45:02 before
    MIN 10:03:43 (the review of 2026-11-29). The row's MIN and MAX are sorted, as the
    true ones are (post-processing)."""
    moments = [_T(2024, m, 2, 10) for m in range(1, 13)]
    rows = {"person_id": list(range(1, 121)), "department": ["a"] * 120,
            "at": [moment for moment in moments for _ in range(10)],
            "day": [moment.date() for moment in moments for _ in range(10)],
            "free": [None] * 120}
    with open_engine(backend_url, RULES, {"visits": Table(rows, TYPES)}) as made:
        session = Session.open(made, "alice")
        for sql in ("SELECT date_trunc('month', at), MIN(at), MAX(at) FROM visits GROUP BY 1",
                    "SELECT date_trunc('month', at), MAX(at), MIN(at), MIN(day), MAX(day) "
                    "FROM visits WHERE person_id > 0 GROUP BY 1"):
            (answer,) = list(session.execute(sql))
            for row in answer.rows:
                low, high = (row[1], row[2]) if "MIN(at), MAX" in sql else (row[2], row[1])
                assert low <= high, answer.rows
                assert len(row) == 3 or row[3] <= row[4], answer.rows
