"""Recognise the supported aggregates of SPEC §3.2 in a SELECT item."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from fractions import Fraction

from sqlglot import exp

from proxy.errors import NotSupported
from proxy.vocabulary import (
    AVG,
    CORR,
    COUNT,
    COVAR_POP,
    COVAR_SAMP,
    DISTINCT,
    MAX,
    MIN,
    PERCENTILE,
    REGR_INTERCEPT,
    REGR_R2,
    REGR_SLOPE,
    STDDEV_POP,
    STDDEV_SAMP,
    SUM,
    UNITS,
    VAR_POP,
    VAR_SAMP,
    Aggregate,
)

SUPPORTED = ("COUNT(*), COUNT(col), COUNT(DISTINCT col), MEDIAN(col), PERCENTILE_DISC(p) WITHIN "
             "GROUP (ORDER BY col), PERCENTILE_CONT(p) ..., QUANTILE_DISC(col, p), MAX, MIN, SUM, "
             "AVG, STDDEV, VARIANCE (_SAMP, _POP), CORR(y, x), COVAR_POP, COVAR_SAMP, "
             "REGR_SLOPE and the other REGR_*, MODE() WITHIN GROUP (ORDER BY col)")
# the most common value: a part of its own, a private arg-max (proxy.analyze.scoped_parts)
MODE_FORM = ("MODE() WITHIN GROUP (ORDER BY col), col a column with keys the rules declare, "
             "as a select item, HAVING or ORDER BY term of a query over tables")
_SIMPLE = {exp.Max: MAX, exp.Min: MIN, exp.Sum: SUM, exp.Avg: AVG,
           exp.Stddev: STDDEV_SAMP, exp.StddevSamp: STDDEV_SAMP, exp.StddevPop: STDDEV_POP,
           exp.Variance: VAR_SAMP, exp.VariancePop: VAR_POP}
# of two columns, y then x (proxy.privacy.correlation)
PAIRED = {exp.Corr: CORR, exp.CovarPop: COVAR_POP, exp.CovarSamp: COVAR_SAMP,
          exp.RegrSlope: REGR_SLOPE, exp.RegrIntercept: REGR_INTERCEPT, exp.RegrR2: REGR_R2}
# the column name PostgreSQL gives each (STDDEV is STDDEV_SAMP, VARIANCE is VAR_SAMP)
_LABELS = {exp.Stddev: "stddev", exp.Variance: "variance"}


def is_aggregate(node: exp.Expression) -> bool:
    return isinstance(node, exp.AggFunc) or (
        isinstance(node, exp.Anonymous) and node.name.lower() in ("quantile_disc", "quantile")
    ) or isinstance(node, exp.WithinGroup)


def recognise(node: exp.Expression, resolve_column, units=(lambda column: False, ())
               ) -> Aggregate:
    """Turn one aggregate call into an Aggregate; refuse anything else. ``units``: which
    column holds the privacy unit, and their names (``analyze.unit_test``), the ones
    COUNT(DISTINCT ...) takes."""
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star):
            return Aggregate(COUNT, None, "count")
        if isinstance(arg, exp.Distinct):
            if _distinct_unit(arg, *units):
                return Aggregate(UNITS, None, "count")
            return Aggregate(DISTINCT, _column(arg.expressions[0], resolve_column,
                                               "COUNT(DISTINCT …)"), "count")
        return Aggregate(COUNT, _column(arg, resolve_column, "COUNT"), "count")
    if isinstance(node, exp.Median):
        return Aggregate(PERCENTILE, _column(node.this, resolve_column, "MEDIAN"), "median",
                         Fraction(1, 2))
    if isinstance(node, exp.WithinGroup):
        inner, order = node.this, node.expression
        if isinstance(inner, exp.Mode):  # else a part of its own (scoped_parts)
            raise NotSupported(f"MODE() WITHIN GROUP is answered as {MODE_FORM}")
        if not isinstance(inner, (exp.PercentileDisc, exp.PercentileCont)):
            raise NotSupported(f"{inner.sql()} WITHIN GROUP is not supported; supported: {SUPPORTED}")
        ordered = order.expressions if isinstance(order, exp.Order) else []
        if len(ordered) != 1 or ordered[0].args.get("desc"):
            raise NotSupported("use WITHIN GROUP (ORDER BY col) with one ascending column")
        name = "percentile_cont" if isinstance(inner, exp.PercentileCont) else "percentile_disc"
        return Aggregate(PERCENTILE, _column(ordered[0].this, resolve_column, name), name,
                         _fraction(inner.this), isinstance(inner, exp.PercentileCont))
    if isinstance(node, exp.PercentileDisc) and node.expression is not None:
        return Aggregate(PERCENTILE, _column(node.this, resolve_column, "QUANTILE_DISC"),
                         "quantile_disc", _fraction(node.expression))
    if isinstance(node, exp.Anonymous) and node.name.lower() in ("quantile_disc", "quantile"):
        if len(node.expressions) != 2:
            raise NotSupported("QUANTILE_DISC takes a column and a fraction: QUANTILE_DISC(col, 0.5)")
        column, p = node.expressions
        return Aggregate(PERCENTILE, _column(column, resolve_column, "QUANTILE_DISC"),
                         "quantile_disc", _fraction(p))
    if type(node) in PAIRED:
        kind = PAIRED[type(node)]
        if isinstance(node.this, exp.Distinct) or node.expression is None:
            raise NotSupported(f"{kind.upper()} takes two columns: {kind.upper()}(y, x)")
        return Aggregate(kind, _column(node.this, resolve_column, kind.upper()), kind.value,
                         other=_column(node.expression, resolve_column, kind.upper()))
    for kind_type, kind in _SIMPLE.items():
        if type(node) is kind_type:
            if isinstance(node.this, exp.Distinct):
                raise NotSupported(f"{kind.upper()}(DISTINCT ...) is not supported")
            return Aggregate(kind, _column(node.this, resolve_column, kind.upper()),
                             _LABELS.get(kind_type, kind))
    raise NotSupported(
        f"aggregate {node.sql(dialect='postgres')} is not supported; supported: {SUPPORTED}"
    )


def nested() -> NotSupported:
    return NotSupported("an aggregate inside an aggregate is not supported; aggregate "
                        "columns or expressions of columns")


def narrowed_units(select: exp.Select, is_unit, units) -> exp.Expression | None:
    """Tableau's ``COUNTD(IF c THEN [unit] END)``: ``COUNT(DISTINCT CASE WHEN c THEN unit
    [ELSE NULL] END)``, or ``COUNT(DISTINCT unit) FILTER (WHERE c)``, counts the units
    with a row in scope where c holds: COUNT(DISTINCT unit) over the scope narrowed by c;
    likewise the distinct values of another column (``COUNTD(IF c THEN [Department]
    END)``), COUNT(DISTINCT col) over that scope. Where every aggregate of ``select`` is
    such a count of one c, each becomes COUNT(DISTINCT unit or col) (in place) and c is
    returned, for the caller to narrow the scope with after the group keys were taken
    from the WHERE as written (a group where no row meets c is kept, near 0 as SQL's 0).
    Several conditions, or other aggregates beside, would each need a scope of their
    own (``scoped_parts`` splits them first): refused. None when there is none."""
    found, others = [], []
    for node in list(select.find_all(exp.Filter, exp.AggFunc)):
        if isinstance(node, exp.AggFunc) and isinstance(node.parent, exp.Filter):
            continue
        narrowed = narrowing(node, is_unit)
        (found if narrowed else others).append((node, narrowed))
    if not found:
        return None
    if any(condition.find(exp.AggFunc) for _, (_, condition) in found):
        raise nested()
    conditions = {condition.sql(dialect="postgres") for _, (_, condition) in found}
    if others or len(conditions) > 1:
        counted = found[0][1][0].sql(dialect="postgres")
        raise NotSupported(f"COUNT(DISTINCT CASE WHEN … THEN {counted} END) is answered "
                           "beside counts of the same condition only (its condition narrows "
                           "the whole query's scope); ask it in a query of its own, or "
                           f"COUNT(DISTINCT {counted}) … WHERE the condition")
    for node, (counted, _) in found:
        node.replace(exp.Count(this=exp.Distinct(expressions=[counted.copy()])))
    return found[0][1][1].copy()


def narrowing(node: exp.Expression, is_unit
               ) -> tuple[exp.Column, exp.Expression] | None:
    """(counted column, condition) of a count of distinct values narrowed by a condition,
    else None. The branches of a CASE are one column, or each a privacy unit (``is_unit``:
    in a joined row every table's unit column holds the same unit)."""
    count = node.this if isinstance(node, exp.Filter) else node
    if not isinstance(count, exp.Count) or not isinstance(count.this, exp.Distinct) \
            or len(count.this.expressions) != 1:
        return None
    value = count.this.expressions[0]
    value = value.unnest() if isinstance(value, exp.Paren) else value
    if isinstance(node, exp.Filter):
        where = node.expression
        return ((value, where.this) if isinstance(value, exp.Column)
                and isinstance(where, exp.Where) else None)
    if not isinstance(value, exp.Case) or value.this is not None:
        return None
    ifs = value.args.get("ifs") or []
    default = value.args.get("default")
    thens = [branch.args.get("true") for branch in ifs]
    if not ifs or (default is not None and not isinstance(default, exp.Null)) or not all(
            isinstance(then, exp.Column) for then in thens) or not (
            len({then.sql(dialect="postgres") for then in thens}) == 1
            or all(is_unit(then) for then in thens)):
        return None
    # CASE WHEN a THEN u WHEN b THEN u END is u exactly where a OR b is true
    return thens[0], exp.or_(*(branch.this.copy() for branch in ifs))


def _distinct_unit(distinct: exp.Distinct, is_unit, units) -> bool:
    """Whether ``COUNT(DISTINCT …)`` counts privacy units (True) or the distinct values of
    one other column (False: ``DISTINCT``, calibrated as a COUNT's rows: a changed row
    removes at most one value and adds at most one, docs/privacy.md §3.7); several
    columns, and a CASE whose branches are the unit but not only, are refused."""
    values = distinct.expressions
    if len(values) == 1 and isinstance(values[0], (exp.Column, exp.Cast)) and units \
            and is_unit(values[0]):
        return True
    if len(values) == 1 and isinstance(values[0], exp.Case) and any(
            isinstance(branch.args.get("true"), exp.Column) and is_unit(branch.args["true"])
            for branch in values[0].args.get("ifs") or []):
        raise NotSupported(f"COUNT(DISTINCT {values[0].sql(dialect='postgres')}) is not "
                           "supported: a CASE counts privacy units where each branch is the "
                           f"unit and there is no ELSE but NULL; write COUNT(DISTINCT CASE "
                           f"WHEN condition THEN {units[0]} END)")
    shown = ", ".join(v.sql(dialect="postgres") for v in values)
    if len(values) != 1:
        raise NotSupported(f"COUNT(DISTINCT {shown}) is not supported: count the distinct "
                           "values of one column, COUNT(DISTINCT col)")
    if isinstance(values[0], exp.Cast) and isinstance(values[0].this, exp.Column) \
            and units and is_unit(values[0].this):  # a cast that could merge units or fail
        raise NotSupported(f"COUNT(DISTINCT {shown}) is not supported: only COUNT(DISTINCT "
                           f"{' or '.join(units)}) (how many privacy units) is")
    return False


def _column(arg: exp.Expression, resolve_column, function: str) -> str:
    if not isinstance(arg, exp.Column):
        raise NotSupported(
            f"{function} takes a plain column; expressions inside aggregates are not supported"
        )
    return resolve_column(arg)


# p's decimal places at most: the backends compute ranks as ⌈p·n⌉ in 64-bit integers
# (pushdown.grouped.rank_sql), p's numerator times n, exact below n = 9·10¹² rows; more
# places would overflow (an error, or on Sail a wrapped rank) at a size of the data
FRACTION_PLACES = 6


def _fraction(arg: exp.Expression | None) -> Fraction:
    """The percentile p, exactly as typed (0 ≤ p ≤ 1, at most FRACTION_PLACES decimal
    places), so ranks are computed in integers."""
    if isinstance(arg, exp.Literal) and not arg.is_string:
        try:
            value = Decimal(arg.name)
        except InvalidOperation:
            value = None
        if (value is not None and value.is_finite() and 0 <= value <= 1
                and value.normalize().as_tuple().exponent >= -FRACTION_PLACES):
            return Fraction(value)
        if value is not None and value.is_finite() and not 0 <= value <= 1:
            raise NotSupported(f"percentile value {arg.name} is not between 0 and 1",
                               "22003")  # PostgreSQL's error for it
    if isinstance(arg, exp.Neg) and isinstance(arg.this, exp.Literal) \
            and not arg.this.is_string:
        raise NotSupported(f"percentile value -{arg.this.name} is not between 0 and 1",
                           "22003")
    raise NotSupported("the percentile must be a number between 0 and 1 with at most "
                       f"{FRACTION_PLACES} decimal places, e.g. 0.5")
