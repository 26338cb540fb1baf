"""Checks on the WHERE clause: only per-record conditions on declared columns.

A predicate that looks at one record at a time keeps every sensitivity of SPEC §5.2
valid (a modified record may enter or leave the scope, nothing more). Functions,
subqueries and anything else that could look across records are refused.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.errors import NotSupported, UnknownFunction
from proxy.rules import Table

_ALLOWED = (
    exp.And, exp.Or, exp.Not, exp.Paren,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.Between, exp.In, exp.Is,
    exp.Literal, exp.Boolean, exp.Null, exp.Neg, exp.Tuple,
)


def check_predicate(where: exp.Expression, table: Table, resolve_column) -> exp.Expression:
    """Validate the WHERE condition and return it with columns unqualified."""
    condition = where.copy()
    for node in list(condition.walk()):
        if isinstance(node, exp.Column):
            name = resolve_column(node)
            node.replace(exp.column(name, quoted=True))
        elif isinstance(node, (exp.Identifier, exp.Star)):
            continue
        elif isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            raise NotSupported("subqueries in WHERE are not supported; "
                               "use comparisons, BETWEEN, IN (...), IS NULL, AND/OR/NOT")
        elif isinstance(node, exp.Func) and not isinstance(node, _ALLOWED):
            raise UnknownFunction(
                f"function {node.sql(dialect='postgres').split('(')[0]} is not allowed in WHERE; "
                "use comparisons, BETWEEN, IN (...), IS NULL, AND/OR/NOT on columns"
            )
        elif not isinstance(node, _ALLOWED):
            raise NotSupported(
                f"{node.key.upper()} is not allowed in WHERE; "
                "use comparisons, BETWEEN, IN (...), IS NULL, AND/OR/NOT on columns"
            )
    _refuse_string_to_number(condition, table)
    return condition


def _refuse_string_to_number(condition: exp.Expression, table: Table) -> None:
    """Mixing types would make the backend raise a data-independent but confusing error."""
    for node in condition.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE):
        column, other = node.this, node.expression
        if not isinstance(column, exp.Column):
            column, other = other, column
        if isinstance(column, exp.Column) and isinstance(other, exp.Literal):
            declared = table.columns[column.name]
            if declared.numeric and other.is_string:
                raise NotSupported(
                    f"column {column.name} is numeric; compare it with a number, not a string"
                )
