"""How a value reaches every statistic: numeric columns normalised (NaN, ±inf, the
declared range) and constants rendered, shared by the scope of a query, its group
terms and the release."""

from __future__ import annotations

from decimal import Decimal

from sqlglot import exp

from proxy.statistics import value_range

DOUBLE = exp.DataType.build("double")


def clamped_to_domain(value: exp.Expression, lower: float | None = None,
               upper: float | None = None) -> exp.Expression:
    """A numeric column as every statistic sees it (``proxy.statistics.normalise``, SPEC
    §5.3), as a DOUBLE: NaN → NULL (not counted, no rank); above the range (+inf
    included) → its upper end, below (−inf included) → its lower end; the range is the
    declared [lower, upper], ±MAGNITUDE_CAP where a side is undeclared. So no statistic,
    sensitivity or answer can be NaN or infinite, and no value can overflow a sum.

    Both engines sort NaN above every number (``NaN > x`` holds, ``NaN = NaN`` too), so
    the in-range test comes first and NaN is told from +inf only among the values above
    the range, by its text ('NaN' in PostgreSQL, 'nan' in DuckDB): no dialect-specific
    function, and no cast of an out-of-range value (a PostgreSQL NUMERIC beyond 1e308
    would overflow a DOUBLE). The comparisons are in the column's own type (the bounds
    are plain numeric literals); NULL meets no branch and stays NULL. For an integer
    column the NaN test is never true and the clamp rarely applies: harmless."""
    low, high = value_range(lower, upper)
    is_nan = exp.EQ(this=exp.Upper(this=exp.cast(value.copy(), "text", copy=False)),
                    expression=exp.Literal.string("NAN"))
    above = exp.and_(exp.GT(this=_operand(value), expression=literal(high)),
                     exp.Not(this=is_nan), copy=False)
    return case_of((exp.Between(this=value.copy(), low=literal(low), high=literal(high)),
                    _double(value.copy())),
                   (above, _double(literal(high))),
                   (exp.LT(this=_operand(value), expression=literal(low)), _double(literal(low))))


def case_of(*branches: tuple[exp.Expression, exp.Expression],
            default: exp.Expression | None = None) -> exp.Case:
    """CASE WHEN … THEN … of fresh parts, built in place: sqlglot's ``Case().when()``
    copies the whole CASE and its parts at each step, which for the normalising CASE of
    every needed column was a sizeable share of an answer's time."""
    return exp.Case(ifs=[exp.If(this=test, true=then) for test, then in branches],
                    default=default)


def _operand(value: exp.Expression) -> exp.Expression:
    """A copy of ``value`` to compare, parenthesised when it is itself an operation."""
    return exp.paren(value.copy(), copy=False) if isinstance(value, exp.Binary) else value.copy()


def _double(value: exp.Expression) -> exp.Cast:
    return exp.cast(value, DOUBLE.copy(), copy=False)


def literal(value) -> exp.Expression:
    """A constant (from the rules or the backend, never an analyst's text) as SQL."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, float):
        return exp.Literal.number(repr(value))
    if isinstance(value, (int, Decimal)):
        return exp.Literal.number(str(value))
    return exp.Literal.string(str(value))
