"""GROUP BY time buckets as BI tools write them (issue 33 item 1): ``CAST(ts AS date)``,
Sunday weeks ``date_trunc('week', ts + INTERVAL '1 day') + INTERVAL '-1 day'``,
``date_trunc`` over ``CAST(ts AS timestamp)``, over ``ts::timestamptz AT TIME ZONE 'UTC'``
or ``ts AT TIME ZONE 'Europe/Berlin'`` (and that bucket ``AT TIME ZONE`` back),
``to_char(ts, 'YYYY-MM')`` / ``'FMMonth'``, ``extract`` of a converted moment,
``CAST(extract(year FROM ts) AS INTEGER)``, Tableau's Sunday weeks ``date_trunc('day', ts)
+ (-extract(dow FROM ts) * INTERVAL '1 day')`` (read as Metabase's, ``_sunday_week``).

Such a term is a function f of one date or timestamp column t with a declared domain,
built from these steps (PostgreSQL's semantics in the session's ``TimeZone``, S: the
zone PostgreSQL reads a ``timestamp`` as a moment in, and shows, truncates and extracts
from a ``timestamptz`` in; UTC unless the session sets another, ``proxy.zones``):

- moments: the column, ``CAST``/``::`` to ``timestamp``, ``timestamptz`` (a
  ``timestamp`` read as a wall clock of S; a moment shown in S), ``x AT TIME ZONE
  'zone'`` (a ``timestamp`` read as a wall clock of the zone: a moment; a moment shown
  as the zone's wall clock), ``x ± INTERVAL '…'`` of days, hours, minutes, seconds (a
  fixed shift; a moment's days are added on S's clock);
- one bucket over a moment: ``date_trunc(unit, x[, 'zone'])``, ``CAST(x AS date)``,
  ``to_char(x, 'format')``, ``extract(field FROM x)``/``date_part``;
- after the bucket, any of these steps on the bucket's value (``+ INTERVAL '1 month'``
  too, as PostgreSQL adds months), and ``CAST(… AS integer)`` of an extract.

Over the domain [first, last] (narrowed by the WHERE's time range as for ``date_trunc``)
a moment is t plus a shift that changes only at the zones' transitions (the IANA
database's, found here from Python's ``zoneinfo``), so a bucket changes only where
some unit starts in the shifted clock, or at a transition. f is evaluated at each such
point: the domain is cut into ranges of t, each with its key (a label), adjacent
ranges with one label merged. Text and rules only: the labels are the same on every
data set. The backend computes no function of a row's value: the term is a search
over the ranges' starts by comparisons (``proxy.pushdown.group_sql``), so it cannot
fail, and every backend gives the same keys whatever its time-zone database. An
``extract`` of the column on another clock is the exception (``_shifted_field``): the
shifts, not the field's every change, are listed, and the backend adds the row's
piece's shift (a constant interval) to the clamped moment and extracts the field.

A wall clock that a transition skips is read with the offset before it, one it
repeats with the offset after it, as PostgreSQL reads them.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from proxy.analyze.derived_keys import trimmed
from proxy.errors import NotSupported
from proxy.rules import Column, Table
from proxy.vocabulary import RANGES, TIME_PART, GroupKey
from proxy.zones import (
    from_wall,
    local_offset,
    named_in_statement,
    offset_at,
    reading_zone,
    to_wall,
    transitions,
)

UTC = dt.UTC
_DAY = dt.timedelta(days=1)
_MAX_BREAKS = 100_000  # the most points where one term's key may change
# the most ranges of one term's key: the backend's search over them grows with them
# (DuckDB plans 17,000 in about a minute)
MAX_RANGES = 2_000
_MAX_SHIFT = dt.timedelta(days=366)
_MARGIN = dt.timedelta(days=800)
TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")
FIELDS = ("year", "quarter", "month", "week", "day", "dow", "isodow", "doy", "hour",
          "minute", "isoyear")
_FIELD_SPELLINGS = {"dayofweek": "dow", "dayofyear": "doy", "days": "day", "months": "month",
                    "years": "year", "hours": "hour", "minutes": "minute", "weeks": "week",
                    "quarters": "quarter", "isodayofweek": "isodow", "dayofweekiso": "isodow"}
_TYPES = {"ts": "timestamp", "tstz": "timestamptz", "date": "date", "text": "text",
          "int": "int"}


def tool_time_term(node: exp.Expression) -> bool:
    """Whether ``node`` is a time bucket of the shapes above (not the plain
    ``date_trunc(unit, col)`` and ``extract(field FROM col)``, which
    ``proxy.analyze.group_keys`` answers itself)."""
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc, exp.Extract)):
        inner = node.this if not isinstance(node, exp.Extract) else node.expression
        return not isinstance(inner, exp.Column) or bool(node.args.get("zone"))
    return isinstance(node, (exp.Cast, exp.AtTimeZone, exp.TimeToStr, exp.Add, exp.Sub,
                             exp.Trim)) and \
        any(isinstance(part, (exp.TimestampTrunc, exp.DateTrunc, exp.Extract, exp.AtTimeZone,
                              exp.TimeToStr, exp.Cast, exp.Interval)) for part in node.walk())


def canonical(node: exp.Expression, resolve) -> str:
    """The term's text with its column named as the rules name it (``"events"."at"``
    and ``at`` are one term)."""
    copy = node.copy()
    for column in list(copy.find_all(exp.Column)):
        column.replace(exp.column(resolve(column)))
    return copy.sql(dialect="postgres")


def time_term(node: exp.Expression, table: Table, resolve, name: str,
              within: Callable[[Column], tuple[dt.datetime, dt.datetime]]) -> GroupKey:
    """The term's key ranges and labels; refused (one line) outside the shapes above.
    ``within`` gives a time column's [first, last], narrowed by the WHERE."""
    columns = [part for part in node.find_all(exp.Column)]
    if len({resolve(part) for part in columns}) != 1:
        raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} must read one date or "
                           "timestamp column (its buckets follow from its declared domain)")
    column = table.columns[resolve(columns[0])]
    if column.type not in ("date", "timestamp"):
        raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} buckets a date or "
                           f"timestamp column; {column.name} is {column.type}")
    if column.time_domain is None:
        raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} on {column.name} needs a "
                           "declared domain [first, last] in the rules (the public list of "
                           "buckets); ask the data owner")
    first, last = within(column)
    compiler = _Compiler(column, first, last, reading_zone())
    shifted = _shifted_field(node, compiler, column, first, last, name)
    if shifted is not None:
        return shifted
    term = compiler.term(node)
    if not isinstance(term, _Stepped):
        raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} groups by every moment; "
                           "bucket it, e.g. date_trunc('day', …) or CAST(… AS date)")
    starts, labels = _ranges(term, first, last) if first <= last else ([], [])
    shown = list(dict.fromkeys(labels))
    index = {label: i for i, label in enumerate(shown)}
    return GroupKey(name, RANGES, column.name, tuple(range(len(shown))), _TYPES[term.kind],
                    unit=canonical(node, resolve), labels=tuple(shown),
                    bounds=tuple(starts), ranges=tuple(index[label] for label in labels))


