"""sqlglot's Spark dialect with exact percentiles, registered as ``sparkexact``.

sqlglot renders every percentile for Spark approximately: ``PERCENTILE_DISC(p) WITHIN
GROUP (ORDER BY x)`` and ``PERCENTILE_CONT`` become ``PERCENTILE_APPROX(x, p)`` (it runs,
silently approximate), and DuckDB's ``quantile_disc(x, p)`` becomes
``PERCENTILE_DISC(x, p)``, which Spark rejects. Spark SQL (3.4+) runs the standard
ordered-set form exactly, so this dialect keeps it: one ``PERCENTILE_DISC(p) WITHIN
GROUP (ORDER BY x)`` per fraction (an ARRAY of them for an array of fractions: Spark
takes one fraction per call), and refuses to render an approximate quantile at all.
It also keeps ``ARRAY_AGG(v ORDER BY v)`` ordered, which sqlglot renders as an
unordered ``COLLECT_LIST(v)``, writes numbers with a fraction as DOUBLE literals, and
sums BIGINTs as DECIMAL(38, 0).
"""

from __future__ import annotations

from typing import ClassVar

from sqlglot import exp, transforms
from sqlglot.dialects.spark import Spark
from sqlglot.errors import UnsupportedError
from sqlglot.generators.spark import SparkGenerator


def _within_group(self: SparkGenerator, expression: exp.WithinGroup) -> str:
    function, order = expression.this, expression.expression
    if isinstance(function, exp.PERCENTILES) and isinstance(function.this, exp.Array):
        each = [exp.WithinGroup(this=function.__class__(this=fraction.copy()),
                                expression=order.copy())
                for fraction in function.this.expressions]
        return self.sql(exp.Array(expressions=each))
    return self.withingroup_sql(expression)


def _ordered_set(self: SparkGenerator, expression: exp.Expression) -> str:
    """DuckDB's ``quantile_disc(x, p)`` (p possibly an array): the ordered-set form."""
    rewritten = transforms.add_within_group_for_percentiles(expression.copy())
    if isinstance(rewritten, exp.WithinGroup):
        return _within_group(self, rewritten)
    return self.function_fallback_sql(rewritten)


def _sorted_list(self: SparkGenerator, aggregate: exp.ArrayAgg,
                 where: exp.Expression | None = None) -> str:
    """``ARRAY_AGG(v ORDER BY v [DESC]) [FILTER (WHERE p)]``: Spark's COLLECT_LIST keeps
    no order (sqlglot drops the ORDER BY), so the list is sorted after:
    ``SORT_ARRAY(COLLECT_LIST(v) FILTER (WHERE p), ascending)`` (NaN sorts above every
    number, as in the ORDER BY)."""
    order = aggregate.this
    listed = exp.func("COLLECT_LIST", order.this if isinstance(order, exp.Order) else order)
    if where is not None:
        listed = exp.Filter(this=listed, expression=where)
    if not isinstance(order, exp.Order):
        return self.sql(listed)
    (key,) = order.expressions
    if key.this != order.this:
        raise UnsupportedError("ARRAY_AGG ordered by another expression")
    ascending = exp.false() if key.args.get("desc") else exp.true()
    return self.func("SORT_ARRAY", listed, ascending)


def _filter(self: SparkGenerator, expression: exp.Filter) -> str:
    if isinstance(expression.this, exp.ArrayAgg):
        return _sorted_list(self, expression.this, expression.expression)
    return self.filter_sql(expression)


def _bracket(self: SparkGenerator, expression: exp.Bracket) -> str:
    """DuckDB's 1-based inclusive slice ``a[i:j]`` (literal ends): ``SLICE(a, i, j-i+1)``."""
    (index,) = expression.expressions
    if isinstance(index, exp.Slice) and index.this.is_int and index.expression.is_int:
        start, end = int(index.this.name), int(index.expression.name)
        return self.func("SLICE", expression.this, exp.Literal.number(start),
                         exp.Literal.number(end - start + 1))
    return self.bracket_sql(expression)


def _array_agg(self: SparkGenerator, expression: exp.ArrayAgg) -> str:
    return _sorted_list(self, expression)


def _literal(self: SparkGenerator, expression: exp.Literal) -> str:
    """A number with a fraction or an exponent as a DOUBLE (``526.431D``): Spark reads
    ``526.431`` as a DECIMAL(6, 3), and Sail compares a double with it wrongly (checked:
    ``CAST(526431 AS DOUBLE) / 1000 <= 526.431`` is false there), where DuckDB and
    PostgreSQL compare the double with the double the literal names."""
    text = self.literal_sql(expression)
    if expression.is_number and not expression.is_int:
        return f"{text}D"
    return text


def _sum(self: SparkGenerator, expression: exp.Sum) -> str:
    """A sum of BIGINTs (``scope.exact_sum``'s integers) as a sum of DECIMAL(38, 0):
    Spark sums a BIGINT into a BIGINT, which wraps on Sail and fails under ANSI mode at
    a size of the data, where DuckDB (HUGEINT) and PostgreSQL (NUMERIC) widen."""
    value = expression.this
    if isinstance(value, exp.Cast) and value.to.this == exp.DataType.Type.BIGINT:
        widened = exp.cast(value.this.copy(), exp.DataType.build("DECIMAL(38, 0)"))
        return self.func("SUM", widened)
    return self.function_fallback_sql(expression)


def _refused(self: SparkGenerator, expression: exp.Expression) -> str:
    raise UnsupportedError("an approximate percentile must never be computed")


# The renderings that differ from sqlglot's Spark, by expression class.
_RENDERINGS = {
    exp.WithinGroup: _within_group,
    exp.PercentileDisc: _ordered_set,
    exp.PercentileCont: _ordered_set,
    exp.ArrayAgg: _array_agg,
    exp.Filter: _filter,
    exp.Bracket: _bracket,
    exp.Literal: _literal,
    exp.Sum: _sum,
    exp.ApproxQuantile: _refused,
}


class SparkExact(Spark):
    """Spark's generator with ``_RENDERINGS`` in its dispatch table. sqlglot's compiled
    build (sqlglotc, a dependency for its speed) refuses a Python subclass of its
    generator classes, so the table of each generator made is replaced instead: one
    table, made from the first generator's, shared by every later one."""

    _dispatch: ClassVar[dict | None] = None

    def generator(self, **opts) -> SparkGenerator:
        generator = super().generator(**opts)
        if SparkExact._dispatch is None:
            SparkExact._dispatch = {**generator._dispatch, **_RENDERINGS}
        generator._dispatch = SparkExact._dispatch
        return generator


DIALECT = "sparkexact"
