"""The PostgreSQL type of each column the proxy answers, as PostgreSQL 15 would type the
same statement over the same tables: the one place that decides it (docs/clients.md,
"Result types"). A type is read from the statement and the rules alone (each column's
type as the backend stores it, read at start: ``Column.stored``), never from a row, so
it tells nothing of the data.

Names are PostgreSQL's as proxy.pgtypes spells them ("integer", "double precision", ...).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from proxy.pgtypes import RULE_TYPES
from proxy.vocabulary import (
    AVG,
    COLUMN,
    COUNT,
    DISTINCT,
    MAX,
    MIN,
    PERCENTILE,
    PUBLIC,
    SELECTED,
    SPREADS,
    SUM,
    UNITS,
    VALUE,
    Kind,
)

SMALLINT, INTEGER, BIGINT, NUMERIC = "smallint", "integer", "bigint", "numeric"
REAL, DOUBLE, TEXT, BOOLEAN = "real", "double precision", "text", "boolean"
DATE, TIMESTAMP, TIMESTAMPTZ = "date", "timestamp", "timestamptz"
INTEGERS = (SMALLINT, INTEGER, BIGINT)
_PLAIN_KEYS = (COLUMN, PUBLIC, SELECTED)
# PostgreSQL's numeric types in the order an operator of two of them promotes to
_NUMBERS = (SMALLINT, INTEGER, BIGINT, NUMERIC, REAL, DOUBLE)
# the ranges of the integer types: a released value beyond its type's is clamped to it
INT_RANGES = {SMALLINT: (-2**15, 2**15 - 1), INTEGER: (-2**31, 2**31 - 1),
              BIGINT: (-2**63, 2**63 - 1)}


def column_type(column) -> str:
    """A column of the rules (or of a plan's table) as PostgreSQL types it: as the
    backend stores it where that was read, else its rule type's (``RULE_TYPES``)."""
    stored = (getattr(column, "stored", None) or "").split("(")[0]
    if stored in _STORED.get(column.type, ()):
        return stored
    return RULE_TYPES.get(column.type, TEXT)


# the stored types each rule type is answered as; any other (a rule "date" over a
# timestamp, text over a uuid) as its rule type's, the values the proxy computes
_STORED = {"int": (SMALLINT, INTEGER, BIGINT, NUMERIC), "float": (REAL, DOUBLE, NUMERIC),
           "text": (TEXT, "varchar")}


def aggregate_type(kind: Kind, argument: str | None, continuous: bool = False) -> str:
    """What PostgreSQL's aggregate of ``kind`` answers over a value of type ``argument``
    (None: COUNT(*)): COUNT bigint; SUM of smallint/integer bigint, of bigint or numeric
    numeric, of a float its own; AVG and the variances and deviations of an integer or
    numeric numeric, of a float double precision; MIN, MAX, percentile_disc (and MEDIAN)
    the argument's own; percentile_cont and the paired kinds (CORR, REGR_*) double
    precision."""
    if kind in (COUNT, UNITS, DISTINCT):
        return BIGINT
    if continuous:
        return DOUBLE
    if argument is None:
        return BIGINT
    if kind in (MIN, MAX, PERCENTILE, VALUE):
        return argument
    if kind is SUM:
        if argument in (SMALLINT, INTEGER):
            return BIGINT
        return NUMERIC if argument in (BIGINT, NUMERIC) else argument
    if kind is AVG or kind in SPREADS:
        return NUMERIC if argument in (*INTEGERS, NUMERIC) else DOUBLE
    return DOUBLE  # CORR, COVAR_*, REGR_*: of double precision


_CASTS = {
    exp.DataType.Type.SMALLINT: SMALLINT, exp.DataType.Type.TINYINT: SMALLINT,
    exp.DataType.Type.INT: INTEGER, exp.DataType.Type.BIGINT: BIGINT,
    exp.DataType.Type.DECIMAL: NUMERIC, exp.DataType.Type.FLOAT: REAL,
    exp.DataType.Type.DOUBLE: DOUBLE, exp.DataType.Type.TEXT: TEXT,
    exp.DataType.Type.VARCHAR: "varchar", exp.DataType.Type.BOOLEAN: BOOLEAN,
    exp.DataType.Type.DATE: DATE, exp.DataType.Type.TIMESTAMP: TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ: TIMESTAMPTZ,
}
_AGGREGATES = {exp.Count: COUNT, exp.Sum: SUM, exp.Avg: AVG, exp.Min: MIN, exp.Max: MAX,
               exp.Stddev: Kind.STDDEV_SAMP, exp.StddevSamp: Kind.STDDEV_SAMP,
               exp.StddevPop: Kind.STDDEV_POP, exp.Variance: Kind.VAR_SAMP,
               exp.VariancePop: Kind.VAR_POP}
# functions of one number whose answer is double precision for an integer or a float
# argument and numeric for a numeric one (PostgreSQL has both forms; an integer takes
# the double precision one)
_FLOATING = (exp.Floor, exp.Ceil, exp.Sqrt, exp.Ln, exp.Exp, exp.Log, exp.Cbrt, exp.Sign,
             exp.Trunc, exp.Pow)
_TEXTS = (exp.Lower, exp.Upper, exp.DPipe, exp.Concat, exp.Substring, exp.Trim, exp.Initcap)


def expression_type(node: exp.Expression, of_column: Callable[[exp.Column], str | None]
                    ) -> str | None:
    """The PostgreSQL type of ``node`` where it is one of the forms typed here (columns
    by ``of_column``; literals, casts, arithmetic, CASE, the usual functions of numbers,
    texts and times, aggregates and windows of them); None for any other (the caller
    keeps its own)."""
    def typed(child: exp.Expression | None) -> str | None:
        return None if child is None else expression_type(child, of_column)

    if isinstance(node, (exp.Paren, exp.Alias)):
        return typed(node.this)
    if isinstance(node, exp.Column):
        return of_column(node)
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.Boolean):
        return BOOLEAN
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _CASTS.get(node.to.this)
    if isinstance(node, exp.Neg):
        return typed(node.this)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        sides = [typed(node.this), typed(node.expression)]
        if isinstance(node, exp.Sub) and DATE in sides:  # date - '2023-01-01': an unknown
            sides = [DATE if isinstance(side, exp.Literal) and side.is_string else kind
                     for side, kind in zip((node.this.unnest(), node.expression.unnest()),
                                           sides)]  # literal read as a date
        if DATE in sides and isinstance(node, (exp.Add, exp.Sub)):  # days of dates
            return INTEGER if sides == [DATE, DATE] and isinstance(node, exp.Sub) else (
                DATE if sorted(sides, key=str) in ([DATE, INTEGER], [DATE, SMALLINT])
                and (sides[0] == DATE or isinstance(node, exp.Add)) else None)
        return _promoted(sides)
    if isinstance(node, (exp.Predicate, exp.Connector, exp.Not)):
        return BOOLEAN
    if isinstance(node, (exp.WidthBucket, exp.Length, exp.Ascii)):
        return INTEGER
    if isinstance(node, exp.Extract):
        return NUMERIC  # EXTRACT: numeric since PostgreSQL 14 (date_part, parsed alike: float8)
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        inner = typed(node.this)
        return TIMESTAMP if inner == TIMESTAMP else TIMESTAMPTZ if inner in (
            DATE, TIMESTAMPTZ) else None
    if isinstance(node, exp.Abs):
        return typed(node.this)
    if isinstance(node, exp.Round):
        inner = typed(node.this)
        if node.args.get("decimals") is not None:
            return NUMERIC if inner in (*_NUMBERS[:4],) else None
        return NUMERIC if inner == NUMERIC else DOUBLE if inner in _NUMBERS else None
    if isinstance(node, _FLOATING):
        inner = _promoted([typed(node.this)] + ([typed(node.expression)] if isinstance(
            node, exp.Pow) else []))
        return NUMERIC if inner == NUMERIC else DOUBLE if inner in _NUMBERS else None
    if isinstance(node, (exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least)):
        return common_type([typed(child) for child in _branches(node)
                        if not isinstance(child, exp.Null)])
    if isinstance(node, exp.Nullif):
        return typed(node.this)
    if isinstance(node, _TEXTS):
        return TEXT
    if isinstance(node, exp.Window):
        return typed(node.this)
    if isinstance(node, exp.Array):  # one-dimensional, of one type (PostgreSQL's ARRAY[…])
        element = common_type([typed(child) for child in node.expressions
                               if not isinstance(child, exp.Null)])
        return None if element is None else f"{element}[]"
    if isinstance(node, exp.Filter):
        return typed(node.this)
    if isinstance(node, exp.AggFunc) and type(node) in _AGGREGATES:
        argument = node.this
        if isinstance(argument, exp.Distinct):
            argument = argument.expressions[0] if argument.expressions else None
        inner = None if argument is None or isinstance(argument, exp.Star) else typed(argument)
        if inner is None and not isinstance(node, exp.Count):
            return None
        return aggregate_type(_AGGREGATES[type(node)], inner)
    return None


