"""GROUP BY terms computed from columns whose values are public: ``LOWER(region)``,
``COALESCE(region, 'unknown')``, ``region || '/' || sex``, ``ROUND(age, -1)``,
``LEAST(days, 10)``, ``CASE WHEN region IN ('north', 'south') THEN 'n+s' ELSE region
END``, Lightdash's ``CONCAT(FLOOR(age / 10) * 10, ' - ', …)``.

Each column the term reads has a public list of values: its declared keys, or every
whole number of a declared int domain of at most ``_INPUTS`` values (and NULL). The
term is evaluated here, in Python, on every combination of those values, as PostgreSQL
evaluates it; its keys are the distinct results. A NULL result is a group, as in SQL,
where values give it (``CASE WHEN age > 30 THEN region END``: the rows of the ages up to
30, and then every row no key takes); one that only a NULL value gives is none, as a
NULL of a keyed column is none (``LOWER(region)``). The backend never computes the term: it is sent as
the CASE it equals on the declared values, one branch per key whose condition lists the
values giving that key (``col IN (…)``, runs of whole numbers as ranges), so the
statement is total (equality and range tests only) and both backends give the same
groups. A value outside an int domain lands where its clamped value does, as for the
numeric bins: the first and last runs are open-ended. A value of a keyed column that is
not a declared key meets no branch and belongs to no group, as for the column itself.

Only what is evaluated exactly as PostgreSQL does is taken, else the term keeps its
refusal: SUBSTRING, LEFT, RIGHT, text functions on ASCII text (LOWER, UPPER, TRIM and its variants), ``||``,
CONCAT, COALESCE, NULLIF, CASE (conditions on one column, read by
``key_restriction.truth_on_key``), LEAST/GREATEST and ROUND/FLOOR/CEIL/ABS/``+ - * / %``
on integers, numerics as numeric.c computes them (exact, with their scales: 25 / 3.0 is
8.3333333333333333, ROUND(age, 1) is 25.0, a text shows every place) and doubles where
exact (FLOOR(age) is one: whole, below 2^53), CAST to text or int; an integer beyond
int4 is not evaluated (PostgreSQL's int4 arithmetic fails there). Results must be whole
numbers without places, or texts.

Everything is read from the rules and the query text, so the keys are the same on
every neighbouring data set (SPEC §3.4); the WHERE narrows a column's values as it
narrows a plain column's keys (``key_restriction.restricted``).
"""

from __future__ import annotations

import itertools
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlglot import exp

from proxy.analyze.key_restriction import Undecided, restricted, truth_on_key
from proxy.errors import Refused
from proxy.rules import Column, Table
from proxy.statistics import MAGNITUDE_CAP
from proxy.vocabulary import COLUMN, GroupKey

_INPUTS = 1_000  # the most values one int column's domain lists
_COMBINATIONS = 2_000  # the most value combinations one term is evaluated on
# (a bare CHAR is char(1) in PostgreSQL: 'north' cast to it is 'n'; not evaluated here)
_TEXT_TYPES = (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR)
_INT_TYPES = (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT)


class Unevaluated(Exception):
    """The term is not one evaluated here: it keeps its refusal."""


def derived_case(node: exp.Expression, table: Table, resolve,
                 where: exp.Expression | None) -> exp.Case | None:
    """The CASE over declared values that ``node`` equals (module doc), without
    branches when the WHERE admits none of them; None when ``node`` reads a column
    without public values or computes what is not evaluated here."""
    try:
        _type(node, table, resolve)
        columns = _inputs(node, table, resolve, where)
        outputs: dict[Any, list[tuple[Any, ...]]] = {}
        names = list(columns)
        nulls = []  # the inputs that give NULL: a key where declared values give it
        for values in itertools.product(*(columns[name] for name in names)):
            result = term_value(node, dict(zip(names, values)), table, resolve)
            if result is None:
                nulls.append(values)
            else:
                outputs.setdefault(_key(result), []).append(values)
        if any(None not in values for values in nulls):
            outputs[None] = nulls
    except (Unevaluated, Undecided, Refused, ArithmeticError, ValueError, RecursionError):
        return None
    kinds = {type(key) for key in outputs if key is not None}
    if outputs and len(kinds) != 1:
        return None  # no key but NULL, or texts and numbers: not one key type
    ifs = [exp.If(this=_condition(names, combos, table),
                  true=exp.Null() if key is None else _literal(key))
           for key, combos in outputs.items()]
    return exp.Case(ifs=ifs)


