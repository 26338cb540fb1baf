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
by 0: a comparison with a number analyses alike whatever the number (a released value
stands as a finite double, ``_number``), so the statement answered with the value is
refused for no reason that 0 did not show. The comparison is held as ``(… OR TRUE)``
(``(… AND FALSE)`` under NOT, ``_held``), which no key restriction reads: its keys are
every key some value could leave, those it is priced and checked for (``age < 0``
would leave none, and the statement was then answered with the value, unpaid).

**The largest group of a step** (TPC-H Q15, ``top_choice_plan``)::

    WITH revenue AS (SELECT l_suppkey AS supplier_no, SUM(…) AS total_revenue
                     FROM lineitem WHERE … GROUP BY l_suppkey)
    SELECT s_suppkey, s_name, total_revenue FROM supplier, revenue
    WHERE s_suppkey = supplier_no
      AND total_revenue = (SELECT MAX(total_revenue) FROM revenue)

The step's sums are released only as its one group chosen privately (a ``TopChoice``
stage, ``proxy.privacy.top_choice``: the group among the public table's keys, and its
sum): the step grouped by the public table's unique key instead, which the join keeps
anyway. Its released row then stands in the step's place, and the statement, over
public tables and that row only, runs as written (a ``PassthroughPlan``): the MAX of one
row is its value, the join reads the public columns. The candidates are the public
table's keys: a group of the step whose key the public table lacks (in Q15 it would
join nothing) is no candidate.
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
(no key: FALSE); held, before any debit, as ``(p_partkey IS NOT NULL AND (l_quantity <
0 OR TRUE))``. Correlated only through equalities of its own columns with the public table's
(top-level AND terms of its WHERE), of an int, float or text key.

Such a subquery may also stand in the WHERE of a subquery over public tables (TPC-H
Q20)::

    SELECT s_name FROM supplier, nation WHERE s_suppkey IN (
        SELECT ps_suppkey FROM partsupp
        WHERE ps_partkey IN (SELECT p_partkey FROM part WHERE p_name LIKE 'forest%')
          AND ps_availqty > (SELECT 0.5 * SUM(l_quantity) FROM lineitem
                             WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey …))
      AND s_nationkey = n_nationkey AND n_name = 'CANADA'

Its outer table is then that subquery's (partsupp), and the statement with the release
in its place reads public tables only: it runs as written (a ``PassthroughPlan``
``held``), post-processing. A term ``c IN (SELECT k FROM p WHERE …)`` of the outer
WHERE, ``k`` unique in the public ``p``, restricts the release as the inner join with
``p`` on ``k`` does (a semi-join on a unique key), and a correlation column ``c`` is
then grouped by ``p.k``, whose keys that WHERE's terms on ``p`` restrict; with the
other columns of the outer table they are keyed by the combinations the public rows
hold (``QueryPlan.joint``): the 64 (part, supplier) pairs partsupp holds of the 16
forest parts at SF 0.01, not 2,000 × 100.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal

from sqlglot import exp

from proxy.analyze.aggregates import is_aggregate
from proxy.analyze.key_restriction import conjuncts
from proxy.analyze.merge_steps import step_name, steps
from proxy.analyze.semi_joins import public_match
from proxy.errors import NotSupported, ProxyError, QueryCanceled
from proxy.interrupts import checkpoint
from proxy.pgtypes import RULE_TYPES
from proxy.rules import Rules, Table
from proxy.trees import balanced
from proxy.vocabulary import PUBLIC, SUM, PassthroughPlan, QueryPlan, StagedPlan, TopChoice

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def staged_plan(select: exp.Select, rules: Rules,
                analyse: Callable[[exp.Expression, bool], object],
                canonical: Callable[[exp.Expression], str]) -> StagedPlan | None:
    """The staged plan of ``select`` when its WHERE compares with scalar subqueries over
    protected tables that can be answered first; None otherwise (the caller refuses
    them as before). ``analyse`` analyses a statement (False: a stage, whose rows the
    proxy reads; True: the statement answered)."""
    where = select.args.get("where")
    if where is None:
        return None
    found = [node for node in where.find_all(exp.Subquery) if _protected(node, rules)]
    if not found or not all(_answerable_place(node) for node in found):
        return None
    stages, keyed = [], []
    for node in found:
        enclosing = node.parent_select  # the statement, or a subquery over public tables
        outer = _tables_of(enclosing, rules)
        if enclosing is not select and (outer is None or not all(
                table.public for table in outer.values())
                or node.find_ancestor(exp.Where) is not enclosing.args.get("where")):
            return None
        columns = _correlation(node, outer, rules)
        if columns is None or (columns and sum(  # its comparison is rewritten per key
                _protected(n, rules) for n in _comparison(node).find_all(exp.Subquery)) > 1):
            return None
        query = _grouped(node, columns, enclosing, outer, rules) if columns \
            else node.this.copy()
        try:
            plan = analyse(query, False)
        except QueryCanceled:
            raise  # a cancel during the analysis stops it (57014), whatever it analysed
        except ProxyError:
            return None  # refused as a subquery of the statement, as before
        if not _numbers(plan, query, len(columns)):
            return None
        stages.append((canonical(query), plan))
        keyed.append(tuple(columns))
    held = _with_values(select, [HELD] * len(found), keyed, rules)
    outer_plan = analyse(held, True)  # refused here, before any debit, for what 0 shows
    if not isinstance(outer_plan, (QueryPlan, PassthroughPlan)):
        return None
    if isinstance(outer_plan, PassthroughPlan):
        _refuse_failing(held)
    return StagedPlan(tuple(stages), select.copy(), outer_plan, tuple(keyed))


