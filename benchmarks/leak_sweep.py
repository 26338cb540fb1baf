"""The neighbour-differential leak sweep: hundreds of statements, each run through the
Engine on the demo's data D and on neighbours D' that modify one person's values, with
the same random source for both; every output but the noisy numbers must agree.

    python benchmarks/leak_sweep.py [--backends duckdb,postgres] [--people 2000]
                                    [--neighbours all|in-model|NAME,...] [--every 1]
                                    [--attacks] [--settings] [--rules default|delta|zcdp]
                                    [--show 40]

Statements: every file of tests/bi/ and benchmarks/bi_heldout/, tests/attacks.py
(``--attacks``: slow, minutes per neighbour), and generated mutations: protected columns
in arithmetic, casts, CASE … 1/0, NULLIF/COALESCE, time arithmetic, WHERE at the
neighbour's values, GROUP BY expressions, HAVING, ORDER BY/LIMIT, joins, subqueries,
windows over releases; ``--settings`` repeats a share of them after ``SET idp.*``.
``--every K`` keeps every K-th statement (the PostgreSQL sample).

Neighbours: person 77 (of people and visits) with a value changed to a domain bound,
just outside it, 0, negative, NULL, huge, NaN, ±inf, another key, a far timestamp
(docs/privacy.md §1: user-level neighbours modify all of one unit's records and keep
their number). ``OUT_OF_MODEL`` ones change a unit's row count (delete, add rows), which
the neighbour model keeps public: the whole table's count and c may then differ.

Compared per statement: success or refusal, the exception's class, SQLSTATE and text
(numbers masked), the NOTICE and the privacy metadata (numbers masked: released values
and the ± of drawn bounds are paid for), columns and their kinds, the number of rows,
the released group keys (as a multiset; numeric cells of outer queries over releases
masked), each value cell's type, NULL, NaN or ±inf, and the ledger rows (label, ε, δ,
status). Reported apart: row order, and a value whose order of magnitude moved by more
than 100x under the same draws (a hint, to be read by hand). Exits 1 on a difference in
the compared outputs for an in-model neighbour.
"""

from __future__ import annotations

import argparse
import collections
import decimal
import hashlib
import json
import math
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import psycopg

from proxy import demo
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from tests.attacks import ATTACKS, held_back
from tests.bicorpus import CORPUS, read_entry
from tests.privacy.laws import SeededSource

ROOT = Path(__file__).resolve().parent.parent
HELD_OUT = ROOT / "benchmarks" / "bi_heldout"
P = 77  # the person whose values the neighbours change


