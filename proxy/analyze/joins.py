"""Joins of one protected table with public tables on a unique or bounded key (issue 18,
item 1), and of two protected tables on the privacy unit both declare (item 2).

``SELECT r.name, MEDIAN(p.income) FROM people p JOIN regions r ON p.region = r.code
GROUP BY r.name``: the public table's join key is declared unique in the rules
(``[tables.regions] unique = ["code"]``, checked against the backend at start), so every
protected row meets at most one public row. The join is then a row-by-row map of the
protected table: each row gains the columns of its public row (INNER JOIN: a row without
one leaves the scope; LEFT JOIN: it stays, with NULL public columns). Such a map is what
a WHERE clause already is, so every sensitivity of the protected table holds unchanged
(docs/privacy.md §3.9); the backend enforces the uniqueness in every query too, so a
public table that later gains a duplicate key cannot multiply rows
(``proxy.pushdown.scope.source_table``).

A key declared with a maximum multiplicity instead (``[tables.tags] max_rows_per_key =
{ kind = 3 }``, checked at start too) lets a protected row meet up to m public rows: the
join maps each row to at most m joined rows, a function of that row alone, so every
formula holds with the shift multiplied by m (by the product of the m's of several
such joins: ``Join.multiplicity``, ``proxy.vocabulary.QueryPlan.multiplicity``,
docs/privacy.md §3.9); the backend reads the public table as its rows whose key occurs
at most m times, so later writes cannot exceed the bound.

A public table may also be matched on its key to a column of a public table joined
before it (a chain: ``JOIN supplier s ON l.l_suppkey = s.s_suppkey JOIN nation n ON
s.s_nationkey = n.n_nationkey``): each joined row still meets at most m rows of it, a
function of the protected row alone, so the chain is one more such map (the m's
multiply as for any public joins; the pushdown reads the later table through the
earlier one's alias, ``proxy.pushdown.scope.source_table``).

Allowed: ``FROM protected [AS p] [INNER | LEFT [OUTER]] JOIN public [AS r] ON p.col =
r.key [AND p.col2 = r.col3 …]`` for one or more public tables, each matched on at
least one unique or bounded key (to a protected column or, in a chain, an earlier
public table's); with only inner joins the tables may come in any order, and the other
conditions of their ON clauses are filters, checked as WHERE conditions are. Public
columns may be used in WHERE, GROUP BY (their keys then come from the public table
itself) and inside aggregates: a value of the joined row, normalised to its declared
domain like any column (docs/privacy.md §3.9).
Everything else is refused in one line naming this form: RIGHT, FULL, CROSS and
NATURAL joins (``USING`` is first written as its ON: ``proxy.analyze.explicit_joins``),
a public table on the preserving side of an outer join (but ``public LEFT JOIN
protected`` grouped by the public table's columns and aggregating the protected one's,
answered as their inner join: ``_preserved_public``), a join on a column declared
neither unique nor bounded, an outer join's ON conditions other than equalities of a
protected and a public column or of two public ones.

Two protected tables (``FROM visits v [LEFT] JOIN people p ON v.person_id =
p.person_id``) join on the privacy unit both declare, inner or LEFT (the first
protected table preserved), alongside public tables as above (also on the second
protected table's columns). The joined relation keeps the first table's privacy unit;
a unit's joined rows are its rows in one table times its rows in the other (LEFT: times
at least one), which the engine bounds per pair of data versions (``proxy.pushdown.
scope.unit_bound_sql``) and DP bounds by the product of the declared
``max_rows_per_unit`` (docs/privacy.md §3.10). Columns of either protected table may
be aggregated, filtered and grouped (by declared keys); an inner join's other ON
conditions are filters; a LEFT join's conditions on its own table's columns read that
table's rows that meet them (``Join.read``, docs/privacy.md §3.10). Refused: a join of
protected tables on any other column, of tables without the same declared privacy
unit, and a LEFT join whose ON holds anything else.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

from sqlglot import exp

from proxy.analyze.aggregate_forms import WRITTEN, written
from proxy.analyze.aggregates import is_aggregate
from proxy.analyze.explicit_joins import explicit_joins
from proxy.analyze.predicate import check_predicate
from proxy.errors import (
    AmbiguousColumn,
    NotSupported,
    SyntaxProblem,
    UnknownColumn,
    UnknownTable,
)
from proxy.rules import Rules, Table, key_text
from proxy.vocabulary import Join, JoinedColumn, unit_sources

ALLOWED = ("FROM protected p [LEFT] JOIN public r ON p.col = r.key, where the rules declare "
           "r's key unique ([tables.r] unique = [\"key\"]) or bounded (max_rows_per_key)")


def unit_allowed(first: Table, second: Table) -> str:
    """The joins of these two protected tables that are answered."""
    if first.link is not None and first.link.table == second.name:
        return (f"FROM {first.name} a [LEFT] JOIN {second.name} b ON a.{first.link.column} = "
                f"b.{first.link.key} (the link unit_via declares)")
    if second.link is not None and second.link.table == first.name:
        return (f"FROM {first.name} a JOIN {second.name} b ON b.{second.link.column} = "
                f"a.{second.link.key} (the link unit_via declares)")
    if first.link is None and second.link is None:
        mine = first.privacy_unit or second.privacy_unit or "unit"
        theirs = second.privacy_unit or mine
        return (f"FROM {first.name} a [LEFT] JOIN {second.name} b ON a.{mine} = b.{theirs}, "
                "both tables declaring the same privacy unit (privacy_unit, unit_of)")
    linked = first if first.link is not None else second
    return (f"join {linked.name} through the table its unit_via names "
            f"({linked.link.table}: ON {linked.name}.{linked.link.column} = "
            f"{linked.link.table}.{linked.link.key}), protected tables joining on their "
            "privacy units or along the links the rules declare")


def _owned(select: exp.Select, sources: list, declared: list) -> tuple[exp.Select, list]:
    """``select`` (a copy) with the unqualified columns of its select list and GROUP BY
    qualified by the one joined table declaring each (``name`` of the public table
    ``_preserved_public`` reads as its column; one that two tables declare, or none, is
    left as written), and its sources."""
    select = select.copy()
    names = {node.alias_or_name.lower(): frozenset(table.columns)
             for (node, _), table in zip(sources, declared)}
    group = select.args.get("group")
    for clause in [*select.expressions, *(group.expressions if group else [])]:
        for node in clause.find_all(exp.Column):
            holders = [alias for alias, columns in names.items() if node.name in columns]
            if not node.table and len(holders) == 1:
                node.set("table", exp.to_identifier(holders[0]))
    return select, [(select.args["from_"].this, None),
                    *[(join.this, join) for join in select.args.get("joins") or []]]


def _preserved_public(select: exp.Select, sources: list, first: int) -> exp.Select:
    """``FROM public r LEFT JOIN protected p ON …`` (Metabase and Looker starting from a
    dimension table) as ``FROM protected p JOIN public r ON …``, where the two agree:
    grouped by the public table's columns only (its groups are its rows' values either
    way: a group key of a joined public table lists them all, §3.9) and with aggregates
    of the protected table's columns only (a public row without protected rows adds
    their NULLs, which every aggregate skips), joined ON equalities of the two tables'
    columns only. Refused in one line otherwise: COUNT(*) counts such a row as 1, an
    aggregate of the public table's columns counts it too, a group of the protected
    table's columns gets a NULL group from it, and another condition of the ON keeps
    the public rows it fails as groups the inner join would not list."""
    refused = ("a public table on the preserving side of an outer join would answer for "
               "rows that are not the protected table's")
    if first != 1 or len(sources) != 2 or sources[1][1].args.get("side") != "LEFT":
        raise NotSupported(f"{refused}; put the protected table first: {ALLOWED}")
    public, (table, join) = sources[0][0], sources[1]
    alias = public.alias_or_name.lower()
    on = join.args.get("on")
    terms = list(on.flatten()) if isinstance(on, exp.And) else [on]
    if not all(isinstance(term, exp.EQ) and {column.table.lower() for column in
               term.find_all(exp.Column)} == {alias, table.alias_or_name.lower()}
               for term in terms):  # a condition of ON keeps the public rows it fails
        raise NotSupported(f"{refused}: its ON holds what is not an equality of a column "
                           f"of {public.name} and one of {table.name} (the rows of "
                           f"{public.name} it fails are kept, each a group of no rows); "
                           f"put the protected table first")
    items = select.expressions
    for node in select.walk():
        if not is_aggregate(node):
            continue
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            if WRITTEN in node.meta:  # a MODE's count of its column's keys
                raise NotSupported(f"{refused}: {written(node)} is answered through a "
                                   f"COUNT(*) per key of its column, which counts a row of "
                                   f"{public.name} without rows of {table.name}; put "
                                   f"{table.name} first")
            raise NotSupported(f"{refused}: COUNT(*) counts a row of {public.name} without "
                               f"rows of {table.name} as 1; count {table.name}'s rows "
                               f"(COUNT({table.alias_or_name}.col)) or put it first")
        if any(column.table.lower() == alias for column in node.find_all(exp.Column)):
            raise NotSupported(f"{refused}: {written(node)} reads {public.name}"
                               f", whose rows without rows of {table.name} it would count; "
                               f"aggregate {table.name}'s columns or put it first")
        if isinstance(node.parent, exp.WithinGroup):
            continue  # the fraction; the value is the WITHIN GROUP's ORDER BY, below
        if not all(_null_when_unmatched(value) for value in _aggregated(node)):
            raise NotSupported(f"{refused}: {written(node)} is not NULL on a "
                               f"row of {public.name} without rows of {table.name} (a "
                               "constant, COALESCE, CASE … IS NULL), so it would count that "
                               f"row; aggregate {table.name}'s columns or put it first")
    group = select.args.get("group")
    for term in group.expressions if group else []:
        if isinstance(term, exp.Literal) and term.is_int and 0 < int(term.name) <= len(items):
            term = items[int(term.name) - 1].unalias()
        if any(column.table.lower() != alias for column in term.find_all(exp.Column)):
            raise NotSupported(f"{refused}: grouped by {term.sql(dialect='postgres')}, a row "
                               f"of {public.name} without rows of {table.name} forms a NULL "
                               f"group; group by the columns of {public.name} or put "
                               f"{table.name} first")
    inner = select.copy()
    inner.set("from_", exp.From(this=table.copy()))
    inner.set("joins", [exp.Join(this=public.copy(), on=join.args["on"].copy())])
    return inner


# Nodes NULL when any operand is (PostgreSQL's strict operators and functions): over a
# public row without protected rows, whose protected columns are NULL, one of them over
# such a column is NULL, which every aggregate skips
_STRICT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.Neg, exp.Paren,
           exp.Cast, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Ln, exp.Log, exp.Exp,
           exp.Sqrt, exp.Pow, exp.Sign, exp.Trunc, exp.DPipe, exp.Lower, exp.Upper,
           exp.Length, exp.Distinct)


def _aggregated(node: exp.Expression) -> list[exp.Expression]:
    """The values an aggregate reads (a WITHIN GROUP's its ORDER BY's, a paired one's
    both), each of which it skips where NULL."""
    if isinstance(node, exp.WithinGroup):
        order = node.expression
        return [item.this for item in order.expressions] if isinstance(order, exp.Order) \
            else [order]
    return [value for value in (node.this, node.args.get("expression"))
            if isinstance(value, exp.Expression)]


def _null_when_unmatched(node: exp.Expression) -> bool:
    """Whether ``node`` is NULL wherever the protected table's columns are: one of them,
    a strict operator over at least one such, or a CASE without ELSE each of whose
    results is one (``REGR_AVGX(y, x)``'s ``CASE WHEN y IS NOT NULL THEN x END``: NULL
    or x); constants, COALESCE, IS NULL and a CASE with an ELSE are not."""
    if isinstance(node, exp.Column):
        return True  # the public table's are refused before
    if isinstance(node, exp.Case) and node.args.get("default") is None:
        return node.this is None and all(_null_when_unmatched(branch.args["true"])
                                         for branch in node.args["ifs"])
    return isinstance(node, _STRICT) and any(
        _null_when_unmatched(child) for child in node.iter_expressions())


def split_joins(select: exp.Select, rules: Rules
                ) -> tuple[exp.Select, tuple[Join, ...]]:
    """``select`` without its joins (the first protected table alone in FROM) and the
    joins (the other protected tables' first, in FROM order, then the public tables');
    ``select`` itself and no joins when it has none. Refused (one line naming the
    allowed form) unless every join is a public table's, many-to-one, or another
    protected table's on the privacy unit or along a declared link (docs/privacy.md
    §3.10, §3.13). Comma joins and unqualified columns are first written out
    (``explicit_joins``)."""
    given, select = select, explicit_joins(select, rules)
    joins = select.args.get("joins") or []
    if not joins:
        return select, ()
    if not select.args.get("from_"):
        raise SyntaxProblem('syntax error at or near "JOIN": a JOIN follows a FROM')
    sources = [(select.args["from_"].this, None), *[(join.this, join) for join in joins]]
    declared = [declared_table(node, rules) for node, _ in sources]
    protected = [i for i, table in enumerate(declared) if not table.public]
    if not protected:
        raise NotSupported("this join reads public tables only through functions the proxy "
                           "does not pass through; use columns, comparisons and aggregates")
    first = protected[0]
    outer = [join for _, join in sources[1:] if join.args.get("side")]
    if first != 0 and outer:
        return split_joins(_preserved_public(*_owned(select, sources, declared), first),
                           rules)
    second = protected[1] if len(protected) > 1 else None
    allowed = ALLOWED if second is None else unit_allowed(declared[first], declared[second])
    for _, join in sources[1:]:
        _check_kind(join, allowed)
    for table in declared:
        if table.public and not table.join_keys:
            raise NotSupported(f"a join with the public table {table.name} needs a key "
                               f"declared in [tables.{table.name}] unique = [\"key\"] or "
                               f"max_rows_per_key = {{ key = m }}, so that no protected row "
                               f"counts more often than the noise allows for: {ALLOWED}")
    if second is not None:
        _check_units([declared[i] for i in protected])
    base = sources[first][0]
    names = {(node.alias_or_name.lower()): table for (node, _), table in zip(sources, declared)}
    if len(names) != len(sources):
        raise NotSupported("name each table of the join once (give the same table two "
                           "aliases)")
    protected_alias = base.alias_or_name.lower()
    order = [sources[i][0].alias_or_name.lower() for i in protected]
    conditions: dict[str, list[tuple[str, str]]] = {name: [] for name in names
                                                   if name != protected_alias}
    links: dict[str, list[tuple[str, str, str, str]]] = {name: [] for name in order}
    filters = []  # an inner join's other ON conditions: filters, as in WHERE
    own_filters: dict[str, list[exp.Expression]] = {}  # a LEFT-joined protected table's
    position = {node.alias_or_name.lower(): i for i, (node, _) in enumerate(sources)}
    for node, join in sources[1:]:
        own = node.alias_or_name.lower() if join.args.get("side") else None
        pairs, between, chained, others = _equalities(join.args.get("on"), protected_alias,
                                                      order, names, own)
        for pair in pairs:
            conditions[pair[0]].append(pair[1:])
        for pair in chained:  # on the later public table, the earlier's column as joined
            early, late = sorted((pair[:2], pair[2:]), key=lambda side: position[side[0]])
            if late[0] == node.alias_or_name.lower():
                conditions[late[0]].append((f"{early[0]}.{early[1]}", late[1]))
            elif own is None:  # in another table's inner ON: a filter, as in WHERE
                filters.append(exp.column(early[1], table=early[0]).eq(
                    exp.column(late[1], table=late[0])))
            else:
                raise NotSupported(f"a LEFT JOIN's ON names its own table and ones joined "
                                   f"before it, not {late[0]}: {ALLOWED}")
        for pair in between:  # on the later of the two protected tables
            later = max(pair[0], pair[2], key=order.index)
            links[later].append(pair if pair[0] == later else (*pair[2:], *pair[:2]))
        if own in order:  # a LEFT join's conditions on its own protected table's columns
            own_filters[own] = others
        else:
            filters += others
    found = [_protected_join(alias, names, order, links[alias],
                             bool(join is not None and join.args.get("side")),
                             own_filters.get(alias, []))
             for alias, (_, join) in zip(order[1:], [sources[i] for i in protected[1:]])]
    for index, (node, join) in enumerate(sources):
        if index in protected:
            continue
        alias, table = node.alias_or_name.lower(), declared[index]
        pairs = tuple(conditions[alias])
        left = bool(join is not None and join.args.get("side"))
        bounded = table.join_keys
        matched = {public_column for _, public_column in pairs}
        keys = sorted((most, key) for key, most in bounded.items() if set(key) <= matched)
        if not keys:
            plural = "s" if len(bounded) > 1 else ""
            kind = "unique" if set(bounded.values()) == {1} else "declared"
            every = " (each of its columns)" if any(len(key) > 1 for key in bounded) else ""
            raise NotSupported(f"the join with {table.name} must match its {kind} key{plural} "
                               f"{', '.join(map(key_text, bounded))}{every} to a column of a "
                               f"protected table or of a public table joined before it "
                               f"(another join may count a protected row more often than the "
                               f"rules bound): {ALLOWED}")
        found.append(Join(table, alias, pairs, keys[0][1], left, multiplicity=keys[0][0]))
    alone = select if select is not given else select.copy()  # explicit_joins': its own
    alone.set("joins", None)
    alone.set("from_", exp.From(this=base.copy()))
    where = alone.args.get("where")  # the copy's: moved under the filters, not copied again
    if filters:
        alone.set("where", exp.Where(this=exp.and_(*(f.copy() for f in filters),
                                                   *([where.this] if where else []),
                                                   copy=False)))
    return alone, tuple(found)


def _protected_join(alias: str, names: dict[str, Table], order: list[str],
                    equalities: list[tuple[str, str, str, str]], left: bool,
                    own: list[exp.Expression]) -> Join:
    """The join of the protected table ``alias`` with those before it in ``order``:
    along a declared link when one of ``equalities`` (its column, the earlier alias,
    that one's column) is one, else on the unit. Every such join also equates the two
    tables' units (derived ones included), so each joined row holds records of one
    unit (docs/privacy.md §3.13); a link makes one side's row determine the other's:
    ``link`` says which ("referenced": this table's row is the one the earlier row
    names; "referencing": this row names the earlier one, ``determines`` its index).
    ``own``: a LEFT join's ON conditions on this table's columns alone (TPC-H Q13's
    ``o_comment NOT LIKE …``), checked as a WHERE is: the rows it reads."""
    table = names[alias]
    base = order[0]

    def named(other: str, column: str) -> str:  # a column of the joined relation
        return column if other == base else f"{other}.{column}"

    kinds = [(_link_kind(table, mine, names[other], theirs), mine, other, theirs)
             for _, mine, other, theirs in equalities]
    chosen = next((found for found in kinds if found[0] is not None),
                  kinds[0] if kinds else None)
    if chosen is None:
        earlier = names[order[0]]
        raise NotSupported(f"protected tables join on their privacy unit or along a "
                           f"declared link only: {unit_allowed(earlier, table)}")
    kind, mine, other, theirs = chosen
    if left and (len(equalities) > 1 or kind == "referencing"):
        raise NotSupported("a LEFT JOIN of two protected tables is ON their privacy units, or "
                           "on the link from the first to the second, only; filter with "
                           f"WHERE: {unit_allowed(names[other], table)}")
    unit_pair = (named(other, names[other].privacy_unit), table.privacy_unit)
    read = None
    if own:
        def column_of(column: exp.Column) -> str:
            return _column_of(column, table)

        read = check_predicate(exp.and_(*own, copy=True), table, column_of, "the LEFT JOIN's ON")
    if kind is None:
        return Join(table, alias, (unit_pair,), (table.privacy_unit,), left, True, read=read)
    return Join(table, alias, (unit_pair, (named(other, theirs), mine)), (table.privacy_unit,),
                left, True, link=kind,
                determines=order.index(other) if kind == "referencing" else None, read=read)


def _link_kind(table: Table, column: str, other: Table, theirs: str) -> str | None:
    """"referencing" when ``table.column = other.theirs`` is ``table``'s declared link to
    ``other``, "referenced" when it is ``other``'s to ``table``, else None (an equality
    of the two units)."""
    if table.link and (table.link.column, table.link.table, table.link.key) == (
            column, other.name, theirs):
        return "referencing"
    if other.link and (other.link.column, other.link.table, other.link.key) == (
            theirs, table.name, column):
        return "referenced"
    return None


def _check_units(tables: list[Table]) -> None:
    """Protected tables join only when all have a unit (their own column, or one through
    a link) of the same identity: its values then name the same people in all, and one
    unit's joined rows are its own."""
    for table in tables:
        if table.privacy_unit is None:
            other = next(t for t in tables if t is not table)
            raise NotSupported(f"{table.name} has no privacy_unit (row-level privacy), so it "
                               "joins no other protected table; protected tables join "
                               f"on the privacy unit they share: {unit_allowed(other, table)}")
    for table in tables[1:]:
        if table.unit_identity != tables[0].unit_identity:
            raise NotSupported(f"{tables[0].name} and {table.name} have different privacy "
                               f"units ({tables[0].unit_identity}, {table.unit_identity}); "
                               "protected tables join only when their units name the same "
                               "people (the same privacy_unit, or unit_of, or unit_via)")


