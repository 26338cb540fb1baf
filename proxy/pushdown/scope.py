"""The rows in scope, as a sqlglot SELECT shared by every statistics query.

Group keys become ``k0, k1 ...``, the needed columns ``c0, c1 ...`` normalised
(``clamped_to_domain``: NaN as NULL, values clamped to the declared domain or ±MAGNITUDE_CAP),
so every count, sum and order statistic computed from the scope is of normalised values.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from proxy.guards import clamp, snap
from proxy.interrupts import checkpoint
from proxy.pushdown.group_sql import group_filter, group_value
from proxy.pushdown.values import clamped_to_domain, literal
from proxy.rules import LINKED_UNIT, Link, Table
from proxy.statistics import (
    ColumnNeeds,
    ColumnStats,
    RankRef,
    UnitExtremes,
    sum_shrink,
    value_range,
)
from proxy.trees import implied_condition, operands
from proxy.vocabulary import (
    SEMI_INNER,
    SEMI_OUTER,
    SUM,
    UNITS,
    DerivedColumn,
    PerUnit,
    QueryPlan,
    unit_sources,
)

Execute = Callable[[str], list[tuple]]

BIGINT = exp.DataType.build("bigint")


def scope_select(
    plan: QueryPlan, needs: tuple[ColumnNeeds, ...], clip_rows_per_unit: int | None,
    sample_percent: int | None = None, unit: bool = False,
) -> exp.Select:
    """The rows in scope: group keys and needed columns, after WHERE (and clipping).

    ``clip_rows_per_unit`` (DP with a privacy unit) keeps at most that many in-scope
    rows per unit, chosen by the unit's own values, so one unit's contribution is
    bounded whatever the data (SPEC §5.2, global sensitivity). ``sample_percent`` reads
    a block sample of the table instead (a pilot; never for released statistics).
    ``unit``: the privacy unit rides along as ``u`` (as it does for COUNT(DISTINCT unit)).
    """
    asked = (unit or counts_units(plan)) and plan.table.privacy_unit is not None
    extremes = isinstance(clip_rows_per_unit, UnitExtremes)
    unit = asked or extremes
    table = plan.table
    keys = group_keys(plan)
    selected = [exp.alias_(exp.Literal.number(1), "one")]  # a scope may need no column
    for term, key in zip(plan.group_by, keys):
        checkpoint()  # each part is built (and copied) in a fraction of a second
        selected.append(exp.alias_(group_value(term, table), key, copy=False))
    for index, need in enumerate(needs):
        checkpoint()
        selected.append(exp.alias_(needed_value(table, need), f"c{index}", copy=False))
    if unit:
        selected.append(exp.alias_(exp.column(table.privacy_unit, quoted=True), "u"))
    # every part is built fresh for this statement: nothing is copied (a copy of the
    # select at each step was a fifth of the statistics' building)
    linked = unit or clip_rows_per_unit is not None
    checkpoint()
    source, where = filtered_source(plan, sample_percent, linked)  # the WHERE copied once
    scope = exp.select(*selected).from_(source, copy=False)
    if where is not None:  # (4,900 terms: 0.3 s a copy)
        checkpoint()
        scope = scope.where(opaque_if_long(where), copy=False)
    for term in plan.group_by:  # rows outside the declared keys belong to no group
        checkpoint()
        scope = scope.where(group_filter(term, table), copy=False)
    checkpoint()
    if not linked:
        linked_if_named(scope, plan, sample_percent)
    if clip_rows_per_unit is None:
        return scope
    if extremes:
        return unit_extremes(scope, clip_rows_per_unit, needs, keys, asked)
    # a unit's rows in the order of their own values: not by an EXISTS's truth (a column
    # only where the WHERE does not hold it, ``filtered_source``), itself a function of them
    semis = {semi.name for semi in plan.semi_joins}
    order = [exp.column(col, quoted=True) for col in sorted(table.columns)
             if col != table.privacy_unit and col not in semis
             and not isinstance(table.columns[col], DerivedColumn)]
    if isinstance(clip_rows_per_unit, HashedClip):
        order.insert(0, row_hash(order))
    row_in_unit = exp.Window(
        this=exp.RowNumber(), partition_by=[exp.column(table.privacy_unit, quoted=True)],
        order=exp.Order(expressions=order)
    )
    scope = scope.select(exp.alias_(row_in_unit, "row_in_unit", copy=False), copy=False)
    columns = ["one", *keys, *[f"c{i}" for i in range(len(needs))]]
    columns += ["u"] if unit else []
    clipped = exp.select(*columns).from_(scope.subquery("u", copy=False), copy=False)
    return clipped.where(exp.LTE(this=exp.column("row_in_unit"),
                                 expression=exp.Literal.number(clip_rows_per_unit)), copy=False)


class HashedClip(int):
    """A clip of rows per unit whose rows are kept by a hash of each row's own values (a
    pseudo-random sample of the unit's rows, ties broken by the values), not by the
    values' order, which keeps a unit's smallest values: the one row per unit that
    grouped user-level percentiles of the piecewise form are drawn over
    (privacy/inverse_sensitivity.py; the step form weighs every row instead:
    pushdown/weighted.py)."""


def unit_extremes(scope: exp.Select, clip: UnitExtremes, needs: tuple[ColumnNeeds, ...],
                  keys: list[str], unit: bool) -> exp.Select:
    """``scope`` (with ``u``) reduced to one row per unit and group: ``GROUP BY u, keys``
    with each column's MIN (``largest``: MAX), which skips NULLs and is NULL where all
    are, a function of the unit's own rows in that group, their MIN (MAX) exactly; then,
    with a ``cap`` under GROUP BY, a unit's first ``cap`` groups by ``clip.column``'s
    value (NULLs last, ties by the keys), by ``ROW_NUMBER()`` over the unit. Total SQL:
    MIN/MAX of normalised doubles, a window, comparisons of integers. ``unit``: ``u``
    stays in the output."""
    index = next(i for i, need in enumerate(needs) if need.column == clip.column)
    value = exp.column(f"c{index}")
    extreme = exp.Max if clip.largest else exp.Min
    columns = ["one", *keys, *[f"c{i}" for i in range(len(needs))], "u"]
    reduced = exp.select(
        exp.alias_(exp.Literal.number(1), "one"), *keys,
        *[exp.alias_(extreme(this=exp.column(f"c{i}")), f"c{i}") for i in range(len(needs))],
        "u", copy=False).from_(scope.subquery("e", copy=False), copy=False) \
        .group_by("u", *keys, copy=False)
    if keys and clip.cap is not None:
        order = [exp.Is(this=value.copy(), expression=exp.Null()),
                 exp.Ordered(this=value.copy(), desc=clip.largest)]
        order += [part for key in keys for part in (
            exp.Is(this=exp.column(key), expression=exp.Null()),
            exp.Ordered(this=exp.column(key)))]
        window = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("u")],
                            order=exp.Order(expressions=order))
        numbered = exp.select(*columns, exp.alias_(window, "group_in_unit"), copy=False) \
            .from_(reduced.subquery("e", copy=False), copy=False)
        reduced = exp.select(*columns).from_(numbered.subquery("e", copy=False), copy=False) \
            .where(exp.LTE(this=exp.column("group_in_unit"),
                           expression=exp.Literal.number(clip.cap)), copy=False)
    return reduced if unit else exp.select(*columns[:-1]).from_(
        reduced.subquery("e", copy=False), copy=False)


def row_hash(columns: list[exp.Expression]) -> exp.Expression:
    """MD5 of the row's values as text, NULL as empty: a function of the row alone,
    total on every engine (a cast to text and a hash cannot fail)."""
    parts: list[exp.Expression] = []
    for column in columns:
        text = exp.Coalesce(this=exp.cast(column.copy(), "text"),
                            expressions=[exp.Literal.string("")])
        parts += [text, exp.Literal.string("|")]
    return exp.MD5(this=exp.Concat(expressions=parts or [exp.Literal.string("")]))


# A WHERE with more AND and OR than this is sent as COALESCE(condition, FALSE).
LONG_CONDITION = 32


def opaque_if_long(condition: exp.Expression) -> exp.Expression:
    """``condition``, or for one of many ANDs and ORs ``COALESCE(condition, FALSE)``:
    the same rows (WHERE keeps neither FALSE nor NULL), but DuckDB's optimiser then
    takes it as one expression instead of combining its terms, which it does in time
    that grows with their square, in steps a cancel does not reach (2,400 terms
    ``(age <> i OR sex = 'm')``: 11.6 s; wrapped, 0.2 s). Short conditions stay as
    they are, for the optimisers to use (zone maps, indexes).

    A long AND keeps up to LONG_CONDITION of its conjuncts that hold no AND or OR (the
    comparisons an optimiser pushes into a scan) plain and wraps the others as one:
    ``a AND b AND COALESCE(c, FALSE)`` keeps the same rows (each is TRUE exactly when
    all three are). TPC-H Q17's outer WHERE is ``p_brand = … AND p_container = … AND``
    an OR over its parts' released averages: wrapped whole, the brand and container
    were tested after joining every line item to its part (the statistics' first pass
    1.6 s; with them plain, 0.34 s)."""
    if connectors(condition) <= LONG_CONDITION:
        return condition
    conjuncts = (list(condition.unnest().flatten()) if isinstance(condition.unnest(), exp.And)
                 else [condition])
    plain = [part for part in conjuncts
             if not any(True for _ in part.find_all(exp.And, exp.Or))][:LONG_CONDITION]
    rest = [part for part in conjuncts if not any(part is kept for kept in plain)]
    wrapped = exp.Coalesce(this=exp.and_(*rest, copy=False) if len(rest) > 1 else rest[0],
                           expressions=[exp.false()])
    return exp.and_(*plain, wrapped, copy=False) if plain else wrapped


def connectors(condition: exp.Expression) -> int:
    """The ANDs and ORs of ``condition``."""
    return sum(1 for _ in condition.find_all(exp.And, exp.Or))


def table_ref(name: str) -> exp.Table:
    """``exp.to_table(name, quoted=True)``, parsed once per name: parsing it cost 65 µs
    at each of a query's several uses, a copy of the parsed node 9 µs."""
    return _parsed_table(name).copy()