SCALAR = "_idp_sq"  # a select-list subquery's place: the placeholder f":{SCALAR}<i>"
SCALAR_VALUE = "_idp_v"  # the name of its one released column


def scalar_releases(select: exp.Select, rules: Rules) -> tuple[exp.Select, list[exp.Select]]:
    """``select`` with each scalar subquery over protected tables in its select list,
    HAVING or ORDER BY that is a release of its own replaced by a placeholder, and those
    subqueries as statements (their one item named ``SCALAR_VALUE``); ``select`` itself
    and [] when it has none. The share of a total, as analysts write it::

        SELECT department, COUNT(*) * 100.0 / (SELECT COUNT(*) FROM visits) AS pct
        FROM visits GROUP BY department

    is the outer query over two releases, the grouped counts and the total, each as if
    sent alone: post-processing once both are paid (``proxy.analyze.having``). A release
    of its own: uncorrelated, not inside an aggregate's argument (which reads it per
    row), not under IN or EXISTS, without LIMIT or OFFSET (one row, always)."""
    if not _scalar_places(select, rules):
        return select, []
    select = select.copy()
    places: dict[str, int] = {}  # one release for a subquery written twice
    bodies = []
    for node in _scalar_places(select, rules):
        written = node.this.sql()
        if written not in places:
            places[written] = len(bodies)
            body = node.this.copy()
            if len(body.expressions) == 1:
                body.set("expressions", [exp.alias_(body.expressions[0].unalias(),
                                                    SCALAR_VALUE)])
            bodies.append(body)
        node.replace(exp.Placeholder(this=f"{SCALAR}{places[written]}"))
    return select, bodies


def _scalar_places(select: exp.Select, rules: Rules) -> list[exp.Subquery]:
    """The subqueries ``scalar_releases`` takes out of ``select``."""
    places = [select.args.get("having"), select.args.get("order"), *select.expressions]
    found = [node for place in places if place is not None
             for node in place.find_all(exp.Subquery)
             if node.parent_select is select and _protected(node, rules)
             and not isinstance(node.parent, (exp.In, exp.Exists))]
    if not found:
        return []
    outer = _tables_of(select, rules)
    return [node for node in found
            if not any(is_aggregate(above) or isinstance(above, exp.Filter)
                       for above in _between(node, select))
            and not node.this.args.get("limit") and not node.this.args.get("offset")
            and _correlation(node, outer, rules) == []]


def _between(node: exp.Expression, top: exp.Expression):
    """The nodes above ``node`` up to ``top``, not ``top``."""
    node = node.parent
    while node is not None and node is not top:
        yield node
        node = node.parent


