"""Row-level steps merged before analysis: subqueries and CTEs become one SELECT.

Analysts and BI tools wrap the table in row-level steps — a CTE that filters, a derived
table that renames or picks columns (Superset's ``virtual_table``), nested any number of
times. Such steps never look across records, so the query they build is one aggregate
query over the table, and is analysed as that query. The rewriting is sqlglot's own
optimizer passes, applied in order as in ``sqlglot.optimizer.optimizer``:

    qualify → eliminate_subqueries → merge_subqueries → eliminate_ctes

``merge_subqueries`` merges exactly the derived tables and CTEs that are row-level (no
aggregate, DISTINCT, LIMIT, window or join inside); whatever is left over is analysed
by ``proxy.analyze.outer`` (post-processing of one release) or refused there.

The passes must stay linear in the statement (issue 30): ``qualify`` and
``merge_subqueries`` look up each column's ancestors, so their time is the columns
times the tree's depth, and a chain of 4,900 ANDs in a virtual table took 20 s. Chains
of AND and of OR are balanced first (AND and OR are associative, NULL included: the
same condition, log n deep), and a tree still deeper than ``MAX_DEPTH`` (arithmetic
nested hundreds deep) is refused (54001). sqlglot's ``simplify``, which compares every
two comparisons of a chain (5,000 terms: minutes), is not run: the analysis reads the
merged tree as the analyst wrote it.

Before the passes, constant arithmetic in WHERE and ON is folded
(``proxy.analyze.constants``: ``1 + 10``, ``date '…' + interval '1' year``), and
constants the backend would cast (``TIMESTAMP '…'``, ``CAST('…' AS
DATE)``, Superset's ``TO_TIMESTAMP('…', 'YYYY-MM-DD HH24:MI:SS.US')`` and ``TO_DATE('…',
'YYYY-MM-DD')``) become plain quoted literals, checked to be dates, so that time filters
compare a column with a literal as every other WHERE does; a truncated column compared
with them (``CAST(at AS DATE) >= '…'``) becomes the range of the column it means
(``proxy.analyze.time_filters``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from decimal import Decimal

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.eliminate_ctes import eliminate_ctes
from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from proxy.analyze.constants import fold_constants
from proxy.analyze.group_keys import default_name
from proxy.analyze.time_filters import truncations_as_ranges
from proxy.analyze.time_keys import constant_wall
from proxy.errors import NotSupported, ProxyError, RawRowAccess, UnknownColumn, UnknownFunction
from proxy.guards import depth
from proxy.interrupts import checkpoint
from proxy.rules import Rules, parse_moment, read_moment
from proxy.trees import balanced
from proxy.zones import from_wall, reading_zone

SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE", "text": "TEXT", "bool": "BOOLEAN",
             "date": "DATE", "timestamp": "TIMESTAMP"}
log = logging.getLogger("idp_proxy.analyze")
_TIME_TYPES = (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP,
               exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMPTZ)
_GENERATED = re.compile(r"_col_\d+")
PASSES = (eliminate_subqueries, merge_subqueries, eliminate_ctes)
# The deepest tree given to the passes, after balancing (31 nested subqueries: 97).
MAX_DEPTH = 200


def _without_empty_terms(tree: exp.Expression) -> None:
    """``GROUP BY ()`` (one group of every row, as without GROUP BY), and a ``()`` among
    other terms (it groups by nothing), dropped from each GROUP BY of ``tree`` (in
    place): it was refused as "no public set of keys". In GROUPING SETS a ``()`` is the
    grand total's set and stays."""
    for group in list(tree.find_all(exp.Group)):
        terms = [term for term in group.expressions
                 if not (isinstance(term, exp.Tuple) and not term.expressions)]
        if len(terms) == len(group.expressions):
            continue
        if terms:
            group.set("expressions", terms)
        else:
            group.pop()


