"""``x = ANY(…)`` and ``x <> ALL(…)`` read as the IN lists they are.

psycopg and SQLAlchemy bind a Python list as one array parameter (``dept = ANY(%s)``:
the bound value arrives as PostgreSQL's array text ``'{a,b}'``), and analysts write
``= ANY(ARRAY[…])``; the analysis knows IN lists and IN subqueries. The two forms are
the same predicate in SQL's three-valued logic: ``x = ANY(a)`` is true where some
element equals x, NULL where none does and x or an element is NULL, false otherwise —
exactly ``x IN (a₁, …)``; ``x <> ALL(a)`` is its negation, ``x NOT IN (a₁, …)``. An
empty array makes ANY false and ALL true whatever x is. Other operators (``> ANY``)
and arrays the proxy cannot read (nested, of another shape) are left as written, and
the analysis refuses them as before."""

from __future__ import annotations

from sqlglot import exp

from proxy.analyze.predicate import BLANKS, DECIMAL_TEXT, INTEGER_TEXT, boolean_of
from proxy.errors import Refused

_KINDS = {"ANY": "any", "SOME": "any", "ALL": "all"}
# an array's elements at most: as an IN list written out (its tokens count against the
# statement's MAX_TOKENS), a string holding 100,000 of them would not be counted
MAX_ELEMENTS = 10_000


def quantified_as_in(tree: exp.Expression) -> None:
    """Rewrite every ``= ANY`` / ``= SOME`` and ``<> ALL`` (``!=``) in place."""
    for node in list(tree.find_all(exp.EQ, exp.NEQ)):
        quantified = _quantified(node.expression)
        if quantified is None:
            continue
        kind, operand = quantified
        if (kind == "any") != isinstance(node, exp.EQ):
            continue  # = ALL, <> ANY: not a list membership
        replacement = _membership(node.this, operand)
        if replacement is None:
            continue
        node.replace(replacement if kind == "any" else _negated(replacement))


def _quantified(node: exp.Expression) -> tuple[str, exp.Expression] | None:
    if isinstance(node, exp.Any):
        kind, operand = "any", node.this
    elif isinstance(node, exp.All):
        kind, operand = "all", node.this
    elif isinstance(node, exp.Anonymous) and node.name.upper() in _KINDS \
            and len(node.expressions) == 1:
        kind, operand = _KINDS[node.name.upper()], node.expressions[0]
    else:
        return None
    return kind, operand.unnest()


def _membership(left: exp.Expression, operand: exp.Expression) -> exp.Expression | None:
    """``left IN (…)`` for the operand's elements or subquery; None where the operand is
    not one the proxy reads."""
    if isinstance(operand, exp.Select):
        return exp.In(this=left.copy(), query=exp.Subquery(this=operand.copy()))
    if isinstance(operand, exp.Subquery):
        return exp.In(this=left.copy(), query=operand.copy())
    elements = _elements(operand)
    if elements is None:
        return None
    if len(elements) > MAX_ELEMENTS:
        raise Refused(f"statement too complex: an array of more than {MAX_ELEMENTS:,} "
                         "values; filter on a range, or split the list over several "
                         "queries", "54001")
    if not elements:
        return exp.false()
    return exp.In(this=left.copy(), expressions=elements)


def _elements(operand: exp.Expression) -> list[exp.Expression] | None:
    kind = None
    if isinstance(operand, exp.Cast) and operand.to.is_type(exp.DataType.Type.ARRAY):
        inner = operand.to.expressions
        kind = inner[0].this if inner and isinstance(inner[0], exp.DataType) else None
        operand = operand.this.unnest()
    if isinstance(operand, exp.Array):
        return [element.copy() for element in operand.expressions]
    if isinstance(operand, exp.Literal) and operand.is_string:
        texts = array_text(operand.this)
        if texts is None:
            return None
        return [_typed(text, kind) if kind in _NUMBERS else _moment(text, kind)
                if kind in _MOMENTS else boolean_of(exp.Literal.string(text), "an array element")
                if kind == _T.BOOLEAN and text is not None else _element(text)
                for text in texts]
    return None


_T = exp.DataType.Type
# the element types an array literal's text is read as numbers in, as PostgreSQL reads
# them (an integer type: its range; the others: any decimal)
_NUMBERS = {_T.SMALLINT: ("smallint", 15), _T.INT: ("integer", 31),
            _T.BIGINT: ("bigint", 63), _T.DECIMAL: ("numeric", None),
            _T.DOUBLE: ("double precision", None), _T.FLOAT: ("real", None)}


