"""Aggregates over expressions: the value an aggregate reads may be an arithmetic
expression of declared numeric columns, e.g. ``AVG(price * quantity)``,
``SUM(income / 12)``, ``MAX(abs(x))``, ``COUNT(*) FILTER (WHERE age > 30)``,
``AVG(EXTRACT(HOUR FROM visited_at))`` (a field of a time column: its range over the
declared domain, ``proxy.analyze.time_fields``).

Each such expression becomes a *derived column* of the plan's table: a ``Column`` with
a type and a domain propagated from the declared domains by interval arithmetic
(rules in docs/privacy.md, "Aggregates over expressions"), so every sensitivity of SPEC
§5.2 applies to the expression's value unchanged — a modified record changes that value
to anything inside the derived domain, or to NULL, exactly as it would a column's.

How the backend computes it (``DerivedColumn.render``): every column the expression
reads as a value is normalised first, as for a plain column (NaN as NULL, ±inf and
out-of-range values to the declared bound or ±MAGNITUDE_CAP); the arithmetic is done in
DOUBLE on those finite values; pushdown then clamps the result to the derived domain
(``proxy.guards.clamp``). CASE conditions and FILTER clauses read the raw columns, as
WHERE does. Integer division follows PostgreSQL (it truncates towards zero).

Totality (docs/privacy.md §3.6): the SQL built here cannot raise, overflow or make NaN
for any row value, whatever the intervals say, because every operation that could is
guarded in the SQL itself (``proxy.guards``): operands of ``*`` and dividends are
snapped (tiny values to 0, ``guards.snap``) and below 2⁵⁰⁰ by the SQL's own bound,
divisors are constants written as the analysed double (10⁻¹⁵⁰ ≤ |c| ≤ 10¹⁵⁰),
``sqrt(abs(v))``, ``ln(abs(v) + 2⁻¹⁰²²)``, rounding functions and integer casts take values
the SQL keeps below 2⁶³ and give a DOUBLE. Each guard writes its operand once, so the SQL is linear in the expression, which is capped at
``MAX_EXPRESSION_NODES`` parts. The intervals follow the guards (``snap_value`` at each
operand's ends), so the derived domain stays a true bound of what the SQL computes.

Everything here depends on the text and the rules only (SPEC §3.4): a refusal happens
before anything runs, and the derived domain, type and resolution are public.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from types import MappingProxyType

from sqlglot import exp

from proxy import guards
from proxy.analyze.aggregates import PAIRED, nested
from proxy.analyze.group_keys import dereferenced, within_where
from proxy.analyze.predicate import check_predicate
from proxy.analyze.time_fields import extracted_column, field_range, field_sql
from proxy.analyze.time_keys import field_of, part_field
from proxy.errors import NotSupported, ProxyError
from proxy.result_types import expression_type, of_columns
from proxy.rules import Table, parse_moment
from proxy.statistics import MAGNITUDE_CAP, value_range
from proxy.vocabulary import DerivedColumn, Moment, read_raw

ALLOWED = ("+ - * /, division by a non-zero constant, CASE WHEN ... THEN ... END, COALESCE, "
           "NULLIF(x, constant), CAST to a number (of a condition: to integer), abs, least, "
           "greatest, floor, ceil, round, trunc, power(x, 2), sqrt of x ≥ 0, ln and log of "
           "x > 0, exp of |x| ≤ 700, EXTRACT(hour FROM t) of a time column with a declared "
           "domain")
# Intermediate values the backend may meet stay well inside DOUBLE's range.
_SAFE_MAGNITUDE = 1e300
# The most parts (sqlglot nodes: operators, functions, columns, constants) one
# aggregate's expression may have: the backend SQL grows linearly with it, by a
# constant factor for the guards (docs/sqlstate.md).
MAX_EXPRESSION_NODES = 400
# The deepest guarded SQL one expression may make (the backends' parsers and planners
# recurse: DuckDB stops at 1,000 levels of a whole statement; sqlglot's generator too).
MAX_SQL_DEPTH = 200
MAX_HEAVY_NESTING = 3  # ln, log, exp and integer casts inside one another (``_check_nesting``)
# The most parts the SQL computing one statement's derived columns may have, all of them
# together, as the backend receives it (``backend_parts``). DuckDB plans a
# statement in time that grows faster than its size, and a cancel does not reach every
# step of its planning (finding common subexpressions): one 400-part SUM of 128 column
# reads, about 5,400 parts, took 2 s to plan on 2 cores, 200 SUM(income * income + i)
# 9 s, 400 SUM(income + i) 35 s. At this cap a statement plans in well under a second.
MAX_STATEMENT_PARTS = 4_000
_NORMALISED_PARTS = 36  # a column read as a value: the CASE that normalises it
_CLAMP_PARTS = 18  # the clamp of the result to its derived domain
_LN_BOUND = 745.0  # |ln v| for every positive double v
_INTEGER_TYPES = {exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
                  exp.DataType.Type.BIGINT}
_REAL_TYPES = {exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE, exp.DataType.Type.DECIMAL,
               exp.DataType.Type.BIGDECIMAL}
_DOUBLE = exp.DataType.build("double")
_QUANTILES = ("quantile_disc", "quantile")


def backend_parts(column: DerivedColumn) -> int:
    """The parts (sqlglot nodes) of the SQL that computes this column: its guarded
    expression, each column it reads as a value written as the CASE that normalises it
    (``DerivedColumn.render``), and the clamp to its domain."""
    reads = sum(1 for node in column.expression.find_all(exp.Column)
                if not read_raw(node))
    return (sum(1 for _ in column.expression.walk()) + _CLAMP_PARTS
            + reads * (_NORMALISED_PARTS - 2))


@dataclass(frozen=True)
class _Value:
    """What analysis knows of a subexpression: its SQL, its range with undeclared sides
    infinite (``low``/``high``) and with them at ±MAGNITUDE_CAP (``reach``: what the
    backend can meet), whether it is integral, whether it can be NULL, and whether it
    reads no column. ``low > high`` means it is always NULL."""

    sql: exp.Expression
    low: float
    high: float
    reach: tuple[float, float]
    integer: bool
    nullable: bool
    constant: bool = False
    bound: float = 0.0  # the SQL's own bound on |value|, whatever the data (proxy.guards)

    @property
    def null(self) -> bool:
        return self.low > self.high


def _always_null(constant: bool = True) -> _Value:
    """A value that is NULL on every row, written as a typed NULL: an untyped one inside
    a function (``log(2, NULL)``, ``-NULL``, ``trunc(NULL)``) has no function to resolve
    to in PostgreSQL, which failed the statement after the debit (a review's finding)."""
    return _Value(exp.cast(exp.Null(), _DOUBLE.copy()), math.inf, -math.inf,
                  (math.inf, -math.inf), True, True, constant)


def with_expressions(select: exp.Select, table: Table, resolve) -> tuple[exp.Select, Table]:
    """The SELECT with every aggregate argument that is an expression (and every FILTER
    clause) replaced by a derived column, and the table with those columns added; the
    rest of the analysis then sees plain columns. ``select`` is changed in place: analysis
    gives it merge_steps' own copy, and a second copy of the whole tree was 8 % of a
    fresh analysis's time."""
    derived: dict[str, DerivedColumn] = {}
    parts = 0
    for node in list(select.find_all(exp.Filter)):
        _unfilter(node, table, resolve)
    for node in list(select.walk()):
        if not _is_aggregate(node) or isinstance(node.parent, exp.WithinGroup):
            continue
        if type(node) is exp.Sum and _counts_rows(node.this):
            count = exp.Count(this=_as_count(node.this))
            if isinstance(node.parent, exp.Select):  # its column keeps PostgreSQL's name
                node.replace(exp.alias_(count, "sum", copy=False))
            else:
                node.replace(count)
            node = count
        for argument in _arguments(node):
            if isinstance(argument, exp.Column) and type(node) in (exp.Max, exp.Min):
                where = select.args.get("where")
                column = moment_column(argument, table, resolve, type(node) is exp.Max,
                                       where.this if where is not None else None,
                                       own_bucket(select, argument, table, resolve))
                if column is None:  # a column of another type: read as it is
                    continue
            elif isinstance(argument, (exp.Column, exp.Star)) or (
                    isinstance(argument, exp.Distinct) and (len(argument.expressions) != 1 or
                    isinstance(argument.expressions[0].unnest(), (exp.Column, exp.Cast,
                                                                  exp.Case)))):
                continue  # a column, a unit's cast, a CASE: recognised as written
            else:
                # COUNT(DISTINCT expr): the distinct values of a derived column, each a
                # function of its row alone, as a column's are (docs/privacy.md §3.7);
                # a constant is one value there, not a count of rows
                distinct = isinstance(argument, exp.Distinct)
                argument = argument.expressions[0] if distinct else argument
                if any(_is_aggregate(inner) for inner in argument.walk()):
                    raise nested()
                column = derive(argument, table, resolve,
                                counted=isinstance(node, exp.Count) and not distinct)
                if column is None:  # COUNT of a value that is never NULL counts rows
                    argument.replace(exp.Star())
                    continue
            if column.name not in derived:
                derived[column.name] = column
                parts += backend_parts(column)
                if parts > MAX_STATEMENT_PARTS:
                    raise ProxyError(f"statement too complex: its aggregates' expressions "
                                     f"would take more than {MAX_STATEMENT_PARTS:,} parts of "
                                     "backend SQL (each column they read counts about 35, an "
                                     "operator or constant 1 to 5); ask fewer or simpler "
                                     "aggregates per statement", "54001")
            argument.replace(exp.column(column.name))
    if not derived:
        return select, table
    columns = MappingProxyType({**table.columns, **derived})
    return select, replace(table, columns=columns)


def derive(node: exp.Expression, table: Table, resolve,
           counted: bool = False) -> DerivedColumn | None:
    """The derived column of one aggregate argument (None: under COUNT, a constant that
    is never NULL); refuse what could fail in the backend or is not a number."""
    parts = sum(1 for _ in node.walk())
    if parts > MAX_EXPRESSION_NODES:
        raise NotSupported(f"an expression inside an aggregate has {parts} parts; at most "
                           f"{MAX_EXPRESSION_NODES} are supported")
    _check_nesting(node)
    value = _evaluate(node, table, resolve)
    if guards.depth(value.sql) > MAX_SQL_DEPTH:
        raise NotSupported("an expression inside an aggregate is nested too deeply; "
                           "split it, or nest fewer operations")
    name = _name(node, resolve)
    if value.null:
        raise NotSupported(f"{name} is always NULL; aggregate a column or an expression of "
                           "columns")
    if counted and value.constant and not value.nullable:
        return None
    lower = None if value.low == -math.inf else min(max(value.low, -MAGNITUDE_CAP), MAGNITUDE_CAP)
    upper = None if value.high == math.inf else max(min(value.high, MAGNITUDE_CAP), -MAGNITUDE_CAP)
    resolution = 1.0 if lower is not None and lower == upper else None  # a constant
    return DerivedColumn(name, "int" if value.integer else "float", lower, upper,
                         declared_resolution=resolution, expression=value.sql,
                         pg=expression_type(node, of_columns(table, resolve)))


# a date_trunc bucket's longest width, in seconds and in days (less one: offsets in it)
BUCKET_WIDTHS = {"day": (86_399, 0), "week": (7 * 86_400 - 1, 6),
                 "month": (31 * 86_400 - 1, 30), "year": (366 * 86_400 - 1, 365)}


def own_bucket(select: exp.Select, node: exp.Column, table: Table, resolve) -> str | None:
    """The unit of a ``GROUP BY date_trunc(unit, col)`` of the column ``node`` reads
    (day, week, month or year; not under ROLLUP, CUBE or GROUPING SETS, whose rolled-up
    groups have no bucket), else None."""
    group = select.args.get("group")
    if group is None or any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        return None
    for term in group.expressions:
        term = dereferenced(term, select, table).unnest()
        if isinstance(term, (exp.TimestampTrunc, exp.DateTrunc)) and not term.args.get(
                "zone") and isinstance(term.this, exp.Column) \
                and resolve(term.this) == resolve(node):
            unit = term.args.get("unit")
            unit = unit.name.lower() if isinstance(unit, (exp.Var, exp.Literal)) else None
            if unit in BUCKET_WIDTHS:
                return unit
    return None


def moment_column(node: exp.Column, table: Table, resolve, largest: bool,
                  where: exp.Expression | None = None,
                  bucket: str | None = None) -> DerivedColumn | None:
    """MAX or MIN of a date or timestamp column with a declared domain (Metabase's
    Earliest and Latest) as a whole number: the days (a date) or seconds from the end
    of its window the answer is near — the last moment for MAX, the first for MIN — to
    the moment clamped to the window (``guards.moment_number``). The window is the
    declared domain narrowed by the WHERE's ranges of the column
    (``group_keys.within_where``: the text alone; every row in scope lies in it, or
    beyond the domain, clamped to its nearer end as before), so a dashboard's time range
    puts the dense candidates where its rows are. The number's domain is the window in
    those units: the exponential mechanism's candidates are every second (day) near
    that end, then 0.78 % of the distance apart (docs/privacy.md §5.3), and the answer is
    the origin moved by the number drawn (``DerivedColumn.shown``). With ``bucket``
    (the query groups by ``date_trunc(bucket, col)``, ``own_bucket``) the number is
    counted in each row's own bucket instead (``guards.moment_offset``): from its start
    for MIN, its longest width before it for MAX, so the candidates are dense where the
    bucket's extremes are and no draw leaves the bucket's width. None for any other
    column."""
    declared = _time_column(node, table, resolve, lambda name: (
        f"{'MAX' if largest else 'MIN'}({name}) needs a declared domain [first, last] of "
        f"{name} in the rules (its candidates are drawn within it)"))
    if declared is None:
        return None
    seconds = declared.type == "timestamp"
    window = within_where(declared, where, resolve)
    if window[1] < window[0]:  # a WHERE no moment meets: the scope is empty
        window = (window[0], window[0])
    first, last = (_cut(moment, seconds) for moment in window)
    origin = last if largest else first
    unit = "seconds" if seconds else "days"
    if bucket is not None:
        width = BUCKET_WIDTHS[bucket][0 if seconds else 1]
        anchor = width if largest else 0
        sql = guards.moment_offset(exp.column(declared.name, quoted=True), window, seconds,
                                   bucket) - exp.Literal.number(anchor)
        return DerivedColumn(
            f"{declared.name} in {unit} from its {bucket}'s {'end' if largest else 'start'}",
            "int", -width if largest else 0, 0 if largest else width,
            expression=exp.paren(sql),
            moment=Moment(origin, declared.type, declared.name, window, bucket, anchor))
    span = _moment_number(last, seconds) - _moment_number(first, seconds)
    sql = guards.moment_number(exp.column(declared.name, quoted=True), window,
                               seconds) - exp.Literal.number(_moment_number(origin, seconds))
    return DerivedColumn(f"{declared.name} in {unit} from {origin.isoformat(' ')}", "int",
                         -span if largest else 0, 0 if largest else span,
                         expression=exp.paren(sql),
                         moment=Moment(origin, declared.type, declared.name, window))


def _cut(moment, seconds: bool):
    """A domain's end cut to a whole second (a timestamp) or day (a date)."""
    return moment.replace(microsecond=0) if seconds else moment.replace(
        hour=0, minute=0, second=0, microsecond=0)


def _moment_number(moment, seconds: bool) -> int:
    """``guards.moment_number`` of a whole moment, in Python."""
    days = moment.toordinal()
    return days * 86400 + moment.hour * 3600 + moment.minute * 60 + moment.second \
        if seconds else days


def _heavy(node: exp.Expression) -> bool:
    return isinstance(node, (exp.Ln, exp.Log, exp.Exp)) or (
        isinstance(node, exp.Cast) and isinstance(node.to, exp.DataType)
        and node.to.this in _INTEGER_TYPES)


def _check_nesting(node: exp.Expression) -> None:
    """At most ``MAX_HEAVY_NESTING`` of ``ln``, ``log`` (sent as ``ln``), ``exp`` and
    integer casts inside one another: Sail
    (Spark Connect) plans each nested level of them in about four times the time of the
    one inside (8 levels of ``ln``: minutes), so deeper nests would hold a worker."""
    for inner in node.find_all(exp.Ln, exp.Log, exp.Exp, exp.Cast):
        if not _heavy(inner):
            continue
        levels, parent = 1, inner.parent
        while parent is not None and parent is not node.parent:
            levels += _heavy(parent)
            parent = parent.parent
        if levels > MAX_HEAVY_NESTING:
            raise NotSupported(f"{_text(node)} nests ln, log, exp or casts to an integer "
                               f"more than {MAX_HEAVY_NESTING} deep; nest fewer")


def _name(node: exp.Expression, resolve) -> str:
    """The expression as the analyst wrote it, columns by their declared names: the
    derived column's name in plans and messages (one name per expression)."""
    shown = node.copy()
    for column in list(shown.find_all(exp.Column)):
        column.replace(exp.column(resolve(column)))
    return shown.sql(dialect="postgres", copy=False)


def _text(node: exp.Expression) -> str:
    """An expression as a message shows it: its SQL, cut short when long."""
    text = node.sql(dialect="postgres")
    return text if len(text) <= 80 else text[:77] + "..."


def _is_aggregate(node: exp.Expression) -> bool:
    return isinstance(node, (exp.AggFunc, exp.WithinGroup)) or (
        isinstance(node, exp.Anonymous) and node.name.lower() in _QUANTILES)


def _arguments(node: exp.Expression) -> list[exp.Expression]:
    """The values an aggregate reads: CORR and its kin (``aggregates.PAIRED``) two, y
    and x; every other one its ``_argument``, if any."""
    if type(node) in PAIRED:
        return [value for value in (node.this, node.expression) if value is not None]
    argument = _argument(node)
    return [] if argument is None else [argument]


def _argument(node: exp.Expression) -> exp.Expression | None:
    """The value an aggregate reads (None when it has no such slot)."""
    if isinstance(node, exp.WithinGroup):
        order = node.expression
        ordered = order.expressions if isinstance(order, exp.Order) else []
        return ordered[0].this if len(ordered) == 1 else None
    if isinstance(node, exp.Anonymous):
        return node.expressions[0] if node.expressions else None
    return node.this


def _unfilter(node: exp.Filter, table: Table, resolve) -> None:
    """``AGG(x) FILTER (WHERE c)`` → ``AGG(CASE WHEN c THEN x END)``: the aggregate's
    own scope, WHERE ∧ c (``COUNT(*)`` counts ``CASE WHEN c THEN 1 END``)."""
    aggregate, where = node.this, node.expression
    if not _is_aggregate(aggregate) or not isinstance(where, exp.Where):
        raise NotSupported("FILTER (WHERE ...) follows an aggregate, e.g. "
                           "COUNT(*) FILTER (WHERE age > 30)")
    argument = _argument(aggregate)
    if isinstance(argument, exp.Distinct):
        raise NotSupported(f"COUNT(DISTINCT {argument.sql(dialect='postgres')[9:]}) FILTER "
                           "is not supported: a FILTER narrows the count of a plain column's "
                           f"distinct values (COUNT(DISTINCT {table.privacy_unit or 'col'}) "
                           "FILTER (WHERE …)); or put the condition in WHERE")
    if argument is None:
        raise NotSupported("FILTER is supported on COUNT, SUM, AVG, MIN, MAX, percentiles "
                           "and STDDEV/VARIANCE; move the condition to WHERE")
    check_predicate(where.this, table, resolve, "FILTER")  # refused as a FILTER
    value = exp.Literal.number(1) if isinstance(argument, exp.Star) else argument.copy()
    # as written: the CASE's conditions are checked (and rewritten) once, by _case
    argument.replace(exp.Case().when(where.this.copy(), value))
    node.replace(aggregate)


def _counts_rows(node: exp.Expression) -> bool:
    """``SUM(CASE WHEN c THEN 1 ELSE 0 END)``: every branch 1, 0 or NULL, one of them 1."""
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if not isinstance(node, exp.Case) or node.this is not None:
        return False
    branches = [i.args.get("true") for i in node.args.get("ifs", [])] + [node.args.get("default")]
    ones = [b for b in branches if isinstance(b, exp.Literal) and not b.is_string
            and b.name == "1"]
    return bool(ones) and all(b is None or isinstance(b, exp.Null) or (
        isinstance(b, exp.Literal) and not b.is_string and b.name in ("0", "1"))
        for b in branches)


def _as_count(node: exp.Expression) -> exp.Expression:
    """The CASE of ``_counts_rows`` with its 0 branches as NULL: counting its non-NULL
    values is the sum of the 0/1 values."""
    case = (node.unnest() if isinstance(node, exp.Paren) else node).copy()
    for branch in [i.args.get("true") for i in case.args.get("ifs", [])] + [
            case.args.get("default")]:
        if isinstance(branch, exp.Literal) and branch.name == "0":
            branch.replace(exp.Null())
    return case


def _evaluate(node: exp.Expression, table: Table, resolve) -> _Value:
    """Interval arithmetic over the tree (docs/privacy.md lists the rules)."""
    value = _operator(node, table, resolve)
    if not value.null and (max(abs(value.reach[0]), abs(value.reach[1])) > _SAFE_MAGNITUDE
                           or value.bound >= guards.MAGNITUDE_LIMIT):
        raise NotSupported(f"{_text(node)} can reach magnitudes the backend "
                           "cannot compute; use smaller constants or narrower domains")
    return value


def _refuse(node: exp.Expression) -> NotSupported:
    return NotSupported(f"{_text(node)} is not supported inside an "
                        f"aggregate; allowed: {ALLOWED}")


def _operator(node: exp.Expression, table: Table, resolve) -> _Value:
    def of(child: exp.Expression) -> _Value:
        return _evaluate(child, table, resolve)

    if isinstance(node, exp.Paren):
        inner = of(node.this)
        return replace(inner, sql=exp.paren(inner.sql, copy=False))
    if isinstance(node, exp.Column):
        return _leaf(node, table, resolve)
    if isinstance(node, exp.Literal):
        return _number(node)
    if isinstance(node, exp.Null):
        return _always_null()
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.INT) and isinstance(
            node.this.unnest(), (exp.Predicate, exp.Connector, exp.Not)):
        return _boolean(node.this, table, resolve)
    if isinstance(node, (exp.Neg, exp.Abs, exp.Cast, exp.Floor, exp.Ceil, exp.Round,
                         exp.Trunc, exp.Sqrt, exp.Ln, exp.Exp)) and not isinstance(node, exp.TryCast):
        inner = of(node.this)
        if inner.null:  # NULL in, NULL out
            return _always_null(inner.constant)
        if isinstance(node, exp.Neg):
            return _Value(exp.Neg(this=inner.sql), -inner.high, -inner.low,
                          (-inner.reach[1], -inner.reach[0]), inner.integer, inner.nullable,
                          inner.constant, inner.bound)
        if isinstance(node, exp.Abs):
            return _Value(exp.Abs(this=inner.sql), *_abs((inner.low, inner.high)),
                          _abs(inner.reach), inner.integer, inner.nullable, inner.constant,
                          inner.bound)
        if isinstance(node, exp.Cast):
            return _cast(node, inner)
        if isinstance(node, (exp.Sqrt, exp.Ln)):
            return _root_or_log(node, inner)
        if isinstance(node, exp.Exp):
            return _exponential(node, inner)
        return _rounding(node, inner)
    if isinstance(node, exp.Sub):
        days = _day_difference(node, table, resolve)
        if days is not None:
            return days
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        left, right = of(node.this), of(node.expression)
        if isinstance(node, exp.Mul):
            left, right = _operand(node, left), _operand(node, right)
        sql = type(node)(this=left.sql, expression=right.sql)
        if left.null or right.null:
            return _always_null(left.constant and right.constant)
        combine = {exp.Add: _add, exp.Sub: _sub, exp.Mul: _mul}[type(node)]
        low, high = combine((left.low, left.high), (right.low, right.high))
        bound = (left.bound * right.bound if isinstance(node, exp.Mul)
                 else left.bound + right.bound)
        return _Value(sql, low, high, combine(left.reach, right.reach),
                      left.integer and right.integer, left.nullable or right.nullable,
                      left.constant and right.constant, bound)
    if isinstance(node, exp.Div):
        return _divide(node, table, resolve)
    if isinstance(node, (exp.Least, exp.Greatest)):
        return _extreme(node, [of(a) for a in [node.this, *node.expressions]])
    if isinstance(node, exp.Coalesce):
        return _coalesce([of(a) for a in [node.this, *node.expressions]])
    if isinstance(node, exp.Nullif):
        return _nullif(node, of(node.this), of(node.expression))
    if isinstance(node, exp.Case):
        return _case(node, table, resolve)
    if isinstance(node, exp.Extract):
        return _field(node, table, resolve)
    if isinstance(node, exp.Pow):
        return _square(node, of(node.this))
    if isinstance(node, exp.Log):
        return _logarithm(node, table, resolve)
    raise _refuse(node)


