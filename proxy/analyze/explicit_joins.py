"""Joins written as PostgreSQL allows, rewritten into the form ``proxy.analyze.joins``
checks: unqualified columns of ON and WHERE qualified by the one table that has them,
and comma joins (``FROM a, b WHERE a.x = b.y``) as explicit inner joins.

``FROM lineitem, part WHERE p_partkey = l_partkey AND p_type LIKE 'PROMO%'`` is the
same query as ``FROM lineitem JOIN part ON part.p_partkey = lineitem.l_partkey WHERE
part.p_type LIKE 'PROMO%'``: a comma join is a cross product and its WHERE a filter of
it, and an inner join's ON is such a filter too, so moving a conjunct of the WHERE
into an inner join's ON (or back) changes no row, nor does the order of inner joins.
The rewrite changes nothing else: the join rules then decide on the explicit form
exactly as if the analyst had written it (docs/privacy.md §3.9–§3.10), so it adds no
privacy question of its own.

- **Qualifying.** Over a join, an unqualified column of ON or WHERE names the one
  table of the FROM whose declared columns (the rules') hold it, as PostgreSQL resolves
  it; two tables holding it is PostgreSQL's 42702 (ambiguous column), none leaves it
  as it is (the checks after say it is undeclared). Subqueries keep their own scope
  and are not looked into.
- **USING.** ``a JOIN b USING (c)`` is ``a JOIN b ON a.c = b.c`` (each column of the
  list one equality), the left side being the one earlier table whose declared
  columns hold ``c`` (none: PostgreSQL's 42703; two: its 42702). USING merges the two
  columns into one, which an unqualified ``c`` anywhere in the query names: it is the
  left table's (an inner join's two are equal, a LEFT join's merged column is the
  left one), so unqualified ``c`` is qualified by the left table throughout the query
  (outside subqueries). The join rules then decide on the ON form.
- **Comma joins.** When every join of the FROM is a comma join or an inner ``JOIN …
  ON`` (no outer, CROSS, NATURAL or USING join among them), the conjuncts of the WHERE
  and of the ON clauses are pooled; an equality of two columns of different tables
  (a *join equality*; also one that every branch of an OR holds, which is taken out
  of the OR: ``(A AND B) OR (A AND C)`` is ``A AND (B OR C)``, TPC-H Q19) links them.
  The tables are then joined in FROM order, a table that links to none joined so far
  waiting until one does, each with the join equalities to the tables before it as
  its ON; the other conjuncts stay in (or move to) the WHERE. A table that links to
  none — a cross product, which no join rule answers — leaves the query as it was
  written, to be refused as before.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.errors import AmbiguousColumn, UnknownColumn
from proxy.rules import Rules


def explicit_joins(select: exp.Select, rules: Rules) -> exp.Select:
    """``select`` with its ON and WHERE columns qualified and its comma joins explicit
    (a copy; ``select`` itself when it has no joins)."""
    joins = select.args.get("joins") or []
    from_ = select.args.get("from_")
    if not joins or from_ is None:
        return select
    sources = [from_.this, *(join.this for join in joins)]
    if not all(isinstance(source, exp.Table) and source.name for source in sources):
        return select
    columns = {source.alias_or_name.lower(): _declared_columns(source, rules)
               for source in sources}
    if len(columns) != len(sources):
        return select  # a name used twice: refused by the join checks
    select = select.copy()
    joins = select.args["joins"]
    for index, join in enumerate(joins):
        if join.args.get("using") and not join.args.get("method"):
            _using_as_on(select, index, columns)
    where = select.args.get("where")
    for clause in [where, *(join.args.get("on") for join in joins)]:
        if clause is not None:
            _qualify(clause, columns)
    if any(_comma(join) for join in joins) and all(_comma(join) or _inner(join)
                                                  for join in joins):
        return _joined_explicitly(select, columns)
    return select


def _using_as_on(select: exp.Select, index: int, columns: dict[str, frozenset[str]]
                 ) -> None:
    """Rewrite the USING of ``select``'s join ``index`` into its ON equalities, in place,
    and qualify the merged columns' unqualified references by the left table."""
    join = select.args["joins"][index]
    earlier = [select.args["from_"].this, *(j.this for j in select.args["joins"][:index])]
    right = join.this.alias_or_name.lower()
    equalities, merged = [], {}
    for identifier in join.args["using"]:
        name = identifier.name.lower()
        if name not in columns[right]:
            raise UnknownColumn(f'column "{name}" specified in USING clause does not exist '
                                f"in right table {right}")
        holders = [t.alias_or_name.lower() for t in earlier
                   if name in columns[t.alias_or_name.lower()]]
        if not holders:
            raise UnknownColumn(f'column "{name}" specified in USING clause does not exist '
                                "in left table")
        if len(holders) > 1:
            raise AmbiguousColumn(f'common column name "{name}" appears more than once in '
                                  f"left table ({' and '.join(holders)}); join with ON "
                                  f"{holders[0]}.{name} = {right}.{name}")
        merged[name] = holders[0]
        equalities.append(exp.EQ(this=exp.column(name, table=holders[0]),
                                 expression=exp.column(name, table=right)))
    join.set("using", None)
    join.set("on", exp.and_(*equalities) if len(equalities) > 1 else equalities[0])
    aliases = {item.alias.lower() for item in select.expressions if item.alias}
    for node in list(select.walk(prune=lambda n: n is not select and isinstance(
            n, (exp.Select, exp.Subquery)))):
        if isinstance(node, exp.Column) and not node.table and not isinstance(
                node.this, exp.Star) and node.name.lower() in merged and not (
                node.name.lower() in aliases and node.find_ancestor(exp.Order)):
            # (an output column's name in ORDER BY names that column, as PostgreSQL reads it)
            node.set("table", exp.to_identifier(merged[node.name.lower()]))