# What the public statement of a staged plan may compute: nothing that can fail on a
# row (comparisons, conditions, LIKE, text functions, COUNT/SUM/AVG/MIN/MAX, a CASE);
# it runs after the debit, on the rows the released values keep
_NEVER_FAILS = (
    exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Order,
    exp.Ordered, exp.Limit, exp.Offset, exp.Table, exp.TableAlias, exp.Alias,
    exp.Identifier, exp.Column, exp.Star, exp.Literal, exp.Null, exp.Boolean, exp.Paren,
    exp.Subquery, exp.Exists, exp.In, exp.Not, exp.And, exp.Or, exp.EQ, exp.NEQ, exp.GT,
    exp.GTE, exp.LT, exp.LTE, exp.Between, exp.Is, exp.Like, exp.ILike, exp.Distinct,
    exp.Count, exp.Min, exp.Max, exp.Sum, exp.Avg, exp.DataType, exp.Coalesce,
    exp.Lower, exp.Upper, exp.Length, exp.Trim, exp.Concat, exp.DPipe, exp.Case, exp.If,
    exp.NullSafeEQ, exp.NullSafeNEQ, exp.Var, exp.With, exp.CTE, exp.Union,
)


def _refuse_failing(held: exp.Select) -> None:
    """Refuse (0A000, before the debit) a public statement of a staged plan that computes
    what can fail on a row: it runs after the debit on the rows the released values
    keep, so its failure would be charged (``1 / (length(name) - 5)``, ``CAST(name AS
    int)``: the review of 2026-11-29). A cast to text cannot fail."""
    for node in held.walk():
        if isinstance(node, exp.Subquery) and not isinstance(
                node.parent, (exp.In, exp.Exists, exp.From, exp.Join)):
            raise NotSupported("a scalar subquery over public tables could fail on a row "
                               "after the subquery's value is paid for (more than one row); "
                               "join its table instead")
        if isinstance(node, (exp.Limit, exp.Offset)) and not (
                isinstance(node.expression, exp.Literal) and node.expression.is_int):
            raise NotSupported("LIMIT and OFFSET take a whole number here")
        if isinstance(node, _NEVER_FAILS) or (
                isinstance(node, exp.Cast) and node.to.is_type(*exp.DataType.TEXT_TYPES)) or (
                isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)):
            continue
        raise NotSupported(f"{node.sql(dialect='postgres')[:80]} could fail on a row after "
                           "the subquery's value is paid for (the rest of the statement runs "
                           "then); compute it from the answer in an outer query instead")


# A correlated stage's place before its release: its comparison with 0, for any key
HELD = object()
_VALUE = "_idp_value"  # a released value's place in the comparison copied per key


def with_values(staged: StagedPlan, rows: list[list[tuple]], rules: Rules,
                compact: bool = False) -> exp.Select:
    """The statement with each stage's release in its place, in order: a subquery's
    value (the first cell of its row; none: NULL), a correlated one's rows (keys first),
    or a ``TopChoice``'s rows. ``compact``: a public statement's released rows
    (``_released``) written as their first row only, the rest kept aside for
    ``released_as_lists`` or ``fill_released``, which run before the statement does:
    TPC-H Q20's 8,508 rows are not built as a tree, analysed and walked (a VALUES of
    literals analyses alike whatever its number of rows)."""
    plan = staged.stages[0][1]
    if isinstance(plan.post, TopChoice):  # (key, value) from the release's columns
        key, value = (next(i for i, o in enumerate(plan.outputs) if test(o))
                      for test in (lambda o: o.group is not None,
                                   lambda o: o.aggregate is not None))
        return _with_rows(staged.statement, plan.post, plan,
                          [(row[key], row[value]) for row in rows[0]])
    keyed = staged.keyed or ((),) * len(rows)
    return _with_values(staged.statement, [found if columns else found[0][0] if found else None
                                           for found, columns in zip(rows, keyed)],
                        keyed, rules, isinstance(staged.held, PassthroughPlan), compact)


def _with_values(select: exp.Select, values: list, keyed: list | tuple, rules: Rules,
                 public: bool = False, compact: bool = False) -> exp.Select:
    """A copy of ``select`` with its WHERE's subqueries over protected tables replaced
    by ``values``, in order; a correlated one's (``keyed``: its outer columns) by the
    disjunction of its comparison per released key, or the comparison with 0 under
    those columns' IS NOT NULL (``HELD``). ``public``: the statement then reads public
    tables only and runs as written: the disjunction as the same condition over the
    released rows, which the backend joins instead of testing each key in turn."""
    statement = select.copy()
    found = [node for node in statement.args["where"].find_all(exp.Subquery)
             if _protected(node, rules)]
    held: dict[int, exp.Expression] = {}  # comparisons holding 0, each held once at the end
    for node, value, columns in zip(found, values, keyed):
        if not columns:
            if value is HELD:  # (a BETWEEN may hold two subqueries: both replaced first)
                comparison = _comparison(node)
                held[id(comparison)] = comparison
            node.replace(_number(0 if value is HELD else value))
            continue
        comparison = _comparison(node)
        template = comparison.copy()  # its subquery a placeholder, copied once per key
        next(n for n in template.find_all(exp.Subquery) if _protected(n, rules)).replace(
            exp.Placeholder(this=_VALUE))
        if value is HELD:
            cases = [balanced(exp.And, [*(c.copy().is_(exp.null()).not_() for c in columns),
                                        _held(_at(template, 0), comparison)])]
        elif public and value and not _negated(comparison):
            comparison.replace(_released(template, columns, value, compact))
            continue
        else:
            cases = _per_value(template, columns, value)
        comparison.replace(exp.paren(balanced(exp.Or, cases)) if cases else exp.false())
    for comparison in held.values():
        comparison.replace(_held(comparison.copy(), comparison))
    return statement


