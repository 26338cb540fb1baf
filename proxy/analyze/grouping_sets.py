"""GROUP BY GROUPING SETS, ROLLUP and CUBE (subtotals, pivot tables): one grouped query
per grouping set, each analysed, charged and released as the query written with that
set would be, their rows answered one after another (docs/clients.md).

In each set's query a grouping column outside the set is answered as NULL and
``GROUPING(a, b, …)`` as its bit mask (1 for each argument outside the set), as
PostgreSQL answers them; ORDER BY and LIMIT apply to all the rows together. Each set is
a release of its own: the statement costs the sum of its sets' costs (a ROLLUP of two
columns is three grouped queries).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from sqlglot import exp

from proxy.analyze.group_keys import default_name, never_true
from proxy.analyze.ordering import ordering_of
from proxy.errors import NotSupported
from proxy.vocabulary import CombinedPlan, GroupingSetsPlan, QueryPlan

MAX_SETS = 16  # a CUBE of four columns; each set is a release charged on its own


def grouping_sets_plan(select: exp.Select, analyze: Callable[[exp.Select], QueryPlan],
                       canonical: Callable[[exp.Expression], str]) -> GroupingSetsPlan | None:
    """The plan of a SELECT whose GROUP BY has GROUPING SETS, ROLLUP or CUBE (None for
    any other): each set's query analysed by ``analyze``."""
    group = select.args.get("group")
    elements = group.expressions if group is not None else []
    if not any(isinstance(e, (exp.GroupingSets, exp.Rollup, exp.Cube)) for e in elements):
        return None
    sets = [[]]
    for element in elements:
        sets = [head + tail for head in sets for tail in _sets_of(element, select)]
        if len(sets) > MAX_SETS:
            raise NotSupported(f"GROUP BY with more than {MAX_SETS} grouping sets (each is a "
                               "release charged on its own); ask for fewer subtotals")
    every = _unique([e for s in sets for e in s])
    order, limit = _order_and_limit(select)
    parts = []
    chosen_parts = [_part(select, _unique(chosen), every) for chosen in sets]
    # a set whose HAVING no row can meet (HAVING GROUPING(b) = 1 of a set grouped by b)
    # is not released: it would be charged for rows all filtered out
    kept = [part for part in chosen_parts if part.args.get("having") is None
            or not never_true(part.args["having"].this)] or chosen_parts[:1]
    for part in kept:
        plan = analyze(part)
        if isinstance(plan, CombinedPlan):  # aggregates of several scopes
            raise NotSupported("GROUPING SETS, ROLLUP and CUBE take aggregates of one scope; "
                               "ask COUNT(DISTINCT CASE WHEN … THEN unit END) in a query of "
                               "its own, or beside counts of the same condition")
        if not isinstance(plan, QueryPlan):  # a scalar subquery answered first
            raise NotSupported("GROUPING SETS, ROLLUP and CUBE are not supported beside a "
                               "scalar subquery over a protected table (a release of its "
                               "own, answered first); ask each grouping as a query of its own")
        parts.append((canonical(part), plan))
    return GroupingSetsPlan(tuple(parts), order, limit)


def _sets_of(element: exp.Expression, select: exp.Select) -> list[list[exp.Expression]]:
    """The grouping sets one GROUP BY element stands for, in PostgreSQL's order."""
    if isinstance(element, exp.Rollup):
        items = [_resolved(e, select) for e in element.expressions]
        return [items[:size] for size in range(len(items), -1, -1)]
    if isinstance(element, exp.Cube):
        items = [_resolved(e, select) for e in element.expressions]
        return [[item for bit, item in zip(mask, items) if bit]
                for mask in itertools.product((1, 0), repeat=len(items))]
    if isinstance(element, exp.GroupingSets):
        out = []
        for item in element.expressions:
            if isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                out.extend(_sets_of(item, select))
            elif isinstance(item, exp.Tuple):
                out.append([_resolved(e, select) for e in item.expressions])
            else:
                out.append([_resolved(item.unnest(), select)])
        return out
    return [[_resolved(element, select)]]


