"""The backend contract: the table t and the queries whose statistics every backend
computes the same (tests/pushdown/test_pushdown.py: DuckDB and PostgreSQL against a direct
computation; tests/backends/test_spark.py and tests/backends/test_spark_real.py: Spark against DuckDB),
none of them approximately."""

from __future__ import annotations

import math
import random

from proxy.rules import parse_rules

RULES_TEXT = """
[defaults]
noise_scale = "local"  # raw iDP: the local sensitivities tested here
[analysts.ann]
budget = 100
[tables.t]
privacy_unit = "unit"
[tables.t.columns]
unit = { type = "int" }
grp  = { type = "text", keys = ["a", "b", "c"] }
x    = { type = "float", domain = [0, 100] }
y    = { type = "int", domain = [-50, 50] }
"""
RULES = parse_rules(RULES_TEXT)

QUERIES = [
    "SELECT MEDIAN(x) FROM t",
    "SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x), MAX(y), MIN(y) FROM t WHERE y > 3",
    "SELECT grp, COUNT(*), QUANTILE_DISC(x, 0.25), SUM(y) FROM t WHERE x BETWEEN 10 AND 90 GROUP BY grp",
    "SELECT MAX(x), MIN(x), AVG(x), COUNT(x) FROM t WHERE grp IN ('a', 'c') OR y IS NULL",
    "SELECT MEDIAN(y) FROM t WHERE x > 1000",
    "SELECT grp, COUNT(DISTINCT x), COUNT(DISTINCT y), MEDIAN(x) FROM t WHERE y > -40 "
    "GROUP BY grp",
    "SELECT SUM(y), COUNT(DISTINCT grp), COUNT(DISTINCT x) FROM t WHERE x < 90",
]


def table_rows(seed: int = 3, units: int = 60) -> dict[str, list]:
    """Rows of t: 60 units of 1 to 3 rows, x and y NULL now and then, beyond the domain,
    a group that is no key."""
    rng = random.Random(seed)
    data = {"unit": [], "grp": [], "x": [], "y": []}
    for unit in range(units):
        for _ in range(rng.randint(1, 3)):
            data["unit"].append(unit)
            data["grp"].append(rng.choice(["a", "b", "c", "zzz"]))
            data["x"].append(rng.choice([None, rng.randint(0, 40) * 2.5, 100.0, 150.0]))
            data["y"].append(rng.choice([None, rng.randint(-60, 60)]))
    return data


TYPES = {"unit": "INTEGER", "grp": "TEXT", "x": "DOUBLE PRECISION", "y": "INTEGER"}

# QUERIES and two more that Spark's dialect writes differently
CONTRACT = [*QUERIES,
            "SELECT grp, MEDIAN(x), MAX(y), AVG(y), COUNT(*) FROM t WHERE y >= -20 GROUP BY grp",
            "SELECT COUNT(*), SUM(y), AVG(x), MAX(x) FROM t WHERE grp = 'b' AND x IS NOT NULL",
            # division by columns whose domains keep the divisor from 0 (issue 33)
            "SELECT grp, AVG(x / (y + 51)), SUM(y / (x + 1)), MAX(y / (y - 60)) FROM t "
            "GROUP BY grp"]
# what no statement sent to a backend may compute
APPROXIMATE = ("PERCENTILE_APPROX", "APPROX_PERCENTILE", "APPROX_QUANTILE")

# A table deep enough that a drawn percentile's windows hold thousands of values:
# tests/backends/test_spark.py (Sail) and tests/pushdown/test_pushdown.py (PostgreSQL)
# read them, under GROUP BY from a histogram and brackets, as DuckDB's lists do.
DEEP_RULES = parse_rules("""
[defaults]
epsilon_per_query = 0.1
[analysts.ann]
budget = 100
[tables.deep]
[tables.deep.columns]
x = { type = "float", domain = [0, 100] }
a = { type = "int", domain = [0, 10] }
g = { type = "int", keys = [0, 1, 2, 3] }
""")
DEEP_GROUPED = ("SELECT g, MEDIAN(x) FROM deep GROUP BY g",
                "SELECT g, MAX(x), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x) FROM deep "
                "WHERE a > 2 GROUP BY g")


def load_deep(url: str, rows: int = 30_000) -> None:
    """``deep`` into the backend at ``url``: a fifth of the values tie at the median, and
    NULL, NaN, ±inf and values beyond the domain; a NULL key and a key the rules do not
    list."""
    from tests.databases import load_table

    rng = random.Random(11)
    special = [None, math.nan, math.inf, -math.inf, 150.0, -3.0, 100.0, 0.0]
    draws = [rng.random() for _ in range(rows)]
    data = {"x": [rng.choice(special) if u < 0.01 else 50.0 if u < 0.21
                  else round(rng.random() * 100, 2) for u in draws],
            "a": [rng.randint(0, 10) for _ in range(rows)],
            "g": [rng.choice([None, 0, 1, 1, 2, 2, 2, 5]) for _ in range(rows)]}
    load_table(url, "deep", data, {"x": "DOUBLE PRECISION", "a": "INTEGER", "g": "INTEGER"})
