"""Joins of one protected table with public tables on a unique key (issue 18, item 1).

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

Allowed: ``FROM protected [AS p] [INNER | LEFT [OUTER]] JOIN public [AS r] ON p.col =
r.key [AND p.col2 = r.col3 …]`` for one or more public tables, each matched on at
least one unique key; with only inner joins the tables may come in any order, and the
other conditions of their ON clauses are filters, checked as WHERE conditions are. Public
columns may be used in WHERE and GROUP BY (their keys then come from the public table
itself); aggregates take columns of the protected table. Everything else is refused in
one line naming this form: RIGHT, FULL, CROSS, NATURAL and USING joins, a public table
on the preserving side of an outer join, a join on a column not declared unique, ON
conditions other than equalities of a protected and a public column, and joins of two
protected tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from sqlglot import exp

from proxy.errors import NotSupported, UnknownColumn, UnknownTable
from proxy.rules import Column, Rules, Table

ALLOWED = ("FROM protected p [LEFT] JOIN public r ON p.col = r.key, where the rules declare "
           "r's key unique ([tables.r] unique = [\"key\"])")


@dataclass(frozen=True)
class PublicJoin:
    """One public table joined many-to-one: ``pairs`` of (protected column, public
    column) are equated, ``key`` (one of them) is declared unique; ``left``: protected
    rows without a match stay, with NULL public columns."""

    table: Table
    alias: str
    pairs: tuple[tuple[str, str], ...]
    key: str
    left: bool

    def column_name(self, column: str) -> str:
        """The public column's name among the plan's columns (``r.name``): a dot never
        occurs in a declared column's name."""
        return f"{self.alias}.{column}"


@dataclass(frozen=True)
class JoinedColumn(Column):
    """A public table's column as a column of the joined plan's table; ``join`` is the
    alias of its public table, ``source`` its name there."""

    join: str = ""
    source: str = ""


def split_joins(select: exp.Select, rules: Rules
                ) -> tuple[exp.Select, tuple[PublicJoin, ...]]:
    """``select`` without its joins (the protected table alone in FROM) and the public
    joins; ``select`` itself and no joins when it has none. Refused (one line naming
    the allowed form) unless every join is a public table's, many-to-one."""
    joins = select.args.get("joins") or []
    if not joins:
        return select, ()
    sources = [(select.args["from_"].this, None), *[(join.this, join) for join in joins]]
    declared = [_declared(node, rules) for node, _ in sources]
    protected = [i for i, table in enumerate(declared) if not table.public]
    if len(protected) > 1:
        raise NotSupported("joins of two protected tables are not supported; join one "
                           f"protected table with public tables: {ALLOWED}")
    if not protected:
        raise NotSupported("this join reads public tables only through functions the proxy "
                           "does not pass through; use columns, comparisons and aggregates")
    first = protected[0]
    outer = [join for _, join in sources[1:] if join.args.get("side")]
    if first != 0 and outer:
        raise NotSupported("a public table on the preserving side of an outer join would "
                           "answer for rows that are not the protected table's; put the "
                           f"protected table first: {ALLOWED}")
    for _, join in sources[1:]:
        _check_kind(join)
    for table in declared:
        if table.public and not table.unique:
            raise NotSupported(f"a join with the public table {table.name} needs a key the "
                               f"rules declare unique ([tables.{table.name}] unique = "
                               f"[\"key\"]), so that no protected row is counted twice: "
                               f"{ALLOWED}")
    base = sources[first][0]
    names = {(node.alias_or_name.lower()): table for (node, _), table in zip(sources, declared)}
    if len(names) != len(sources):
        raise NotSupported("name each table of the join once (give the same table two "
                           "aliases)")
    protected_alias = base.alias_or_name.lower()
    conditions: dict[str, list[tuple[str, str]]] = {name: [] for name in names
                                                   if name != protected_alias}
    filters = []  # an inner join's other ON conditions: filters, as in WHERE
    for node, join in sources[1:]:
        own = node.alias_or_name.lower() if join.args.get("side") else None
        pairs, others = _equalities(join.args.get("on"), protected_alias, names, own)
        for pair in pairs:
            conditions[pair[0]].append(pair[1:])
        filters += others
    public = []
    for index, (node, join) in enumerate(sources):
        if index == first:
            continue
        alias, table = node.alias_or_name.lower(), declared[index]
        pairs = tuple(conditions[alias])
        keys = [public_column for _, public_column in pairs if public_column in table.unique]
        if not keys:
            plural = "s" if len(table.unique) > 1 else ""
            raise NotSupported(f"the join with {table.name} must match its unique key{plural} "
                               f"{', '.join(table.unique)} to a column of the protected table "
                               f"(another join may count a protected row twice): {ALLOWED}")
        left = bool(join is not None and join.args.get("side"))
        public.append(PublicJoin(table, alias, pairs, keys[0], left))
    alone = select.copy()
    alone.set("joins", None)
    alone.set("from_", exp.From(this=base.copy()))
    where = select.args.get("where")
    if filters:
        alone.set("where", exp.Where(this=exp.and_(*filters, *([where.this] if where else []),
                                                   copy=True)))
    return alone, tuple(public)


def _declared(node: exp.Expression, rules: Rules) -> Table:
    if not isinstance(node, exp.Table) or not node.name:
        raise NotSupported(f"a join takes tables, not subqueries or functions: {ALLOWED}")
    table = rules.table(node.name)
    if table is None:
        raise UnknownTable(f"table {node.name} is not available; the rules declare: "
                           f"{', '.join(sorted(rules.tables)) or 'no tables'}")
    if node.args.get("db") and node.text("db").lower() not in ("public", "main"):
        raise UnknownTable(f"schema {node.text('db')} is not available; use {table.name}")
    return table


