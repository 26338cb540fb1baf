"""Time filters written on a truncation of the column, read as the range of the column
they mean: Tableau's date filter ``CAST("t"."at" AS DATE) >= DATE '2024-01-01'``, an
analyst's ``at::date BETWEEN '2024-01-01' AND '2024-01-31'``, ``DATE(at) = '…'``,
``date_trunc('month', at) = '2024-03-01'``, ``EXTRACT(YEAR FROM at) = 2024``; and
filters on the column converted to a zone's wall clock, Looker's ``(at AT TIME ZONE 'UTC'
AT TIME ZONE 'America/New_York') >= TIMESTAMP '2024-03-08'`` (``_wall_range``); and
filters on the column's epoch, Grafana's ``extract(epoch FROM at) BETWEEN 1700000000 AND
1710000000`` (``_epoch_range``).

A truncation f to a unit (a day, a week from Monday, a month, a quarter, a year, an hour, a
minute, a second) is a non-decreasing step function, so each comparison with a constant T is a
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
import zoneinfo
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

from sqlglot import exp

from proxy.analyze.time_keys import constant_wall, next_start, truncate
from proxy.errors import NotSupported
from proxy.rules import Rules, parse_moment
from proxy.zones import named_in_statement

_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")
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
    kind = _declared(column, rules)
    if unit not in _UNITS or kind not in ("date", "timestamp"):
        return None
    if kind == "date" and unit in ("hour", "minute", "second"):  # a date's is its midnight
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


def _converted(node: exp.Expression, rules: Rules
               ) -> tuple[exp.Column, zoneinfo.ZoneInfo] | None:
    """(the column, the zone) of ``col AT TIME ZONE 'UTC' AT TIME ZONE 'zone'``: a
    timestamp column, read as UTC, as the wall clock of an IANA zone (Looker's query
    time zone)."""
    node = node.unnest()
    if not (isinstance(node, exp.AtTimeZone) and isinstance(node.this.unnest(), exp.AtTimeZone)):
        return None
    inner = node.this.unnest()
    column, utc, zone = inner.this.unnest(), inner.args.get("zone"), node.args.get("zone")
    if not (isinstance(utc, exp.Literal) and utc.name.upper() == "UTC"
            and isinstance(zone, exp.Literal) and zone.is_string
            and _declared(column, rules) == "timestamp"):
        return None
    try:
        return column, named_in_statement(zone.name)
    except NotSupported:
        return None


def _instant(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> dt.datetime | None:
    """The one UTC moment (naive) whose wall clock in ``zone`` is ``wall``; None where
    the wall clock is skipped or repeated (a clock change's hour), whose moments are no
    single range of the column."""
    moments = {wall.replace(tzinfo=zone, fold=fold).astimezone(dt.UTC) for fold in (0, 1)}
    if len(moments) != 1:
        return None
    moment = moments.pop()
    return moment.replace(tzinfo=None) if moment.astimezone(zone).replace(
        tzinfo=None) == wall else None


def _wall_range(node: exp.Expression, rules: Rules) -> exp.Expression | None:
    """A comparison of a converted column (``_converted``) with constants as a range of
    the column. The wall clock w(c) = c + offset(c) rises with c but where a clock
    change repeats an hour, so a constant T outside such an hour is met once, at the
    moment u(T): w(c) >= T ⇔ c >= u(T), and alike for >, <, <=, =, BETWEEN. A constant
    in a skipped or repeated hour leaves the comparison as written."""
    compared = _compared(node, lambda side: _converted(side, rules) is not None)
    if compared is None or compared[2] in (exp.In, exp.NEQ):
        return None
    subject, operands, kind = compared
    found = _converted(subject, rules)
    if found is None:
        return None
    column, zone = found
    walls = [_constant(operand, False) for operand in operands]
    if None in walls or any(wall.tzinfo is not None for wall in walls):
        return None  # a moment with an offset compared with a wall clock: left as written
    try:
        moments = [_instant(wall, zone) for wall in walls]
    except (OverflowError, ValueError):
        return None
    if None in moments:
        return None

    def compare(op, moment: dt.datetime) -> exp.Expression:
        return op(this=column.copy(), expression=exp.Literal.string(moment.isoformat(" ")))

    if kind is exp.Between:
        return exp.and_(compare(exp.GTE, moments[0]), compare(exp.LTE, moments[1]))
    return compare(kind, moments[0])


def _compared(node: exp.Expression, recognised
              ) -> tuple[exp.Expression, list[exp.Expression], type] | None:
    """(the subject, the constants, the comparison's kind) of ``node``: the subject the
    side ``recognised`` takes (``5 < f(c)`` read as ``f(c) > 5``); None for a symmetric
    BETWEEN or an IN of no list."""
    if isinstance(node, (exp.Between, exp.In)):
        operands = ([node.args.get("low"), node.args.get("high")]
                    if isinstance(node, exp.Between) else node.expressions)
        if node.args.get("symmetric") or (isinstance(node, exp.In) and (
                node.args.get("query") or node.args.get("unnest") or not operands)):
            return None
        return node.this, operands, type(node)
    subject, other, kind = node.this, node.expression, type(node)
    if not recognised(subject):
        subject, other, kind = other, subject, _FLIPPED[kind]
    return subject, [other], kind


def _declared(column: exp.Expression, rules: Rules) -> str | None:
    """The type every table of the rules declares a column of that name, if one."""
    kinds = {declared.type for table in rules.tables.values()
             for name, declared in table.columns.items()
             if isinstance(column, exp.Column) and name == column.name.lower()}
    return kinds.pop() if len(kinds) == 1 else None


def _range(node: exp.Expression, rules: Rules) -> exp.Expression | None:
    """The comparison ``node`` as a range of its column, or None (left as written)."""
    converted = _wall_range(node, rules)
    if converted is not None:
        return converted
    epoch = _epoch_range(node, rules)
    if epoch is not None:
        return epoch
    compared = _compared(node, lambda side: _truncation(side, rules) is not None)
    if compared is None:
        return None
    subject, operands, kind = compared
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


_EPOCH = dt.datetime(1970, 1, 1)
# the epochs compared as written: whole microseconds within ±2^33 seconds, where every two
# distinct ones are distinct doubles too (PostgreSQL's date_part is a double, its extract
# a numeric, and sqlglot reads both as one EXTRACT: both compare alike there)
_EXACT = 2**33
_MICRO = Decimal("0.000001")
_UTC_NAMES = ("utc", "etc/utc", "gmt", "z", "zulu", "universal")


def _epoch_of(node: exp.Expression, rules: Rules) -> tuple[exp.Column, str, bool] | None:
    """(the column, its declared type, whether the epoch is a moment's) of
    ``extract(epoch FROM x)`` / ``date_part('epoch', x)`` where x is a date or timestamp
    column (PostgreSQL: the nominal seconds since 1970-01-01 00:00 of its value, whatever
    the session's zone), that column read as UTC (``AT TIME ZONE 'UTC'``: the same
    seconds), or a timestamp column cast to ``timestamptz`` (the moment's seconds since
    1970-01-01 00:00 UTC, the column read as a wall clock of the session's zone)."""
    node = node.unnest()
    if not isinstance(node, exp.Extract) or not isinstance(node.this, (exp.Var, exp.Literal)) \
            or node.this.name.lower() != "epoch":
        return None
    inner, moment = node.expression.unnest(), False
    if isinstance(inner, exp.AtTimeZone):
        zone = inner.args.get("zone")
        if not (isinstance(zone, exp.Literal) and zone.is_string
                and zone.name.lower() in _UTC_NAMES):
            return None
        inner = inner.this.unnest()
    elif isinstance(inner, exp.Cast) and inner.to.is_type(exp.DataType.Type.TIMESTAMPTZ):
        inner, moment = inner.this.unnest(), True
    kind = _declared(inner, rules)
    if not isinstance(inner, exp.Column) or kind not in ("date", "timestamp") or (
            moment and kind != "timestamp"):
        return None
    if node.expression.unnest() is not inner and kind != "timestamp":
        return None  # a date AT TIME ZONE: its midnight in the session's zone
    return inner, kind, moment


def _seconds(node: exp.Expression) -> Decimal | None:
    """A number constant (``-5``, ``1.7e9``, ``1700000000.5``) exactly."""
    node = node.unnest()
    negated = isinstance(node, exp.Neg)
    node = node.this.unnest() if negated else node
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    try:
        value = Decimal(node.name)
    except (InvalidOperation, ValueError):
        return None
    if not value.is_finite():
        return None
    return -value if negated else value


def _epoch_range(node: exp.Expression, rules: Rules) -> exp.Expression | None:
    """A comparison of a column's epoch (``_epoch_of``) with number constants as a range
    of the column. The epoch of a row takes values on a grid, whole microseconds (a
    timestamp) or days (a date), and rises with the column, so with ⌈r⌉ and ⌊r⌋ the grid
    points at or after and at or before r, and m(s) the column's value of epoch s:

        e >= r  ⇔  c >= m(⌈r⌉)        e > r  ⇔  c > m(⌊r⌋)
        e <= r  ⇔  c <= m(⌊r⌋)        e < r  ⇔  c < m(⌈r⌉)
        e = r   ⇔  c = m(r) on the grid, else c > m(⌊r⌋) AND c < m(⌈r⌉) (no row)
        e <> r  ⇔  c <> m(r) on the grid, else c <= m(⌊r⌋) OR c >= m(⌈r⌉) (every row)

    each NULL where c is NULL. A nominal epoch's m(s) is 1970-01-01 00:00 plus s seconds,
    a wall clock; a moment's is that moment's wall clock in the session's zone
    (``constant_wall``: refused within an hour a clock change skips or repeats, where
    the order of the two differs). A constant finer than a microsecond or beyond ±2^33
    seconds is refused (``_EXACT``): there PostgreSQL's date_part, a double, may compare
    otherwise than its extract, a numeric, and the two are one form here."""
    compared = _compared(node, lambda side: _epoch_of(side, rules) is not None)
    if compared is None or compared[2] is exp.In:
        return None
    subject, operands, kind = compared
    found = _epoch_of(subject, rules)
    values = [_seconds(operand) for operand in operands]
    if found is None or None in values:
        return None
    column, declared, moment = found
    grid = Decimal(86400) if declared == "date" else Decimal("0.000001")

    def at(steps: Decimal) -> exp.Literal:  # within ±2^33 seconds: the years 1697 to 2242
        value = _EPOCH + dt.timedelta(microseconds=int(steps * grid * 1_000_000))
        if moment:
            value = constant_wall(value)
        return exp.Literal.string(value.date().isoformat() if declared == "date"
                                  else value.isoformat(" "))

    def compare(op, steps: Decimal) -> exp.Expression:
        return op(this=column.copy(), expression=at(steps))

    def side(op, value: Decimal) -> exp.Expression:
        steps = value / grid
        down, up = (steps.to_integral_value(rounding) for rounding in (ROUND_FLOOR,
                                                                       ROUND_CEILING))
        if op is exp.GTE:
            return compare(exp.GTE, up)
        if op is exp.GT:
            return compare(exp.GT, down)
        if op is exp.LTE:
            return compare(exp.LTE, down)
        if op is exp.LT:
            return compare(exp.LT, up)
        if down == up:
            return compare(op, down)
        if op is exp.EQ:
            return exp.and_(compare(exp.GT, down), compare(exp.LT, up))
        return exp.or_(compare(exp.LTE, down), compare(exp.GTE, up))

    for value in values:
        if abs(value) > _EXACT:
            raise NotSupported(f"{subject.sql(dialect='postgres')} is compared with an epoch "
                               f"beyond ±{_EXACT:,} seconds (the years 1697 to 2242), where "
                               "date_part's double rounds apart from extract's numeric; "
                               "compare the column with a moment")
        if value != value.quantize(_MICRO, rounding=ROUND_FLOOR):
            raise NotSupported(f"{subject.sql(dialect='postgres')} is compared with {value}, "
                               "finer than a microsecond, where date_part's double rounds "
                               "apart from extract's numeric; write at most 6 decimals")
    if kind is exp.Between:
        return exp.and_(side(exp.GTE, values[0]), side(exp.LTE, values[1]))
    return side(kind, values[0])