def mutations() -> list[tuple[str, str]]:
    """Statements that put protected columns where one value could show."""
    m = []
    add = lambda name, sql: m.append(("mut/" + name, sql))
    # arithmetic on protected columns
    for c in ["0", "50000", "10000000", "-5"]:
        add(f"div_shift_{c}", f"SELECT SUM(income / (income - {c})) FROM people")
        add(f"sqrt_shift_{c}", f"SELECT SUM(sqrt(income - {c})) FROM people")
        add(f"case_div0_{c}", f"SELECT SUM(CASE WHEN income > {c} THEN 1/0 ELSE 1 END) FROM people")
        add(f"case_div0_cnt_{c}", f"SELECT COUNT(CASE WHEN income > {c} THEN 1/0 END) FROM people")
        add(f"nullif_{c}", f"SELECT SUM(1 / NULLIF(income - {c}, 0)) FROM people")
        add(f"where_eq_{c}", f"SELECT COUNT(*), SUM(income) FROM people WHERE income = {c}")
        add(f"where_gt_{c}", f"SELECT COUNT(*), AVG(income), MEDIAN(income) FROM people WHERE income > {c}")
        add(f"having_{c}", f"SELECT region, SUM(income) FROM people GROUP BY region HAVING SUM(income) > {c}")
    for c in ["0", "500", "100000", "-1"]:
        add(f"v_div_shift_{c}", f"SELECT SUM(cost / (cost - {c})) FROM visits")
        add(f"v_where_{c}", f"SELECT department, COUNT(*), SUM(cost) FROM visits WHERE cost >= {c} GROUP BY 1")
        add(f"v_case_{c}", f"SELECT SUM(CASE WHEN cost > {c} THEN 1/0 ELSE 0 END) FROM visits")
        add(f"v_ln_{c}", f"SELECT AVG(ln(cost - {c})) FROM visits")
    for e in ["income * 1e300", "income * income * income", "power(income, 40)", "exp(income)",
              "ln(income)", "log10(income)", "sqrt(income)", "income::int", "income::smallint",
              "CAST(income AS integer)", "CAST(income AS bigint)", "income::numeric(5,2)",
              "CAST(age AS smallint)", "age::smallint * 1000", "abs(income)", "-income",
              "income % 7", "mod(age, 0)", "age / 0", "age / (age - 40)", "income / age",
              "floor(income)", "round(income, -3)", "ceil(ln(income + 1))", "income + age * 1e308",
              "COALESCE(income, 0)", "COALESCE(income, 1e300)", "NULLIF(income, 0)",
              "CASE WHEN income IS NULL THEN 1 ELSE 0 END", "CASE WHEN income <> income THEN 1 ELSE 0 END",
              "CASE WHEN age > 120 THEN 1e300 ELSE 0 END", "greatest(income, 1e300)",
              "least(income, -1e300)", "length(CAST(income AS text))", "length(region)",
              "CAST(substring(CAST(income AS text), 1, 3) AS int)", "CAST(CAST(income AS text) AS float)",
              "CASE WHEN region = 'zzz' THEN 1 ELSE 0 END", "CAST(region AS int)",
              "income / (age + 1)", "age * age * age * age * age * age * age * age"]:
        for agg in ["SUM", "AVG", "MAX", "MEDIAN"]:
            add(f"{agg}({e})", f"SELECT {agg}({e}) FROM people")
    for e in ["cost * 1e300", "cost::int", "cost::smallint", "days::smallint * 10000",
              "cost / days", "cost / (days + 1)", "cost / NULLIF(days, 0)", "ln(cost)",
              "sqrt(cost - 500)", "extract(epoch from visited_at)", "extract(year from visited_at)",
              "extract(year from visited_at + interval '9000 years')",
              "extract(epoch from visited_at - timestamp '2023-01-01')",
              "date_part('year', visited_at) * 1000000", "CAST(to_char(visited_at, 'YYYY') AS int)",
              "CAST(visited_at AS date) - date '2023-01-01'", "days * 86400 * 1000000 * 1000"]:
        for agg in ["SUM", "AVG", "MAX", "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY"]:
            s = f"{agg} {e})" if agg.startswith("PERC") else f"{agg}({e})"
            add(f"v_{agg[:4]}({e})", f"SELECT {s} FROM visits")
    # WHERE conditions at neighbour values
    for w in ["income IS NULL", "income IS NOT NULL", "income <> income", "income = 'NaN'::float",
              "income = 'Infinity'::float", "income > 1e200", "income < 0", "income > 10000000",
              "age > 120", "age < 0", "age IS NULL", "region IS NULL", "region = 'zzz'",
              "region NOT IN ('north','south','east','west')", "sex = 'x'",
              "person_id = 77", "person_id = 77 AND income > 1000000", "person_id = 77 AND income IS NULL",
              "income::int > 5", "CAST(age AS smallint) > 3", "sqrt(income) > 3", "ln(income) > 3",
              "1 / (income - 50000) > 0", "income / age > 1", "CAST(region AS int) = 1",
              "to_char(income, '999') = 'x'", "substring(region, 1, 1) = 'n'"]:
        add(f"where[{w}]", f"SELECT COUNT(*), SUM(age), AVG(income) FROM people WHERE {w}")
        add(f"where_g[{w}]", f"SELECT region, COUNT(*) FROM people WHERE {w} GROUP BY region")
    for w in ["cost IS NULL", "cost > 100000", "cost < 0", "days > 60", "days < 0", "days IS NULL",
              "visited_at > '2025-01-01'", "visited_at < '2023-01-01'", "visited_at IS NULL",
              "department = 'unknown'", "department IS NULL", "person_id = 77",
              "visited_at + interval '1000000 days' > now()", "extract(year from visited_at) > 3000",
              "cost::int > 1", "1 / (days - 3) > 0", "cost / days > 10",
              "CAST(visited_at AS date) > date '2024-06-01'"]:
        add(f"vwhere[{w}]", f"SELECT COUNT(*), SUM(cost), AVG(days) FROM visits WHERE {w}")
        add(f"vwhere_g[{w}]", f"SELECT department, COUNT(*), MEDIAN(cost) FROM visits WHERE {w} GROUP BY 1")
    # GROUP BY expressions of protected columns
    for g in ["floor(age / 10) * 10", "floor(income / 1000000)", "age > 60", "income > 1000000",
              "CASE WHEN income IS NULL THEN 'n' ELSE 'y' END", "region", "COALESCE(region, 'none')",
              "upper(region)", "region || sex", "CASE WHEN age > 120 THEN 'old' ELSE 'ok' END",
              "least(age, 100)", "round(age, -1)", "income < 0", "sqrt(age)", "floor(ln(income))",
              "age", "income", "floor(age / 0.001)", "CAST(age AS smallint)", "substring(region, 1, 1)"]:
        add(f"group[{g}]", f"SELECT {g} AS k, COUNT(*), AVG(income) FROM people GROUP BY 1")
    for g in ["department", "date_trunc('month', visited_at)", "extract(year from visited_at)",
              "extract(dow from visited_at)", "to_char(visited_at, 'YYYY-MM')", "days", "days > 30",
              "CAST(visited_at AS date)", "date_trunc('year', visited_at)", "floor(cost / 10000)",
              "date_trunc('day', visited_at::timestamptz)", "extract(hour from visited_at)"]:
        add(f"vgroup[{g}]", f"SELECT {g} AS k, COUNT(*), SUM(cost) FROM visits GROUP BY 1")
    # HAVING, ORDER BY/LIMIT
    for tail in ["ORDER BY 2 DESC LIMIT 2", "ORDER BY 1 LIMIT 3", "HAVING COUNT(*) > 4000",
                 "HAVING AVG(income) > 50000 ORDER BY 1", "ORDER BY 3 LIMIT 1", "LIMIT 0", "OFFSET 3",
                 "HAVING MAX(income) > 1e6"]:
        add(f"tail[{tail}]", f"SELECT region, COUNT(*), AVG(income) FROM people GROUP BY region {tail}")
    # joins and subqueries
    for s in ["SELECT r.name, COUNT(*), MEDIAN(p.income) FROM people p JOIN regions r ON p.region = r.code GROUP BY r.name",
              "SELECT r.name, SUM(p.income / p.age) FROM people p JOIN regions r ON p.region = r.code GROUP BY 1",
              "SELECT p.region, COUNT(*), SUM(v.cost) FROM people p JOIN visits v ON p.person_id = v.person_id GROUP BY 1",
              "SELECT COUNT(*), AVG(v.cost) FROM visits v JOIN people p USING (person_id) WHERE p.income > 1e6",
              "SELECT COUNT(*) FROM visits v JOIN people p USING (person_id) WHERE p.age > 120",
              "SELECT d, COUNT(*) FROM (SELECT department AS d, cost / days AS x FROM visits) t GROUP BY d",
              "SELECT COUNT(*) FROM (SELECT * FROM people WHERE income > 1e6) t",
              "SELECT SUM(x) FROM (SELECT income / (income - 50000) AS x FROM people) t",
              "SELECT AVG(t.total) FROM (SELECT person_id, SUM(cost) AS total FROM visits GROUP BY person_id) t",
              "SELECT AVG(t.n) FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) t",
              "SELECT MAX(t.total) FROM (SELECT person_id, SUM(cost * 1e300) AS total FROM visits GROUP BY person_id) t",
              "SELECT COUNT(*) FROM people WHERE person_id IN (SELECT person_id FROM visits WHERE cost > 1e6)",
              "SELECT COUNT(*) FROM people WHERE income > (SELECT AVG(income) FROM people)",
              "SELECT region, n, n * 2 FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region) t",
              "SELECT region, n / (n - 5000) FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region) t",
              "SELECT region, n, SUM(n) OVER () FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region) t",
              "SELECT region, n, rank() OVER (ORDER BY n) FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region) t",
              "SELECT region, s, lag(s) OVER (ORDER BY region) FROM (SELECT region, SUM(income) AS s FROM people GROUP BY region) t",
              "SELECT region, CAST(s AS int) FROM (SELECT region, SUM(income * 1e300) AS s FROM people GROUP BY region) t",
              "SELECT region, CAST(s AS smallint) FROM (SELECT region, SUM(income) AS s FROM people GROUP BY region) t",
              "SELECT region, 1 / (s - s) FROM (SELECT region, SUM(income) AS s FROM people GROUP BY region) t",
              "SELECT * FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region) t WHERE n > 5000",
              "SELECT k, COUNT(*) FROM (SELECT CASE WHEN income > 1e6 THEN 'rich' ELSE 'x' END AS k FROM people) t GROUP BY k",
              "SELECT COUNT(DISTINCT person_id) FROM visits", "SELECT COUNT(DISTINCT region) FROM people",
              "SELECT COUNT(DISTINCT age) FROM people", "SELECT COUNT(*) FROM people",
              "SELECT COUNT(*) FROM visits", "SELECT COUNT(income) FROM people", "SELECT COUNT(cost) FROM visits",
              "SELECT MIN(visited_at), MAX(visited_at) FROM visits", "SELECT MIN(age), MAX(age) FROM people",
              "SELECT STDDEV(income), VARIANCE(age) FROM people", "SELECT CORR(income, age) FROM people",
              "SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY income) FROM people",
              "SELECT region, PERCENTILE_CONT(0.99) WITHIN GROUP (ORDER BY income) FROM people GROUP BY 1",
              "SELECT * FROM people", "SELECT person_id FROM people LIMIT 1", "SELECT income FROM people WHERE person_id = 77",
              "SELECT region, COUNT(*) FROM people GROUP BY ROLLUP(region)",
              "SELECT region, sex, COUNT(*) FROM people GROUP BY CUBE(region, sex)",
              "SELECT COUNT(*) FROM people UNION ALL SELECT COUNT(*) FROM visits",
              "WITH t AS (SELECT income / (age - 40) AS x FROM people) SELECT SUM(x) FROM t"]:
        add(f"q[{s[:60]}]", s)
    return m


