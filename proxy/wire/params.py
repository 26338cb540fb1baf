"""Parameters ($1, $2...) of statements the engine answers: their types, inferred from
where they stand when the client declares none (asyncpg, pg8000 and node-postgres rely
on ParameterDescription), and their values, bound into the SQL text as literals before
the engine analyses it. A parameter is never dropped or turned into NULL: a value that
does not read as its type is an error (22P02), before anything runs."""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections import OrderedDict
from decimal import Decimal
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from proxy.analyze import POSTGRES, command_tokens, parse_tokens
from proxy.analyze.explain import explain_rest, explained
from proxy.errors import NotSupported, ProxyError, SyntaxProblem
from proxy.pgtypes import (
    ARRAYS,
    BOOL,
    DATE,
    ELEMENTS,
    FLOAT8,
    INT8,
    NAMES,
    RULE_TYPES,
    TEXT,
    TIMESTAMP,
    oid_of,
)
from proxy.rules import Rules
from proxy.trees import replace_all
from proxy.wire import types

# Stand-ins are never 0: a parameter may be the divisor of an aggregate's expression
# (SUM(age / $1)), which is refused for a real 0 only.
_DUMMIES = {INT8: 1, FLOAT8: 0.5, TEXT: "", BOOL: False, DATE: dt.date(2000, 1, 1),
            TIMESTAMP: dt.datetime(2000, 1, 1)}


class BadParameter(ProxyError):
    sqlstate = "22P02"


def _tree(text: str) -> exp.Expression:
    try:
        return parse_tokens(POSTGRES.tokenize(text), text)
    except SqlglotError:
        raise SyntaxProblem("the statement could not be parsed; check its syntax") from None


def _typed_tree(text: str) -> exp.Expression:
    """``text`` parsed to find its parameters' types: of an EXPLAIN, the statement it
    explains (sqlglot keeps that as text, whose parameters were found nowhere: DBeaver's
    plan of ``… WHERE age > ?`` was refused as a parameter in WHERE). Never bound and
    rendered: that would drop the EXPLAIN."""
    tree = _tree(text)
    rest = explain_rest(tree)
    return _tree(explained(rest)) if rest else tree


def _parameters(tree: exp.Expression) -> dict[int, list[exp.Parameter]]:
    found: dict[int, list[exp.Parameter]] = {}
    for node in tree.find_all(exp.Parameter):
        name = node.name
        if name.isdigit() and int(name) > 0:
            found.setdefault(int(name), []).append(node)
    return found


# where a parameter cannot stand: the analysis reads these as written (they decide the
# keys and labels), and at Parse the value is not known yet
_WRITTEN = {(exp.TimeToStr, "format"): "a to_char format",
            (exp.TimestampTrunc, "unit"): "a date_trunc unit",
            (exp.DateTrunc, "unit"): "a date_trunc unit",
            (exp.AtTimeZone, "zone"): "an AT TIME ZONE zone",
            (exp.Extract, "this"): "an extract field"}


def infer(text: str, declared: tuple[int, ...], rules: Rules) -> tuple[int, ...]:
    """One OID per parameter: the client's where it gave one, else from the context.
    Refused (0A000) where a parameter stands for what the analysis must read as written
    (``_WRITTEN``): described with a stand-in value, such a statement was refused with a
    message about the stand-in ("…not 'None'", "got ")."""
    tree = _typed_tree(text)
    found = _parameters(tree)
    for nodes in found.values():
        for node in nodes:
            what = _WRITTEN.get((type(node.parent), node.arg_key))
            if what is not None:
                raise NotSupported(f"${node.name} stands for {what}, which the proxy must "
                                   "read to know the answer's groups; write its value in "
                                   "the statement")
    count = max([len(declared), *found])
    # a qualified column is looked up in its own table, an unqualified one in the first
    # table that declares it
    by_alias: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    for table in tree.find_all(exp.Table):
        ruled = rules.table(table.name)
        if ruled is not None:
            by_alias.setdefault(table.alias_or_name.lower(), ruled.columns)
            columns = {**ruled.columns, **columns}
    result = []
    for number in range(1, count + 1):
        given = declared[number - 1] if number <= len(declared) else 0
        if given:
            result.append(given)
            continue
        kinds = {_context_kind(node, columns, by_alias) for node in found.get(number, [])}
        kind = kinds.pop() if len(kinds) == 1 else "text"
        listed = kind.endswith("[]")
        oid = oid_of(RULE_TYPES[kind.removesuffix("[]")])
        result.append(ARRAYS[oid] if listed else oid)
    return tuple(result)


