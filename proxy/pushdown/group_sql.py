"""A GROUP BY term (proxy.analyze.group_keys) as backend SQL: the key of each row, and
which rows belong to some group.

A bucket is computed from the value as every statistic sees it: numbers normalised
(``clamped_to_domain``: NaN as NULL, clamped to the declared domain), dates and timestamps
clamped to the declared [first, last]. So a row outside the domain lands in the first or
last bucket, and every key the backend returns is one of the public keys. Keys come back
as the same Python values on both engines (timestamps cast to TIMESTAMP, numbers to
BIGINT), so they match the keys listed from the rules.
"""

from __future__ import annotations

import datetime as dt
import math

from sqlglot import exp

from proxy.guards import clamped_moment, snap, time_field
from proxy.pushdown.values import case_of, clamped_to_domain, literal
from proxy.rules import Table
from proxy.vocabulary import (
    CASE,
    COLUMN,
    EPOCH_BIN,
    FLOOR_BIN,
    PUBLIC,
    RANGES,
    SELECTED,
    TIME_PART,
    TIME_TRUNC,
    TRUNC_BIN,
    WIDTH_BUCKET,
    GroupKey,
)

TIMESTAMP = exp.DataType.build("timestamp")
BIGINT = exp.DataType.build("bigint")
DOUBLE = exp.DataType.build("double")


def group_value(term: GroupKey, table: Table) -> exp.Expression:
    """The term's key of one row (NULL: the row belongs to no group)."""
    if term.kind == PUBLIC and term.default is not None:  # COALESCE(r.name, 'unknown')
        return exp.func("COALESCE", exp.column(term.column, quoted=True), literal(term.default))
    if term.kind in (COLUMN, PUBLIC, SELECTED):
        return exp.column(term.column, quoted=True)
    if term.kind == CASE:
        return case_of(*((condition.copy(), literal(key)) for condition, key in term.branches),
                       default=None if term.default is None else literal(term.default))
    column = table.columns[term.column]
    if term.kind == RANGES:  # NaN is in no range, as in no group
        raw = exp.column(term.column, quoted=True)
        missing = clamped_to_domain(raw, column.lower, column.upper) if column.numeric \
            else raw
        return ranged(raw, term.bounds, term.ranges, missing)
    if term.kind == TIME_PART:  # the field of the clamped moment, a·v + b [% m]
        part = time_field(exp.column(term.column, quoted=True), term.unit, column.time_domain,
                          column.type == "date", term.shifts)
        if not term.numbers:
            return part
        scale, offset = term.numbers[:2]  # a, b and every key within ±2^31
        affine = exp.Add(this=exp.Mul(this=part, expression=literal(scale)),
                         expression=literal(offset))
        if len(term.numbers) == 2:
            return affine
        # m > 0: the remainder of a whole number, the dividend's sign on every engine
        return exp.Mod(this=exp.paren(affine, copy=False), expression=literal(term.numbers[2]))
    if term.kind == TIME_TRUNC:
        moment = clamped_moment(exp.column(term.column, quoted=True), column.time_domain,
                                column.type == "date")
        if term.by is not None:  # + n × c seconds, n clamped to its domain (within a century)
            scale = table.columns[term.by]
            count = exp.cast(clamped_to_domain(exp.column(term.by, quoted=True), scale.lower,
                                               scale.upper), BIGINT)
            step = exp.Interval(this=exp.Literal.string(str(int(term.numbers[0]))),
                                unit=exp.var("SECOND"))
            moment = exp.Add(this=moment, expression=exp.Mul(this=count, expression=step))
        return exp.cast(exp.TimestampTrunc(this=moment, unit=exp.var(term.unit.upper())),
                        TIMESTAMP)
    if term.kind == EPOCH_BIN:
        return _epoch_bin(term, column)
    # divided below: snapped (proxy.guards.snap: 0 or at least ~4e-152 in magnitude, the
    # value written once) so no quotient underflows (PostgreSQL raises on that)
    value = snap(clamped_to_domain(exp.column(term.column, quoted=True), column.lower,
                            column.upper))
    if term.kind == WIDTH_BUCKET:
        low, high, count = term.numbers
        offset = snap(exp.paren(exp.Sub(this=value.copy(), expression=literal(low))))
        span = exp.Div(this=exp.Mul(this=offset, expression=literal(int(count))),
                       expression=literal(high - low))
        inside = exp.func("least", exp.Add(this=exp.cast(exp.Floor(this=span), BIGINT),
                                           expression=literal(1)), literal(int(count)))
        return exp.cast(exp.Case().when(value.copy().is_(exp.null()), exp.null())
                        .when(value.copy() < literal(low), literal(0))
                        .when(value.copy() >= literal(high), literal(int(count) + 1))
                        .else_(inside), BIGINT)
    width, scale = (int(number) for number in term.numbers[:2])
    quotient = exp.Div(this=value, expression=literal(float(width)))
    if term.kind == FLOOR_BIN:
        index = exp.Floor(this=quotient)
    else:  # TRUNC_BIN: integer division rounds toward zero
        index = exp.Case().when(quotient.copy() < literal(0),
                                exp.Neg(this=exp.Floor(this=exp.Neg(this=quotient.copy())))
                                ).else_(exp.Floor(this=quotient.copy()))
    assert term.kind in (FLOOR_BIN, TRUNC_BIN), term.kind
    key = exp.cast(index, BIGINT)
    key = key if scale == 1 else exp.Mul(this=key, expression=literal(scale))
    if len(term.numbers) == 2:
        return key
    # LEAST/GREATEST with whole constants (group_keys._capped_bin): the key clamped, a
    # NULL value's key the one PostgreSQL's LEAST/GREATEST give when they skip the NULL
    low, high, null = term.numbers[2:]
    capped = key.copy()
    if low > -math.inf:
        capped = exp.func("GREATEST", capped, literal(int(low)))
    if high < math.inf:
        capped = exp.func("LEAST", capped, literal(int(high)))
    return case_of((key.is_(exp.null()), literal(int(null))), default=capped)