def overflows() -> list[tuple[str, str]]:
    """Integer, float and time overflows of protected columns in WHERE, GROUP BY and
    aggregates (a neighbour at 2³¹−1, 1e300, ±inf or year 9999 must not make one fail)."""
    m: list[tuple[str, str]] = []
    for w in ["age * 100000000 > 5", "age * age > 5", "age + 2147483647 > 0", "-age < 0", "abs(age) > 5",
              "age::smallint > 5", "CAST(age AS int2) > 5", "age / 2 > 5", "age % 7 = 1", "power(age, 10) > 1",
              "exp(age) > 1", "factorial(age) > 1", "age::text = '40'", "CAST(age AS text) LIKE '4%'",
              "income::bigint > 5", "income::int > 5", "round(income)::int > 5", "CAST(income AS decimal(10,2)) > 5",
              "income * 1e300 > 1", "income * income > 1", "exp(income) > 1", "floor(income)::int > 1",
              "to_char(income, '9999999') = ' 40000'", "length(CAST(income AS varchar)) > 5"]:
        m.append((f"mut/xw[{w}]", f"SELECT COUNT(*), AVG(age) FROM people WHERE {w}"))
    for w in ["visited_at + days * interval '1 day' > timestamp '2024-01-01'",
              "visited_at + interval '1 day' * days > timestamp '2024-01-01'",
              "visited_at + make_interval(days => days) > timestamp '2024-01-01'",
              "date_add(visited_at, INTERVAL (days) DAY) > timestamp '2024-01-01'",
              "CAST(visited_at AS date) + days > date '2024-01-01'",
              "extract(epoch from visited_at) * 1000000 > 1", "visited_at - interval '3000 years' > timestamp '0001-01-01'",
              "visited_at + interval '8000 years' > timestamp '2024-01-01'", "days * 100000000 > 1",
              "days::smallint > 1", "cost::int > 1", "cost * 1e300 > 1", "age(visited_at) > interval '1 year'",
              "date_trunc('year', visited_at) + interval '8000 years' > now()",
              "extract(year from visited_at)::smallint > 2000", "to_char(visited_at, 'YYYY') = '2024'",
              "strftime(visited_at, '%Y') = '2024'", "CAST(visited_at AS varchar) LIKE '2024%'",
              "date_part('epoch', visited_at)::int > 0", "visited_at::date::timestamp > '2024-01-01'"]:
        m.append((f"mut/xv[{w}]", f"SELECT COUNT(*), SUM(cost) FROM visits WHERE {w}"))
    for g in ["age * 100000000", "age::smallint", "days * 100000000", "date_trunc('month', visited_at + days * interval '1 day')",
              "extract(year from visited_at + interval '8000 years')", "CAST(visited_at AS date) + days",
              "floor(income / 1000000)::int", "floor(cost)::smallint", "(age * 2147483647) % 10"]:
        m.append((f"mut/xg[{g}]", f"SELECT {g} AS k, COUNT(*) FROM {'visits' if any(c in g for c in ('days','visited','cost')) else 'people'} GROUP BY 1"))
    for e in ["age * 100000000", "age::smallint", "days * 100000000", "extract(epoch from visited_at + days * interval '1 day')",
              "extract(year from visited_at + interval '8000 years')", "CAST(visited_at AS date) - date '2023-01-01' + days",
              "age * age * age * age * age", "days * days * days * days * days * days", "cost * cost * cost * cost"]:
        t = 'visits' if any(c in e for c in ('days', 'visited', 'cost')) else 'people'
        for agg in ("SUM", "AVG", "MAX", "MEDIAN"):
            m.append((f"mut/xa[{agg}({e})]", f"SELECT {agg}({e}) FROM {t}"))
    return m