def _per_value(template: exp.Expression, columns: list[exp.Column], rows: list[tuple]
               ) -> list[exp.Expression]:
    """The disjunction's terms: per released key its equality and the comparison with its
    value. With one key column the keys released with the same value (written alike)
    share one term, ``c IN (k₁, k₂, …) AND`` the comparison: (c = k₁ ∧ C) ∨ (c = k₂ ∧ C)
    is (c = k₁ ∨ c = k₂) ∧ C in SQL's three-valued logic too (it distributes), and IN is
    the disjunction of its equalities, so the same condition wherever it stands. TPC-H
    Q17's per-part thresholds at SF 1: 204 parts, 52 values (many at a clipped
    bound); DuckDB tests the terms in its join per sparse chunk, 0.3 s for 204, 0.01 s
    for 52."""
    shared: dict[str, tuple[object, list]] = {}
    texts: dict[tuple, str] = {}  # each value's text rendered once (Q17: 52 for 204 keys)
    for row in rows:  # up to max_groups keys: a cancel is heard between them
        checkpoint()
        at = row[len(columns)]
        if len(columns) == 1:
            seen = type(at), repr(at)  # repr: -0.0 apart from 0.0, as written
            written = texts.get(seen)
            if written is None:
                written = texts[seen] = _number(at).sql()
        else:
            written = repr(row)
        shared.setdefault(written, (at, []))[1].append(row[:len(columns)])
    cases = []
    for at, keys in shared.values():
        checkpoint()
        if len(keys) == 1:
            equal = [exp.EQ(this=c.copy(), expression=_literal(k))
                     for c, k in zip(columns, keys[0])]
        else:
            equal = [exp.In(this=columns[0].copy(), expressions=[_literal(k) for k, in keys])]
        cases.append(balanced(exp.And, [*equal, _at(template, at)]))
    return cases


def _released(template: exp.Expression, columns: list[exp.Column], rows: list[tuple],
              compact: bool = False) -> exp.Exists:
    """The disjunction per released key as ``EXISTS (SELECT 1 FROM (VALUES (k…, v), …)
    AS _idp_r WHERE _idp_r.k = c … AND comparison with _idp_r.v)``: true exactly when
    one disjunct is (each key is released once), false otherwise (a NULL comparison
    too, which only NOT could tell from the disjunction's NULL)."""
    names = [f"_idp_k{i}" for i in range(len(columns))] + ["_idp_v"]
    table = exp.Values(expressions=_tuples(rows[:1] if compact else rows, len(columns)),
                       alias=exp.TableAlias(this=exp.to_identifier("_idp_r"), columns=[
                           exp.to_identifier(name) for name in names]))
    table.meta[_RELEASED] = (rows, len(columns))  # for ``released_as_lists``
    compared = _filled(template, exp.column(names[-1], table="_idp_r"))
    condition = balanced(exp.And, [*(exp.EQ(this=exp.column(name, table="_idp_r"),
                                            expression=c.copy())
                                     for name, c in zip(names, columns)), compared])
    return exp.Exists(this=exp.select("1").from_(table, copy=False).where(condition,
                                                                           copy=False))


def _tuples(rows: list[tuple], keys: int) -> list[exp.Tuple]:
    """The VALUES rows of released ``rows`` (``keys`` key columns, then the value)."""
    double = exp.DataType.build("double")
    return [exp.Tuple(expressions=[  # the first value typed, so
        *(_literal(k) for k in row[:keys]),  # every one is a double (NULL too)
        exp.cast(_number(row[keys]), double) if not at else _number(row[keys])])
        for at, row in enumerate(rows)]


