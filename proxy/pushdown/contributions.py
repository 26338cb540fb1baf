"""Per-unit contributions against a ladder of bounds: the statement behind the automatic
clipping bound of SUM and AVG (proxy.privacy.contribution_bounds).

One statement for every contribution (``statistics.Contribution``: Σ (x − origin)^power
of a column's normalised values) and every group: the scope's rows summed per unit (per
group), then per group and rung k the count of units beyond ±B_k and the sum of the
contributions clipped to [−B_k, B_k]. Only counts and sums leave the backend.
A table without a privacy unit has one record per unit: its rows are the contributions.

Clipped per group (``bucket_sql``), each unit falls in one bucket of the ladder, j = the
rungs below its |T_u|, found by comparisons alone (a nested CASE on the public rungs:
total, no logarithm); the backend groups the units by bucket and returns per bucket their
count, the positive ones and Σ round(T_u·10⁶). The count beyond B_k is then the units of
the buckets above k, and the clipped sum Σ of the buckets at or below k plus round(±B_k·10⁶)
for each unit above: the integers the per-rung statement (``contribution_sql``) sums, so
the same numbers, from a few aggregates per unit instead of two per rung (PostgreSQL:
5.9 s against 0.06 s for the plain SUM over a million rows, per rung a CASE and a
BIGINT sum). Clipped across groups (L1) the bucket is that of the unit's total T_u, and
a unit above B_k adds B_k times its share trunc(t/T_u·10¹²)/10¹², the shares summed per
bucket: one integer per unit and group for every rung (the per-rung statement rounded
t·B_k/T_u at each rung; docs/privacy.md §3.14 bounds the difference and keeps the
sensitivity). In L∞ each group's part is clipped on its own, exactly as per group; the
units beyond are counted by the bucket of their largest part. The per-rung statement
stays as the tests' reference (``per_rung_ladders``).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from sqlglot import exp

from proxy.backends.base import Capabilities, Nullable
from proxy.guards import snap
from proxy.interrupts import checkpoint
from proxy.pushdown.scope import (
    BIGINT,
    SUM_SCALE,
    Execute,
    counts_units,
    group_keys,
    is_group,
    link_owners,
    read_sum,
    reused_sql,
    rounded_scaled,
    scope_select,
    shrunk_sum,
    unlinked,
    wide_sum,
)
from proxy.pushdown.values import case_of, literal
from proxy.rules import LINKED_UNIT
from proxy.statistics import ColumnNeeds, Contribution, Ladder, sum_shrink
from proxy.vocabulary import QueryPlan


def contribution_sql(plan: QueryPlan, wanted: tuple[Contribution, ...],
                     ladders: tuple[tuple[float, ...], ...],
                     clip_rows_per_unit: int | None,
                     joint: frozenset[Contribution] = frozenset(),
                     largest: bool = False) -> exp.Select:
    """The per-rung statement: keys, then per contribution i and rung k ``b_i_k`` (units
    beyond ±B_k) and ``s_i_k`` (their clipped sum, an ``exact_sum``). ``joint``
    contributions are clipped across groups: by their total over the groups (L1), or,
    ``largest``, each group's to ±B_k with a unit counted beyond by its largest (L∞)."""
    keys = group_keys(plan)
    per_unit = _per_unit(plan, wanted, clip_rows_per_unit, bool(joint))
    if joint:
        per_unit = _unit_totals(per_unit, keys, [i for i, c in enumerate(wanted) if c in joint],
                                largest)
    columns_out: list[exp.Expression] = []  # one select() at the end: each call copies
    for i, rungs in enumerate(ladders):  # the whole statement (quadratic in the rungs)
        checkpoint()
        columns_out += [column for k, bound in enumerate(rungs)
                        for column in _rung(i, k, bound, wanted[i] in joint, largest)]
    outer = exp.select(*keys, *columns_out).from_(per_unit.subquery("p"), copy=False)
    return outer.group_by(*keys, copy=False) if keys else outer