SETTINGS = ["SET idp.model = 'dp'", "SET idp.model = 'dp'; SET idp.sensitivity = 'smooth'",
            "SET idp.model = 'dp'; SET idp.sensitivity = 'global'",
            "SET idp.sensitivity = 'piecewise'", "SET idp.intervals = on", "SET idp.epsilon = 1",
            "SET idp.prior = 'uniform(0, 100000)'", "SET idp.noise = 'gaussian'"]
SET_PICKS = ("mut/q", "mut/group", "mut/where[", "mut/SUM", "mut/MEDIAN", "mut/MAX", "mut/v_SUM",
             "mut/v_PERC", "mut/tail")


def corpus(attacks: bool) -> list[tuple[str, str]]:
    out = [("bi/" + p.stem, read_entry(p).sql) for p in sorted(CORPUS.glob("*.sql"))]
    out += [("held/" + p.stem, read_entry(p).sql) for p in sorted(HELD_OUT.glob("*.sql"))]
    if attacks:
        out += [("attack/" + a.name, a.make(0)) for a in ATTACKS
                if not a.name.startswith("catalog")]  # no protected table read
        out += [(f"held_back/{seed}", held_back(seed)) for seed in range(10)]
    return out


def statements(attacks: bool, settings: bool) -> list[tuple[str, str]]:
    base = corpus(attacks) + mutations() + overflows()
    if not settings:
        return base
    picks = [s for s in base if s[0].startswith(SET_PICKS)]
    return base + [(f"set{k}/{name}", f"{setting}; {sql}")
                   for k, setting in enumerate(SETTINGS) for i, (name, sql) in enumerate(picks)
                   if i % len(SETTINGS) == k or (i % 3 == 0 and k < 2)]


