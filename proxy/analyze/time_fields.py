"""Fields extracted from a date or timestamp column, ``EXTRACT(field FROM col)`` or
``date_part('field', col)``, read as values (issue 33, items 1 to 3): compared with
whole numbers in a condition (WHERE, a CASE condition of a GROUP BY term or of an
aggregate's argument, FILTER), and as a number inside an aggregate's argument
(``AVG(EXTRACT(HOUR FROM visited_at))``).

Like the ``extract`` GROUP BY term (``proxy.analyze.group_keys``), the backend extracts
the field of the moment clamped to the column's declared domain (``proxy.guards.time_field``):
a moment outside the domain, ±infinity included, counts as the domain's nearer end,
NULL stays NULL. So for every row the value is a whole number of the field's range
over the domain (``field_range``: hour 0..23, dow 0..6, isodow 1..7, month 1..12, the
domain's years for year, ...), or NULL, on every engine: PostgreSQL's extract of
'infinity', NULL for some fields and ±Infinity for others, and DuckDB's, NULL, never
reach it. That range is public (the rules alone), so an aggregate of the field has a
declared-like domain (docs/privacy.md, "Aggregates over expressions").
"""

from __future__ import annotations

from sqlglot import exp

from proxy.analyze.time_keys import field_values, part_field
from proxy.errors import NotSupported
from proxy.guards import time_field
from proxy.rules import Column, Table

FORM = "EXTRACT(dow FROM visited_at) IN (0, 6)"
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In,
                exp.Is)


def extracted_column(node: exp.Extract, table: Table, resolve, place: str
                     ) -> tuple[str, Column]:
    """(the field, the column) of ``EXTRACT(field FROM col)``: one of the fields an
    extract GROUP BY term takes (``time_keys.PART_CYCLES``) of a date or timestamp
    column with a declared domain; refused (one line) otherwise."""
    field = part_field(node.this)
    moment = node.expression.unnest()
    declared = table.columns.get(resolve(moment)) if isinstance(moment, exp.Column) else None
    if declared is None or declared.type not in ("date", "timestamp"):
        raise NotSupported(f"EXTRACT in {place} takes a plain date or timestamp column of "
                           f"the table: {FORM}")
    if declared.time_domain is None:
        raise NotSupported(f"EXTRACT({field} FROM {declared.name}) in {place} needs a "
                           f"declared domain [first, last] of {declared.name} in the rules "
                           "(what a moment outside it counts as); ask the data owner")
    return field, declared


def field_range(field: str, column: Column) -> tuple[int, int]:
    """The least and greatest value of the field over the column's declared domain
    (every value the backend can give, ``guards.time_field``): text and rules only."""
    values = field_values(field, *column.time_domain)
    return values[0], values[-1]


def check_compared(node: exp.Extract, table: Table, resolve, place: str) -> None:
    """An extract in a condition: an operand of a comparison, BETWEEN, IN or IS NULL
    whose other operands are numbers (whole numbers are what it takes; a fraction is
    rounded as for an int column, ``predicate._whole_numbers``) or NULL."""
    extracted_column(node, table, resolve, place)
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    others = [] if not isinstance(parent, _COMPARISONS) else [
        operand.unnest() for key in ("this", "expression", "low", "high", "expressions")
        for operand in (parent.args.get(key) if key == "expressions"
                        else [parent.args.get(key)]) or []
        if operand is not None and operand.unnest() is not node]
    if not isinstance(parent, _COMPARISONS) or parent.args.get("query") or not all(
            _number(other) or isinstance(other, exp.Null) for other in others):
        raise NotSupported(f"EXTRACT in {place} is compared with numbers: {FORM}, "
                           "EXTRACT(hour FROM visited_at) BETWEEN 9 AND 17")


def _number(node: exp.Expression) -> bool:
    inner = node.this.unnest() if isinstance(node, exp.Neg) else node
    return isinstance(inner, exp.Literal) and not inner.is_string


def unbracketed(condition: exp.Expression) -> exp.Expression:
    """``condition`` with the brackets around each EXTRACT taken off (``(EXTRACT(dow
    FROM t)) = 0``, as tools bracket operands), so the comparisons read it directly."""
    for node in list(condition.find_all(exp.Extract)):
        top = node
        while isinstance(top.parent, exp.Paren):
            top = top.parent
        if top is not node:
            if top is condition:
                return node
            top.replace(node)
    return condition


def computed_fields(condition: exp.Expression, table: Table) -> exp.Expression:
    """A checked condition with each EXTRACT of a column (resolved) written as the
    backend computes it: the field of the clamped moment (``guards.time_field``)."""
    for node in list(condition.find_all(exp.Extract)):
        column = table.columns[node.expression.name]
        node.replace(time_field(exp.column(column.name, quoted=True), part_field(node.this),
                                column.time_domain, column.type == "date"))
    return condition


def field_sql(field: str, column: Column) -> exp.Expression:
    """The field of the clamped moment as a DOUBLE, what an aggregate's arithmetic
    reads (``proxy.analyze.expressions``)."""
    return exp.cast(time_field(exp.column(column.name, quoted=True), field,
                               column.time_domain, column.type == "date"),
                    exp.DataType.build("double"))