def _declared_columns(source: exp.Table, rules: Rules) -> frozenset[str]:
    table = rules.table(source.name)
    return frozenset(table.columns) if table is not None else frozenset()


def _comma(join: exp.Join) -> bool:
    return not any(join.args.get(key) for key in ("on", "using", "side", "kind", "method"))


def _inner(join: exp.Join) -> bool:
    kind = (join.args.get("kind") or "").upper()
    return join.args.get("on") is not None and kind in ("", "INNER") \
        and not any(join.args.get(key) for key in ("using", "side", "method"))


def _qualify(clause: exp.Expression, columns: dict[str, frozenset[str]]) -> None:
    """Qualify ``clause``'s unqualified columns by the one source declaring each
    (not inside subqueries: they have their own FROM)."""
    for node in list(clause.walk(prune=lambda n: isinstance(n, (exp.Select, exp.Subquery)))):
        if not isinstance(node, exp.Column) or node.table or isinstance(node.this, exp.Star):
            continue
        name = node.name.lower()
        holders = [alias for alias, declared in columns.items() if name in declared]
        if len(holders) > 1:
            raise AmbiguousColumn(f'column reference "{node.name}" is ambiguous: '
                                  f"{' and '.join(holders)} both have it; qualify it with "
                                  f"its table's name or alias ({holders[0]}.{node.name})")
        if holders:
            node.set("table", exp.to_identifier(holders[0]))