# the most pieces of one shifted field (a zone's offset changes twice a year)
MAX_SHIFTS = 64
# the clamped moments a shift of up to a day is added to stay within every engine's
# timestamps (Spark's end at year 9999)
_SHIFTABLE = (dt.datetime(2, 1, 1), dt.datetime(9998, 12, 31))


def _shifted_field(node: exp.Expression, compiler: _Compiler, column: Column,
                   first: dt.datetime, last: dt.datetime, name: str) -> GroupKey | None:
    """``extract(field FROM x)`` (or its cast to an integer) where x is the column read on
    another clock (``AT TIME ZONE``, ``::timestamptz`` in the session's zone, ``±
    INTERVAL``): the wall clock is the column plus a shift that changes only at the
    zones' transitions, so the backend extracts the field from the clamped moment plus
    the shift of its piece (``guards.time_field``: a few fixed intervals, chosen by
    comparisons), where cutting the range at every change of the field (every hour of
    two years) gave more than ``MAX_RANGES`` ranges. None for other shapes, or more
    pieces than ``MAX_SHIFTS``: those are ranges as before."""
    inner = node
    while isinstance(inner, exp.Paren) or (isinstance(inner, exp.Cast) and inner.to.this in (
            exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT)):
        inner = inner.this
    if not isinstance(inner, exp.Extract) or first > last:
        return None
    field = _word(inner.this)
    field = _FIELD_SPELLINGS.get(field, field)
    domain = column.time_domain
    if field not in FIELDS or not (_SHIFTABLE[0] <= domain[0] and domain[1] <= _SHIFTABLE[1]):
        return None
    moment = compiler._clock(compiler.term(inner.expression))
    if not isinstance(moment, _Moment) or moment.kind != "ts":
        return None
    spans = list(moment.spans(first, last))
    if not spans or len(spans) > MAX_SHIFTS or any(abs(shift) > _DAY for *_, shift in spans):
        return None
    keys = sorted({value for start, end, shift in spans
                   for value in field_values(field, start + shift, end + shift)})
    return GroupKey(name, TIME_PART, column.name, tuple(keys), "int", field,
                    shifts=tuple((start, int(shift.total_seconds()))
                                 for start, _, shift in spans))


def _ranges(term: _Stepped, first: dt.datetime, last: dt.datetime
            ) -> tuple[list[dt.datetime], list[Any]]:
    """The starts of the ranges of [first, last] with one label each, and their labels
    (adjacent equal labels merged)."""
    starts, labels = [], []
    for start in [first] + sorted(b for b in term.breaks(first, last) if first < b <= last):
        label = term.value(start)
        if labels and _same(labels[-1], label):
            continue
        starts.append(start)
        labels.append(label)
        if len(starts) > MAX_RANGES:
            raise NotSupported(f"GROUP BY this time bucket cuts the time range into more "
                               f"than {MAX_RANGES:,} ranges (its keys repeat, or are many); "
                               "narrow the time range in WHERE or use a coarser bucket")
    return starts, labels


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def constant_wall(moment: dt.datetime) -> dt.datetime:
    """A ``timestamptz`` constant (naive, UTC) as the wall clock of the session's zone
    that a ``timestamp`` column is compared with: PostgreSQL reads the column in that
    zone, which orders wall clocks as their moments except across a daylight-saving
    change's skipped or repeated hour, so a constant that close to one is refused."""
    zone = reading_zone()
    for at, before, after in transitions(zone, moment - _DAY, moment + _DAY):
        if abs(moment - at) <= abs(after - before):
            raise NotSupported(f"the timestamptz constant {moment.isoformat(' ')}+00 is within "
                               f"the hour {zone.key} skips or repeats at {at.isoformat(' ')} "
                               "UTC, where its timestamps do not follow the moments' order; "
                               "compare with a timestamp constant (a wall clock) instead")
    return to_wall(zone, moment)


# -- the compiled term ------------------------------------------------------------------

@dataclass(frozen=True)
class _Moment:
    """A moment-valued step: value(t) = t + the shift of the last piece starting at or
    before t. ``kind``: "ts" (a wall clock), "tstz" (a moment, kept as its UTC clock) or
    "date" (the column itself, a date)."""

    kind: str
    pieces: tuple[tuple[dt.datetime, dt.timedelta], ...]

    def shift(self, t: dt.datetime) -> dt.timedelta:
        shift = self.pieces[0][1]
        for start, piece_shift in self.pieces:
            if start > t:
                break
            shift = piece_shift
        return shift

    def value(self, t: dt.datetime) -> dt.datetime:
        return t + self.shift(t)

    def spans(self, first: dt.datetime, last: dt.datetime):
        """(from, to, shift) of each piece within [first, last]."""
        starts = [max(start, first) for start, _ in self.pieces]
        for i, (_, shift) in enumerate(self.pieces):
            end = self.pieces[i + 1][0] if i + 1 < len(self.pieces) else last
            if starts[i] <= min(end, last):
                yield starts[i], min(end, last), shift


