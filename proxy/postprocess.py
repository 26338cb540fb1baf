"""Post-processing of releases (proxy.analyze.outer): it reads only released values and
public keys, so it costs no privacy (SPEC §5.3).

An outer query runs in an in-memory DuckDB (no file or network access), on a connection
of its own, over the released rows, loaded as its TEMP table ``released`` (further one-row releases of a CROSS
JOIN as ``released_1`` …); the outer query can name nothing else, as its analysis lets
only value functions and windows through (``proxy.analyze.outer``); PostgreSQL's semantics are kept by
typing the outer query before it is rendered for DuckDB (integer division stays
integer division). A series limit keeps the groups of the top-N series. What is sent
for an outer query over releases of given columns is prepared once (``_prepared``).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.annotate_types import annotate_types

from proxy.analyze.group_keys import default_name
from proxy.analyze.ordering import folded_name
from proxy.analyze.outer import OuterQuery, SeriesLimit, release_table, windowed
from proxy.analyze.time_keys import formatted, to_char_format
from proxy.errors import ProxyError, QueryCanceled
from proxy.interrupts import checkpoint, stopping
from proxy.pgtypes import postgres_type
from proxy.postbounds import Bounds, Budget, ReleasedTable
from proxy.result_types import common_type, expression_type

DUCKDB_TYPES = {"bigint": "BIGINT", "integer": "INTEGER", "smallint": "SMALLINT",
                "double precision": "DOUBLE", "real": "DOUBLE", "varchar": "VARCHAR",
                "text": "VARCHAR", "boolean": "BOOLEAN", "date": "DATE",
                "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ", "numeric": "DOUBLE"}
ROW = "__idp_row"


def _postgres_sum(annotator, node: exp.Sum) -> exp.Sum:
    """SUM typed as PostgreSQL types it: numeric over bigint (sqlglot keeps bigint, so a
    released count divided by the counts' SUM(…) OVER () was rendered as DuckDB's
    integer division and every share came back 0); bigint over smallint and integer."""
    annotator._annotate_by_args(node, "this", "expressions", promote=True)
    if node.this.is_type(exp.DataType.Type.BIGINT):
        annotator._set_type(node, exp.DataType.Type.DECIMAL)
    return node


# sqlglot's own type rules (its default dialect's), SUM's as PostgreSQL's
_TYPING = {**Dialect.get_or_raise(None).EXPRESSION_METADATA,
           exp.Sum: {"annotator": _postgres_sum}}
MAX_ROWS = 250_000  # of an outer query's result: joined releases can multiply their rows


class NotComputed(ProxyError):
    """The outer query failed in the post-processing engine (one line, 22000)."""

    sqlstate = "22000"


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


_ENGINE: tuple[int, duckdb.DuckDBPyConnection] | None = None
# PostgreSQL's to_char, as time_keys formats it (DuckDB's strftime has other fields; a
# timestamptz is cast to the wall clock of the session's zone, set on each connection)
_TO_CHAR = "idp_to_char"
_STARTING = threading.Lock()


def _formatted(moment, form: str) -> str | None:
    """``time_keys.formatted`` of a moment Python holds; NULL for NULL and for one beyond
    year 9999 or ±infinity, which DuckDB hands over as text (``to_timestamp`` of a
    released number far beyond the years; PostgreSQL's to_char of ±infinity is NULL)."""
    return formatted(moment, form) if isinstance(moment, dt.date) else None


def _connection() -> duckdb.DuckDBPyConnection:
    """A connection of its own to this process's post-processing database (in memory,
    no file or network access): a cursor takes a millisecond where a new database takes
    tens; its TEMP tables no other connection sees, and they go with it. Made under a
    lock (sessions run in threads); a forked worker opens its own database."""
    global _ENGINE
    with _STARTING:
        if _ENGINE is None or _ENGINE[0] != os.getpid():
            engine = duckdb.connect(":memory:", config={"enable_external_access": False})
            engine.create_function(_TO_CHAR, _formatted, ["TIMESTAMP", "VARCHAR"], "VARCHAR",
                                   null_handling="special")  # it may give NULL
            _ENGINE = (os.getpid(), engine)
        return _ENGINE[1].cursor()


# per release: its 95 % bounds by column, row by row; its columns of additive noise;
# whether its rows are the public keys'
ReleaseBounds = list[tuple[dict[str, list[float | None]], frozenset[str], bool]]


# Rows a statement of ``_insert``'s fallback writes: DuckDB's executemany runs one
# statement per row (8,500 released rows of TPC-H Q20's stage: 26 s); a few hundred
# parameters a statement is faster than either extreme (0.5-1.5 s for the 8,500).
_INSERTED = 200
# Python types whose values a list parameter binds as each binds alone, a column at a
# time: a list of one such type is a LIST of the type's own DuckDB type, cast like it.
_LISTED = (int, float, str, bool)
# Rows from which ``_arrow_inserted`` is faster than the list parameters (its table's
# registration takes about half a millisecond more: 1.1 against 0.6 ms for 10 rows,
# 1.5 against 2.6 ms for 200)
_ARROW_ROWS = 100


def _insert(con: duckdb.DuckDBPyConnection, table: str, types: list[str], rows: list[tuple]
            ) -> None:
    """``rows`` into ``table`` (its columns of DuckDB ``types``): each column as one list
    parameter, unnested, where its values are of one type of ``_LISTED`` (or NULL) —
    one statement, about 0.04 s for Q20's 8,500 rows where ``_INSERTED`` rows a
    statement took 0.38 s; else ``_INSERTED`` rows a statement, the values bound as
    executemany binds them. Either way each value is cast from its own type's to its
    column's: the same rows."""
    columns = [list(column) for column in zip(*rows)]
    if all(len(kinds) <= 1 and kinds <= set(_LISTED) for kinds in (
            {type(value) for value in column if value is not None} for column in columns)):
        if len(rows) >= _ARROW_ROWS and _arrow_inserted(con, table, types, columns):
            return
        con.execute(f"INSERT INTO {table} SELECT " + ", ".join(
            f"UNNEST(CAST(? AS {kind}[]))" for kind in types), columns)
        return
    marks = "(" + ", ".join("?" for _ in types) + ")"
    for at in range(0, len(rows), _INSERTED):
        chunk = rows[at:at + _INSERTED]
        con.execute(f"INSERT INTO {table} VALUES " + ", ".join([marks] * len(chunk)),
                    [value for row in chunk for value in row])


def _arrow_inserted(con: duckdb.DuckDBPyConnection, table: str, types: list[str],
                    columns: list[list]) -> bool:
    """``_insert``'s columns of one ``_LISTED`` type each (or NULL) as an Arrow table the
    connection reads, each column cast to its type: the same values as the list
    parameters (a Python int an int64, a float a double, a str a string, as DuckDB binds
    them), about a fifth of their time (TPC-H Q20's 8,500 rows: 0.01 against 0.05 s).
    False where Arrow's Python package is not installed or a column does not convert
    (an integer past 64 bits): the list parameters then."""
    try:
        import pyarrow
    except ImportError:  # pragma: no cover - installed with the tests' pandas
        return False
    try:
        arrays = pyarrow.table({f"c{i}": pyarrow.array(column)
                                for i, column in enumerate(columns)})
    except (pyarrow.ArrowException, OverflowError):
        return False
    view = f"_idp_rows_of_{table}"
    con.register(view, arrays)
    try:
        con.execute(f"INSERT INTO {table} SELECT " + ", ".join(
            f"CAST(c{i} AS {kind})" for i, kind in enumerate(types)) + f" FROM {view}")
    finally:
        con.unregister(view)
    return True


def run_outer(outer: OuterQuery, releases: list[tuple[list[str], list[str], list[tuple]]],
              bounds: ReleaseBounds | None = None
              ) -> tuple[list[str], list[str], list[tuple], list[tuple[int, ...] | None],
                         dict[int, tuple[int, str]], dict[int, list[float | None]]]:
    """The outer query's result over the released rows: ``releases`` holds, for each
    table it reads (``outer.aliases``), its columns, their PostgreSQL types and rows.
    Returned: its columns, their PostgreSQL types, its rows, the row of each release
    each came from (None when rows were merged: DISTINCT, MAX(…) of one row), per result
    column that is a released column unchanged, (its release, its name), and, given the
    releases' ``bounds``, the 95 % bounds of the other columns where a sound rule gives
    one (``proxy.postbounds``), row by row, by index. A cancel stops it (QueryCanceled):
    between its steps, and in its DuckDB by an interrupt. A value its
    SQL cannot compute (an integer overflow 22000, SQRT of a negative released value
    2201F) fails the statement in one line; the noise was drawn, so the ε stays spent
    (docs/clients.md). A division by a released 0 is NULL (``_failing_as_postgresql``)."""
    checkpoint()
    prepared = _prepared(outer, releases, bounds)
    width, intervals = prepared.width, prepared.intervals
    con = _connection()
    try:
        with stopping(con.interrupt):
            # its timestamptz values read and shown in the session's zone, as
            # PostgreSQL's (an IANA name, proxy.zones; DuckDB's default is the machine's)
            con.execute(f"SET TimeZone = '{outer.zone}'")
            for constant in prepared.constants:
                con.execute(constant)
            for index, ((name, types, create), (columns, _, rows)) in enumerate(
                    zip(prepared.tables, releases)):
                con.execute(create)
                if rows:
                    spreads = [bounds[index][0][columns[j]] for j in prepared.bounded[index]] \
                        if bounds else []
                    _insert(con, name, list(types),
                            [(*row, number, *(spread[number] for spread in spreads))
                             for number, row in enumerate(rows)])
            cursor = con.execute(prepared.sql)
            result = cursor.fetchmany(MAX_ROWS + 1)
            if len(result) > MAX_ROWS:
                raise NotComputed(f"{outer.what} gives more than {MAX_ROWS:,} rows; join the "
                                  "subqueries on their keys", "54000")
            described = cursor.description[:width]
    except duckdb.InterruptException:
        raise QueryCanceled("canceling statement due to user request") from None
    except duckdb.Error as exc:
        reason = re.sub(r"^[\w ]*Error: | in expression .*$", "",
                        str(exc).split("\n")[0].split(". ")[0])
        raise NotComputed(f"{outer.what} could not be computed on the released values: "
                          f"{reason}", _FAILURES.get(reason.lower())) from None
    finally:
        con.close()
    checkpoint()
    names = [column[0] for column in described]
    spans = {index for index, column in enumerate(described)
             if str(column[1]).upper() == "INTERVAL"}
    if not spans <= prepared.spans:
        # (found on the row of NULLs that types the result, before the debit)
        raise NotComputed(f"{outer.what} gives an interval other than a difference of two "
                          "released moments, which is not supported; select MAX(t) - MIN(t) "
                          "or the moments themselves")
    # as PostgreSQL types the outer query over the released columns' types, where
    # proxy.result_types types its expression; else as the engine typed it; a
    # difference of two released moments an interval (PostgreSQL's timestamp - timestamp,
    # days and a time of day, proxy.wire.types)
    types = ["interval" if index in spans else typed or postgres_type(str(column[1]))
             for index, (typed, column) in enumerate(zip(prepared.types, described))]
    traces = len(outer.aliases) if prepared.traced else 0
    origins = [tuple(row[width:width + traces]) for row in result] if prepared.traced \
        else [None] * len(result)
    derived = {index: [_spread(row[index], row[width + traces + 2 * k],
                               row[width + traces + 2 * k + 1]) for row in result]
               for k, index in enumerate(intervals)}
    return names, types, [tuple(row[:width]) for row in result], origins, \
        dict(prepared.carried), derived


@dataclass(frozen=True)
class _Prepared:
    """What ``run_outer`` sends for an outer query over releases of given columns: its
    statement for DuckDB, the release tables (name, column types, CREATE statement) and,
    per release, its columns with bounds; its width, whether its rows trace back to
    the releases', the released columns it carries and the items given derived
    bounds (``_intervals``); the statements of its constant parts (``_constants``)."""

    sql: str
    tables: tuple[tuple[str, tuple[str, ...], str], ...]
    bounded: tuple[tuple[int, ...], ...]
    width: int
    traced: bool
    carried: dict[int, tuple[int, str]]
    intervals: tuple[int, ...]
    constants: tuple[str, ...] = ()
    types: tuple[str | None, ...] = ()  # per column, its PostgreSQL type (``_pg_types``)
    # the columns that are a difference of two released columns (``MAX(t) - MIN(t)``):
    # where those are moments, an interval, which is answered (any other is refused)
    spans: frozenset[int] = frozenset()


_PREPARED_KEPT = 256
_prepared_kept: OrderedDict[tuple, _Prepared] = OrderedDict()
_preparing = threading.Lock()


def _prepared(outer: OuterQuery, releases: list[tuple[list[str], list[str], list[tuple]]],
              bounds: ReleaseBounds | None) -> _Prepared:
    """``_Prepared`` of the outer query, kept per what it is made of (the outer query's
    text and aliases, the releases' columns and types, which of their columns have
    bounds, their additive columns and whether their rows are the public keys'): no
    released value, so the same for every answer of a plan; parsing, typing, bounding
    and rendering it again was most of the proxy's own time of TPC-H Q14's answer."""
    bounded = tuple(tuple(j for j, name in enumerate(columns) if name in bounds[i][0])
                    if bounds else () for i, (columns, *_) in enumerate(releases))
    key = (outer.sql, outer.aliases, tuple((tuple(columns), tuple(kinds))
                                           for columns, kinds, _ in releases), bounded,
           tuple((frozenset(b[1]), b[2]) for b in bounds) if bounds else None)
    with _preparing:
        kept = _prepared_kept.get(key)
        if kept is not None:
            _prepared_kept.move_to_end(key)
            return kept
    tree = sqlglot.parse_one(outer.sql, read="postgres").transform(_to_char)
    _ordered_by_position(tree)
    checkpoint()  # each whole-tree step: tenths of a second near the token limit
    sources = [tree.args["from_"].this, *(join.this for join in tree.args.get("joins") or [])
               ] if tree.args.get("from_") else []
    # a release's rows are traced where the query reads its table itself and merges no
    # rows; one read inside a step (a MODE's arg-max) is not, and its columns carry no
    # bound, while the others' keep theirs
    merged = tree.args.get("distinct") or not all(windowed(node)
                                                   for node in tree.find_all(exp.AggFunc))
    read = {source.alias_or_name: source.name for source in sources
            if isinstance(source, exp.Table)}
    traced = tuple(not merged and read.get(alias) == release_table(i)
                   for i, alias in enumerate(outer.aliases))
    carried = {}
    for index, item in enumerate(tree.expressions):
        node = item.unalias()
        if not isinstance(node, exp.Column):
            continue
        owners = [i for i, (alias, (columns, *_)) in enumerate(zip(outer.aliases, releases))
                  if node.table == alias or (not node.table and node.name in columns)]
        if len(owners) == 1:
            carried[index] = (owners[0], node.name)
    for item in tree.selects:  # PostgreSQL's names, not the engine's (a UNION: its first's)
        if not isinstance(item, (exp.Alias, exp.Column)):
            item.replace(exp.alias_(item.copy(), default_name(item), quoted=True))
    width = len(tree.selects)
    types = _pg_types(tree, outer.aliases, releases)
    spans = frozenset(index for index, item in enumerate(tree.selects)
                      if isinstance(item.unalias().unnest(), exp.Sub) and all(
                          isinstance(side.unnest(), exp.Column)
                          for side in (item.unalias().unnest().this,
                                       item.unalias().unnest().expression)))
    if any(traced):
        tree = tree.select(*[exp.column(ROW, table=alias, quoted=True) if kept
                             else exp.cast(exp.null(), "BIGINT")
                             for alias, kept in zip(outer.aliases, traced)])
    schema = {release_table(i): {**{name: DUCKDB_TYPES.get(kind.split("(")[0], "VARCHAR")
                                    for name, kind in zip(columns, kinds)}, ROW: "BIGINT",
                                 **{_bound_column(j): "DOUBLE" for j in bounded[i]}}
              for i, (columns, kinds, _) in enumerate(releases)}
    checkpoint()
    annotated = annotate_types(tree, schema=schema, expression_metadata=_TYPING)
    checkpoint()
    intervals = _intervals(annotated, width, releases, bounds, bounded, carried)
    checkpoint()
    _refused_as_postgresql(annotated)
    _integer_division(annotated)
    _failing_as_postgresql(annotated)  # after the bounds were read
    tables = tuple((name, tuple(types.values()), exp.Create(
        this=exp.Schema(this=exp.to_table(name), expressions=[
            exp.ColumnDef(this=exp.to_identifier(column, quoted=True),
                          kind=exp.DataType.build(kind)) for column, kind in types.items()]),
        kind="TABLE", properties=exp.Properties(expressions=[exp.TemporaryProperty()])
    ).sql(dialect="duckdb")) for name, types in schema.items())
    constants = tuple(exp.select(node.copy()).sql(dialect="duckdb")
                      for node in _constants(annotated))
    prepared = _Prepared(annotated.sql(dialect="duckdb", copy=False),  # this call's own tree
                         tables, bounded, width, any(traced), carried, tuple(intervals),
                         constants, types, spans)
    if len(outer.sql) <= _KEPT_LENGTH:
        with _preparing:
            _prepared_kept[key] = prepared
            _prepared_kept.move_to_end(key)
            while len(_prepared_kept) > _PREPARED_KEPT:
                _prepared_kept.popitem(last=False)
    return prepared


def _pg_types(tree: exp.Expression, aliases: Sequence[str],
              releases: list[tuple[list[str], list[str], list[tuple]]]
              ) -> tuple[str | None, ...]:
    """Each result column's type as PostgreSQL types the outer query (proxy.result_types)
    over the released columns' types, read before the tree is made DuckDB's; a UNION's
    column the common type of its branches'; None where it is not typed there."""
    kinds = dict(zip(aliases, (dict(zip(columns, kinds)) for columns, kinds, _ in releases)))
    # a step the query reads (an outer query over one post-processed itself, ``_stacked``:
    # ``WITH _idp_step AS (…) SELECT … FROM _idp_step AS alias``): its columns' types
    steps = {cte.alias_or_name: cte.this for cte in (tree.args.get("with_") or exp.With())
             .expressions if isinstance(cte.this, exp.Select)}
    for source in ([tree.args["from_"].this, *(join.this for join in tree.args.get("joins")
                                               or [])] if steps and tree.args.get("from_")
                   else []):
        if isinstance(source, exp.Table) and source.name in steps:
            body = steps[source.name]
            kinds[source.alias_or_name] = {
                item.alias_or_name: kind for item, kind in
                zip(body.selects, _pg_types(body, aliases, releases)) if kind is not None}

    def of_column(node: exp.Column) -> str | None:
        if node.table:
            return kinds[node.table].get(node.name) if node.table in kinds else None
        found = [k[node.name] for k in kinds.values() if node.name in k]
        return found[0] if len(found) == 1 else None

    def branches(node: exp.Expression) -> list[list[exp.Expression]]:
        if isinstance(node, exp.SetOperation):
            return branches(node.this) + branches(node.expression)
        if isinstance(node, exp.Subquery):
            return branches(node.this)
        return [node.selects]

    columns = zip(*branches(tree))
    typed = []
    for items in columns:
        found = [expression_type(item.unalias(), of_column) for item in items]
        typed.append(found[0] if len(set(found)) == 1 else common_type(found))
    return tuple(typed)


def _to_char(node: exp.Expression) -> exp.Expression:
    """TO_CHAR of a released moment, through ``_TO_CHAR``. Of anything else (a count,
    text: PostgreSQL's number formats are not written here) it fails on the typing
    row of NULLs, before any debit, by the argument's type alone."""
    if not isinstance(node, exp.TimeToStr):
        return node
    cast = exp.cast(node.this, "timestamp")
    cast.meta["moments_only"] = True  # taken for moments alone: not the analyst's cast
    moment = exp.Case().when(
        exp.func("typeof", node.this.copy()).isin(*_MOMENT_TYPES), cast).else_(
        exp.func("error", exp.Literal.string("TO_CHAR takes a date or timestamp here")))
    return exp.Anonymous(this=_TO_CHAR, expressions=[
        moment, exp.Literal.string(to_char_format(node))])


_MOMENT_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE")

_VALUES = (exp.Func, exp.Binary, exp.Unary, exp.Cast)  # nodes that compute a value
_NO_CONSTANT = (exp.Column, exp.AggFunc, exp.Window, exp.Subquery, exp.Select, exp.Star)


def _constants(tree: exp.Expression) -> list[exp.Expression]:
    """The largest parts of the outer query that read nothing (``CAST('x' AS integer)``
    in a branch of ``CASE WHEN COUNT(*) > 100 …``): PostgreSQL computes these while it
    plans, and fails there whatever the rows; computed before the releases are read
    (``run_outer``), they fail the statement before any debit, not after it when the
    branch is taken (the review of 2026-11-29)."""
    found: list[exp.Expression] = []
    stack = [tree]  # not recursive: an OR of thousands of released keys is deep
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Window) or (isinstance(node, exp.Anonymous)
                                            and node.name.lower() == "error"):
            continue  # ROW_NUMBER() reads its window; a failing branch's own error()
        if isinstance(node, _VALUES) and not isinstance(node, exp.Connector) \
                and not any(isinstance(inner, _NO_CONSTANT) for inner in node.walk()):
            found.append(node)
            continue
        stack.extend(node.iter_expressions())
    return found


