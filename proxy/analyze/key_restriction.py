"""The WHERE restricts the keys a GROUP BY answers (issue 32 item 4; docs/privacy.md
§3.4): a key whose group no row can reach, by the text alone, is not answered.

A top-level AND term of the WHERE that reads only a GROUP BY term's column, compared
with literals, decides for each of the term's public keys whether a row of that key can
meet it:

- a column with declared keys: the term is evaluated on each key value, as SQL would on
  a row holding it (three-valued: NULL is not true); ``=``, ``<>``, ``IN``, ``NOT IN``,
  ``BETWEEN``, ``<``, ``<=``, ``>``, ``>=`` (on numbers, dates and timestamps; text is
  compared for equality only, its order is the backend's collation), ``[NOT] LIKE`` and
  ``ILIKE`` on text (ILIKE on ASCII only), ``IS [NOT] NULL``, ``NOT``, ``AND`` and ``OR``
  of these;
- numeric bins (``floor(x / w) * w``, ``x / w``): the term, read as a union of
  intervals of x (comparisons, ``BETWEEN``, ``=``, ``IN``, ``AND``, ``OR``, ``IS NULL``;
  anything else lets every value in), keeps the bins whose values meet it; the first
  and the last bin also hold every value beyond the domain (a value is clamped into it
  before it is binned: ``proxy.pushdown.group_sql``);
- time buckets are narrowed by ``group_keys.within_where`` (time ranges).

A top-level OR whose every branch has AND terms reading only the column restricts the
keys by the OR of those terms, which it implies (``trees.implied_condition``; TPC-H
Q07's ``(n1.n_name = 'FRANCE' AND n2.n_name = 'GERMANY') OR (n1.n_name = 'GERMANY' AND
…)`` keeps two nations of each). Other terms over other columns, or over two GROUP BY
columns, leave the keys alone, as does a term that cannot be decided for a key (a
literal of another type, a function): keeping a key only answers an empty group,
dropping one would hide rows. Everything here reads
the rules and the query text, never the data, so the released keys are the same on
every neighbouring data set (SPEC §3.4).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from sqlglot import exp

from proxy.analyze.comparisons import FLIPPED, between_as_range, beyond_double
from proxy.analyze.patterns import CASED, ESCAPE, PATTERNS, respelled
from proxy.errors import Refused
from proxy.rules import Column, Table, parse_moment
from proxy.trees import implied_condition, operands
from proxy.vocabulary import COLUMN, FLOOR_BIN, TRUNC_BIN, GroupKey

# the most (condition nodes × keys) one term's restriction evaluates; beyond it the
# condition leaves the keys alone (a long OR chain over thousands of declared keys)
_WORK = 1_000_000


class Undecided(Exception):
    """The term cannot be decided from the key alone: the key is kept."""


def restricted(term: GroupKey, where: exp.Expression | None, table: Table, resolve
               ) -> GroupKey:
    """``term`` with only the keys some row meeting ``where`` can have (text and rules
    only)."""
    if where is None or term.column is None or term.kind not in (COLUMN, FLOOR_BIN,
                                                                   TRUNC_BIN):
        return term
    column = table.columns[term.column]

    def reads_only(condition: exp.Expression) -> bool:
        return _reads_only(condition, term.column, resolve)

    found = [c if reads_only(c) else implied_condition(c, reads_only)
             for c in conjuncts(where)]
    conditions = [c for c in found
                  if c is not None and sum(1 for _ in c.walk()) * len(term.keys) <= _WORK]
    if not conditions:
        return term
    if term.kind == COLUMN:
        keys = tuple(key for key in term.keys
                     if all(_may_hold(c, key, column.type) for c in conditions))
    else:
        allowed = [(-math.inf, True, math.inf, True)]
        for condition in conditions:
            allowed = _intersection(allowed, _intervals(condition, column.type))
        # a capped bin's NULL key (group_keys._capped_bin) holds the NULL values too
        null = term.numbers[4] if len(term.numbers) > 2 else None
        keys = tuple(key for key in term.keys
                     if key == null or _meets(_bin_values(term, key, column), allowed))
    return term if len(keys) == len(term.keys) else replace(term, keys=keys)


def conjuncts(where: exp.Expression) -> list[exp.Expression]:
    """The top-level AND terms of a condition, parentheses removed."""
    return operands(where, exp.And)


def column_bounds(where: exp.Expression | None
                  ) -> Iterator[tuple[exp.Column, type, exp.Expression]]:
    """(column, comparison, the other side) of each bound the WHERE's top-level AND terms
    put on a column: ``>``, ``>=``, ``<``, ``<=`` with either side the column, a BETWEEN
    as its two (each side out of its brackets: Tableau, Looker and Power BI bracket
    them). The caller reads the other side as its literal, if it is one."""
    for term in conjuncts(where) if where is not None else []:
        if isinstance(term, exp.Between):
            bounds = [(exp.GTE, term.args["low"].unnest()),
                      (exp.LTE, term.args["high"].unnest())]
            subject = term.this.unnest()
        elif isinstance(term, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
            subject, literal = term.this.unnest(), term.expression.unnest()
            kind = type(term)
            if isinstance(literal, exp.Column) and not isinstance(subject, exp.Column):
                subject, literal = literal, subject
                kind = FLIPPED[kind]
            bounds = [(kind, literal)]
        else:
            continue
        if isinstance(subject, exp.Column):
            for kind, literal in bounds:
                yield subject, kind, literal


def number_window(where: exp.Expression | None, column: str, integers: bool
                  ) -> tuple[float, float]:
    """[low, high] that a number column's values in scope lie in by the WHERE's bounds on
    the column (by its name) with a number literal (``column_bounds``; a strict bound
    one integer, or one double, inside); ±infinity where none. Text alone: a drawn
    percentile, MAX or MIN is kept within it (``Engine``), as every value in scope is."""
    low, high = -math.inf, math.inf
    for subject, kind, literal in column_bounds(where):
        # an integer column is compared with the literal exactly (numeric, in both
        # engines: age < 30.0000000000000000001 keeps 30), a double with it as a double
        exact = exact_number(literal) if subject.name == column else None
        value = None if exact is None else exact if integers else literal_number(literal)
        if value is None:
            continue
        if kind in (exp.GT, exp.GTE):
            strict = kind is exp.GT
            low = max(low, _float(math.floor(value) + 1 if strict else math.ceil(value))
                      if integers else math.nextafter(value, math.inf) if strict
                      else value)
        else:
            strict = kind is exp.LT
            high = min(high, _float(math.ceil(value) - 1 if strict else math.floor(value))
                       if integers else math.nextafter(value, -math.inf) if strict
                       else value)
    return low, high


# off while an aggregate over per-unit values is analysed (``unnarrowed``): the units'
# relation takes its value columns' domains from the source's, and their sums were
# found unsound there by the brute-force neighbour test when both were cut
_NARROWING: ContextVar[bool] = ContextVar("narrowing", default=True)


@contextmanager
def unnarrowed() -> Iterator[None]:
    """Analyse without ``narrowed_domains`` (per-unit subqueries and their outer query)."""
    token = _NARROWING.set(False)
    try:
        yield
    finally:
        _NARROWING.reset(token)


def narrowed_domains(table: Table, aggregates, group_by: tuple[GroupKey, ...],
                     where: exp.Expression | None, joined: bool) -> Table:
    """``table`` with the declared domain of each plain number column an aggregate reads
    narrowed to the range the WHERE's bounds on it leave (``number_window``): every
    value in scope lies there once clamped, so each sensitivity, ladder and candidate
    grid computed from the domain holds over it (a row entering or leaving the scope
    adds or removes a value within it). ``SUM(age) … WHERE age > 90`` drew its
    clipping bound from rungs down to 2⁻¹⁵ of 120, far below every value in scope, and
    answered 86 ± 84 against 2,588 (the BI probe of 2026-11-29); its rungs now start at
    the first one at least 91. The text and the rules alone. Not over joins (their
    tables may share a column's name), nor for a GROUP BY term's column (its keys were
    listed from its domain)."""
    if where is None or joined or not _NARROWING.get():
        return table
    grouped = {term.column for term in group_by}
    columns = dict(table.columns)
    for agg in aggregates:
        column = columns.get(agg.column or "")
        if column is None or type(column) is not Column or column.type not in ("int", "float") \
                or column.lower is None or column.upper is None or column.name in grouped:
            continue
        low, high = number_window(where, column.name, column.type == "int")
        low, high = max(low, column.lower), min(high, column.upper)
        if low <= high and (low, high) != (column.lower, column.upper):
            columns[column.name] = replace(column, lower=low, upper=high,
                                           declared_resolution=column.resolution)
    return table if columns == dict(table.columns) else replace(
        table, columns=MappingProxyType(columns))


def exact_number(node: exp.Expression | None) -> Decimal | None:
    """A numeric literal (possibly negative) exactly, as PostgreSQL's numeric reads it."""
    sign = 1
    while isinstance(node, (exp.Neg, exp.Paren)):
        sign = -sign if isinstance(node, exp.Neg) else sign
        node = node.this
    if not (isinstance(node, exp.Literal) and not node.is_string):
        return None
    try:
        value = Decimal(node.name)
    except InvalidOperation:
        return None
    return sign * value if value.is_finite() else None


def _float(whole: int) -> float:
    """A whole number as a double, ±infinity beyond a double's range."""
    try:
        return float(whole)
    except OverflowError:
        return math.inf if whole > 0 else -math.inf


def literal_number(node: exp.Expression | None) -> float | None:
    """A numeric literal (possibly negative) as a finite double, else None."""
    exact = exact_number(node)
    value = None if exact is None else float(exact)
    return value if value is not None and math.isfinite(value) else None


def _reads_only(condition: exp.Expression, name: str, resolve) -> bool:
    """Whether ``condition`` reads a column, and every column it reads is ``name``. (A
    condition on no column is left alone: the shape cache binds its literals anew,
    ``proxy.analyze.shapes``, where those compared with a GROUP BY column are not.)"""
    columns = list(condition.find_all(exp.Column))
    return bool(columns) and all(names(node, name, resolve) for node in columns)


def names(node: exp.Column, name: str, resolve) -> bool:
    """Whether the column ``node`` reads the plan's column ``name`` (a joined table's
    ``orders.o_orderdate`` is named ``alias.column``; one the resolver refuses, none)."""
    try:
        return resolve(node) == name
    except Refused:
        return False


# -- declared keys: the condition on each key value --------------------------------------

def _may_hold(condition: exp.Expression, key: Any, kind: str) -> bool:
    """False when a row whose column holds ``key`` fails ``condition`` for certain."""
    try:
        return truth_on_key(condition, key, kind) is True
    except (Undecided, RecursionError):
        return True


def truth_on_key(node: exp.Expression, key: Any, kind: str) -> bool | None:
    """SQL's three-valued truth of ``node``, a condition on one column of type ``kind``
    compared with literals, on a row holding ``key`` (None: NULL); ``Undecided`` when
    it cannot be told from the key alone."""
    node = node.unnest()
    if isinstance(node, (*PATTERNS, exp.Escape)) and kind == "text":
        return _matches(node, key)
    if node.args.get("negate") and not isinstance(node, exp.Is):
        raise Undecided
    if isinstance(node, exp.And):  # flattened: a long chain is no deep recursion
        sides = [truth_on_key(side, key, kind) for side in node.flatten()]
        return False if False in sides else None if None in sides else True
    if isinstance(node, exp.Or):
        sides = [truth_on_key(side, key, kind) for side in node.flatten()]
        return True if True in sides else None if None in sides else False
    if isinstance(node, exp.Not):
        inner = truth_on_key(node.this, key, kind)
        return None if inner is None else not inner
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise Undecided
        return (_value(node.this, key, kind) is None) != bool(node.args.get("negate"))
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise Undecided
        subject = _value(node.this, key, kind)
        values = [_value(v, key, kind) for v in node.expressions]
        if subject is None:
            return None
        if any(v is not None and _compare(exp.EQ, subject, v, kind) for v in values):
            return True
        return None if None in values else False
    if isinstance(node, exp.Between):
        if node.args.get("symmetric"):
            raise Undecided
        return truth_on_key(between_as_range(node), key, kind)
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        left, right = _value(node.this, key, kind), _value(node.expression, key, kind)
        if left is None or right is None:
            return None
        return _compare(type(node), left, right, kind)
    raise Undecided


def _matches(node: exp.Expression, key: Any) -> bool | None:
    """A text key against ``col [NOT] LIKE|ILIKE 'pattern' [ESCAPE 'c']``, read as PostgreSQL
    reads the pattern (``patterns.respelled``); ILIKE only where key and pattern are
    ASCII (beyond it the backends' case folding may differ)."""
    escape = ESCAPE
    if isinstance(node, exp.Escape):
        given = node.expression
        if not (isinstance(given, exp.Literal) and given.is_string and len(given.name) <= 1):
            raise Undecided
        escape, node = given.name, node.this
    if not isinstance(node, PATTERNS):
        raise Undecided
    cased = node.this.unnest()
    column = cased.this.unnest() if isinstance(cased, CASED) else cased
    pattern = node.expression.unnest()
    if not (isinstance(column, exp.Column) and isinstance(pattern, exp.Literal)
            and pattern.is_string):
        raise Undecided
    subject = _value(column, key, "text")
    if subject is None:
        return None
    folded = isinstance(node, exp.ILike)
    if (folded or cased is not column) and not (subject.isascii() and pattern.name.isascii()):
        raise Undecided
    if cased is not column:
        subject = subject.lower() if isinstance(cased, exp.Lower) else subject.upper()
    try:
        written = respelled(pattern.name, escape)
    except Refused:
        raise Undecided from None
    regex, i = [], 0
    while i < len(written):
        if written[i] == ESCAPE:
            regex.append(re.escape(written[i + 1]))
            i += 2
            continue
        regex.append({"%": ".*", "_": "."}.get(written[i]) or re.escape(written[i]))
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if folded else 0)
    return (re.fullmatch("".join(regex), subject, flags) is not None) != bool(
        node.args.get("negate"))


