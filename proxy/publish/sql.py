"""The SQL of a release: microaggregation in the backend (SPEC §6).

Written once in DuckDB's dialect and rendered for the backend by sqlglot. All of it
runs in one transaction over the protected table's snapshot:

1. ``ROWS``: each row's identity (rowid/ctid), the key column if asked, and per
   released column j its normalised value o_j (NaN as NULL: in no cluster) and its rank
   r_j among the column's non-null values (ties broken by the row identity) — one sort
   per column, in the backend.
2. Per column, ``sum_j``: per cluster c = min(⌊r/k⌋, last) (k consecutive ranks, the
   last cluster absorbing the remainder) its size, sum and three smallest and three
   largest values (normalised to the domain). Only these summaries are read back, a batch
   of clusters at a time.
3. ``noisy_j``: the released centroid of each cluster, written back by the proxy.
4. The output: every row of ``ROWS`` joined to its clusters' released centroids, each in
   its source column's name and type.
"""

from __future__ import annotations

from decimal import Decimal

import sqlglot
from sqlglot import exp

from proxy.pushdown.values import clamped_to_domain

WRITTEN_IN = "duckdb"  # the dialect the statements here are written in
ROWS = "idp_release_rows"
# The integer types by their PostgreSQL names, with their largest value (bigint holds
# every value: the released ones are within ±MAGNITUDE_CAP).
_INTEGERS = {"smallint": 2 ** 15 - 1, "integer": 2 ** 31 - 1, "bigint": None}


def summary_table(j: int) -> str:
    return f"idp_release_sum{j}"


def noisy_table(j: int) -> str:
    return f"idp_release_noisy{j}"


def _q(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=WRITTEN_IN)


def render(sql: str, dialect: str) -> str:
    """``sql`` for the backend's ``dialect`` (as written where it is the same)."""
    return sql if dialect == WRITTEN_IN else sqlglot.transpile(sql, read=WRITTEN_IN,
                                                               write=dialect)[0]


def rows_table(table: str, columns: list[str], key: str | None, row_identity: str) -> str:
    """Each row's identity, key and per column j its value o_j — normalised without a
    domain (NaN as NULL, ±inf and beyond to ±MAGNITUDE_CAP: ``clamped_to_domain``), so ranks,
    summaries and the information loss are finite — and its rank r_j among the non-null
    o_j (the domain clamps inside ``summaries``: the ranking is the raw values' order)."""
    inner = [f"{row_identity} AS rid"] + ([f"{_q(key)} AS k"] if key else [])
    outer = ["rid"] + (["k"] if key else [])
    for j, name in enumerate(columns):
        inner.append(f"{_normalised(_q(name))} AS o{j}")
        outer += [f"o{j}", (f"CASE WHEN o{j} IS NULL THEN NULL ELSE row_number() OVER ("
                            f"PARTITION BY o{j} IS NULL ORDER BY o{j}, rid) - 1 END AS r{j}")]
    return (f"CREATE TEMP TABLE {ROWS} AS SELECT {', '.join(outer)} FROM "
            f"(SELECT {', '.join(inner)} FROM {_q(table)}) AS t")


def _normalised(value: str, lower: float | None = None, upper: float | None = None
                ) -> str:
    """``proxy.pushdown.values.clamped_to_domain`` as DuckDB SQL text."""
    return clamped_to_domain(sqlglot.parse_one(value, read=WRITTEN_IN), lower, upper).sql(
        dialect=WRITTEN_IN)


def maxima(table: str, columns: list[str]) -> str:
    """Each column's largest normalised value (for --alpha: NaN skipped, at most
    MAGNITUDE_CAP), read before the release."""
    parts = ", ".join(f"max({_normalised(_q(name))})" for name in columns)
    return f"SELECT {parts} FROM {_q(table)}"


def counts(width: int) -> str:
    """Non-null count and sample variance (for the SSE) of every released column."""
    parts = [f"count(o{j}), var_samp(o{j})" for j in range(width)]
    return f"SELECT {', '.join(parts)} FROM {ROWS}"