def _per_unit(plan: QueryPlan, wanted: tuple[Contribution, ...],
              clip_rows_per_unit: int | None, with_unit: bool, fenced: bool = False,
              scalar_links: bool = False) -> exp.Select:
    """Per unit (per group) its contributions ``t{i}``, never NULL (``with_unit``: and
    the unit, ``u``); without a privacy unit, per row (``fenced``: behind OFFSET 0,
    ``Capabilities.fenced_rows``; a unit's GROUP BY is a fence already). A linked
    table read without its link: summed per link value first (``_summed_by_link``), or,
    under GROUP BY where ``scalar_links`` (``Capabilities.scalar_links``), each row's
    unit read by a scalar subquery (``_with_scalar_unit``) and the rows summed per unit
    once. Which form is a function of the plan and the backend alone (public), never of
    the data: the forms add a unit's doubles in different orders, so a total may differ
    in its last bits between them, and a choice made on the data would let one unit's
    rows move the others' totals across a rung (one on it exactly, in decimal: TPC-H
    Q01 at SF 1, group (A, F), 87 customers' discounts add up to 4.45, a rung, and fall
    on one side of it in one form and on the other in the other)."""
    keys = group_keys(plan)
    columns = list(dict.fromkeys(c.column for c in wanted if c.column))
    needs = tuple(ColumnNeeds(name, lower=plan.table.columns[name].lower,
                              upper=plan.table.columns[name].upper) for name in columns)
    eager = _by_link(plan, needs, clip_rows_per_unit)  # its own scope, without the unit
    scope = eager if eager is not None else scope_select(plan, needs, clip_rows_per_unit,
                                                         unit=True)
    terms: list[exp.Expression | None] = []
    for contribution in wanted:  # (x − origin)^power of the normalised value c_j
        if contribution.units:  # COUNT(DISTINCT unit): the unit once, below (one table)
            terms.append(None)
            continue
        if not contribution.column:  # COUNT(*): each row once
            terms.append(exp.Literal.number(1))
            continue
        value: exp.Expression = exp.column(f"c{columns.index(contribution.column)}")
        if contribution.power == 0:  # COUNT(col): each normalised value that is not NULL
            terms.append(exp.Case().when(value.is_(exp.null()), exp.Literal.number(0))
                         .else_(exp.Literal.number(1)))
            continue
        if contribution.centres:  # each group's own origin and scale (per key: CASE)
            origin, scale = (case_of(*((is_group(key), literal(entry[at]))
                                       for key, *entry in contribution.centres),
                                     default=literal(0.0)) if keys
                             else literal(contribution.centres[0][at + 1]) for at in (0, 1))
            value = exp.Mul(this=snap(exp.paren(exp.Sub(this=value, expression=origin))),
                            expression=scale)
        elif contribution.origin:
            value = exp.paren(exp.Sub(this=value, expression=literal(contribution.origin)))
        if contribution.power == 2:  # snapped: a square below 2⁻¹⁰⁷⁴ fails on PostgreSQL
            value = snap(value)
            value = exp.Mul(this=value, expression=value.copy())
        terms.append(value)
    zero = exp.Literal.number(0)
    if plan.table.privacy_unit is None:  # a NULL (or NaN) value contributes 0
        rows = exp.select(*keys, *[exp.alias_(exp.Coalesce(
            this=term, expressions=[zero.copy()]), f"t{i}") for i, term in enumerate(terms)]
        ).from_(scope.subquery("r", copy=False), copy=False)
        return rows.offset(0, copy=False) if fenced else rows
    # a unit's contribution: the sum over its rows in scope (none: 0)
    if eager is not None and not (scalar_links and keys):
        return _summed_by_link(plan, eager, keys, terms, with_unit)
    if eager is not None:
        scope = _with_scalar_unit(plan, eager)
    present = exp.Case().when(exp.column("u").is_(exp.null()), zero.copy()).else_(
        exp.Literal.number(1))  # a unit with rows in the group; the NULL unit none
    return exp.select(*keys, *[exp.alias_(present.copy() if term is None else exp.Coalesce(
        this=_summed(term), expressions=[zero.copy()]), f"t{i}")
        for i, term in enumerate(terms)], *(["u"] if with_unit else [])
    ).from_(scope.subquery("r", copy=False), copy=False).group_by(*keys, "u", copy=False)


def _by_link(plan: QueryPlan, needs: tuple[ColumnNeeds, ...],
             clip_rows_per_unit: int | None) -> exp.Select | None:
    """The rows in scope without their derived unit, with their link column as ``lk``,
    where the units' contributions may be summed per link value first
    (``_summed_by_link``): a linked table (``unit_via``) read without its link
    (``unlinked``: no protected join, no EXISTS), no clipping of rows per unit, nothing
    that names the unit. Else None."""
    link = plan.table.link
    if (link is None or clip_rows_per_unit is not None or plan.per_unit is not None
            or not unlinked(plan) or counts_units(plan)):
        return None
    scope = scope_select(plan, needs, None, unit=False)
    if any(column.name == LINKED_UNIT for column in scope.find_all(exp.Column)):
        return None
    return scope.select(exp.alias_(exp.column(link.column, quoted=True), "lk"), copy=False)


def _with_scalar_unit(plan: QueryPlan, scope: exp.Select) -> exp.Select:
    """The rows in scope (``_by_link``) with their unit as ``u``: that of the link's
    target row whose key is their link value (``link_owners``: each key read as unique,
    so the subquery gives at most one row, and never fails), NULL where none is (a NULL
    or dangling link), as the LEFT JOIN of ``table_rows`` gives it; the link value read
    through the scope's alias, which no name of the target's subquery shadows. DuckDB
    plans it as a SINGLE join built on the target (``Capabilities.scalar_links``)."""
    mine = "_idp_p"
    owners = link_owners(plan.table.link)
    unit = exp.select(exp.column("u", table="_idp_l", quoted=True)).from_(
        owners.subquery("_idp_l", copy=False), copy=False).where(
        exp.column("k", table="_idp_l", quoted=True).eq(exp.column("lk", table=mine)),
        copy=False)
    return exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier(mine)),
                      exp.alias_(exp.Subquery(this=unit), "u")).from_(
        scope.subquery(mine, copy=False), copy=False)