# PostgreSQL's errors where DuckDB gives NaN or ±infinity (SQRT(-1), LN(0), 1.0 / 0):
# the message, and its SQLSTATE for ``run_outer``'s one line
_FAILURES = {"division by zero": "22012", "value out of range: overflow": "22003",
             "cannot take square root of a negative number": "2201F",
             "cannot take logarithm of zero": "2201E",
             "cannot take logarithm of a negative number": "2201E",
             "zero raised to a negative power is undefined": "2201F",
             "a negative number raised to a non-integer power yields a complex result":
                 "2201F"}


def _ordered_by_position(tree: exp.Expression) -> None:
    """ORDER BY a result column's name as its position: DuckDB's names ignore case, even
    quoted, so ``ORDER BY "N"`` beside an output ``n`` sorted by either (the review of
    2026-11-29); PostgreSQL folds an unquoted name to lower case and matches exactly."""
    if not isinstance(tree, exp.Select) or tree.args.get("order") is None:
        return
    names = [folded_name(item.args["alias"]) if isinstance(item, exp.Alias) else
             folded_name(item.this) if isinstance(item, exp.Column) else None
             for item in tree.expressions]
    for ordered in tree.args["order"].expressions:
        target = ordered.this
        if isinstance(target, exp.Column) and not target.table \
                and names.count(folded_name(target.this)) == 1:
            target.replace(exp.Literal.number(names.index(folded_name(target.this)) + 1))