def _literal(node: exp.Literal) -> str:
    """A literal as PostgreSQL's parser types it: a whole number integer (bigint beyond
    it, numeric beyond that), one with a point or an exponent numeric, a string text."""
    if node.is_string:
        return TEXT
    text = node.name
    if text.lstrip("-").isdigit():
        value = int(text)
        return INTEGER if -2**31 <= value < 2**31 else BIGINT if -2**63 <= value < 2**63 \
            else NUMERIC
    return NUMERIC


def _promoted(types: list[str | None]) -> str | None:
    """The type of an arithmetic operator over operands of ``types``: the wider number
    (a real beside an integer or numeric is double precision, as PostgreSQL resolves
    it); None where an operand is not a number typed here (a date minus a date...)."""
    if not types or any(t not in _NUMBERS for t in types):
        return None
    widest = max(types, key=_NUMBERS.index)
    if widest == REAL and any(t != REAL for t in types):
        return DOUBLE
    return widest


def _branches(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Case):
        return [branch.args.get("true") for branch in node.args.get("ifs") or []] + (
            [node.args["default"]] if node.args.get("default") is not None else [])
    if isinstance(node, exp.If):
        return [node.args.get("true"), *([node.args["false"]] if node.args.get("false")
                                         is not None else [])]
    return [node.this, *node.expressions]


