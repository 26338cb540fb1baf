"""Checks on the WHERE clause: only per-record conditions on declared columns.

A predicate that looks at one record at a time keeps every sensitivity of SPEC §5.2
valid (a modified record may enter or leave the scope, nothing more). Functions,
subqueries and anything else that could look across records are refused; a field of a
time column compared with numbers (``EXTRACT(dow FROM t) IN (0, 6)``) is a function of the
record's own value, computed on the moment clamped to the declared domain so that it
cannot fail (``proxy.analyze.time_fields``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from sqlglot import exp

from proxy.analyze.comparisons import FLIPPED, beyond_double
from proxy.analyze.keyed_terms import keyed_terms
from proxy.analyze.patterns import CASED, PATTERNS, canonical_patterns
from proxy.analyze.time_fields import check_compared, computed_fields, unbracketed
from proxy.errors import NotSupported, Refused, UnknownFunction
from proxy.interrupts import checkpoint
from proxy.rules import Table, parse_moment
from proxy.trees import balanced

_ALLOWED = (
    exp.And, exp.Or, exp.Not, exp.Paren,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.Between, exp.In, exp.Is,
    exp.Literal, exp.Boolean, exp.Null, exp.Neg, exp.Tuple,
    exp.Like, exp.ILike, exp.Escape,  # as canonical_patterns writes them
)


def check_predicate(where: exp.Expression, table: Table, resolve_column,
                    place: str = "WHERE") -> exp.Expression:
    """Validate the WHERE condition (or another condition: ``place`` says where it
    stands, for the refusals) and return it with columns unqualified."""
    condition = unbracketed(canonical_patterns(keyed_terms(where.copy(), table, resolve_column),
                                               table, resolve_column))
    for node in list(condition.walk()):
        checkpoint()
        if isinstance(node, exp.Column):
            name = resolve_column(node)
            resolved = exp.column(name, quoted=True)
            if node is condition:  # a bare boolean column (WHERE c.vip): no parent to replace it in
                condition = resolved
            else:
                node.replace(resolved)
        elif isinstance(node, (exp.Identifier, exp.Star)):
            continue
        elif isinstance(node, exp.Extract):  # a field of a time column, compared with numbers
            check_compared(node, table, resolve_column, place)
        elif isinstance(node, exp.Var) and isinstance(node.parent, exp.Extract):
            continue  # the field's name
        elif isinstance(node, exp.Literal) and not node.is_string and beyond_double(node.name):
            shown = node.name if len(node.name) <= 24 else node.name[:20] + "…"
            raise Refused(f"the number {shown} is out of range for type double precision "
                          "(beyond ±1.8e308, or too small to tell from 0); write a number "
                          "within that range", "22003")
        elif isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            raise NotSupported(f"subqueries in {place} are not supported; "
                               "use comparisons, BETWEEN, IN (...), IS NULL, AND/OR/NOT")
        elif isinstance(node, exp.Substring) and _fixed_substring(node, table, resolve_column):
            continue  # SUBSTRING(text column, start ≥ 1, length ≥ 0): a function of the row
        elif isinstance(node, CASED) and isinstance(node.parent, PATTERNS) \
                and node.arg_key == "this":
            continue  # LOWER(col) LIKE 'p': canonical_patterns checked col is text
        elif isinstance(node, exp.Neg) and not _constant(node.this.unnest()):
            raise NotSupported(
                f"a minus sign before a column is not allowed in {place} (negating a "
                "column's most negative integer, or any unsigned one but 0, fails in the "
                "backend); compare the column itself: x > 3 instead of -x < -3")
        elif isinstance(node, exp.Func) and not isinstance(node, _ALLOWED):
            raise UnknownFunction(
                f"{_function_named(node)} is not allowed in {place}; "
                "use comparisons, BETWEEN, IN (...), IS NULL, LIKE, AND/OR/NOT on columns"
            )
        elif not isinstance(node, _ALLOWED):
            raise NotSupported(
                f"{_operator_named(node)} is not allowed in {place}; "
                "use comparisons, BETWEEN, IN (...), IS NULL, LIKE, AND/OR/NOT on columns"
            )
    _check_literal_types(condition, table)
    _check_conditions(condition, table, place)
    return computed_fields(_merged_exclusions(_whole_numbers(condition, table)), table)


# operators as the analyst writes them (the refusal said sqlglot's names: NULLSAFENEQ)
_OPERATORS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.IntDiv: "/",
              exp.Mod: "%", exp.DPipe: "||", exp.NullSafeNEQ: "IS DISTINCT FROM",
              exp.NullSafeEQ: "IS NOT DISTINCT FROM", exp.SimilarTo: "SIMILAR TO",
              exp.BitwiseAnd: "&", exp.BitwiseOr: "|", exp.BitwiseXor: "#",
              exp.BitwiseNot: "~", exp.BitwiseLeftShift: "<<", exp.BitwiseRightShift: ">>"}


def _operator_named(node: exp.Expression) -> str:
    """``the operator - (a - 3)``, as written (a long operand cut); other nodes by
    their kind (``ANY``)."""
    symbol = _OPERATORS.get(type(node))
    if symbol is None:
        return node.key.upper()
    text = node.sql(dialect="postgres")
    return f"the operator {symbol} ({text if len(text) <= 60 else text[:57] + '…'})"


def _function_named(node: exp.Func) -> str:
    """``function name`` of a call; an operator's whole text (``region ~ '('``: its
    text cut at the first bracket read "function region ~ '")."""
    text = node.sql(dialect="postgres")
    name = text.split("(")[0]
    return f"function {name}" if name.replace("_", "").replace(".", "").isalnum() \
        else f"the operator in {text[:80]}"


def _check_conditions(condition: exp.Expression, table: Table, place: str) -> None:
    """What stands where a condition must (the whole, and each operand of AND, OR and
    NOT) is one: a comparison, TRUE, FALSE, NULL or a bool column. A number or text
    there (``CASE WHEN age THEN …``, ``WHERE 1``) failed in the backend after the debit
    (PostgreSQL: "argument of WHEN must be type boolean")."""
    pending = [condition]
    while pending:
        node = pending.pop().unnest()
        if isinstance(node, (exp.Connector, exp.Not)):
            pending += [node.this] + ([node.expression] if isinstance(node, exp.Connector)
                                      else [])
            continue
        if isinstance(node, exp.Column) and table.columns[node.name].type != "bool" or \
                isinstance(node, (exp.Literal, exp.Neg, exp.Tuple)):
            shown = node.name if isinstance(node, exp.Column) else node.sql(dialect="postgres")
            raise NotSupported(f"{shown} is not a condition in {place}; compare it: age > 30, "
                               "region = 'north'", "42804")  # PostgreSQL's: not boolean


INT4_MAX = 2**31 - 1  # PostgreSQL's substring(text, int, int)


def _fixed_substring(node: exp.Substring, table: Table, resolve_column) -> bool:
    """``SUBSTRING(col FROM start FOR length)`` of a text column with integer constants,
    start ≥ 1 and length ≥ 0 (TPC-H's country codes, ``SUBSTRING(c_phone, 1, 2)``): the
    same string on every backend, and it cannot fail (PostgreSQL refuses a negative
    length, and has no substring of a bigint start or length: beyond ``INT4_MAX`` it
    failed after the debit, as DuckDB did beyond a BIGINT). The shape cache never
    rebinds these constants (proxy.analyze.shapes)."""
    column, start, length = node.this, node.args.get("start"), node.args.get("length")
    if not isinstance(column, exp.Column) or length is None:
        return False
    declared = table.columns.get(resolve_column(column))
    if declared is None or declared.type != "text":
        return False
    return all(isinstance(value, exp.Literal) and not value.is_string and value.name.isdigit()
               and int(value.name) <= INT4_MAX for value in (start, length)) \
        and int(start.name) >= 1


WHOLE_CAP = 2**64


def _whole_numbers(condition: exp.Expression, table: Table) -> exp.Expression:
    """An int column's comparisons with numbers written with a point or an exponent, as
    the same comparisons with whole numbers (``n >= 0.5`` is ``n >= 1``, ``n = 1.5``
    never holds: ``n <> n``, NULL for NULL). DuckDB compares an integer with a decimal
    of scale s as DECIMAL(38, s), and a row beyond 38 − s digits failed after the debit
    (``n >= 0.0000000000000000000000000000001`` on 2³¹ − 1); a number of more than 38
    digits it reads as a double, and PostgreSQL compares exactly."""
    root = exp.Paren(this=condition)  # a parent for a comparison that is the whole condition
    for node in list(condition.find_all(*FLIPPED, exp.Between, exp.In)):
        column = node.this
        if isinstance(node, (exp.Between, exp.In)):
            if not _int_column(column, table):
                continue
            if isinstance(node, exp.Between):
                for key, rounded in (("low", math.ceil), ("high", math.floor)):
                    value = _written(node.args[key])
                    if value is not None:
                        node.set(key, _whole(rounded(value)))
                continue
            values = [_written(item) for item in node.expressions]
            kept = [item if value is None else _whole(value)
                    for item, value in zip(node.expressions, values)
                    if value is None or value == int(value)]
            node.set("expressions", kept) if kept else node.replace(exp.NEQ(
                this=column.copy(), expression=column.copy()))
            continue
        kind, value = type(node), _written(node.expression)
        if isinstance(node.expression, (exp.Column, exp.Extract)):
            kind, column, value = FLIPPED[kind], node.expression, _written(node.this)
        if value is None or not _int_column(column, table):
            continue
        column = column.copy()
        if value == int(value):
            node.replace(kind(this=column, expression=_whole(value)))
        elif kind in (exp.EQ, exp.NEQ):  # never equal: n <> n is FALSE, NULL for NULL
            node.replace((exp.NEQ if kind is exp.EQ else exp.EQ)(this=column,
                                                                  expression=column.copy()))
        elif kind in (exp.GT, exp.GTE):
            node.replace(exp.GTE(this=column, expression=_whole(math.ceil(value))))
        else:
            node.replace(exp.LTE(this=column, expression=_whole(math.floor(value))))
    return root.this


def _int_column(node: exp.Expression, table: Table) -> bool:
    """An int column, or a field extracted from a time column (a whole number)."""
    return isinstance(node, exp.Extract) or (
        isinstance(node, exp.Column) and table.columns[node.name].type == "int")


def _written(node: exp.Expression) -> Decimal | None:
    """The value of a number constant written with a point or an exponent, else None."""
    literal = node.this if isinstance(node, exp.Neg) else node
    if not isinstance(literal, exp.Literal) or literal.is_string or literal.name.isdigit():
        return None
    value = Decimal(literal.name)  # exact (arithmetic would round to 28 digits)
    return value.copy_negate() if isinstance(node, exp.Neg) else value


def _whole(value: Decimal | int) -> exp.Expression:
    """A whole number as a literal; beyond ±2⁶⁴, which no int column reaches, ±2⁶⁴ (1e308
    is not written with its 309 digits)."""
    number = max(-WHOLE_CAP, min(WHOLE_CAP, int(value)))
    literal = exp.Literal.number(abs(number))
    return exp.Neg(this=literal) if number < 0 else literal


def _merged_exclusions(condition: exp.Expression) -> exp.Expression:
    """Each AND chain's terms that exclude constants from one column (``col <> 1``,
    ``NOT col = 2``, ``col NOT IN (3, 4)``) as one ``NOT col IN (1, 2, 3, 4)``, the same
    condition (NULLs included). DuckDB plans a chain of such terms in time and memory
    that grow with their square (1,000 ``age <> i``: 570 MB; 4,900, within the token
    limit: 12 GB); one list it plans at once."""
    for node in list(condition.find_all(exp.And)):
        if isinstance(node.parent, exp.And):
            continue  # inside a chain: its root merges it
        operands = list(node.flatten(unnest=False))
        excluded: dict[str, list[exp.Expression]] = {}
        terms: dict[str, int] = {}
        kept: list[exp.Expression] = []
        for operand in operands:
            column, values = _exclusion(operand)
            if column is None:
                kept.append(operand)
            else:
                excluded.setdefault(column, []).extend(values)
                terms[column] = terms.get(column, 0) + 1
        if all(count < 2 for count in terms.values()):
            continue
        kept += [exp.Not(this=exp.In(this=exp.column(column, quoted=True), expressions=values))
                 for column, values in excluded.items()]
        merged = balanced(exp.And, kept)
        if node is condition:
            condition = merged
        else:
            node.replace(merged)
    return condition


def _exclusion(term: exp.Expression) -> tuple[str | None, list[exp.Expression]]:
    """(column, constants) of a term that excludes constants from a column, else
    (None, [])."""
    term = term.unnest()
    if isinstance(term, exp.NEQ):
        column, value = term.this, term.expression
        if isinstance(value, exp.Column):
            column, value = value, column
        if isinstance(column, exp.Column) and _constant(value):
            return column.name, [value]
        return None, []
    if isinstance(term, exp.Not):
        inner = term.this.unnest()
        if isinstance(inner, exp.EQ):
            return _exclusion(exp.NEQ(this=inner.this, expression=inner.expression))
        if (isinstance(inner, exp.In) and isinstance(inner.this, exp.Column)
                and not inner.args.get("query") and inner.expressions
                and all(_constant(value) for value in inner.expressions)):
            return inner.this.name, list(inner.expressions)
    return None, []


def _constant(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) or (isinstance(node, exp.Neg)
                                             and isinstance(node.this, exp.Literal))


# PostgreSQL's spellings of a boolean (ASCII case folded, blanks around): a prefix of
# one of these words, on and off by at least two letters (boolin)
_BOOLEAN_WORDS = {"true": True, "yes": True, "on": True, "1": True,
                  "false": False, "no": False, "off": False, "0": False}
# the blanks PostgreSQL's input functions skip around a value (C's isspace: not Unicode's)
BLANKS = " \t\n\r\v\f"


def boolean_word(text: str) -> bool | None:
    """What PostgreSQL's boolin reads ``text`` as; None where it refuses it."""
    word = text.strip(BLANKS)
    word = word.lower() if word.isascii() else ""
    meant = {value for full, value in _BOOLEAN_WORDS.items()
             if word and full.startswith(word) and (len(word) > 1 or full not in ("on", "off"))}
    return meant.pop() if len(meant) == 1 else None