def _integer_division(tree: exp.Expression) -> None:
    """``/`` of two integers is PostgreSQL's integer division (toward zero), DuckDB's
    ``//``: its ``/`` divided as doubles, so ``COUNT(*) / 7 / 2.0`` was 1428.57 where
    PostgreSQL answers 1428.5, and a result column cast back to an integer rounded
    (20 / 8 came back 3, not 2; the review of 2026-11-29). Innermost first, each
    quotient typed as its operands' wider integer, which the one above it reads."""
    for node in reversed(list(tree.find_all(exp.Div))):
        left, right = node.this.type, node.expression.type
        if not (node.args.get("typed") and left and right and left.is_type(*_INTEGERS)
                and right.is_type(*_INTEGERS)):
            continue
        quotient = exp.IntDiv(this=node.this, expression=node.expression)
        quotient.type = left if _INTEGERS.index(left.this) >= _INTEGERS.index(right.this) \
            else right
        node.replace(quotient)


def _refused_as_postgresql(tree: exp.Expression) -> None:
    """Refuse what PostgreSQL fails on whatever the released values, where DuckDB
    answers or fails only on some: NTH_VALUE(v, n) of a constant n ≤ 0 (22016; DuckDB
    gave NULL), TRUE or FALSE compared with a number (42883: ``HAVING COUNT(*) = TRUE``
    was answered), and a cast of a number PostgreSQL has no cast for (42846: to a date,
    time, interval, bytea, uuid, array or json; to boolean from any but an integer),
    which DuckDB binds over the row of NULLs that types the answer before the debit,
    then fails on the released value (``CAST(COUNT(*) AS date)`` was charged, then
    failed: the review of 2026-11-29). Every outer query is prepared on that row first."""
    for compared in tree.find_all(*_COMPARED):
        sides = (compared.this, compared.expression)
        numbers = [side.type for side in sides if not isinstance(side, exp.Boolean)
                   and side.type is not None
                   and side.type.is_type(*exp.DataType.NUMERIC_TYPES)]
        if numbers and any(isinstance(side, exp.Boolean) for side in sides):
            raise NotComputed(f"operator does not exist: "
                              f"{numbers[0].sql(dialect='postgres').lower()} "
                              f"{_COMPARED[type(compared)]} boolean", "42883")
    for nth in tree.find_all(exp.NthValue):  # PostgreSQL's error, whatever the rows
        offset = nth.args.get("offset")
        if isinstance(offset, exp.Literal) and not offset.is_string \
                and offset.name.lstrip("-").isdigit() and int(offset.name) <= 0:
            raise NotComputed("argument of nth_value must be greater than zero", "22016")
    for node in tree.find_all(exp.Cast):
        source = node.this.type
        if source is None or not source.is_type(*exp.DataType.NUMERIC_TYPES) \
                or node.meta.get("moments_only"):
            continue
        target = node.to
        if target.is_type(*_NO_CAST_FROM_NUMBERS) or (
                target.is_type(exp.DataType.Type.BOOLEAN)
                and not source.is_type(exp.DataType.Type.INT)):
            raise NotComputed(f"cannot cast type {source.sql(dialect='postgres').lower()} "
                              f"to {target.sql(dialect='postgres').lower()}", "42846")