@lru_cache(maxsize=1024)
def _parsed_table(name: str) -> exp.Table:
    return exp.to_table(name, quoted=True)


def filtered_source(plan: QueryPlan, sample_percent: int | None = None, unit: bool = True
                    ) -> tuple[exp.Expression, exp.Expression | None]:
    """``source_table`` and the WHERE to read it with (a copy; None: none), each EXISTS
    that is a conjunct of the WHERE sent in it (``inline_semi_joins``) and not computed
    as a column of the rows too (DuckDB computed an unused one for every row: TPC-H Q04
    0.05 s → 0.44 s)."""
    if plan.where is None:
        return source_table(plan, sample_percent, unit), None
    where = inline_semi_joins(plan.where.copy(), plan)
    named = {column.name for column in where.find_all(exp.Column)}
    implied = implied_conjuncts(plan)
    # only where the whole stays short: a long one is wrapped whole (``opaque_if_long``),
    # the implied conjunct with it, which would then filter nothing before the join
    if implied and connectors(where) + sum(map(connectors, implied)) + len(implied) \
            <= LONG_CONDITION:
        where = exp.and_(where, *implied, copy=False)
    return source_table(plan, sample_percent, unit, {semi.name for semi in plan.semi_joins
                                                     if semi.name in named}), where


def implied_conjuncts(plan: QueryPlan) -> list[exp.Expression]:
    """For each public joined table, the condition on its own columns that each
    disjunction of the WHERE implies (copies; docs/privacy.md §3.9, "Implied
    conjuncts"): where a conjunct of the WHERE is an OR of branches and every branch has
    conjuncts that read only that table's columns, the OR over the branches of those
    conjuncts. It is TRUE for every row the WHERE admits (a TRUE branch has them all
    TRUE), so the WHERE with it admits the same rows; it reads only what the WHERE
    reads, in the WHERE's own (total) SQL, and lets the optimisers filter the table
    before the join, as they do the plain query (TPC-H Q19 at SF 1: DuckDB joined 7,085
    parts and read 53 k line items; with it 485 parts and 3.6 k line items)."""
    public = {join.alias for join in plan.joins if not join.protected}
    if not public or plan.where is None:
        return []
    found = (implied_condition(term, lambda conjunct, alias=alias: _reads_only(conjunct, alias))
             for term in operands(plan.where, exp.And) for alias in sorted(public))
    return [condition for condition in found if condition is not None]


def _reads_only(condition: exp.Expression, alias: str) -> bool:
    """Whether ``condition`` reads columns, all of the joined table ``alias`` (named
    ``alias.column``, ``Join.column_name``), and nothing else: no subquery."""
    columns = list(condition.find_all(exp.Column))
    return bool(columns) and not any(True for _ in condition.find_all(exp.Query, exp.Exists)) \
        and all(not column.table and column.name.partition(".")[0] == alias
                and "." in column.name for column in columns)