def _typed(text: str | None, kind: exp.DataType.Type) -> exp.Expression:
    """An element of an array cast to a number type: a number literal, as PostgreSQL
    reads the text into that type (``'{x}'::int[]`` fails there: refused, 22P02; an
    integer beyond the type's range, 22003), so that ``dept = ANY('{1}'::int[])``
    compares a text with a number, refused as PostgreSQL refuses it, and ``age =
    ANY('{30.5}'::numeric[])`` compares numbers. A float's other words (``NaN``,
    ``Infinity``) stay text, read as the column's type by ``predicate._number``."""
    if text is None:
        return exp.Null()
    name, bits = _NUMBERS[kind]
    bare = text.strip(BLANKS)
    if bits is None and not DECIMAL_TEXT.fullmatch(bare):
        return _element(text)
    if not (INTEGER_TEXT if bits is not None else DECIMAL_TEXT).fullmatch(bare):
        raise Refused(f'invalid input syntax for type {name}: "{text}"', "22P02")
    if bits is not None and abs(int(bare)) >= 2 ** bits + bare.startswith("-"):
        raise Refused(f'value "{bare}" is out of range for type {name}', "22003")
    number = bare.lstrip("+")
    return (exp.Neg(this=exp.Literal.number(number[1:])) if number.startswith("-")
            else exp.Literal.number(number))


# the element types an array literal's text is read as moments in: each element a cast,
# read as every time constant is (``merge_steps.fold_time_constants``: refused beside a
# column of another type, 42883); a boolean array's elements are TRUE or FALSE
_MOMENTS = (_T.DATE, _T.TIMESTAMP, _T.TIMESTAMPTZ)


def _moment(text: str | None, kind: exp.DataType.Type) -> exp.Expression:
    return exp.Null() if text is None else exp.cast(exp.Literal.string(text), kind)


def _element(text: str | None) -> exp.Expression:
    """One element of an array's text: NULL, else a string, whatever the array is cast
    to: an unknown-typed literal, which the comparison reads as the column's type as
    PostgreSQL's would (``predicate._number`` reads a quoted number beside a number
    column, and refuses one PostgreSQL would not read, before anything is spent; a
    number literal made here from Python's reading, ``nan`` or ``1_0``, reached the
    backend as written: the review of 2026-11-29)."""
    return exp.Null() if text is None else exp.Literal.string(text)


def array_text(text: str) -> list[str | None] | None:
    """The elements of a one-dimensional array in PostgreSQL's text form (``{a,"b c",NULL}``:
    double quotes and backslashes quote, an unquoted NULL is NULL, blanks around an
    unquoted element are dropped: C's, as PostgreSQL's array_in skips); None where the text is not such an array."""
    text = text.strip(BLANKS)
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        return None
    body = text[1:-1]
    if not body.strip(BLANKS):
        return []
    elements: list[str | None] = []
    at = 0
    while True:
        while at < len(body) and body[at] in BLANKS:
            at += 1
        if at < len(body) and body[at] == '"':
            value, at = _quoted(body, at + 1)
            if value is None:
                return None
            while at < len(body) and body[at] in BLANKS:
                at += 1
            elements.append(value)
        else:
            end = at
            while end < len(body) and body[end] not in ',"{}\\':
                end += 1
            if end < len(body) and body[end] != ",":
                return None  # nested, quoted inside, or escaped: not read here
            word = body[at:end].strip(BLANKS)
            if not word:
                return None
            elements.append(None if word.upper() == "NULL" else word)
            at = end
        if at == len(body):
            return elements
        if body[at] != ",":
            return None
        at += 1


def _quoted(body: str, at: int) -> tuple[str | None, int]:
    """A double-quoted element from just after its opening quote: its text and the
    position after its closing quote (None where it never closes)."""
    out: list[str] = []
    while at < len(body):
        char = body[at]
        if char == "\\" and at + 1 < len(body):
            out.append(body[at + 1])
            at += 2
        elif char == '"':
            return "".join(out), at + 1
        else:
            out.append(char)
            at += 1
    return None, at


def _negated(membership: exp.Expression) -> exp.Expression:
    if isinstance(membership, exp.Boolean):
        return exp.true()
    return exp.Not(this=membership)
