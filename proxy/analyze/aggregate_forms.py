"""PostgreSQL's aggregate forms that are other aggregates in disguise, written before
analysis as the aggregates the analysis knows and post-processing of them: several
percentiles at once (``percentile_cont(ARRAY[…])``, an array of percentiles) and the
regression aggregates other than REGR_SLOPE, REGR_INTERCEPT and REGR_R2 (counts, means
and moments). Each aggregate so written is released and charged as if written alone; what
combines them runs on the released values (``proxy.postprocess``)."""

from __future__ import annotations

from sqlglot import exp

from proxy.analyze.predicate import DECIMAL_TEXT
from proxy.errors import NotSupported

# fractions in one array at most: each is an aggregate of its own (charged, drawn, in the
# outer query's select item), and 5,000 held a worker's analysis for minutes
MAX_FRACTIONS = 100
# the meta key of an aggregate call a rewrite made (a regression's parts here, a MODE's
# COUNT(*) in proxy.analyze.scoped_parts): (the analyst's call, the value it aggregates)
# as written, for refusals to name instead of the rewrite (``written``)
WRITTEN = "written"
_REGRESSIONS = (exp.RegrCount, exp.RegrAvgx, exp.RegrAvgy, exp.RegrSxx, exp.RegrSyy,
                exp.RegrSxy)


def regressions_as_moments(tree: exp.Expression) -> None:
    """PostgreSQL's other regression aggregates of (y, x), over the rows where both are
    non-null, as the aggregates the analysis knows and post-processing of them:
    REGR_COUNT a COUNT of x where y is non-null, REGR_AVGX/AVGY an AVG so narrowed,
    REGR_SXX/SYY/SXY a VAR_POP or COVAR_POP times that count (each aggregate charged as
    if written; a FILTER kept on each). REGR_R2 is a paired kind of its own
    (proxy.privacy.correlation): as CORR², PostgreSQL's NULL and 1 where x or y has no
    spread were lost."""
    for node in list(tree.find_all(*_REGRESSIONS)):
        y, x = node.this, node.expression
        if x is None or isinstance(y, exp.Distinct):
            raise NotSupported(f"{node.key.upper()} takes two columns: {node.key.upper()}(y, x)")
        whole = node.parent if isinstance(node.parent, exp.Filter) else node
        if isinstance(whole.parent, exp.Window):
            continue  # a window function over rows: refused as any other, as written
        call_text = node.sql(dialect="postgres")

        def kept(call: exp.Expression, value: exp.Expression | None = None) -> exp.Expression:
            call.meta[WRITTEN] = (call_text, (value or x).sql(dialect="postgres"))
            return exp.Filter(this=call, expression=whole.expression.copy()) \
                if whole is not node else call

        def both(value: exp.Expression, other: exp.Expression) -> exp.Expression:
            return exp.Case(ifs=[exp.If(this=exp.Not(this=exp.Is(this=other.copy(),
                                                                  expression=exp.null())),
                                        true=value.copy())])

        count = kept(exp.Count(this=both(x, y)))
        if isinstance(node, exp.RegrCount):
            formed = count
        elif isinstance(node, exp.RegrSxy):
            formed = exp.Mul(this=kept(exp.CovarPop(this=y.copy(), expression=x.copy())),
                             expression=count)
        else:
            value, other = (x, y) if isinstance(node, (exp.RegrAvgx, exp.RegrSxx)) else (y, x)
            mean = isinstance(node, (exp.RegrAvgx, exp.RegrAvgy))
            formed = kept((exp.Avg if mean else exp.VariancePop)(this=both(value, other)), value)
            if not mean:
                formed = exp.Mul(this=formed, expression=count)
        if not isinstance(node, exp.RegrCount):  # double precision, as PostgreSQL's
            formed = exp.cast(exp.Paren(this=formed), exp.DataType.Type.DOUBLE)
        if whole.arg_key == "expressions" and isinstance(whole.parent, exp.Select):
            formed = exp.alias_(formed, node.sql_name().lower(), quoted=True)  # PostgreSQL's
        whole.replace(formed)


def written(node: exp.Expression) -> str:
    """An aggregate call as the analyst wrote it: the regression a rewrite made it from
    (``REGR_AVGX(income, age)``, not ``AVG(CASE WHEN … END)``), else its own SQL."""
    return node.meta[WRITTEN][0] if WRITTEN in node.meta else node.sql(dialect="postgres")


def percentiles_of_an_array(tree: exp.Expression) -> None:
    """``percentile_cont(ARRAY[0.25, 0.5, 0.75]) WITHIN GROUP (ORDER BY x)`` (PostgreSQL's
    several percentiles at once, an array of them) is the array of the percentiles,
    each the aggregate the analysis knows (its FILTER kept on each): the aggregates are
    released, the array post-processing of them."""
    for within in list(tree.find_all(exp.WithinGroup)):
        function = within.this
        if not isinstance(function, (exp.PercentileCont, exp.PercentileDisc)):
            continue
        fractions = _fractions(function.this)
        if fractions is None:
            continue
        if not fractions or len(fractions) > MAX_FRACTIONS:
            raise NotSupported(f"a percentile of an array takes 1 to {MAX_FRACTIONS} "
                               "fractions, e.g. percentile_cont(ARRAY[0.25, 0.5]) WITHIN "
                               "GROUP (ORDER BY col)")
        whole = within.parent if isinstance(within.parent, exp.Filter) else within
        if isinstance(whole.parent, exp.Window):
            continue  # refused as every percentile OVER (…)
        each = []
        for fraction in fractions:
            one = whole.copy()
            percentile = one.find(type(function))
            percentile.set("this", fraction.copy())
            each.append(one)
        array = exp.Array(expressions=each)
        if whole.parent is not None and whole.arg_key == "expressions" and isinstance(
                whole.parent, exp.Select):  # a select item: named as PostgreSQL names it
            array = exp.alias_(array, "percentile_cont" if isinstance(
                function, exp.PercentileCont) else "percentile_disc", quoted=True)
        whole.replace(array)



def _fractions(argument: exp.Expression) -> list[exp.Expression] | None:
    """The elements of a percentile's array argument — ``ARRAY[0.25, 0.5]``, cast or not,
    or the literal ``'{0.25,0.5}'::float8[]``, cast again or not (psycopg's list is bound
    as a ``numeric[]``, which ``%s::float8[]`` casts) — as expressions; None for one
    fraction."""
    cast = False
    while isinstance(argument, exp.Cast) and argument.to.is_type(exp.DataType.Type.ARRAY):
        argument, cast = argument.this, True
    if cast and isinstance(argument, exp.Literal) and argument.is_string:
        text = argument.name.strip()
        if not (text.startswith("{") and text.endswith("}")):
            raise NotSupported("an array of fractions is written '{0.25,0.5}' or "
                               "ARRAY[0.25, 0.5]")
        parts = [part.strip() for part in text[1:-1].split(",")] if text[1:-1].strip() \
            else []
        if not all(DECIMAL_TEXT.fullmatch(part) or part.upper() == "NULL" for part in parts):
            raise NotSupported("an array of fractions is written '{0.25,0.5}' or "
                               "ARRAY[0.25, 0.5]")
        return [exp.null() if part.upper() == "NULL" else exp.Literal.number(part)
                for part in parts]
    return list(argument.expressions) if isinstance(argument, exp.Array) else None