def source_table(plan: QueryPlan, sample_percent: int | None = None, unit: bool = True,
                 semis: Collection[str] | None = None) -> exp.Expression:
    """What the plan's rows are read from: its table, or with tables joined
    (``proxy.analyze.joins``) the join as a subquery named as the table, whose rows are
    the table's (its columns as they are) with each joined column as ``alias.column``.

    A second protected table is joined first, on the privacy unit (inner or LEFT), so
    that public tables may match columns of either protected table. Each public table
    is read as its rows whose join key occurs at most m times in it (m = 1 for a
    unique key, else its ``max_rows_per_key``), whatever the rules said at start: a
    row of the protected tables meets at most m public rows in every query, so the
    shift's multiplicity holds (docs/privacy.md §3.9) even after more rows with that key
    are written to the public table (they then match nothing). Each EXISTS of the plan
    (``plan.semi_joins``) is then a boolean column of these rows.

    ``unit`` False: the statement reads no unit, so a linked table (``unit_via``) may be
    read without its derived unit where nothing else needs it (``unlinked``). ``semis``:
    the EXISTS columns computed (None: all)."""
    if plan.per_unit is not None:
        return per_unit_rows(plan.per_unit, sample_percent).subquery(
            exp.to_identifier(plan.table.name, quoted=True), copy=False)
    rows = _with_semi_joins(_joined_rows(plan, sample_percent, unit or not unlinked(plan)),
                            plan, semis)
    return rows if isinstance(rows, exp.Table) else rows.subquery(
        exp.to_identifier(plan.table.name, quoted=True), copy=False)


def _with_semi_joins(rows: exp.Expression, plan: QueryPlan,
                     names: Collection[str] | None) -> exp.Expression:
    """``rows`` with a boolean column per EXISTS of the plan (of those ``names``, None:
    all): whether a row of its table whose unit is the row's own meets its condition
    (docs/privacy.md §3.15). The equality of the units makes each row's value a function
    of its unit's records."""
    semis = [semi for semi in plan.semi_joins if names is None or semi.name in names]
    if not semis:
        return rows
    items: list[exp.Expression] = [
        exp.Column(this=exp.Star(), table=exp.to_identifier(SEMI_OUTER, quoted=True))]
    items += [exp.alias_(_exists(plan, semi, SEMI_OUTER), semi.name, quoted=True)
              for semi in semis]
    return exp.select(*items).from_(_named(rows, SEMI_OUTER))


def _exists(plan: QueryPlan, semi, outer: str, hoisted: bool = False) -> exp.Expression:
    """The EXISTS of ``semi``, the outer row read as ``outer``: a row of its table whose
    unit is the outer row's meets its condition. Where the condition implies the unit
    (``_unit_implied``) the unit's test is the outer row's IS NOT NULL, inside the
    subquery (a test of the outer row alone), so that the whole is one EXISTS, which
    PostgreSQL turns into a semi- or anti-join in a WHERE (``inline_semi_joins``);
    ``hoisted`` (an EXISTS conjunct, not negated): beside it instead, ``r.unit IS NOT
    NULL AND EXISTS (…)``, the same truth, which DuckDB plans as a plain semi-join on the
    link (inside, the outer unit made the EXISTS correlated on two columns: a delim join,
    TPC-H Q04's statement 0.031 s against 0.025 s; ``inline_semi_joins`` asks for it over
    a table's own unit only)."""
    own_unit = exp.column(plan.table.privacy_unit, table=outer, quoted=True)
    condition = None if semi.condition is None else semi.condition.copy()
    if condition is not None and outer != SEMI_OUTER:
        for column in condition.find_all(exp.Column):
            if column.table == SEMI_OUTER:
                column.set("table", exp.to_identifier(outer, quoted=True))
    test = None
    if _unit_implied(plan, semi):  # its table without its link
        source = table_ref(semi.table.name)
        test = exp.Not(this=own_unit.is_(exp.null()))
        if not hoisted:
            condition, test = exp.and_(test, condition, copy=False), None
    else:
        same_unit = exp.column(semi.table.privacy_unit, table=SEMI_INNER,
                               quoted=True).eq(own_unit)
        source = table_rows(semi.table)
        condition = same_unit if condition is None else exp.and_(same_unit, condition,
                                                                 copy=False)
    exists = exp.Exists(this=exp.select(exp.Literal.number(1)).from_(
        _named(source, SEMI_INNER)).where(condition, copy=False))
    return exists if test is None else exp.and_(test, exists, copy=False)


def inline_semi_joins(where: exp.Expression, plan: QueryPlan) -> exp.Expression:
    """``where`` (the scope's, a copy) with each conjunct that tests an EXISTS's column
    (``col = TRUE``, ``NOT col = TRUE``) replaced by the EXISTS itself, the outer row
    read as the plan's table: the same truth (the column is that EXISTS, never NULL),
    but where a conjunct, PostgreSQL plans ``[NOT] EXISTS`` as a hash semi- or
    anti-join, while a column computed in a subquery ran as a subplan per row (TPC-H
    Q21 at SF 0.01: 49 s against the plain query's 0.15 s). The columns stay for any
    other use (under OR)."""
    semis = {semi.name: semi for semi in plan.semi_joins}
    if not semis:
        return where
    for term in list(where.flatten() if isinstance(where, exp.And) else [where]):
        negated = isinstance(term.unnest(), exp.Not)
        test = term.unnest().this.unnest() if negated else term.unnest()
        if not (isinstance(test, exp.EQ) and isinstance(test.this, exp.Column)
                and test.this.name in semis and not test.this.table
                and isinstance(test.expression, exp.Boolean) and test.expression.this):
            continue
        # hoisted only over a table's own unit: beside an EXISTS on a unit derived through
        # a link, DuckDB planned TPC-H Q21's statement 2.6× slower
        exists = _exists(plan, semis[test.this.name], plan.table.name,
                         hoisted=not negated and plan.table.link is None)
        replacement = exp.Not(this=exists) if negated else exists
        if term is where:
            return replacement
        term.replace(replacement)
    return where


