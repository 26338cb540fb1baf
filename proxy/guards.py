"""Guards that make the backend SQL of an aggregate's expression *total*: for every
row value (NULL, NaN, ±inf, denormals, huge values, anything in or out of a declared
domain) it computes a finite number or NULL on DuckDB, PostgreSQL and Spark, and never
raises (docs/privacy.md §3.6, "Totality"). Each guard but the final ``clamp`` mentions
its operand once, so a guarded expression is linear in the size of the analyst's
expression (a guard that wrote its operand twice made SQL that doubled per level).

The rules, with Python mirrors that compute exactly what the engines compute (IEEE
doubles, round to nearest), so the analyser's intervals and the fuzzer's reference
(tests/totality.py) follow the SQL:

- ``snap(v)``: (v + 2⁻⁴⁵⁰) − 2⁻⁴⁵⁰. Exactly v when |v| ≥ 2⁻³⁹⁵ (≈ 1.2·10⁻¹¹⁹); below,
  rounded to a multiple of about 2⁻⁵⁰³, so 0 or at least 2⁻⁵⁰³ (≈ 3.8·10⁻¹⁵²) in
  magnitude; monotone, so an interval [a, b] becomes [snap(a), snap(b)].
  Every operand of ``*`` and every dividend is snapped, and the analysis refuses an
  operand that the SQL itself does not keep below 2⁵⁰⁰ (the ``bound`` it tracks from
  the guards alone, not from the declared domains' intervals). A product of two is then
  0 or between 2⁻¹⁰⁰⁶ and 2¹⁰⁰⁰, a quotient by a constant c with 10⁻¹⁵⁰ ≤ |c| ≤ 10¹⁵⁰
  between 10⁻³⁰² and 10³⁰¹: PostgreSQL's underflow error (a product or quotient of
  non-zero doubles that rounds to 0) and overflow cannot happen.
- ``log_argument(v)``: abs(v) + 2⁻¹⁰²², what ``ln`` takes.
- ``clamp(v, lo, hi)``: v clamped to [lo, hi], NULL kept: CASE WHEN v IS NULL THEN
  NULL ELSE LEAST(GREATEST(v, lo), hi) END. The one guard that writes its operand
  twice, so only at the top of an expression, never nested (the SQL stays within twice
  the guarded expression). Its earlier form wrote v once by carrying NULL as ∓2¹⁰²³
  through LEAST/GREATEST and back by two nested NULLIFs, which DuckDB expands into
  CASEs: about 10% of TPC-H Q06's bucketed statement on DuckDB (issue 34).
"""

from __future__ import annotations

import math

from sqlglot import exp

DOUBLE = exp.DataType.build("double")
SNAP = 2.0 ** -450
OPERAND_BOUND = 2.0 ** 500
WHOLE_BOUND = 2.0 ** 63  # arguments of rounding functions and integer casts
LOG_FLOOR = 2.0 ** -1022
DIVISOR_RANGE = (1e-150, 1e150)
# Every guarded expression's value stays below this in magnitude (checked structurally
# by the analyser), so the divisor's sentinel 2^1023 is never a value.
MAGNITUDE_LIMIT = 2.0 ** 1020
_SENTINEL = 2.0 ** 1023


def number(value: float) -> exp.Expression:
    """A double constant: CAST(<shortest repr> AS DOUBLE), the same double everywhere."""
    return exp.cast(constant(value), DOUBLE.copy(), copy=False)


def constant(value: float) -> exp.Expression:
    """A constant beside a DOUBLE operand (which makes it one on every engine: PostgreSQL
    reads the numeric text exactly and converts it to the nearest double, as Python's
    ``repr`` round-trips); negative ones parenthesised."""
    literal = exp.Literal.number(repr(float(value)))
    return exp.paren(literal, copy=False) if value < 0 else literal


def snap(value: exp.Expression) -> exp.Expression:
    """((value) + 2⁻⁴⁵⁰ − 2⁻⁴⁵⁰), parenthesised; ``value`` is used, not copied (and not
    parenthesised again: + and − are left-associative and bind loosest)."""
    return exp.paren(exp.Sub(this=exp.Add(this=value, expression=constant(SNAP)),
                             expression=constant(SNAP)), copy=False)