@dataclass(frozen=True)
class _Stepped:
    """A bucket: ``value(t)`` (a Python value as PostgreSQL gives it), constant between
    the points ``breaks(first, last)`` gives."""

    kind: str
    breaks: Callable[[dt.datetime, dt.datetime], list[dt.datetime]]
    value: Callable[[dt.datetime], Any]


class _Compiler:
    def __init__(self, column: Column, first: dt.datetime, last: dt.datetime,
                 session: dt.tzinfo):
        self.column, self.first, self.last, self.session = column, first, last, session

    def term(self, node: exp.Expression) -> _Moment | _Stepped:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column):
            kind = "date" if self.column.type == "date" else "ts"
            return _Moment(kind, ((dt.datetime.min, dt.timedelta(0)),))
        if isinstance(node, exp.Cast):
            return self._cast(self.term(node.this), node.to)
        if isinstance(node, exp.AtTimeZone):
            return self._at_zone(self.term(node.this), _zone(node.args.get("zone")))
        grain = _minute_grain(node)
        if grain is not None:
            moment, field, step = grain
            inner = self.term(moment)
            if inner.kind != "ts":
                raise NotSupported("a grain of seconds, minutes or hours (date_trunc plus a "
                                   "multiple of an INTERVAL) groups a timestamp column's wall "
                                   "clock; cast a date or a moment to timestamp first")
            return self._map(inner, "ts", field,
                             lambda v: _in_steps(truncate(_naive(v), field), field, step))
        week = _sunday_week(node)
        if week is not None:
            return self.term(week if self.column.type == "timestamp" else week.transform(
                lambda part: exp.cast(part, "timestamptz") if isinstance(part, exp.Column)
                else part))
        if isinstance(node, (exp.Add, exp.Sub)):
            left, right = node.this, node.expression
            while isinstance(right, exp.Paren):
                right = right.this
            if isinstance(node, exp.Add) and isinstance(left, exp.Interval):
                left, right = right, left
            if not isinstance(right, exp.Interval):
                raise NotSupported("a time bucket adds or subtracts a constant INTERVAL "
                                   "'…' only")
            months, days, rest = interval_fields(right)
            if isinstance(node, exp.Sub):
                months, days, rest = -months, -days, -rest
            inner = self.term(left)
            if inner.kind == "tstz" and (months or days):
                # PostgreSQL adds a moment's months and days on the session zone's clock
                inner = self._at_zone(self._plus(self._at_zone(inner, self.session),
                                                 months, days), self.session)
                months, days = 0, dt.timedelta(0)
            return self._plus(inner, months, days + rest)
        if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
            unit = _word(node.args.get("unit"))
            if unit not in TRUNC_UNITS:
                raise NotSupported(f"date_trunc takes one of {', '.join(TRUNC_UNITS)}; got {unit}")
            inner = self.term(node.this)
            zone = node.args.get("zone")
            if zone is not None:  # date_trunc(unit, moment, zone): truncated in that zone
                zone = _zone(zone)
                if inner.kind == "ts":
                    inner = self._cast(inner, exp.DataType.build("timestamptz"))
                return self._at_zone(self._trunc(self._at_zone(inner, zone), unit), zone)
            return self._trunc(inner, unit)
        if isinstance(node, exp.Extract):
            field = _word(node.this)
            field = _FIELD_SPELLINGS.get(field, field)
            if field == "epoch":  # of a bucket: its start's seconds since 1970 (its clock)
                inner = self.term(node.expression)
                if not isinstance(inner, _Stepped) or inner.kind not in ("ts", "tstz", "date"):
                    raise NotSupported("extract(epoch FROM …) groups by a bucket's start: "
                                       "bucket the column first, e.g. extract(epoch FROM "
                                       "date_trunc('day', …)), or floor(extract(epoch FROM "
                                       "…) / 86400) * 86400")
                return _Stepped("int", inner.breaks, lambda t: _epoch(inner.value(t)))
            if field not in FIELDS:
                raise NotSupported(f"extract/date_part groups by one of {', '.join(FIELDS)}; "
                                   f"got {field}")
            return self._map(self._clock(self.term(node.expression)), "int",
                             _UNIT_OF_FIELD[field], lambda v: _extract(field, v))
        if isinstance(node, exp.TimeToStr):
            pattern = _to_char_pattern(node)
            unit, format_ = _formatter(pattern)
            return self._map(self._clock(self.term(node.this)), "text", unit, format_)
        if isinstance(node, exp.Trim):  # Ibis's day name: TRIM(' ' FROM to_char(t, 'Day'))
            return self._trimmed(self.term(node.this), node)
        raise NotSupported(f"{node.sql(dialect='postgres')} is not a step of a time bucket "
                           "(casts, AT TIME ZONE, ± INTERVAL, date_trunc, to_char, extract)")

    # moments and buckets

    @staticmethod
    def _trimmed(inner, node: exp.Trim) -> _Stepped:
        """A text bucket trimmed as PostgreSQL trims (each end of the characters given,
        blanks by default)."""
        chars = node.expression
        if not isinstance(inner, _Stepped) or inner.kind != "text" or not (
                chars is None or isinstance(chars, exp.Literal) and chars.is_string):
            raise NotSupported("TRIM of a time bucket takes its to_char text and constant "
                               "characters")
        drop = " " if chars is None else chars.name
        return _Stepped("text", inner.breaks, lambda t: trimmed(node, inner.value(t), drop))

    def _cast(self, inner, to: exp.DataType):
        target = to.this
        T = exp.DataType.Type
        if target in (T.TIMESTAMP, T.DATETIME):
            kind = "ts"
        elif target in (T.TIMESTAMPTZ, T.TIMESTAMPLTZ):
            kind = "tstz"
        elif target == T.DATE:
            kind = "date"
        elif target in (T.INT, T.BIGINT, T.SMALLINT) and isinstance(inner, _Stepped) \
                and inner.kind == "int":
            return inner
        else:
            raise NotSupported(f"a time bucket casts to timestamp, timestamptz or date "
                               f"(an extract to integer); not {to.sql(dialect='postgres')}")
        if isinstance(inner, _Moment):
            if kind == "date":
                return self._map(self._clock(inner), "date", "day", _as_date)
            if inner.kind == "date":  # its midnight
                inner = _Moment("ts", inner.pieces)
            if (inner.kind == "tstz") != (kind == "tstz"):
                return self._at_zone(inner, self.session)
            return _Moment(kind, inner.pieces)
        if inner.kind in ("text", "int"):
            raise NotSupported(f"a time bucket does not cast {_TYPES[inner.kind]} to "
                               f"{to.sql(dialect='postgres')}")
        session = self.session
        return _Stepped(kind, inner.breaks, lambda t: _retyped(inner.value(t), kind, session))

    def _clock(self, inner):
        """A moment as the wall clock of the session's zone, which PostgreSQL truncates,
        formats and extracts fields from; a date or timestamp as it is."""
        return self._at_zone(inner, self.session) if inner.kind == "tstz" else inner

    def _at_zone(self, inner, zone: zoneinfo.ZoneInfo):
        if inner.kind == "date":
            raise NotSupported("AT TIME ZONE takes a timestamp or timestamptz; cast the "
                               "date first")
        if inner.kind not in ("ts", "tstz"):
            raise NotSupported("AT TIME ZONE takes a timestamp or timestamptz")
        if isinstance(inner, _Stepped):
            if inner.kind == "ts":  # a wall clock of the zone, as a moment
                return _Stepped("tstz", inner.breaks,
                                lambda t: _aware(from_wall(zone, inner.value(t))))
            return _Stepped("ts", inner.breaks,
                            lambda t: to_wall(zone, _naive(inner.value(t))))
        pieces = []
        low, high = self.first - _MARGIN, self.last + _MARGIN
        for start, shift in inner.pieces:
            pieces.append((start, shift))
        cuts = []
        for moment, _before, after in transitions(zone, low, high):
            # the value's clock at which the offset changes: the moment itself (tstz),
            # or the first wall clock read with the new offset (ts)
            cuts.append(moment if inner.kind == "tstz" else moment + after)
        refined = []
        for i, (start, shift) in enumerate(pieces):
            end = pieces[i + 1][0] if i + 1 < len(pieces) else dt.datetime.max
            points = [start] + sorted(c - shift for c in cuts
                                      if _inside(c - shift, start, end))
            for point in points:
                value = point + shift if point > dt.datetime.min else self.first + shift
                offset = offset_at(zone, value) if inner.kind == "tstz" else \
                    local_offset(zone, value)
                refined.append((point, shift + offset if inner.kind == "tstz"
                                else shift - offset))
        return _Moment("ts" if inner.kind == "tstz" else "tstz", tuple(refined))

    def _plus(self, inner, months: int, delta: dt.timedelta):
        if isinstance(inner, _Moment):
            if months:
                raise NotSupported("a moment plus months or years has no fixed length; add "
                                   "them after the bucket (date_trunc(…) + INTERVAL '1 month')")
            if abs(delta) > _MAX_SHIFT:
                raise NotSupported("a time bucket shifts a moment by at most a year")
            kind = "ts" if inner.kind == "date" else inner.kind
            return _Moment(kind, tuple((start, shift + delta) for start, shift in inner.pieces))
        if inner.kind not in ("ts", "tstz", "date"):
            raise NotSupported("only a timestamp or date bucket takes an INTERVAL")
        kind = "ts" if inner.kind == "date" else inner.kind
        session = self.session
        return _Stepped(kind, inner.breaks,
                        lambda t: _added(_retyped(inner.value(t), kind, session), months, delta))

    def _trunc(self, inner, unit: str):
        if inner.kind == "ts":
            return self._map(inner, "ts", unit, lambda v: truncate(_naive(v), unit))
        # a date or a moment: PostgreSQL's date_trunc(text, timestamptz), truncated on
        # the session zone's clock, a moment again
        if inner.kind == "date":
            inner = self._cast(inner, exp.DataType.build("timestamptz"))
        return self._at_zone(self._trunc(self._at_zone(inner, self.session), unit),
                             self.session)

    def _map(self, inner, kind: str, unit: str, function: Callable[[Any], Any]) -> _Stepped:
        """A bucket of ``inner``: ``function`` of its value, which changes only where a
        ``unit`` starts on its clock (a moment's clock: UTC, the session's zone)."""
        if isinstance(inner, _Stepped):
            return _Stepped(kind, inner.breaks, lambda t: function(inner.value(t)))
        moment = inner

        def breaks(first: dt.datetime, last: dt.datetime) -> list[dt.datetime]:
            found: list[dt.datetime] = []
            for start, end, shift in moment.spans(first, last):
                found.append(start)
                for boundary in _unit_starts(start + shift, end + shift, unit):
                    found.append(boundary - shift)
                    if len(found) > _MAX_BREAKS:
                        raise NotSupported(f"GROUP BY a {unit} bucket would cut the time "
                                           f"range into more than {_MAX_BREAKS:,} ranges; use "
                                           "a coarser bucket or a shorter time range")
            return found

        wrapped = (lambda t: function(_as_date(moment.value(t)))) if moment.kind == "date" \
            else (lambda t: function(moment.value(t)))
        return _Stepped(kind, breaks, wrapped)