def _unit_implied(plan: QueryPlan, semi) -> bool:
    """Whether the EXISTS's condition makes its rows' unit the outer row's whenever
    that has one (docs/privacy.md §3.15), so its table is read without its link and the
    unit equality becomes the outer unit's IS NOT NULL: its table is linked (one step,
    ``unit_via``) and the condition, a conjunction, equates its link column with
    - the outer row's own link column, the outer table linked by the same link (TPC-H
      Q21: ``l2.l_orderkey = l1.l_orderkey``): the two derived units are the one order's;
    - the outer row's key the link names, the outer table the linked one with the link's
      unit as its own, its key read as unique in this snapshot (``bounded_keys``; Q04:
      ``l_orderkey = o_orderkey`` over orders): the one order holding that key is the
      outer row itself.
    A NULL link meets nothing either way; a dangling one is no outer row's."""
    link = semi.table.link
    if link is None or link.then is not None or semi.condition is None \
            or any(column.name == LINKED_UNIT for column in semi.condition.find_all(exp.Column)):
        return False
    same_link = plan.table.link == link
    own_key = (plan.table.link is None and plan.table.name == link.table
               and plan.table.privacy_unit == link.unit
               and (link.table, (link.key,), 1) in _BOUNDED.get())
    if not (same_link or own_key):
        return False
    wanted = link.column if same_link else link.key
    for term in semi.condition.flatten() if isinstance(semi.condition, exp.And) \
            else [semi.condition]:
        term = term.unnest()
        if not isinstance(term, exp.EQ):
            continue
        sides = {(side.table, side.name) for side in (term.this, term.expression)
                 if isinstance(side, exp.Column)}
        if sides == {(SEMI_INNER, link.column), (SEMI_OUTER, wanted)}:
            return True
    return False


def unlinked(plan: QueryPlan) -> bool:
    """Whether a statement that reads no unit may read the plan's table without its
    derived unit (``table_rows``' link): nothing else equates units with it (no
    protected join, no EXISTS) and nothing names the column. The link is a LEFT join
    on a key read as unique, so every row of the table comes out once, with its own
    values: without it the statement's rows, and so its result, are the same; it
    skips the linked table's scan and the per-key count of its uniqueness, most of a
    linked table's statistics (TPC-H's lineitem through orders: 1.1 s of 1.2 s). A
    statement that names the unit anyway is read linked (``linked_if_named``)."""
    return not (plan.table.link is None or plan.semi_joins
                or any(join.protected for join in plan.joins))


def linked_if_named(statement: exp.Select, plan: QueryPlan,
                    sample_percent: int | None = None) -> None:
    """A statement built over the rows a statement reading no unit reads
    (``source_table(…, unit=False)``) read from the linked rows instead where it names
    the derived unit after all, which only the link gives it."""
    if unlinked(plan) and any(column.name == LINKED_UNIT
                              for column in statement.find_all(exp.Column)):
        statement.set("from", exp.From(this=source_table(plan, sample_percent)))


def _joined_rows(plan: QueryPlan, sample_percent: int | None, linked: bool = True
                 ) -> exp.Expression:
    """The plan's table with its joins (``source_table``), unnamed; ``linked``: with
    its derived unit (``table_rows``)."""
    table = table_rows(plan.table, sample_percent, linked)
    if not plan.joins:
        return table
    mine = "_idp_t"
    star = exp.Column(this=exp.Star(), table=exp.to_identifier(mine, quoted=True))
    joined = exp.select(star).from_(_named(table, mine))
    public = {join.alias: f"_idp_j{index}" for index, join in enumerate(plan.joins)
              if not join.protected}

    def value(name: str) -> exp.Column:
        """A joined row's column: a public table's chained after it (``n.n_nationkey``
        after ``s``) from that table's own alias, the others from the rows so far."""
        owner, _, column = name.partition(".")
        if column and owner in public:
            return exp.column(column, table=public[owner], quoted=True)
        return exp.column(name, table=mine, quoted=True)

    for index, join in enumerate(plan.joins):
        alias = f"_idp_j{index}"
        implied = _units_implied(plan, join)
        # its derived unit read by nothing: the units' pair is a test of the earlier
        # unit and no later join equates units with it (docs/privacy.md §3.13)
        bare = implied and not any(later.protected for later in plan.joins[index + 1:])
        columns = list(join.table.columns)
        if join.protected and join.table.privacy_unit not in join.table.columns and not bare:
            columns.append(join.table.privacy_unit)  # later joins equate units with it
        joined = joined.select(*[
            exp.alias_(exp.column(name, table=alias, quoted=True), join.column_name(name),
                       quoted=True) for name in columns], copy=False)
        pairs, tests = join.pairs, []
        if implied:  # the units' equality as the earlier unit's test
            (unit, _), *pairs = join.pairs
            tests.append(exp.Not(this=value(unit).is_(exp.null())))
        on = exp.and_(*tests, *[value(protected).eq(exp.column(other, table=alias,
                                                                quoted=True))
                                for protected, other in pairs])
        rows = table_rows(join.table, linked=not bare) if join.protected else None
        read = (_named(rows, alias) if join.protected and join.read is None
                else exp.select("*").from_(_named(rows, "_idp_f"))
                .where(join.read.copy()).subquery(alias, copy=False) if join.protected else
                _bounded_rows(join.table.name, join.key, join.multiplicity)
                .subquery(alias, copy=False))
        joined = joined.join(read, on=on, join_type="left" if join.left else "inner",
                             copy=False)
        if join.protected and index + 1 < len(plan.joins):
            # the public tables join the pair: its columns are read as they are named
            joined = exp.select(star.copy()).from_(joined.subquery(mine, copy=False))
    return joined


def _units_implied(plan: QueryPlan, join) -> bool:
    """Whether a protected join along a link equates the two rows' units whenever the
    earlier row has one, so its unit pair can be that unit's IS NOT NULL (docs/privacy.md
    §3.13): the link's key is read as unique in this snapshot (``bounded_keys``), so the
    row the link pair matches is the one row the link names — for "referenced" the
    joined row is the row the earlier one's unit was derived from, for "referencing"
    the earlier row is the one the joined row's unit is derived from — and their units
    are one value, NULL alike. Without it PostgreSQL multiplied the two equalities'
    selectivities, estimated one row where there were hundreds, and ran the EXISTS of
    TPC-H Q21 as nested loops over line items (1.7 s against 0.07 s)."""
    if join.link == "referenced":
        keyed, key = join.table.name, join.pairs[1][1]
    elif join.link == "referencing":
        sources = [plan.table, *(other.table for other in plan.joins if other.protected)]
        keyed, key = sources[join.determines].name, join.pairs[1][0].rpartition(".")[2]
    else:
        return False
    return (keyed, (key,), 1) in _BOUNDED.get()


