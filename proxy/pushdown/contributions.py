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
from collections.abc import Iterator
from fractions import Fraction

from sqlglot import exp

from proxy.backends.base import Capabilities
from proxy.interrupts import checkpoint
from proxy.pushdown.scope import (
    SUM_SCALE,
    Execute,
    group_keys,
    is_group,
    read_sum,
    rounded_scaled,
    scope_select,
    shrunk_sum,
    wide_sum,
)
from proxy.pushdown.values import case_of, literal
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
              clip_rows_per_unit: int | None, with_unit: bool, fenced: bool = False
              ) -> exp.Select:
    """Per unit (per group) its contributions ``t{i}``, never NULL (``with_unit``: and
    the unit, ``u``); without a privacy unit, per row (``fenced``: behind OFFSET 0,
    ``Capabilities.fenced_rows``; a unit's GROUP BY is a fence already)."""
    keys = group_keys(plan)
    columns = list(dict.fromkeys(c.column for c in wanted if c.column))
    needs = tuple(ColumnNeeds(name, lower=plan.table.columns[name].lower,
                              upper=plan.table.columns[name].upper) for name in columns)
    scope = scope_select(plan, needs, clip_rows_per_unit, unit=True)
    terms = []
    for contribution in wanted:  # (x − origin)^power of the normalised value c_j
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
            value = exp.Mul(this=exp.paren(exp.Sub(this=value, expression=origin)),
                            expression=scale)
        elif contribution.origin:
            value = exp.paren(exp.Sub(this=value, expression=literal(contribution.origin)))
        if contribution.power == 2:
            value = exp.Mul(this=value, expression=value.copy())
        terms.append(value)
    zero = exp.Literal.number(0)
    if plan.table.privacy_unit is None:  # a NULL (or NaN) value contributes 0
        rows = exp.select(*keys, *[exp.alias_(exp.Coalesce(
            this=term, expressions=[zero.copy()]), f"t{i}") for i, term in enumerate(terms)]
        ).from_(scope.subquery("r", copy=False), copy=False)
        return rows.offset(0, copy=False) if fenced else rows
    # a unit's contribution: the sum over its rows in scope (none: 0)
    return exp.select(*keys, *[exp.alias_(exp.Coalesce(
        this=exp.Sum(this=term), expressions=[zero.copy()]), f"t{i}")
        for i, term in enumerate(terms)], *(["u"] if with_unit else [])
    ).from_(scope.subquery("r", copy=False), copy=False).group_by(*keys, "u", copy=False)


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
               crossed: bool = False) -> exp.Select:
    """The bucketed statement (above): keys, then per contribution i its bucket ``j{i}``
    (of |t|; clipped across groups in L1, of the unit's total ``n{i}``), and per
    contribution clipped across groups in L∞ the bucket ``h{i}`` of the unit's largest
    part (several bucket columns: one grouping set each, the others NULL), then the
    units ``n`` (``joint``: and ``m``, the units counted in this group, ``f`` = 1), and per
    contribution its positive units ``p{i}`` (where it can be negative), Σ round(T_u·10⁶)
    in each form its rungs' sums take (``e{i}_{form}``) and, clipped across groups in
    L1, Σ trunc(t/T_u·SHARE_SCALE) (``r{i}``, 0 in bucket 0: a unit below every rung).
    ``crossed`` (``Capabilities.crossed_buckets``): several bucket columns grouped all at
    once where their cells are few (``_crossed``), every column set in every row."""
    keys = group_keys(plan)
    per_unit = _per_unit(plan, wanted, clip_rows_per_unit, bool(joint), fenced)
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
    if joint:
        columns_out.append(exp.alias_(exp.Sum(this=exp.Case(ifs=[exp.If(
            this=exp.EQ(this=exp.column("f"), expression=exp.Literal.number(1)),
            true=exp.Literal.number(1))], default=exp.Literal.number(0))), "m"))
    for i, rungs in enumerate(ladders):
        value = exp.column(f"t{i}")
        if signed[i]:
            columns_out.append(exp.alias_(exp.Sum(this=exp.Case(ifs=[exp.If(
                this=exp.GT(this=value.copy(), expression=exp.Literal.number(0)),
                true=exp.Literal.number(1))], default=exp.Literal.number(0))), f"p{i}"))
        for index, form in enumerate(_forms(rungs)):  # clipped to the form's top rung:
            # within it the bucket's values as they are (those above: read at other rungs)
            bound = max(b for b in rungs if _form(b) == form)
            columns_out.append(exp.alias_(shrunk_sum(_clipped(value.copy(), bound), -bound,
                                                     bound), f"e{i}_{index}"))
        if l1[i]:
            columns_out.append(exp.alias_(exp.Sum(this=_share(i, rungs[0])), f"r{i}"))
    names = [f"j{i}" for i in range(len(wanted))] + tops
    outer = exp.select(*keys, *names, *columns_out).from_(
        inner.subquery("q", copy=False), copy=False)
    if len(names) == 1 or crossed and _crossed(ladders, indexes, largest):
        return outer.group_by(*keys, *names, copy=False)
    sets = [exp.Tuple(expressions=[exp.column(key) for key in (*keys, name)])
            for name in names]
    return outer.group_by(exp.GroupingSets(expressions=sets), copy=False)


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
    ratio = exp.Mul(this=exp.paren(exp.Div(this=exp.column(f"t{i}"),
                                           expression=exp.column(f"n{i}")), copy=False),
                    expression=exp.Literal.number(SHARE_SCALE))
    toward_zero = exp.Case(ifs=[exp.If(this=exp.LT(this=ratio, expression=exp.Literal.number(0)),
                                       true=exp.Ceil(this=ratio.copy()))],
                           default=exp.Floor(this=ratio.copy()))
    return exp.cast(exp.Case(ifs=[exp.If(this=exp.GT(this=exp.column(f"n{i}"),
                                                     expression=literal(lowest)),
                                         true=toward_zero)],
                             default=exp.Literal.number(0)), "BIGINT", copy=False)


