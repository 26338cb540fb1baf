"""A differential fuzzer of WHERE clauses and their literals (docs/privacy.md §3.6
"Totality"; tests/totality.py fuzzes the expressions inside aggregates): random
conditions — comparisons, IN, BETWEEN, LIKE, IS NULL on every column type, numbers at
the edges of a double, quoted and escaped text, LIKE patterns, dates and times in every
form the analyser reads, ``substring`` comparisons, constant arithmetic — combined with
AND, OR and NOT, over a table of adversarial rows, read in UTC and in a session
``TimeZone`` with daylight saving.

For each statement (``SELECT COUNT(*), SUM(x), MEDIAN(n) … WHERE <condition>``, and a
monthly time bucket grouped under a WHERE range), either the analysis refuses it (free,
nothing spent), or

- the engine's statistics statements run without error on the backend, and the rows in
  scope (``scope_select``, the backend's own WHERE) are exactly the rows PostgreSQL's
  evaluation of the original WHERE admits in the same session zone (the truth the proxy
  must match), and so are the per-group counts of the bucket;
- where PostgreSQL itself fails on the original statement (an invalid literal), the
  proxy refuses it too.

Used by tests/pushdown/test_where_totality.py (a fixed seed set and the findings, bounded)
and benchmarks/totality_fuzz.py ``--where`` (a longer run). Nothing is mocked.
"""

from __future__ import annotations

import datetime as dt
import math
import random

import psycopg

from proxy.errors import ProxyError, Refused
from proxy.pushdown.scope import scope_select
from proxy.rules import parse_rules
from proxy.settings import Settings
from tests import totality

TABLE = "wf"
# the expression fuzzer's defaults and analyst (every hourly bucket of the domain allowed),
# a table of every column type
RULES = parse_rules(totality.RULES_TEXT.replace(totality.TABLE, TABLE).replace(
    "[analysts.zoe]", "max_groups = 100000\n\n[analysts.zoe]").split(f"[tables.{TABLE}.columns]")[0]
    + f"""[tables.{TABLE}.columns]
id = {{ type = "int" }}
x = {{ type = "float", domain = [0, 10] }}
n = {{ type = "int", domain = [-5, 5] }}
w = {{ type = "float" }}
t = {{ type = "text", keys = ["a", "b", "it's", "50%", "a_b", "é", ""] }}
f = {{ type = "bool" }}
d = {{ type = "date", domain = ["2020-01-01", "2024-12-31"] }}
at = {{ type = "timestamp", domain = [2020-01-01T00:00:00, 2024-12-31T23:59:59] }}
""")
TYPES = {"id": "INTEGER", "x": "DOUBLE PRECISION", "n": "INTEGER", "w": "DOUBLE PRECISION",
         "t": "TEXT", "f": "BOOLEAN", "d": "DATE", "at": "TIMESTAMP"}
ZONES = ("UTC", "Europe/Berlin")
NAN, INF = math.nan, math.inf
_T = dt.datetime
# Adversarial values of each column (cycled, so every one appears): NULL, NaN, ±inf,
# -0, denormals, beyond the domain, text with quotes, backslashes, LIKE's own signs,
# unicode and control characters, moments at years 1 and 9999, Berlin's daylight-saving
# hours, fractions of a second, month and day ends.
VALUES = {
    "x": [0.0, 10.0, 5.0, -0.0, 1e-310, 1e308, -1e308, NAN, INF, -INF, None, 0.1, 11.0, -1.0,
          1e15, 2.0 ** 53 + 2, 9.999999999999998, 1e-15, 0.30000000000000004],
    "n": [-5, 5, 0, 1, -1, 2147483647, -2147483648, None, 6, -6, 3],
    "w": [NAN, None, INF, -INF, 0.0, -0.0, 1e300, -1e300, 5e-324, 1.5, -2.5, 1e16, 12345.678],
    "t": ["a", "b", "it's", "50%", "a_b", "é", "", None, "A", "ab", "\t", "back\\slash",
          "%", "_", "a%b", "\x01ctl", "日本", "x" * 40, " a", "a "],
    "f": [True, False, None],
    "d": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2020, 1, 1), dt.date(2024, 12, 31),
          dt.date(2023, 3, 26), None, dt.date(2024, 2, 29), dt.date(2023, 10, 29),
          dt.date(2019, 12, 31), dt.date(2025, 1, 1), dt.date(2023, 1, 1)],
    "at": [_T(1, 1, 1), _T(9999, 12, 31, 23, 59, 59, 999999), _T(2023, 3, 26, 1, 30),
           _T(2023, 3, 26, 2, 30), _T(2023, 3, 26, 3, 0), _T(2023, 10, 29, 2, 30), None,
           _T(2023, 10, 29, 1, 59, 59, 999999), _T(2020, 1, 1), _T(2024, 12, 31, 23, 59, 59),
           _T(2023, 12, 31, 23, 30), _T(2024, 1, 1, 0, 30), _T(2023, 6, 15, 12, 0, 0, 500000),
           _T(2019, 12, 31, 23, 59, 59), _T(2023, 1, 31, 22, 59)],
}
COUNT = 64
# rows whose date and timestamp are ±infinity (no Python value holds them)
INFINITE = {COUNT - 1: "infinity", COUNT - 2: "-infinity"}