_NUMBERS = ("int", "numeric", "double")  # PostgreSQL's numeric category, widest last
_LOOSE = ("null", "unknown")  # a NULL literal, a quoted one: their type is the context's


def _type(node: exp.Expression, table: Table, resolve) -> str:
    """The type PostgreSQL gives ``node``: text, int, numeric, double, bool, or null /
    unknown for a NULL or quoted literal; ``Unevaluated`` where PostgreSQL fails to type
    it (``NULLIF(region, age)``, ``'' + NULL``, ``COALESCE(0, 'x')``, ``upper(age)``)
    or reads a literal as another type (``COALESCE('5', age)`` is the integer 5). Checked
    once, on the term: a NULL value skips the operators the values meet."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        kind = table.columns[resolve(node)].type
        return {"text": "text", "int": "int", "bool": "bool"}.get(kind) or _refuse()
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Literal):
        return "unknown" if node.is_string else \
            "int" if re.fullmatch(r"[0-9]+", node.name) else "numeric"
    if isinstance(node, exp.Case):
        for branch in node.args.get("ifs") or []:
            if node.this is not None:
                _common([_type(node.this, table, resolve),
                         _type(branch.this, table, resolve)])
        branches = [branch.args["true"] for branch in node.args.get("ifs") or []]
        if node.args.get("default") is not None:
            branches.append(node.args["default"])
        return _common([_type(branch, table, resolve) for branch in branches])
    kinds = [_type(operand, table, resolve) for operand in _operands(node)]
    if isinstance(node, (exp.Coalesce, exp.Least, exp.Greatest)):
        return _common(kinds)
    if isinstance(node, (exp.Concat, exp.ConcatWs)):
        if isinstance(node, exp.ConcatWs) and kinds[0] not in ("text", *_LOOSE):
            _refuse()  # concat_ws(integer, …) does not exist
        return "text"
    if isinstance(node, exp.DPipe):
        if not {"text", *_LOOSE} & set(kinds):
            _refuse()  # integer || integer does not exist
        return "text"
    if isinstance(node, exp.Nullif):
        first, second = kinds
        if first in _LOOSE and second in _LOOSE:
            return "text"
        if first in _LOOSE or second in _LOOSE:
            other = second if first in _LOOSE else first
            if ("unknown" in (first, second) and other not in ("text", "int", "numeric")) \
                    or (first == "unknown" and other != "text"):
                _refuse()  # 't' read as a boolean, NULLIF('5', age) an integer: not here
            return other
        _common(kinds)
        return first if not (first in _NUMBERS and second in _NUMBERS) else \
            max(kinds, key=_NUMBERS.index)
    if isinstance(node, exp.Length):
        if kinds[0] not in ("text", *_LOOSE):
            _refuse()  # length(integer) does not exist
        return "int"
    if isinstance(node, (exp.Lower, exp.Upper, exp.Initcap, exp.Trim, exp.Substring)):
        if kinds[0] not in ("text", *_LOOSE) or any(
                kind != "int" for kind in kinds[1:]
                if not isinstance(node, exp.Trim)) or any(
                kind not in ("text", "unknown") for kind in kinds[1:]
                if isinstance(node, exp.Trim)):
            _refuse()
        return "text"
    if isinstance(node, exp.Cast):
        target = node.to.this
        if kinds[0] == "bool" and target in _INT_TYPES:
            _refuse()
        return "text" if target in _TEXT_TYPES else "int" if target in _INT_TYPES \
            else _refuse()
    # arithmetic: numbers, a NULL beside a number; a quoted literal is read as the
    # number beside it there, which is not evaluated here
    if any(kind not in (*_NUMBERS, "null") for kind in kinds) or \
            all(kind == "null" for kind in kinds):
        _refuse()
    numbers = [kind for kind in kinds if kind != "null"]
    widest = max(numbers, key=_NUMBERS.index)
    if isinstance(node, (exp.Floor, exp.Ceil)):
        return "double" if widest == "int" else widest
    if isinstance(node, exp.Round):
        if node.args.get("decimals") is None:
            return "double" if widest == "int" else widest
        if kinds[0] == "double" or kinds[1] != "int":
            _refuse()  # round(double precision, integer) does not exist
        return "numeric"
    if isinstance(node, exp.Mod) and widest == "double":
        _refuse()
    return widest


def _common(kinds: list[str]) -> str:
    """The type PostgreSQL resolves a CASE's, COALESCE's or GREATEST's values to: the
    widest number, or text, or bool; quoted literals beside other than text are read
    as that type there, not here."""
    typed = {kind for kind in kinds if kind not in _LOOSE}
    if not typed:
        return "text"
    if typed <= set(_NUMBERS):
        widest = max(typed, key=_NUMBERS.index)
    elif len(typed) == 1:
        widest = typed.pop()
    else:
        _refuse()  # CASE types integer and text cannot be matched
    if "unknown" in kinds and widest != "text":
        _refuse()
    return widest


def _refuse() -> Any:
    raise Unevaluated


def _inputs(node: exp.Expression, table: Table, resolve, where: exp.Expression | None
            ) -> dict[str, tuple[Any, ...]]:
    """The public values of each column ``node`` reads, NULL last, narrowed by the
    WHERE."""
    columns: dict[str, tuple[Any, ...]] = {}
    for reference in node.find_all(exp.Column):
        name = resolve(reference)
        if name in columns:
            continue
        column = table.columns.get(name)
        if column is None or (column.keys is None and name in unit_columns(table)):
            raise Unevaluated  # a group per person, by another name
        values = _public_values(column)
        values = restricted(GroupKey(name, COLUMN, name, values, column.type), where,
                            table, resolve).keys
        columns[name] = (*values, None)
    if not columns or math.prod(len(values) for values in columns.values()) > _COMBINATIONS:
        raise Unevaluated
    return columns


def unit_columns(table: Table) -> set[str]:
    """The columns that name a unit: its own, or the link to it."""
    return {table.privacy_unit, table.link.column if table.link else None} - {None}


def _public_values(column: Column) -> tuple[Any, ...]:
    if column.keys is not None and column.type in ("text", "int", "bool"):
        return column.keys
    if (column.type == "int" and column.lower is not None and column.upper is not None
            and column.upper - column.lower < _INPUTS):
        return tuple(range(math.ceil(column.lower), math.floor(column.upper) + 1))
    raise Unevaluated


def _key(result: Any) -> int | str:
    if isinstance(result, str):
        return result
    if isinstance(result, bool) or not isinstance(result, (int, Fraction)) \
            or result != int(result) or _scale(result):
        # a fraction or a boolean: not a key kind of a CASE term; nor a numeric whose
        # text shows places (25 * 1.0 is 25.0 in PostgreSQL, 25 / 4.0 * 4
        # 25.0000000000000000)
        raise Unevaluated
    return int(result)


def _literal(key: int | str) -> exp.Expression:
    if isinstance(key, str):
        return exp.Literal.string(key)
    return exp.Literal.number(key) if key >= 0 else exp.Neg(this=exp.Literal.number(-key))


def _condition(names: list[str], combos: list[tuple[Any, ...]], table: Table
               ) -> exp.Expression:
    """Rows whose columns hold one of ``combos``: per column, its values' test when the
    combos are every value of the others, else the OR of each combo's AND."""
    if len(names) == 1:
        return _column_test(names[0], [combo[0] for combo in combos], table.columns[names[0]])
    # copy=False: every operand is built here and used nowhere else (sqlglot's default
    # deep-copies each one again: a fifth of analysing a CASE term over many combos)
    tests = [exp.and_(*(_column_test(name, [value], table.columns[name])
                        for name, value in zip(names, combo)), copy=False)
             for combo in combos]
    return exp.or_(*tests, copy=False) if len(tests) > 1 else tests[0]