def _compare(operator, left, right, kind: str) -> bool:
    if operator in (exp.EQ, exp.NEQ):
        return (left == right) == (operator is exp.EQ)
    if kind not in ("int", "float", "date", "timestamp"):
        raise Undecided  # text: the backend's collation orders it; bool: unordered here
    return {exp.GT: left > right, exp.GTE: left >= right, exp.LT: left < right,
            exp.LTE: left <= right}[operator]


def _value(node: exp.Expression, key: Any, kind: str) -> Any:
    """An operand as a comparable Python value: the column is the key; a literal is
    read as the backend reads it against a column of ``kind``; None is NULL."""
    node = node.unnest()
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Column):
        return None if key is None else _typed(key, kind)
    return _literal(node, kind)


def _typed(key: Any, kind: str) -> Any:
    if kind in ("int", "float"):
        if isinstance(key, bool) or not isinstance(key, (int, float)):
            raise Undecided
        return _exact(key, kind)
    if kind == "text":
        if not isinstance(key, str):
            raise Undecided
        return key
    if kind in ("date", "timestamp"):
        moment = parse_moment(key)
        if moment is None:
            raise Undecided
        return moment
    if kind == "bool" and isinstance(key, bool):
        return key
    raise Undecided


def _exact(number: int | float | Decimal, kind: str) -> Fraction:
    """A number as the comparison sees it: exact for an int column, as a double for a
    float column (the backend reads the literal as one)."""
    if kind == "float":
        as_float = float(number)
        if not math.isfinite(as_float):
            raise Undecided
        return Fraction(as_float)
    return Fraction(number)