def boolean_of(literal: exp.Literal, where: str) -> exp.Boolean:
    """A quoted boolean compared with a bool column (``where``: "column f"), or an
    element of a boolean array, as TRUE or FALSE: DuckDB reads fewer spellings than
    PostgreSQL ('off' failed after the debit); one PostgreSQL refuses, or a number (no
    operator compares them), is refused here."""
    if not literal.is_string:
        raise NotSupported(f"{where} is bool; compare it with TRUE or FALSE")
    meant = boolean_word(literal.name)
    if meant is None:
        raise Refused(f"invalid input syntax for type boolean: {literal.sql()} ({where}); "
                      "write TRUE or FALSE", "22P02")
    return exp.Boolean(this=meant)


# the text of a number as PostgreSQL reads one into bigint / double precision (blanks
# around it taken off first): also an array's elements (proxy.analyze.quantified)
INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# the words PostgreSQL's double precision reads (any case), as every backend casts them
_FLOAT_WORDS = {"nan": "NaN", **{sign + word: sign.strip("+") + "Infinity"
                                 for sign in ("", "+", "-") for word in ("inf", "infinity")}}


def _number(literal: exp.Literal, column: str, kind: str) -> exp.Expression:
    """A quoted number compared with an int or float column, as the number: PostgreSQL
    gives the quoted literal the column's type (``age = '30'``; ``age = ANY('{30,40}')``,
    psycopg's list parameter); text that is no such number is refused as PostgreSQL
    refuses it (22P02), and a number beyond the type (22003), before anything is spent."""
    text = literal.name.strip(BLANKS)  # C's blanks: a no-break space is no number's
    what = "bigint" if kind == "int" else "double precision"
    if kind == "float" and text.lower() in _FLOAT_WORDS:  # 'NaN', 'Infinity', '-inf'
        return exp.cast(exp.Literal.string(_FLOAT_WORDS[text.lower()]),
                        exp.DataType.Type.DOUBLE)
    if not (INTEGER_TEXT if kind == "int" else DECIMAL_TEXT).fullmatch(text):
        raise Refused(f"invalid input syntax for type {what}: {literal.sql()} (column "
                      f"{column}); write a number", "22P02")
    value = Decimal(text)
    if (kind == "int" and abs(value) >= 2 ** 63) or beyond_double(text):
        raise Refused(f"value {text} is out of range for type {what} (column {column})",
                      "22003")
    number = exp.Literal.number(format(abs(value), "f") if kind == "int" else text.lstrip("+-"))
    return exp.Neg(this=number) if text.startswith("-") else number


