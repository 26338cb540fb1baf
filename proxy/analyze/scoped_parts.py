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

``MODE() WITHIN GROUP (ORDER BY c)``, the most common value of c, is a part of its own
(each MODE one, even alone in the query), answered as a private arg-max: the part counts
the rows of each declared key of c (and of the query's keys) and keeps, per group of the
query, the key whose released count is largest (ties: the first key in the MODE's order,
as PostgreSQL's mode picks), post-processing of the grouped COUNT (docs/privacy.md
§3.20)::

    SELECT _idp_k0, _idp_v AS _idp_a0
    FROM (SELECT sex AS _idp_k0, region AS _idp_v, ROW_NUMBER() OVER (PARTITION BY sex
                 ORDER BY COUNT(*) DESC, region) AS _idp_r
          FROM people GROUP BY sex, region) AS _idp_m
    WHERE _idp_r = 1

c must be a column with keys the rules declare: its candidates are public (NULL, as a
value of no declared key, is no candidate: PostgreSQL's mode ignores NULL too).
"""

from __future__ import annotations

from types import SimpleNamespace

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from proxy.analyze.aggregate_forms import WRITTEN
from proxy.analyze.aggregates import MODE_FORM, narrowing
from proxy.analyze.group_keys import default_name, dereferenced
from proxy.analyze.merge_steps import steps
from proxy.analyze.ordering import folded_name
from proxy.errors import AmbiguousColumn, NotSupported, UnknownColumn
from proxy.rules import Rules

MAX_PARTS = 8  # scopes one query may read: each a release and a scan


def scoped_parts(select: exp.Select, rules: Rules) -> exp.Select | None:
    """The join of one aggregate query per scope that ``select`` is the same as, when
    its aggregates read more than one scope or it holds a MODE (a part of its own); None
    when they read one."""
    if steps(select) or select.args.get("from_") is None:
        return None  # a query over steps: each step is analysed alone
    scopes: dict[str, list[exp.Expression]] = {}
    modes: dict[str, tuple[exp.Column, bool]] = {}  # a MODE's scope: its column, DESC
    if any(isinstance(node.this, exp.Mode) and isinstance(node.parent, exp.Window)
           for node in select.find_all(exp.WithinGroup)):
        raise NotSupported(f"MODE() WITHIN GROUP … OVER (…) is not supported (nor in "
                           f"PostgreSQL): {MODE_FORM}")
    for node in _aggregates(select):
        if _is_mode(node):
            scope = "\0" + node.sql(dialect="postgres")  # no condition's text
            modes[scope] = _mode_column(node, select, rules)
            scopes.setdefault(scope, []).append(node)
            continue
        narrowed = narrowing(node, lambda column: True)
        scopes.setdefault("" if narrowed is None else narrowed[1].sql(dialect="postgres"),
                          []).append(node)
    if len(scopes) < 2 and not modes:
        return None
    where = select.args.get("where")
    if where is not None and any(_scalar(query) for query in where.find_all(exp.Select)):
        if modes:
            raise NotSupported("MODE() WITHIN GROUP is answered through a grouped COUNT of "
                               "its own, which a WHERE with a scalar subquery is not; ask the "
                               "subquery first and compare with its value")
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
    parts, replaced, arg_maxes = [], {}, set()
    # a MODE's part last: without GROUP BY, LEFT JOINed ON TRUE to the others' one row,
    # which it keeps where the WHERE admits none of its column's keys (no row, no mode)
    for index, (scope, nodes) in enumerate(sorted(scopes.items(), key=lambda s: s[0] in modes)):
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
        if scope in modes:
            part = _mode_part(part, keys, *modes[scope], scope[1:])
            arg_maxes.add(alias)
        parts.append(exp.Subquery(this=part, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    outer = select.copy()
    originals = {id(copied): original for copied, original in zip(outer.walk(), select.walk())}
    coalesced = [exp.Coalesce(this=exp.column(f"_idp_k{i}", table="_idp_s0"),
                              expressions=[exp.column(f"_idp_k{i}", table=f"_idp_s{s}")
                                           for s in range(1, len(parts))])
                 if len(parts) > 1 else exp.column(f"_idp_k{i}", table="_idp_s0")
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
            for i in range(len(keys))])) if keys
        else exp.Join(this=part, side="LEFT", on=exp.true()) if part.alias in arg_maxes
        else exp.Join(this=part, kind="CROSS")
        for part in parts[1:]])
    return outer


def _is_mode(node: exp.Expression) -> bool:
    """``MODE() WITHIN GROUP (…)``, with a FILTER or not."""
    inner = node.this if isinstance(node, exp.Filter) else node
    return isinstance(inner, exp.WithinGroup) and isinstance(inner.this, exp.Mode)


def _mode_column(node: exp.Expression, select: exp.Select, rules: Rules
                 ) -> tuple[exp.Column, bool]:
    """The column a MODE orders by and whether descending (a tie goes to the first in
    that order); refused, before any debit, unless it is one column with declared keys
    of a table of the query, without FILTER."""
    if isinstance(node, exp.Filter):
        raise NotSupported("MODE() WITHIN GROUP … FILTER (WHERE …) is not supported; put "
                           f"the condition in the WHERE clause: {MODE_FORM}")
    order = node.expression
    ordered = order.expressions if isinstance(order, exp.Order) else []
    column = ordered[0].this if len(ordered) == 1 else None
    if not isinstance(column, exp.Column) or node.this.expressions or node.this.this:
        raise NotSupported(f"MODE() WITHIN GROUP takes one column: {MODE_FORM}")
    tables = [source for source in [select.args["from_"].this, *(
        join.this for join in select.args.get("joins") or [])] if isinstance(source, exp.Table)]
    named = [rules.table(source.name) for source in tables
             if not column.table or source.alias_or_name.lower() == column.table.lower()]
    declared = [table.columns[column.name.lower()] for table in named
                if table is not None and column.name.lower() in table.columns]
    if not declared:
        raise UnknownColumn(f"column {column.sql(dialect='postgres')} is not declared for "
                            f"{', '.join(source.name for source in tables)}")
    if len(declared) > 1:
        raise AmbiguousColumn(f'column reference "{column.name}" is ambiguous')
    if declared[0].keys is None:
        keyed = sorted({name for table in named if table is not None
                        for name, kind in table.columns.items() if kind.keys is not None})
        offer = (f" (here: {', '.join(keyed)})" if keyed else "")
        raise NotSupported(f"MODE() WITHIN GROUP (ORDER BY {column.sql(dialect='postgres')}) "
                           "needs a column whose keys the rules declare (its candidates must "
                           f"be public){offer}: {MODE_FORM}")
    return column, bool(ordered[0].args.get("desc"))


def _mode_part(part: exp.Select, keys: list[exp.Expression], column: exp.Column,
               descending: bool, mode: str) -> exp.Select:
    """The part of a MODE (module docstring): per group of ``keys``, the declared key of
    ``column`` of the largest released COUNT(*), as its one aggregate ``_idp_a0``. The
    COUNT(*) keeps the MODE's text (``mode``), which refusals of it name."""
    count = exp.Count(this=exp.Star())
    count.meta[WRITTEN] = (mode, column.sql(dialect="postgres"))
    first = exp.Window(this=exp.RowNumber(),
                       partition_by=[key.copy() for key in keys] or None,
                       order=exp.Order(expressions=[
                           exp.Ordered(this=count, desc=True),
                           exp.Ordered(this=column.copy(), desc=descending)]))
    counted = part.copy()
    counted.set("expressions", [*(exp.alias_(key.copy(), f"_idp_k{i}")
                                  for i, key in enumerate(keys)),
                                exp.alias_(column.copy(), "_idp_v"),
                                exp.alias_(first, "_idp_r")])
    counted.set("group", exp.Group(expressions=[*(key.copy() for key in keys), column.copy()]))
    return exp.select(*(exp.column(f"_idp_k{i}") for i in range(len(keys))),
                      exp.alias_(exp.column("_idp_v"), "_idp_a0")
                      ).from_(counted.subquery("_idp_m")).where(
        exp.EQ(this=exp.column("_idp_r"), expression=exp.Literal.number(1)))


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