def declared_table(node: exp.Expression, rules: Rules) -> Table:
    """The rules' table a FROM, JOIN or EXISTS names; refused when it names none (or a
    schema other than the default)."""
    if not isinstance(node, exp.Table) or not node.name:
        raise NotSupported(f"a join takes tables, not subqueries or functions: {ALLOWED}")
    table = rules.table(node.name)
    if table is None:
        raise UnknownTable(f"table {node.name} is not available; the rules declare: "
                           f"{', '.join(sorted(rules.tables)) or 'no tables'}")
    if node.args.get("db") and node.text("db").lower() not in ("public", "main"):
        raise UnknownTable(f"schema {node.text('db')} is not available; use {table.name}")
    return table


def _check_kind(join: exp.Join, allowed: str) -> None:
    side, kind = join.args.get("side"), (join.args.get("kind") or "").upper()
    if join.args.get("method") or join.args.get("using"):
        what = "NATURAL" if join.args.get("method") else "USING"
        raise NotSupported(f"{what} joins are not supported; name the columns: {allowed}")
    if side and side.upper() != "LEFT":
        raise NotSupported(f"{side.upper()} joins are not supported (they keep rows that are "
                           f"not the protected table's); use [INNER] JOIN or LEFT JOIN: "
                           f"{allowed}")
    if kind not in ("", "INNER", "OUTER") or join.args.get("on") is None:
        what = f"{kind} joins" if kind else "joins without ON (FROM a, b)"
        raise NotSupported(f"{what} are not supported; join on equal columns: {allowed}")