def snap_value(value: float) -> float:
    return (value + SNAP) - SNAP


def log_argument(value: exp.Expression) -> exp.Expression:
    """abs(value) + 2⁻¹⁰²²: the argument ``ln`` takes, never 0 nor negative (and exactly
    |value| for |value| ≥ 2⁻⁹⁶⁸, about 4·10⁻²⁹²). Not NULLIF(abs(v), 0): DuckDB expands
    NULLIF into a CASE that writes its operand twice, so nested guards grew
    exponentially in its planner."""
    return exp.Add(this=exp.Abs(this=value), expression=constant(LOG_FLOOR))


def log_value(value: float) -> float:
    return math.log(abs(value) + LOG_FLOOR)


def clamp(value: exp.Expression, low: float, high: float) -> exp.Expression:
    """value clamped to [low, high], NULL staying NULL (NaN goes to high, ±inf to the
    ends): CASE WHEN v IS NULL THEN NULL ELSE LEAST(GREATEST(v, low), high) END. It
    writes ``value`` twice (used once, copied once), so it must never be nested: only
    the top of a derived value (``proxy.pushdown.scope.needed_value``) is clamped, and
    the SQL stays at most twice one guarded expression."""
    held = exp.Least(this=exp.Greatest(this=value.copy(), expressions=[constant(low)],
                                       ignore_nulls=True),
                     expressions=[constant(high)], ignore_nulls=True)
    return exp.Case(ifs=[exp.If(this=exp.Is(this=value, expression=exp.Null()),
                                true=exp.Null())], default=held)


def divisor(value: exp.Expression, least: float, negative: bool) -> exp.Expression:
    """A divisor of columns held at least ``least`` away from 0 on its side (below 0 if
    ``negative``), NULL staying NULL, ``value`` (a DOUBLE) written once: the analysis
    proves it is so, the SQL makes it so whatever the proof. Its upper magnitude is the
    SQL's own bound, which the analysis keeps within 10¹⁵⁰."""
    side = exp.Least if negative else exp.Greatest
    marker = -_SENTINEL if negative else _SENTINEL
    held = side(this=exp.Coalesce(this=value, expressions=[constant(marker)]),
                expressions=[constant(-least if negative else least)], ignore_nulls=True)
    return exp.Nullif(this=held, expression=constant(marker))