def rows() -> dict[str, list]:
    columns: dict[str, list] = {"id": list(range(1, COUNT + 1))}
    for offset, (name, pool) in enumerate(VALUES.items()):
        columns[name] = [pool[(index * (offset + 3) + offset) % len(pool)]
                         for index in range(COUNT)]
    return columns


def infinities() -> list[str]:
    """The statements that give the last rows infinite dates and timestamps, on DuckDB
    and PostgreSQL alike."""
    return [f"UPDATE {TABLE} SET d = '{text}', \"at\" = '{text}' WHERE id = {index + 1}"
            for index, text in INFINITE.items()] + [
        # a date beyond PostgreSQL's last timestamp (year 294276): never cast unclamped
        f"UPDATE {TABLE} SET d = '300000-01-01' WHERE id = {COUNT - 2}"]


# ---------------------------------------------------------------- random conditions

NUMBERS = ["0", "-0", "5", "10", "-5", "0.5", "1e308", "-1e308", "1.7976931348623157e308",
           "1e309", "-1e309", "1e-400", "5e-324", "1e-310", "0.30000000000000004",
           "12345678901234567890123", "9007199254740993", "2147483648", "-2147483649",
           "9223372036854775808", "1.5e1", "1E+1", "1e-1", ".5", "5.", "0." + "0" * 30 + "1",
           "9.99999999999999999999", "'5'", "'NaN'", "'Infinity'", "'-Infinity'", "' 7 '",
           "'1e3'", "'abc'", "1 + 10", "2 * 3", "10 / 4", "7 / 2", "-(3)", "1e308 * 10",
           "5 - 0.5", "1 / 0", "(2 + 3) * 2", "0.1 + 0.2", "CAST('3' AS int)", "-0.0",
           "1.00000000000000000000000000000000001", "5.000000000000000000000000000000",
           "-2.5", "4.999999999999999999", "1.0000000000000000000000000000000000000001"]
TEXTS = ["'a'", "'b'", "'it''s'", "'50%'", "'a_b'", "'é'", "''", "'A'", "'back\\slash'",
         "'%'", "'日本'", "' a'", "'a '", "'zz'", "'\x01ctl'", "'\t'", "NULL", "5", "'a' || 'b'"]
PATTERNS = ["'a%'", "'%'", "'_'", "'%\\%%'", "'a\\_b'", "'%b'", "'_b%'", "'it''%'", "'\\'",
            "'a!_b' ESCAPE '!'", "'%!%' ESCAPE '!'", "'' ", "'%é'", "'A%'", "'%\\\\%'",
            "'a%' ESCAPE ''", "'__'", "'%_%_%'", "'a%' ESCAPE 'ab'"]
BOOLS = ["TRUE", "FALSE", "'t'", "'yes'", "'1'", "'off'", "NULL", "'maybe'", "' No '", "'o'",
         "1", "'of'"]
DAYS = ["2023-03-26", "2020-01-01", "2024-12-31", "0001-01-01", "9999-12-31", "2024-02-29",
        "2023-02-29", "2023-13-01", "2023-10-29", "2019-12-31", "2025-01-01", "2023-03-25",
        "2023-10-28"]