def _operand(node: exp.Expression, value: _Value) -> _Value:
    """An operand of ``*`` or a dividend as the SQL takes it: snapped (``guards.snap``),
    which the interval follows (snapping is monotone); refused where its range or the
    SQL's own bound reaches 2⁵⁰⁰. A constant is snapped here."""
    if value.null:
        return value
    if (max(abs(value.reach[0]), abs(value.reach[1])) >= guards.OPERAND_BOUND
            or value.bound >= guards.OPERAND_BOUND):
        raise NotSupported(f"{_text(node)}: an operand of * or / can reach magnitudes the "
                           "backend cannot compute; use smaller constants or narrower "
                           "domains")
    snap = guards.snap_value
    if value.constant and not value.nullable and value.low == value.high:
        sql = guards.number(snap(value.low))
    else:
        sql = guards.snap(value.sql)
    return replace(value, sql=sql, low=snap(value.low), high=snap(value.high),
                   reach=(snap(value.reach[0]), snap(value.reach[1])))


def _number(node: exp.Literal) -> _Value:
    """A numeric constant, computed as DOUBLE (so integer constants cannot overflow); a
    quoted one ('12', as a bound parameter arrives) is read as a number, as PostgreSQL
    reads an untyped literal next to a number."""
    text = _text(node)
    try:  # a quoted number (an untyped parameter's value) reads as PostgreSQL would read it
        number = float(Decimal(node.name.strip()))
    except (InvalidOperation, ValueError):
        raise NotSupported(f"aggregates take numbers; {text} is a string") from None
    if not math.isfinite(number) or abs(number) > MAGNITUDE_CAP:
        raise NotSupported(f"the constant {text} is out of range; use numbers within "
                           f"±{MAGNITUDE_CAP:.0e}")
    integral = number.is_integer() and not any(c in node.name for c in ".eE")
    return _Value(guards.number(number), number, number, (number, number), integral, False,
                  True, abs(number))


