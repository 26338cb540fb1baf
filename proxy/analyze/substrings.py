"""``GROUP BY substring(col, start[, count])`` (also ``substr`` and ``substring(col FROM
start FOR count)``) on a text column with declared keys: the term's keys are the
declared keys' substrings, deduplicated, so they are public as the keys are.

On a column without declared keys, a WHERE that lists the substring's values (``AND
substring(c_phone, 1, 2) IN ('13', '31', …)``, TPC-H Q22) gives them as the keys:
``CASE WHEN substring(c_phone, 1, 2) = '13' THEN '13' …``, the substring computed by the
backend with whole constants, start ≥ 1 (``proxy.analyze.predicate``: it cannot fail).

On declared keys the term is a derived key (``proxy.analyze.derived_keys``): answered as
the CASE over the declared keys it stands for, ``CASE WHEN col IN ('AB-1', 'AB-2') THEN
'AB' WHEN col = 'CD-9' THEN 'CD' END``, so no substring runs in the backend. Here are its
refusals: a column without declared keys, a start or count that is no whole constant,
and a negative count (PostgreSQL fails on it, 22011).
"""

from __future__ import annotations

from sqlglot import exp

from proxy.errors import NotSupported, Refused
from proxy.rules import Table


def substring_case(node: exp.Substring, table: Table, resolve,
                   where: exp.Expression | None = None) -> exp.Case | None:
    """The CASE over the substrings the WHERE lists for ``node`` (``where_listed``);
    None on declared keys, a derived key (``proxy.analyze.derived_keys``); refused
    unless its column is text with declared keys (or so listed) and its start and count
    whole constants."""
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
    _whole(node.args.get("start"))
    count = node.args.get("length")
    if count is not None and _whole(count) < 0:
        raise Refused("negative substring length not allowed", "22011")
    return None


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