def _check_kind(join: exp.Join) -> None:
    side, kind = join.args.get("side"), (join.args.get("kind") or "").upper()
    if join.args.get("method") or join.args.get("using"):
        what = "NATURAL" if join.args.get("method") else "USING"
        raise NotSupported(f"{what} joins are not supported; name the columns: {ALLOWED}")
    if side and side.upper() != "LEFT":
        raise NotSupported(f"{side.upper()} joins are not supported (they keep rows that are "
                           f"not the protected table's); use [INNER] JOIN or LEFT JOIN: "
                           f"{ALLOWED}")
    if kind not in ("", "INNER", "OUTER") or join.args.get("on") is None:
        what = f"{kind} joins" if kind else "joins without ON (FROM a, b)"
        raise NotSupported(f"{what} are not supported; join on equal columns: {ALLOWED}")


def _equalities(on: exp.Expression, protected: str, names: dict[str, Table],
                own: str | None) -> tuple[list[tuple[str, str, str]], list[exp.Expression]]:
    """(public alias, protected column, public column) of each ON equality, and the
    other ON conditions (filters, as in WHERE: an inner join's only); ``own``: a LEFT
    join's public alias, the only public table its ON may name."""
    while isinstance(on, exp.Paren):
        on = on.this
    found, others = [], []
    for condition in on.flatten() if isinstance(on, exp.And) else [on]:
        while isinstance(condition, exp.Paren):
            condition = condition.this
        sides = (condition.this, condition.expression) if isinstance(condition, exp.EQ) \
            else ()
        aliases = [s.table.lower() for s in sides if isinstance(s, exp.Column)]
        if not (len(aliases) == 2 and all(aliases) and aliases.count(protected) == 1):
            if own is not None:
                raise NotSupported("a LEFT JOIN's ON equates a protected column with a "
                                   "public one, both qualified (p.region = r.code); filter "
                                   f"with WHERE: {ALLOWED}")
            others.append(condition)
            continue
        unknown = [a for a in aliases if a not in names]
        if unknown:
            raise UnknownTable(f"no table {unknown[0]} in this query's FROM and JOIN")
        inside, outside = (sides[0], sides[1]) if aliases[0] == protected else sides[::-1]
        alias = outside.table.lower()
        if own is not None and alias != own:
            raise NotSupported("a LEFT JOIN's ON names its own public table and the "
                               f"protected one: {ALLOWED}")
        found.append((alias, _column_of(inside, names[protected]),
                      _column_of(outside, names[alias])))
    protected_table = names[protected]
    for alias, inside, outside in found:
        mine, theirs = protected_table.columns[inside], names[alias].columns[outside]
        if mine.type != theirs.type and not (mine.numeric and theirs.numeric):
            raise NotSupported(f"the join compares {protected_table.name}.{inside} "
                               f"({mine.type}) with {names[alias].name}.{outside} "
                               f"({theirs.type}); join columns of the same type")
    return found, others


def _column_of(column: exp.Column, table: Table) -> str:
    name = column.name.lower()
    if name not in table.columns:
        raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                            f"{', '.join(table.columns) or 'none'}")
    return name


def joined_table(table: Table, joins: tuple[PublicJoin, ...]) -> Table:
    """The protected table with every public table's declared columns added, named
    ``alias.column`` (the row-by-row map the join is)."""
    if not joins:
        return table
    columns = dict(table.columns)
    for join in joins:
        for name, column in join.table.columns.items():
            columns[join.column_name(name)] = JoinedColumn(
                join.column_name(name), column.type, column.lower, column.upper, column.keys,
                True, column.declared_resolution, column.time_domain, join.alias, name)
    return Table(table.name, table.public, table.privacy_unit, table.group_size,
                 table.max_rows_per_unit, MappingProxyType(columns),
                 table.individual_queries, table.unique)


def resolver(table: Table, protected_alias: str, joins: tuple[PublicJoin, ...]):
    """Column → its name among ``table``'s columns (a public one as ``alias.column``):
    qualified by the protected table's alias or name, by a public table's, or
    unqualified when exactly one table of the join declares it."""
    by_alias = {join.alias: join for join in joins}

    def resolve(column: exp.Column) -> str:
        qualifier = column.table.lower()
        name = column.name if column.name in table.columns else column.name.lower()
        if qualifier in by_alias:
            join = by_alias[qualifier]
            if name.lower() not in join.table.columns:
                raise UnknownColumn(f"column {name} is not declared for {join.table.name}; "
                                    f"declared: {', '.join(join.table.columns)}")
            return join.column_name(name.lower())
        if qualifier and qualifier not in (protected_alias, table.name):
            raise UnknownColumn(f"column {column.sql()} does not belong to a table of this "
                                "query")
        public = [join for join in by_alias.values() if name.lower() in join.table.columns]
        own = name in table.columns and not isinstance(table.columns[name], JoinedColumn)
        if not qualifier and own + len(public) > 1:
            raise UnknownColumn(f"column {name} is ambiguous (more than one table of the "
                                "join has it); qualify it with its table's alias")
        if not qualifier and public and not own:
            return public[0].column_name(name.lower())
        if not own:
            declared = [c for c, spec in table.columns.items()
                        if not isinstance(spec, JoinedColumn)]
            raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                                f"{', '.join(declared)}")
        return name

    return resolve


def protected_only(resolve, table: Table):
    """``resolve`` refusing public columns: aggregates take the protected table's."""

    def aggregated(column: exp.Column) -> str:
        name = resolve(column)
        if isinstance(table.columns.get(name), JoinedColumn):
            raise NotSupported(f"aggregates take columns of the protected table {table.name}; "
                               f"public columns ({column.sql()}) may be used in WHERE, GROUP BY "
                               "and ON")
        return name

    return aggregated