_COMPARED = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<",
             exp.LTE: "<="}
_T = exp.DataType.Type
_NO_CAST_FROM_NUMBERS = (_T.DATE, _T.DATE32, _T.DATETIME, _T.TIMESTAMP, _T.TIMESTAMPTZ,
                         _T.TIMESTAMPLTZ, _T.TIMESTAMPNTZ, _T.TIME, _T.TIMETZ, _T.INTERVAL,
                         _T.BINARY, _T.VARBINARY, _T.UUID, _T.ARRAY, _T.JSON, _T.JSONB)


_INTEGERS = [exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
             exp.DataType.Type.BIGINT, exp.DataType.Type.INT128, exp.DataType.Type.INT256]


def _failing_as_postgresql(tree: exp.Expression) -> None:
    """SQRT, LN, LOG, POWER and EXP made to fail where PostgreSQL's fail, with its message
    (``_FAILURES``): DuckDB answers NaN or ±infinity there, which a HAVING or ORDER BY
    then read as a number (``HAVING SQRT(COUNT(*) - 100) > 1`` kept the groups of NaN;
    the review of 2026-11-29). A division (or ``%``) by a released 0 is NULL, as
    ``NULLIF(…, 0)`` makes it, where PostgreSQL fails: a sum clamped to its logical
    range is often exactly 0 on a small scope, and a ratio over it would fail (charged)
    about as often; DuckDB gave ±infinity. In place, every node at any depth; each
    test reads a copy of its operands as written (not guarded: where an inner one would
    fail, the guarded value beside it does), so nested functions add one copy each,
    never copies of copies."""
    zero = exp.Literal.number(0)
    for node in list(tree.find_all(exp.Div, exp.IntDiv, exp.Mod)):
        divisor = node.expression
        nullif = exp.Nullif(this=divisor, expression=zero.copy())
        nullif.type = divisor.type  # its type decides integer division, as annotated
        node.set("expression", nullif)
    guarded = [(node, _failures_of(node, zero)) for node in list(tree.find_all(*_GUARDED))]
    for node, tests in guarded:
        parent, key, index = node.parent, node.arg_key, node.index
        case = exp.Case(ifs=[exp.If(this=test, true=exp.func("error", exp.Literal.string(
            message))) for test, message in tests])
        parent.set(key, case, index)
        case.set("default", node)