CLOCKS = ["", " 00:00:00", " 01:30", " 02:30:00", "T02:30:00Z", " 02:30:00+02:00",
          "T01:59:59.999999", " 12:00:00.1234567", " 24:00:00", " 23:59:60", " 03:00-05",
          "T00:00:00.5+05:30", " 12:00 Europe/Berlin"]
FORMS = ["'{}'", "DATE '{}'", "TIMESTAMP '{}'", "CAST('{}' AS date)",
         "CAST('{}' AS timestamp)", "CAST('{}' AS timestamptz)", "'{}'::timestamptz",
         "'{}'::date", "TIMESTAMPTZ '{}'"]
SHIFTS = ["", " + INTERVAL '1 day'", " - INTERVAL '1 month'", " + INTERVAL '1 hour'",
          " + INTERVAL '-2 years'", " + INTERVAL '90 minutes'", " - INTERVAL '1 year'",
          " + INTERVAL '24 hours'", " - INTERVAL '1 day 2 hours'"]


def moment(rng: random.Random) -> str:
    if rng.random() < 0.1:
        day = rng.choice(DAYS[:6])
        return rng.choice([f"TO_TIMESTAMP('{day} 01:30', 'YYYY-MM-DD HH24:MI')",
                           f"TO_TIMESTAMP('{day.replace('-', '')}', 'YYYYMMDD')",
                           f"TO_DATE('{day}', 'YYYY-MM-DD')"])
    text = rng.choice(DAYS) + rng.choice(CLOCKS)
    shift = rng.choice(SHIFTS) if rng.random() < 0.3 else ""
    return rng.choice(FORMS).format(text) + shift


def literal(rng: random.Random, column: str) -> str:
    if rng.random() < 0.15:  # of another column's kind: refused as PostgreSQL refuses it
        column = rng.choice(["x", "t", "f", "d", "at"])
    if column in ("x", "n", "w"):
        return rng.choice(NUMBERS)
    if column == "t":
        return rng.choice(TEXTS)
    if column == "f":
        return rng.choice(BOOLS)
    return moment(rng)


COMPARE = ["=", "<>", "<", "<=", ">", ">=", "!="]


def term(rng: random.Random) -> str:  # noqa: PLR0911
    column = rng.choice(["x", "n", "w", "t", "f", "d", "at", "d", "at", "t"])
    form = rng.randrange(10)
    if form == 0:
        return f"{column} IS {rng.choice(['', 'NOT '])}NULL"
    if form == 1:
        items = ", ".join(literal(rng, column) for _ in range(rng.randint(1, 4)))
        return f"{column} {rng.choice(['', 'NOT '])}IN ({items})"
    if form == 2:
        low, high = literal(rng, column), literal(rng, column)
        return f"{column} {rng.choice(['', 'NOT '])}BETWEEN {low} AND {high}"
    if column == "t" and form in (3, 4):
        like = rng.choice(["LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE"])
        return f"t {like} {rng.choice(PATTERNS)}"
    if column == "t" and form == 5:
        start, length = rng.choice(["1", "0", "-1", "2", "3"]), rng.choice(
            ["1", "2", "0", "-1", "100", None])
        part = f"substring(t, {start}" + (f", {length})" if length else ")")
        if rng.random() < 0.3:
            part = f"substring(t FROM {start}" + (f" FOR {length})" if length else ")")
        return f"{part} {rng.choice(COMPARE)} {rng.choice(TEXTS)}"
    if column == "f" and form in (3, 4):
        return rng.choice(["f", "NOT f", "f IS TRUE", "f IS NOT FALSE", "f = TRUE",
                           "f IS UNKNOWN"])
    if column in ("d", "at") and form == 5:
        return (f"{column} >= {moment(rng)} AND {column} < {moment(rng)}")
    if column in ("d", "at") and form == 7:
        return extract_term(rng, column)
    if form == 6:  # two columns, of one kind or not; IS DISTINCT FROM; LIKE on any
        other = rng.choice(["x", "n", "w", "t", "d", "at"])
        return rng.choice([f"{column} {rng.choice(COMPARE)} {other}",
                           f"{column} IS {rng.choice(['', 'NOT '])}DISTINCT FROM "
                           f"{literal(rng, column)}", f"{column} LIKE {rng.choice(PATTERNS)}"])
    return f"{column} {rng.choice(COMPARE)} {literal(rng, column)}"