def _summed_by_link(plan: QueryPlan, scope: exp.Select, keys: tuple[str, ...],
                    terms: list[exp.Expression], with_unit: bool) -> exp.Select:
    """Per unit (per group) its contributions ``t{i}`` as ``_per_unit`` gives them, summed
    eagerly (docs/privacy.md §3.14 "Summed per link first"): the rows in scope summed
    per group and link value (an order key: every row of it has the one unit the link
    gives it), those partial sums joined to the link's target for their unit and summed
    per unit. The same rows in the same sums, regrouped; the join reads one row per link
    value instead of one per row (TPC-H Q01: about 1.5 M orders' sums, not 5.9 M line
    items). A count's sum stays a BIGINT (a sum of sums is NUMERIC on PostgreSQL)."""
    zero = exp.Literal.number(0)
    mine = "_idp_p"
    partial = (exp.select(*keys, *[exp.alias_(_summed(term), f"p{i}")
                                   for i, term in enumerate(terms)], "lk")
               .from_(scope.subquery("r", copy=False), copy=False)
               .group_by(*keys, "lk", copy=False))
    owners = link_owners(plan.table.link)
    joined = (exp.select(*[exp.column(key, table=mine) for key in keys],
                         *[exp.column(f"p{i}", table=mine) for i in range(len(terms))],
                         exp.alias_(exp.column("u", table="_idp_l", quoted=True), "u"))
              .from_(partial.subquery(mine, copy=False), copy=False)
              .join(owners.subquery("_idp_l", copy=False), join_type="left",
                    on=exp.column("lk", table=mine).eq(
                        exp.column("k", table="_idp_l", quoted=True))))
    totals = []
    for i, term in enumerate(terms):
        total: exp.Expression = exp.Sum(this=exp.column(f"p{i}"))
        if _whole(term):
            total = exp.cast(total, BIGINT)
        totals.append(exp.alias_(exp.Coalesce(this=total, expressions=[zero.copy()]), f"t{i}"))
    return exp.select(*keys, *totals, *(["u"] if with_unit else [])
                      ).from_(joined.subquery("r", copy=False), copy=False
                              ).group_by(*keys, "u", copy=False)


def _summed(term: exp.Expression) -> exp.Expression:
    """The sum of a contribution's ``term`` over a group's rows: a count's as COUNT
    (COUNT(*) for its 1, COUNT(v) for CASE WHEN v IS NULL THEN 0 ELSE 1 END), the same
    number over the rows of a group, never empty (DuckDB sums the integers into a
    HUGEINT: TPC-H Q01's bucketed statement 1.18 → 1.09 s with its four counts so);
    else SUM(term)."""
    if isinstance(term, exp.Literal) and term.this == "1":
        return exp.Count(this=exp.Star())
    if isinstance(term, exp.Case) and len(term.args["ifs"]) == 1:
        (case,) = term.args["ifs"]
        test, default = case.args["this"], term.args.get("default")
        if (isinstance(test, exp.Is) and isinstance(test.expression, exp.Null)
                and case.args["true"] == exp.Literal.number(0)
                and default == exp.Literal.number(1)):
            return exp.Count(this=test.this.copy())
    return exp.Sum(this=term)


def _whole(term: exp.Expression) -> bool:
    """Whether a contribution's term is a row count: COUNT(*)'s 1 or COUNT(col)'s 0/1."""
    return isinstance(term, exp.Literal) or (
        isinstance(term, exp.Case) and all(isinstance(value, exp.Literal) for value in (
            term.args["default"], *(case.args["true"] for case in term.args["ifs"]))))


def _signed(contribution: Contribution, plan: QueryPlan) -> bool:
    """Whether a contribution can be negative: a first power of values whose domain
    reaches below its origin (a count's and a square's cannot)."""
    if contribution.power != 1 or not contribution.column:
        return False
    lower = plan.table.columns[contribution.column].lower
    return lower is None or lower < contribution.origin


@functools.lru_cache(maxsize=1024)
def _form(bound: float) -> tuple[bool, float]:
    """How the per-rung statement sums a rung's clipped values (``_rung``): divided by
    ``sum_shrink(bound)``, in the ``exact_sum`` form (``wide_sum``) of the shrunk bound."""
    shrink = sum_shrink(bound)
    return wide_sum(-bound / shrink, bound / shrink), shrink


@functools.lru_cache(maxsize=256)
def _forms(rungs: tuple[float, ...]) -> tuple[tuple[bool, float], ...]:
    """The forms (``_form``) the rungs' clipped sums take, each once."""
    return tuple(dict.fromkeys(_form(bound) for bound in rungs))


def _bucket(value: exp.Expression, rungs: tuple[float, ...], low: int, high: int
            ) -> exp.Expression:
    """The number of rungs below ``value`` (≥ 0), known to lie in [low, high]: a binary
    search of nested CASEs on the public rungs, a comparison at each level."""
    if low == high:
        return exp.Literal.number(low)
    middle = (low + high) // 2  # value > B_middle: more than ``middle`` rungs below it
    return exp.Case(ifs=[exp.If(this=exp.GT(this=value.copy(), expression=literal(rungs[middle])),
                                true=_bucket(value, rungs, middle + 1, high))],
                    default=_bucket(value, rungs, low, middle))