def fill_released(statement: exp.Expression) -> None:
    """Every ``_released`` VALUES of ``statement`` written with all its rows (in place;
    ``with_values``'s ``compact`` wrote the first only)."""
    for node in _released_values(statement):
        rows, keys = node.meta[_RELEASED]
        if len(node.expressions) != len(rows):
            node.set("expressions", _tuples(rows, keys))


def _released_values(statement: exp.Expression) -> list[exp.Values]:
    return [node for node in statement.walk(prune=lambda n: isinstance(n, exp.Values))
            if isinstance(node, exp.Values) and _RELEASED in node.meta]


_RELEASED = "idp_released"  # a ``_released`` VALUES's rows and key count, in its meta
_BIGINT = 2**63


def released_as_lists(statement: exp.Expression
                      ) -> tuple[list[tuple[exp.Expression, exp.Expression]], list[list]] | None:
    """Each ``_released`` VALUES of ``statement`` (changed in place) as the same rows read
    from list parameters unnested side by side, ``(SELECT UNNEST($1) AS _idp_k0, …,
    UNNEST(CAST($n AS DOUBLE[])) AS _idp_v) AS _idp_r`` (``Capabilities.released_lists``):
    DuckDB 2.0 parses and binds TPC-H Q20's VALUES of 8,508 rows in 0.2–0.3 s, the lists
    in 5 ms. The same rows: keys that are all integers (within BIGINT) or all text, as
    the literals type them; the values as the doubles released (an integer within 2⁵³
    converted exactly, as its literal cast to DOUBLE is), NULL as NULL. None where a
    column is of another kind, empty, or a value not finite or too large: the VALUES
    stays. Returns the (list form, VALUES) pairs replaced, to put back
    (``put_back``), and the parameters in order."""
    found = _released_values(statement)
    swaps: list[tuple[exp.Expression, exp.Expression]] = []
    params: list[list] = []
    for node in found:
        rows, keys = node.meta[_RELEASED]
        lists = [list(column) for column in zip(*rows)]
        if not rows or not all(_listable_key(column) for column in lists[:keys]):
            return None
        values = [None if v is None else float(v) for v in lists[keys] if _listable_value(v)]
        if len(values) != len(rows):
            return None
        names = [column.name for column in node.args["alias"].columns]
        items = []
        for name, column in zip(names, [*lists[:keys], values]):
            params.append(column)
            value: exp.Expression = exp.Placeholder(this=str(len(params)))
            if name == names[-1]:
                value = exp.cast(value, exp.DataType.build("DOUBLE[]", dialect="duckdb"))
            items.append(exp.alias_(exp.Unnest(expressions=[value]), name))
        swaps.append((exp.select(*items).subquery(node.alias, copy=False), node))
    for listed, node in swaps:
        node.replace(listed)
    return swaps, params


def put_back(swaps: list[tuple[exp.Expression, exp.Expression]]) -> None:
    """The VALUES ``released_as_lists`` replaced, back in their places."""
    for listed, node in swaps:
        listed.replace(node)


def _listable_key(column: list) -> bool:
    present = [k for k in column if k is not None]
    return bool(present) and (
        all(isinstance(k, int) and not isinstance(k, bool) and -_BIGINT <= k < _BIGINT
            for k in present) or all(isinstance(k, str) for k in present))


def _listable_value(value) -> bool:
    if value is None or isinstance(value, Decimal):  # a Decimal: listed as its float
        return value is None or value.is_finite()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= 2**53 if isinstance(value, int) else math.isfinite(value)


def _held(compared: exp.Expression, place: exp.Expression) -> exp.Expression:
    """The comparison with 0 (``compared``) as the held statement reads it at ``place``:
    ``(c IS NULL OR c IS NOT NULL)``, or ``(c IS NULL AND c IS NOT NULL)`` under an odd
    number of NOTs — always true (false), and the comparison run on every row — so that the
    analysis checks it as written but no key restriction reads it (``key_restriction``,
    ``within_where``: a term that reads another thing than the column leaves the keys
    alone). The held statement then answers every key any released value could leave,
    and is priced and checked (its groups' number) for them: with 0 itself in place,
    ``age < 0`` left no key, so nothing was reserved for the statement, which the
    released value then answered unpaid (the review of 2026-11-29)."""
    odd = sum(isinstance(above, exp.Not) for above in _above(place)) % 2
    # true (false) on every row, yet not constant: DuckDB folded ``(… OR TRUE)`` and
    # never ran the comparison, which the released value then failed (text = number)
    # after the debit (the second review of 2026-11-29)
    unknown = exp.Is(this=exp.paren(compared), expression=exp.null())
    known = exp.Not(this=exp.Is(this=exp.paren(compared.copy()), expression=exp.null()))
    return exp.paren(exp.and_(unknown, known) if odd else exp.or_(unknown, known))