def depth(tree: exp.Expression) -> int:
    """The nesting depth of a tree (without recursion: the trees checked are deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in node.iter_expressions())
    return deepest


TIMESTAMP = exp.DataType.build("timestamp")
DATE = exp.DataType.build("date")
BIGINT = exp.DataType.build("bigint")


def clamped_moment(column: exp.Expression, domain, date: bool = False) -> exp.Expression:
    """A date or timestamp as a TIMESTAMP clamped to the declared [first, last]
    (±infinity included); NULL stays NULL. What a time bucket or an extracted field
    reads: a moment both engines compute every field of (PostgreSQL's extract of
    'infinity' is NULL for some fields and ±Infinity for others, DuckDB's NULL). A
    ``date`` column is compared with the domain's days before it is cast: PostgreSQL's
    dates run to year 5874897, its timestamps to 294276, so the cast of one far date
    failed the statement (after the debit: a row deciding whether it fails)."""
    first, last = (exp.cast(exp.Literal.string(moment.isoformat(" ")), TIMESTAMP.copy())
                   for moment in domain)
    moment = exp.cast(column.copy(), TIMESTAMP.copy())
    clamped = (exp.Case().when(moment.copy() < first, first.copy())
               .when(moment.copy() > last, last.copy()).else_(moment.copy()))
    if not date:
        return clamped
    first_day, last_day = (exp.cast(exp.Literal.string(moment.date().isoformat()),
                                    DATE.copy()) for moment in domain)
    return (exp.Case().when(column.copy() < first_day, first.copy())
            .when(column.copy() > last_day, last.copy()).else_(clamped))


def moment_number(column: exp.Expression, domain, seconds: bool) -> exp.Expression:
    """The moment clamped to the declared domain as a whole number of days (``seconds``
    false: a date) or seconds since 0001-01-01, as a DOUBLE; NULL stays NULL. Built
    from the fields every engine extracts alike (year, day of the year, hour, minute,
    second cut to a whole one): Python's ``date.toordinal`` of the day, from the year's
    leap days, so no engine's own epoch or date difference (PostgreSQL's, DuckDB's and
    Spark's differ, Spark's in the session's zone) decides it. Whole numbers below 2⁵³,
    so exact; it cannot fail (``clamped_moment``)."""
    def field(name: str) -> exp.Expression:
        return exp.cast(exp.Extract(this=exp.var(name), expression=clamped_moment(
            column.copy(), domain, date=not seconds)), DOUBLE.copy())

    years = exp.paren(field("YEAR") - exp.Literal.number(1))
    def leap(every: int) -> exp.Expression:
        return exp.func("FLOOR", exp.Div(this=years.copy(),
                                         expression=exp.Literal.number(float(every))))
    days = (exp.paren(years.copy() * exp.Literal.number(365)) + leap(4) - leap(100)
            + leap(400) + field("DOY"))
    if not seconds:
        return days
    return (exp.paren(days * exp.Literal.number(86400))
            + exp.paren(field("HOUR") * exp.Literal.number(3600))
            + exp.paren(field("MINUTE") * exp.Literal.number(60))
            + exp.func("FLOOR", field("SECOND")))


_BUCKET_DAY = {"day": None, "week": "ISODOW", "month": "DAY", "year": "DOY"}


def moment_offset(column: exp.Expression, domain, seconds: bool, bucket: str) -> exp.Expression:
    """The whole seconds (``seconds`` false, a date: days) from the start of the
    ``bucket`` (day, week from Monday, month or year) of the moment clamped to the
    declared domain to that moment, as a DOUBLE; NULL stays NULL. From the fields of
    the clamped moment, as ``moment_number``: whole numbers below 366 days' seconds for
    every row, so it cannot fail."""
    def field(name: str) -> exp.Expression:
        return exp.cast(exp.Extract(this=exp.var(name), expression=clamped_moment(
            column.copy(), domain, date=not seconds)), DOUBLE.copy())

    day = _BUCKET_DAY[bucket]
    days = exp.paren(field(day) - exp.Literal.number(1)) if day else exp.Literal.number(0)
    if not seconds:  # a date's day in its day: 0, NULL for NULL
        return days if day else exp.paren(field("DOY") * exp.Literal.number(0))
    within = (exp.paren(field("HOUR") * exp.Literal.number(3600))
              + exp.paren(field("MINUTE") * exp.Literal.number(60))
              + exp.func("FLOOR", field("SECOND")))
    return exp.paren(days * exp.Literal.number(86400)) + within if day else within


def time_field(column: exp.Expression, field: str, domain, date: bool = False,
               shifts: tuple = ()) -> exp.Expression:
    """``extract(field FROM column)`` of the moment clamped to the declared domain, as a
    BIGINT (PostgreSQL's extract is numeric, DuckDB's a BIGINT): a whole number of the
    field's range for every row, NULL for NULL; it cannot fail (a ``date`` column:
    ``clamped_moment``). ``shifts``: (from, seconds) of the pieces of a shift added to
    the clamped moment first (``time_keys._shifted_field``: a domain years from the
    engines' ends, shifts of at most a day)."""
    moment = clamped_moment(column, domain, date)
    if shifts:
        def plus(seconds: int) -> exp.Expression:
            return moment.copy() if not seconds else exp.Add(
                this=moment.copy(), expression=exp.Interval(
                    this=exp.Literal.string(str(seconds)), unit=exp.var("SECOND")))

        case = exp.Case()
        for (_, seconds), (start, _) in zip(shifts, shifts[1:]):
            case = case.when(moment.copy() < exp.cast(exp.Literal.string(
                start.isoformat(" ")), TIMESTAMP.copy()), plus(seconds))
        moment = case.else_(plus(shifts[-1][1])) if len(shifts) > 1 else plus(shifts[0][1])
    return exp.cast(exp.Extract(this=exp.var(field.upper()), expression=moment),
                    BIGINT.copy())