_GUARDED = (exp.Sqrt, exp.Ln, exp.Log, exp.Pow, exp.Exp)
# the largest x whose exp(x) a double holds: PostgreSQL's exp fails beyond it
_LARGEST_EXPONENT = 709.782712893384


def _failures_of(node: exp.Expression, zero: exp.Expression
                 ) -> list[tuple[exp.Expression, str]]:
    """The conditions on ``node``'s operands (copies) under which PostgreSQL fails it."""
    if isinstance(node, exp.Sqrt):
        return [(exp.LT(this=node.this.copy(), expression=zero.copy()),
                 "cannot take square root of a negative number")]
    if isinstance(node, (exp.Ln, exp.Log)):
        value = node.expression if isinstance(node, exp.Log) and node.expression else node.this
        tests = [(exp.EQ(this=value.copy(), expression=zero.copy()),
                  "cannot take logarithm of zero"),
                 (exp.LT(this=value.copy(), expression=zero.copy()),
                  "cannot take logarithm of a negative number")]
        if isinstance(node, exp.Log) and node.expression:  # LOG(base, x): the base too
            tests += [(exp.LTE(this=node.this.copy(), expression=zero.copy()),
                       "cannot take logarithm of a negative number"),
                      (exp.EQ(this=node.this.copy(), expression=exp.Literal.number(1)),
                       "division by zero")]  # ln(x) / ln(1)
        return tests
    if isinstance(node, exp.Exp):
        return [(exp.GT(this=node.this.copy(), expression=exp.Literal.number(
            _LARGEST_EXPONENT)), "value out of range: overflow")]
    base, power = node.this, node.expression
    return [(exp.and_(exp.EQ(this=base.copy(), expression=zero.copy()),
                      exp.LT(this=power.copy(), expression=zero.copy())),
             "zero raised to a negative power is undefined"),
            (exp.and_(exp.LT(this=base.copy(), expression=zero.copy()),
                      exp.NEQ(this=exp.func("floor", power.copy()), expression=power.copy())),
             "a negative number raised to a non-integer power yields a complex result")]


