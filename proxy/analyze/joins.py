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

Allowed: ``FROM protected [AS p] [INNER | LEFT [OUTER]] JOIN public [AS r] ON p.col =
r.key [AND p.col2 = r.col3 …]`` for one or more public tables, each matched on at
least one unique or bounded key; with only inner joins the tables may come in any
order, and the other conditions of their ON clauses are filters, checked as WHERE
conditions are. Public columns may be used in WHERE and GROUP BY (their keys then come
from the public table itself); aggregates take columns of the protected table.
Everything else is refused in one line naming this form: RIGHT, FULL, CROSS, NATURAL
and USING joins, a public table on the preserving side of an outer join, a join on a
column declared neither unique nor bounded, ON conditions other than equalities of a
protected and a public column.

Two protected tables (``FROM visits v [LEFT] JOIN people p ON v.person_id =
p.person_id``) join on the privacy unit both declare, inner or LEFT (the first
protected table preserved), alongside public tables as above (also on the second
protected table's columns). The joined relation keeps the first table's privacy unit;
a unit's joined rows are its rows in one table times its rows in the other (LEFT: times
at least one), which the engine bounds per pair of data versions (``proxy.pushdown.
scope.unit_bound_sql``) and DP bounds by the product of the declared
``max_rows_per_unit`` (docs/privacy.md §3.10). Columns of either protected table may
be aggregated, filtered and grouped (by declared keys); an inner join's other ON
conditions are filters. Refused: a join of protected tables on any other column, of
tables without the same declared privacy unit, of more than two protected tables, and
a LEFT join whose ON is more than the unit equality.
"""

from __future__ import annotations

from types import MappingProxyType

from sqlglot import exp

from proxy.analyze.explicit_joins import explicit_joins
from proxy.errors import AmbiguousColumn, NotSupported, UnknownColumn, UnknownTable
from proxy.rules import Rules, Table
from proxy.vocabulary import Join, JoinedColumn

ALLOWED = ("FROM protected p [LEFT] JOIN public r ON p.col = r.key, where the rules declare "
           "r's key unique ([tables.r] unique = [\"key\"]) or bounded (max_rows_per_key)")


def unit_allowed(first: Table, second: Table) -> str:
    """The one join of these two protected tables that is answered."""
    unit = first.privacy_unit or second.privacy_unit or "unit"
    return (f"FROM {first.name} a [LEFT] JOIN {second.name} b ON a.{unit} = b.{unit}, both "
            f"tables declaring privacy_unit = \"{unit}\"")


def split_joins(select: exp.Select, rules: Rules
                ) -> tuple[exp.Select, tuple[Join, ...]]:
    """``select`` without its joins (the first protected table alone in FROM) and the
    joins (a second protected table's first); ``select`` itself and no joins when it
    has none. Refused (one line naming the allowed form) unless every join is a public
    table's, many-to-one, or a second protected table's on the privacy unit. Comma
    joins and unqualified columns are first written out (``explicit_joins``)."""
    select = explicit_joins(select, rules)
    joins = select.args.get("joins") or []
    if not joins:
        return select, ()
    sources = [(select.args["from_"].this, None), *[(join.this, join) for join in joins]]
    declared = [_declared(node, rules) for node, _ in sources]
    protected = [i for i, table in enumerate(declared) if not table.public]
    if len(protected) > 2:
        raise NotSupported("a join reads at most two protected tables, on their privacy unit: "
                           f"{unit_allowed(declared[protected[0]], declared[protected[1]])}")
    if not protected:
        raise NotSupported("this join reads public tables only through functions the proxy "
                           "does not pass through; use columns, comparisons and aggregates")
    first = protected[0]
    outer = [join for _, join in sources[1:] if join.args.get("side")]
    if first != 0 and outer:
        raise NotSupported("a public table on the preserving side of an outer join would "
                           "answer for rows that are not the protected table's; put the "
                           f"protected table first: {ALLOWED}")
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
        _check_units(declared[first], declared[second])
    base = sources[first][0]
    names = {(node.alias_or_name.lower()): table for (node, _), table in zip(sources, declared)}
    if len(names) != len(sources):
        raise NotSupported("name each table of the join once (give the same table two "
                           "aliases)")
    protected_alias = base.alias_or_name.lower()
    other = sources[second][0].alias_or_name.lower() if second is not None else None
    conditions: dict[str, list[tuple[str, str]]] = {name: [] for name in names
                                                   if name != protected_alias}
    filters = []  # an inner join's other ON conditions: filters, as in WHERE
    for node, join in sources[1:]:
        own = node.alias_or_name.lower() if join.args.get("side") else None
        pairs, others = _equalities(join.args.get("on"), protected_alias, other, names, own)
        for pair in pairs:
            conditions[pair[0]].append(pair[1:])
        filters += others
    found = []
    for index, (node, join) in enumerate(sources):
        if index == first:
            continue
        alias, table = node.alias_or_name.lower(), declared[index]
        pairs = tuple(conditions[alias])
        left = bool(join is not None and join.args.get("side"))
        if index == second:
            if not pairs:
                raise NotSupported(f"two protected tables join on their privacy unit only: "
                                   f"{unit_allowed(declared[first], table)}")
            found.insert(0, Join(table, alias, pairs[:1], table.privacy_unit, left, True))
            continue
        bounded = table.join_keys
        keys = sorted((bounded[public_column], public_column) for _, public_column in pairs
                      if public_column in bounded)
        if not keys:
            plural = "s" if len(bounded) > 1 else ""
            kind = "unique" if set(bounded.values()) == {1} else "declared"
            raise NotSupported(f"the join with {table.name} must match its {kind} key{plural} "
                               f"{', '.join(bounded)} to a column of the protected table "
                               f"(another join may count a protected row more often than the "
                               f"rules bound): {ALLOWED}")
        found.append(Join(table, alias, pairs, keys[0][1], left, multiplicity=keys[0][0]))
    alone = select.copy()
    alone.set("joins", None)
    alone.set("from_", exp.From(this=base.copy()))
    where = select.args.get("where")
    if filters:
        alone.set("where", exp.Where(this=exp.and_(*filters, *([where.this] if where else []),
                                                   copy=True)))
    return alone, tuple(found)


def _check_units(first: Table, second: Table) -> None:
    """Two protected tables join only when both declare the same privacy unit: its
    values then name the same people in both, and one unit's joined rows are its own."""
    for table in (first, second):
        if table.privacy_unit is None:
            raise NotSupported(f"{table.name} has no privacy_unit (row-level privacy), so it "
                               "joins no other protected table; two protected tables join "
                               f"on the privacy unit both declare: {unit_allowed(first, second)}")
    if first.privacy_unit != second.privacy_unit:
        raise NotSupported(f"{first.name} and {second.name} declare different privacy units "
                           f"({first.privacy_unit}, {second.privacy_unit}); two protected "
                           "tables join only on the privacy unit both declare (FROM a [LEFT] "
                           "JOIN b ON a.unit = b.unit)")


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


def _equalities(on: exp.Expression, protected: str, other: str | None,
                names: dict[str, Table], own: str | None
                ) -> tuple[list[tuple[str, str, str]], list[exp.Expression]]:
    """(joined alias, protected column, its column) of each ON equality that joins a
    table: a public column equated with a column of a protected table (the second
    protected table's named as in the joined plan, ``alias.column``), or (``other``)
    the second protected table's unit equated with the first's; and the other ON
    conditions (filters, as in WHERE: an inner join's only); ``own``: an outer join's
    own alias, the only joined table its ON may name."""
    while isinstance(on, exp.Paren):
        on = on.this
    mine = {protected} | ({other} if other else set())
    found, others = [], []
    for condition in on.flatten() if isinstance(on, exp.And) else [on]:
        while isinstance(condition, exp.Paren):
            condition = condition.this
        sides = (condition.this, condition.expression) if isinstance(condition, exp.EQ) \
            else ()
        aliases = [s.table.lower() for s in sides if isinstance(s, exp.Column)]
        both = len(aliases) == 2 and all(aliases) and set(aliases) == mine and other
        if both and _unit_pair(sides, names):
            if own is not None and own != other:
                raise NotSupported("a LEFT JOIN's ON names its own table and the protected "
                                   f"one: {ALLOWED}")
            found.append((other, names[protected].privacy_unit, names[other].privacy_unit))
            continue
        if own is not None and own == other:
            raise NotSupported("a LEFT JOIN of two protected tables is ON their privacy units "
                               "only; filter with WHERE: "
                               f"{unit_allowed(names[protected], names[other])}")
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
        mine_column, theirs = names[inner].columns[mine_name], names[alias].columns[theirs_name]
        if mine_column.type != theirs.type and not (mine_column.numeric and theirs.numeric):
            raise NotSupported(f"the join compares {names[inner].name}.{mine_name} "
                               f"({mine_column.type}) with {names[alias].name}.{theirs_name} "
                               f"({theirs.type}); join columns of the same type")
        found.append((alias, mine_name if inner == protected else f"{inner}.{mine_name}",
                      theirs_name))
    return found, others


def _unit_pair(sides, names: dict[str, Table]) -> bool:
    """Whether two qualified columns are their tables' privacy units."""
    return all(side.name.lower() == names[side.table.lower()].privacy_unit for side in sides)


def _column_of(column: exp.Column, table: Table) -> str:
    name = column.name.lower()
    if name not in table.columns:
        raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                            f"{', '.join(table.columns) or 'none'}")
    return name


