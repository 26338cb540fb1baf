"""GROUP BY bins of a number as BI tools write them (issue 33 item 1), keyed by ranges
of the column as the time buckets of ``proxy.analyze.time_keys`` are:

- Metabase's binning ``((floor((x - o) / w)) * w) + o`` (o and w constants, w > 0):
  bins of width w from o, every bin from the one of L to the one of U;
- ``x % w`` and ``mod(x, w)`` of an int column (w a whole constant, not 0): the
  remainder as PostgreSQL computes it (the sign of x), one range per value of the
  declared domain (at most ``time_keys.MAX_RANGES`` of them).

The keys follow from the declared domain and the query's constants only; the backend
compares the column with the ranges' starts (``proxy.pushdown.group_sql.ranged``), so no
division runs on a row's value. A value beyond the domain lands in the first or last
range, as a clamped value would; NULL and NaN in none.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from proxy.analyze.time_keys import MAX_RANGES
from proxy.errors import NotSupported
from proxy.rules import Column, Table
from proxy.statistics import MAGNITUDE_CAP
from proxy.vocabulary import RANGES, GroupKey


def number_term(node: exp.Expression, table: Table, resolve, name: str) -> GroupKey | None:
    """The term's ranges and labels, or None when ``node`` is neither shape."""
    node = _bare(node)
    if isinstance(node, exp.Mod):
        return _remainder(node, table, resolve, name)
    return _offset_bins(node, table, resolve, name)


def _bare(node: exp.Expression | None) -> exp.Expression | None:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _constant(node: exp.Expression | None) -> Decimal | None:
    node = _bare(node)
    negative = isinstance(node, exp.Neg)
    node = _bare(node.this) if negative else node
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = Decimal(node.name)
        except InvalidOperation:
            return None
        if value.is_finite() and abs(value) <= MAGNITUDE_CAP:
            return -value if negative else value
    return None


def numeric_column(node: exp.Expression, table: Table, resolve, what: str) -> Column:
    """The plain numeric column with a declared domain that a bin term reads."""
    if not isinstance(node, exp.Column):
        raise NotSupported(f"{what} bins a plain numeric column")
    column = table.columns[resolve(node)]
    if not column.numeric:
        raise NotSupported(f"{what} needs an int or float column; {column.name} is "
                           f"{column.type}")
    if column.lower is None or column.upper is None:
        raise NotSupported(f"{what} on {column.name} needs a declared domain [L, U] in the "
                           "rules (the public list of bins); ask the data owner")
    return column


def _offset_bins(node: exp.Expression, table: Table, resolve, name: str) -> GroupKey | None:
    """``floor((x - o) / w) * w + o``."""
    if not isinstance(node, exp.Add):
        return None
    scaled, offset = _bare(node.this), _constant(node.expression)
    if not isinstance(scaled, exp.Mul) or offset is None:
        return None
    floor, width = _bare(scaled.this), _constant(scaled.expression)
    if not isinstance(floor, exp.Floor) or width is None:
        return None
    division = _bare(floor.this)
    if not isinstance(division, exp.Div) or _constant(division.expression) != width:
        return None
    shifted = _bare(division.this)
    if not isinstance(shifted, exp.Sub) or _constant(shifted.expression) != offset:
        return None
    if width <= 0:
        raise NotSupported("a bin width must be positive")
    what = f"floor(({_bare(shifted.this).sql(dialect='postgres')} - {offset}) / {width})"
    column = numeric_column(_bare(shifted.this), table, resolve, what)
    if column.type == "int" and all(_whole_literal(part) for part in (
            shifted.expression, division.expression, scaled.expression, node.expression)):
        # integers throughout: PostgreSQL divides them rounding toward zero
        low, high = math.ceil(column.lower), math.floor(column.upper)
        if high - low + 1 > MAX_RANGES:
            raise NotSupported(f"GROUP BY {what} over a domain of {high - low + 1:,} "
                               f"values (more than {MAX_RANGES:,}); write the constants "
                               "as decimals (10.0) to bin by floor")
        return _per_value(node, resolve, name, column, low, high, lambda v: int(
            math.copysign(abs(v - int(offset)) // int(width), v - int(offset))) * int(width)
            + int(offset))
    first = math.floor((Decimal(repr(float(column.lower))) - offset) / width)
    last = math.floor((Decimal(repr(float(column.upper))) - offset) / width)
    if last - first + 1 > MAX_RANGES:
        raise NotSupported(f"GROUP BY {what} would answer {last - first + 1:,} bins, more than "
                           f"{MAX_RANGES:,}; use wider bins")
    starts = [offset + k * width for k in range(first, last + 1)]
    labels = tuple(float(start) for start in starts)
    bounds = (float(column.lower),) + tuple(float(start) for start in starts[1:])
    return GroupKey(name, RANGES, column.name, tuple(range(len(labels))), "float",
                    unit=_text(node, resolve), labels=labels, bounds=bounds,
                    ranges=tuple(range(len(labels))))


def _whole_literal(node: exp.Expression | None) -> bool:
    node = _bare(node)
    node = _bare(node.this) if isinstance(node, exp.Neg) else node
    return isinstance(node, exp.Literal) and node.name.isdigit()


def _per_value(node: exp.Expression, resolve, name: str, column: Column, low: int,
               high: int, key) -> GroupKey:
    """One range per whole value of [low, high] (merged where the key repeats), the
    key of each computed as PostgreSQL computes it on that value."""
    keys = [key(v) for v in range(low, high + 1)]
    labels = tuple(sorted(set(keys)))
    index = {label: i for i, label in enumerate(labels)}
    bounds: list[float] = []
    ranges: list[int] = []
    for value, label in zip(range(low, high + 1), keys):
        if ranges and ranges[-1] == index[label]:
            continue
        bounds.append(float(value) - (0.5 if bounds else 0.0))  # an int's range: ±0.5
        ranges.append(index[label])
    return GroupKey(name, RANGES, column.name, tuple(range(len(labels))), "int",
                    unit=_text(node, resolve), labels=labels, bounds=tuple(bounds),
                    ranges=tuple(ranges))


def _remainder(node: exp.Mod, table: Table, resolve, name: str) -> GroupKey:
    """``x % w``: one range per whole value of the domain, labelled with its remainder
    (PostgreSQL's: the sign of x)."""
    divisor = _constant(node.expression)
    what = f"{_bare(node.this).sql(dialect='postgres')} % {node.expression.sql(dialect='postgres')}"
    if divisor is None or divisor != int(divisor) or divisor == 0:
        raise NotSupported(f"GROUP BY {what}: the divisor must be a whole constant other "
                           "than 0")
    column = numeric_column(_bare(node.this), table, resolve, what)
    if column.type != "int":
        raise NotSupported(f"GROUP BY {what}: % takes an int column ({column.name} is "
                           f"{column.type}); bin it with floor({column.name} / w) * w")
    low, high = math.ceil(column.lower), math.floor(column.upper)
    if high - low + 1 > MAX_RANGES:
        raise NotSupported(f"GROUP BY {what} over a domain of {high - low + 1:,} values (more "
                           f"than {MAX_RANGES:,}); narrow the column's domain or use bins")
    divisor = abs(int(divisor))
    return _per_value(node, resolve, name, column, low, high,
                      lambda v: int(math.copysign(abs(v) % divisor, v)) if v else 0)


def _text(node: exp.Expression, resolve) -> str:
    copy = node.copy()
    for column in list(copy.find_all(exp.Column)):
        column.replace(exp.column(resolve(column)))
    return copy.sql(dialect="postgres")