_KEPT_LENGTH = 100_000  # a longer outer query is prepared every time (its key is long)


def _bound_column(index: int) -> str:
    """The column of a release table holding the 95 % bounds of its ``index``-th."""
    return f"__idp_b{index}"


def _intervals(tree: exp.Select, width: int, releases, bounds: ReleaseBounds | None,
               bounded: Sequence[Sequence[int]], carried: dict[int, tuple[int, str]]
               ) -> list[int]:
    """The select items of ``tree`` (its first ``width``) that get a derived bound: their
    intervals' ends are appended to its select list, two columns each, in this order.
    A step of it (``WITH s AS (…)``: Lightdash's table calculations) gets the ends of
    its computed columns as columns of its own, which the query reads (not where a
    ``*`` would show them, nor under DISTINCT)."""
    if not bounds or any(select.args.get("distinct") or any(
            isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                           and isinstance(item.this, exp.Star))
            for item in select.expressions) for select in tree.find_all(exp.Select)):
        return []
    tables = {release_table(i): ReleasedTable(
        release_table(i), tuple(columns), {columns[j]: _bound_column(j) for j in bounded[i]},
        frozenset(bounds[i][1]), bounds[i][2]) for i, (columns, *_) in enumerate(releases)}
    budget = Budget()
    for step, cte in enumerate((tree.args.get("with_") or exp.With()).expressions):
        if isinstance(cte.this, exp.Select):
            tables[cte.alias_or_name] = _step(cte.this, step, _read(cte.this, tables), budget)
    rule = Bounds(tree, _read(tree, tables), budget)
    found, ends = [], []
    for index, item in enumerate(tree.expressions[:width]):
        if index in carried:
            continue  # a released column unchanged: its own bounds
        interval = rule.interval(item.unalias())
        if interval is not None:
            found.append(index)
            ends += [exp.alias_(interval.lo, f"__idp_lo{index}", quoted=True),
                     exp.alias_(interval.hi, f"__idp_hi{index}", quoted=True)]
    if ends:
        tree.set("expressions", [*tree.expressions, *ends])
    return found


