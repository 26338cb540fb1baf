"""``GROUP BY substring(col, start[, count])`` (also ``substr`` and ``substring(col FROM
start FOR count)``) on a text column with declared keys: the term's keys are the
declared keys' substrings, deduplicated, so they are public as the keys are.

On a column without declared keys, a WHERE that lists the substring's values (``AND
substring(c_phone, 1, 2) IN ('13', '31', …)``, TPC-H Q22) gives them as the keys:
``CASE WHEN substring(c_phone, 1, 2) = '13' THEN '13' …``, the substring computed by the
backend with whole constants, start ≥ 1 (``proxy.analyze.predicate``: it cannot fail).

The term is answered as the CASE over the declared keys it stands for:
``CASE WHEN col IN ('AB-1', 'AB-2') THEN 'AB' WHEN col IN ('CD-9') THEN 'CD' END``, a
CASE group key with literal outputs (rules/README.md, "Buckets"), which
``proxy.analyze.group_keys`` already answers with its sensitivity: each record is in at
most one group, by its own value. Rows whose value is no declared key belong to no
group, as for ``GROUP BY col`` itself. The CASE is what the backend computes, so no
substring runs there, nothing can fail on a row's value, and every backend gives the
same groups. The substrings follow PostgreSQL: positions from 1, a start before 1 counts
the characters before it (``substring('abc', 0, 2)`` is ``'a'``), a negative count is
refused (PostgreSQL fails on it, 22011).
"""

from __future__ import annotations

from sqlglot import exp

from proxy.errors import NotSupported, Refused
from proxy.rules import Table


def substring_case(node: exp.Substring, table: Table, resolve,
                   where: exp.Expression | None = None) -> exp.Case:
    """The CASE over ``table``'s declared keys that ``node`` groups by, or over the
    substrings the WHERE lists for it (``where_listed``); refused unless its column is
    text with declared keys (or so listed) and its start and count whole constants."""
    column = node.this
    if not isinstance(column, exp.Column):
        raise NotSupported("GROUP BY substring(col, start, count) takes a column with "
                           "declared keys")
    name = resolve(column)
    declared = table.columns[name]
    listed = where_listed(node, where, resolve) if not declared.keys else None
    if listed is not None:
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=node.copy(), expression=exp.Literal.string(
            value)), true=exp.Literal.string(value)) for value in listed])
    if declared.type != "text" or not declared.keys:
        raise NotSupported(f"GROUP BY substring({name}, …) needs declared keys on the text "
                           f"column {name} (its keys are their substrings)")
    start, count = _whole(node.args.get("start")), node.args.get("length")
    count = None if count is None else _whole(count)
    if count is not None and count < 0:
        raise Refused("negative substring length not allowed", "22011")
    by_output: dict[str, list[str]] = {}
    for key in declared.keys:
        by_output.setdefault(_substring(str(key), start, count), []).append(key)
    return exp.Case(ifs=[exp.If(this=exp.In(this=column.copy(), expressions=[
        exp.Literal.string(key) for key in keys]), true=exp.Literal.string(output))
        for output, keys in by_output.items()])


def where_listed(node: exp.Substring, where: exp.Expression | None, resolve
                 ) -> tuple[str, ...] | None:
    """The strings a top-level AND term of the WHERE allows the same substring to be
    (``substring(c_phone, 1, 2) IN ('13', '31')``, TPC-H Q22; or ``= '13'``): the
    term's keys then, public as the query's literals are; a row in no group is one the
    WHERE leaves out anyway. None when there is no such term."""
    terms = where.flatten() if isinstance(where, exp.And) else [where] if where else []
    for term in terms:
        term = term.unnest()
        if isinstance(term, exp.In) and not term.args.get("query"):
            subject, values = term.this, term.expressions
        elif isinstance(term, exp.EQ):
            subject, values = term.this, [term.expression]
        else:
            continue
        if not (isinstance(subject, exp.Substring) and _same_substring(subject, node, resolve)
                and values and all(isinstance(v, exp.Literal) and v.is_string
                                   for v in values)):
            continue
        return tuple(dict.fromkeys(value.name for value in values))
    return None


def _same_substring(one: exp.Substring, other: exp.Substring, resolve) -> bool:
    """The same column (resolved), start and count."""
    if not (isinstance(one.this, exp.Column) and isinstance(other.this, exp.Column)):
        return False
    return resolve(one.this) == resolve(other.this) and all(
        one.args.get(arg) == other.args.get(arg) for arg in ("start", "length"))


def _whole(node: exp.Expression | None) -> int:
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node
    if not (isinstance(literal, exp.Literal) and not literal.is_string
            and literal.name.isdigit() and len(literal.name) <= 9):
        raise NotSupported("substring in GROUP BY takes whole numbers as its start and "
                           "count: substring(col, 1, 2)")
    return -int(literal.name) if negative else int(literal.name)


def _substring(text: str, start: int, count: int | None) -> str:
    """PostgreSQL's substring(text, start, count): 1-based, positions before 1 counted."""
    first = max(start, 1) - 1
    if count is None:
        return text[first:]
    return text[first:max(start + count - 1, 0)]
