"""Scalar subqueries over protected tables as releases of their own (issue 34, TPC-H Q22).

"Who has more than the average balance"::

    SELECT COUNT(*) FROM customer
    WHERE c_acctbal > (SELECT AVG(c_acctbal) FROM customer WHERE c_acctbal > 0)

The subquery is an aggregate of other people's rows: it is answered first, as if sent
alone (charged, with its noise), and its released value then stands in the statement as
a constant, which is answered in turn (charged). The second release is chosen after the
first (adaptive composition): the two together cost the sum of their losses, which the
ledger records (one row each). What is answered: a subquery with one output and no
GROUP BY, over tables of its own (not correlated with the outer query: a column
qualified by an outer table is refused as before), of a numeric value, as an operand of
a comparison (=, <>, <, <=, >, >=) or a BETWEEN bound in the WHERE. Anything else keeps
the refusal of ``semi_joins.refuse_subqueries``.

Before anything is charged the statement is analysed with each subquery's place held
by 0: a comparison with a number analyses alike whatever the number (the released
value is a finite double), so the statement answered with the value is refused for no
reason that 0 did not show.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from proxy.errors import ProxyError, QueryCanceled
from proxy.rules import Rules
from proxy.vocabulary import QueryPlan, StagedPlan

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def staged_plan(select: exp.Select, rules: Rules, analyse: Callable[[exp.Expression], object],
                canonical: Callable[[exp.Expression], str]) -> StagedPlan | None:
    """The staged plan of ``select`` when its WHERE compares with scalar subqueries over
    protected tables that can be answered first; None otherwise (the caller refuses
    them as before). ``analyse`` analyses a statement."""
    where = select.args.get("where")
    if where is None:
        return None
    found = [node for node in where.find_all(exp.Subquery) if _protected(node, rules)]
    if not found or not all(_answerable_place(node) and _uncorrelated(node) for node in found):
        return None
    stages = []
    for node in found:
        try:
            plan = analyse(node.this.copy())
        except QueryCanceled:
            raise  # a cancel during the analysis stops it (57014), whatever it analysed
        except ProxyError:
            return None  # refused as a subquery of the statement, as before
        if not _one_number(plan):
            return None
        stages.append((canonical(node.this), plan))
    held = _with_values(select, [0] * len(found), rules)
    outer = analyse(held)  # refused here, before any debit, for what 0 shows
    if not isinstance(outer, QueryPlan):
        return None
    return StagedPlan(tuple(stages), select.copy(), outer)


def with_values(staged: StagedPlan, values: list[float | int | None], rules: Rules
                ) -> exp.Select:
    """The statement with each subquery replaced by its released value, in order."""
    return _with_values(staged.statement, values, rules)


def _with_values(select: exp.Select, values: list[float | int | None], rules: Rules
                 ) -> exp.Select:
    """A copy of ``select`` with its WHERE's subqueries over protected tables replaced
    by ``values``, in order."""
    statement = select.copy()
    found = [node for node in statement.args["where"].find_all(exp.Subquery)
             if _protected(node, rules)]
    for node, value in zip(found, values):
        node.replace(exp.Null() if value is None else _number(value))
    return statement


def _number(value: float | int) -> exp.Expression:
    """A released number as the parser writes one (a negative as a minus sign before it)."""
    literal = exp.Literal.number(repr(abs(value)))
    return exp.Neg(this=literal) if value < 0 else literal


def _protected(node: exp.Subquery, rules: Rules) -> bool:
    """Whether the subquery reads a protected table (outside FROM and EXISTS)."""
    if isinstance(node.parent, (exp.From, exp.Join)) or not isinstance(node.this, exp.Select):
        return False
    return any((declared := rules.table(table.name)) is not None and not declared.public
               for table in node.this.find_all(exp.Table))


def _answerable_place(node: exp.Subquery) -> bool:
    """An operand of a comparison or a BETWEEN bound, nothing else (a divisor or an IN
    list would analyse differently for some values)."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return isinstance(parent, _COMPARISONS)


def _one_number(plan: object) -> bool:
    """One numeric aggregate, no GROUP BY, nothing computed after the release."""
    if not isinstance(plan, QueryPlan) or plan.group_by or plan.post is not None \
            or len(plan.outputs) != 1 or plan.outputs[0].aggregate is None:
        return False
    aggregate = plan.aggregates[plan.outputs[0].aggregate]
    kind = aggregate.kind.row.output
    if kind == "column":
        kind = plan.table.columns[aggregate.column].type
    return kind in ("int", "float")


def _uncorrelated(node: exp.Subquery) -> bool:
    """No column of the subquery names a table it does not read itself."""
    query = node.this
    own = {table.alias_or_name.lower() for table in query.find_all(exp.Table)}
    return all(not column.table or column.table.lower() in own
               for column in query.find_all(exp.Column))