def _read(select: exp.Select, tables: dict[str, ReleasedTable]) -> list[ReleasedTable]:
    """The released tables and steps ``select`` reads (FROM, JOIN), each under its
    alias there; a subquery's columns it cannot place (no bound through them)."""
    sources = [select.args["from_"].this] if select.args.get("from_") else []
    sources += [join.this for join in select.args.get("joins") or []]
    return [replace(tables[source.name], alias=source.alias_or_name) for source in sources
            if isinstance(source, exp.Table) and source.name in tables]


def _step(body: exp.Select, step: int, read: list[ReleasedTable], budget: Budget
          ) -> ReleasedTable:
    """A step over released tables as the query reads it: each computed column's
    interval, its ends appended to the step as columns of its own; its keys exact; its
    other columns noisy without a bound; its rows the keys' unless it filters, joins or
    groups by a noisy value or limits."""
    rule = Bounds(body, read, budget)
    names = [item.alias_or_name for item in body.expressions]
    ends, unbounded, extra = {}, set(), []
    for index, (name, item) in enumerate(zip(names, body.expressions)):
        interval = rule.interval(item.unalias(), exact=True)
        if interval is None:
            unbounded.add(name)
        elif not interval.exact:
            lo, hi = f"__idp_lo{step}_{index}", f"__idp_hi{step}_{index}"
            extra += [exp.alias_(interval.lo, lo, quoted=True),
                      exp.alias_(interval.hi, hi, quoted=True)]
            ends[name] = (lo, hi, interval)
    body.set("expressions", [*body.expressions, *extra])
    rows_public = not rule.rows_noisy and not (body.args.get("limit") or body.args.get("offset"))
    return ReleasedTable("", tuple(names), {}, frozenset(), rows_public, ends,
                         frozenset(unbounded))


def _spread(value: Any, lo: Any, hi: Any) -> float | None:
    """The half-width of a symmetric interval around ``value`` holding [lo, hi]; a NULL
    (no number to bound) 0."""
    if value is None:
        return 0.0
    try:
        below, above = float(value) - float(lo), float(hi) - float(value)
    except (TypeError, ValueError):  # no end (no bound), or not a number
        return None
    return max(below, above, 0.0) if math.isfinite(below) and math.isfinite(above) else None
