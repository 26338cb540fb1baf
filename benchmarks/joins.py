"""Joins (issue 18): the statistics' time of a join query as a ratio to the plain join
aggregate run directly, on DuckDB and PostgreSQL.

    python benchmarks/joins.py [--visits 10000000] [--backends duckdb,postgres] [--repeat 5]

Tables: ``visits`` (the given number of rows, two to four per unit), ``people`` (one row
per unit, a region code 0–9 and an income) and the public ``regions`` (ten codes, unique,
with a name). The cases are the two joins of issue 18's acceptance: visits ⋈ people on
the privacy unit, counted per region, and people ⋈ regions on the public unique key,
the median income per region name. Each case runs once first, untimed, so that the
per-unit bound of the joined tables (read once per pair of data versions) is cached, as
it is for every query after a table's first; then the plain join and the statistics
alternate, and the median and minimum of each are printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.sum_avg import compare, on_backends, seconds
from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.settings import Settings

RULES = parse_rules("""
[defaults]
epsilon_per_query = 0.1
[analysts.bench]
budget = 1000000
[tables.visits]
privacy_unit = "unit"
[tables.visits.columns]
unit = { type = "int" }
x = { type = "float", domain = [0, 1000] }
[tables.people]
privacy_unit = "unit"
[tables.people.columns]
unit = { type = "int" }
region = { type = "int", keys = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] }
income = { type = "float", domain = [0, 1000000] }
[tables.regions]
public = true
unique = ["code"]
[tables.regions.columns]
code = { type = "int" }
name = { type = "text" }
""", "join benchmark rules")

# (name, private SQL, the plain join aggregate per dialect)
CASES = [
    ("visits x people, COUNT per region",
     ("SELECT p.region, COUNT(*) FROM visits v JOIN people p ON v.unit = p.unit "
     "GROUP BY p.region"),
     {"duckdb": "SELECT p.region, count(*) FROM visits v JOIN people p ON v.unit = p.unit "
                "GROUP BY p.region",
      "postgres": "SELECT p.region, count(*) FROM visits v JOIN people p ON v.unit = p.unit "
                  "GROUP BY p.region"}),
    ("people x regions, MEDIAN per name",
     ("SELECT r.name, MEDIAN(p.income) FROM people p JOIN regions r ON p.region = r.code "
     "GROUP BY r.name"),
     {"duckdb": "SELECT r.name, quantile_disc(p.income, 0.5) FROM people p JOIN regions r "
                "ON p.region = r.code GROUP BY r.name",
      "postgres": "SELECT r.name, percentile_disc(0.5) WITHIN GROUP (ORDER BY p.income) "
                  "FROM people p JOIN regions r ON p.region = r.code GROUP BY r.name"}),
]


def load(backend, visits: int) -> None:
    """visits: two to four rows per unit (x in [0, 1000)); people: one row per unit."""
    if backend.dialect == "duckdb":
        series, unit = "range({n}) AS s(g)", "(g // 3 + CAST(hash(g) % 2 AS BIGINT))"
        x = "CAST(hash(g) % 1000000 AS DOUBLE) / 1000"
        people = ("SELECT DISTINCT unit, CAST(hash(unit) % 10 AS INTEGER) AS region, "
                  "CAST(hash(unit * 7) % 1000000 AS DOUBLE) AS income FROM visits")
    else:
        series, unit = "generate_series(1, {n}) AS g", "(g / 3 + (hashint8(g) & 1))"
        x = "((hashint8(g) & 1048575) % 1000000)::float8 / 1000"
        people = ("SELECT DISTINCT unit, ((hashint8(unit) & 1048575) % 10)::int AS region, "
                  "((hashint8(unit * 7) & 1048575) % 1000000)::float8 AS income FROM visits")
    with backend.transaction() as tx:
        tx.execute(f"CREATE TABLE visits AS SELECT {unit} AS unit, {x} AS x FROM "
                   + series.format(n=visits))
        tx.execute(f"CREATE TABLE people AS {people}")
        tx.execute("CREATE TABLE regions (code INTEGER, name TEXT)")
        tx.execute("INSERT INTO regions VALUES " + ", ".join(
            f"({code}, 'region {code}')" for code in range(10)))
    if backend.dialect == "postgres":
        for table in ("visits", "people", "regions"):
            backend.query(f"ANALYZE {table}")


def run(url: str, visits: int, repeat: int) -> None:
    backend = open_backend(url)
    load(backend, visits)
    engine = Engine(RULES, backend)
    for name, private_sql, plain in CASES:
        plan = analyze(parse_statements(private_sql)[0], RULES, Settings())
        first = seconds(lambda plan=plan: engine.statistics(plan))
        print(f"{backend.dialect:8} {name:34} first (bound read) {first * 1000:8.1f} ms",
              flush=True)
        compare(engine, name, private_sql, plain[backend.dialect], repeat)
    backend.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--visits", type=int, default=10_000_000)
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    on_backends(args.backends, lambda url: run(url, args.visits, args.repeat))


if __name__ == "__main__":
    main()