class _Tally:
    """One group's and contribution's buckets as read: units, positive units, sums by
    form, Σ of the shares ``r`` and the units counted in this group (``m``)."""

    def __init__(self, rungs: tuple[float, ...]):
        size = len(rungs) + 1
        self.units, self.positive = [0] * size, [0] * size
        self.sums = {form: [0] * size for form in _forms(rungs)}
        self.shares, self.firsts = [0] * size, [0] * size


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


def _read(total: int) -> float:
    """``read_sum`` of an integer: below 2⁵³ one IEEE division, correctly rounded as
    the decimal's conversion is (the same double)."""
    return total / SUM_SCALE if -_EXACT < total < _EXACT else read_sum(total)


_EXACT = 2**53


def _by_rung(rungs: tuple[float, ...], tally: _Tally) -> Iterator[tuple]:
    """Per rung k its form, the integers a unit clipped to ±B_k adds, the tally's units,
    positive units, counted units and shares of the buckets above k, and its sum (in
    the rung's form) of the buckets up to k: running sums, one pass."""
    units, positive = sum(tally.units), sum(tally.positive)
    counted, shares = sum(tally.firsts), sum(tally.shares)
    running = {form: 0 for form in tally.sums}
    for k, (form, up_value, down_value) in enumerate(_rung_constants(rungs)):
        units -= tally.units[k]
        positive -= tally.positive[k]
        counted -= tally.firsts[k]
        shares -= tally.shares[k]
        for each in running:
            running[each] += tally.sums[each][k]
        yield form, up_value, down_value, units, positive, counted, shares, running[form]


