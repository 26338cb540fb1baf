"""EXISTS and NOT EXISTS over a protected table of the query's own privacy unit (TPC-H
Q04: orders that have a late line item; Q21: line items of orders with another
supplier's line item and no other late one).

``WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_commitdate
< l_receiptdate)`` over orders is answered as a condition on each row of the scope,
computed by the backend with one more equality than the analyst wrote: the inner row's
unit equals the outer row's (``_idp_y.unit = _idp_x.unit``, units derived through
``unit_via`` included). The condition of an outer row then reads records of its own
unit only, so it is a function of that unit's records; a neighbour (all records of one
unit modified) changes which of that unit's rows are in scope and no other unit's
rows, and a unit has no more rows in scope than in its table: every sensitivity of the
scope holds with the same shift (docs/privacy.md §3.15). Along a declared link the
equality changes no answer (an order's line items are its customer's); it removes only
inner rows without a unit (a dangling key) from what an EXISTS may find.

Allowed: ``[NOT] EXISTS (SELECT … FROM t [AS a] WHERE condition)`` anywhere in the
WHERE of a query over protected tables with a privacy unit, ``t`` protected with a
unit of the same identity (``privacy_unit``, ``unit_of``, ``unit_via``), the condition
equating the two rows' units itself (``_correlated``: else the added equality would
answer another question); the condition is checked as a WHERE is (comparisons, IN,
LIKE, IS NULL, AND/OR/NOT) over ``t``'s columns and the outer query's (an unqualified
column is ``t``'s when ``t`` declares it, as PostgreSQL resolves it). Refused in one
line: joins, GROUP BY, aggregates, LIMIT or subqueries inside it, a public or
row-level table, another unit.
``x IN (SELECT a.y FROM t a WHERE …)`` is answered as the EXISTS it equals where it
decides the WHERE by being TRUE (``in_as_exists``).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from sqlglot import exp

from proxy.analyze.joins import declared_table
from proxy.analyze.key_restriction import conjuncts
from proxy.analyze.predicate import check_predicate
from proxy.errors import NotSupported, UnknownColumn
from proxy.rules import Column, Rules, Table
from proxy.vocabulary import SEMI_INNER as INNER
from proxy.vocabulary import SEMI_OUTER as OUTER
from proxy.vocabulary import JoinedColumn, SemiJoin

ALLOWED = ("[NOT] EXISTS (SELECT * FROM t WHERE t.col = outer.col [AND …]) over a protected "
           "table t of the query's privacy unit")


def _protected(select: exp.Select, rules: Rules) -> list[tuple[exp.Table, Table]]:
    """The protected tables ``select`` reads in its FROM and joins, with their rules."""
    return [(source, declared) for source in _sources(select) if isinstance(source, exp.Table)
            and (declared := rules.table(source.name)) is not None and not declared.public]


def _sources(select: exp.Select) -> list[exp.Expression]:
    """What ``select`` reads in its FROM and joins."""
    return [clause.this for clause in (select.args.get("from_"),
                                       *(select.args.get("joins") or [])) if clause]


def _grouped_unit(select: exp.Select, rules: Rules) -> str | None:
    """The first GROUP BY column of ``select`` that is the privacy unit column of a
    protected table in its FROM or joins (a qualified column: of that table), if any."""
    tables = {source.alias_or_name: declared.privacy_unit
              for source, declared in _protected(select, rules) if declared.privacy_unit}
    group = select.args.get("group")
    for column in (group.expressions if group else ()):
        if isinstance(column, exp.Column) and (
                tables.get(column.table) == column.name if column.table
                else column.name in tables.values()):
            return column.name
    return None


def exists_out(select: exp.Select) -> tuple[exp.Select, tuple[exp.Exists, ...]]:
    """``select`` with each EXISTS of its WHERE replaced by a placeholder, the boolean
    column ``_idp_eK = TRUE`` (a copy), and the EXISTS nodes in that order; ``select``
    itself and none when its WHERE has no EXISTS."""
    where = select.args.get("where")
    if where is None or not where.find(exp.Exists):
        return select, ()
    select = select.copy()
    found = []
    for node in list(select.args["where"].find_all(exp.Exists)):
        if node.find_ancestor(exp.Select) is not select:
            continue  # inside another EXISTS: refused with it
        placeholder = exp.EQ(this=exp.column(f"_idp_e{len(found)}"), expression=exp.true())
        node.replace(placeholder)
        found.append(node)
    return select, tuple(found)


def public_semi_joins(select: exp.Select, rules: Rules) -> exp.Select:
    """``select`` with each top-level AND term of its WHERE that keeps the rows whose
    column matches a row of a public table by that table's unique key, ``x IN (SELECT
    k FROM p WHERE …)`` or ``EXISTS (SELECT … FROM p WHERE p.k = x AND …)``, written as
    the inner join on that key, ``JOIN p AS _idp_pN ON x = _idp_pN.k``, with the
    subquery's other conditions in the WHERE: on a unique key a semi-join is that join
    (each row meets at most one row of ``p``), which ``proxy.analyze.joins`` answers (a
    copy; ``select`` itself when there is none). Only where each condition of the
    subquery reads ``p`` alone, and it has no join, grouping, limit or subquery."""
    where = select.args.get("where")
    if where is None or not any(isinstance(node, exp.Exists) or isinstance(
            node.args.get("query"), exp.Subquery) for node in where.find_all(exp.In,
                                                                             exp.Exists)):
        return select
    select = select.copy()
    joined = 0
    for term in conjuncts(select.args["where"].this):
        found = public_match(term, rules)
        if found is None:
            continue
        outer, table, key, kept = found
        alias = f"_idp_p{joined}"
        joined += 1
        for column in (c for condition in kept for c in condition.find_all(exp.Column)):
            column.set("table", exp.to_identifier(alias))
        on = exp.EQ(this=outer.copy(), expression=exp.column(key, table=alias))
        select = select.join(table.as_(alias, copy=False), on=on, join_type="INNER",
                             copy=False)
        replacement = exp.and_(*kept, copy=False) if kept else exp.true()
        if term is select.args["where"].this:
            select.args["where"].set("this", replacement)
        else:
            term.replace(exp.paren(replacement, copy=False) if kept else replacement)
    return select


def public_match(term: exp.Expression, rules: Rules
                 ) -> tuple[exp.Column, exp.Table, str, list[exp.Expression]] | None:
    """(the outer column, the public table (a fresh reference), its unique key, the
    subquery's other conditions, copied) of ``x IN (SELECT k FROM p WHERE …)`` or
    ``EXISTS (SELECT … FROM p WHERE p.k = t.x AND …)``, ``k`` declared ``unique`` in the
    public ``p`` and every condition reading ``p`` alone (no join, grouping, limit or
    subquery): a semi-join on a unique key, which is the inner join on it with those
    conditions (``public_semi_joins``; a staged subquery's release restricted by it,
    ``proxy.analyze.staged``); None for any other term."""
    if isinstance(term, exp.In) and isinstance(term.args.get("query"), exp.Subquery):
        inner, outer = term.args["query"].this, term.this.unnest()
    elif isinstance(term, exp.Exists):
        inner, outer = term.this, None
    else:
        return None
    if not isinstance(inner, exp.Select) or inner.find(exp.Subquery) or any(
            inner.args.get(clause) for clause in ("joins", "group", "having", "limit",
                                                  "offset", "with_", "qualify")):
        return None
    source = inner.args.get("from_")
    table = source.this if source is not None else None
    declared = rules.table(table.name) if isinstance(table, exp.Table) else None
    if declared is None or not declared.public:
        return None
    own = {table.alias_or_name.lower()}  # as PostgreSQL: an aliased table by its alias

    def mine(column: exp.Column) -> bool:  # p's column (unqualified: p's if p declares it)
        return column.name.lower() in declared.columns and (
            not column.table or column.table.lower() in own)

    where = inner.args.get("where")
    terms = conjuncts(where.this) if where is not None else []
    if outer is None:  # EXISTS: one term equates p's unique key with an outer column
        link = next((t for t in terms if isinstance(t, exp.EQ) and sum(
            isinstance(side, exp.Column) and mine(side) and (side.name.lower(),)
            in declared.unique for side in (t.this, t.expression)) == 1 and all(
            isinstance(side, exp.Column) for side in (t.this, t.expression))
            and not all(mine(side) for side in (t.this, t.expression))), None)
        if link is None:
            return None
        key, outer = (link.this, link.expression) if mine(link.this) \
            else (link.expression, link.this)
        if not outer.table:  # PostgreSQL would read an unqualified name as p's first
            return None
        terms = [t for t in terms if t is not link]
    else:
        key = inner.selects[0].unalias() if len(inner.selects) == 1 else None
        if not (isinstance(key, exp.Column) and mine(key)
                and (key.name.lower(),) in declared.unique and isinstance(outer, exp.Column)):
            return None
    if not all(mine(column) for t in terms for column in t.find_all(exp.Column)):
        return None
    return outer, exp.to_table(table.name), key.name.lower(), [t.copy() for t in terms]


def in_as_exists(select: exp.Select, rules: Rules) -> exp.Select:
    """``select`` with each ``x IN (SELECT a.y FROM t a WHERE cond)`` over a protected
    table written as ``EXISTS (SELECT * FROM t a WHERE (cond) AND a.y = x)``, which the
    rest of this module answers or refuses (a copy; ``select`` itself when there is
    none). Only where the IN decides the WHERE by being TRUE (under AND and OR, not
    NOT: there a NULL IN, where no row matches but a NULL one, and the FALSE of EXISTS
    keep the same rows), ``x`` is a column of the outer table named so that the
    subquery cannot take it for its own, and ``a.y = x`` makes the two rows' units equal
    (``_same_unit``): else the EXISTS's own equality of units would change the answer."""
    where = select.args.get("where")
    if where is None or not any(isinstance(node.args.get("query"), exp.Subquery)
                                for node in where.find_all(exp.In)):
        return select  # no IN of a subquery (a list of values: TPC-H Q17's second stage)
    select = select.copy()
    sources = _sources(select)
    for node in list(select.args["where"].find_all(exp.In)):
        exists = _as_exists(node, select, sources, rules)
        if exists is not None:
            node.replace(exists)
    return select


def _as_exists(node: exp.In, select: exp.Select, sources: list, rules: Rules
               ) -> exp.Exists | None:
    query = node.args.get("query")
    inner = query.this if isinstance(query, exp.Subquery) else None
    if not isinstance(inner, exp.Select) or not _protected(inner, rules) \
            or len(inner.expressions) != 1 or any(inner.args.get(clause) for clause in (
                "joins", "group", "having", "limit", "offset", "order", "with_")) \
            or inner.find(exp.AggFunc) or not isinstance(inner.expressions[0].unalias(),
                                                         exp.Column):
        return None
    parent = node.parent
    while not isinstance(parent, exp.Where):
        if not isinstance(parent, (exp.And, exp.Or, exp.Paren)):
            return None  # under NOT, or compared: NULL and FALSE may differ there
        parent = parent.parent
    if parent.parent is not select:
        return None
    outer = node.this.unnest()
    if not isinstance(outer, exp.Column):
        return None
    outer = outer.copy()
    if not outer.table:  # named by the outer table, which the subquery cannot shadow
        if len(sources) != 1 or not isinstance(sources[0], exp.Table):
            return None
        outer.set("table", exp.to_identifier(sources[0].alias_or_name))
    if outer.table in {source.alias_or_name for source in inner.find_all(exp.Table)}:
        return None
    table = inner.args["from_"].this
    selected, declared = inner.expressions[0].unalias(), rules.table(table.name)
    if (selected.table and selected.table != table.alias_or_name) or declared is None \
            or selected.name.lower() not in declared.columns:
        return None  # the outer row's own column (correlated): not a list of inner rows
    owner = next((source for source in sources if isinstance(source, exp.Table)
                  and source.alias_or_name == outer.table), None)
    if owner is None or not _same_unit(rules.table(table.name), inner.expressions[0].unalias(),
                                       rules.table(owner.name), outer):
        return None
    column = inner.expressions[0].unalias().copy()
    if not column.table:
        column.set("table", exp.to_identifier(table.alias_or_name))
    body = inner.copy()
    body.set("expressions", [exp.Star()])
    body.set("distinct", None)
    condition = exp.EQ(this=column, expression=outer)
    body.set("where", exp.Where(this=exp.and_(exp.paren(inner.args["where"].this.copy()),
                                              condition) if inner.args.get("where")
                                else condition))
    return exp.Exists(this=body)


def _same_unit(inner: Table | None, column: exp.Column, outer: Table | None,
               other: exp.Column) -> bool:
    """Whether ``column`` of ``inner`` equal to ``other`` of ``outer`` makes their
    rows' units equal, so the EXISTS's own equality of units changes nothing: both are
    their tables' unit columns, or a declared link and the key it references."""
    if inner is None or outer is None:
        return False
    mine, theirs = column.name.lower(), other.name.lower()
    if mine == inner.privacy_unit and theirs == outer.privacy_unit \
            and inner.link is None and outer.link is None:
        return True
    if inner.link is not None and outer.link is not None and mine == inner.link.column \
            and theirs == outer.link.column and (inner.link.table, inner.link.key) == (
                outer.link.table, outer.link.key):
        return True  # two rows naming one row of the table both link to (TPC-H Q21)
    return any(link is not None and link.column == near and link.table == far.name
               and link.key == key for link, near, far, key in (
                   (inner.link, mine, outer, theirs), (outer.link, theirs, inner, mine)))


def refuse_subqueries(select: exp.Select, rules: Rules) -> None:
    """Refuse, in one line naming its form and its table, a subquery outside FROM and
    EXISTS (``IN (SELECT …)``, a scalar subquery) that reads a protected table: it
    filters each row by a list or an aggregate of other people's rows, which would need
    a release of its own (TPC-H Q17, Q18, Q20, Q22)."""
    for node in select.find_all(exp.Subquery):
        query = node.this
        if isinstance(node.parent, (exp.From, exp.Join)) or not isinstance(query, exp.Select):
            continue
        protected = [source.name for source, _ in _protected(query, rules)]
        if not protected:
            continue
        if isinstance(node.parent, exp.In):
            form = f"IN (SELECT … FROM {protected[0]})"
        elif isinstance(node.parent, (exp.Binary, exp.Between)):
            form = f"a scalar subquery over {protected[0]} compared with each row"
        else:
            form = f"a subquery over {protected[0]}"
        unit = _grouped_unit(select, rules)
        if unit is not None:  # no rewrite of the subquery would answer this (TPC-H Q18)
            raise NotSupported(f"GROUP BY {unit} lists one group per privacy unit, which "
                               "would answer for one person at a time (and "
                               f"{form} is not supported); ask over units instead: "
                               f"COUNT(DISTINCT {unit}), or AVG or SUM of a per-unit "
                               f"aggregate from a subquery grouped by {unit}")
        raise NotSupported(f"{form} is not supported: it reads the protected table "
                           f"{protected[0]} to filter or compute each row; supported: "
                           f"{ALLOWED}, joins along declared keys, and an uncorrelated "
                           "scalar subquery of one aggregate in the WHERE or the select "
                           "list (a release of its own)")


def semi_joins(found: tuple[exp.Exists, ...], table: Table, owners: dict[str, Table],
               resolve, rules: Rules) -> tuple[Table, tuple[SemiJoin, ...]]:
    """``table`` with a boolean column for each EXISTS of ``found`` (its placeholder's
    name), and what the backend computes each from; ``owners`` are the outer query's
    tables by the names it gives them, ``resolve`` its column resolver. Refused (one
    line naming the allowed form) unless each is over a protected table of ``table``'s
    unit and correlated with the outer row on it (``_correlated``)."""
    aliases = set(owners)
    if not found:
        return table, ()
    if table.privacy_unit is None:
        raise NotSupported(f"EXISTS over a protected table needs a privacy unit: {table.name} "
                           "has none (row-level privacy), so an EXISTS could read other "
                           f"people's rows; {ALLOWED}")
    columns = dict(table.columns)
    made = []
    for index, node in enumerate(found):
        name = f"_idp_e{index}"
        inner, alias = _inner_table(node, rules)
        if alias in aliases:
            raise NotSupported(f"name the EXISTS's table other than the outer query's tables "
                               f"({alias}); {ALLOWED}")
        if inner.public or inner.privacy_unit is None:
            kind = "public" if inner.public else "without a privacy unit"
            raise NotSupported(f"EXISTS over {inner.name} ({kind}) is not supported; "
                               f"{ALLOWED}")
        if inner.unit_identity != table.unit_identity:
            raise NotSupported(f"EXISTS over {inner.name} reads other people's rows: its "
                               f"privacy unit ({inner.unit_identity}) is not {table.name}'s "
                               f"({table.unit_identity}); {ALLOWED}")
        where = node.this.args.get("where")
        condition = None
        if where is not None:
            condition = _condition(where.this, inner, alias, table, resolve)
        if not _correlated(condition, inner, table, owners):
            raise NotSupported(
                f"EXISTS over {inner.name} reads other people's rows unless its WHERE "
                "equates the two rows' units (their unit columns, or a unit_via link and "
                f"the key it references); add that equality: {ALLOWED}")
        columns[name] = Column(name, "bool")
        made.append(SemiJoin(inner, name, condition))
    return replace(table, columns=MappingProxyType(columns)), tuple(made)


def _correlated(condition: exp.Expression | None, inner: Table, table: Table,
                owners: dict[str, Table]) -> bool:
    """Whether a conjunct of ``condition`` (over ``INNER`` and ``OUTER`` columns) is an
    equality that makes the inner row's unit the outer row's (``_same_unit``): then the
    equality of units the backend adds changes no answer. Without one, it would answer
    another question (``EXISTS (SELECT 1 FROM people WHERE age = 20)`` counted only
    the people aged 20, not everyone: the review of 2026-11-29)."""
    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    for term in conjuncts:
        if not isinstance(term, exp.EQ):
            continue
        sides = {side.table: side for side in (term.this, term.expression)
                 if isinstance(side, exp.Column)}
        if set(sides) != {INNER, OUTER}:
            continue
        column = table.columns.get(sides[OUTER].name)
        owner, name = table, sides[OUTER].name
        if isinstance(column, JoinedColumn):
            owner, name = owners.get(column.join), column.source
        if owner is not None and _same_unit(inner, sides[INNER], owner, exp.column(name)):
            return True
    return False


def _inner_table(node: exp.Exists, rules: Rules) -> tuple[Table, str]:
    """The EXISTS's one table and its alias; refused unless it is a plain SELECT over
    one declared table with a WHERE at most."""
    query = node.this
    if not isinstance(query, exp.Select) or query.args.get("from_") is None:
        raise NotSupported(f"EXISTS takes a SELECT over one table: {ALLOWED}")
    extra = [clause for clause in ("joins", "group", "having", "limit", "offset", "order",
                                   "distinct", "with", "qualify", "laterals")
             if query.args.get(clause)]
    if extra or any(isinstance(n, (exp.AggFunc, exp.Subquery, exp.Exists))
                    or (isinstance(n, exp.Select) and n is not query) for n in query.walk()):
        what = extra[0].upper() if extra else "aggregates or subqueries"
        raise NotSupported(f"{what} inside EXISTS are not supported; {ALLOWED}")
    source = query.args["from_"].this
    if not isinstance(source, exp.Table) or not source.name:
        raise NotSupported(f"EXISTS takes a SELECT over one table: {ALLOWED}")
    return declared_table(source, rules), source.alias_or_name.lower()


def _condition(where: exp.Expression, inner: Table, alias: str, table: Table,
               resolve) -> exp.Expression:
    """The EXISTS's WHERE checked as a WHERE is, over the outer table's columns and the
    inner table's (named ``alias.column`` while checked), with the inner columns read
    from ``INNER`` and the outer ones from ``OUTER``."""
    mine = {f"{alias}.{name}": name for name in inner.columns}
    both = dict(table.columns)
    both.update((joined, JoinedColumn(joined, column.type, column.lower, column.upper,
                                      column.keys, column.public, column.declared_resolution,
                                      column.time_domain, join=alias, source=name,
                                      protected=True, stored=column.stored))
                for joined, name, column in ((f"{alias}.{n}", n, c)
                                             for n, c in inner.columns.items()))
    checked_over = replace(table, columns=MappingProxyType(both))

    def resolving(column: exp.Column) -> str:
        qualifier, name = column.table.lower(), column.name.lower()
        if qualifier == alias or (not qualifier and name in inner.columns):
            if name not in inner.columns:
                raise UnknownColumn(f"column {name} is not declared for {inner.name}; "
                                    f"declared: {', '.join(inner.columns)}")
            return f"{alias}.{name}"
        return resolve(column)

    condition = check_predicate(where, checked_over, resolving, "EXISTS")
    if isinstance(condition, exp.Column):  # a bare boolean column: the root replaced below
        condition = exp.EQ(this=condition, expression=exp.true())
    for column in list(condition.find_all(exp.Column)):
        if column.name in mine:
            column.replace(exp.column(mine[column.name], table=INNER, quoted=True))
        else:
            column.replace(exp.column(column.name, table=OUTER, quoted=True))
    return condition