def merge_steps(select: exp.Select, rules: Rules, owned: bool = False) -> exp.Select:
    """``select`` with its time constants folded and, when it has CTEs or subqueries in
    FROM, its row-level steps merged (a new tree; the argument is not changed, but where
    ``owned``: the caller hands it over, and it is worked on without a copy)."""
    if not owned:
        select = select.copy()
    _without_empty_terms(select)
    checkpoint()  # each whole-tree pass of a long statement takes a few tenths of a second
    select = truncations_as_ranges(fold_time_constants(fold_constants(select), rules), rules)
    checkpoint()
    if not _has_steps(select):
        return select
    _balance_connectors(select)
    if depth(select) > MAX_DEPTH:
        raise ProxyError(f"statement too complex: its expressions nest more than {MAX_DEPTH} "
                         "deep (operators inside operators); write it with fewer nested "
                         "operations", "54001")
    _name_inner_outputs(select)
    unnamed = [i for i, item in enumerate(select.expressions)
               if not isinstance(item, (exp.Alias, exp.Column, exp.Star))]
    starred = any(isinstance(item, exp.Star) for item in select.expressions)
    width = len(select.expressions)
    schema = {name: {column: SQL_TYPES[spec.type] for column, spec in table.columns.items()}
              for name, table in rules.tables.items() if table.columns}
    try:
        merged = qualify(select, schema=schema, dialect="postgres",
                         quote_identifiers=True, identify=False)
        for rewrite in PASSES:
            checkpoint()  # each pass is linear: under a second for the largest statement
            merged = rewrite(merged)
    except OptimizeError as exc:
        raise UnknownColumn(f"{_first_line(exc)}; use the declared columns of one table") \
            from None
    except (KeyError, ValueError, AttributeError, TypeError, AssertionError):
        # sqlglot's passes assume a well-formed scope (a source named in FROM); a
        # statement that parses to something else is not one we can merge
        log.info("subqueries not merged", exc_info=True)
        raise NotSupported("the subqueries or CTEs of this statement could not be merged "
                           "into one query; write one SELECT over the table with WHERE") \
            from None
    if not isinstance(merged, exp.Select):
        raise NotSupported("the query is not one SELECT after merging its subqueries; send a "
                           "SELECT with aggregates")
    protected = any(rules.table(t.name) is not None and not rules.table(t.name).public
                    for t in merged.find_all(exp.Table))
    if starred and protected and not merged.find(exp.AggFunc):
        raise RawRowAccess("SELECT * would return rows of a protected table; ask for "
                           "aggregates instead")
    if len(merged.expressions) == width:
        for index in unnamed:  # the aggregate's own name (count, sum …), not _col_N
            _drop_generated_alias(merged, index)
    return merged


def _balance_connectors(tree: exp.Expression) -> None:
    """Every chain of three or more ANDs (ORs) as a balanced tree of them, in place:
    ``a AND b AND c AND d`` parses as ((a AND b) AND c) AND d, n deep; it becomes
    (a AND b) AND (c AND d), which reads as the same SQL."""
    for node in list(tree.find_all(exp.And, exp.Or)):
        if type(node.parent) is type(node):
            continue  # inside a chain: its root rebuilds it
        operands = list(node.flatten(unnest=False))
        if len(operands) > 2:
            node.replace(balanced(type(node), operands))


def steps(select: exp.Select) -> dict[str, exp.Expression]:
    """The CTEs ``merge_steps`` left (every subquery in FROM or JOIN is one of them):
    the steps that are not row-level, by name."""
    return {cte.alias_or_name: cte.this
            for cte in (select.args.get("with_") or exp.With()).expressions}


def step_name(node: exp.Expression, left: dict[str, exp.Expression]) -> str | None:
    """The name of the step (of ``steps``) a FROM or JOIN source reads; None for a
    table or anything else."""
    if isinstance(node, exp.Table) and not node.args.get("db") and node.name in left:
        return node.name
    return None


def _drop_generated_alias(select: exp.Select, index: int) -> None:
    """qualify names an unnamed output ``_col_N`` and points ORDER BY at it: the output
    goes back to its own name, ORDER BY to its position."""
    item = select.expressions[index]
    if not (isinstance(item, exp.Alias) and _GENERATED.fullmatch(item.alias)):
        return
    for column in list(select.args["order"].find_all(exp.Column)) \
            if select.args.get("order") else ():
        if not column.table and column.name == item.alias:
            column.replace(exp.Literal.number(index + 1))
    item.replace(item.this)


