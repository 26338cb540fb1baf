"""Time filters written on a truncation of the column, read as the range of the column
they mean: Tableau's date filter ``CAST("t"."at" AS DATE) >= DATE '2024-01-01'``, an
analyst's ``at::date BETWEEN '2024-01-01' AND '2024-01-31'``, ``DATE(at) = '…'``,
``date_trunc('month', at) = '2024-03-01'``, ``EXTRACT(YEAR FROM at) = 2024``.

A truncation f to a unit (a day, a week from Monday, a month, a quarter, a year, an hour, a
minute) is a non-decreasing step function, so each comparison with a constant T is a
range of the column itself, with u(T) = T where T starts a unit and the next start
otherwise, and n(T) the start after T's unit:

    f(c) >= T  ⇔  c >= u(T)            f(c) > T   ⇔  c >= n(T)
    f(c) <= T  ⇔  c <  n(T)            f(c) < T   ⇔  c <  u(T)
    f(c) = T   ⇔  c >= u(T) AND c < n(T)     (no row where T starts no unit)
    f(c) <> T  ⇔  c <  u(T) OR  c >= n(T)
    f(c) BETWEEN a AND b  ⇔  c >= u(a) AND c < n(b);  IN: the OR of its equalities

each NULL where c is NULL, as the comparison is (three-valued logic kept). The ranges
are what the rest of the analysis reads: checked as every WHERE literal is, narrowing the
buckets, the window and the keys. Only a column every table of the rules declares
``date`` or ``timestamp`` under that name, and a constant that reads as a date or
moment (``EXTRACT(YEAR …)``: a whole year; a date's truncation, a date at midnight:
``_dated``); anything else is left as written (and refused where it was).
"""

from __future__ import annotations

import datetime as dt

from sqlglot import exp

from proxy.analyze.time_keys import next_start, truncate
from proxy.errors import NotSupported
from proxy.rules import Rules, parse_moment

_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute")
_FLIPPED = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE,
            exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def truncations_as_ranges(tree: exp.Expression, rules: Rules) -> exp.Expression:
    """``tree`` with each comparison of a truncated time column with constants in a
    WHERE (a FILTER's too) written as the range of the column (module doc); changed in
    place, and returned. Not in HAVING, whose truncation is a GROUP BY key."""
    for where in list(tree.find_all(exp.Where)):
        for node in list(where.find_all(*_FLIPPED, exp.Between, exp.In)):
            written = _range(node, rules)
            if written is not None:
                node.replace(exp.Paren(this=written))
    return tree


def _truncation(node: exp.Expression, rules: Rules) -> tuple[exp.Column, str, str] | None:
    """(the column, the unit, its declared type) of a truncation of a time column."""
    node = node.unnest()
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE):
        column, unit = node.this.unnest(), "day"
    elif isinstance(node, exp.Date) and not node.expressions:
        column, unit = node.this.unnest(), "day"
    elif isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)) and not node.args.get("zone"):
        column, unit = node.this.unnest(), node.text("unit").lower()
    elif isinstance(node, exp.Extract) and node.this.name.lower() == "year":
        column, unit = node.expression.unnest(), "year"
    else:
        return None
    kinds = {declared.type for table in rules.tables.values()
             for name, declared in table.columns.items()
             if isinstance(column, exp.Column) and name == column.name.lower()}
    if unit not in _UNITS or len(kinds) != 1 or not kinds <= {"date", "timestamp"}:
        return None
    kind = kinds.pop()
    if kind == "date" and unit in ("hour", "minute"):  # a date's hour is its midnight
        unit = "day"
    return column, unit, kind


def _constant(node: exp.Expression, year: bool) -> dt.datetime | None:
    """The moment a constant names (a whole number: a year's start, after EXTRACT)."""
    node = node.unnest()
    if not isinstance(node, exp.Literal):
        return None
    if year:
        if node.is_string or not node.name.isdigit() or not 1 <= int(node.name) <= 9998:
            return None
        return dt.datetime(int(node.name), 1, 1)
    return parse_moment(node.name, zoned=True) if node.is_string else None


def _range(node: exp.Expression, rules: Rules) -> exp.Expression | None:
    """The comparison ``node`` as a range of its column, or None (left as written)."""
    if isinstance(node, (exp.Between, exp.In)):
        subject, operands = node.this, (
            [node.args.get("low"), node.args.get("high")] if isinstance(node, exp.Between)
            else node.expressions)
        kind = type(node)
        if node.args.get("symmetric") or (isinstance(node, exp.In) and (
                node.args.get("query") or node.args.get("unnest") or not operands)):
            return None
    else:
        subject, other, kind = node.this, node.expression, type(node)
        if _truncation(subject, rules) is None:
            subject, other, kind = other, subject, _FLIPPED[kind]
        operands = [other]
    found = _truncation(subject, rules)
    if found is None:
        return None
    column, unit, declared = found
    try:
        moments = [_constant(operand, unit == "year" and isinstance(subject.unnest(), exp.Extract))
                   for operand in operands]
        if None in moments or (_dated(subject) and any(m.time() != dt.time() for m in moments)):
            return None
        bounds = [(_up(moment, unit), next_start(moment, unit)) for moment in moments]
    except (NotSupported, OverflowError):  # beyond the years 1 to 9999: left as written
        return None

    def at(moment: dt.datetime) -> exp.Literal:
        return exp.Literal.string(moment.date().isoformat() if declared == "date"
                                  else moment.isoformat(" "))

    def compare(op, moment: dt.datetime) -> exp.Expression:
        return op(this=column.copy(), expression=at(moment))

    def equal(up: dt.datetime, following: dt.datetime) -> exp.Expression:
        return exp.and_(compare(exp.GTE, up), compare(exp.LT, following))

    (up, following), *rest = bounds
    if kind is exp.Between:
        return exp.and_(compare(exp.GTE, up), compare(exp.LT, rest[0][1]))
    if kind is exp.In:
        return exp.or_(*(exp.Paren(this=equal(*bound)) for bound in bounds))
    return {exp.GTE: lambda: compare(exp.GTE, up), exp.GT: lambda: compare(exp.GTE, following),
            exp.LTE: lambda: compare(exp.LT, following), exp.LT: lambda: compare(exp.LT, up),
            exp.EQ: lambda: equal(up, following),
            exp.NEQ: lambda: exp.or_(compare(exp.LT, up), compare(exp.GTE, following)),
            }[kind]()


def _dated(node: exp.Expression) -> bool:
    """Whether a truncation is a date (``CAST(… AS DATE)``, ``DATE(…)``): a quoted
    constant compared with it is read as a date, its time of day dropped, where a typed
    one (``TIMESTAMP '…'``, folded to the same quoted text) is compared as its moment;
    with a time of day the two differ, so such a filter is left as written."""
    return isinstance(node.unnest(), (exp.Cast, exp.Date))


def _up(moment: dt.datetime, unit: str) -> dt.datetime:
    """The first start of a unit at or after ``moment``."""
    return moment if truncate(moment, unit) == moment else next_start(moment, unit)