def per_unit_rows(per_unit: PerUnit, sample_percent: int | None = None) -> exp.Select:
    """The relation of one row per unit (``proxy.analyze.per_unit``): the source's rows
    in its scope (its table or join, its WHERE) grouped by the privacy unit, with the
    unit and each per-unit count (or sum) as the columns ``per_unit`` names. COUNT(col)
    counts the normalised values (NaN is NULL), as a COUNT(col) of the rows does, SUM(col)
    adds them; the counts are clamped to [0, B] (the sums to B times the domain) where
    the outer aggregates read them (``needed_value``), not here: the outer WHERE
    compares the units' true values. A ``sample_percent`` samples
    the rows, so a unit's count in the sample may be below its own: its values are not
    some of the relation's (only a pilot whose result is checked exactly may read it).
    Grouped by keys too (``per_unit.keys``), a row per unit and key combination, each
    key as its column of the relation."""
    source = per_unit.source
    unit = exp.column(source.table.privacy_unit, quoted=True)
    items = [exp.alias_(unit.copy(), per_unit.unit, quoted=True)]
    for aggregate, name in zip(source.aggregates, per_unit.names):
        column = source.table.columns.get(aggregate.column)
        counted = exp.Star() if column is None else needed_value(source.table, ColumnNeeds(
            aggregate.column, count=True, lower=column.lower, upper=column.upper))
        value = exp.Sum(this=counted) if aggregate.kind == SUM else exp.Count(this=counted)
        items.append(exp.alias_(value, name, quoted=True))
    keys = [exp.column(column, quoted=True) for column, _ in per_unit.keys]
    items[1:1] = [exp.alias_(key.copy(), name, quoted=True)
                  for key, (_, name) in zip(keys, per_unit.keys)]
    rows, where = filtered_source(source, sample_percent)
    rows = exp.select(*items).from_(rows, copy=False)
    if where is not None:
        rows = rows.where(where, copy=False)
    return rows.group_by(unit, *keys, copy=False)


# The keys read, in the snapshot the statements are built for, to occur in at most
# ``most`` rows of their table: (table, key columns, most). ``Engine.view`` sets them
# (``bounded_keys``) for the statements of its snapshot; outside one, none is known.
_BOUNDED: ContextVar[frozenset[tuple[str, tuple[str, ...], int]]] = ContextVar(
    "bounded", default=frozenset())


@contextmanager
def bounded_keys(known: Iterable[tuple[str, tuple[str, ...], int]]) -> Iterator[None]:
    """While open, ``_bounded_rows`` reads each of ``known`` (table, key, most) as its
    table itself: the caller read, in the snapshot the statements run in, that no value
    of the key occurs in more than ``most`` rows (``keys_beyond_sql`` found none)."""
    token = _BOUNDED.set(frozenset(known))
    try:
        yield
    finally:
        _BOUNDED.reset(token)


def bounded_reads(plan: QueryPlan) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """Every (table, key, most) the plan's statements read through ``_bounded_rows``:
    the key of each link of its protected tables' chains (most 1) and each public join's
    key (its multiplicity), with those of a per-unit relation's source."""
    reads: list[tuple[str, tuple[str, ...], int]] = []
    for table in (plan.table, *(join.table for join in plan.joins if join.protected),
                  *(semi.table for semi in plan.semi_joins)):
        link = table.link
        while link is not None:
            reads.append((link.table, (link.key,), 1))
            link = link.then
    reads += [(join.table.name, tuple(join.key), join.multiplicity)
              for join in plan.joins if not join.protected]
    if plan.per_unit is not None:
        reads += bounded_reads(plan.per_unit.source)
    return tuple(dict.fromkeys(reads))


def keys_beyond_sql(table: str, key: tuple[str, ...], most: int, dialect: str) -> str:
    """One row when a value of ``key`` (no NULL in it) occurs in more than ``most``
    rows of ``table``, none otherwise."""
    beyond = exp.Count(this=exp.Star()) > exp.Literal.number(most)
    return _key_groups(table, key, beyond).limit(1).sql(dialect=dialect)


def _key_groups(table: str, key: tuple[str, ...], having: exp.Expression) -> exp.Select:
    """The values of ``key`` (one column, or several together; none with a NULL) of
    ``table`` whose rows meet ``having``, one row each."""
    columns = [exp.column(column, quoted=True) for column in key]
    return (exp.select(*columns).from_(table_ref(table))
            .where(exp.and_(*(column.copy().is_(exp.null()).not_() for column in columns)))
            .group_by(*(column.copy() for column in columns))
            .having(having))


def _bounded_rows(table: str, key: tuple[str, ...], most: int,
                  rows: exp.Expression | None = None) -> exp.Select:
    """The rows of ``table`` (read as ``rows``, by default the table itself) whose
    ``key`` (one column, or several together) occurs in at most ``most`` rows of the
    table (1: once); a key with a NULL matches nothing (the callers join on an
    equality of every column of the key, which a NULL never meets). Where the snapshot
    was read to hold no key beyond ``most`` (``bounded_keys``) those are all its rows
    but the NULL keys' (that match nothing anyway): the rows as they are, without the
    per-key count (a grouping of the whole table in every statement: TPC-H's 1.5 M
    order keys, most of a statement over line items whose WHERE keeps a few)."""
    source = table_ref(table) if rows is None else _named(rows, "_idp_r")
    if (table, key, most) in _BOUNDED.get():
        return exp.select("*").from_(source)
    bounded = _key_groups(table, key, exp.Count(this=exp.Star()) <= exp.Literal.number(most))
    columns = [exp.column(column, quoted=True) for column in key]
    value = columns[0] if len(columns) == 1 else exp.Tuple(expressions=columns)
    return (exp.select("*").from_(source)
            .where(exp.In(this=value, query=bounded.subquery(copy=False))))


def _named(rows: exp.Expression, alias: str) -> exp.Expression:
    """A table or a derived relation, under ``alias``."""
    if isinstance(rows, exp.Table):
        return rows.as_(alias, quoted=True)
    return rows.subquery(exp.to_identifier(alias, quoted=True), copy=False)


def table_rows(table: Table, sample_percent: int | None = None, linked: bool = True
               ) -> exp.Expression:
    """The rows of a protected (or public) table as the statistics read them: the table
    itself, or for a table whose unit comes through a foreign key (``unit_via``,
    docs/privacy.md §3.13) its rows with the derived unit as the column
    ``LINKED_UNIT``: the unit of the one row of the linked table whose key equals the
    row's link column, NULL when no such row, or more than one, exists (the key is read
    as unique in every statement, whatever was written after start), along the chain
    when that table is linked in turn. A left join: every row of the table, once.
    ``linked`` False: the table alone (``unlinked``)."""
    base = table_ref(table.name)
    if sample_percent is not None:
        base.set("sample", exp.TableSample(method=exp.var("SYSTEM"),
                                           percent=exp.Literal.number(sample_percent)))
    if table.link is None or not linked:
        return base
    return _linked_rows(base, table.link)