def _equalities(on: exp.Expression, protected: str, order: list[str],
                names: dict[str, Table], own: str | None
                ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str, str]],
                           list[tuple[str, str, str, str]], list[exp.Expression]]:
    """(joined alias, protected column, its column) of each ON equality that joins a
    public table to a column of a protected table (a joined protected table's named as
    in the joined plan, ``alias.column``); (alias, column, alias, column) of each
    equality of two protected tables' units or declared link; the same of each equality
    of two public tables' columns (a chain: ``s.s_nationkey = n.n_nationkey``); and the
    other ON conditions (filters, as in WHERE: an inner join's only). ``own``: an outer
    join's own alias, the only joined table its ON may name besides the earlier ones."""
    while isinstance(on, exp.Paren):
        on = on.this
    mine = set(order)
    found, between, chained, others = [], [], [], []
    for condition in on.flatten() if isinstance(on, exp.And) else [on]:
        while isinstance(condition, exp.Paren):
            condition = condition.this
        if isinstance(condition, exp.NullSafeEQ) and all(
                isinstance(side, exp.Column) and side.table
                for side in (condition.this, condition.expression)):
            raise NotSupported(f"IS NOT DISTINCT FROM joining two tables is not supported (a "
                               f"NULL would join every NULL, which no key does); write "
                               f"ON {condition.this.sql()} = {condition.expression.sql()}")
        sides = (condition.this.unnest(), condition.expression.unnest()) if isinstance(
            condition, exp.EQ) else ()  # ("people".person_id) = ("visits".person_id): Lightdash
        aliases = [s.table.lower() for s in sides if isinstance(s, exp.Column)]
        both = (len(aliases) == 2 and all(aliases) and set(aliases) <= mine
                and aliases[0] != aliases[1])
        if both and (_unit_pair(sides, names) or _link_kind(
                names[aliases[0]], sides[0].name.lower(), names[aliases[1]],
                sides[1].name.lower())):
            if own is not None and own not in aliases:
                raise NotSupported("a LEFT JOIN's ON names its own table and an earlier "
                                   f"one: {ALLOWED}")
            between.append((aliases[0], sides[0].name.lower(), aliases[1],
                            sides[1].name.lower()))
            continue
        if (len(aliases) == 2 and all(aliases) and aliases[0] != aliases[1]
                and set(aliases) <= names.keys() and not mine & set(aliases)):
            if own is not None and own not in aliases:
                raise NotSupported("a LEFT JOIN's ON names its own public table and one "
                                   f"joined before it: {ALLOWED}")
            pair = (aliases[0], _column_of(sides[0], names[aliases[0]]), aliases[1],
                    _column_of(sides[1], names[aliases[1]]))
            _check_types(names[pair[0]], pair[1], names[pair[2]], pair[3])
            chained.append(pair)
            continue
        if own is not None and own in mine:
            if all(column.table.lower() == own for column in condition.find_all(exp.Column)):
                others.append(condition)  # the rows of the LEFT-joined table it reads
                continue
            first = names[order[0]]
            raise NotSupported("a LEFT JOIN of two protected tables is ON their privacy units "
                               "or their declared link, and conditions on the joined table's "
                               "own columns, only; filter with WHERE: "
                               f"{unit_allowed(first, names[own])}")
        if not (len(aliases) == 2 and all(aliases) and len(mine & set(aliases)) == 1):
            if own is not None:
                raise NotSupported("a LEFT JOIN's ON equates a protected column with a "
                                   "public one, both qualified (p.region = r.code); filter "
                                   f"with WHERE: {ALLOWED}")
            others.append(condition)
            continue
        unknown = [a for a in aliases if a not in names]
        if unknown:
            raise UnknownTable(f"no table {unknown[0]} in this query's FROM and JOIN")
        inside, outside = (sides[0], sides[1]) if aliases[0] in mine else sides[::-1]
        alias, inner = outside.table.lower(), inside.table.lower()
        if own is not None and alias != own:
            raise NotSupported("a LEFT JOIN's ON names its own public table and the "
                               f"protected one: {ALLOWED}")
        mine_name, theirs_name = _column_of(inside, names[inner]), _column_of(outside,
                                                                                names[alias])
        _check_types(names[inner], mine_name, names[alias], theirs_name)
        found.append((alias, mine_name if inner == protected else f"{inner}.{mine_name}",
                      theirs_name))
    return found, between, chained, others


