"""The GROUP BY bucket of one raw value, in Python: the reference for the brute-force
tests of binned and time-bucketed groups, checked against the backend's SQL of the same
term on both engines (tests/analyze/test_sql_shapes.py).

Numbers are normalised first (``proxy.statistics.normalise``: NaN and NULL belong to no
group, ±inf and values beyond the declared domain are clamped to it); dates and
timestamps are clamped to the declared [first, last] (``datetime.min``/``max`` stand for
PostgreSQL's ∓infinity)."""

from __future__ import annotations

import datetime as dt
import math

from proxy.analyze.group_keys import epoch_seconds, truncate
from proxy.rules import Column
from proxy.statistics import clamp_to_domain
from proxy.vocabulary import (
    COLUMN,
    EPOCH_BIN,
    FLOOR_BIN,
    TIME_PART,
    TIME_TRUNC,
    TRUNC_BIN,
    WIDTH_BUCKET,
    GroupKey,
)


def bucket_of(term: GroupKey, column: Column, value):
    """The key of the group a row with this raw value belongs to; None: no group."""
    if value is None:
        return None
    if term.kind == COLUMN:
        return value if value in term.keys else None
    if term.kind in (TIME_TRUNC, TIME_PART, EPOCH_BIN):
        moment = value if isinstance(value, dt.datetime) else dt.datetime(
            value.year, value.month, value.day)
        first, last = column.time_domain
        moment = min(max(moment, first), last)
        if term.kind == EPOCH_BIN:  # whole seconds, then whole bins: exact integers
            width, scale = (int(n) for n in term.numbers)
            return epoch_seconds(moment) // width * scale
        if term.kind == TIME_TRUNC:
            return truncate(moment, term.unit)
        scale, offset = term.numbers or (1, 0)  # a·extract + b
        return _part(moment, term.unit) * scale + offset
    v = clamp_to_domain(value, column.lower, column.upper)
    if v is None:
        return None
    if term.kind == WIDTH_BUCKET:
        low, high, count = term.numbers
        if v < low:
            return 0
        if v >= high:
            return int(count) + 1
        return min(math.floor((v - low) * int(count) / (high - low)) + 1, int(count))
    width, scale = (int(n) for n in term.numbers)
    quotient = v / float(width)
    assert term.kind in (FLOOR_BIN, TRUNC_BIN)
    index = math.floor(quotient) if term.kind == FLOOR_BIN or quotient >= 0 else \
        -math.floor(-quotient)
    return index * scale


def _part(moment: dt.datetime, field: str) -> int:
    return {"year": moment.year, "quarter": (moment.month - 1) // 3 + 1,
            "month": moment.month, "week": moment.isocalendar()[1], "day": moment.day,
            "dow": moment.isoweekday() % 7, "isodow": moment.isoweekday(),
            "doy": moment.timetuple().tm_yday, "hour": moment.hour,
            "minute": moment.minute}[field]