def _set(table: str, assignment: str) -> list[str]:
    return [f"UPDATE {table} SET {assignment} WHERE person_id = {P}"]


NEIGHBOURS: dict[str, list[str]] = {
    "inc0": _set("people", "income = 0"), "incmax": _set("people", "income = 10000000"),
    "incout": _set("people", "income = 10000000.01"), "incneg": _set("people", "income = -5"),
    "incnull": _set("people", "income = NULL"), "inchuge": _set("people", "income = 1e300"),
    "incnan": _set("people", "income = 'NaN'::DOUBLE"),
    "incinf": _set("people", "income = 'Infinity'::DOUBLE"),
    "incninf": _set("people", "income = '-Infinity'::DOUBLE"),
    "inc50k": _set("people", "income = 50000"), "age0": _set("people", "age = 0"),
    "age120": _set("people", "age = 120"), "age121": _set("people", "age = 121"),
    "ageneg": _set("people", "age = -1"), "agenull": _set("people", "age = NULL"),
    "agehuge": _set("people", "age = 2147483647"), "age40": _set("people", "age = 40"),
    "regwest": _set("people", "region = CASE WHEN region = 'west' THEN 'north' ELSE 'west' END"),
    "regbad": _set("people", "region = 'zzz'"),
    "regnull": _set("people", "region = NULL, sex = NULL"),
    "cost0": _set("visits", "cost = 0"), "costmax": _set("visits", "cost = 100000"),
    "costout": _set("visits", "cost = 100000.01"), "costneg": _set("visits", "cost = -1"),
    "costnull": _set("visits", "cost = NULL"), "costhuge": _set("visits", "cost = 1e300"),
    "costnan": _set("visits", "cost = 'NaN'::DOUBLE"),
    "costinf": _set("visits", "cost = 'Infinity'::DOUBLE"),
    "days61": _set("visits", "days = 61"), "daysneg": _set("visits", "days = -1"),
    "days0": _set("visits", "days = 0"), "dayshuge": _set("visits", "days = 2147483647"),
    "daysnull": _set("visits", "days = NULL"), "dept": _set("visits", "department = 'oncology'"),
    "deptbad": _set("visits", "department = 'unknown'"),
    "deptnull": _set("visits", "department = NULL"),
    "tsfar": _set("visits", "visited_at = TIMESTAMP '9999-12-31 23:59:59'"),
    "tsold": _set("visits", "visited_at = TIMESTAMP '0001-01-01 00:00:00'"),
    "tsinf": _set("visits", "visited_at = 'infinity'::TIMESTAMP"),
    "tsnull": _set("visits", "visited_at = NULL"),
    "tsedge": _set("visits", "visited_at = TIMESTAMP '2025-01-01 00:00:00'"),
    # out of the neighbour model: a unit's number of rows changes
    "remove": [f"DELETE FROM visits WHERE person_id = {P}",
               f"DELETE FROM people WHERE person_id = {P}"],
    "novisits": [f"DELETE FROM visits WHERE person_id = {P}"],
    "manyvisits": [f"INSERT INTO visits SELECT 10000000 + i, {P}, 'oncology', 1e5, 60, "
                   "TIMESTAMP '2024-12-31 23:00:00' FROM range(40) t(i)"],
    "add": ["INSERT INTO people VALUES (9999999, 120, 10000000, 'west', 'f')",
            "INSERT INTO visits SELECT 20000000 + i, 9999999, 'oncology', 1e5, 60, "
            "TIMESTAMP '2024-12-31 23:00:00' FROM range(6) t(i)"],
}
OUT_OF_MODEL = {"remove", "novisits", "manyvisits", "add"}