def link_owners(link: Link) -> exp.Select:
    """The link's target as (``k``, ``u``): each key read as unique (``_bounded_rows``)
    with its unit, along the chain when the target is linked in turn."""
    target = table_ref(link.table)
    if link.then is not None:
        target = _linked_rows(target, link.then)
    key, unit = exp.column(link.key, quoted=True), exp.column(link.unit, quoted=True)
    unique = _bounded_rows(link.table, (link.key,), 1, target)
    return (exp.select(exp.alias_(key, "k", quoted=True), exp.alias_(unit, "u", quoted=True))
            .from_(unique.subquery("_idp_o", copy=False)))


def _linked_rows(base: exp.Table, link: Link) -> exp.Select:
    owners = link_owners(link)
    mine = exp.Column(this=exp.Star(), table=exp.to_identifier("_idp_b", quoted=True))
    return (exp.select(mine, exp.alias_(exp.column("u", table="_idp_l", quoted=True),
                                        LINKED_UNIT, quoted=True))
            .from_(base.as_("_idp_b", quoted=True))
            .join(owners.subquery("_idp_l", copy=False), join_type="left",
                  on=exp.column(link.column, table="_idp_b", quoted=True).eq(
                      exp.column("k", table="_idp_l", quoted=True))))


def chain_tables(plan: QueryPlan) -> tuple[str, ...]:
    """The tables a plan's units are derived through (``unit_via`` chains of its
    protected tables), beyond the tables it names: its answers depend on them too."""
    tables = [plan.table, *(join.table for join in plan.joins if join.protected),
              *(semi.table for semi in plan.semi_joins)]
    named = {plan.table.name, *(join.table.name for join in plan.joins),
             *(semi.table.name for semi in plan.semi_joins)}
    out: list[str] = []
    for table in tables:
        for name in (table.link.tables if table.link else ()):
            if name not in named and name not in out:
                out.append(name)
    return tuple(out)


def counts_units(plan: QueryPlan) -> bool:
    """Whether the plan asks COUNT(DISTINCT unit): the scope then carries the unit as ``u``."""
    return any(agg.kind == UNITS for agg in plan.aggregates)


def count_distinct(column: exp.Expression) -> exp.Expression:
    return exp.Count(this=exp.Distinct(expressions=[column]))


def group_keys(plan: QueryPlan) -> tuple[str, ...]:
    return tuple(f"k{i}" for i in range(len(plan.group_by)))


def is_group(key: tuple) -> exp.Expression:
    """The scope's grouping columns k0, k1 … equal to ``key`` (a NULL key as IS NULL);
    keys come from the rules, a public table, a partition selection or the backend's own
    GROUP BY, never an analyst's literal."""
    return exp.and_(*[exp.column(f"k{i}").is_(exp.null()) if value is None
                      else exp.column(f"k{i}").eq(literal(value))
                      for i, value in enumerate(key)])


def unit_bound_sql(table: str, unit: str, dialect: str, joined: tuple[str, bool] | None = None
                   ) -> str:
    """The largest number of rows one privacy unit owns in the whole table (c of §5.2).

    ``joined`` = (table, left): of the two protected tables joined on the unit, the
    largest number of joined rows one unit owns: max over units of rows in one table ×
    rows in the other (LEFT: × at least one, a unit without rows in the second keeping
    its rows of the first once each; units of the second table only join nothing).
    NULL units join nothing; LEFT keeps the first table's NULL-unit rows, counted as
    one unit as for one table (docs/privacy.md §3.10)."""
    def per_unit(name: str) -> exp.Select:
        return (exp.select(exp.alias_(exp.column(unit, quoted=True), "u"),
                           exp.alias_(exp.Count(this=exp.Star()), "cnt"))
                .from_(table_ref(name))
                .group_by(exp.column(unit, quoted=True)))

    if joined is None:
        rows = exp.Max(this=exp.column("cnt"))
        source = per_unit(table).subquery("per_unit")
        query = exp.select(exp.func("coalesce", rows, exp.Literal.number(0))).from_(source)
        return query.sql(dialect=dialect)
    other, left = joined
    theirs = exp.column("cnt", table="b")
    if left:
        theirs = exp.func("coalesce", theirs, exp.Literal.number(1))
    rows = exp.Max(this=exp.Mul(this=exp.column("cnt", table="a"), expression=theirs))
    query = (exp.select(exp.func("coalesce", rows, exp.Literal.number(0)))
             .from_(per_unit(table).subquery("a"))
             .join(per_unit(other).subquery("b"),
                   on=exp.column("u", table="a").eq(exp.column("u", table="b")),
                   join_type="left" if left else "inner"))
    return query.sql(dialect=dialect)


def joined_units(plan: QueryPlan) -> tuple | None:
    """None for a plan over one table with its own unit column (``unit_bound_sql`` of
    that table); else what c depends on besides the data versions: the tables whose rows
    per unit multiply (``unit_sources``), with their LEFT flags and links."""
    protected = [join for join in plan.joins if join.protected]
    if not protected and plan.table.link is None:
        return None
    return (tuple((table.name, left, table.link) for table, left in
                  unit_sources(plan.table, plan.joins)),
            all(join.left for join in protected))


def bound_tables(plan: QueryPlan) -> tuple[str, ...]:
    """The tables c's statement (``plan_unit_bound_sql``) reads: the unit sources and the
    tables their units are derived through. c's data version is theirs alone: a public
    table joined, or one an EXISTS reads, does not move it, so plans that differ only in
    those share one c (each used to read it again, evicting the other's)."""
    names: list[str] = []
    for table, _ in unit_sources(plan.table, plan.joins):
        for name in (table.name, *(table.link.tables if table.link else ())):
            if name not in names:
                names.append(name)
    return tuple(names)