def last_cluster(n: int, k: int) -> int:
    return max(n // k - 1, 0)


def _cluster(j: int, k: int, last: int, prefix: str = "") -> str:
    rank = f"{prefix}r{j}"  # LEAST skips NULLs: a NULL rank must stay in no cluster
    return (f"CASE WHEN {rank} IS NULL THEN NULL ELSE "
            f"LEAST(CAST(({rank} - {rank} % {k}) / {k} AS BIGINT), {last}) END")


def summaries(j: int, k: int, n: int, lower: float | None, upper: float | None) -> str:
    last = last_cluster(n, k)
    end = f"(CASE WHEN c = {last} THEN {n - 1} ELSE c * {k} + {k - 1} END)"
    picks = ", ".join(f"max(CASE WHEN {side} = {place} THEN v END) AS {name}"
                      for side, place, name in (("p", 0, "s1"), ("p", 1, "s2"), ("p", 2, "s3"),
                                                ("q", 2, "l3"), ("q", 1, "l2"), ("q", 0, "l1")))
    return (f"CREATE TEMP TABLE {summary_table(j)} AS SELECT c, count(*) AS size, "
            f"sum(v) AS total, {picks} FROM (SELECT v, c, r - c * {k} AS p, {end} - r AS q "
            f"FROM (SELECT {_normalised(f'o{j}', lower, upper)} AS v, r{j} AS r, "
            f"{_cluster(j, k, last)} AS c FROM {ROWS} WHERE r{j} IS NOT NULL) AS a) AS b "
            "GROUP BY c")


def summary_batch(j: int, first: int, stop: int) -> str:
    return (f"SELECT c, size, total, s1, s2, s3, l3, l2, l1 FROM {summary_table(j)} "
            f"WHERE c >= {first} AND c < {stop} ORDER BY c")


def create_noisy(j: int) -> str:
    return f"CREATE TEMP TABLE {noisy_table(j)} (c BIGINT, v DOUBLE)"


def _typed(value: str, kind: str, integer: bool) -> str:
    """A released value (a double) in its source column's type ``kind`` (PostgreSQL
    spelling), by post-processing: integer types rounded and clamped to their range,
    numeric(p,s) clamped to its precision, real cast; ``integer`` (the rules say int)
    rounds too. Other types (double precision, numeric without a precision) stay
    double precision."""
    base, _, modifier = kind.partition("(")
    if integer or base in _INTEGERS:
        value = f"round({value})"
    if base in _INTEGERS:
        limit = _INTEGERS[base]
    elif base == "numeric" and modifier:
        precision, scale = (int(part) for part in modifier.rstrip(")").split(","))
        limit = format(Decimal(10) ** (precision - scale) - Decimal(10) ** -scale, "f")
    else:
        return f"CAST({value} AS real)" if base == "real" else value
    if limit is not None:
        value = (f"CASE WHEN {value} > {limit} THEN {limit} WHEN {value} < -{limit} "
                 f"THEN -{limit} ELSE {value} END")
    return f"CAST({value} AS {kind})"


def masked(width: int, k: int, lasts: list[int], integer: list[bool], kinds: list[str],
           key: bool) -> str:
    """Every row: rid, [k], m_j (the released value in its column's type ``kinds[j]``:
    ``_typed``) and o_j (the original)."""
    parts = ["r.rid"] + (["r.k"] if key else [])
    joins = []
    for j in range(width):
        parts += [f"{_typed(f'n{j}.v', kinds[j], integer[j])} AS m{j}", f"r.o{j} AS o{j}"]
        joins.append(f"LEFT JOIN {noisy_table(j)} AS n{j} ON n{j}.c = "
                     f"{_cluster(j, k, lasts[j], 'r.')}")
    return f"SELECT {', '.join(parts)} FROM {ROWS} AS r {' '.join(joins)}"


def output(masked_rows: str, columns: list[str], key: str | None) -> str:
    """The release as delivered: the key (if asked) and the masked columns, in the
    table's row order."""
    parts = ([f"k AS {_q(key)}"] if key else []) + [f"m{j} AS {_q(name)}"
                                                    for j, name in enumerate(columns)]
    return f"SELECT {', '.join(parts)} FROM ({masked_rows}) AS s ORDER BY rid"


def mean_sse(masked_rows: str, variances: list[float | None]) -> str:
    """Seed 002 eq. (4)–(5): the mean over records of d(r, r′)², with
    d = (1/m)·√Σⱼ (dⱼ/σⱼ²)² and σⱼ² the column's sample variance (a column without
    variance, or a NULL value, adds 0)."""
    width = len(variances)
    terms = [f"coalesce(power((m{j} - o{j}) / {variance!r}, 2), 0)"
             for j, variance in enumerate(variances) if variance]
    return (f"SELECT avg({' + '.join(terms) or '0'}) / {width * width} "
            f"FROM ({masked_rows}) AS s")


def drop_all(width: int) -> list[str]:
    return [f"DROP TABLE {name}" for j in range(width)
            for name in (summary_table(j), noisy_table(j))] + [f"DROP TABLE {ROWS}"]