def _above(node: exp.Expression):
    """The nodes above ``node`` up to its WHERE."""
    above = node.parent
    while above is not None and not isinstance(above, exp.Where):
        yield above
        above = above.parent


def _negated(node: exp.Expression) -> bool:
    """Whether a NOT stands above ``node`` in its WHERE: there NOT of the disjunction's
    NULL (an outer operand that is NULL) keeps no row, NOT of EXISTS's false would keep
    it, so the disjunction is written out."""
    return any(isinstance(above, exp.Not) for above in _above(node))


def _at(template: exp.Expression, value: float | int | None) -> exp.Expression:
    """A copy of a comparison whose subquery is a placeholder, ``value`` in its place."""
    return exp.paren(_filled(template, _number(value)), copy=False)  # the copy's own


def _filled(template: exp.Expression, value: exp.Expression) -> exp.Expression:
    """A copy of ``template`` with ``value`` in its placeholder's place."""
    done = template.copy()
    next(n for n in done.find_all(exp.Placeholder) if n.this == _VALUE).replace(value)
    return done


def _comparison(node: exp.Subquery) -> exp.Expression:
    """What a subquery is an operand of, through parentheses."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return parent


def _literal(value) -> exp.Expression:
    """A released key or value (a number, text, date or time; None) as SQL, for a CAST."""
    if value is None:
        return exp.Null()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value)
    return exp.Literal.string(str(value))


_LARGEST = 1.7976931348623157e308  # the largest finite double


def _number(value: float | int | Decimal | None) -> exp.Expression:
    """A released number as the parser writes one (a negative as a minus sign before
    it; NULL where the release had none, or NaN). ±infinity, which arithmetic over a
    release can give (``1 / AVG(x)`` of a released 0), stands as ±the largest double:
    every finite value compares with it as with infinity, and the backend is sent no
    ``inf`` it cannot read (the review of 2026-11-29 found the statement charged, then
    failed)."""
    if isinstance(value, Decimal):  # post-processing's numeric (0.2 * COUNT(*))
        value = float(value)
    if value is None or value != value:
        return exp.Null()
    if isinstance(value, float) and math.isinf(value):
        value = math.copysign(_LARGEST, value)
    # the node ``exp.Literal.number`` builds for a number ≥ 0, without its parse of the
    # text back to a number (an int() that fails, then a Decimal, per value: Q20's 8,508)
    literal = exp.Literal(this=repr(abs(value)), is_string=False)
    return exp.Neg(this=literal) if value < 0 else literal


def _protected(node: exp.Subquery, rules: Rules) -> bool:
    """Whether the subquery (outside FROM and EXISTS) reads a protected table in a FROM
    or JOIN of its own; one over public tables that holds such a subquery is not one: it
    is public once that subquery's release stands in its place."""
    if _in_from(node) or not isinstance(node.this, exp.Select):
        return False
    return any((declared := rules.table(table.name)) is not None and not declared.public
               and _innermost(table) is node for table in node.this.find_all(exp.Table))


def _in_from(node: exp.Subquery) -> bool:
    return isinstance(node.parent, (exp.From, exp.Join))


def _innermost(table: exp.Table) -> exp.Subquery | None:
    """The innermost subquery outside FROM and JOIN that a table is read in."""
    node = table.parent
    while node is not None and not (isinstance(node, exp.Subquery) and not _in_from(node)):
        node = node.parent
    return node


