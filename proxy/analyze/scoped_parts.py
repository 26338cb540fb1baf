"""Aggregates of different scopes in one query: a release per scope, joined on the keys.

Tableau writes a sheet's measures into one query, ``COUNTD(IF cost > 1000 THEN
[Person Id] END)`` beside ``SUM(cost)``::

    SELECT department, COUNT(DISTINCT CASE WHEN cost > 1000 THEN person_id END) AS n,
           SUM(cost) AS total
    FROM visits GROUP BY 1

A count of units narrowed by a condition is COUNT(DISTINCT unit) over the scope
narrowed by it (``aggregates.narrowed_units``), so the two aggregates read different
scopes. The query is answered as the join of one aggregate query per scope, as dbt
MetricFlow writes several metrics (``proxy.analyze.outer``: each part a release of its
own, charged as if sent alone, the join and everything above it post-processing)::

    SELECT COALESCE(_idp_s0._idp_k0, _idp_s1._idp_k0) AS department,
           _idp_s1._idp_a0 AS n, _idp_s0._idp_a0 AS total
    FROM (SELECT department AS _idp_k0, SUM(cost) AS _idp_a0 FROM visits
          GROUP BY department) AS _idp_s0
    FULL OUTER JOIN (SELECT department AS _idp_k0, COUNT(DISTINCT CASE … END) AS _idp_a0
          FROM visits GROUP BY department) AS _idp_s1
      ON _idp_s0._idp_k0 IS NOT DISTINCT FROM _idp_s1._idp_k0

Each part keeps the query's FROM, joins and WHERE, so its keys are the query's: the
declared keys the WHERE admits, the same in every part; a NULL key joins its
counterpart (IS NOT DISTINCT FROM), so the join has one row per group. HAVING is then
a WHERE over those rows; select items, windows over the groups, ORDER BY and LIMIT
apply to them as they would to the query's groups. Where keys come from the data (a
partition selection), each part selects its own, and a key one part did not keep shows
NULL for that part's aggregates. Only a plain query over tables is split; a query over steps
leaves each step to be analysed alone.
"""

from __future__ import annotations

from types import SimpleNamespace

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from proxy.analyze.aggregates import narrowing
from proxy.analyze.group_keys import default_name, dereferenced
from proxy.analyze.merge_steps import steps
from proxy.analyze.ordering import folded_name
from proxy.errors import NotSupported
from proxy.rules import Rules

MAX_PARTS = 8  # scopes one query may read: each a release and a scan