def bucket_sql(plan: QueryPlan, wanted: tuple[Contribution, ...],
               ladders: tuple[tuple[float, ...], ...],
               clip_rows_per_unit: int | None, fenced: bool = False,
               joint: frozenset[Contribution] = frozenset(), largest: bool = False,
               crossed: bool = False, scalar_links: bool = False) -> exp.Select:
    """The bucketed statement (above): keys, then per contribution i its bucket ``j{i}``
    (of |t|; clipped across groups in L1, of the unit's total ``n{i}``), and per
    contribution clipped across groups in L∞ the bucket ``h{i}`` of the unit's largest
    part (several bucket columns: one grouping set each, the others NULL), then the
    units ``n`` (``joint``: and ``m``, the units counted in this group, ``f`` = 1), and per
    contribution its positive units ``p{i}`` (where it can be negative), Σ round(T_u·10⁶)
    in each form its rungs' sums take (``e{i}_{form}``) and, clipped across groups in
    L1, Σ trunc(t/T_u·SHARE_SCALE) (``r{i}``, 0 in bucket 0: a unit below every rung).
    ``crossed`` (``Capabilities.crossed_buckets``): several bucket columns grouped all at
    once where their cells are few (``_crossed``), every column set in every row.
    ``scalar_links``: a linked table's units as ``_per_unit`` reads them."""
    keys = group_keys(plan)
    per_unit = _per_unit(plan, wanted, clip_rows_per_unit, bool(joint), fenced, scalar_links)
    indexes = [i for i, c in enumerate(wanted) if c in joint]
    if joint:
        per_unit = _unit_totals(per_unit, keys, indexes, largest)
    l1 = [c in joint and not largest for c in wanted]
    signed = [_signed(contribution, plan) and not l1[i]
              for i, contribution in enumerate(wanted)]
    buckets = [exp.alias_(_bucket(exp.column(f"n{i}") if l1[i] else
                                  exp.Abs(this=exp.column(f"t{i}")) if signed[i] else
                                  exp.column(f"t{i}"), rungs, 0, len(rungs)), f"j{i}")
               for i, rungs in enumerate(ladders)]  # |t| is t where t ≥ 0
    tops = [f"h{i}" for i in indexes] if largest else []
    buckets += [exp.alias_(_bucket(exp.column(f"n{i}"), ladders[i], 0, len(ladders[i])),
                           f"h{i}") for i in indexes if largest]
    carried = [f"t{i}" for i in range(len(wanted))] + [f"n{i}" for i in indexes]
    inner = exp.select(*keys, *carried, *(["f"] if joint else []), *buckets).from_(
        per_unit.subquery("p", copy=False), copy=False)
    columns_out: list[exp.Expression] = [exp.alias_(exp.Count(this=exp.Star()), "n")]
    if joint:  # counts as COUNT of a CASE without ELSE: a BIGINT where SUM's is a
        # HUGEINT on DuckDB (its rows cost 0.045 s a column to fetch at Q15's 86,514)
        columns_out.append(exp.alias_(exp.Count(this=exp.Case(ifs=[exp.If(
            this=exp.EQ(this=exp.column("f"), expression=exp.Literal.number(1)),
            true=exp.Literal.number(1))])), "m"))
    for i, rungs in enumerate(ladders):
        value = exp.column(f"t{i}")
        if signed[i]:
            columns_out.append(exp.alias_(exp.Count(this=exp.Case(ifs=[exp.If(
                this=exp.GT(this=value.copy(), expression=exp.Literal.number(0)),
                true=exp.Literal.number(1))])), f"p{i}"))
        for index, form in enumerate(_forms(rungs)):  # clipped to the form's top rung:
            # within it the bucket's values as they are (those above: read at other rungs)
            bound = max(b for b in rungs if _form(b) == form)
            columns_out.append(exp.alias_(shrunk_sum(_clipped(_as_double(
                value.copy(), wanted[i]), bound), -bound, bound), f"e{i}_{index}"))
        if l1[i]:
            columns_out.append(exp.alias_(exp.Sum(this=_share(i, rungs[0])), f"r{i}"))
    names = [f"j{i}" for i in range(len(wanted))] + tops
    _hoisted(columns_out, inner)
    outer = exp.select(*keys, *names, *columns_out).from_(
        inner.subquery("q", copy=False), copy=False)
    if len(names) == 1 or crossed and _crossed(ladders, indexes, largest):
        return outer.group_by(*keys, *names, copy=False)
    sets = [exp.Tuple(expressions=[exp.column(key) for key in (*keys, name)])
            for name in names]
    return outer.group_by(exp.GroupingSets(expressions=sets), copy=False)


def _as_double(value: exp.Expression, contribution: Contribution) -> exp.Expression:
    """A count's ``t`` (an integer: COUNT(*), COUNT(col), COUNT(DISTINCT unit)) as a
    DOUBLE where it is clipped and rounded: against the rungs' decimal literals DuckDB
    and PostgreSQL would clip, scale and round an integer in DECIMAL/NUMERIC arithmetic
    (TPC-H Q01's four counts, 324,412 units: 0.11 s of DuckDB's 0.12 s for all nine
    contributions), a sum's t is a DOUBLE already. The same integers where they are read
    (the buckets at or below the form's top rung, |t| ≤ B, so round(t·10⁶) = t·10⁶ in
    both, exact in a double below |t| = 2⁵³/15625 ≈ 5.8·10¹¹ rows of one unit); above
    it, clipped to ±B, the IEEE operations ``rounded_scaled`` assumes (such sums are
    never read: a unit above is taken at ±B from the constants)."""
    if contribution.units or not contribution.column or contribution.power == 0:
        return exp.cast(value, exp.DataType.build("double"), copy=False)
    return value