FIELDS = ["dow", "isodow", "hour", "month", "year", "day", "quarter", "minute", "doy", "week",
          "epoch", "second"]
# a field's column as the proxy reads it (issue 33): clamped to its domain, NULL kept,
# a date at its midnight; what PostgreSQL's truth extracts from
FIELD_CLAMPED = {
    "at": "CASE WHEN at IS NOT NULL THEN least(greatest(at, TIMESTAMP '2020-01-01'), "
          "TIMESTAMP '2024-12-31 23:59:59') END",
    "d": "CAST(CASE WHEN d IS NOT NULL THEN least(greatest(d, DATE '2020-01-01'), "
         "DATE '2024-12-31') END AS timestamp)"}


def extract_term(rng: random.Random, column: str) -> str:
    """A field of a time column compared with numbers (or with what is refused). The
    proxy reads a year compared with whole numbers of 1 to 9998 alone (=, <>, <, BETWEEN,
    IN), and an epoch compared with numbers, as a range of the column as it is
    (``proxy.analyze.time_filters``: PostgreSQL's own answer), every other field of the
    column clamped into its domain: such a year's or epoch's column is written qualified
    (``wf.d``), which ``truth_where`` leaves as it is."""
    field = rng.choice(FIELDS)
    numbers = NUMBERS[:26] + ["1", "6", "23", "2020", "2024", "12", "31", "53"] * 3
    form = rng.randrange(5)
    if form == 0:
        chosen = [rng.choice(numbers) for _ in range(rng.randint(1, 4))]
        text = "{part} " + rng.choice(['', 'NOT ']) + "IN (" + ", ".join(chosen) + ")"
    elif form == 1:
        chosen = [rng.choice(numbers), rng.choice(numbers)]
        text = "{part} BETWEEN " + " AND ".join(chosen)
    elif form == 2:
        chosen = ["0"]
        text = rng.choice(["{part} IS NULL", "({part} IN (0, 6)) = TRUE",
                           "{part} > {part}", "{part} + 1 = 2"])
    else:
        chosen = [rng.choice(numbers)]
        text = "{part} " + rng.choice(COMPARE) + " " + chosen[0]
    if field == "epoch" or (field == "year" and all(n.isdigit() and 1 <= int(n) <= 9998
                                                    for n in chosen)):
        column = f"{TABLE}.{column}"
    part = rng.choice([f"extract({field} FROM {column})", f"date_part('{field}', {column})",
                       f"(extract({field} FROM {column}))"])
    return text.format(part=part)


def truth_where(where: str) -> str:
    """The WHERE as PostgreSQL must evaluate it to give the proxy's rows: each field
    extracted from the clamped column, but a year or an epoch read as a range of the
    column as it is (``extract_term``), through EXTRACT: PostgreSQL's date_part reads a
    date as a timestamp and fails on one beyond the timestamps' years, which the range
    does not."""
    for field in ("year", "epoch"):
        where = where.replace(f"date_part('{field}', {TABLE}.", f"extract({field} FROM {TABLE}.")
    for column, clamped in FIELD_CLAMPED.items():
        where = where.replace(f"FROM {column})", f"FROM {clamped})").replace(
            f"', {column})", f"', {clamped})")
    return where


def condition(rng: random.Random, depth: int = 2) -> str:
    if depth <= 0 or rng.random() < 0.4:
        return term(rng)
    form = rng.randrange(3)
    if form == 0:
        return f"NOT ({condition(rng, depth - 1)})"
    joiner = " AND " if form == 1 else " OR "
    return "(" + joiner.join(condition(rng, depth - 1) for _ in range(2)) + ")"


BUCKETS = [("at", "date_trunc('month', {})"), ("d", "date_trunc('day', {})"),
           ("at", "CAST({} AS date)"), ("d", "extract(year from {})"),
           ("at", "date_trunc('year', {} AT TIME ZONE 'UTC' AT TIME ZONE 'Europe/Berlin')"),
           ("at", "to_char({}, 'YYYY-MM')"), ("at", "date_trunc('hour', {})")]