def _answerable_place(node: exp.Subquery) -> bool:
    """An operand of a comparison or a BETWEEN bound, nothing else (a divisor or an IN
    list would analyse differently for some values)."""
    return isinstance(_comparison(node), _COMPARISONS)


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
        column = plan.table.columns[aggregate.column]
        # MAX or MIN of a moment ranks a number, but releases a moment
        kind = "moment" if getattr(column, "moment", None) else column.type
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
    terms = conjuncts(where.this) if where is not None else []
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
    terms = conjuncts(inner.this) if inner is not None else []
    keys = {c.name.lower(): c.copy() for c in columns}
    for condition in conjuncts(select.args["where"].this):
        semi = public_match(condition, rules) if isinstance(condition, exp.In) else None
        if semi is not None and _owner(semi[0], {}, outer) == alias:
            # the public table joined on its unique key instead
            read, table, key, kept = semi
            column = read.name.lower()
            name = f"_idp_s{len(query.args.get('joins', []))}"
            query = query.join(table.as_(name), copy=False)
            joined = exp.column(key, table=name)
            terms.append(exp.column(column, table=alias).eq(joined.copy()))
            for term in kept:
                for read in term.find_all(exp.Column):
                    read.set("table", exp.to_identifier(name))
                terms.append(term)
            if column in keys:  # its keys: those of the public table's rows kept
                keys[column] = joined
            continue
        owners = {_owner(c, {}, outer) for c in condition.find_all(exp.Column)}
        if owners == {alias} and condition.find(exp.Subquery) is None:
            qualified = condition.copy()
            for column in qualified.find_all(exp.Column):
                column.set("table", exp.to_identifier(alias))
            terms.append(qualified)
    query.set("where", exp.Where(this=exp.and_(*terms, copy=False)))  # one flat AND
    value = query.selects[-1].copy()
    query.set("expressions", [*(c.copy() for c in keys.values()), value])
    return query.group_by(*(c.copy() for c in keys.values()), copy=False)


TOP_FORM = ("WITH r AS (SELECT t.k AS k, SUM(t.x) AS v FROM t WHERE … GROUP BY t.k) "
            "SELECT p.key, p.name, r.v FROM p, r WHERE p.key = r.k AND r.v = "
            "(SELECT MAX(v) FROM r), p a public table whose key the rules declare unique")


def top_choice_plan(select: exp.Select, rules: Rules,
                    analyse: Callable[[exp.Expression], object],
                    canonical: Callable[[exp.Expression], str]) -> StagedPlan | None:
    """The staged plan of a statement keeping the group of its step's largest (least)
    SUM by comparing with the step's MAX (MIN) (module docstring); None when it does
    not compare a step with its own extreme; refused, before any debit, when it does in
    another form than ``TOP_FORM``."""
    ctes = steps(select)
    where = select.args.get("where")
    if len(ctes) != 1 or where is None:
        return None
    (name, body), = ctes.items()
    joins = select.args.get("joins") or []
    conditions = conjuncts(where.this) + [part for join in joins if join.args.get("on")
                                          for part in conjuncts(join.args["on"])]
    extremes = [(c, found) for c in conditions if (found := _extreme(c, name)) is not None]
    if not extremes:
        return None
    if len(extremes) > 1 or len(joins) != 1 or not isinstance(body, exp.Select):
        raise _top_refusal("one comparison with the step's MAX, one public table beside it")
    sources = [select.args["from_"].this, joins[0].this]
    step_alias = [s.alias_or_name for s in sources if step_name(s, ctes) == name]
    tables = [s for s in sources if step_name(s, ctes) is None and isinstance(s, exp.Table)]
    declared = rules.table(tables[0].name) if tables else None
    if len(step_alias) != 1 or not tables or declared is None or not declared.public \
            or joins[0].args.get("side") or joins[0].args.get("using") \
            or (joins[0].args.get("kind") or "INNER").upper() not in ("INNER", "CROSS"):
        raise _top_refusal("the step inner-joined with one public table")
    condition, (column, smallest, read) = extremes[0]
    key = [c for c in conditions if c is not condition]
    outputs = {item.alias_or_name: item.unalias() for item in body.expressions}
    group = body.args.get("group")
    pair = _key_pair(key[0], step_alias[0], tables[0].alias_or_name) if len(key) == 1 else None
    if pair is None or group is None or len(group.expressions) != 1 or len(outputs) != 2 \
            or column not in outputs or read not in ("", step_alias[0]) or pair[1] not in outputs \
            or outputs[pair[1]] != group.expressions[0] or (pair[0],) not in declared.unique:
        raise _top_refusal("the step grouped by one column, joined on it to the public "
                           "table's unique key, its other column the SUM compared")
    release = _release(body, group.expressions[0], tables[0].name, pair[0], pair[1])
    plan = analyse(release)
    if not isinstance(plan, QueryPlan) or len(plan.group_by) != 1 \
            or plan.group_by[0].kind != PUBLIC or plan.group_by[0].default is not None \
            or len(plan.aggregates) != 1 \
            or plan.aggregates[0].kind != SUM or plan.post is not None \
            or plan.order_by or plan.limit is not None or plan.table.privacy_unit is None:
        raise _top_refusal("a SUM over a table with a privacy unit (its noise: "
                           "top_choice.refuse_top_choice, before any debit)")
    stage = replace(plan, post=TopChoice(name, (pair[1], column), smallest))
    held = analyse(_with_rows(select, stage.post, stage, [(None, 0)]))
    if not isinstance(held, PassthroughPlan):
        raise _top_refusal("the query over the step may read only the public table and "
                           "call only plain SQL functions")
    return StagedPlan(((canonical(select), stage),), select.copy(), held)