def _literal(node: exp.Expression, kind: str) -> Any:
    sign = 1
    while isinstance(node, exp.Neg):
        sign, node = -sign, node.this.unnest()
    if isinstance(node, exp.Boolean) and kind == "bool" and sign == 1:
        return node.this
    if not isinstance(node, exp.Literal):
        raise Undecided
    if kind in ("int", "float") and not node.is_string:
        if beyond_double(node.name):  # refused by check_predicate; never a huge Fraction
            raise Undecided
        try:
            return sign * _exact(Decimal(node.name), kind)
        except (InvalidOperation, ValueError, OverflowError):
            raise Undecided from None
    if kind == "text" and node.is_string and sign == 1:
        return node.name
    if kind in ("date", "timestamp") and node.is_string and sign == 1:
        moment = parse_moment(node.name, zoned=True)
        if moment is None or (kind == "date" and moment.time() != moment.min.time()):
            raise Undecided  # a date compared with a moment within a day: left alone
        return moment
    raise Undecided


# -- numeric bins: the condition as intervals of the column's values --------------------

Interval = tuple[Any, bool, Any, bool]  # (low, low included, high, high included)
_EVERYTHING: list[Interval] = [(-math.inf, True, math.inf, True)]


def _intervals(node: exp.Expression, kind: str) -> list[Interval]:
    """The values of the column (one compared with literals) for which ``node`` can be
    true, as a union of intervals; every value when it cannot be told."""
    try:
        return _as_intervals(node, kind)
    except (Undecided, RecursionError):
        return _EVERYTHING