def _leaf(node: exp.Column, table: Table, resolve) -> _Value:
    name = resolve(node)
    column = table.columns[name]
    if not column.numeric:
        raise NotSupported(f"{name} is {column.type}; expressions inside aggregates take "
                           "int and float columns")
    low = -math.inf if column.lower is None else column.lower
    high = math.inf if column.upper is None else column.upper
    reach = (max(low, -MAGNITUDE_CAP), min(high, MAGNITUDE_CAP))
    return _Value(exp.column(name), low, high, reach, column.type == "int", True,
                  bound=max(abs(end) for end in value_range(column.lower, column.upper)))


def _times(a: float, b: float) -> float:
    """a·b with 0·∞ = 0: an unbounded side times an exact zero is zero (values are finite)."""
    return 0.0 if a == 0 or b == 0 else a * b


def _add(a, b):
    return a[0] + b[0], a[1] + b[1]


def _sub(a, b):
    return a[0] - b[1], a[1] - b[0]


def _mul(a, b):
    products = [_times(x, y) for x in a for y in b]
    return min(products), max(products)


def _abs(a):
    low, high = a
    if low >= 0:
        return low, high
    if high <= 0:
        return -high, -low
    return 0.0, max(-low, high)


def _divide(node: exp.Div, table: Table, resolve) -> _Value:
    """Division by a non-zero constant c, or by an expression of columns whose derived
    domain excludes 0 (``cost / (days + 1)`` with days in [0, 60]: the column's values
    are clamped to their domain, so the divisor stays in [1, 61] for every row; the SQL
    holds it there too, ``guards.divisor``). The quotient's ends are the ends'
    quotients; integer by integer truncates towards zero, as PostgreSQL does. The
    divisor is sent as a double within 10⁻¹⁵⁰ ≤ |d| ≤ 10¹⁵⁰ (so the quotient of a
    guarded dividend can neither underflow nor overflow)."""
    text = _text(node)
    left = _operand(node, _evaluate(node.this, table, resolve))
    right = _evaluate(node.expression, table, resolve)
    least, most = guards.DIVISOR_RANGE
    if not right.null and right.constant and not right.nullable and right.low == right.high:
        if right.low == 0:
            raise NotSupported(f"{text} divides by zero; divide by a non-zero constant")
        if not least <= abs(right.low) <= most:
            raise NotSupported(f"{text}: divide by a constant between {least:.0e} and "
                               f"{most:.0e} in magnitude")
        divisor: exp.Expression = guards.number(right.low)
    elif right.null or right.bound > most or not (
            least <= right.low <= right.high or right.low <= right.high <= -least):
        raise NotSupported(f"{text} divides by a value that can be 0 (or beyond "
                           f"{least:.0e} to {most:.0e} in magnitude), which can fail in the "
                           "backend; divide by a non-zero constant, by columns whose "
                           "declared domains keep the divisor from 0, or by NULLIF(n, 0) of "
                           "an int column whose domain starts or ends at 0")
    elif any(isinstance(n, exp.Div) for n in right.sql.walk()):
        raise NotSupported(f"{text} divides by a quotient of columns; divide by columns "
                           "once (each guard of such a divisor doubles its SQL)")
    else:
        negative = right.high < 0
        divisor = guards.divisor(exp.cast(right.sql, guards.DOUBLE.copy()),
                                 -right.high if negative else right.low, negative)
    sql: exp.Expression = exp.Div(this=left.sql, expression=divisor)
    integer = left.integer and right.integer
    if left.null:
        return _always_null(left.constant)
    ends = (right.low, right.high)
    low, high = _quotient((left.low, left.high), ends)
    reach = _quotient(left.reach, ends)
    value = _Value(sql, low, high, reach, integer, left.nullable or right.nullable,
                   left.constant and right.constant,
                   left.bound / min(abs(right.low), abs(right.high)))
    if integer:
        return _rounding(node, value, exp.Trunc)
    return value