def _inside(point: dt.datetime, start: dt.datetime, end: dt.datetime) -> bool:
    return start < point < end


# -- values -----------------------------------------------------------------------------

def _naive(value) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    return dt.datetime(value.year, value.month, value.day)


def _epoch(value) -> int:
    """PostgreSQL's ``extract(epoch FROM …)`` of a bucket's start (whole seconds): a
    moment's seconds since 1970-01-01 UTC, a timestamp's or date's nominal ones (its wall
    clock read as UTC)."""
    return int((_naive(value) - dt.datetime(1970, 1, 1)).total_seconds())


def _aware(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=UTC)


def _as_date(value) -> dt.date:
    return _naive(value).date() if isinstance(value, dt.datetime) else value


def _retyped(value, kind: str, session: dt.tzinfo):
    """A time value as ``kind``: a moment and a wall clock meet in the session's zone."""
    moment = isinstance(value, dt.datetime) and value.tzinfo is not None
    if kind == "tstz":
        return value if moment else _aware(from_wall(session, _naive(value)))
    wall = to_wall(session, _naive(value)) if moment else _naive(value)
    return wall.date() if kind == "date" else wall


def _added(value, months: int, delta: dt.timedelta):
    """``value + INTERVAL``: months first (the day clamped to the month's last), then
    the rest, as PostgreSQL adds them."""
    naive = _naive(value)
    if months:
        total = naive.year * 12 + naive.month - 1 + months
        year, month = divmod(total, 12)
        month += 1
        if not 1 <= year <= 9999:
            raise NotSupported("a time bucket's interval leaves the calendar")
        naive = naive.replace(year=year, month=month,
                              day=min(naive.day, calendar.monthrange(year, month)[1]))
    naive = naive + delta
    return _aware(naive) if isinstance(value, dt.datetime) and value.tzinfo else naive