def _ladder(rungs: tuple[float, ...], tally: _Tally) -> Ladder:
    """A ladder from its buckets' units, positive units and sums by form: beyond B_k
    the units above bucket k; clipped at B_k the sums of the buckets up to k plus
    round(±B_k/S·10⁶) for each unit above (its clipped value is ±B_k exactly, divided
    by the form's S as the backend divides it), read back times S."""
    beyond, clipped = [], []
    for form, up_value, down_value, units, positive, _, _, whole in _by_rung(rungs, tally):
        beyond.append(units)
        clipped.append(_read(whole + positive * up_value + (units - positive) * down_value)
                       * form[1])
    return Ladder(rungs, tuple(beyond), tuple(clipped))


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
            this=value(), expression=exp.paren(exp.Div(this=literal(bound),
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
    scope's ladders (no rows come back) are of no units, as the per-rung columns say."""
    statement = bucket_sql(plan, wanted, ladders, clip_rows_per_unit,
                           capabilities.fenced_rows, joint, largest,
                           capabilities.crossed_buckets)
    width, count = len(plan.group_by), len(wanted)
    indexes = [i for i, c in enumerate(wanted) if c in joint]
    l1 = [c in joint and not largest for c in wanted]
    signed = [_signed(contribution, plan) and not l1[i]
              for i, contribution in enumerate(wanted)]
    names = count + (len(indexes) if largest else 0)
    tallies: dict[tuple, _Tally] = {}  # (key, i) -> its buckets
    for row in execute(statement.sql(dialect=capabilities.dialect, copy=False)):
        key, buckets, rest = tuple(row[:width]), row[width:width + names], row[width + names:]
        units, at = int(rest[0]), 1
        firsts = int(rest[1] or 0) if joint else 0
        at += bool(joint)
        for i, (contribution, rungs) in enumerate(zip(wanted, ladders)):
            positive = int(rest[at] or 0) if signed[i] else units
            at += signed[i]
            forms = _forms(rungs)
            sums = rest[at:at + len(forms)]
            at += len(forms)
            shares = int(rest[at] or 0) if l1[i] else 0
            at += l1[i]
            top = buckets[count + indexes.index(i)] if largest and i in indexes else None
            if buckets[i] is None and top is None:  # another bucket column's grouping set
                continue
            tally = tallies.get((key, i))
            if tally is None:
                tally = tallies[key, i] = _Tally(rungs)
            if top is not None:  # an h{i} cell (crossed: beside its j{i}, both read)
                tally.firsts[int(top)] += firsts
            if buckets[i] is None:
                continue
            j = int(buckets[i])
            tally.units[j] += units
            tally.positive[j] += positive
            tally.shares[j] += shares
            tally.firsts[j] += firsts if l1[i] else 0
            for form, total in zip(forms, sums):
                tally.sums[form][j] += int(total or 0)
    if not width:
        for i, rungs in enumerate(ladders):
            if ((), i) not in tallies:
                tallies[(), i] = _Tally(rungs)
    found: dict[tuple, dict[Contribution, Ladder]] = {}
    for (key, i), tally in tallies.items():
        ladder = _ladder(ladders[i], tally)
        if wanted[i] in joint:
            ladder = _joint_ladder(ladder, tally, not largest)
        found.setdefault(key, {})[wanted[i]] = ladder
    return found


def _joint_ladder(ladder: Ladder, tally: _Tally, l1: bool) -> Ladder:
    """A ladder clipped across groups from its group's buckets (of the units' totals, or
    in L∞ of their parts and largest parts): beyond B_k the units counted in this group
    whose total (largest part) lies above B_k; L1's clipped sum at B_k the sums of the
    buckets up to k (units kept whole) plus B_k·Σ r/SHARE_SCALE of those above (each
    scaled by B_k/T_u through its share), exactly, then rounded to a double once."""
    beyond, clipped = [], []
    for bound, (form, _, _, _, _, counted, shares, whole) in zip(
            ladder.rungs, _by_rung(ladder.rungs, tally)):
        beyond.append(counted)
        if l1:  # L∞'s clipped sums are the per-group ladder's
            clipped.append(_read(whole) * form[1] if not shares else float(
                Fraction(whole, SUM_SCALE) * Fraction(form[1])
                + Fraction(bound) * Fraction(shares, SHARE_SCALE)))
    return Ladder(ladder.rungs, tuple(beyond), tuple(clipped) if l1 else ladder.clipped)
