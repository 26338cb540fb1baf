"""Post-processing of one release (proxy.analyze.outer): it reads only released values
and public keys, so it costs no privacy (SPEC §5.3).

An outer query runs in a private in-memory DuckDB (no file or network access) over the
released rows, loaded as the table ``released``; PostgreSQL's semantics are kept by
typing the outer query before it is rendered for DuckDB (integer division stays
integer division). A series limit keeps the groups of the top-N series.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from proxy.analyze.outer import OuterQuery, SeriesLimit
from proxy.errors import QueryCanceled
from proxy.interrupts import checkpoint, stopping
from proxy.pgtypes import postgres_type

DUCKDB_TYPES = {"bigint": "BIGINT", "integer": "INTEGER", "double precision": "DOUBLE",
                "text": "VARCHAR", "boolean": "BOOLEAN", "date": "DATE",
                "timestamp": "TIMESTAMP", "numeric": "DOUBLE"}
ROW = "__idp_row"


def series_limited(limit: SeriesLimit, keys: list[tuple], released: list[list[Any]]
                   ) -> tuple[list[tuple], list[list[Any]]]:
    """The groups whose series (the keys of ``limit.terms``) are among the first
    ``limit.limit`` by the released metric, summed over the other keys; ties broken by
    the order of the keys in the rules (public), as every ordering of released values.
    A NULL series of a term joined with ``=`` ranks, but joins nothing: dropped."""
    totals: dict[tuple, float] = defaultdict(float)
    order: list[tuple] = []
    for key, values in zip(keys, released):
        series = tuple(key[i] for i in limit.terms)
        if series not in totals:
            order.append(series)
        totals[series] += values[limit.aggregate].value or 0
    ranked = sorted(order, key=lambda s: totals[s], reverse=limit.descending)
    kept = set(ranked[: limit.limit])
    pairs = [(key, values) for key, values in zip(keys, released)
             if tuple(key[i] for i in limit.terms) in kept
             and not any(key[i] is null if null is None else key[i] == null
                         for i, null in limit.unmatched)]
    return [key for key, _ in pairs], [values for _, values in pairs]


def run_outer(outer: OuterQuery, columns: list[str], kinds: list[str], rows: list[tuple]
              ) -> tuple[list[str], list[str], list[tuple], list[int | None], dict[int, str]]:
    """The outer query's result over ``rows``: its columns, their PostgreSQL types, its
    rows, the released row each came from (None when rows were merged by DISTINCT) and,
    per result column that is a released column unchanged, that column's name. A cancel
    stops it (QueryCanceled): between its steps, and in its DuckDB by an interrupt."""
    checkpoint()
    tree = sqlglot.parse_one(outer.sql, read="postgres")
    checkpoint()  # each whole-tree step: tenths of a second near the token limit
    traced = not tree.args.get("distinct")
    carried = {}
    for index, item in enumerate(tree.expressions):
        node = item.unalias()
        if isinstance(node, exp.Column) and node.table in ("", outer.alias):
            carried[index] = node.name
    width = len(tree.expressions)
    if traced:
        tree = tree.select(exp.column(ROW, table=outer.alias, quoted=True))
    schema = {"released": {**{name: DUCKDB_TYPES.get(kind.split("(")[0], "VARCHAR")
                              for name, kind in zip(columns, kinds)}, ROW: "BIGINT"}}
    checkpoint()
    annotated = annotate_types(tree, schema=schema)
    checkpoint()
    sql = annotated.sql(dialect="duckdb")
    con = duckdb.connect(":memory:", config={"enable_external_access": False})
    try:
        with stopping(con.interrupt):
            table = exp.Schema(this=exp.to_table("released"), expressions=[
                exp.ColumnDef(this=exp.to_identifier(name, quoted=True),
                              kind=exp.DataType.build(kind))
                for name, kind in schema["released"].items()])
            con.execute(exp.Create(this=table, kind="TABLE").sql(dialect="duckdb"))
            if rows:
                marks = ", ".join("?" for _ in range(len(columns) + 1))
                con.executemany(f"INSERT INTO released VALUES ({marks})",
                                [(*row, number) for number, row in enumerate(rows)])
            cursor = con.execute(sql)
            result = cursor.fetchall()
            described = cursor.description[:width]
    except duckdb.InterruptException:
        raise QueryCanceled("canceling statement due to user request") from None
    finally:
        con.close()
    checkpoint()
    names = [column[0] for column in described]
    types = [postgres_type(str(column[1])) for column in described]
    origins = [row[width] for row in result] if traced else [None] * len(result)
    return names, types, [tuple(row[:width]) for row in result], origins, carried