def _has_steps(select: exp.Select) -> bool:
    return select.args.get("with_") is not None or any(
        isinstance(node, exp.Subquery) for node in select.find_all(exp.Subquery)
        if isinstance(node.parent, (exp.From, exp.Join)))


def _name_inner_outputs(select: exp.Select) -> None:
    """Unnamed outputs of inner queries get PostgreSQL's names (``count``, ``sum``), so an
    outer query can refer to them as it would in PostgreSQL."""
    for inner in select.find_all(exp.Select):
        if inner is select:
            continue
        for item in inner.expressions:
            if not isinstance(item, (exp.Alias, exp.Column, exp.Star)):
                name = "median" if isinstance(item, exp.Median) else default_name(item)
                item.replace(exp.alias_(item.copy(), name, quoted=True))


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else "a column is unknown"
    return text.split(". Line:")[0]


def fold_time_constants(tree: exp.Expression, rules: Rules | None = None) -> exp.Expression:
    """Date and timestamp constants as quoted ISO literals; refuse one that is not a date
    (the backend would fail on it after the query is charged). A date or timestamp cast
    drops a written zone, as PostgreSQL's does; a ``timestamptz`` one ('…Z'::timestamptz,
    as Cube writes it) is a moment, its text without a zone read in the session's zone,
    and is written as that zone's wall clock, which the timestamp columns it is compared
    with are read in (``time_keys.constant_wall``); so is Grafana's
    ``to_timestamp(1704067200)`` (``$__timeFrom()``) compared with something
    (``_epoch_moment``). A timestamp with a time of day compared with a date column of
    ``rules`` is refused (``_date_compared``)."""
    for node in list(tree.find_all(exp.UnixToTime)):
        moment = _epoch_moment(node)
        if moment is None:
            continue
        compared = _compared_columns(node, rules) if rules is not None else None
        if compared is not None:
            _compared_with_time(compared, "timestamp with time zone")
            _date_compared(compared, moment)
        node.replace(exp.Literal.string(moment.isoformat(" ")))
    for node in list(tree.find_all(exp.Cast, exp.StrToTime, exp.StrToDate, exp.TsOrDsToDate)):
        text = node.this
        if not (isinstance(text, exp.Literal) and text.is_string):
            continue
        if isinstance(node, exp.Cast) and not node.to.is_type(*_TIME_TYPES):
            continue
        moment = _moment(text.name, node.args.get("format"))
        if moment is None:
            raise NotSupported(f"'{text.name}' is not a date or timestamp; write it as "
                               "'2024-01-31' or '2024-01-31 08:00:00'")
        if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.TIMESTAMPTZ):
            moment = _wall_of_moment(text.name, moment, node.args.get("format"))
        day = isinstance(node, (exp.TsOrDsToDate, exp.StrToDate)) or (
            isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE))
        compared = _compared_columns(node, rules) if rules is not None else None
        if compared is not None:
            _compared_with_time(compared, "date" if day else "timestamp")
            if not day:
                _date_compared(compared, moment)
        node.replace(exp.Literal.string(moment.date().isoformat() if day
                                        else moment.isoformat(" ")))
    return tree


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)