def _top_refusal(what: str) -> NotSupported:
    return NotSupported(f"keeping the largest group of a step is answered for {what}: "
                        f"{TOP_FORM}")


def _extreme(condition: exp.Expression, step: str) -> tuple[str, bool, str] | None:
    """(the step's column, whether MIN, the table ``r`` it is read from: "" when not
    qualified) when ``condition`` is ``r.v = (SELECT MAX(v) FROM step)`` (either side;
    MIN: the least)."""
    if not isinstance(condition, exp.EQ):
        return None
    for side, other in ((condition.this, condition.expression),
                        (condition.expression, condition.this)):
        while isinstance(other, exp.Paren):
            other = other.this
        query = other.this if isinstance(other, exp.Subquery) else None
        if not (isinstance(side, exp.Column) and isinstance(query, exp.Select)):
            continue
        source = query.args.get("from_")
        items = query.expressions
        if (source is None or not isinstance(source.this, exp.Table)
                or source.this.name != step or len(items) != 1
                or any(query.args.get(clause) for clause in
                       ("joins", "where", "group", "having", "limit", "with_"))):
            continue
        extreme = items[0].unalias()
        if isinstance(extreme, (exp.Max, exp.Min)) and isinstance(extreme.this, exp.Column) \
                and extreme.this.name == side.name:
            return side.name, isinstance(extreme, exp.Min), side.table
    return None


def _key_pair(condition: exp.Expression, step: str, table: str) -> tuple[str, str] | None:
    """(the public table's column, the step's) of ``p.key = r.k``."""
    if not isinstance(condition, exp.EQ):
        return None
    sides = {getattr(side, "table", None): side for side in (condition.this,
                                                               condition.expression)}
    public, stepped = sides.get(table), sides.get(step)
    if isinstance(public, exp.Column) and isinstance(stepped, exp.Column):
        return public.name, stepped.name
    return None


def _release(body: exp.Select, grouped: exp.Expression, table: str, key: str,
             name: str) -> exp.Select:
    """The step grouped by the public table's key: joined to it on its group column."""
    release = body.copy()
    aliases = {source.alias_or_name for source in release.find_all(exp.Table)}
    alias = next(f"{table}{n or ''}" for n in range(len(aliases) + 1)
                 if f"{table}{n or ''}" not in aliases)
    joined = exp.column(key, table=alias)
    release = release.join(exp.to_table(table).as_(alias),
                           on=exp.EQ(this=grouped.copy(), expression=joined.copy()))
    release.set("group", exp.Group(expressions=[joined.copy()]))
    release.set("expressions", [exp.alias_(joined.copy(), name) if item.alias_or_name == name
                                else item.copy() for item in release.expressions])
    return release


def _with_rows(select: exp.Select, top: TopChoice, plan: QueryPlan, rows: list[tuple]
               ) -> exp.Select:
    """``select`` with the step read from ``rows`` (key, value) instead, typed as the
    release's columns; no row: an empty one."""
    key_type = RULE_TYPES[plan.group_by[0].type]
    agg = plan.aggregates[0]
    value_type = RULE_TYPES[plan.table.columns[agg.column].type]
    statement = select.copy()
    statement.set("with_", None)
    for table in list(statement.find_all(exp.Table)):
        if table.name != top.step or table.args.get("db"):
            continue
        key, value = rows[0] if rows else (None, None)
        found = exp.select(exp.alias_(exp.cast(_literal(key), key_type), top.columns[0]),
                           exp.alias_(exp.cast(_literal(value), value_type), top.columns[1]))
        if not rows:
            found = found.where(exp.false())
        table.replace(found.subquery(table.alias_or_name))
    return statement