def truncate(moment: dt.datetime, unit: str) -> dt.datetime:
    """``date_trunc(unit, moment)`` as PostgreSQL and DuckDB compute it (weeks start on
    Monday)."""
    if unit == "year":
        return dt.datetime(moment.year, 1, 1)
    if unit == "quarter":
        return dt.datetime(moment.year, 3 * ((moment.month - 1) // 3) + 1, 1)
    if unit == "month":
        return dt.datetime(moment.year, moment.month, 1)
    day = dt.datetime(moment.year, moment.month, moment.day)
    if unit == "week":
        return day - dt.timedelta(days=moment.weekday())
    if unit == "day":
        return day
    if unit == "hour":
        return day.replace(hour=moment.hour)
    if unit == "minute":
        return day.replace(hour=moment.hour, minute=moment.minute)
    return moment.replace(microsecond=0)


_STEPS = {"week": dt.timedelta(weeks=1), "day": _DAY, "hour": dt.timedelta(hours=1),
          "minute": dt.timedelta(minutes=1), "second": dt.timedelta(seconds=1)}
_MONTH_STEPS = {"year": 12, "quarter": 3, "month": 1}


def next_start(moment: dt.datetime, unit: str) -> dt.datetime:
    """The first start of a ``unit`` after ``moment``: ``date_trunc(unit, moment)`` plus
    one unit (months as PostgreSQL adds them; refused beyond the year 9999)."""
    if unit in _MONTH_STEPS:
        return _added(truncate(moment, unit), _MONTH_STEPS[unit], dt.timedelta(0))
    return truncate(moment, unit) + _STEPS[unit]


def _unit_starts(low: dt.datetime, high: dt.datetime, unit: str):
    """Every start of a ``unit`` in (low, high]."""
    point, count = next_start(low, unit), 0
    while point <= high:
        yield point
        if unit in _STEPS:
            count += 1
            if count > _MAX_BREAKS:
                return
        point = next_start(point, unit)


# the fields the backend extracts from a plain column (``group_keys``), and how many
# values each takes in its cycle (None: the years of the range)
PART_CYCLES = {"year": None, "isoyear": None, "quarter": 4, "month": 12, "week": 53,
               "day": 31, "dow": 7, "isodow": 7, "doy": 366, "hour": 24, "minute": 60}


def part_field(node: exp.Expression | None) -> str:
    """The field of ``extract(field FROM …)`` as one of PART_CYCLES; refused otherwise."""
    field = _word(node)
    field = _FIELD_SPELLINGS.get(field, field)
    if field not in PART_CYCLES:
        hint = ("; ask MIN or MAX of the column itself, compare it with a moment (col >= "
                "'2024-01-01 00:00') or in WHERE with a number (extract(epoch FROM col) >= "
                "1700000000), or group by its bins: floor(extract(epoch FROM col) / 3600) * "
                "3600" if field == "epoch" else "")
        raise NotSupported(f"extract/date_part of a time column takes one of "
                           f"{', '.join(PART_CYCLES)} here; got {field}{hint}")
    return field


def field_values(field: str, first: dt.datetime, last: dt.datetime) -> tuple[int, ...]:
    """The values ``extract(field FROM t)`` takes for t in [first, last], in order: it
    changes only where the field's unit starts, and once a whole cycle is seen every
    value is (a leap year's day 366 and a 53-week year's week 53 within a few years)."""
    if first > last:
        return ()
    if PART_CYCLES[field] is None:  # year, isoyear: never less later, so every one between
        return tuple(range(_extract(field, first), _extract(field, last) + 1))
    seen = {_extract(field, first)}
    for start in _unit_starts(first, last, _UNIT_OF_FIELD[field]):
        seen.add(_extract(field, start))
        if len(seen) == PART_CYCLES[field]:
            break
    return tuple(sorted(seen))


_UNIT_OF_FIELD = {"year": "year", "isoyear": "day", "quarter": "quarter", "month": "month",
                  "week": "day", "day": "day", "dow": "day", "isodow": "day", "doy": "day",
                  "hour": "hour", "minute": "minute"}


def field_of(field: str, value) -> int:
    """PostgreSQL's ``extract(field FROM value)`` of one moment (a field of PART_CYCLES)."""
    return _extract(field, value)


def _extract(field: str, value) -> int:
    moment = _naive(value)
    return {"year": lambda m: m.year, "quarter": lambda m: (m.month - 1) // 3 + 1,
            "month": lambda m: m.month, "day": lambda m: m.day,
            "dow": lambda m: (m.weekday() + 1) % 7, "isodow": lambda m: m.isoweekday(),
            "doy": lambda m: m.timetuple().tm_yday, "week": lambda m: m.isocalendar()[1],
            "isoyear": lambda m: m.isocalendar()[0], "hour": lambda m: m.hour,
            "minute": lambda m: m.minute}[field](moment)


def _sunday_week(node: exp.Expression) -> exp.Expression | None:
    """Tableau's week from Sunday, ``date_trunc('day', x) + (-extract(dow FROM x) *
    INTERVAL '1 day')`` (or ``- extract(…) * INTERVAL '1 day'``), as the bucket it is:
    ``date_trunc('week', x + INTERVAL '1 day') + INTERVAL '-1 day'``, the Sunday at or
    before x at midnight (x's day less its day of the week, 0 on Sunday). For a date x
    (whose date_trunc is a timestamptz, PostgreSQL's date_trunc(text, timestamptz)) the
    caller reads x as that timestamptz. None for other shapes."""
    if not isinstance(node, (exp.Add, exp.Sub)):
        return None
    day, shift = node.this.unnest(), node.expression.unnest()
    if not isinstance(shift, exp.Mul):
        return None
    count, interval = shift.this.unnest(), shift.expression.unnest()
    if isinstance(count, exp.Interval):
        count, interval = interval, count
    negated = isinstance(count, exp.Neg)
    count = count.this.unnest() if negated else count
    if negated == isinstance(node, exp.Sub) or not (
            isinstance(day, (exp.TimestampTrunc, exp.DateTrunc)) and not day.args.get("zone")
            and _word(day.args.get("unit")) == "day" and isinstance(count, exp.Extract)
            and _FIELD_SPELLINGS.get(_word(count.this), _word(count.this)) == "dow"
            and isinstance(interval, exp.Interval) and count.expression == day.this):
        return None
    if interval_fields(interval) != (0, _DAY, dt.timedelta(0)):
        return None
    moment = day.this.copy()
    return exp.Add(this=exp.TimestampTrunc(this=exp.Add(this=moment, expression=_one_day(1)),
                                           unit=exp.var("WEEK")), expression=_one_day(-1))


_GRAIN_WITHIN = {"second": "minute", "minute": "hour", "hour": "day"}  # a grain's field, truncated to


def _minute_grain(node: exp.Expression) -> tuple[exp.Expression, str, int] | None:
    """Superset's second, minute and hour grains, ``DATE_TRUNC('hour', m) + INTERVAL '5
    minutes' * FLOOR(EXTRACT(MINUTE FROM m) / 5)`` (``'minute'`` with seconds, ``'day'``
    with hours), as (m, the field, the step): each n seconds (minutes, hours) of the
    minute (hour, day) a bucket of its own, counted from its start as PostgreSQL adds
    them (a step not dividing the hour leaves a shorter last bucket; PostgreSQL's
    ``EXTRACT(SECOND …)`` has the fraction of the second, which the floor of a division
    by a whole step drops). None for other shapes."""
    if not isinstance(node, exp.Add):
        return None
    trunc, times = node.this.unnest(), node.expression.unnest()
    if isinstance(times, (exp.TimestampTrunc, exp.DateTrunc)):
        trunc, times = times, trunc
    if not isinstance(trunc, (exp.TimestampTrunc, exp.DateTrunc)) or trunc.args.get("zone") \
            or not isinstance(times, exp.Mul):
        return None
    interval, floor = times.this.unnest(), times.expression.unnest()
    if isinstance(floor, exp.Interval):
        interval, floor = floor, interval
    if not isinstance(interval, exp.Interval) or not isinstance(floor, exp.Floor) \
            or floor.args.get("decimals"):
        return None
    division = floor.this.unnest()
    if not isinstance(division, (exp.Div, exp.IntDiv)):
        return None
    extract, count = division.this.unnest(), division.expression.unnest()
    if not isinstance(extract, exp.Extract) or not isinstance(count, exp.Literal) \
            or count.is_string or not count.name.isdigit() or not 0 < int(count.name) < 1000:
        return None
    field = _FIELD_SPELLINGS.get(_word(extract.this), _word(extract.this))
    if _GRAIN_WITHIN.get(field) != _word(trunc.args.get("unit")) \
            or extract.expression.sql() != trunc.this.sql():
        return None
    step = int(count.name)
    months, days, rest = interval_fields(interval)
    unit = _INTERVAL_UNITS[field]
    if months or days or rest != step * unit:
        return None
    return trunc.this, field, step


def _in_steps(start: dt.datetime, field: str, step: int) -> dt.datetime:
    """A second's (minute's, hour's) start moved back to the first of its step within the
    minute (hour, day)."""
    if field == "second":
        return start.replace(second=start.second // step * step)
    if field == "minute":
        return start.replace(minute=start.minute // step * step)
    return start.replace(hour=start.hour // step * step)


def _one_day(sign: int) -> exp.Interval:
    return exp.Interval(this=exp.Literal.string(str(sign)), unit=exp.var("DAY"))


# -- to_char ------------------------------------------------------------------------------

def _to_char_pattern(node: exp.TimeToStr) -> str:
    """The format as written (sqlglot keeps it in strftime form, and writes it back)."""
    text = exp.TimeToStr(this=exp.column("x"), format=node.args["format"].copy()).sql(
        dialect="postgres")
    match = re.fullmatch(r"TO_CHAR\(x, '(.*)'\)", text, re.S)
    if not match:
        raise NotSupported("to_char in GROUP BY takes a constant format, e.g. 'YYYY-MM'")
    return match.group(1).replace("''", "'")


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_RANK = {"minute": 0, "hour": 1, "day": 2, "month": 3, "quarter": 4, "year": 5}
# token -> (finest unit it shows, its text for a moment, zero-padded width or None)
_TOKENS: dict[str, tuple[str, Callable[[dt.datetime], str]]] = {
    "YYYY": ("year", lambda m: f"{m.year:04d}"),
    "IYYY": ("day", lambda m: f"{m.isocalendar()[0]:04d}"),
    "YY": ("year", lambda m: f"{m.year % 100:02d}"),
    "MONTH": ("month", lambda m: _MONTHS[m.month - 1].upper().ljust(9)),
    "Month": ("month", lambda m: _MONTHS[m.month - 1].ljust(9)),
    "month": ("month", lambda m: _MONTHS[m.month - 1].lower().ljust(9)),
    "MON": ("month", lambda m: _MONTHS[m.month - 1][:3].upper()),
    "Mon": ("month", lambda m: _MONTHS[m.month - 1][:3]),
    "mon": ("month", lambda m: _MONTHS[m.month - 1][:3].lower()),
    "MM": ("month", lambda m: f"{m.month:02d}"),
    "DAY": ("day", lambda m: _DAYS[m.weekday()].upper().ljust(9)),
    "Day": ("day", lambda m: _DAYS[m.weekday()].ljust(9)),
    "day": ("day", lambda m: _DAYS[m.weekday()].lower().ljust(9)),
    "DY": ("day", lambda m: _DAYS[m.weekday()][:3].upper()),
    "Dy": ("day", lambda m: _DAYS[m.weekday()][:3]),
    "dy": ("day", lambda m: _DAYS[m.weekday()][:3].lower()),
    "DDD": ("day", lambda m: f"{m.timetuple().tm_yday:03d}"),
    "DD": ("day", lambda m: f"{m.day:02d}"),
    "D": ("day", lambda m: str((m.weekday() + 1) % 7 + 1)),
    "IW": ("day", lambda m: f"{m.isocalendar()[1]:02d}"),
    "WW": ("day", lambda m: f"{(m.timetuple().tm_yday - 1) // 7 + 1:02d}"),
    "HH24": ("hour", lambda m: f"{m.hour:02d}"),
    "HH12": ("hour", lambda m: f"{(m.hour - 1) % 12 + 1:02d}"),
    "HH": ("hour", lambda m: f"{(m.hour - 1) % 12 + 1:02d}"),
    "MI": ("minute", lambda m: f"{m.minute:02d}"),
    "Q": ("quarter", lambda m: str((m.month - 1) // 3 + 1)),
    "AM": ("hour", lambda m: "AM" if m.hour < 12 else "PM"),
    "PM": ("hour", lambda m: "AM" if m.hour < 12 else "PM"),
}
_TOKEN_ORDER = sorted(_TOKENS, key=len, reverse=True)


def to_char_format(node: exp.TimeToStr) -> str:
    """The PostgreSQL format of ``to_char(x, 'format')`` when this module formats it
    (``formatted``); refused in one line otherwise."""
    pattern = _to_char_pattern(node)
    _formatter(pattern)
    return pattern


def _quoted_text(pattern: str, start: int) -> tuple[str, int]:
    """The text of a quoted part of a to_char format from ``start`` (after its opening
    quote), a backslash in it escaping the next character (``\\"`` a quote, ``\\\\``
    a backslash), and where the format goes on after its closing quote."""
    text = []
    i = start
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            text.append(pattern[i + 1])
            i += 2
        elif pattern[i] == '"':
            return "".join(text), i + 1
        else:
            text.append(pattern[i])
            i += 1
    raise NotSupported("to_char's format has an unclosed quote")


def formatted(moment: dt.datetime, pattern: str) -> str:
    """PostgreSQL's ``to_char(moment, pattern)`` (a wall clock; ``to_char_format``
    checked the pattern)."""
    return _formatter(pattern)[1](moment)


def _formatter(pattern: str) -> tuple[str, Callable[[Any], str]]:
    """PostgreSQL's to_char for the tokens above (``FM`` drops a token's padding,
    ``"text"`` is literal); the finest unit the format shows."""
    parts: list[tuple[str, bool] | str] = []
    finest = "year"
    i = 0
    while i < len(pattern):
        fill = True
        if pattern.startswith("FM", i):
            fill, i = False, i + 2
            if i == len(pattern):  # a trailing FM prefixes nothing
                break
        if pattern.startswith('\\"', i):  # an escaped quote is a quote
            parts.append('"')
            i += 2
            continue
        if pattern[i] == '"':
            text, i = _quoted_text(pattern, i + 1)
            parts.append(text)
            continue
        token = next((t for t in _TOKEN_ORDER if pattern.startswith(t, i)), None)
        if token is None:
            if pattern[i].isalpha():
                raise NotSupported(f"to_char in GROUP BY takes the format fields YYYY, MM, "
                                   f"Mon, Month, DD, Day, HH24, MI, Q, IW …; not {pattern[i:]!r}")
            parts.append(pattern[i])
            i += 1
            continue
        parts.append((token, fill))
        unit = _TOKENS[token][0]
        finest = unit if _RANK[unit] < _RANK[finest] else finest
        i += len(token)

    def format_(value) -> str:
        moment = _naive(value)
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            token, fill = part
            text = _TOKENS[token][1](moment)
            out.append(text if fill else (text.rstrip() if not text.isdigit()
                                          else str(int(text))))
        return "".join(out)

    return finest, format_


# -- literals -----------------------------------------------------------------------------

def _word(node: exp.Expression | None) -> str:
    if isinstance(node, (exp.Var, exp.Literal, exp.Column)):
        return node.name.lower()
    raise NotSupported("date_trunc and extract take a literal unit, e.g. 'month'")


def _zone(node: exp.Expression | None) -> zoneinfo.ZoneInfo:
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise NotSupported("AT TIME ZONE takes a zone name literal, e.g. 'Europe/Berlin'")
    return named_in_statement(node.name)


_INTERVAL_UNITS = {"microsecond": dt.timedelta(microseconds=1),
                   "millisecond": dt.timedelta(milliseconds=1),
                   "second": dt.timedelta(seconds=1), "minute": dt.timedelta(minutes=1),
                   "hour": dt.timedelta(hours=1), "day": _DAY, "week": dt.timedelta(weeks=1)}


def interval_parts(node: exp.Interval) -> tuple[int, dt.timedelta]:
    """(months, the rest) of a constant interval: ``INTERVAL '1 day'``, ``INTERVAL '-1'
    DAY``, ``INTERVAL '1 day 2 hours'``."""
    months, days, rest = interval_fields(node)
    return months, days + rest


def interval_fields(node: exp.Interval) -> tuple[int, dt.timedelta, dt.timedelta]:
    """(months, days, the rest): PostgreSQL's three fields of an interval, as it adds
    them to a moment (weeks are days; a fraction of a day is the rest's)."""
    text = node.this.name if isinstance(node.this, exp.Literal) else None
    if text is None:
        raise NotSupported("a time bucket's INTERVAL is a constant: INTERVAL '1 day'")
    unit = node.args.get("unit")
    words = text.split() + ([unit.name] if unit is not None else [])
    if len(words) % 2:
        raise NotSupported(f"INTERVAL '{text}' is not a count and a unit per part")
    months, days, delta = 0, dt.timedelta(0), dt.timedelta(0)
    for count, word in zip(words[::2], words[1::2]):
        try:
            number = Decimal(count)
        except ArithmeticError:
            raise NotSupported(f"INTERVAL '{text}': {count} is not a number") from None
        word = word.lower().rstrip("s") if word.lower() != "s" else "second"
        if word in ("month", "mon", "year", "yr"):
            if number != int(number):
                raise NotSupported("INTERVAL takes whole months and years")
            months += int(number) * (12 if word in ("year", "yr") else 1)
        elif word in ("day", "week") and abs(number) <= 10**6:
            count_days = number * (7 if word == "week" else 1)
            days += dt.timedelta(days=int(count_days))  # toward zero, as PostgreSQL's
            delta += _DAY * float(count_days - int(count_days))
        elif word in _INTERVAL_UNITS and abs(number) <= 10**6:
            delta += _INTERVAL_UNITS[word] * float(number)
        else:
            raise NotSupported(f"INTERVAL '{text}': unit {word} is not one of "
                               "microseconds … weeks, months, years")
    return months, days, delta


_EPOCH_START = dt.datetime(1970, 1, 1)


def epoch_bin_term(whole: exp.Expression, moment: exp.Expression, width: int, scale: int,
                   table: Table, resolve, name: str,
                   within: Callable[[Column], tuple[dt.datetime, dt.datetime]]
                   ) -> GroupKey | None:
    """Grafana's ``$__timeGroup(col, 1h)`` of a column on another clock, ``floor(extract(
    epoch FROM m) / w) [* w]`` (``whole``) where m is a moment of the shapes above
    (``col AT TIME ZONE 'UTC'``, ``col::timestamptz``): PostgreSQL's epoch of a
    ``timestamptz`` is the moment's seconds since 1970-01-01 00:00 UTC, of a
    ``timestamp`` its wall clock's nominal ones, so the key changes where m's clock
    crosses a multiple of w seconds (or where a zone's offset changes): ranges of the
    column, as the buckets above, each labelled with its key (times ``scale``). None
    where m is the column's own clock everywhere in [first, last] (no shift: the plain
    column's bin, ``group_keys._epoch_bin``, which the backend computes itself)."""
    columns = {resolve(part) for part in moment.find_all(exp.Column)}
    if len(columns) != 1:
        raise NotSupported(f"GROUP BY {whole.sql(dialect='postgres')} must read one date or "
                           "timestamp column")
    column = table.columns[columns.pop()]
    if column.type not in ("date", "timestamp") or column.time_domain is None:
        return None  # group_keys._time_column says why
    first, last = within(column)
    compiler = _Compiler(column, first, last, reading_zone())
    inner = compiler.term(moment)
    if isinstance(inner, _Moment):
        if inner.kind not in ("ts", "tstz") or first > last:
            return None
        spans = list(inner.spans(first, last))
        if all(shift == dt.timedelta(0) for *_, shift in spans):
            return None
        step = dt.timedelta(seconds=width)

        def breaks(low: dt.datetime, high: dt.datetime) -> list[dt.datetime]:
            found: list[dt.datetime] = []
            for start, end, shift in inner.spans(low, high):
                found.append(start)
                k = (start + shift - _EPOCH_START) // step + 1
                while _EPOCH_START + k * step <= end + shift:
                    found.append(_EPOCH_START + k * step - shift)
                    k += 1
                    if len(found) > _MAX_BREAKS:
                        raise NotSupported(f"GROUP BY {width}-second bins would cut the time "
                                           f"range into more than {_MAX_BREAKS:,} ranges; use "
                                           "wider bins or a shorter time range")
            return found

        term = _Stepped("int", breaks,
                        lambda t: (inner.value(t) - _EPOCH_START) // step * scale)
    elif inner.kind in ("ts", "tstz", "date"):  # a bucket's start: its epoch's bin
        term = _Stepped("int", inner.breaks,
                        lambda t: _epoch(inner.value(t)) // width * scale)
    else:
        raise NotSupported(f"GROUP BY {whole.sql(dialect='postgres')}: extract(epoch FROM …) "
                           "takes a moment or a timestamp")
    starts, labels = _ranges(term, first, last) if first <= last else ([], [])
    shown = list(dict.fromkeys(labels))
    index = {label: i for i, label in enumerate(shown)}
    return GroupKey(name, RANGES, column.name, tuple(range(len(shown))), "int",
                    unit=canonical(whole, resolve), labels=tuple(shown),
                    bounds=tuple(starts), ranges=tuple(index[label] for label in labels))