def joined_table(table: Table, joins: tuple[Join, ...]) -> Table:
    """The protected table with every joined table's declared columns added, named
    ``alias.column`` (for public tables, the row-by-row map the join is). With a second
    protected table joined on the unit, the joined relation is user-level on that unit:
    group privacy covers the larger ``group_size`` of the two, and under DP one unit
    contributes at most the product of their ``max_rows_per_unit`` (None when either
    declares none)."""
    if not joins:
        return table
    columns = dict(table.columns)
    group_size, max_rows = table.group_size, table.max_rows_per_unit
    for join in joins:
        for name, column in join.table.columns.items():
            columns[join.column_name(name)] = JoinedColumn(
                join.column_name(name), column.type, column.lower, column.upper, column.keys,
                column.public or not join.protected, column.declared_resolution,
                column.time_domain, join.alias, name, join.protected)
        if join.protected:
            group_size = max(group_size, join.table.group_size)
            other = join.table.max_rows_per_unit
            max_rows = None if max_rows is None or other is None else max_rows * other
    return Table(table.name, table.public, table.privacy_unit, group_size, max_rows,
                 MappingProxyType(columns), table.individual_queries, table.unique)


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
            return resolve(exp.column(name, table=protected_alias))
        if qualifier in by_alias:
            join = by_alias[qualifier]
            if name.lower() not in join.table.columns:
                raise UnknownColumn(f"column {name} is not declared for {join.table.name}; "
                                    f"declared: {', '.join(join.table.columns)}")
            return join.column_name(name.lower())
        if qualifier and qualifier not in (protected_alias, table.name):
            raise UnknownColumn(f"column {column.sql()} does not belong to a table of this "
                                "query")
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


def protected_only(resolve, table: Table):
    """``resolve`` refusing public columns: aggregates take the protected tables'."""

    def aggregated(column: exp.Column) -> str:
        name = resolve(column)
        joined = table.columns.get(name)
        if isinstance(joined, JoinedColumn) and not joined.protected:
            raise NotSupported(f"aggregates take columns of the protected table {table.name}; "
                               f"public columns ({column.sql()}) may be used in WHERE, GROUP BY "
                               "and ON")
        return name

    return aggregated