def _nullif(node: exp.Nullif, value: _Value, other: _Value) -> _Value:
    """NULLIF(x, c), c a constant: x, NULL where it equals c (Metabase divides by
    ``NULLIF(days, 0)``). An integer x whose range ends at c loses that end, so
    ``NULLIF(days, 0)`` with days in [0, 60] is in [1, 60] or NULL: a divisor that keeps
    from 0 (the SQL's NULL divides to NULL, which the aggregate skips)."""
    if not (other.constant and not other.null and not other.nullable
            and other.low == other.high):
        raise NotSupported(f"{_text(node)}: NULLIF takes a constant as its second argument")
    sql = exp.Nullif(this=value.sql, expression=other.sql)
    if value.null:
        return _always_null(value.constant)
    low, high, reach = value.low, value.high, value.reach
    if value.integer:
        low, high = low + (low == other.low), high - (high == other.low)
        reach = (reach[0] + (reach[0] == other.low), reach[1] - (reach[1] == other.low))
    if low > high:
        return _always_null(value.constant)
    return _Value(sql, low, high, reach, value.integer, True, value.constant, value.bound)


def _quotient(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """The range of x / y for x in ``a`` and y in ``b`` (which excludes 0)."""
    quotients = [x / y for x in a for y in b]
    return min(quotients), max(quotients)


def _extreme(node: exp.Expression, values: list[_Value]) -> _Value:
    """LEAST/GREATEST skip NULL arguments (both engines, as PostgreSQL), so the result
    is the least (greatest) of some non-empty set of the arguments that always holds
    the never-NULL ones. LEAST: from the lowest low to the lowest high of the never-NULL
    arguments (of all arguments, the highest high, when every one can be NULL);
    GREATEST mirrors it."""
    sql = type(node)(this=values[0].sql, expressions=[v.sql for v in values[1:]],
                     ignore_nulls=True)
    present = [v for v in values if not v.null]
    if not present:
        return _always_null(all(v.constant for v in values))
    certain = [v for v in present if not v.nullable] or None
    least = isinstance(node, exp.Least)

    def ends(low_of, high_of):
        if least:
            return (min(low_of(v) for v in present),
                    min(high_of(v) for v in certain) if certain
                    else max(high_of(v) for v in present))
        return (max(low_of(v) for v in certain) if certain
                else min(low_of(v) for v in present),
                max(high_of(v) for v in present))

    low, high = ends(lambda v: v.low, lambda v: v.high)
    reach = ends(lambda v: v.reach[0], lambda v: v.reach[1])
    return _Value(sql, low, high, reach, all(v.integer for v in present), certain is None,
                  all(v.constant for v in values), max(v.bound for v in values))


def _coalesce(values: list[_Value]) -> _Value:
    """COALESCE is its first non-NULL argument: one of the arguments up to the first
    that is never NULL."""
    reached = []
    for value in values:
        reached.append(value)
        if not value.nullable:
            break
    sql = exp.Coalesce(this=values[0].sql, expressions=[v.sql for v in values[1:]])
    hull = _hull(sql, reached, all(v.nullable for v in reached))
    # its type is that of all the arguments, as PostgreSQL resolves it: COALESCE(1, x)
    # of a float x is a float, so COALESCE(1, x) / 2 is 0.5, not an integer division
    return replace(hull, integer=hull.integer and all(v.integer for v in values if not v.null))


def _hull(sql: exp.Expression, values: list[_Value], nullable: bool) -> _Value:
    constant = all(v.constant for v in values)
    present = [v for v in values if not v.null]
    if not present:
        return _always_null(constant)
    return _Value(sql, min(v.low for v in present), max(v.high for v in present),
                  (min(v.reach[0] for v in present), max(v.reach[1] for v in present)),
                  all(v.integer for v in present), nullable, constant,
                  max(v.bound for v in values))


def _case(node: exp.Case, table: Table, resolve) -> _Value:
    """CASE WHEN c₁ THEN v₁ … [ELSE v₀] END: the hull of its branches, NULL without
    ELSE. Conditions are checked as WHERE is (per record, declared columns) and read the
    raw columns, as WHERE does."""
    if node.this is not None:
        raise NotSupported("write CASE WHEN col = value THEN ... END (the searched form)")
    case, branches = exp.Case(), []
    for when in node.args.get("ifs", []):
        condition = check_predicate(when.this, table, resolve, "a CASE condition")
        branches.append(_evaluate(when.args["true"], table, resolve))
        case = case.when(condition, branches[-1].sql, copy=False)
    default = node.args.get("default")
    if default is not None:
        branches.append(_evaluate(default, table, resolve))
        case = case.else_(branches[-1].sql, copy=False)
    nullable = default is None or any(b.nullable for b in branches)
    return replace(_hull(case, branches, nullable), constant=False)


def _field(node: exp.Extract, table: Table, resolve) -> _Value:
    """``EXTRACT(field FROM t)`` of a time column with a declared domain: a number
    within the field's range over that domain (``time_fields.field_range``: hour 0..23,
    the domain's years for year), NULL where t is; the backend extracts it from the
    moment clamped to the domain, so no row value leaves that range. ``t::timestamp``
    is t; the field of a constant moment is a constant (dbt's ``date_part('hour',
    '2023-01-01'::timestamp)``); ``epoch`` is ``_epoch``."""
    if _word(node.this) == "epoch":
        return _epoch(node, table, resolve)
    moment = node.expression.unnest()
    while isinstance(moment, exp.Cast) and moment.to.is_type(*_MOMENT_TYPES) and isinstance(
            moment.this.unnest(), exp.Column):
        moment = moment.this.unnest()
    if moment is not node.expression.unnest():
        node = exp.Extract(this=node.this.copy(), expression=moment.copy())
    if isinstance(moment, exp.Literal) and moment.is_string:
        written = parse_moment(moment.name)
        if written is not None:
            value = float(field_of(part_field(node.this), written))
            return _Value(guards.number(value), value, value, (value, value), False, False,
                          True, abs(value))
    field, column = extracted_column(node, table, resolve, "an aggregate")
    low, high = field_range(field, column)
    # not integral: PostgreSQL's extract is a numeric, so EXTRACT(hour …) / 2 is 5.5
    return _Value(field_sql(field, column), low, high, (low, high), False, True,
                  bound=max(abs(low), abs(high)))


# -- moments inside an aggregate: epochs and days --------------------------------------

_MOMENT_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()  # guards.moment_number's day of 1970-01-01
_TIME_FORMS = ("extract(epoch FROM t), extract(epoch FROM (TIMESTAMP '2025-01-01' - t)), "
               "t::date - DATE '2023-01-01' (days)")


def _word(node: exp.Expression | None) -> str:
    return node.name.lower() if isinstance(node, (exp.Var, exp.Literal, exp.Column)) else ""


def _time_operand(node: exp.Expression, table: Table, resolve
                  ) -> tuple[str | None, exp.Column | None, dt.datetime | None] | None:
    """(kind, column, constant) of a moment or day an epoch or a day difference reads:
    a date or timestamp column with a declared domain, or a moment constant (a quoted
    literal, as ``merge_steps.fold_time_constants`` leaves ``TIMESTAMP '…'`` and
    ``'…'::date``), cast or not; ``kind`` "day" (a date, or a cast to date), "moment"
    (a timestamp, or a cast to timestamp), None (a constant not cast: it takes the other
    side's, as PostgreSQL types an unknown literal). None for anything else; a time
    column without a declared domain is refused."""
    kind = None
    node = node.unnest()
    while isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE, *_MOMENT_TYPES):
        kind = kind or ("day" if node.to.is_type(exp.DataType.Type.DATE) else "moment")
        node = node.this.unnest()
    if isinstance(node, exp.Literal) and node.is_string:
        moment = parse_moment(node.name)
        return None if moment is None else (kind, None, moment)
    if not isinstance(node, exp.Column):
        return None
    column = _time_column(node, table, resolve, lambda name: (
        f"{name} inside an aggregate needs a declared domain [first, last] in the rules "
        "(what a moment outside it counts as)"))
    if column is None:
        return None
    return kind or ("day" if column.type == "date" else "moment"), node, None