def _check_types(one: Table, mine: str, other: Table, theirs: str) -> None:
    first, second = one.columns[mine], other.columns[theirs]
    if first.type != second.type and not (first.numeric and second.numeric):
        raise NotSupported(f"the join compares {one.name}.{mine} ({first.type}) with "
                           f"{other.name}.{theirs} ({second.type}); join columns of the "
                           "same type")


def _unit_pair(sides, names: dict[str, Table]) -> bool:
    """Whether two qualified columns are their tables' own privacy units (a unit
    derived through a link is no column an analyst can name)."""
    return all(names[side.table.lower()].link is None
               and side.name.lower() == names[side.table.lower()].privacy_unit
               for side in sides)


def _column_of(column: exp.Column, table: Table) -> str:
    name = column.name.lower()
    if name not in table.columns:
        raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                            f"{', '.join(table.columns) or 'none'}")
    return name


def joined_table(table: Table, joins: tuple[Join, ...]) -> Table:
    """The protected table with every joined table's declared columns added, named
    ``alias.column`` (for public tables, the row-by-row map the join is). With other
    protected tables joined on the unit or along links, the joined relation is
    user-level on that unit: group privacy covers the largest ``group_size`` of them,
    and under DP one unit contributes at most the product of the ``max_rows_per_unit``
    of the tables whose rows multiply (``unit_sources``; None when one declares none)."""
    if not joins:
        return table
    columns = dict(table.columns)
    group_size = table.group_size
    for join in joins:
        for name, column in join.table.columns.items():
            columns[join.column_name(name)] = JoinedColumn(
                join.column_name(name), column.type, column.lower, column.upper, column.keys,
                column.public or not join.protected, column.declared_resolution,
                column.time_domain, join=join.alias, source=name, protected=join.protected,
                stored=column.stored)
        if join.protected:
            group_size = max(group_size, join.table.group_size)
    bounds = [source.max_rows_per_unit for source, _ in unit_sources(table, joins)]
    max_rows = None if None in bounds else math.prod(bounds)
    return replace(table, group_size=group_size, max_rows_per_unit=max_rows,
                   columns=MappingProxyType(columns))