def _hoisted(columns: list[exp.Expression], inner: exp.Select) -> None:
    """Each SUM's or COUNT's argument in ``columns`` that is not a column (nor COUNT's *)
    computed in ``inner``, once per unit row, as ``a{n}``, and summed there by that name: grouping sets read the
    rows once per set and computed every argument again in each (TPC-H Q01 at SF 1,
    six sets over 324,412 units: about a sixth of the statement). The same integers
    summed."""
    moved: list[exp.Expression] = []
    for column in columns:
        for node in list(column.find_all(exp.Sum, exp.Count)):
            argument = node.this
            if argument is None or isinstance(argument, (exp.Column, exp.Star)):
                continue
            name = f"a{len(moved)}"
            node.set("this", exp.column(name))
            moved.append(exp.alias_(argument, name, copy=False))
    inner.select(*moved, copy=False)


# The most cells (combinations of the bucket columns' values) a crossed statement may
# group each group's units into: every cell occupied is a row read back (the grouping
# sets' rows are the columns' buckets, added)
CROSSED_CELLS = 4096


def _crossed(ladders: tuple[tuple[float, ...], ...], indexes: list[int], largest: bool
             ) -> bool:
    """Whether the bucket columns (``j{i}`` of every ladder and, ``largest``, ``h{i}`` of
    those at ``indexes``) have at most ``CROSSED_CELLS`` cells together."""
    columns = [*ladders, *(ladders[i] for i in indexes if largest)]
    return math.prod(len(rungs) + 1 for rungs in columns) <= CROSSED_CELLS


# A unit's share t/T_u of its total in a group, as the integer trunc(t/T_u·SHARE_SCALE):
# each scaled contribution B_k·t/T_u read back within B_k·10⁻¹² (docs/privacy.md §3.14)
SHARE_SCALE = 10**12


def _share(i: int, lowest: float) -> exp.Expression:
    """trunc(t{i}/n{i}·SHARE_SCALE), toward 0 (so a unit's |shares| add up to at most
    SHARE_SCALE, docs/privacy.md §3.14), where n{i} > ``lowest`` (≥ 0: no division by 0),
    else 0: a BIGINT (t/n within [−1, 1]: total)."""
    ratio = exp.Mul(this=exp.paren(exp.Div(this=snap(exp.column(f"t{i}")),
                                           expression=exp.column(f"n{i}")), copy=False),
                    expression=exp.Literal.number(SHARE_SCALE))
    toward_zero = exp.Case(ifs=[exp.If(this=exp.LT(this=ratio, expression=exp.Literal.number(0)),
                                       true=exp.Ceil(this=ratio.copy()))],
                           default=exp.Floor(this=ratio.copy()))
    return exp.cast(exp.Case(ifs=[exp.If(this=exp.GT(this=exp.column(f"n{i}"),
                                                     expression=literal(lowest)),
                                         true=toward_zero)],
                             default=exp.Literal.number(0)), "BIGINT", copy=False)


@functools.lru_cache(maxsize=256)
def _rung_constants(rungs: tuple[float, ...]) -> tuple[tuple[tuple[bool, float], int, int], ...]:
    """Per rung its form and the integers a unit clipped to +B_k and to −B_k adds."""
    out = []
    for bound in rungs:
        form = _form(bound)
        wide, shrink = form
        scaled = bound * (1 / shrink)
        out.append((form, rounded_scaled(scaled, wide), rounded_scaled(-scaled, wide)))
    return tuple(out)


def _unit_totals(per_unit: exp.Select, keys: tuple[str, ...], indexes: list[int],
                 largest: bool = False) -> exp.Select:
    """``per_unit`` with, per unit, ``n{i}`` = T_u, the sum of |t{i}| over its groups
    (``largest``: the largest), and ``f`` = 1 in one group of each unit (its first by
    the keys)."""
    norm = exp.Max if largest else exp.Sum
    first = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("u")],
                       order=exp.Order(expressions=[exp.Ordered(this=exp.column(key))
                                                    for key in keys]))
    totals = [exp.alias_(exp.Window(this=norm(this=exp.Abs(this=exp.column(f"t{i}"))),
                                    partition_by=[exp.column("u")]), f"n{i}")
              for i in indexes]
    return exp.select("*", *totals, exp.alias_(first, "f")).from_(
        per_unit.subquery("j", copy=False), copy=False)