def _time_column(node: exp.Column, table: Table, resolve, needs: Callable[[str], str]):
    """The declared date or timestamp column ``node`` names (None for another column),
    refused where the rules give it no domain: ``needs(name)`` says why it needs one."""
    column = table.columns.get(resolve(node))
    if column is None or column.type not in ("date", "timestamp"):
        return None
    if column.time_domain is None:
        raise NotSupported(f"{needs(column.name)}; ask the data owner")
    return column


def _time_value(operand, kind: str, table: Table, resolve) -> _Value:
    """A time operand as a number: its days (``kind`` "day") or seconds ("moment")
    since 1970-01-01 00:00, a timestamp's wall clock read as UTC (PostgreSQL's epoch of
    a ``timestamp``, whatever the session's zone; a date's midnight). A column is read
    clamped to its declared domain through ``guards.moment_number`` (whole numbers from
    the fields every engine extracts alike: a timestamp's fraction of a second is cut),
    so the value lies within the domain's and the SQL cannot fail."""
    _, column, constant = operand
    if column is None:
        number = (constant.date().toordinal() - _EPOCH_DAY) if kind == "day" else (
            constant - dt.datetime(1970, 1, 1)).total_seconds()
        number = float(number)
        return _Value(guards.number(number), number, number, (number, number),
                      number.is_integer(), False, True, abs(number))
    declared = table.columns[resolve(column)]
    first, last = (moment.replace(microsecond=0) for moment in declared.time_domain)
    raw = exp.column(declared.name, quoted=True)
    if declared.type == "date":  # its days; a moment: its midnight's seconds
        sql = exp.paren(guards.moment_number(raw, declared.time_domain, False)
                        - exp.Literal.number(_EPOCH_DAY))
        low, high = (float(m.toordinal() - _EPOCH_DAY) for m in (first, last))
        if kind == "moment":
            sql = exp.paren(sql * exp.Literal.number(86400))
            low, high = low * 86400, high * 86400
    else:
        seconds = exp.paren(guards.moment_number(raw, declared.time_domain, True)
                            - exp.Literal.number(_EPOCH_DAY * 86400))
        low, high = ((m - dt.datetime(1970, 1, 1)).total_seconds() for m in (first, last))
        sql = seconds
        if kind == "day":
            sql = exp.func("FLOOR", exp.Div(this=seconds, expression=exp.Literal.number(86400.0)))
            low, high = math.floor(low / 86400), math.floor(high / 86400)
    return _Value(sql, low, high, (low, high), True, True,
                  bound=max(abs(low), abs(high)) + 1)