def resolver(table: Table, protected_alias: str, joins: tuple[Join, ...]):
    """Column → its name among ``table``'s columns (a joined one as ``alias.column``):
    qualified by the protected table's alias or name, by a joined table's, or
    unqualified when exactly one table of the join declares it. The privacy unit of a
    protected table joined on it (inner) is the first table's: the same value."""
    by_alias = {join.alias: join for join in joins}
    same_unit = {join.alias: join.table.privacy_unit for join in joins
                 if join.protected and not join.left}

    def resolve(column: exp.Column) -> str:
        qualifier = column.table.lower()
        name = column.name if column.name in table.columns else column.name.lower()
        if qualifier in same_unit and name.lower() == same_unit[qualifier]:
            if table.privacy_unit in table.columns:  # the same value, named as the first's
                return table.privacy_unit
            if name.lower() == table.privacy_unit:
                return resolve(exp.column(name, table=protected_alias))
        if qualifier in by_alias:
            join = by_alias[qualifier]
            if name.lower() not in join.table.columns:
                raise UnknownColumn(f"column {name} is not declared for {join.table.name}; "
                                    f"declared: {', '.join(join.table.columns)}")
            return join.column_name(name.lower())
        if qualifier and qualifier not in (protected_alias, table.name):
            raise UnknownTable(f'missing FROM-clause entry for table "{qualifier}": column '
                               f"{column.sql()} does not belong to a table of this query")
        public = [join for join in by_alias.values() if name.lower() in join.table.columns
                  and same_unit.get(join.alias) != name.lower()]
        own = name in table.columns and not isinstance(table.columns[name], JoinedColumn)
        if not qualifier and own + len(public) > 1:
            raise AmbiguousColumn(f'column reference "{name}" is ambiguous (more than one '
                                  "table of the join has it); qualify it with its table's "
                                  "alias")
        if not qualifier and public and not own:
            return public[0].column_name(name.lower())
        if not own:
            declared = [c for c, spec in table.columns.items()
                        if not isinstance(spec, JoinedColumn)]
            raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                                f"{', '.join(declared)}")
        return name

    return resolve