def _rung(i: int, k: int, bound: float, joint: bool, largest: bool = False
          ) -> tuple[exp.Expression, exp.Expression]:
    """``b_i_k`` and ``s_i_k`` of contribution i (``t{i}``, never NULL, finite) at rung k,
    built from fresh nodes (a statement has hundreds: copying shared ones cost more than
    the rest of its building). t is clamped by LEAST and GREATEST: no NULL to guard."""
    def value() -> exp.Expression:
        return exp.column(f"t{i}")

    def total() -> exp.Expression:
        return exp.column(f"n{i}")

    if joint:  # a unit counted beyond in its first group only
        beyond = exp.and_(exp.EQ(this=exp.column("f"), expression=exp.Literal.number(1)),
                          exp.GT(this=total(), expression=literal(bound)), copy=False)
    if joint and largest:  # L∞: each group's contribution clipped to ±B alone
        scaled = value()
    elif joint:  # L1: scaled by min(1, B/T_u)
        scaled = exp.Case(ifs=[exp.If(this=exp.GT(this=total(), expression=literal(bound)),
                                      true=exp.Mul(
            this=snap(value()), expression=exp.paren(exp.Div(this=literal(bound),
                                                        expression=total()), copy=False)))],
                          default=value())
    else:
        beyond = exp.or_(exp.GT(this=value(), expression=literal(bound)),
                         exp.LT(this=value(), expression=literal(-bound)), copy=False)
        scaled = value()
    clipped = _clipped(scaled, bound)
    count = exp.Case(ifs=[exp.If(this=beyond, true=exp.Literal.number(1))],
                     default=exp.Literal.number(0))
    return (exp.alias_(exp.Sum(this=count), f"b_{i}_{k}", copy=False),
            exp.alias_(shrunk_sum(clipped, -bound, bound), f"s_{i}_{k}", copy=False))


def _clipped(value: exp.Expression, bound: float) -> exp.Expression:
    """``value`` clipped to [−bound, bound] (LEAST and GREATEST: no NULL to guard)."""
    return exp.Least(this=exp.Greatest(this=value, expressions=[literal(-bound)],
                                       ignore_nulls=True),
                     expressions=[literal(bound)], ignore_nulls=True)


def contribution_ladders(plan: QueryPlan, wanted: tuple[Contribution, ...],
                         ladders: tuple[tuple[float, ...], ...], capabilities: Capabilities,
                         clip_rows_per_unit: int | None, execute: Execute,
                         joint: frozenset[Contribution] = frozenset(), largest: bool = False
                         ) -> dict[tuple, dict[Contribution, Ladder]]:
    """Every group's ladders (key ``()`` without GROUP BY), by contribution, from the
    buckets (``bucket_sql``)."""
    return _bucketed_ladders(plan, wanted, ladders, capabilities, clip_rows_per_unit,
                             execute, joint, largest)


def per_rung_ladders(plan: QueryPlan, wanted: tuple[Contribution, ...],
                     ladders: tuple[tuple[float, ...], ...], capabilities: Capabilities,
                     clip_rows_per_unit: int | None, execute: Execute,
                     joint: frozenset[Contribution] = frozenset(), largest: bool = False
                     ) -> dict[tuple, dict[Contribution, Ladder]]:
    """``contribution_ladders`` from ``contribution_sql``'s columns."""
    statement = contribution_sql(plan, wanted, ladders, clip_rows_per_unit, joint, largest)
    width = len(plan.group_by)
    found: dict[tuple, dict[Contribution, Ladder]] = {}
    for row in execute(statement.sql(dialect=capabilities.dialect, copy=False)):
        rest, at = row[width:], 0
        for contribution, rungs in zip(wanted, ladders):
            pairs = rest[at: at + 2 * len(rungs)]
            at += 2 * len(rungs)
            found.setdefault(tuple(row[:width]), {})[contribution] = Ladder(
                rungs, tuple(int(b or 0) for b in pairs[0::2]),
                tuple(read_sum(s) * sum_shrink(bound) for s, bound in zip(pairs[1::2], rungs)))
    return found