def _epoch(node: exp.Extract, table: Table, resolve) -> _Value:
    """``extract(epoch FROM m)`` of a time column (seconds since 1970-01-01 of its wall
    clock, a date's midnight) or of a difference of two moments, one a column
    (``extract(epoch FROM (TIMESTAMP '2025-01-01' - visited_at))``: the interval's
    seconds, PostgreSQL's for a difference of timestamps), within the range the
    declared domain gives it."""
    inner = node.expression.unnest()
    sides = [inner.this, inner.expression] if isinstance(inner, exp.Sub) else [inner]
    operands = [_time_operand(side, table, resolve) for side in sides]
    if any(operand is None for operand in operands) or all(
            operand[1] is None for operand in operands):
        raise NotSupported(f"{_text(node)} is not supported inside an aggregate; the epoch "
                           f"of a time column or of its difference with a moment: "
                           f"{_TIME_FORMS}")
    if len(operands) == 2 and "day" in (operands[0][0], operands[1][0]) and all(
            operand[0] in ("day", None) for operand in operands):
        raise NotSupported(f"{_text(node)}: a date minus a date is a number of days, "
                           "which has no epoch; use it as it is", "42883")
    values = [_time_value(operand, "moment", table, resolve) for operand in operands]
    if len(values) == 1:
        value = values[0]
        return replace(value, integer=False)
    left, right = values
    low, high = _sub((left.low, left.high), (right.low, right.high))
    # bracketed: under an outer minus, x - (a - b) was written x - a - b (sqlglot writes
    # the tree's operands without brackets), so the SQL computed x - a - b
    return _Value(exp.paren(exp.Sub(this=left.sql, expression=right.sql)), low, high,
                  (low, high), False, True, False, left.bound + right.bound)