def _context_kind(node: exp.Parameter, columns, by_alias) -> str:
    """The rules' type the parameter stands for; ``type[]`` for the list of ``= ANY($1)``
    (an array of the compared column's type, as PostgreSQL infers it)."""
    parent = node.parent
    if isinstance(parent, exp.Cast):  # ANY($1::text[])
        parent = parent.parent
    quantifier = parent.parent if isinstance(parent, exp.Paren) else parent
    if isinstance(quantifier, (exp.Any, exp.All)) or (
            isinstance(quantifier, exp.Anonymous) and quantifier.name.upper() in (
                "ANY", "SOME", "ALL")):
        return _context_kind_of(quantifier, columns, by_alias) + "[]"
    return _context_kind_of(node, columns, by_alias)


def _context_kind_of(node: exp.Expression, columns, by_alias) -> str:
    parent = node.parent
    if isinstance(parent, (exp.Limit, exp.Offset)) or isinstance(parent.parent, (exp.Limit,
                                                                                 exp.Offset)):
        return "int"
    partner = None
    if isinstance(parent, (exp.Between, exp.In)):
        partner = parent.this
    elif isinstance(parent, exp.Binary):
        partner = parent.expression if parent.this is node else parent.this
    if isinstance(partner, exp.Column):
        named = by_alias.get(partner.table.lower(), columns) if partner.table else columns
        if partner.name.lower() in named:
            return named[partner.name.lower()].type
    if isinstance(parent, (exp.PercentileDisc, exp.PercentileCont, exp.Quantile,
                           exp.ApproxQuantile, exp.WithinGroup)):
        return "float"
    # beside an aggregate (COUNT(*) * $1): its type, as PostgreSQL resolves the operator
    if isinstance(partner, exp.Count):
        return "int"
    if isinstance(partner, exp.AggFunc):
        return "float"
    # where a condition stands (CASE WHEN $1, $1 AND …, WHERE $1): boolean
    if (isinstance(parent, exp.If) and node.arg_key == "this") or isinstance(
            parent, (exp.And, exp.Or, exp.Not, exp.Where)):
        return "bool"
    return "text"


def bind(text: str, param_types: tuple[int, ...], values: tuple[object, ...]) -> str:
    """The statement with each parameter replaced by its value as a literal: spliced
    into the text where the tokenizer found ``$n`` (``_PLACES``, kept per text), each
    literal rendered by sqlglot and set apart by spaces from what touches it (``a-$1``
    becomes ``a- -5``, never the comment ``a--5``); no parse, which cost a fresh
    statement of a dashboard or a benchmark a millisecond of CPU. A text the tokenizer
    leaves in doubt (a ``$`` not followed at once by a number) is parsed and rendered
    by sqlglot as before."""
    places = _PLACES.get(text, _MISSING)
    if places is _MISSING:
        places = _find_places(text)
        if len(text) <= BoundTexts.LONGEST:
            _PLACES.put(text, places)
    if places is None:
        return _bound_by_parse(text, param_types, values)
    return _spliced(text, places, param_types, values)


def bound_at_once(text: str, param_types: tuple[int, ...],
                  values: tuple[object, ...]) -> str | None:
    """``bind``'s text when the places of ``text``'s parameters are known already (its
    Parse tokenized it): a splice of literals, cheap enough for the event loop (no
    worker thread); else None."""
    places = _PLACES.get(text, None)
    return None if places is None else _spliced(text, places, param_types, values)


def _spliced(text: str, places: tuple[tuple[int, int, int, bool], ...],
             param_types: tuple[int, ...], values: tuple[object, ...]) -> str:
    for _, _, number, _ in places:
        if number > len(values):
            raise BadParameter(f"the statement uses ${number} but {len(values)} "
                               "parameter value(s) were bound")
    pieces, at = [], 0
    for start, end, number, cast in places:
        literal = _literal(values[number - 1], 0 if cast else _type(param_types, number)).sql(
            dialect="postgres")
        before = " " if start > 0 and not text[start - 1].isspace() else ""
        after = " " if end < len(text) and not text[end].isspace() else ""
        pieces += [text[at:start], before, literal, after]
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def _find_places(text: str) -> tuple[tuple[int, int, int, bool], ...] | None:
    """(start, end, n, cast) of each ``$n`` in ``text``, in order, from its tokens (not in
    a string or a comment; cast: the statement casts it, ``$n::t`` or ``CAST($n AS t)``);
    None where a ``$`` is not followed at once by a number > 0 or the text does not
    tokenize (then ``bind`` parses it)."""
    try:
        tokens = command_tokens(text)  # EXPLAIN's statement's own tokens too
    except SqlglotError:
        return None
    places = []
    for index, token in enumerate(tokens):
        if token.token_type is not TokenType.PARAMETER:
            continue
        number = tokens[index + 1] if index + 1 < len(tokens) else None
        if (number is None or number.token_type is not TokenType.NUMBER
                or number.start != token.end + 1 or not number.text.isdigit()
                or int(number.text) == 0):
            return None
        after = tokens[index + 2].token_type if index + 2 < len(tokens) else None
        cast = after is TokenType.DCOLON or (after is TokenType.ALIAS and index >= 2 and (
            tokens[index - 1].token_type is TokenType.L_PAREN
            and tokens[index - 2].text.upper() == "CAST"))
        places.append((token.start, number.end + 1, int(number.text), cast))
    return tuple(places)