def _bucketed_ladders(plan: QueryPlan, wanted: tuple[Contribution, ...],
                      ladders: tuple[tuple[float, ...], ...], capabilities: Capabilities,
                      clip_rows_per_unit: int | None, execute: Execute,
                      joint: frozenset[Contribution] = frozenset(), largest: bool = False
                      ) -> dict[tuple, dict[Contribution, Ladder]]:
    """``contribution_ladders`` from ``bucket_sql``'s rows; without GROUP BY an empty
    scope's ladders (no rows come back) are of no units, as the per-rung columns say.
    The rows are read column by column into arrays of every group's buckets
    (``_Buckets``), and the ladders formed from them at once (``_ladders``).

    The statement is rendered once per plan shape (``reused_sql``: a shape-cache plan's
    statement joined around its WHERE literals, the very text a fresh rendering gives),
    keyed by everything else ``bucket_sql`` reads; a spread's centres (released means,
    new at every answer) are rendered every time."""
    def build(plan: QueryPlan) -> exp.Select:
        return bucket_sql(plan, wanted, ladders, clip_rows_per_unit, capabilities.fenced_rows,
                          joint, largest, capabilities.crossed_buckets,
                          capabilities.scalar_links)

    if any(contribution.centres for contribution in wanted):
        sql = build(plan).sql(dialect=capabilities.dialect, copy=False)
    else:
        sql = reused_sql(plan, ("buckets", wanted, ladders, type(clip_rows_per_unit),
                                clip_rows_per_unit, capabilities.fenced_rows, joint, largest,
                                capabilities.crossed_buckets, capabilities.scalar_links),
                                capabilities.dialect, build)
    width, count = len(plan.group_by), len(wanted)
    indexes = [i for i, c in enumerate(wanted) if c in joint]
    l1 = [c in joint and not largest for c in wanted]
    signed = [_signed(contribution, plan) and not l1[i]
              for i, contribution in enumerate(wanted)]
    names = count + (len(indexes) if largest else 0)
    size, columns = _read_columns(execute, sql)
    columns = columns or [()] * (width + names + 1 + bool(joint) + sum(
        signed[i] + len(_forms(rungs)) + l1[i] for i, rungs in enumerate(ladders)))
    groups, where = _group_rows(columns[:width], size)
    at = width + names
    units = _integers(columns[at])
    firsts = _integers(columns[at + 1]) if joint else []
    at += 1 + bool(joint)
    found: dict[tuple, dict[Contribution, Ladder]] = {key: {} for key in groups}
    for i, (contribution, rungs) in enumerate(zip(wanted, ladders)):
        forms = _forms(rungs)
        read = [_integers(columns[at + j]) for j in range(signed[i] + len(forms) + l1[i])]
        at += len(read)
        bucket, spots = _present(columns[width + i])
        top, tops = (_present(columns[width + count + indexes.index(i)])
                     if largest and i in indexes else _present((None,) * size))
        buckets = _Buckets(len(groups), len(rungs) + 1, [
            units, read[0] if signed[i] else units, firsts if l1[i] else None,
            read[-1] if l1[i] else None, *read[signed[i]:signed[i] + len(forms)]])
        buckets.add(where[bucket], spots, bucket)
        if top.any():  # L∞: a unit counted beyond by the bucket of its largest part
            buckets.count_firsts(where[top], tops, firsts, top)
        present = np.zeros(len(groups), dtype=bool)
        present[where[bucket | top]] = True
        if not width:
            present[0] = True
        made = _ladders(rungs, buckets, None if contribution not in joint else l1[i])
        for key, g in groups.items():
            if present[g]:
                found[key][contribution] = made[g]
    return {key: ladders_of for key, ladders_of in found.items() if ladders_of}


def _read_columns(execute: Execute, sql: str) -> tuple[int, list]:
    """The statement's rows column by column: through the transaction's ``read_columns``
    where ``execute`` is a transaction's (DuckDB's reads integers into numpy arrays,
    ``Nullable`` where a column has NULLs), else from its rows."""
    reader = getattr(getattr(execute, "__self__", None), "read_columns", None)
    if callable(reader):
        return reader(sql)
    rows = list(execute(sql))
    return len(rows), list(zip(*rows))


def _group_rows(keys: list, size: int) -> tuple[dict[tuple, int], np.ndarray]:
    """Each distinct key (the group columns' values) numbered in the order met, and each
    row's number: at once where the keys are numpy integers (the same numbers, the keys
    Python integers)."""
    if not keys:
        return {(): 0}, np.zeros(size, dtype=np.intp)
    if all(isinstance(column, np.ndarray) and column.dtype.kind == "i" for column in keys):
        stacked = keys[0] if len(keys) == 1 else np.stack(keys, axis=1)
        distinct, first, inverse = np.unique(stacked, return_index=True, return_inverse=True,
                                             axis=None if len(keys) == 1 else 0)
        order = np.argsort(first, kind="stable")  # the order met
        number = np.empty(len(order), dtype=np.intp)
        number[order] = np.arange(len(order))
        met = distinct[order].tolist()
        return ({(key,) if len(keys) == 1 else tuple(key): n for n, key in enumerate(met)},
                number[inverse.reshape(-1)])
    groups: dict[tuple, int] = {}
    listed = [column.tolist() if isinstance(column, (np.ndarray, Nullable)) else column
              for column in keys]
    return groups, np.array([groups.setdefault(key, len(groups)) for key in zip(*listed)],
                            dtype=np.intp)


def _integers(values) -> list[int] | np.ndarray:
    """A column of counts or exact sums as Python integers (NULL: 0): as they came where
    they are integers already, without a NULL (a driver gives a column one type); a
    numpy column (``_read_columns``) as it is, a ``Nullable`` with 0 for NULL."""
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, Nullable):
        return values.values
    if values and type(values[0]) is int and None not in values:
        return list(values)
    return [int(value or 0) for value in values]


def _present(values) -> tuple[np.ndarray, np.ndarray]:
    """Which rows have a bucket in this column (not another grouping set's NULL), and
    those buckets."""
    if isinstance(values, np.ndarray):
        return np.ones(len(values), dtype=bool), values.astype(np.intp)
    if isinstance(values, Nullable):
        return values.valid, values.values[values.valid].astype(np.intp)
    if None not in values:
        return np.ones(len(values), dtype=bool), np.array(values, dtype=np.intp)
    return (np.array([value is not None for value in values], dtype=bool),
            np.array([value for value in values if value is not None], dtype=np.intp))


# Below this every integer the ladders form fits a signed 64-bit integer
_BATCH_LIMIT = 2**62