def scoped_parts(select: exp.Select, rules: Rules) -> exp.Select | None:
    """The join of one aggregate query per scope that ``select`` is the same as, when
    its aggregates read more than one scope; None when they read one."""
    if steps(select) or select.args.get("from_") is None:
        return None  # a query over steps: each step is analysed alone
    scopes: dict[str, list[exp.Expression]] = {}
    for node in _aggregates(select):
        narrowed = narrowing(node, lambda column: True)
        scopes.setdefault("" if narrowed is None else narrowed[1].sql(dialect="postgres"),
                          []).append(node)
    if len(scopes) < 2:
        return None
    where = select.args.get("where")
    if where is not None and any(_scalar(query) for query in where.find_all(exp.Select)):
        raise NotSupported("aggregates of several scopes (COUNT(DISTINCT CASE WHEN … THEN "
                           "unit END) beside others) are answered as one query per scope, "
                           "which a WHERE with a scalar subquery is not; ask them in separate "
                           "queries")
    if len(scopes) > MAX_PARTS:
        raise NotSupported(f"aggregates of {len(scopes)} different scopes in one query are "
                           f"more than {MAX_PARTS}; ask them in several queries")
    group = select.args.get("group")
    tables = SimpleNamespace(columns={
        name.lower() for table in select.find_all(exp.Table) if table.name in rules.tables
        for name in rules.tables[table.name].columns})
    keys = [dereferenced(node, select, tables) for node in (group.expressions if group else [])]
    parts, replaced = [], {}
    for index, nodes in enumerate(scopes.values()):
        alias = f"_idp_s{index}"
        items = [exp.alias_(key.copy(), f"_idp_k{i}") for i, key in enumerate(keys)]
        written: dict[str, str] = {}
        for node in nodes:
            text = node.sql(dialect="postgres")
            if text not in written:
                written[text] = f"_idp_a{len(written)}"
                items.append(exp.alias_(node.copy(), written[text]))
            replaced[id(node)] = exp.column(written[text], table=alias)
        part = select.copy()
        for clause in ("having", "order", "limit", "offset", "distinct"):
            part.set(clause, None)
        part.set("expressions", items)
        if keys:
            part.set("group", exp.Group(expressions=[key.copy() for key in keys]))
        parts.append(exp.Subquery(this=part, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    outer = select.copy()
    originals = {id(copied): original for copied, original in zip(outer.walk(), select.walk())}
    coalesced = [exp.Coalesce(this=exp.column(f"_idp_k{i}", table="_idp_s0"),
                              expressions=[exp.column(f"_idp_k{i}", table=f"_idp_s{s}")
                                           for s in range(1, len(parts))])
                 for i in range(len(keys))]
    for node in list(outer.walk()):
        column = replaced.get(id(originals.get(id(node))))
        if column is not None:
            node.replace(column.copy())
    joined = bool(select.args.get("joins"))  # then a table's name tells columns apart
    key_texts = [_text(key, joined) for key in keys]
    named = {folded_name(item.args["alias"]) for item in select.expressions
             if isinstance(item, exp.Alias)}
    for clause in ("expressions", "having", "order"):
        for node in list(_clause_nodes(outer, clause)):
            if isinstance(node, (exp.Identifier, exp.Order, exp.Ordered)) \
                    or _ordinal(node, clause) or (
                    clause == "order" and isinstance(node, exp.Column) and not node.table
                    and folded_name(node.this) in named):
                continue  # a name, a position, an output column ORDER BY names first
            text = _text(node, joined)
            if text in key_texts:
                node.replace(coalesced[key_texts.index(text)].copy())
    outer.set("expressions", [_named(item, original) for item, original
                              in zip(outer.expressions, select.expressions)])
    having = outer.args.get("having")  # one joined row per key: the groups' filter
    outer.set("where", exp.Where(this=having.this) if having is not None else None)
    outer.set("having", None)
    outer.set("group", None)
    outer.set("from_", exp.From(this=parts[0]))
    outer.set("joins", [
        exp.Join(this=part, side="FULL", kind="OUTER", on=exp.and_(*[
            exp.NullSafeEQ(this=exp.column(f"_idp_k{i}", table="_idp_s0"),
                           expression=exp.column(f"_idp_k{i}", table=part.alias))
            for i in range(len(keys))])) if keys else exp.Join(this=part, kind="CROSS")
        for part in parts[1:]])
    return outer


def _scalar(query: exp.Select) -> bool:
    """A scalar subquery (staged: a release answered first), not EXISTS's or IN's
    (semi-joins, which each part keeps as written)."""
    holder = query.parent
    return not (isinstance(holder, exp.Exists) or (
        isinstance(holder, exp.Subquery) and isinstance(holder.parent, exp.In)))


def _aggregates(select: exp.Select) -> list[exp.Expression]:
    """The aggregates ``select`` computes (a FILTER with its aggregate), in its select
    list, HAVING and ORDER BY, outermost only: one inside another, or in a WHERE or a
    subquery, is refused where the query is analysed, not split into a part of its own
    (a part holding it would again read two scopes)."""
    found = []
    for clause in ("expressions", "having", "order"):
        for node in _clause_nodes(select, clause):
            if isinstance(node, exp.Select) and node is not select:
                return []  # a subquery: the statement is not one aggregate query
            if not isinstance(node, (exp.Filter, exp.AggFunc, exp.WithinGroup)) or (
                    isinstance(node.parent, (exp.Filter, exp.Window, exp.WithinGroup))
                    and node.arg_key == "this"):
                continue  # a FILTER's, OVER's or WITHIN GROUP's function: with it
            outer = node.parent
            while outer is not None and outer is not select and not (
                    isinstance(outer, (exp.Filter, exp.AggFunc, exp.WithinGroup)) and not (
                        isinstance(outer.parent, exp.Window) and outer.arg_key == "this")):
                outer = outer.parent
            if outer is select or outer is None:
                found.append(node)
    return found


def _text(node: exp.Expression, joined: bool) -> str:
    """A term's SQL, its names as PostgreSQL folds them (``DEPT``, ``"dept"`` and
    ``dept`` are one column); over one table without its columns' table names:
    ``v.dept`` in GROUP BY is the ``dept`` of the select list."""
    bare = normalize_identifiers(node.copy(), dialect="postgres")  # DEPT is "dept"
    for name in bare.find_all(exp.Identifier):
        name.set("quoted", False)
    if not joined:
        for column in bare.find_all(exp.Column):
            column.set("table", None)
    return bare.sql(dialect="postgres")


def _clause_nodes(select: exp.Select, clause: str):
    """The nodes of one clause, outermost first."""
    value = select.args.get(clause)
    for root in (value if isinstance(value, list) else [value] if value is not None else []):
        yield from root.walk(bfs=True)


def _ordinal(node: exp.Expression, clause: str) -> bool:
    """``ORDER BY 1``: a position of the result, not the number 1."""
    return clause == "order" and isinstance(node, exp.Literal) and isinstance(
        node.parent, exp.Ordered)


def _named(item: exp.Expression, original: exp.Expression) -> exp.Expression:
    """The outer item under the name PostgreSQL gives the item as written."""
    if isinstance(item, exp.Alias):
        return item
    return exp.alias_(item, default_name(original), quoted=True)