def ranged(value: exp.Expression, bounds: tuple, ranges: tuple[int, ...],
           missing: exp.Expression) -> exp.Expression:
    """The index of the label of the range the value lies in (range i from
    ``bounds[i]`` to the next bound; the first and the last reach beyond the domain, as
    a value clamped into it would): a binary search by comparisons, log2(ranges) per
    row, that no value can make fail; a row whose ``missing`` is NULL (NULL, and NaN once
    normalised) in none."""
    if not bounds:
        return exp.null()

    def search(low: int, high: int) -> exp.Expression:
        if high - low == 1:
            return literal(ranges[low])
        middle = (low + high) // 2
        return case_of((exp.LT(this=value.copy(), expression=_bound(bounds[middle])),
                        search(low, middle)), default=search(middle, high))

    return case_of((missing.copy().is_(exp.null()), exp.null()),
                   default=search(0, len(bounds)))


def _bound(bound) -> exp.Expression:
    if isinstance(bound, dt.datetime):
        return exp.cast(exp.Literal.string(bound.isoformat(" ")), TIMESTAMP)
    return literal(bound)


def _epoch_bin(term: GroupKey, column) -> exp.Expression:
    """The bin of the clamped moment's epoch: whole seconds first (exact on both
    engines: PostgreSQL's epoch is numeric, DuckDB's a double whose error is far below a
    microsecond), then ``floor(seconds / w)``, exact in DOUBLE for |seconds| < 2^53."""
    width, scale = (int(number) for number in term.numbers)
    moment = clamped_moment(exp.column(term.column, quoted=True), column.time_domain,
                            column.type == "date")
    seconds = exp.cast(exp.Floor(this=exp.Extract(this=exp.var("EPOCH"), expression=moment)),
                       DOUBLE)
    key = exp.cast(exp.Floor(this=exp.Div(this=seconds, expression=literal(float(width)))),
                   BIGINT)
    return key if scale == 1 else exp.Mul(this=key, expression=literal(scale))


def group_filter(term: GroupKey, table: Table) -> exp.Expression:
    """Rows that belong to some group of this term: a declared key, or any key a bucket
    can take (they are all listed, as is every value of a public table's column); of a
    column keyed by a partition selection, a released key (none: no row)."""
    if term.kind in (COLUMN, SELECTED):
        if not term.keys:
            return exp.false()
        return exp.column(term.column, quoted=True).isin(*[literal(v) for v in term.keys])
    return group_value(term, table).is_(exp.null()).not_()