def common_type(types: list[str | None]) -> str | None:
    """The type of a CASE (COALESCE, GREATEST) of branches of ``types`` (NULL branches
    left out): all one type that type; numbers the widest; texts text."""
    known = [t for t in types if t is not None]
    if not known or len(known) < len(types):
        return None
    if len(set(known)) == 1:
        return known[0]
    if all(t in _NUMBERS for t in known):
        widest = max(known, key=_NUMBERS.index)
        return DOUBLE if widest == REAL else widest
    if all(t in (TEXT, "varchar") for t in known):
        return TEXT
    return None


def argument_type(column) -> str:
    """The type of an aggregate's argument: a column's (``column_type``), an expression's
    as PostgreSQL types it over the table's columns (a ``DerivedColumn``: ``age::bigint``
    bigint, ``CASE WHEN age > 30 THEN 1 ELSE 0 END`` integer), else its rule type's."""
    if getattr(column, "expression", None) is not None:
        return column.pg or RULE_TYPES[column.type]
    return column_type(column)


def of_columns(table, resolve: Callable[[exp.Column], str] | None = None
               ) -> Callable[[exp.Column], str | None]:
    """``expression_type``'s reading of a column of ``table`` (named as ``resolve``
    names it, else by its own name)."""
    def of_column(node: exp.Column) -> str | None:
        try:
            name = resolve(node) if resolve is not None else node.name
        except Exception:  # noqa: BLE001 (a name the table lacks: not typed here)
            return None
        column = table.columns.get(name)
        return None if column is None or getattr(column, "expression", None) is not None \
            else column_type(column)
    return of_column


def key_type(term, table) -> str:
    """A GROUP BY term's type: as PostgreSQL types its expression (``GroupKey.pg``, set
    at analysis), else its column's where it is one, else its rule type's."""
    if term.pg is not None:
        return term.pg
    if term.kind in _PLAIN_KEYS and term.column in table.columns:
        return column_type(table.columns[term.column])
    return RULE_TYPES[term.type]


def fitted(value, kind: str):
    """A released value of the integer type ``kind`` within its range: one beyond it
    (a noisy MAX of an integer column whose declared domain reaches past 2^31) as the
    range's nearer end, so that no client's decoding and no post-processing overflows on
    it; any other unchanged. The range is the type's, public: clamping reads nothing."""
    if value is None or isinstance(value, bool) or kind not in INT_RANGES:
        return value
    low, high = INT_RANGES[kind]
    try:
        return low if value < low else high if value > high else value
    except TypeError:
        return value


def statement_types(tree: exp.Expression, tables) -> list[str | None]:
    """Each result column's type as PostgreSQL types a statement run as written over
    public tables (a ``PassthroughPlan``), where ``expression_type`` types its select
    item over the columns of the tables its FROM names (``tables``: the rules' tables by
    name); None for a plain column (the backend's own type stands) and any item not
    typed here. A UNION's column: the common type of its branches'."""
    if isinstance(tree, exp.SetOperation):
        left, right = statement_types(tree.this, tables), statement_types(tree.expression,
                                                                            tables)
        return [None if None in pair else common_type(list(pair))
                for pair in zip(left, right)]
    if not isinstance(tree, exp.Select):
        return [None] * len(tree.selects) if hasattr(tree, "selects") else []
    sources = {}
    for source in [tree.args.get("from_"), *(tree.args.get("joins") or [])]:
        node = source.this if source is not None else None
        if isinstance(node, exp.Table) and node.name in tables:
            sources[node.alias_or_name] = tables[node.name]

    def of_column(node: exp.Column) -> str | None:
        if node.table:
            owners = [sources[node.table]] if node.table in sources else []
        else:
            owners = [t for t in sources.values() if node.name in t.columns]
        if len(owners) != 1 or node.name not in owners[0].columns:
            return None
        return column_type(owners[0].columns[node.name])

    typed = []
    for item in tree.selects:
        node = item.unalias()
        typed.append(None if isinstance(node, (exp.Column, exp.Star))
                     else expression_type(node, of_column))
    return typed