def _column_test(name: str, values: list[Any], column: Column) -> exp.Expression:
    """``col`` holds one of ``values`` (None: NULL); the runs of an int domain's whole
    numbers as ranges, open at the domain's ends, where a clamped value lands."""
    reference = exp.column(name, quoted=True)
    tests: list[exp.Expression] = []
    if None in values:
        tests.append(exp.Is(this=reference.copy(), expression=exp.Null()))
    present = [value for value in values if value is not None]
    if present and column.keys is None:  # an int domain: runs of consecutive numbers
        low, high = math.ceil(column.lower), math.floor(column.upper)
        for run in _runs(sorted(present)):
            first, last = run[0], run[-1]
            bounds = []
            if first > low:
                bounds.append(exp.GTE(this=reference.copy(), expression=_literal(first)))
            if last < high:
                bounds.append(exp.LTE(this=reference.copy(), expression=_literal(last)))
            tests.append(exp.and_(*bounds, copy=False) if bounds
                         else exp.Not(this=exp.Is(this=reference.copy(), expression=exp.Null())))
    elif present:
        literals = [typed_literal(value) for value in present]
        tests.append(exp.EQ(this=reference.copy(), expression=literals[0])
                     if len(literals) == 1 else exp.In(this=reference.copy(), expressions=literals))
    return exp.or_(*tests, copy=False) if len(tests) > 1 else tests[0]