def plan_unit_bound_sql(plan: QueryPlan, dialect: str) -> str:
    """c of a plan: the largest number of (joined) rows one unit owns, through links and
    across protected tables (docs/privacy.md §3.10, §3.13): per unit, the product of its
    rows in each table of ``unit_sources`` (LEFT: at least one), each table read with
    its derived unit (``table_rows``). Rows of no unit (a NULL unit, a dangling link)
    count as one unit when they can be in the join (every protected join LEFT, so the
    first table's rows all stay), and not otherwise (an equality of units never holds
    for them)."""
    sources = unit_sources(plan.table, plan.joins)
    if joined_units(plan) is None:
        return unit_bound_sql(plan.table.name, plan.table.privacy_unit, dialect)

    def per_unit(table: Table) -> exp.Select:
        unit = exp.column(table.privacy_unit, quoted=True)
        return (exp.select(exp.alias_(unit, "u"), exp.alias_(exp.Count(this=exp.Star()), "cnt"))
                .from_(_named(table_rows(table), "_idp_s")).group_by(unit.copy()))

    first = per_unit(sources[0][0])
    if not all(join.left for join in plan.joins if join.protected):
        first = first.having(exp.column(sources[0][0].privacy_unit, quoted=True)
                             .is_(exp.null()).not_())
    query = exp.select().from_(first.subquery("p0"))
    product: exp.Expression = exp.column("cnt", table="p0")
    for index, (table, left) in enumerate(sources[1:], 1):
        name = f"p{index}"
        factor: exp.Expression = exp.column("cnt", table=name)
        if left:
            factor = exp.func("coalesce", factor, exp.Literal.number(1))
        product = exp.Mul(this=product, expression=factor)
        query = query.join(per_unit(table).subquery(name), join_type="left" if left else "inner",
                           on=exp.column("u", table="p0").eq(exp.column("u", table=name)))
    largest = exp.func("coalesce", exp.Max(this=product), exp.Literal.number(0))
    return query.select(largest).sql(dialect=dialect)


def needed_value(table: Table, need: ColumnNeeds) -> exp.Expression:
    """The normalised value of a needed column, or of a derived one (an aggregate's
    expression, proxy.analyze.expressions): its columns normalised as for a plain
    column, the guarded expression computed on them (total: finite or NULL for any row,
    ``proxy.guards``), the result clamped to its derived domain by ``guards.clamp``,
    which writes it once (the statement stays linear in the expression)."""
    column = table.columns.get(need.column)
    if isinstance(column, DerivedColumn):
        value = column.render(lambda name: clamped_to_domain(
            exp.column(name, quoted=True), table.columns[name].lower, table.columns[name].upper))
        return clamp(value, *value_range(need.lower, need.upper))
    if column is not None and not column.numeric:  # only counted: nothing to clamp
        return exp.column(need.column, quoted=True)
    return clamped_to_domain(exp.column(need.column, quoted=True), need.lower, need.upper)


# Sums are of each normalised value rounded to SUM_DECIMALS places, as integers.
SUM_DECIMALS = 6
SUM_SCALE = 10**SUM_DECIMALS
# A value scaled by SUM_SCALE fits a signed 64-bit integer with room to spare below this.
_SCALED_LIMIT = 9 * 10**18


def exact_sum(value: exp.Expression, lower: float | None = None,
              upper: float | None = None, copy: bool = True) -> exp.Expression:
    """SUM of normalised values in exact integer arithmetic (so both engines give the
    same number): Σ round(v·10⁶), an integer (read it with ``read_sum``).

    Each value is rounded on its own, by the same IEEE double operations in both
    engines (``FLOOR(v·10⁶ + 0.5)``, no engine's own rounding rule), so the integers,
    and their sum, are the same everywhere; the sum is exact (no float drift, no order
    dependence), each value within 0.5·10⁻⁶ of its double.

    Overflow. B = max(|L|, |U|) bounds every value (``value_range``: the declared
    domain, else MAGNITUDE_CAP = 10¹⁵). When B·10⁶ ≤ 9·10¹⁸ (B ≤ 9·10¹²), round(v·10⁶)
    fits a BIGINT (< 2⁶³ ≈ 9.22·10¹⁸) and is summed as one: PostgreSQL sums BIGINT into
    NUMERIC (exact, unbounded), DuckDB into HUGEINT (< 2¹²⁷ ≈ 1.7·10³⁸), which n values
    of at most 2⁶³ each cannot reach below n = 2⁶⁴ rows. Wider (no declared domain),
    v·10⁶ may reach 10²¹, beyond a BIGINT, so v is split into its integer part
    ⌊v⌋ (|⌊v⌋| ≤ 10¹⁵, a BIGINT) and its fraction rounded to 10⁻⁶ (0..10⁶, a BIGINT),
    each summed as above, and the result is Σ⌊v⌋·10⁶ + Σfrac: |Σ⌊v⌋·10⁶| ≤ 10²¹·n,
    within a HUGEINT below n = 1.7·10¹⁷ rows (PostgreSQL: unbounded). The cost is that
    of a plain float sum plus a few arithmetic operations per value (the DECIMAL(38, 6)
    cast it replaces cost PostgreSQL 5× the plain sum). ``copy`` False: ``value`` is a
    tree of the caller's that it gives up (built per call: copying costs more)."""
    scale = exp.Literal.number(SUM_SCALE)
    if not wide_sum(lower, upper):
        return exp.Sum(this=_rounded(exp.Mul(this=value.copy() if copy else value,
                                             expression=scale)))
    whole = exp.Floor(this=value.copy())
    fraction = exp.Mul(this=exp.paren(exp.Sub(this=value if not copy else value.copy(),
                                              expression=whole.copy())),
                       expression=scale)
    return exp.Add(
        this=exp.Mul(this=exp.Sum(this=exp.cast(whole, BIGINT, copy=False)), expression=scale.copy()),
        expression=exp.Sum(this=_rounded(fraction)))


def shrunk_sum(value: exp.Expression, lower: float, upper: float) -> exp.Expression:
    """``exact_sum`` of ``value`` (within [lower, upper], a tree the caller gives up)
    divided by ``statistics.sum_shrink`` of the wider end: a squared or multiplied
    value beyond 10¹⁵ would overflow the BIGINT each value is rounded into. Read it back
    times that power of two."""
    shrink = sum_shrink(max(abs(lower), abs(upper)))
    if shrink != 1:  # snapped: a product below 2⁻¹⁰⁷⁴ fails on PostgreSQL (underflow)
        value = exp.Mul(this=snap(value), expression=literal(1 / shrink))
    return exact_sum(value, lower / shrink, upper / shrink, copy=False)


def wide_sum(lower: float | None, upper: float | None) -> bool:
    """Whether ``exact_sum`` of values in [lower, upper] splits each value (above)."""
    low, high = value_range(lower, upper)
    return max(abs(low), abs(high)) * SUM_SCALE > _SCALED_LIMIT


def rounded_scaled(value: float, wide: bool) -> int:
    """The integer ``exact_sum`` adds for one double ``value`` (``wide``: split into
    ⌊v⌋·10⁶ and its fraction rounded), by the same IEEE operations as the backends."""
    if not wide:
        return math.floor(value * SUM_SCALE + 0.5)
    whole = math.floor(value)
    return whole * SUM_SCALE + math.floor((value - whole) * SUM_SCALE + 0.5)