def _postgres(sql: str) -> str:
    sql = sql.replace("::DOUBLE", "::float8").replace("::TIMESTAMP", "::timestamp")
    return re.sub(r"FROM range\((\d+)\) t\(i\)",
                  lambda m: f"FROM generate_series(0, {int(m.group(1)) - 1}) t(i)", sql)


def rules_text(variant: str) -> str:
    text = (ROOT / "rules" / "demo.toml").read_text().replace(
        "budget_per_analyst = 100 ", "budget_per_analyst = 1000000000 ")
    if variant == "zcdp":  # DP with zCDP accounting (and so SET idp.noise = 'gaussian')
        text = text.replace('model = "idp" ', 'model = "dp"  ').replace(
            'report_scale = "none"',
            'report_scale = "none"\naccounting = "zcdp"\naccounting_delta = 1e-6')
    if variant == "delta":  # groups from the data: region and department without keys
        text = re.sub(r'(region|department)(\s*)= \{ type = "text",\s*keys = \[[^]]*\] \}',
                      r'\1\2= { type = "text" }', text)
        text = text.replace('report_scale = "none"', 'report_scale = "none"\ndelta = 1e-6')
    return text


NUMBER = re.compile(r"[-+]?\d[\d.,]*(?:e[-+]?\d+)?")