class _Buckets:
    """Per group (rows) and bucket (columns): units, positive units, units counted in
    this group (clipped across groups), Σ shares r (L1), and Σ round(T_u·10⁶) in each
    form. In numpy's 64-bit integers where every column's values fit, else Python's
    integers (an object array): exact either way."""

    def __init__(self, groups: int, size: int, read: list[list[int] | None]):
        try:  # each column converted once, as the tallies will hold it
            self.read = [None if values is None else np.array(values, dtype=np.int64)
                         for values in read]
            self.dtype = np.int64
        except OverflowError:
            self.read = [None if values is None else np.array(values, dtype=object)
                         for values in read]
            self.dtype = object
        self.tallies = [np.zeros((groups, size), dtype=self.dtype) for _ in read]

    def add(self, groups: np.ndarray, buckets: np.ndarray, rows: np.ndarray) -> None:
        """Each selected row's values into its group's bucket (L1: its counted units
        too)."""
        for tally, values in zip(self.tallies, self.read):
            if values is not None:
                np.add.at(tally, (groups, buckets), values[rows])

    def count_firsts(self, groups: np.ndarray, buckets: np.ndarray, firsts: list[int],
                     rows: np.ndarray) -> None:
        np.add.at(self.tallies[2], (groups, buckets), np.array(firsts, dtype=self.dtype)[rows])

    def wide(self, widest: int) -> bool:
        """Whether a running sum or a clipped total might leave 64 bits: then Python's
        integers."""
        if self.dtype is object:
            return False
        if widest >= _BATCH_LIMIT:
            return True
        units, _, _, shares, *sums = self.tallies
        reach = max(np.abs(a.astype(np.float64)).sum(axis=1).max(initial=0)
                    for a in (*sums, shares))
        return reach + float(units.sum(axis=1).max(initial=0)) * widest >= _BATCH_LIMIT

    def exact(self) -> None:
        self.tallies = [tally.astype(object) for tally in self.tallies]
        self.dtype = object


def _ladders(rungs: tuple[float, ...], buckets: _Buckets, l1: bool | None) -> list[Ladder]:
    """Every group's ladder from its buckets (``l1`` None: clipped per group; else
    clipped across groups, L1 or L∞). Beyond B_k: the units (across groups: counted in
    this group) of the buckets above k. Clipped at B_k: the sums of the buckets up to k
    plus round(±B_k/S·10⁶) for each unit above (its clipped value is ±B_k exactly,
    divided by the form's S as the backend divides it), read back times S; in L∞ the
    same; in L1 the sums of the buckets up to k (units kept whole) plus
    B_k·Σ r/SHARE_SCALE of those above (each scaled by B_k/T_u through its share),
    exactly, then rounded to a double once."""
    constants = _rung_constants(rungs)
    size = len(rungs)
    if buckets.wide(max(abs(up) + abs(down) for _, up, down in constants)):
        buckets.exact()
    units, positive, firsts, shares, *sums = buckets.tallies
    forms = _forms(rungs)

    def above(counts: np.ndarray) -> np.ndarray:  # per rung k: the buckets above k
        return (counts.sum(axis=1, keepdims=True) - np.cumsum(counts, axis=1))[:, :size]

    running = [np.cumsum(tally, axis=1) for tally in sums]
    whole = np.empty((units.shape[0], size), dtype=buckets.dtype)
    for k, (form, _, _) in enumerate(constants):
        whole[:, k] = running[forms.index(form)][:, k]
    shrink = np.array([form[1] for form, _, _ in constants])
    if not l1:
        units_above, positive_above = above(units), above(positive)
        ups = np.array([up for _, up, _ in constants], dtype=buckets.dtype)
        downs = np.array([down for _, _, down in constants], dtype=buckets.dtype)
        clipped = _read_all(whole + positive_above * ups
                            + (units_above - positive_above) * downs) * shrink
        beyond = units_above if l1 is None else above(firsts)
    else:
        clipped, beyond = _read_all(whole) * shrink, above(firsts)
        shares_above = above(shares)
        scaled = []  # per rung: whole·S/10⁶ + B·r/SHARE_SCALE over one denominator
        for bound, (form, _, _) in zip(rungs, constants):
            (b_num, b_den), (s_num, s_den) = (Fraction(bound).as_integer_ratio(),
                                              Fraction(form[1]).as_integer_ratio())
            scaled.append((s_num * b_den * SHARE_SCALE, b_num * s_den * SUM_SCALE,
                           s_den * b_den * SUM_SCALE * SHARE_SCALE))
        cells = np.nonzero(shares_above)  # Python's integers, read once, not per cell
        for g, k, w, r in zip(*(axis.tolist() for axis in cells),
                              whole[cells].tolist(), shares_above[cells].tolist()):
            of_whole, of_shares, denominator = scaled[k]
            clipped[g, k] = (int(w) * of_whole + of_shares * int(r)) / denominator
    if beyond.dtype != object:  # numpy's integers: ``tolist`` gives Python's
        return [Ladder(rungs, tuple(b), tuple(c))
                for b, c in zip(beyond.tolist(), clipped.tolist())]
    return [Ladder(rungs, tuple(map(int, b)), tuple(c))
            for b, c in zip(beyond.tolist(), clipped.tolist())]


def _read_all(totals: np.ndarray) -> np.ndarray:
    """Each integer as ``read_sum`` reads it: below 2⁵³ one IEEE division, correctly
    rounded as the decimal's conversion is (the same double)."""
    read = totals.astype(np.float64) / SUM_SCALE
    for g, k in zip(*np.nonzero(np.abs(totals) >= _EXACT)):
        read[g, k] = read_sum(int(totals[g, k]))
    return read


_EXACT = 2**53