def _bound_by_parse(text: str, param_types: tuple[int, ...], values: tuple[object, ...]) -> str:
    tree = _tree(text)
    replacements = []
    for number, nodes in _parameters(tree).items():
        if number > len(values):
            raise BadParameter(f"the statement uses ${number} but {len(values)} "
                               "parameter value(s) were bound")
        replacements += [(node, _literal(values[number - 1], 0 if isinstance(
            node.parent, exp.Cast) else _type(param_types, number))) for node in nodes]
    replace_all(replacements)
    return tree.sql(dialect="postgres", copy=False)  # its own parse: no copy to render


_MISSING = object()


class BoundTexts:
    """Statements with their parameters bound, by (text, parameter types, the values as
    the client sent them, their formats): binding parses and renders the statement
    (sqlglot, about a millisecond), and a dashboard's viewers bind the same values again
    and again. The least recently used go beyond ``size``; long texts are not kept.
    (Also any other value kept by a key whose first item is a statement's text: the
    connections' routed messages.)"""

    LONGEST = 20_000  # characters of a statement kept

    def __init__(self, size: int) -> None:
        self.size = size
        self._texts: OrderedDict[tuple, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> str | None:
        with self._lock:
            text = self._texts.get(key)
            if text is not None:
                self._texts.move_to_end(key)
            return text

    def put(self, key: tuple, text: str) -> None:
        if len(key[0]) > self.LONGEST:
            return
        with self._lock:
            self._texts[key] = text
            if len(self._texts) > self.size:
                self._texts.popitem(last=False)


class _Places:
    """The places of ``$n`` in statements' texts (``bind``), by text (None: parse it),
    the least recently used dropped beyond ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._places: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str, default: Any) -> Any:
        with self._lock:
            found = self._places.get(text, default)
            if found is not default:
                self._places.move_to_end(text)
            return found

    def put(self, text: str, places: tuple[tuple[int, int, int, bool], ...] | None) -> None:
        with self._lock:
            self._places[text] = places
            if len(self._places) > self.size:
                self._places.popitem(last=False)


_PLACES = _Places(1024)


def dummy_values(param_types: tuple[int, ...]) -> tuple[object, ...]:
    """Stand-ins of the right types, to analyse a statement before its values come."""
    return tuple("{}" if oid in ELEMENTS  # an empty list: ANY is false, ALL true
                 else _DUMMIES.get(oid, 1 if oid in types.INTEGERS else "")
                 for oid in param_types)


def _type(param_types: tuple[int, ...], number: int) -> int:
    return param_types[number - 1] if number <= len(param_types) else 0


def _literal(value: object, oid: int) -> exp.Expression:
    """A parameter's value as a literal; a list (an array type's, text or binary) cast to
    its array type (``oid``; 0 where the statement casts the parameter itself), as
    PostgreSQL types the parameter: ``percentile_cont($1)`` of psycopg's list, a
    ``numeric[]``, is then the array of fractions that ``percentile_cont($1::float8[])``
    is (untyped, it was read as one fraction)."""
    if value is not None and oid in ELEMENTS:
        return exp.cast(_literal(value, 0), exp.DataType.build(
            f"{NAMES[ELEMENTS[oid]]}[]", dialect="postgres"))
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    _check_finite(value)
    if isinstance(value, (int, float, Decimal)):
        return exp.Literal.number(str(value) if not isinstance(value, float) else repr(value))
    if isinstance(value, (dt.date, dt.datetime)):
        return exp.Literal.string(value.isoformat())
    if isinstance(value, list):  # a binary array: PostgreSQL's text of it
        return exp.Literal.string("{" + ",".join(_array_element(v) for v in value) + "}")
    return exp.Literal.string(str(value))


def _array_element(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        text = "t" if value else "f"
    elif isinstance(value, (dt.date, dt.datetime)):
        text = value.isoformat()
    elif isinstance(value, float):
        _check_finite(value)
        text = repr(value)
    else:
        _check_finite(value)
        text = str(value)
    return types.array_quoted(text)


def _check_finite(value: object) -> None:
    """NaN and ±Infinity (float, or numeric as PostgreSQL 14+ reads them) are refused:
    a numeric's was bound as the bare word ``NaN``, which the backend reads as a
    column."""
    if (isinstance(value, float) and not math.isfinite(value)) or (
            isinstance(value, Decimal) and not value.is_finite()):
        raise BadParameter("parameter values must be finite numbers")