def _rounded(value: exp.Expression) -> exp.Expression:
    """⌊value + ½⌋ as a BIGINT: round half up, the same in both engines (their ROUND
    and casts differ on ties: PostgreSQL rounds a float half to even)."""
    half = exp.Add(this=value, expression=exp.Literal.number("0.5"))
    return exp.cast(exp.Floor(this=half), BIGINT, copy=False)


def read_exact(value) -> Fraction:
    """An ``exact_sum`` as read back, exactly (0 for no values)."""
    return Fraction(0) if value is None else Fraction(int(value), SUM_SCALE)


def read_sum(value) -> float:
    """An ``exact_sum`` as read back (an integer, a Decimal, or None for no values)."""
    if value is None:
        return 0.0
    return float(Decimal(int(value)).scaleb(-SUM_DECIMALS))


def extreme_refs(need: ColumnNeeds, anchor: str) -> list[RankRef]:
    """The ranks ``need`` wants counted from one end (TOP or BOTTOM)."""
    return [r for r in need.ranks if r.anchor == anchor]


def fill_extremes(need: ColumnNeeds, stats: ColumnStats, refs: list[RankRef], values) -> None:
    """From a list of the largest (TOP) or smallest (BOTTOM) values, most extreme first,
    the values at ``refs`` (of that end): TOP+j is the (j+1)-th largest; None when there
    are not that many. NULLs, which a top-k query lists only when fewer than k values
    exist, are dropped."""
    low, high = value_range(need.lower, need.upper)  # ``clamp_to_domain``, in one pass:
    values = [min(max(value, low), high)  # a drawn MAX's first windows list thousands
              for value in map(float, (v for v in values or () if v is not None))
              if value == value]  # NaN is NULL
    found = stats.values
    for ref in refs:
        found[ref] = values[ref.offset] if ref.offset < len(values) else None


# Statements rendered per plan shape (``reused_sql``) --------------------------------

_RENDERED_KEPT = 512
_SLOT = re.compile("'\x00([0-9]+)\x00'")  # a WHERE literal's mark in a rendered statement
# (plan fields' ids, key, dialect) -> (that plan, its WHERE, the pieces: () not made yet,
# None not joinable)
_rendered: OrderedDict[tuple, tuple[QueryPlan, exp.Expression,
                                    tuple[str | int, ...] | None]] = OrderedDict()
_rendering = threading.Lock()
_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(QueryPlan) if f.name != "where")


def reused_sql(plan: QueryPlan, key: tuple, dialect: str,
               build: Callable[[QueryPlan], exp.Expression]) -> str:
    """``build(plan).sql(dialect)``, rendered once per plan shape: a statement of the
    shape cache (proxy.analyze.shapes) comes back as a plan whose fields are the very
    objects of the kept one but its WHERE, a copy with other literals; building and
    rendering its statistics statement again was the largest part of the proxy's own
    time per fresh answer (0.3 ms of a COUNT's). So the statement is rendered once with
    every WHERE literal a mark, and then its pieces are joined around the literals of
    each plan whose other fields are those very objects, whose WHERE differs in literal
    values only (``_literals_of``), and whose ``key`` (everything else ``build`` reads)
    is equal, built under the same keys read as bounded. The pieces are made when a shape comes back (a statement asked once is
    not rendered twice), and kept only when joining that plan's own literals gives its
    own rendering back (a literal the generator changes, moves or drops is not joined:
    such statements are rendered every time)."""
    where = plan.where
    # the keys read as bounded (``bounded_keys``) change the SQL built from one plan
    index = (tuple(id(getattr(plan, name)) for name in _PLAN_FIELDS), key, dialect,
             _BOUNDED.get())
    with _rendering:
        kept = _rendered.get(index)
        if kept is not None:
            _rendered.move_to_end(index)
    if kept is not None and kept[2] and where is not None:  # its objects alive: the
        literals = _literals_of(where, kept[1])  # ids are theirs
        if literals is not None:
            return _joined(kept[2], literals, dialect)
    checkpoint()
    sql = build(plan).sql(dialect=dialect, copy=False)
    if where is None or len(sql) > 100_000:
        return sql
    if kept is None or kept[2] is None:  # a shape seen once is not rendered twice:
        if kept is None:  # only when it comes back (None: its pieces did not join)
            _keep(index, (plan, where, ()))
        return sql
    marked = where.copy()
    own = []
    for number, node in enumerate(list(marked.find_all(exp.Literal))):
        own.append(exp.Literal(this=node.this, is_string=node.is_string))
        node.set("this", f"\x00{number}\x00")
        node.set("is_string", True)
    split = _SLOT.split(build(dataclasses.replace(plan, where=marked)).sql(dialect=dialect,
                                                                           copy=False))
    pieces = tuple(piece if position % 2 == 0 else int(piece)
                   for position, piece in enumerate(split))
    if any(isinstance(p, int) and p >= len(own) for p in pieces) \
            or _joined(pieces, own, dialect) != sql:
        pieces = None
    _keep(index, (plan, where, pieces))
    return sql


def _keep(index: tuple, entry: tuple) -> None:
    with _rendering:
        _rendered[index] = entry
        _rendered.move_to_end(index)
        while len(_rendered) > _RENDERED_KEPT:
            _rendered.popitem(last=False)


def _literals_of(where: exp.Expression, kept: exp.Expression) -> list[exp.Literal] | None:
    """The literals of ``where`` in order, if it is ``kept`` but for their values (same
    nodes in the same places, same other arguments); None otherwise."""
    literals = []
    for node, other in itertools.zip_longest(where.walk(), kept.walk()):
        if node is None or other is None or type(node) is not type(other) \
                or node.args.keys() != other.args.keys():
            return None
        literal = isinstance(node, exp.Literal)
        for name, value in node.args.items():
            if literal and name == "this":
                continue
            if isinstance(value, list):
                if len(value) != len(other.args[name]) or any(
                        not isinstance(item, exp.Expression) and item != theirs
                        for item, theirs in zip(value, other.args[name])):
                    return None
            elif not isinstance(value, exp.Expression) and value != other.args[name]:
                return None
            elif isinstance(value, exp.Expression) and not isinstance(
                    other.args[name], exp.Expression):
                return None
        if literal:
            literals.append(node)
    return literals


@lru_cache(maxsize=8)
def _generator(dialect: str):
    return Dialect.get_or_raise(dialect).generator()


def _joined(pieces: tuple[str | int, ...], literals: list[exp.Literal], dialect: str) -> str:
    render = _generator(dialect).literal_sql
    return "".join(piece if isinstance(piece, str) else render(literals[piece])
                   for piece in pieces)
