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
BIGINT sum). Clipped across groups, a unit's scaled contribution t·B_k/T_u is rounded
at each rung on its own: that variant keeps the per-rung columns.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.backends.base import Capabilities
from proxy.interrupts import checkpoint
from proxy.pushdown.scope import (
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


def _form(bound: float) -> tuple[bool, float]:
    """How the per-rung statement sums a rung's clipped values (``_rung``): divided by
    ``sum_shrink(bound)``, in the ``exact_sum`` form (``wide_sum``) of the shrunk bound."""
    shrink = sum_shrink(bound)
    return wide_sum(-bound / shrink, bound / shrink), shrink


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
               clip_rows_per_unit: int | None, fenced: bool = False) -> exp.Select:
    """The bucketed statement (above): keys, then per contribution i its bucket ``j{i}``
    (several contributions: one grouping set each, the others' buckets NULL), then the
    units ``n``, and per contribution its positive units ``p{i}`` (where it can be
    negative) and Σ round(T_u·10⁶) in each form its rungs' sums take (``e{i}_{form}``)."""
    keys = group_keys(plan)
    per_unit = _per_unit(plan, wanted, clip_rows_per_unit, False, fenced)
    signed = [_signed(contribution, plan) for contribution in wanted]
    buckets = [exp.alias_(_bucket(exp.Abs(this=exp.column(f"t{i}")) if signed[i] else
                                  exp.column(f"t{i}"), rungs, 0, len(rungs)), f"j{i}")
               for i, rungs in enumerate(ladders)]  # |t| is t where t ≥ 0
    inner = exp.select(*keys, *[f"t{i}" for i in range(len(wanted))], *buckets).from_(
        per_unit.subquery("p", copy=False), copy=False)
    columns_out: list[exp.Expression] = [exp.alias_(exp.Count(this=exp.Star()), "n")]
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
    outer = exp.select(*keys, *[f"j{i}" for i in range(len(wanted))], *columns_out).from_(
        inner.subquery("q", copy=False), copy=False)
    if len(wanted) == 1:
        return outer.group_by(*keys, "j0", copy=False)
    sets = [exp.Tuple(expressions=[exp.column(key) for key in (*keys, f"j{i}")])
            for i in range(len(wanted))]
    return outer.group_by(exp.GroupingSets(expressions=sets), copy=False)


def _ladder(rungs: tuple[float, ...], units: list[int], positive: list[int],
            sums: dict[tuple[bool, float], list[int]]) -> Ladder:
    """A ladder from its buckets' units, positive units and sums by form: beyond B_k
    the units above bucket k; clipped at B_k the sums of the buckets up to k plus
    round(±B_k/S·10⁶) for each unit above (its clipped value is ±B_k exactly, divided
    by the form's S as the backend divides it), read back times S."""
    beyond, clipped = [], []
    for k, bound in enumerate(rungs):
        form = _form(bound)
        wide, shrink = form
        scaled = bound * (1 / shrink)
        above, up = sum(units[k + 1:]), sum(positive[k + 1:])
        total = (sum(sums[form][:k + 1]) + up * rounded_scaled(scaled, wide)
                 + (above - up) * rounded_scaled(-scaled, wide))
        beyond.append(above)
        clipped.append(read_sum(total) * shrink)
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
    """Every group's ladders (key ``()`` without GROUP BY), by contribution: from the
    buckets, or with any contribution clipped across groups from the per-rung columns."""
    if joint:
        return per_rung_ladders(plan, wanted, ladders, capabilities, clip_rows_per_unit,
                                execute, joint, largest)
    return _bucketed_ladders(plan, wanted, ladders, capabilities, clip_rows_per_unit, execute)


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
                      clip_rows_per_unit: int | None, execute: Execute
                      ) -> dict[tuple, dict[Contribution, Ladder]]:
    """``contribution_ladders`` from ``bucket_sql``'s rows; without GROUP BY an empty
    scope's ladders (no rows come back) are of no units, as the per-rung columns say."""
    statement = bucket_sql(plan, wanted, ladders, clip_rows_per_unit,
                           capabilities.fenced_rows)
    width, count = len(plan.group_by), len(wanted)
    signed = [_signed(contribution, plan) for contribution in wanted]
    # (key, i) -> (units, positive units, sums by form) per bucket
    tallies: dict[tuple, tuple[list[int], list[int], dict[tuple[bool, float], list[int]]]] = {}
    for row in execute(statement.sql(dialect=capabilities.dialect, copy=False)):
        key, buckets, rest = tuple(row[:width]), row[width:width + count], row[width + count:]
        units, at = int(rest[0]), 1
        for i, (contribution, rungs) in enumerate(zip(wanted, ladders)):
            positive = int(rest[at] or 0) if signed[i] else units
            at += signed[i]
            forms = _forms(rungs)
            sums = rest[at:at + len(forms)]
            at += len(forms)
            if buckets[i] is None:  # another contribution's grouping set
                continue
            tally = tallies.setdefault((key, i), ([0] * (len(rungs) + 1),
                                                  [0] * (len(rungs) + 1),
                                                  {form: [0] * (len(rungs) + 1)
                                                   for form in forms}))
            j = int(buckets[i])
            tally[0][j] += units
            tally[1][j] += positive
            for form, total in zip(forms, sums):
                tally[2][form][j] += int(total or 0)
    if not width:
        for i, rungs in enumerate(ladders):
            tallies.setdefault(((), i), ([0] * (len(rungs) + 1), [0] * (len(rungs) + 1),
                                         {form: [0] * (len(rungs) + 1)
                                          for form in _forms(rungs)}))
    found: dict[tuple, dict[Contribution, Ladder]] = {}
    for (key, i), (units, positive, sums) in tallies.items():
        found.setdefault(key, {})[wanted[i]] = _ladder(ladders[i], units, positive, sums)
    return found