# Column types compared with each other. A date beside a timestamp is not one kind:
# DuckDB casts the date, which fails for one beyond year 294276 (its dates go further), so
# one row would decide whether a charged statement fails.
_KINDS = {"int": "number", "float": "number"}


_CONDITIONS = (exp.Predicate, exp.Connector, exp.Not)


def _check_truths_compared(node: exp.Expression, operands: list[exp.Expression],
                           table: Table) -> None:
    """A condition or TRUE/FALSE compared with something (``EXTRACT(dow FROM t) IN
    (0, 6) = TRUE``, ``x IS TRUE``) is compared with TRUE, FALSE, NULL, a bool column or
    another condition only. A text or number beside a condition failed in the backend
    after the debit (``(age > 3) = region``); beside TRUE, DuckDB cast each row's text
    to a boolean, failing only where a row reached the cast, so ``age = 30 AND TRUE =
    region`` failed (charged) or answered 0 as one person existed or not (the third
    review of 2026-11-29). PostgreSQL has no such operators: refused before anything is
    spent."""
    bare = [operand.unnest() for operand in operands]
    truths = [o for o in bare if isinstance(o, (*_CONDITIONS, exp.Boolean))]
    if not truths:
        return
    flags = [o for o in bare if isinstance(o, exp.Column)
             and table.columns[o.name].type == "bool"]
    for operand in bare:
        if not (isinstance(operand, (*_CONDITIONS, exp.Boolean, exp.Null)) or operand in flags
                or (flags and isinstance(operand, exp.Literal) and operand.is_string)):
            # (a quoted truth beside a bool column is read as PostgreSQL reads it: below)
            what = "TRUE or FALSE" if isinstance(truths[0], exp.Boolean) else "a condition"
            raise NotSupported(f"{node.sql(dialect='postgres')} compares {what} with "
                               f"{operand.sql(dialect='postgres')}; compare a condition or "
                               "a bool column with TRUE, FALSE or another condition")