def _compared_columns(node: exp.Expression, rules: Rules
                      ) -> tuple[exp.Expression, list[tuple[exp.Column, set[str]]]] | None:
    """The comparison a time constant stands in (brackets skipped), with each of its two
    sides that is a column and the types the tables of ``rules`` declare that name
    with; None when it stands in none."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if not isinstance(parent, _COMPARISONS):
        return None
    return parent, [(column, {declared.type for table in rules.tables.values()
                              for name, declared in table.columns.items()
                              if name == column.name})
                    for column in (parent.this, parent.args.get("expression"))
                    if isinstance(column, exp.Column)]


def _compared_with_time(compared: tuple[exp.Expression, list[tuple[exp.Column, set[str]]]],
                        kind: str) -> None:
    """Refuse a typed date or timestamp constant compared with a column every table of
    the rules declares of another type (``region = DATE '2024-01-01'``): PostgreSQL has
    no such operator (42883), while the constant, folded to a quoted literal, would be
    compared as that column's text (the fuzzer's literals of other kinds, 2026-11-29)."""
    for column, types in compared[1]:
        if types and not types & {"date", "timestamp"}:
            raise UnknownFunction(
                f"operator does not exist: {types.pop()} compared with {kind} (column "
                f"{column.name}); compare it with a constant of its own type")


def _date_compared(compared: tuple[exp.Expression, list[tuple[exp.Column, set[str]]]],
                   wall: dt.datetime) -> None:
    """Refuse a timestamp constant (its wall clock ``wall``) compared with a date column
    where PostgreSQL's answer is not the date's: it reads the date as its midnight (in
    the session's zone) and compares moments, so ``day >= TIMESTAMP '2024-01-31 08:00'``
    leaves out the 31st, while the constant, folded to a quoted literal, would be read
    as a date. An IN list with a timestamp reads its quoted items as timestamps too."""
    parent, columns = compared
    if not any("date" in types for _, types in columns):
        return
    items = parent.expressions if isinstance(parent, exp.In) else []
    untyped = [parse_moment(i.name) for i in items if isinstance(i, exp.Literal) and i.is_string]
    if wall.time() != dt.time() or any(m is None or m.time() != dt.time() for m in untyped):
        raise NotSupported(f"column {columns[0][0].name} is a date and PostgreSQL compares it "
                           f"with the timestamp '{wall.isoformat(' ')}' as its midnight; "
                           "compare it with a date such as '2024-01-31'")


_EPOCH = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_EPOCH_LIMIT = Decimal(10) ** 12  # seconds: 31,700 years, past 9999 from 1970 either way


def _epoch_moment(node: exp.UnixToTime) -> dt.datetime | None:
    """The session zone's wall clock of ``to_timestamp(constant)`` (PostgreSQL's
    to_timestamp(double precision): the moment that many seconds after 1970-01-01 00:00
    UTC, a ``timestamptz``) where it is compared with a column, read as a
    ``'…'::timestamptz`` constant is (``constant_wall``); None where it is not a number
    constant compared with a column (it stays, and is analysed, or refused, as before). A constant that
    is not whole microseconds (PostgreSQL rounds the double, maybe to another
    microsecond than its decimal text's), or beyond the years 1 to 9999, is refused."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if not isinstance(parent, _COMPARISONS) or not any(
            isinstance(parent.args.get(side), exp.Column)
            for side in ("this", "expression", "low", "high")) or any(
            node.args.get(arg) is not None
            for arg in ("scale", "zone", "hours", "minutes", "format")):
        return None
    value, sign = node.this, ""
    if isinstance(value, exp.Neg):
        value, sign = value.this, "-"
    if not (isinstance(value, exp.Literal) and not value.is_string
            and _EPOCH.fullmatch(value.name)):
        return None
    if Decimal(value.name).copy_abs() > _EPOCH_LIMIT:  # past the years 1-9999 in any zone
        raise NotSupported(f"to_timestamp({sign}{value.name}) is beyond the years 1 to "
                           "9999")
    micros = Decimal(sign + value.name) * 1_000_000
    if micros != micros.to_integral_value():
        raise NotSupported(f"to_timestamp({sign}{value.name}) is not a whole number of "
                           "microseconds; write the epoch seconds with at most 6 decimals")
    try:
        return constant_wall(dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(micros)))
    except OverflowError:  # the zones move it out of years 1-9999
        raise NotSupported(f"to_timestamp({sign}{value.name}) is beyond the years 1 to "
                           "9999") from None


def _wall_of_moment(text: str, wall: dt.datetime, format_: exp.Expression | None
                    ) -> dt.datetime:
    """The session zone's wall clock of a ``timestamptz`` constant written as ``text``
    (``wall``: its clock as written)."""
    written = wall if format_ is not None else read_moment(text)
    try:
        return constant_wall(written.astimezone(dt.UTC).replace(tzinfo=None)
                             if written.tzinfo else from_wall(reading_zone(), wall))
    except OverflowError:  # the zones move it out of years 1-9999
        raise NotSupported(f"'{text}' is beyond the years 1 to 9999") from None


def _moment(text: str, format_: exp.Expression | None) -> dt.datetime | None:
    if isinstance(format_, exp.Literal):
        try:
            return dt.datetime.strptime(text, format_.name)
        except ValueError:
            return None
    return parse_moment(text, zoned=True)