def _as_intervals(node: exp.Expression, kind: str) -> list[Interval]:
    node = node.unnest()
    if node.args.get("negate"):  # IS NOT NULL and the like
        raise Undecided
    if isinstance(node, exp.And):
        found = _EVERYTHING
        for side in node.flatten():
            found = _intersection(found, _intervals(side, kind))
        return found
    if isinstance(node, exp.Or):
        return [interval for side in node.flatten() for interval in _intervals(side, kind)]
    if isinstance(node, exp.Boolean):
        return _EVERYTHING if node.this else []
    if isinstance(node, exp.Null):
        return []
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        if not isinstance(node.this.unnest(), exp.Column):
            raise Undecided
        return []  # NULL (and NaN, read as NULL) is in no bin
    if isinstance(node, exp.In) and isinstance(node.this.unnest(), exp.Column):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise Undecided
        points = [_literal(v, kind) for v in node.expressions if not isinstance(v, exp.Null)]
        return [(p, True, p, True) for p in points]
    if isinstance(node, exp.Between) and isinstance(node.this.unnest(), exp.Column):
        if node.args.get("symmetric"):
            raise Undecided
        low, high = _literal(node.args["low"], kind), _literal(node.args["high"], kind)
        return [(low, True, high, True)] if low <= high else []
    comparisons = (exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
    if isinstance(node, comparisons):
        operator, subject, other = type(node), node.this.unnest(), node.expression
        if not isinstance(subject, exp.Column):
            subject, other = other.unnest(), subject
            operator = FLIPPED[operator]
        if not isinstance(subject, exp.Column):
            raise Undecided
        if isinstance(other.unnest(), exp.Null):
            return []
        value = _literal(other, kind)
        return [{exp.EQ: (value, True, value, True),
                 exp.GT: (value, False, math.inf, True),
                 exp.GTE: (value, True, math.inf, True),
                 exp.LT: (-math.inf, True, value, False),
                 exp.LTE: (-math.inf, True, value, True)}[operator]]
    raise Undecided


def _intersection(ones: list[Interval], others: list[Interval]) -> list[Interval]:
    found = []
    for low, low_in, high, high_in in ones:
        for other_low, other_low_in, other_high, other_high_in in others:
            if other_low > low or (other_low == low and not other_low_in):
                start = (other_low, other_low_in)
            else:
                start = (low, low_in)
            if other_high < high or (other_high == high and not other_high_in):
                end = (other_high, other_high_in)
            else:
                end = (high, high_in)
            if _nonempty(start[0], start[1], end[0], end[1]):
                found.append((*start, *end))
    return found


def _nonempty(low, low_in: bool, high, high_in: bool) -> bool:
    return low < high or (low == high and low_in and high_in)


def _meets(values: Interval, allowed: list[Interval]) -> bool:
    return bool(_intersection([values], allowed))


def _bin_values(term: GroupKey, key: int, column) -> Interval:
    """The values of the column (before clamping) that land in the bin of ``key``:
    ``floor`` bins [k·w, (k+1)·w), truncating bins toward zero; the first and the last
    bin reach beyond the domain, whose values are clamped into them. On an int column
    only its integers."""
    width, scale = (int(number) for number in term.numbers[:2])
    if len(term.numbers) > 2:  # clamped to [low, high] (group_keys._capped_bin)
        low, high = term.numbers[2:4]
        if low == high:  # every value
            return (-math.inf, True, math.inf, True)
        if key <= low:  # every bin at or below it
            return _bins_values(term, -math.inf, math.floor(low / scale), column)
        if key >= high:  # every bin at or above it
            return _bins_values(term, math.ceil(high / scale), math.inf, column)
    return _bins_values(term, key // scale, key // scale, column)


def _bins_values(term: GroupKey, first_index: float, last_index: float, column) -> Interval:
    """The values that land in the bins ``first_index`` to ``last_index`` (±infinity:
    every bin that way)."""
    if first_index == -math.inf:
        low = (-math.inf, True)
    else:
        low = _index_values(term, int(first_index), column)[:2]
    if last_index == math.inf:
        return (*low, math.inf, True)
    return (*low, *_index_values(term, int(last_index), column)[2:])


def _index_values(term: GroupKey, index: int, column) -> Interval:
    """The values of the column (before clamping) in the bin of ``index``."""
    width = int(term.numbers[0])
    if term.kind == FLOOR_BIN:
        interval: Interval = (index * width, True, (index + 1) * width, False)
        first, last = math.floor(column.lower / width), math.floor(column.upper / width)
    else:
        if index > 0:
            interval = (index * width, True, (index + 1) * width, False)
        elif index == 0:
            interval = (-width, False, width, False)
        else:
            interval = ((index - 1) * width, False, index * width, True)
        first, last = math.trunc(column.lower / width), math.trunc(column.upper / width)
    low, low_in, high, high_in = interval
    if column.type == "int":  # integers only: `age > 95` meets no value of the bin 95
        low, low_in = (low, True) if low_in else (low + 1, True)
        high, high_in = (high, True) if high_in else (high - 1, True)
    if index <= first:
        low, low_in = -math.inf, True
    if index >= last:
        high, high_in = math.inf, True
    return low, low_in, high, high_in