def _check_literal_types(condition: exp.Expression, table: Table) -> None:
    """A literal of the wrong kind would make the backend fail after the query is
    charged; the mismatch is visible in the text, so it is refused here. A moment with
    a time zone compared with a date or timestamp column is rewritten without it, as
    PostgreSQL reads it (``proxy.rules.parse_moment``), so every engine reads it alike."""
    for node in list(condition.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
                                        exp.Between, exp.In, exp.Is)):
        operands = [node.this, *(node.args.get(k) for k in ("expression", "low", "high")),
                    *node.args.get("expressions", [])]
        _check_truths_compared(node, [o for o in operands if o is not None], table)
        # a substring of a text column is text (check_predicate admits no other)
        columns = [o.this if isinstance(o, exp.Substring) else o for o in operands
                   if isinstance(o, exp.Column) or isinstance(o, exp.Substring)]
        # a negative number (``-2.5``, ``-(3)`` folded) is a number as a written one is
        literals = [o for o in operands if isinstance(o, exp.Literal) or (
            isinstance(o, exp.Neg) and isinstance(o.this.unnest(), exp.Literal)
            and not o.this.unnest().is_string)]
        kinds = {_KINDS.get(table.columns[c.name].type, table.columns[c.name].type)
                 for c in columns}
        if len(kinds) > 1:
            raise NotSupported(f"{' and '.join(c.name for c in columns)} are of different "
                               "types; compare columns of one type")
        for column in columns:
            declared = table.columns[column.name]
            wants_string = declared.type in ("text", "date", "timestamp")
            for literal in literals:
                if declared.type == "bool":
                    literal.replace(boolean_of(literal, f"column {column.name}"))
                    continue
                if literal.is_string and declared.type in ("int", "float"):
                    literal.replace(_number(literal, column.name, declared.type))
                    continue
                if literal.is_string != wants_string:
                    kind = "a quoted string" if wants_string else "a number"
                    raise NotSupported(f"column {column.name} is {declared.type}; compare it "
                                       f"with {kind}", "42883")  # PostgreSQL: no operator
                if declared.type not in ("date", "timestamp"):
                    continue
                moment = parse_moment(literal.name, zoned=True)
                if moment is None:
                    raise NotSupported(f"column {column.name} is {declared.type}; compare it "
                                       "with a date such as '2024-01-31' or '2024-01-31 08:00'")
                if parse_moment(literal.name) is None:  # it names a time zone
                    literal.replace(exp.Literal.string(moment.isoformat(" ")))
