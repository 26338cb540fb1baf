"""The backend contract: the table t and the queries whose statistics every backend
computes the same (tests/pushdown/test_pushdown.py: DuckDB and PostgreSQL against a direct
computation; tests/backends/test_spark.py and tests/backends/test_spark_real.py: Spark against DuckDB),
none of them approximately."""

from __future__ import annotations

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
