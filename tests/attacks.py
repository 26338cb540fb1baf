"""Statements an attacker would send to hold a worker or grow the server's memory, each
under ``max_statement_length`` and (but where the point is to pass it) the token
limit, over the demo's tables (rules/demo.toml): issue 30's acceptance set.

``ATTACKS`` are named, each made by a function of a variant number (a fresh ε hint,
so that neither the answer cache nor the shape cache answers a repeat); ``held_back``
draws random ones from other building blocks, combined and sized at random, for a
seed. ``tests/test_attacks.py`` sends a few over the wire, ``benchmarks/attacker.py``
all of them, with times, memory and cancels measured.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

MAX_TOKENS = 20_000  # proxy.analyze.MAX_TOKENS
MAX_LENGTH = 262_144  # [server] max_statement_length's default
EPSILON = "0.1"


@dataclass(frozen=True)
class Attack:
    name: str
    make: Callable[[int], str]  # variant -> SQL
    what: str  # the construct, for the results table


def hinted(sql: str, variant: int) -> str:
    """``sql`` with a leading ε hint that differs per variant (0.1 + variant·10⁻⁶)."""
    return f"/*+ epsilon={float(EPSILON) + variant * 1e-6:.6f} */ {sql}"


def _repeat(template: Callable[[int], str], joiner: str, count: int) -> str:
    return joiner.join(template(i) for i in range(count))


def _private(sql: Callable[[int], str]) -> Callable[[int], str]:
    return lambda variant: hinted(sql(variant), variant)


VIRTUAL = "(SELECT * FROM people) AS virtual_table"
RELEASE = "(SELECT region, sex, COUNT(*) AS n FROM people GROUP BY 1, 2) AS t"

ATTACKS = [
    Attack("in_list", _private(lambda v: "SELECT COUNT(*) FROM people WHERE age IN ("
                               + _repeat(lambda i: str(i % 120), ", ", 9_900) + ")"),
           "IN list of 9,900 values"),
    Attack("in_list_over_limit", _private(lambda v: "SELECT COUNT(*) FROM people WHERE age IN ("
                                          + _repeat(lambda i: str(i % 120), ",", 80_000) + ")"),
           "IN list of 80,000 values (over the token limit)"),
    Attack("or_chain", _private(lambda v: "SELECT COUNT(*) FROM people WHERE " + _repeat(
        lambda i: f"age = {i % 120}", " OR ", 4_900)), "OR chain of 4,900 comparisons"),
    Attack("and_chain_virtual", _private(lambda v: f"SELECT COUNT(*) FROM {VIRTUAL} WHERE "
                                         + _repeat(lambda i: f"age <> {i}", " AND ", 4_900)),
           "AND chain of 4,900 in a virtual table"),
    Attack("or_between_virtual", _private(lambda v: f"SELECT SUM(income) FROM {VIRTUAL} WHERE "
                                          + _repeat(lambda i: f"income BETWEEN {i} AND {i}.5",
                                                    " OR ", 3_200)),
           "OR of 3,200 BETWEENs in a virtual table"),
    Attack("outer_or_chain", _private(lambda v: f"SELECT * FROM {RELEASE} WHERE "
                                      + _repeat(lambda i: f"n = {i}", " OR ", 4_900)),
           "OR chain of 4,900 over a release"),
    Attack("sum_factors", _private(lambda v: "SELECT SUM(income" + " * 1" * 40 + ") FROM people"),
           "SUM(income * 1 * ... 40 factors)"),
    Attack("sum_plus_chain", _private(lambda v: "SELECT SUM(income" + " + 1" * 9_000
                                      + ") FROM people"), "SUM(income + 1 + ... 9,000 terms)"),
    Attack("sum_plus_chain_virtual", _private(lambda v: "SELECT SUM(income" + " + 1" * 9_000
                                              + f") FROM {VIRTUAL}"),
           "the same in a virtual table"),
    Attack("big_aggregate", _private(lambda v: "SELECT SUM(" + _repeat(
        lambda i: "income * income", " + ", 64) + ") FROM people"),
           "one SUM of 64 products (383 parts)"),
    Attack("case_in_aggregate", _private(lambda v: "SELECT SUM(CASE " + _repeat(
        lambda i: f"WHEN age = {i} THEN {i}", " ", 2_800) + " ELSE 0 END) FROM people"),
           "SUM(CASE of 2,800 branches)"),
    Attack("case_group_by", _private(lambda v: "SELECT CASE " + _repeat(
        lambda i: f"WHEN age = {i} THEN 'k{i}'", " ", 2_800) + " END AS b, COUNT(*) "
                                     "FROM people GROUP BY 1"),
           "GROUP BY a CASE of 2,800 keys"),
    Attack("case_group_by_median", _private(lambda v: "SELECT CASE " + _repeat(
        lambda i: f"WHEN income < {i * 1000} THEN 'k{i}'", " ", 2_400) + " END AS b, "
                                            "MEDIAN(income) FROM people GROUP BY 1"),
           "MEDIAN per group of a 2,400-key CASE"),
    Attack("many_sums", _private(lambda v: "SELECT " + _repeat(
        lambda i: f"SUM(income + {i})", ", ", 1_000) + " FROM people"),
           "1,000 SUM(income + i)"),
    Attack("many_product_sums", _private(lambda v: "SELECT " + _repeat(
        lambda i: f"SUM(income * income + {i})", ", ", 200) + " FROM people"),
           "200 SUM(income * income + i)"),
    Attack("many_sums_under_cap", _private(lambda v: "SELECT " + _repeat(
        lambda i: f"SUM(income + {i})", ", ", 68) + " FROM people"),
           "68 SUM(income + i) (under the cap)"),
    Attack("many_filters", _private(lambda v: "SELECT " + _repeat(
        lambda i: f"COUNT(*) FILTER (WHERE age > {i % 120} AND region = 'north')", ", ", 120)
                                    + " FROM people"), "120 filtered COUNTs"),
    Attack("many_percentiles", _private(lambda v: "SELECT " + _repeat(
        lambda i: f"PERCENTILE_DISC({(i + 1) / 1000}) WITHIN GROUP (ORDER BY income)", ", ",
        900) + " FROM people"), "900 percentiles"),
    Attack("many_columns", _private(lambda v: "SELECT " + _repeat(lambda i: "COUNT(*)", ", ",
                                                                  3_800) + " FROM people"),
           "3,800 result columns"),
    Attack("many_cells", _private(lambda v: "SELECT region, sex, floor(age / 1) * 1 AS a, "
                                  "floor(income / 2000000) * 2000000 AS b, " + _repeat(
                                      lambda i: "COUNT(*)", ", ", 40)
                                  + " FROM people GROUP BY 1, 2, 3, 4"),
           "5,808 groups × 44 columns"),
    Attack("wide_outer", _private(lambda v: "SELECT " + _repeat(lambda i: f"n * {i} + {i}", ", ",
                                                                1_600) + f" FROM {RELEASE}"),
           "outer query of 1,600 computed columns"),
    Attack("many_group_by_terms", _private(lambda v: "SELECT COUNT(*) FROM people GROUP BY "
                                           + _repeat(lambda i: "region", ", ", 4_000)),
           "GROUP BY region × 4,000"),
    Attack("nested_parentheses", _private(lambda v: "SELECT COUNT(*) FROM people WHERE "
                                          + "(" * 5_000 + "age > 3" + ")" * 5_000),
           "5,000 nested brackets"),
    Attack("nested_functions_40", _private(lambda v: "SELECT SUM(" + "abs(" * 40 + "income"
                                           + ")" * 40 + ") FROM people"),
           "40 nested abs()"),
    Attack("nested_functions_30", _private(lambda v: "SELECT SUM(" + "abs(" * 30 + "income"
                                           + ")" * 30 + ") FROM people"),
           "30 nested abs()"),
    Attack("nested_not", _private(lambda v: "SELECT COUNT(*) FROM people WHERE "
                                  + "NOT " * 5_000 + "age > 3"), "5,000 NOTs"),
    Attack("nested_minus", _private(lambda v: "SELECT SUM(" + "- " * 5_000 + "income) FROM people"),
           "5,000 unary minus"),
    Attack("nested_subqueries", _private(lambda v: "SELECT COUNT(*) FROM " + "(SELECT * FROM " * 30
                                         + "people" + ") AS t" * 30),
           "30 nested derived tables"),
    Attack("cte_chain", _private(lambda v: "WITH " + _repeat(
        lambda i: f"a{i} AS (SELECT * FROM {'people' if i == 0 else f'a{i - 1}'})", ", ", 1_500)
                                 + " SELECT COUNT(*) FROM a1499"), "1,500 chained CTEs"),
    Attack("union_arms", _private(lambda v: _repeat(lambda i: "SELECT COUNT(*) FROM people",
                                                    " UNION ALL ", 2_000)),
           "2,000 UNION ALL arms"),
    Attack("huge_number", _private(lambda v: "SELECT COUNT(*) FROM people WHERE income < 1e400"),
           "income < 1e400"),
    # text a backend failed on after the debit (58000), now refused before it (redteam)
    Attack("moment_basic_format", _private(lambda v: "SELECT COUNT(*) FROM visits WHERE "
                                           "visited_at >= '20240101'"),
           "a moment in ISO 8601's basic format"),
    Attack("moment_zone_overflow", _private(lambda v: "SELECT COUNT(*) FROM visits WHERE "
                                            "visited_at >= '0001-01-01T00:00:00+05:00'"
                                            "::timestamptz"),
           "a zone moving a moment before year 1"),
    Attack("substring_bigint", _private(lambda v: "SELECT COUNT(*) FROM people WHERE "
                                        "substring(region, 1, 2147483648) = 'no'"),
           "a substring length beyond PostgreSQL's int"),
    Attack("long_number", _private(lambda v: "SELECT COUNT(*) FROM people WHERE income < 0."
                                   + "0" * 200_000 + "1"), "a 200,000-digit number"),
    Attack("long_string", _private(lambda v: "SELECT COUNT(*) FROM people WHERE region = '"
                                   + "x" * 250_000 + "'"), "a 250,000-character string"),
    Attack("many_statements", lambda v: "; ".join(
        hinted(f"SELECT COUNT(*) FROM people WHERE age > {i}", v * 10_000 + i)
        for i in range(2_000)), "2,000 statements in one message"),
    Attack("heavy_statements", lambda v: "; ".join(
        hinted("SELECT COUNT(*) FROM people WHERE age IN (" + _repeat(
            lambda i: str(i % 120), ",", 9_000 + k) + ")", v * 10 + k) for k in range(7)),
           "7 near-limit IN lists in one message"),
    Attack("catalog_big_value", lambda v: f"SELECT repeat('x', {500_000_000 + v})",
           "catalog: one 500 MB value"),
    Attack("catalog_2mb_row", lambda v: f"SELECT repeat('x', {2_000_000 + v})",
           "catalog: one 2 MB row"),
    Attack("catalog_spilled_sort", lambda v: "SELECT count(*) FROM (SELECT md5(g::text) "
           f"FROM generate_series(1, {20_000_000 + v}) g ORDER BY 1) s",
           "catalog: a sort of 20 M rows spilled to disk"),
    Attack("catalog_many_rows", lambda v: f"SELECT repeat('x', 10000), {v} FROM "
                                          "generate_series(1, 100000)",
           "catalog: 100,000 rows of 10 kB"),
    Attack("catalog_long", lambda v: f"SELECT count(*) + {v} FROM generate_series(1, 1000000000)",
           "catalog: a billion-row count"),
]
BY_NAME = {attack.name: attack for attack in ATTACKS}


# Building blocks of the held-back set: each takes a random source and returns SQL.
def _predicate(rng: random.Random, budget: int) -> str:
    kind = rng.choice(["in", "or", "and", "between", "not"])
    count = rng.randint(1, budget)
    if kind == "in":
        return f"age IN ({', '.join(str(rng.randint(0, 130)) for _ in range(count))})"
    if kind == "or":
        return "(" + " OR ".join(f"age = {rng.randint(0, 130)}" for _ in range(count // 3 + 1)) + ")"
    if kind == "and":
        return " AND ".join(f"income <> {rng.randint(0, 10**7)}" for _ in range(count // 3 + 1))
    if kind == "between":
        return "(" + " OR ".join(f"income BETWEEN {rng.randint(0, 10**6)} AND "
                                 f"{rng.randint(10**6, 10**7)}" for _ in range(count // 5 + 1)) + ")"
    return "NOT " * rng.randint(1, 40) + "age > 3"


def _aggregate(rng: random.Random, index: int) -> str:
    column = rng.choice(["income", "age"])
    expression = column
    for _ in range(rng.randint(0, 12)):
        operator = rng.choice(["+", "-", "*"])
        operand = rng.choice([column, "age", str(rng.randint(1, 9)), f"{rng.random():.3f}"])
        expression = f"({expression} {operator} {operand})" if rng.random() < 0.3 \
            else f"{expression} {operator} {operand}"
    if rng.random() < 0.3:
        expression = f"CASE WHEN age > {rng.randint(0, 120)} THEN {expression} ELSE {index} END"
    kind = rng.choice(["SUM", "AVG", "MAX", "MIN", "COUNT", "STDDEV", "MEDIAN"])
    call = f"{kind}({expression})"
    if rng.random() < 0.3:
        call += f" FILTER (WHERE age > {rng.randint(0, 120)})"
    return call


def held_back(seed: int, variant: int = 0) -> str:
    """A random statement of the building blocks: aggregates (up to a few hundred, with
    random expressions), a WHERE of up to thousands of terms, maybe a GROUP BY (a CASE
    of up to 2,000 keys, bins), maybe in a virtual table or under an outer query, sized
    at random up to the token limit."""
    rng = random.Random(seed)
    aggregates = [_aggregate(rng, i) for i in range(rng.choice([1, 3, 20, 80, 300]))]
    where = " AND ".join(_predicate(rng, rng.choice([10, 300, 3_000, 8_000]))
                         for _ in range(rng.randint(0, 3)))
    group = ""
    if rng.random() < 0.5:
        keys = rng.choice([3, 50, 500, 2_000])
        group = ("CASE " + " ".join(f"WHEN income < {i * 997} THEN 'k{i}'" for i in range(keys))
                 + " END" if rng.random() < 0.5 else f"floor(age / {rng.randint(1, 30)}) * 1")
    source = VIRTUAL if rng.random() < 0.3 else "people"
    items = ([f"{group} AS g"] if group else []) + aggregates
    sql = f"SELECT {', '.join(items)} FROM {source}"
    sql += f" WHERE {where}" if where else ""
    sql += " GROUP BY 1" if group else ""
    if rng.random() < 0.2:
        sql = f"SELECT * FROM ({sql}) AS outer_query WHERE g IS NOT NULL" if group else \
            f"SELECT * FROM ({sql}) AS outer_query"
    return hinted(sql[:MAX_LENGTH - 40], variant)
