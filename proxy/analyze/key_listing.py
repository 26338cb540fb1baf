"""The values a filter offers, from the rules: a statement that asks only for the
distinct values of columns with declared keys — Superset's native filters, Metabase's
field values, Grafana's variables, Power BI's slicers: ``SELECT DISTINCT department FROM
visits``, ``SELECT department FROM visits GROUP BY department ORDER BY 1`` — is answered
with the declared keys the WHERE admits (``key_restriction``, the text alone), read from
the rules, not the data: nothing is read, nothing spent, and the same on every
neighbouring data set. It differs from SQL where a key has no row in scope (it is listed)
and where rows hold a value outside the keys or NULL (it is not): the note says so.
Anything else (another kind of GROUP BY term, an aggregate, a join, an OFFSET) is left to
the analysis, which refuses it as before."""

from __future__ import annotations

import datetime as dt
import itertools

from sqlglot import exp

from proxy.analyze.aggregates import is_aggregate
from proxy.analyze.group_keys import default_name, group_terms, matching_group
from proxy.analyze.ordering import limit_of, order_by
from proxy.errors import Refused
from proxy.pgtypes import RULE_TYPES
from proxy.rules import Table
from proxy.vocabulary import COLUMN, PassthroughPlan

NOTE = ("the declared keys of {columns} in the rules, not read from the data: a key may "
        "have no row in scope, and values outside the keys (or NULL) are not listed; "
        "nothing spent")


def key_listing(select: exp.Select, table: Table, resolve, max_groups: int
                ) -> PassthroughPlan | None:
    """The plan that lists the keys ``select`` asks for (module doc), or None."""
    distinct = select.args.get("distinct")
    if select.args.get("joins") or select.args.get("offset") or select.args.get("having") \
            or (distinct is not None and distinct.args.get("on") is not None) \
            or any(is_aggregate(node) for node in select.walk()):
        return None
    items = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    grouped = select
    if select.args.get("group") is None:
        if distinct is None:
            return None
        grouped = select.copy()
        grouped.set("distinct", None)
        grouped = grouped.group_by(*(item.copy() for item in items), copy=False)
    try:
        terms = group_terms(grouped, table, resolve, max_groups)
        where = grouped.args.get("where")
        places = [matching_group(item, terms, table, resolve, where) for item in items]
    except Refused:
        return None
    if any(term.kind != COLUMN for term in terms) or None in places \
            or sorted(places) != list(range(len(terms))):
        return None
    names = [item.alias if isinstance(item, exp.Alias) else default_name(node)
             for item, node in zip(select.expressions, items)]
    try:
        order, limit = order_by(select, names), limit_of(select)
    except Refused:  # refused by the analysis, as before
        return None
    rows = list(itertools.product(*(terms[place].keys for place in places)))
    columns = [exp.to_identifier(name, quoted=True) for name in names]
    types = [RULE_TYPES[table.columns[terms[place].column].type] for place in places]
    if rows:
        source = exp.Values(expressions=[exp.Tuple(expressions=[_literal(key) for key in row])
                                         for row in rows],
                            alias=exp.TableAlias(this=exp.to_identifier("keys"),
                                                 columns=columns))
        query = exp.select(*(exp.alias_(exp.cast(exp.column(column.copy()), kind),
                                        column.copy()) for column, kind in zip(columns, types))
                           ).from_(source)
    else:  # the WHERE admits no key: no row, the columns typed as the keys are
        query = exp.select(*(exp.alias_(exp.cast(exp.Null(), kind), column.copy())
                             for column, kind in zip(columns, types))).where(exp.false())
    if order:
        query = query.order_by(*(exp.Ordered(this=exp.Literal.number(place + 1), desc=desc,
                                             nulls_first=first)
                                 for place, desc, first in order))
    if limit is not None:
        query = query.limit(limit)
    shown = ", ".join(terms[place].column for place in places)
    return PassthroughPlan(query, note=NOTE.format(columns=shown))


def _literal(key) -> exp.Expression:
    """A declared key as a constant of its type."""
    if isinstance(key, bool):
        return exp.Boolean(this=key)
    if isinstance(key, (int, float)):
        return exp.Literal.number(repr(key))
    if isinstance(key, dt.datetime):
        return exp.cast(exp.Literal.string(key.isoformat(" ")), exp.DataType.Type.TIMESTAMP)
    if isinstance(key, dt.date):
        return exp.cast(exp.Literal.string(key.isoformat()), exp.DataType.Type.DATE)
    return exp.Literal.string(str(key))