def masked(value):
    if isinstance(value, str):
        return NUMBER.sub("#", value)
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items()}
    return value


def _cell(value, released: bool) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        return "num" if not released else type(value).__name__
    return "released:" + type(value).__name__ if released else repr(value)


def _magnitude(value):
    if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        value = float(value)
        return math.floor(math.log10(abs(value))) if math.isfinite(value) and value else None
    return None


def signature(engine: Engine, name: str, sql: str) -> dict:
    """What one statement shows, but its noisy numbers; the draws seeded by its name."""
    engine.rng = SeededSource(int(hashlib.sha256(name.encode()).hexdigest()[:12], 16))
    before = len(engine.ledger.entries("alice"))
    answers, error = [], None
    try:
        for answer in Session.open(engine, "alice").execute(sql):
            privacy = answer.privacy or {}
            ci95 = privacy.get("ci95") or {}
            released = [c in ci95 or c.endswith(("_ci95_low", "_ci95_high"))
                        for c in answer.columns]
            rows = [tuple(_cell(v, r) for v, r in zip(row, released)) for row in answer.rows]
            meta = {k: v for k, v in privacy.items() if k not in ("ci95", "epsilon_remaining")}
            meta["ci95"] = {k: [x is None for x in v] for k, v in ci95.items()}
            answers.append({
                "command": masked(answer.command), "columns": list(answer.columns),
                "kinds": list(answer.kinds), "rows": len(answer.rows),
                "keys": sorted(map(repr, rows)),
                "meta": masked(json.loads(json.dumps(meta, default=str))),
                "notice": masked(answer.notice), "order": list(map(repr, rows)),
                "magnitudes": [[_magnitude(v) for v, r in zip(row, released) if r]
                               for row in answer.rows]})
    except Exception as exc:  # noqa: BLE001 - every refusal and failure is an output
        error = [type(exc).__name__, getattr(exc, "sqlstate", None), masked(str(exc))]
    ledger = [[str(f) for f in entry[3:]] for entry in engine.ledger.entries("alice")[before:]]
    return {"answers": answers, "error": error, "ledger": ledger}


def _compared(sig: dict) -> dict:
    return {"error": sig["error"], "ledger": sig["ledger"],
            "answers": [{k: v for k, v in a.items() if k not in ("order", "magnitudes")}
                        for a in sig["answers"]]}