def _day_difference(node: exp.Sub, table: Table, resolve) -> _Value | None:
    """dbt's datediff: ``t::date - '2023-01-01'::date`` (PostgreSQL's date minus date: a
    whole number of days), a date column or a cast to date minus a day or another one.
    None where neither side is a time column (ordinary arithmetic); refused where one
    is and the other is not a day (a moment minus a moment is an interval: take its
    epoch)."""
    operands = [_time_operand(side, table, resolve) for side in (node.this, node.expression)]
    if all(operand is None or operand[1] is None for operand in operands):
        return None
    if any(operand is None for operand in operands) or not all(
            operand[0] in ("day", None) for operand in operands) or not any(
            operand[0] == "day" for operand in operands):
        raise NotSupported(f"{_text(node)} is not supported inside an aggregate: a moment's "
                           f"difference is an interval; use {_TIME_FORMS}")
    left, right = (_time_value(operand, "day", table, resolve) for operand in operands)
    low, high = _sub((left.low, left.high), (right.low, right.high))
    return _Value(exp.paren(exp.Sub(this=left.sql, expression=right.sql)), low, high,
                  (low, high), True, True, False, left.bound + right.bound)


def _boolean(condition: exp.Expression, table: Table, resolve) -> _Value:
    """``CAST(condition AS integer)`` (Ibis's mean of a boolean, ``AVG(CAST(x > 7 AS
    INT))``): 1 where it holds, 0 where it fails, NULL where it is NULL, as PostgreSQL
    casts a boolean; so the CASE WHEN c THEN 1 WHEN NOT (c) THEN 0 END it stands for."""
    return _case(exp.Case().when(condition.copy(), exp.Literal.number(1)).when(
        exp.not_(exp.paren(condition.copy())), exp.Literal.number(0)), table, resolve)


def _cast(node: exp.Cast, inner: _Value) -> _Value:
    """CAST to a real type keeps the value (computed as DOUBLE, never as a NUMERIC that
    could overflow); CAST to an integer type rounds, within floor(low)..ceil(high)
    whatever the engine's tie rule, computed as BIGINT (refused where the value could
    leave BIGINT's range)."""
    kind = node.to.this if isinstance(node.to, exp.DataType) else None
    if kind in _REAL_TYPES:
        return replace(inner, integer=False)
    if kind in _INTEGER_TYPES:
        _whole(node, inner)
        sql = exp.cast(exp.cast(inner.sql, "bigint"), _DOUBLE.copy())
        return _Value(sql, *_integral(inner.low, inner.high, math.floor, math.ceil),
                      _integral(*inner.reach, math.floor, math.ceil), True, inner.nullable,
                      inner.constant, inner.bound + 1)
    raise NotSupported(f"{_text(node)}: inside an aggregate, CAST to a "
                       "number (int, bigint, numeric, double precision)")