def _runs(numbers: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return runs


def typed_literal(value: Any) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    return _literal(value)


# -- the term on one combination of values, as PostgreSQL computes it ----------------------

def term_value(node: exp.Expression, row: dict[str, Any], table: Table, resolve) -> Any:
    """``node`` on a row holding ``row``: str, int or Fraction (exact numbers), bool,
    None for NULL."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        return row[resolve(node)]
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.name
        written = Decimal(node.name)
        number = Fraction(written)
        if abs(number) > MAGNITUDE_CAP or (number and abs(number) < 1 / MAGNITUDE_CAP):
            raise Unevaluated  # as for bins: exact fractions stay small
        # digits alone are an integer's literal; 2.0, 2e0 and 1e3 are numerics, of the
        # scale written (2.50: 2, 2.5e1: 0)
        if re.fullmatch(r"[0-9]+", node.name):
            return _whole(int(number))
        return _numeric(number, max(-written.as_tuple().exponent, 0))
    args = [term_value(arg, row, table, resolve) for arg in _operands(node)]
    if isinstance(node, exp.Case):
        return _case(node, row, table, resolve)
    if isinstance(node, exp.Coalesce):
        _one_number_type(args)
        return next((arg for arg in args if arg is not None), None)
    if isinstance(node, (exp.Concat, exp.ConcatWs)):
        # CONCAT writes each argument by its type's output: a boolean as t or f
        if isinstance(node, exp.ConcatWs):
            if args[0] is not None and not isinstance(args[0], str):
                raise Unevaluated  # PostgreSQL has no concat_ws of a number separator
            if args[0] is None:
                return None
            return args[0].join(_text(arg, True) for arg in args[1:] if arg is not None)
        return "".join(_text(arg, True) for arg in args if arg is not None)
    if isinstance(node, exp.Nullif):
        first, second = compared(node.this, args[0], node.expression, args[1])
        return None if first is not None and first == second else first
    if isinstance(node, (exp.Least, exp.Greatest)):
        present = [_number(arg) for arg in args if arg is not None]
        _one_number_type(present)
        return (min if isinstance(node, exp.Least) else max)(present) if present else None
    if any(arg is None for arg in args):
        return None  # every other function and operator here is strict
    if isinstance(node, exp.DPipe):
        if not any(isinstance(arg, str) for arg in args):
            raise Unevaluated  # int || int has no operator in PostgreSQL
        return _text(args[0]) + _text(args[1])
    if isinstance(node, (exp.Lower, exp.Upper)):
        text = _ascii(args[0])
        return text.lower() if isinstance(node, exp.Lower) else text.upper()
    if isinstance(node, exp.Initcap):
        return _initcap(_ascii(args[0]))
    if isinstance(node, exp.Length):
        if not isinstance(args[0], str):
            raise Unevaluated
        return len(args[0])  # characters (code points), as PostgreSQL's in UTF8
    if isinstance(node, exp.Trim):
        return trimmed(node, _ascii(args[0]), _ascii(args[1]))
    if isinstance(node, exp.Substring):
        return _substring(node, args)
    if isinstance(node, (exp.Left, exp.Right)):
        return _side(node, args)
    if isinstance(node, exp.Cast):
        return _cast(node, args[0])
    return _arithmetic(node, [_number(arg) for arg in args])


def _operands(node: exp.Expression) -> list[exp.Expression]:
    """The evaluated operands of ``node``, in order; refused for what is not evaluated
    here (its other arguments, such as a CAST's type, are read by the caller)."""
    if isinstance(node, exp.Case):
        return []
    if isinstance(node, (exp.Coalesce, exp.Least, exp.Greatest)):
        if isinstance(node, (exp.Least, exp.Greatest)) and not node.args.get("ignore_nulls"):
            raise Unevaluated
        return [node.this, *node.expressions]
    if isinstance(node, (exp.Concat, exp.ConcatWs)):
        return list(node.expressions)
    if isinstance(node, (exp.Lower, exp.Upper, exp.Initcap, exp.Length, exp.Cast, exp.Abs,
                         exp.Neg, exp.Floor, exp.Ceil)):
        if isinstance(node, (exp.Floor, exp.Ceil)) and node.args.get("decimals"):
            raise Unevaluated
        return [node.this]
    if isinstance(node, exp.Round):
        return [node.this, node.args.get("decimals") or exp.Literal.number(0)]
    if isinstance(node, exp.Trim):
        return [node.this, node.expression or exp.Literal.string(" ")]
    if isinstance(node, exp.Substring):
        return [node.this, node.args.get("start") or exp.Literal.number(1),
                *([node.args["length"]] if node.args.get("length") else [])]
    if isinstance(node, (exp.DPipe, exp.Nullif, exp.Add, exp.Sub, exp.Mul, exp.Div,
                         exp.Mod, exp.Left, exp.Right)):
        return [node.this, node.expression]
    raise Unevaluated


def _case(node: exp.Case, row: dict[str, Any], table: Table, resolve) -> Any:
    """A CASE's value: its first branch whose condition holds; each condition reads one
    column and is decided as the WHERE's restriction decides it on a key."""
    for branch in node.args.get("ifs") or []:
        condition = branch.this
        if node.this is not None:
            condition = exp.EQ(this=node.this.copy(), expression=condition.copy())
        read = {resolve(column) for column in condition.find_all(exp.Column)}
        if len(read) != 1:
            raise Unevaluated
        name = read.pop()
        if isinstance(condition.unnest(), exp.Column) and table.columns[name].type != "bool":
            raise Unevaluated  # CASE WHEN age THEN …: an int is no condition there
        if truth_on_key(condition, row[name], table.columns[name].type) is True:
            return term_value(branch.args["true"], row, table, resolve)
    default = node.args.get("default")
    return None if default is None else term_value(default, row, table, resolve)


def _text(value: Any, output: bool = False) -> str:
    """A value as PostgreSQL writes it in text: whole numbers of int arithmetic only (a
    numeric's text shows its scale: ``2 * 10.0`` is ``20.0``); a boolean cast to text
    is true or false, written by its type's ``output`` (CONCAT's) t or f."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return ("t" if value else "f") if output else ("true" if value else "false")
    if isinstance(value, int) and abs(value) < 10**15:  # a double prints 1e+15 beyond
        return str(value)
    if isinstance(value, _Numeric):  # every place of its scale: 25.0, 8.3333333333333333
        digits = str(abs(value) * 10**value.scale // 1).rjust(value.scale + 1, "0")
        whole, places = digits[:len(digits) - value.scale], digits[len(digits) - value.scale:]
        return ("-" if value < 0 else "") + whole + ("." + places if value.scale else "")
    raise Unevaluated


def compared(left: exp.Expression, first: Any, right: exp.Expression, second: Any
              ) -> tuple[Any, Any]:
    """NULLIF's operands as PostgreSQL compares them: a quoted literal beside a number
    read as a number (``NULLIF(age, '5')``); text beside a number (or a boolean beside
    either) otherwise has no equality operator there (an error): not evaluated here."""
    def kind(value: Any) -> type | None:
        return None if value is None else bool if isinstance(value, bool) else \
            str if isinstance(value, str) else int

    if kind(first) is None or kind(second) is None or kind(first) == kind(second):
        return first, second
    if {kind(first), kind(second)} == {str, int}:
        if kind(first) is str and _quoted(left):
            return _read_number(first, second), second
        if kind(second) is str and _quoted(right):
            return first, _read_number(second, first)
    raise Unevaluated


def _quoted(node: exp.Expression) -> bool:
    node = node.unnest()
    return isinstance(node, exp.Literal) and node.is_string


def _read_number(text: str, beside: Any) -> int | Fraction:
    """A quoted literal read as the type of the number beside it (an integer's input
    takes a whole number only)."""
    if isinstance(beside, int):  # an integer's input: digits only ('5.0' is an error)
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
            raise Unevaluated
        return int(text)
    try:
        written = Decimal(text.strip())
        return _numeric(Fraction(written), max(-written.as_tuple().exponent, 0))
    except (ArithmeticError, ValueError):
        raise Unevaluated from None  # PostgreSQL: invalid input syntax


def _initcap(text: str) -> str:
    """PostgreSQL's initcap: the first letter of each run of letters and digits upper
    case, the rest lower (ASCII: ``_ascii``)."""
    out, inside = [], False
    for char in text:
        out.append(char.lower() if inside else char.upper())
        inside = char.isalnum()
    return "".join(out)


def _ascii(value: Any) -> str:
    if not isinstance(value, str) or not value.isascii():
        raise Unevaluated  # beyond ASCII, case mapping follows the backend's locale
    return value


class _Double(int):
    """A whole double precision value: what FLOOR, CEIL and ROUND of an integer give in
    PostgreSQL (its floor(double precision) takes the integer), written as the integer
    it is below 10^15."""


def _one_number_type(values: list[Any]) -> None:
    """Doubles beside numerics are doubles there: a numeric of places then loses them
    in its text (2.50 is 2.5); not evaluated here."""
    if any(isinstance(v, _Double) for v in values) and \
            any(isinstance(v, Fraction) for v in values):
        raise Unevaluated


class _Numeric(Fraction):
    """A value of PostgreSQL's numeric type: exact, with the scale (places) its text
    shows, as numeric.c keeps it."""

    scale: int


def _numeric(value: int | Fraction, scale: int) -> _Numeric:
    if scale > 1000:
        raise Unevaluated  # NUMERIC_MAX_DISPLAY_SCALE
    number = _Numeric(value)
    number.scale = scale
    return number


def _scale(value: int | Fraction) -> int:
    """The places of a number's text: none for an integer."""
    if isinstance(value, int):
        return 0
    if isinstance(value, _Numeric):
        return value.scale
    raise Unevaluated  # a number of unknown scale: not evaluated here


def _whole(value: int) -> int:
    """An integer result, within PostgreSQL's integer (int4 arithmetic fails beyond it;
    an int8 column's or literal's wider range is not known here: not evaluated)."""
    if not -2**31 <= value < 2**31:
        raise Unevaluated
    return value


def _number(value: Any) -> int | Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
        raise Unevaluated  # text is ordered by the backend's collation
    return value


def trimmed(node: exp.Trim, text: str, characters: str) -> str:
    """``text`` as PostgreSQL's TRIM ``node`` (BOTH, LEADING or TRAILING) leaves it:
    ``characters`` taken off the end(s) (time_keys trims a to_char bucket alike)."""
    position = (node.args.get("position") or "BOTH").upper()
    if position == "LEADING":
        return text.lstrip(characters)
    if position == "TRAILING":
        return text.rstrip(characters)
    return text.strip(characters)


def _substring(node: exp.Substring, args: list[Any]) -> str:
    """PostgreSQL's substring(text, start, count): 1-based, positions before 1 counted
    (``substring('abc', 0, 2)`` is ``'a'``); a negative count fails there."""
    text, start, *count = args
    if not isinstance(text, str) or not all(
            isinstance(arg, int) and not isinstance(arg, bool) for arg in (start, *count)):
        raise Unevaluated
    first = max(start, 1) - 1
    if not count:
        return text[first:]
    if count[0] < 0:
        raise Unevaluated
    return text[first:max(start + count[0] - 1, 0)]


def _side(node: exp.Left | exp.Right, args: list[Any]) -> str:
    """PostgreSQL's left(text, n) and right(text, n): the first (last) n characters; a
    negative n all but the last (first) |n|."""
    text, count = args
    if not isinstance(text, str) or isinstance(count, bool) or not isinstance(count, int):
        raise Unevaluated
    if isinstance(node, exp.Left):
        return text[:count]
    return text[max(len(text) - count, 0):] if count >= 0 else text[-count:]


def _cast(node: exp.Cast, value: Any) -> Any:
    target = node.to.this
    if target in _TEXT_TYPES and not node.to.expressions:
        return _text(value)
    if target in _INT_TYPES:
        if isinstance(value, str):
            return int(value.strip())  # int('1.5') fails, as PostgreSQL's cast does
        number = _number(value)
        if number != int(number):
            raise Unevaluated  # a numeric rounds, a double rounds to even: not here
        return int(number)
    raise Unevaluated


def _quotient(left: int | Fraction, right: int | Fraction) -> _Numeric:
    """A numeric quotient as PostgreSQL computes it: numeric.c's ``select_div_scale``
    takes at least 16 significant digits, ``16 - 4 * qweight`` places (qweight the
    base-10000 weight of the quotient's first digit as estimated there), or the
    operands' scales where they are more; ``div_var`` rounds the exact quotient to
    them, half away from zero (25 / 3.0 is 8.3333333333333333, times 3
    24.9999999999999999)."""
    quotient = Fraction(left) / Fraction(right)
    (weight1, first1), (weight2, first2) = _base_10000(left), _base_10000(right)
    qweight = weight1 - weight2 - (1 if first1 <= first2 else 0)  # 0 / 3.0: 20 places
    scale = min(max(16 - 4 * qweight, _scale(left), _scale(right), 0), 1000)
    shifted = abs(quotient) * 10**scale
    rounded = math.floor(shifted + Fraction(1, 2))  # half away from zero
    return _numeric(Fraction(rounded if quotient >= 0 else -rounded, 10**scale), scale)


def _base_10000(value: int | Fraction) -> tuple[int, int]:
    """The weight and first digit of a nonzero number in PostgreSQL's base-10000 numeric
    digits: ``|value| = first * 10000**weight + …``, ``1 <= first < 10000``; zero's
    are both 0, as select_div_scale reads them."""
    magnitude = abs(Fraction(value))
    if not magnitude:
        return 0, 0
    weight = 0
    while magnitude >= 10000**(weight + 1):
        weight += 1
    while magnitude < Fraction(10000)**weight:
        weight -= 1
    return weight, int(magnitude / Fraction(10000)**weight)


def _arithmetic(node: exp.Expression, args: list[int | Fraction]) -> int | Fraction:
    """Integer arithmetic where every operand is an integer (within int4), else
    numeric arithmetic with numeric.c's scales: a sum's the larger, a product's the
    sum, a quotient's ``_quotient``'s."""
    if any(isinstance(arg, _Double) for arg in args):
        return _double(node, args)
    whole = all(isinstance(arg, int) for arg in args)
    scales = [_scale(arg) for arg in args]
    if isinstance(node, exp.Neg):
        return _whole(-args[0]) if whole else _numeric(-args[0], scales[0])
    if isinstance(node, exp.Abs):
        return _whole(abs(args[0])) if whole else _numeric(abs(args[0]), scales[0])
    if isinstance(node, (exp.Floor, exp.Ceil)):
        rounded = math.floor(args[0]) if isinstance(node, exp.Floor) else math.ceil(args[0])
        return _Double(rounded) if whole else _numeric(rounded, 0)
    if isinstance(node, exp.Round):
        # round(numeric, int), half away from zero, to the scale asked (ROUND(age, 1)
        # is the numeric 25.0); ROUND(age) is a double's, of whole numbers whole
        digits = args[1]
        if not isinstance(digits, int) or not -1000 <= digits <= 1000 \
                or (node.args.get("decimals") is None and not whole):
            raise Unevaluated
        if whole and node.args.get("decimals") is None:
            return _Double(args[0])
        shifted = abs(Fraction(args[0])) * Fraction(10)**digits
        rounded = math.floor(shifted + Fraction(1, 2)) * Fraction(10)**-digits
        return _numeric(rounded if args[0] >= 0 else -rounded, max(digits, 0))
    left, right = args
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        result = left + right if isinstance(node, exp.Add) else \
            left - right if isinstance(node, exp.Sub) else left * right
        if whole:
            return _whole(result)
        return _numeric(result, sum(scales) if isinstance(node, exp.Mul) else max(scales))
    if right == 0:
        raise Unevaluated  # the query itself would fail on such a row
    if isinstance(node, exp.Div):
        if whole:  # integer division truncates toward zero
            quotient = abs(left) // abs(right)
            return _whole(quotient if (left < 0) == (right < 0) else -quotient)
        return _quotient(left, right)
    if isinstance(node, exp.Mod) and whole:
        return left - right * int(Fraction(left, right))  # the dividend's sign, as in C
    raise Unevaluated


def _double(node: exp.Expression, args: list[int | Fraction]) -> _Double:
    """Double precision arithmetic where it is exact: whole operands and results below
    2^53 (no -0: 0 * -5 is -0 there), a quotient only where whole; FLOOR and CEIL of a
    whole double are it. ROUND(double, n) and a double's % have no function there."""
    if not all(arg == int(arg) for arg in args):
        raise Unevaluated  # a numeric of places made a double: not exact
    values = [int(arg) for arg in args]
    if isinstance(node, (exp.Floor, exp.Ceil)) or (isinstance(node, exp.Round)
                                                   and node.args.get("decimals") is None):
        return _Double(values[0])
    if isinstance(node, exp.Abs):
        result = abs(values[0])
    elif isinstance(node, exp.Neg):
        result = -values[0]
    elif isinstance(node, exp.Add):
        result = values[0] + values[1]
    elif isinstance(node, exp.Sub):
        result = values[0] - values[1]
    elif isinstance(node, exp.Mul):
        result = values[0] * values[1]
    elif isinstance(node, exp.Div) and values[1] and values[0] % values[1] == 0:
        result = values[0] // values[1]
    else:
        raise Unevaluated
    negative_zero = result == 0 and (isinstance(node, exp.Neg) or (
        isinstance(node, (exp.Mul, exp.Div)) and min(values) < 0))
    if abs(result) >= 2**53 or negative_zero:
        raise Unevaluated
    return _Double(result)