def _joined_explicitly(select: exp.Select, columns: dict[str, frozenset[str]]
                       ) -> exp.Select:
    """The inner joins of ``select``'s comma and inner joins, ON the join equalities
    (``select`` unchanged when a table links to no other)."""
    sources = [select.args["from_"].this, *(join.this for join in select.args["joins"])]
    conjuncts = _conjuncts(select.args.get("where"))
    for join in select.args["joins"]:
        conjuncts += _conjuncts(join.args.get("on"))
    conjuncts = [c for conjunct in conjuncts for c in _factored(conjunct)]
    links = [(conjunct, _linked(conjunct, columns)) for conjunct in conjuncts]
    placed = [sources[0]]
    waiting = sources[1:]
    ons: dict[str, list[exp.Expression]] = {}
    while waiting:
        names = {source.alias_or_name.lower() for source in placed}
        ready = next((source for source in waiting if any(
            pair and source.alias_or_name.lower() in pair and pair - {
                source.alias_or_name.lower()} <= names for _, pair in links)), None)
        if ready is None:
            return select  # a cross product: refused by the join checks as written
        waiting.remove(ready)
        placed.append(ready)
        alias = ready.alias_or_name.lower()
        ons[alias] = [conjunct for conjunct, pair in links
                      if pair and alias in pair and pair - {alias} <= names]
    moved = {id(conjunct) for on in ons.values() for conjunct in on}
    rest = [conjunct for conjunct in conjuncts if id(conjunct) not in moved]
    # ``select`` is ``explicit_joins``'s own copy: its nodes are moved, not copied again
    # (TPC-H Q17's second stage: a WHERE of 52 released terms, copied twice more here)
    select.set("from_", exp.From(this=placed[0].pop()))
    select.set("joins", [exp.Join(this=source.pop(), on=exp.and_(
        *(_detached(c) for c in ons[source.alias_or_name.lower()]), copy=False))
        for source in placed[1:]])
    select.set("where", exp.Where(this=exp.and_(*(_detached(c) for c in rest), copy=False))
               if rest else None)
    return select


def _detached(node: exp.Expression) -> exp.Expression:
    """``node`` out of the tree it stands in (a conjunct ``_factored`` made is alone)."""
    return node.pop() if node.parent is not None else node


def _conjuncts(clause: exp.Expression | None) -> list[exp.Expression]:
    if clause is None:
        return []
    node = clause.this if isinstance(clause, exp.Where) else clause
    return [term.unnest() for term in node.flatten()] if isinstance(node.unnest(), exp.And) \
        else [node.unnest()]


def _factored(conjunct: exp.Expression) -> list[exp.Expression]:
    """An OR's join equalities that all its branches hold, taken out of it: ``(A AND B)
    OR (A AND C)`` as ``A`` and ``B OR C`` (the same rows, NULLs included: both are
    NULL or FALSE exactly where the other is); any other conjunct as it is."""
    if not isinstance(conjunct, exp.Or):
        return [conjunct]
    branches = [_conjuncts(branch) for branch in conjunct.flatten()]
    common = [term for term in branches[0] if _is_equality_of_columns(term)
              and all(any(_same_equality(term, other) for other in branch)
                      for branch in branches[1:])]
    if not common:
        return [conjunct]
    remaining = []
    for branch in branches:
        kept = [term for term in branch
                if not any(_same_equality(term, taken) for taken in common)]
        if not kept:
            return common  # a branch of only the common equalities: the OR holds with them
        remaining.append(exp.and_(*kept, copy=True) if len(kept) > 1 else kept[0].copy())
    return [*common, exp.or_(*(exp.paren(branch, copy=False) for branch in remaining),
                             copy=False)]


def _is_equality_of_columns(term: exp.Expression) -> bool:
    return isinstance(term, exp.EQ) and isinstance(term.this, exp.Column) \
        and isinstance(term.expression, exp.Column)


def _same_equality(one: exp.Expression, other: exp.Expression) -> bool:
    return _is_equality_of_columns(one) and _is_equality_of_columns(other) and (
        (one.this == other.this and one.expression == other.expression)
        or (one.this == other.expression and one.expression == other.this))


def _linked(conjunct: exp.Expression, columns: dict[str, frozenset[str]]
            ) -> frozenset[str] | None:
    """The two tables a join equality links (qualified columns of two tables of the
    FROM), else None."""
    if not _is_equality_of_columns(conjunct):
        return None
    tables = frozenset(side.table.lower() for side in (conjunct.this, conjunct.expression))
    if len(tables) != 2 or not tables <= columns.keys():
        return None
    return tables