def _whole(node: exp.Expression, inner: _Value) -> None:
    """Rounding and integer casts take values within ±9·10¹⁸, which the SQL itself must
    keep below 2⁶³ (a BIGINT cannot hold more, and Spark computes them as BIGINTs)."""
    if (max(abs(inner.reach[0]), abs(inner.reach[1])) > 9e18
            or inner.bound >= guards.WHOLE_BOUND - 1):
        raise NotSupported(f"{_text(node)} can be out of the integer "
                           "range; round or cast a narrower value")


def _integral(low: float, high: float, down, up) -> tuple[float, float]:
    return (low if math.isinf(low) else float(down(low)),
            high if math.isinf(high) else float(up(high)))


def _rounding(node: exp.Expression, inner: _Value, kind: type | None = None) -> _Value:
    """floor, ceil, trunc and round to a whole number (``kind``, else the node's own):
    monotone, so the ends of the range map to the ends (round within floor..ceil,
    whatever its tie rule). Given as a DOUBLE (Spark's floor and ceil give a BIGINT, its
    trunc is a cast to one)."""
    kind = kind or type(node)
    if node.args.get("decimals") is not None or node.args.get("to") is not None:
        raise NotSupported(f"{_text(node)}: round to a whole number inside "
                           "an aggregate (no digits argument)")
    down, up = {exp.Floor: (math.floor, math.floor), exp.Ceil: (math.ceil, math.ceil),
                exp.Trunc: (math.trunc, math.trunc),
                exp.Round: (math.floor, math.ceil)}[kind]
    _whole(node, inner)
    sql = exp.cast(kind(this=inner.sql), _DOUBLE.copy())
    return _Value(sql, *_integral(inner.low, inner.high, down, up),
                  _integral(*inner.reach, down, up), True, inner.nullable, inner.constant,
                  inner.bound + 1)


def _root_or_log(node: exp.Expression, inner: _Value) -> _Value:
    text = _text(node)
    if isinstance(node, exp.Sqrt):
        if inner.low < 0:
            raise NotSupported(f"{text} can take a negative value, which fails in the "
                               "backend; its argument's declared domain must be ≥ 0")
        function = math.sqrt
        sql: exp.Expression = exp.Sqrt(this=exp.Abs(this=inner.sql))  # total: |v|
        bound = math.sqrt(inner.bound)
    else:
        if inner.low <= 0:
            raise NotSupported(f"{text} can take a value ≤ 0, which fails in the backend; "
                               "its argument's declared domain must be > 0")
        function = guards.log_value  # ln(|v| + 2⁻¹⁰²²), as the SQL computes it
        sql = exp.Ln(this=guards.log_argument(inner.sql))
        bound = _LN_BOUND
    return _Value(sql, *(function(v) for v in (inner.low, inner.high)),
                  (function(inner.reach[0]), function(inner.reach[1])), False, inner.nullable,
                  inner.constant, bound)


def _square(node: exp.Pow, base: _Value) -> _Value:
    """POWER(x, 2) or x ^ 2, the one power admitted: computed as POWER of the snapped
    operand (as ``*`` takes it), so the square of a value below 2⁵⁰⁰ neither overflows
    nor underflows to 0 (PostgreSQL fails on both); its range is the square of the
    operand's |range|, tight where the operand reads a column once. Other exponents
    refused: a cube can underflow, a fraction fails on negative values."""
    exponent = node.expression.unnest()  # '2' too: a bound parameter's value
    if not (isinstance(exponent, exp.Literal) and _number(exponent).low == 2):
        raise NotSupported(f"{_text(node)}: inside an aggregate, POWER takes the exponent "
                           "2 (a square); write a product (x * x * x) or sqrt(x) instead")
    base = _operand(node, base)
    sql = exp.Pow(this=base.sql, expression=guards.number(2.0))
    if base.null:
        return _always_null(base.constant)
    return _Value(sql, *_squared((base.low, base.high)), _squared(base.reach), False,
                  base.nullable, base.constant, base.bound * base.bound)


def _squared(ends: tuple[float, float]) -> tuple[float, float]:
    low, high = _abs(ends)
    return _times(low, low), _times(high, high)


def _logarithm(node: exp.Log, table: Table, resolve) -> _Value:
    """LOG(x) (base 10, as PostgreSQL reads it; LOG10 too) or LOG(b, x) with a constant
    base b > 0, b ≠ 1 (cast or not: Ibis's log2 is LOG(CAST(2 AS DECIMAL), …)): ln(x) over the constant ln(b), ln guarded as ``ln`` is (so x's
    declared domain must be > 0). Written so in every dialect: Spark's one-argument LOG
    is the natural logarithm."""
    argument, base = node.expression, node.this
    if argument is None:
        argument, base = base, exp.Literal.number(10)
    base = _evaluate(base, table, resolve)  # a constant, cast or not (Ibis's log2)
    if not base.constant or base.nullable or base.low != base.high:
        raise NotSupported(f"{_text(node)}: inside an aggregate, LOG takes a constant base")
    divisor = math.log(base.low) if base.low > 0 else 0.0
    if abs(divisor) < 1e-6:
        raise NotSupported(f"{_text(node)}: the base of LOG must be a positive number "
                           "other than 1")
    inner = _evaluate(argument, table, resolve)
    if inner.null:
        return _always_null(inner.constant)
    ln = _root_or_log(node, inner)
    ends = sorted(end / divisor for end in (ln.low, ln.high))
    reach = sorted(end / divisor for end in ln.reach)
    return _Value(exp.Div(this=exp.paren(ln.sql, copy=False),
                          expression=guards.number(divisor)),
                  *ends, tuple(reach), False, ln.nullable, ln.constant,
                  ln.bound / abs(divisor))


_EXP_BOUND = 700.0  # e^700 ≈ 10³⁰⁴ is finite; e^−700 is no underflow (PostgreSQL fails on 0)


def _exponential(node: exp.Exp, inner: _Value) -> _Value:
    """EXP(x) where the SQL's own bound keeps |x| ≤ 700: neither overflow nor an
    underflow to 0 (an error on PostgreSQL) for any row; monotone, so the ends map to the
    ends."""
    if inner.bound > _EXP_BOUND or max(abs(inner.reach[0]), abs(inner.reach[1])) > _EXP_BOUND:
        raise NotSupported(f"{_text(node)} can overflow or underflow in the backend; its "
                           f"argument must stay within ±{_EXP_BOUND:g} for every value of "
                           "its columns' declared domains")
    return _Value(exp.Exp(this=inner.sql), math.exp(inner.low), math.exp(inner.high),
                  (math.exp(inner.reach[0]), math.exp(inner.reach[1])), False,
                  inner.nullable, inner.constant, math.exp(inner.bound))
