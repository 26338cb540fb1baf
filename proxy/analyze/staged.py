"""Scalar subqueries over protected tables as releases of their own (issue 34, TPC-H Q22).

"Who has more than the average balance"::

    SELECT COUNT(*) FROM customer
    WHERE c_acctbal > (SELECT AVG(c_acctbal) FROM customer WHERE c_acctbal > 0)

The subquery is an aggregate of other people's rows: it is answered first, as if sent
alone (charged, with its noise), and its released value then stands in the statement as
a constant, which is answered in turn (charged). The second release is chosen after the
first (adaptive composition): the two together cost the sum of their losses, which the
ledger records (one row each). What is answered: a subquery with one output and no
GROUP BY, over tables of its own (not correlated with the outer query: a column
qualified by an outer table is refused as before), of a numeric value, as an operand of
a comparison (=, <>, <, <=, >, >=) or a BETWEEN bound in the WHERE. Anything else keeps
the refusal of ``semi_joins.refuse_subqueries``.

Before anything is charged the statement is analysed with each subquery's place held
by 0: a comparison with a number analyses alike whatever the number (the released
value is a finite double), so the statement answered with the value is refused for no
reason that 0 did not show.

A subquery correlated with a public table of the outer query (TPC-H Q17: "line items
below a fifth of their part's average quantity")::

    … FROM lineitem, part WHERE p_partkey = l_partkey AND p_brand = 'Brand#23'
      AND l_quantity < (SELECT 0.2 * AVG(l_quantity) FROM lineitem
                        WHERE l_partkey = p_partkey)

is the same release grouped by the outer columns it names, over its own tables joined
with that public table and the outer WHERE's conditions on that table alone (which
restrict its keys, ``proxy.engine.public_keys_sql``): ``SELECT p_partkey, 0.2 *
AVG(l_quantity) FROM lineitem, part WHERE l_partkey = p_partkey AND p_brand =
'Brand#23' GROUP BY p_partkey``. Its released row per key then stands in the
comparison as one disjunct per key, ``(p_partkey = k AND l_quantity < v_k) OR …``
(no key: FALSE); held, before any debit, as ``(p_partkey IS NOT NULL AND l_quantity <
0)``. Correlated only through equalities of its own columns with the public table's
(top-level AND terms of its WHERE), of an int, float or text key.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from proxy.errors import ProxyError, QueryCanceled
from proxy.rules import Rules, Table
from proxy.vocabulary import QueryPlan, StagedPlan

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def staged_plan(select: exp.Select, rules: Rules, analyse: Callable[[exp.Expression], object],
                canonical: Callable[[exp.Expression], str]) -> StagedPlan | None:
    """The staged plan of ``select`` when its WHERE compares with scalar subqueries over
    protected tables that can be answered first; None otherwise (the caller refuses
    them as before). ``analyse`` analyses a statement."""
    where = select.args.get("where")
    if where is None:
        return None
    found = [node for node in where.find_all(exp.Subquery) if _protected(node, rules)]
    if not found or not all(_answerable_place(node) for node in found):
        return None
    outer = _tables_of(select, rules)
    stages, keyed = [], []
    for node in found:
        columns = _correlation(node, outer, rules)
        if columns is None:
            return None
        query = _grouped(node, columns, select, outer, rules) if columns else node.this.copy()
        try:
            plan = analyse(query)
        except QueryCanceled:
            raise  # a cancel during the analysis stops it (57014), whatever it analysed
        except ProxyError:
            return None  # refused as a subquery of the statement, as before
        if not _numbers(plan, query, len(columns)):
            return None
        stages.append((canonical(query), plan))
        keyed.append(tuple(columns))
    held = _with_values(select, [HELD] * len(found), keyed, rules)
    outer_plan = analyse(held)  # refused here, before any debit, for what 0 shows
    if not isinstance(outer_plan, QueryPlan):
        return None
    return StagedPlan(tuple(stages), select.copy(), outer_plan, tuple(keyed))


# A correlated stage's place before its release: its comparison with 0, for any key
HELD = object()


def with_values(staged: StagedPlan, values: list, rules: Rules) -> exp.Select:
    """The statement with each subquery replaced by its released value, in order (a
    correlated one's value: its released rows, keys first)."""
    return _with_values(staged.statement, values, staged.keyed, rules)


def _with_values(select: exp.Select, values: list, keyed: list | tuple, rules: Rules
                 ) -> exp.Select:
    """A copy of ``select`` with its WHERE's subqueries over protected tables replaced
    by ``values``, in order; a correlated one's (``keyed``: its outer columns) by the
    disjunction of its comparison per released key, or the comparison with 0 under
    those columns' IS NOT NULL (``HELD``)."""
    statement = select.copy()
    found = [node for node in statement.args["where"].find_all(exp.Subquery)
             if _protected(node, rules)]
    for node, value, columns in zip(found, values, keyed):
        if not columns:
            node.replace(_number(0 if value is HELD else value))
            continue
        comparison = _comparison(node)
        template = comparison.copy()
        if value is HELD:
            cases = [exp.and_(*(c.copy().is_(exp.null()).not_() for c in columns),
                              _at(template, 0, rules))]
        else:
            cases = [exp.and_(*(c.copy().eq(_key(k)) for c, k in zip(columns, row)),
                              _at(template, row[len(columns)], rules)) for row in value]
        comparison.replace(exp.paren(exp.or_(*cases)) if cases else exp.false())
    return statement


def _at(comparison: exp.Expression, value: float | int | None, rules: Rules
        ) -> exp.Expression:
    """A copy of a comparison with its one subquery over protected tables replaced by
    ``value``."""
    done = comparison.copy()
    for node in [n for n in done.find_all(exp.Subquery) if _protected(n, rules)]:
        node.replace(_number(value))
    return exp.paren(done)


def _comparison(node: exp.Subquery) -> exp.Expression:
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return parent


def _key(value: int | float | str) -> exp.Expression:
    return exp.Literal.string(value) if isinstance(value, str) else _number(value)


def _number(value: float | int | None) -> exp.Expression:
    """A released number as the parser writes one (a negative as a minus sign before
    it; NULL where the release had none)."""
    if value is None:
        return exp.Null()
    literal = exp.Literal.number(repr(abs(value)))
    return exp.Neg(this=literal) if value < 0 else literal


def _protected(node: exp.Subquery, rules: Rules) -> bool:
    """Whether the subquery reads a protected table (outside FROM and EXISTS)."""
    if isinstance(node.parent, (exp.From, exp.Join)) or not isinstance(node.this, exp.Select):
        return False
    return any((declared := rules.table(table.name)) is not None and not declared.public
               for table in node.this.find_all(exp.Table))


def _answerable_place(node: exp.Subquery) -> bool:
    """An operand of a comparison or a BETWEEN bound, nothing else (a divisor or an IN
    list would analyse differently for some values)."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return isinstance(parent, _COMPARISONS)


def _numbers(plan: object, query: exp.Select, keys: int) -> bool:
    """Grouped by the ``keys`` outer columns alone (none: no GROUP BY), then one numeric
    aggregate, or such an aggregate in arithmetic with numbers (``0.2 * AVG(x)``)."""
    if not isinstance(plan, QueryPlan) or len(plan.group_by) != keys \
            or len(plan.outputs) != keys + 1 or plan.outputs[keys].aggregate is None:
        return False
    if plan.post is not None and not (keys and _arithmetic(query.selects[-1])):
        return False
    aggregate = plan.aggregates[plan.outputs[keys].aggregate]
    kind = aggregate.kind.row.output
    if kind == "column":
        kind = plan.table.columns[aggregate.column].type
    return kind in ("int", "float")


_ARITHMETIC = (exp.Mul, exp.Div, exp.Add, exp.Sub, exp.Neg, exp.Paren, exp.Alias)


def _arithmetic(item: exp.Expression) -> bool:
    """Numbers and one aggregate combined by + − × ÷ alone."""
    aggregates = list(item.find_all(exp.AggFunc))
    if len(aggregates) != 1:
        return False
    inside = set(map(id, aggregates[0].walk()))
    return all(id(n) in inside or isinstance(n, _ARITHMETIC)
               or (isinstance(n, exp.Literal) and not n.is_string) for n in item.walk())


def _tables_of(query: exp.Select, rules: Rules) -> dict[str, Table] | None:
    """The declared tables of a SELECT's own FROM and JOINs by alias (None: one is not
    a declared table)."""
    found = {}
    for source in [query.args.get("from_"), *query.args.get("joins", [])]:
        if source is None:
            continue
        table = source.this
        declared = rules.table(table.name) if isinstance(table, exp.Table) else None
        if declared is None:
            return None
        found[table.alias_or_name.lower()] = declared
    return found


def _correlation(node: exp.Subquery, outer: dict[str, Table] | None, rules: Rules
                 ) -> list[exp.Column] | None:
    """The outer columns a subquery is correlated through, qualified by their table's
    alias ([]: not correlated); None when it names outer columns otherwise than as
    ``own column = public table's column`` terms of its WHERE, or of a non-public
    table, or of a key type other than int, float or text."""
    query = node.this
    own = _tables_of(query, rules)
    if own is None or outer is None:
        return [] if all(_owner(c, own or {}, {}) is None
                         for c in query.find_all(exp.Column)) else None
    named = [(column, _owner(column, own, outer)) for column in query.find_all(exp.Column)]
    aliases = {alias for _, alias in named if alias is not None}
    if not aliases:
        return []
    if len(aliases) != 1 or "?" in aliases or query.find(exp.Subquery) is not None \
            or query.args.get("group") is not None:
        return None
    (alias,) = aliases
    public = outer[alias]
    if not public.public or alias in own:
        return None
    where = query.args.get("where")
    terms = _conjuncts(where.this) if where is not None else []
    columns: dict[str, exp.Column] = {}
    for column, owner in named:
        if owner is None:
            continue
        term = column.parent
        declared = public.columns.get(column.name.lower())
        if not (isinstance(term, exp.EQ) and any(term is t for t in terms)
                and declared is not None
                and declared.type in ("int", "float", "text")
                and all(isinstance(side, exp.Column) for side in (term.this, term.expression))
                and sum(_owner(side, own, outer) is None
                        for side in (term.this, term.expression)) == 1):
            return None
        columns.setdefault(column.name.lower(), exp.column(column.name, table=alias))
    return list(columns.values())


def _owner(column: exp.Column, own: dict[str, Table], outer: dict[str, Table]) -> str | None:
    """The outer table alias a subquery's column names (None: one of its own tables;
    "?": none or several)."""
    if column.table:
        qualifier = column.table.lower()
        return None if qualifier in own else qualifier if qualifier in outer else "?"
    name = column.name.lower()
    if any(name in table.columns for table in own.values()):
        return None
    owners = [alias for alias, table in outer.items() if name in table.columns]
    return owners[0] if len(owners) == 1 else "?" if owners else None


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    while isinstance(condition, exp.Paren):
        condition = condition.this
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _grouped(node: exp.Subquery, columns: list[exp.Column], select: exp.Select,
             outer: dict[str, Table], rules: Rules) -> exp.Select:
    """The correlated subquery as a query of its own: joined with the public table it
    names, under the outer WHERE's conditions on that table alone, grouped by the
    columns it names."""
    alias = columns[0].table
    query = node.this.copy()
    source = next(s.this for s in [select.args["from_"], *select.args.get("joins", [])]
                  if s.this.alias_or_name.lower() == alias)
    query = query.join(source.copy(), copy=False)
    inner = query.args.get("where")
    terms = _conjuncts(inner.this) if inner is not None else []
    for condition in _conjuncts(select.args["where"].this):
        owners = {_owner(c, {}, outer) for c in condition.find_all(exp.Column)}
        if owners == {alias} and condition.find(exp.Subquery) is None:
            qualified = condition.copy()
            for column in qualified.find_all(exp.Column):
                column.set("table", exp.to_identifier(alias))
            terms.append(qualified)
    query.set("where", exp.Where(this=exp.and_(*terms, copy=False)))  # one flat AND
    value = query.selects[-1].copy()
    query.set("expressions", [*(c.copy() for c in columns), value])
    return query.group_by(*(c.copy() for c in columns), copy=False)