def differences(a, b, path="") -> list[tuple[str, object, object]]:
    if type(a) is not type(b):
        return [(path, a, b)]
    if isinstance(a, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [(path + ".len", len(a), len(b))]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


def _far(a: dict, b: dict):
    for x, y in zip(a["answers"], b["answers"]):
        for row_x, row_y in zip(x["magnitudes"], y["magnitudes"]):
            for m, n in zip(row_x, row_y):
                if m is not None and n is not None and abs(m - n) > 2:
                    return m, n
    return None


def build_base(path: Path, people: int) -> None:
    con = duckdb.connect(str(path))
    for name, columns in (("people", demo.people_columns(people)),
                          ("visits", demo.visits_columns(people))):
        con.register("frame", columns)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
        con.unregister("frame")
    rows = ", ".join(f"('{c}', '{n}')" for c, n in zip(demo.REGIONS, demo.REGION_NAMES))
    con.execute(f"CREATE TABLE regions AS SELECT * FROM (VALUES {rows}) v(code, name)")
    con.close()


def duckdb_sides(folder: Path, base: Path):
    def open_side(name: str) -> str:
        path = folder / f"{name}.duckdb"
        for old in folder.glob(f"{name}.duckdb*"):  # the ledger's SQLite store too
            old.unlink()
        shutil.copyfile(base, path)
        con = duckdb.connect(str(path))
        for sql in NEIGHBOURS.get(name, []):
            con.execute(sql)
        con.close()
        return f"duckdb:///{path}"
    return open_side


def postgres_sides(url: str, base: Path):
    server = url.rsplit("/", 1)[0]
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE DATABASE leak_base")
    source = duckdb.connect(str(base), read_only=True)
    with psycopg.connect(f"{server}/leak_base", autocommit=True) as con:
        con.execute("CREATE TABLE people (person_id bigint, age integer, income double precision, "
                    "region text, sex text)")
        con.execute("CREATE TABLE visits (visit_id bigint, person_id bigint, department text, "
                    "cost double precision, days integer, visited_at timestamp)")
        con.execute("CREATE TABLE regions (code text, name text)")
        for table in ("people", "visits", "regions"):
            with con.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN") as copy:
                for row in source.execute(f"SELECT * FROM {table}").fetchall():
                    copy.write_row(row)
    source.close()

    def open_side(name: str) -> str:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "n_{name}" WITH (FORCE)')
            con.execute(f'CREATE DATABASE "n_{name}" TEMPLATE leak_base STRATEGY FILE_COPY')
        with psycopg.connect(f"{server}/n_{name}", autocommit=True) as con:
            for sql in NEIGHBOURS.get(name, []):
                con.execute(_postgres(sql))
        return f"{server}/n_{name}"
    return open_side


def sweep(open_side, names: list[str], sql: list[tuple[str, str]], rules: str, show: int) -> int:
    """Run D and each neighbour; print the differences; the number of in-model ones."""
    results = {}
    for name in ["D", *names]:
        began = time.monotonic()
        engine = Engine(parse_rules(rules), open_backend(open_side(name)))
        seen = collections.Counter()
        results[name] = {}
        for label, text in sql:
            seen[label] += 1
            results[name][(label, seen[label])] = signature(engine, label, text)
        engine.backend.close()
        print(f"  {name}: {len(sql)} statements, {time.monotonic() - began:.0f} s", file=sys.stderr)
    hard = shown = 0
    for name in names:
        for key, sig in results[name].items():
            base = results["D"][key]
            found = differences(_compared(base), _compared(sig))
            tag = "out-of-model " if name in OUT_OF_MODEL else ""
            if found:
                hard += name not in OUT_OF_MODEL
                if shown < show:
                    shown += 1
                    print(f"{tag}DIFFERENCE {name} {key[0]}")
                    for path, a, b in found[:4]:
                        print(f"    {path}: {str(a)[:200]!s} | {str(b)[:200]!s}")
            elif [a["order"] for a in base["answers"]] != [a["order"] for a in sig["answers"]]:
                print(f"{tag}order {name} {key[0]}")
            elif (far := _far(base, sig)) is not None:
                print(f"{tag}magnitude {name} {key[0]} 10^{far[0]} | 10^{far[1]}")
    print(f"{len(sql)} statements x {len(names)} neighbours = {len(sql) * len(names)} "
          f"compared; {hard} in-model differences")
    return hard


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="duckdb")
    parser.add_argument("--people", type=int, default=2000)
    parser.add_argument("--neighbours", default="in-model")
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--attacks", action="store_true")
    parser.add_argument("--settings", action="store_true")
    parser.add_argument("--rules", default="default", choices=("default", "delta", "zcdp"))
    parser.add_argument("--only", default="", help="keep statements whose name contains this")
    parser.add_argument("--show", type=int, default=40)
    args = parser.parse_args()
    names = (list(NEIGHBOURS) if args.neighbours == "all" else
             [n for n in NEIGHBOURS if n not in OUT_OF_MODEL] if args.neighbours == "in-model"
             else args.neighbours.split(","))
    sql = [s for i, s in enumerate(statements(args.attacks, args.settings))
           if i % args.every == 0 and args.only in s[0]]
    rules = rules_text(args.rules)
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder) / "base.duckdb"
        build_base(base, args.people)
        for backend in args.backends.split(","):
            print(f"{backend}:")
            if backend == "duckdb":
                failed += sweep(duckdb_sides(Path(folder), base), names, sql, rules, args.show)
            else:
                from tests.pgserver import throwaway_postgres

                with throwaway_postgres() as url:
                    failed += sweep(postgres_sides(url, base), names, sql, rules, args.show)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
