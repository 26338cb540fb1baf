"""sqlglot's Spark dialect with exact percentiles, registered as ``sparkexact``.

sqlglot renders every percentile for Spark approximately: ``PERCENTILE_DISC(p) WITHIN
GROUP (ORDER BY x)`` and ``PERCENTILE_CONT`` become ``PERCENTILE_APPROX(x, p)`` (it runs,
silently approximate), and DuckDB's ``quantile_disc(x, p)`` becomes
``PERCENTILE_DISC(x, p)``, which Spark rejects. Spark SQL (3.4+) runs the standard
ordered-set form exactly, so this dialect keeps it: one ``PERCENTILE_DISC(p) WITHIN
GROUP (ORDER BY x)`` per fraction (an ARRAY of them for an array of fractions: Spark
takes one fraction per call), and refuses to render an approximate quantile at all.
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


def _refused(self: SparkGenerator, expression: exp.Expression) -> str:
    raise UnsupportedError("an approximate percentile must never be computed")


class SparkExact(Spark):
    class Generator(SparkGenerator):
        TRANSFORMS: ClassVar[dict] = {
            **{key: value for key, value in SparkGenerator.TRANSFORMS.items()
               if key is not exp.WithinGroup},
            exp.WithinGroup: _within_group,
            exp.PercentileDisc: _ordered_set,
            exp.PercentileCont: _ordered_set,
            exp.ApproxQuantile: _refused,
        }


DIALECT = "sparkexact"