def _resolved(term: exp.Expression, select: exp.Select) -> exp.Expression:
    """A GROUP BY position (``ROLLUP(1, 2)``) or output alias as the select item's
    expression."""
    items = select.expressions
    if isinstance(term, exp.Literal) and term.is_int and 1 <= int(term.name) <= len(items):
        return items[int(term.name) - 1].unalias()
    if isinstance(term, exp.Column) and not term.table:
        for item in items:
            if isinstance(item, exp.Alias) and item.alias == term.name:
                return item.this
    return term


def _unique(terms: list[exp.Expression]) -> list[exp.Expression]:
    seen: dict[str, exp.Expression] = {}
    for term in terms:
        seen.setdefault(term.sql(), term)
    return list(seen.values())


def _part(select: exp.Select, chosen: list[exp.Expression],
          every: list[exp.Expression]) -> exp.Select:
    """The query of one grouping set: GROUP BY its terms; the other grouping columns
    answered as NULL, GROUPING(…) as its mask (in HAVING too: a filter of the set's own
    rows); no ORDER BY or LIMIT (they apply to all the sets' rows)."""
    inside = {term.sql() for term in chosen}
    outside = {term.sql() for term in every} - inside
    part = select.copy()
    for key in ("order", "limit", "offset"):
        part.set(key, None)
    def masked(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Grouping):
            return node
        mask = 0
        for argument in node.expressions:
            mask = mask * 2 + (_resolved(argument, select).sql() not in inside)
        return exp.Literal.number(mask)

    items = []
    for item in part.expressions:
        value = item.unalias()
        # PostgreSQL's name: an expression key outside the set (age / 30) is a NULL
        # named ?column? (it was a NULL without a name, which the parts of a MODE beside
        # it failed to read: AttributeError, XX000 before the debit)
        name = item.alias if isinstance(item, exp.Alias) else default_name(value)
        if value.sql() in outside:
            items.append(exp.alias_(exp.Null(), name, quoted=True))
            continue
        value = value.transform(masked)
        items.append(exp.alias_(value, name, quoted=True) if isinstance(item, exp.Alias)
                     or isinstance(value, exp.Literal) else value)
    part.set("expressions", items)
    if part.args.get("having") is not None:  # HAVING GROUPING(…) = 0: the set's own mask
        part.set("having", part.args["having"].transform(masked))
    part.set("group", exp.Group(expressions=[term.copy() for term in chosen]) if chosen
             else None)
    return part


def _order_and_limit(select: exp.Select
                     ) -> tuple[tuple[tuple[int, bool, bool], ...], int | None]:
    """ORDER BY as (output position, descending, NULLs first), and LIMIT: over all the sets'
    rows, so only output columns (by position, name or the same expression) may order."""
    items = select.expressions
    names = [item.alias_or_name for item in items]
    order = []
    for ordered in (select.args.get("order").expressions if select.args.get("order") else []):
        term = ordered.this
        if isinstance(term, exp.Literal) and term.is_int and 1 <= int(term.name) <= len(items):
            position = int(term.name) - 1
        elif isinstance(term, exp.Column) and not term.table and term.name in names:
            position = names.index(term.name)
        elif term.sql() in [item.unalias().sql() for item in items]:
            position = [item.unalias().sql() for item in items].index(term.sql())
        else:
            raise NotSupported("with GROUPING SETS, ROLLUP or CUBE, ORDER BY output columns "
                               "(by position or name)")
        order.append(ordering_of(position, ordered))
    if select.args.get("offset") is not None:
        raise NotSupported("OFFSET is not supported; ask for the rows you need with WHERE")
    limit = select.args.get("limit")
    if limit is None:
        return tuple(order), None
    value = limit.expression
    if not (isinstance(value, exp.Literal) and value.is_int):
        raise NotSupported("LIMIT takes a whole number here")
    return tuple(order), int(value.name)