# a bucket's column as the proxy reads it: within its domain (§4), for PostgreSQL's truth
CLAMPED = {"at": "least(greatest(at, TIMESTAMP '2020-01-01'), TIMESTAMP '2024-12-31 23:59:59')",
           "d": "least(greatest(d, DATE '2020-01-01'), DATE '2024-12-31')"}


def statements(rng: random.Random) -> tuple[str, str, str | None]:
    """A statement, its WHERE and (a time bucket) PostgreSQL's statement of the groups
    the proxy must find: aggregates under a random condition, or a time bucket under a
    range of its column (and, at times, a random condition)."""
    if rng.random() < 0.7:
        where = condition(rng)
        return f"SELECT COUNT(*), SUM(x), MEDIAN(n) FROM {TABLE} WHERE {where}", where, None
    column, bucket = rng.choice(BUCKETS)
    where = f"{column} >= {moment(rng)} AND {column} < {moment(rng)}"
    if rng.random() < 0.3:
        where += f" AND {condition(rng, 1)}"
    grouped = "SELECT {} AS k, COUNT(*) FROM " + f"{TABLE} WHERE {{}} GROUP BY 1"
    return (grouped.format(bucket.format(column), where), where,
            grouped.format(bucket.format(CLAMPED[column]), truth_where(where)))


# ---------------------------------------------------------------- one statement

def check(sql: str, where: str, engine, truth, zone: str, groups_sql: str | None = None
          ) -> totality.Outcome:
    """Analyse ``sql`` in the session zone ``zone``; when admitted, run the engine's
    statistics and the rows in scope on its backend and compare them with PostgreSQL's
    evaluation of the original WHERE (``truth(sql, zone)``: its rows, or an error) and,
    for a time bucket, its groups (``groups_sql``)."""
    outcome = totality.Outcome()
    label = f"[{zone}] {sql}"
    plan = totality.analysed(sql, RULES, Settings(time_zone=zone), label, outcome, Refused)
    if plan is None:
        return outcome
    expected = truth(f"SELECT id FROM {TABLE} WHERE {truth_where(where)}", zone)
    if isinstance(expected, Exception):
        outcome.failures.append(("invalid", label, f"PostgreSQL fails: {expected}"))
        return outcome
    dialect = engine.backend.dialect
    try:
        _, groups, _ = engine.statistics(plan)
        scope = scope_select(plan, (), None, unit=True)
        got = sorted(row[-1] for row in engine.backend.read(scope.sql(dialect=dialect)))
    except ProxyError as exc:
        outcome.failures.append(("error", label, str(exc)))
        return outcome
    admitted = sorted(row[0] for row in expected)
    if got != admitted or sum(group.rows for group in groups.values()) != len(admitted):
        outcome.failures.append(("differential", label, f"scope {got}, PostgreSQL {admitted}"))
    elif plan.group_by:
        term = plan.group_by[0]
        wanted = {_key(k): c for k, c in truth(groups_sql, zone)}
        found = {_key(term.shown(k[0] if term.labels is None else int(k[0]))): g.rows
                 for k, g in groups.items() if g.rows}
        if wanted != found:
            outcome.failures.append(("groups", label, f"{found} != PostgreSQL {wanted}"))
    return outcome


def _key(value):
    """A group key as compared: a timestamptz as its UTC moment (PostgreSQL gives it in
    the session's zone, the proxy in UTC: the same moment), a timestamp as written."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.replace(tzinfo=None).isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    return value if isinstance(value, str) else float(value)


def postgres_truth(url: str):
    """PostgreSQL's own answer to a statement over the rows, its session in a zone: its
    rows, or the error it raises."""
    con = psycopg.connect(url, autocommit=True)

    def answer(sql: str, zone: str):
        con.execute(f"SET TIME ZONE '{zone}'")
        try:
            return con.execute(sql).fetchall()
        except psycopg.Error as exc:
            return exc
    answer.close = con.close
    return answer


def run(engine, truth, seed: int, count: int) -> totality.Outcome:
    rng = random.Random(seed)
    total = totality.Outcome()
    for _ in range(count):
        sql, where, groups_sql = statements(rng)
        total.add(check(sql, where, engine, truth, rng.choice(ZONES), groups_sql))
    return total
