"""From a plan and its statistics to released numbers: which statistics each aggregate
needs, its sensitivity under the chosen model, its noise and its post-processing.

Pure: no I/O. The random source is injected so tests can check distributions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from proxy.interrupts import checkpoint
from proxy.loss import Loss
from proxy.privacy.contribution_bounds import (
    COUNT_PRIOR,
    COUNT_SHARE,
    bound_note,
    chained,
    clipped_divisor,
    clipped_sum,
    contribution_of,
    count_slot,
    empty_ladder,
    joint_bound_share,
    joint_note,
    joint_sum_at,
    laddered,
    rungs,
    sum_loss,
)
from proxy.privacy.correlation import group_part, noisy_pair
from proxy.privacy.inverse_sensitivity import (
    DIGITS,
    PERCENTILE_DIGITS,
    extreme_offsets,
    one_row_per_unit,
    several_rows_per_unit,
)
from proxy.privacy.mechanisms import (
    Noisy,
    gaussian_integer,
    gaussian_real,
    grid_step,
    laplace_integer,
    laplace_interval,
    laplace_real,
    smooth_real,
)
from proxy.privacy.private_bound import BOUND_SHARE, FAILURE
from proxy.privacy.sampler import RandomSource, batched
from proxy.privacy.sensitivity import (
    SUM_REFS,
    clamped_sum_sensitivity,
    count_sensitivity,
    group_share,
    local_sensitivity_of_max,
    local_sensitivity_of_min,
    local_sensitivity_of_percentile,
    local_sensitivity_of_winsorized_sum,
    max_refs,
    min_refs,
    percentile_refs,
    round_up_to_power_of_two,
)
from proxy.privacy.variance import (
    UNIT_RUNGS,
    clipped_centred_moments,
    draws_bound,
    noisy_moments,
    spread_and_sensitivity,
    spread_note,
    square_bound,
    square_scale,
    unit_centre,
    unit_moments,
)
from proxy.rules import Column
from proxy.statistics import (
    BOTTOM,
    PCT,
    TOP,
    ColumnNeeds,
    ColumnStats,
    Contribution,
    GroupStats,
    RankRef,
)
from proxy.vocabulary import (
    AVG,
    COUNT,
    DISTINCT,
    MAX,
    MIN,
    PERCENTILE,
    PIECEWISE,
    SMOOTH,
    SPREADS,
    SUM,
    Kind,
    QueryPlan,
)


@dataclass(frozen=True)
class Calibration:
    """What the noise of one query is calibrated to.

    ``shift`` is s = c·g of SPEC §5.2 (c: the table's largest per-unit row count under
    iDP, the declared bound under DP); ``floor`` the rules' minimum sensitivity, raised
    to the column's public resolution unless the owner opted into ``exact_release``
    (whether a local sensitivity is 0 is a fact about the data: ties);
    ``report_scale`` how the 95% bound of iDP answers is shown (rules/README.md);
    ``local``: raw iDP, real answers' noise scaled to their local sensitivity (the
    owner's opt-in); else to the global one, a function of the rules alone, so the
    noise's law tells nothing that its value does not (docs/privacy.md §2).
    """

    model: str
    shift: int
    floor: float = 0.0
    exact_release: bool = False
    report_scale: str = "none"
    local: bool = False

    def floor_of(self, column) -> float:
        return self.floor if self.exact_release else max(self.floor, column.resolution)


def column_needs(plan: QueryPlan, shift: int, counted: bool = False
                 ) -> tuple[ColumnNeeds, ...]:
    """The statistics every aggregate of the plan needs, merged per column; with
    ``counted`` every column's n too."""
    ranks: dict[str, set[RankRef]] = {}
    totals: dict[str, bool] = {}
    counts: dict[str, bool] = {}
    spreads: dict[str, bool] = {}
    distinct: set[str] = set()
    for agg in plan.aggregates:
        if agg.column is None or agg.kind.row.paired:  # paired: from ladders alone
            continue
        column = plan.table.columns[agg.column]
        wanted = ranks.setdefault(agg.column, set())
        totals.setdefault(agg.column, False)
        counts[agg.column] = (counts.get(agg.column, False) or agg.kind in (COUNT, AVG)
                              or plan.mechanism.scale == SMOOTH or plan.mechanism.exponential
                              or counted)  # windows need n
        if plan.mechanism.exponential and agg.kind.row.ranked:
            continue  # drawn from windows of ranks (privacy/inverse_sensitivity.py)
        if agg.kind == PERCENTILE:
            wanted.update(percentile_refs(agg.fraction, shift) if plan.mechanism.local
                          else (RankRef(PCT, 0, agg.fraction),))
        elif agg.kind == MAX:
            wanted.update(max_refs(shift, column.upper is not None) if plan.mechanism.local
                          else (RankRef(TOP, 0),))
        elif agg.kind == MIN:
            wanted.update(min_refs(shift, column.lower is not None) if plan.mechanism.local
                          else (RankRef(BOTTOM, 0),))
        elif agg.kind in (SUM, AVG):
            totals[agg.column] = True
            if plan.mechanism.local and shift == 1:
                wanted.update(SUM_REFS)
        elif agg.kind in SPREADS:  # n, Σx, m2 and (iDP) the extremes: proxy.privacy.variance
            totals[agg.column] = counts[agg.column] = spreads[agg.column] = True
            if plan.mechanism.local:
                wanted.update((RankRef(BOTTOM, 0), RankRef(TOP, 0)))
        elif agg.kind == DISTINCT:
            distinct.add(agg.column)
    columns = plan.table.columns
    return tuple(ColumnNeeds(col, frozenset(ranks[col]), totals[col], counts[col],
                             columns[col].lower, columns[col].upper, col in spreads,
                             col in distinct)
                 for col in ranks)


@dataclass(frozen=True)
class Released:
    value: float | int | None
    ci95: float | None
    mechanism: str
    note: str | None = None


def release_group(
    plan: QueryPlan, group: GroupStats, calibration: Calibration, rng: RandomSource,
    kept: dict | None = None,
) -> list[Released]:
    """Noisy answers of every aggregate of the plan for one group (a cancel stops a
    release of thousands of groups between two of them: proxy.interrupts), each by its
    kind's row of ``RELEASES``. ``kept``: what is alike in every group of one release
    (``release_groups``)."""
    checkpoint()
    kept = {} if kept is None else kept
    parts = kept.get(PARTS)
    if parts is None:
        parts = kept[PARTS] = [_part(plan, agg, calibration) for agg in plan.aggregates]
        kept[RANKED] = any(agg.kind.row.ranked for agg in plan.aggregates)
    released = [
        RELEASES[agg.kind](Asked(plan, index, group, calibration, parts[index], rng, kept))
        for index, agg in enumerate(plan.aggregates)]
    return in_order(plan, released) if kept[RANKED] else released


def release_groups(plan: QueryPlan, groups: dict[tuple, GroupStats], keys: list[tuple],
                   calibration: Calibration, rng: RandomSource) -> list[list[Released]]:
    """``release_group`` of each key in turn (a key without statistics: an empty group),
    with what is alike in every group worked out once: each aggregate's part of the
    loss, its clipped sum's noise at each rung drawn, an empty group's ladder (TPC-H
    Q20's 8,508 groups, Q21's 10,000). The sampler is called as often, in the same
    order and with the same parameters as group by group, so the same random bits give
    the same answers (tests/privacy/test_contribution_bounds.py); from the operating
    system's source (``SecureSource``) its discrete Laplace integers are drawn many at a
    time (``sampler.batched``: the same law, not the same bits)."""
    kept: dict = {}
    rng = batched(rng, len(keys) * len(plan.aggregates))
    return [release_group(plan, group if (group := groups.get(key)) is not None
                          else GroupStats(), calibration, rng, kept)  # built where absent
            for key in keys]


PARTS = "parts"  # ``release_group``'s kept parts of the loss, one per aggregate
RANKED = "ranked"  # whether any aggregate is an order statistic (else ``in_order``: none)


def _part(plan: QueryPlan, agg, cal: Calibration) -> Loss:
    """The aggregate's loss in one group (sensitivity.group_share). Gaussian noise takes
    ρ/m in each: a unit moves m cells by at most Δ each (a COUNT's histogram: by at most
    2s in all, s in one, so Σ xᵢ² ≤ 2s²), so the cells' ρ add up to at most the ρ. A
    COUNT clipped per group (over a chain, ``_clipped_count``) is no such histogram:
    each group's noise is of its own bound B, not s, so one unit's rows spread over
    min(2s, G) groups move each by up to B, and each group spends its part: it is
    divided as a SUM's is."""
    counting = agg.kind == DISTINCT or agg.kind == COUNT and not _clipped(plan, agg)
    share = Fraction(1, group_share(plan, cal.shift, counting))
    return plan.aggregate_loss.rho_part(share) if plan.gaussian(agg) \
        else plan.aggregate_loss * share


@dataclass(frozen=True)
class Asked:
    """One aggregate to release in one group: what every release function reads."""

    plan: QueryPlan
    index: int
    group: GroupStats
    cal: Calibration
    part: Loss  # the aggregate's part of the loss in this group
    rng: RandomSource
    kept: dict = field(default_factory=dict)  # alike in every group (``release_groups``)

    def once(self, what: str, build: Callable[[], Any]) -> Any:
        """``build()`` for this aggregate, worked out in the release's first group and
        kept for the others (a function of the plan, calibration and aggregate alone)."""
        key = (what, self.index)
        known = self.kept.get(key)
        if known is None:
            known = self.kept[key] = build()
        return known

    @property
    def agg(self):
        return self.plan.aggregates[self.index]

    @property
    def column(self):
        return self.plan.table.columns[self.agg.column]

    @property
    def stats(self) -> ColumnStats:
        return self.group.column(self.agg.column)


def in_order(plan: QueryPlan, released: list[Released]) -> list[Released]:
    """The order statistics of one column kept in their order: MIN ≤ percentiles (by
    their fraction) ≤ MAX, as the true answers are. Sorting the released values and
    handing them out in that order is post-processing of the releases, so it costs
    nothing and can only bring each nearer the truth (the true values are sorted in
    the same order)."""
    ranked: dict[str, list[tuple[Fraction, int]]] = {}
    for index, agg in enumerate(plan.aggregates):
        if agg.kind.row.ranked and released[index].value is not None:
            place = {MIN: Fraction(0), MAX: Fraction(1)}.get(agg.kind, agg.fraction)
            ranked.setdefault(agg.column, []).append((place, index))
    out = list(released)
    for members in ranked.values():
        if len(members) < 2:
            continue
        members.sort()
        values = sorted(released[index].value for _, index in members)
        for (_, index), value in zip(members, values):
            out[index] = replace(released[index], value=value)
    return out


def _count(a: Asked) -> Released:
    """COUNT: public without a WHERE (§3.3), else discrete Laplace of scale s."""
    agg, group = a.agg, a.group
    true = group.rows if agg.column is None else group.column(agg.column).n
    if a.plan.public(agg):
        return Released(true, 0.0, PUBLIC_COUNT)
    if a.index in group.joint:  # in a window or over a chain, across groups (§3.3, §3.14)
        return _joint_count(a)
    if a.once("laddered", lambda: _clipped(a.plan, agg)):
        return _clipped_count(a)
    return _counted_rows(a, true)


def _counted_rows(a: Asked, true: int) -> Released:
    """A count whose every changed row moves it by at most 1, released with §3.3's
    noise of scale s (c counts rows): its bound depends on s alone, the same for every
    neighbour."""
    cal = a.cal
    noisy = _integer_noise(a, true, _integer_scale(count_sensitivity(cal.shift), cal),
                           a.part)
    return _finish(Noisy(max(0, noisy.value), noisy.ci95, noisy.mechanism), cal, None,
                   noisy.ci95 if cal.report_scale == "private" else None)


def _distinct(a: Asked) -> Released:
    """COUNT(DISTINCT col) of a column other than the unit: a changed row takes at most
    one value out of its group's set and puts at most one in (its own, in the group it
    moves to), so the counts move as a COUNT's rows do (§3.7): the same noise; then at
    most the values the rules allow (its declared keys, an int domain's integers, a
    bool's two), post-processing of a public bound."""
    released = _counted_rows(a, a.group.column(a.agg.column).distinct)
    column = a.plan.table.columns[a.agg.column]
    most = (len(column.keys) if column.keys is not None else 2 if column.type == "bool"
            else int(column.upper - column.lower) + 1
            if column.type == "int" and column.lower is not None and column.upper is not None
            else None)
    return released if most is None or released.value <= most else \
        replace(released, value=most)


def _clipped(plan: QueryPlan, agg) -> bool:
    """Whether a COUNT is clipped to a bound drawn per group (over a chain or a join;
    in a window it is laddered too, but clipped across groups or not at all)."""
    return chained(plan) and contribution_of(agg, plan) in laddered(plan)


def _clipped_count(a: Asked) -> Released:
    """COUNT over a chain or a join: each unit's rows in scope (in [0, B]) clipped to a
    bound drawn per group (§3.14), so the noise is of a typical unit's rows, not of the
    most rows one unit owns through the chain (TPC-H: 139 line items a customer)."""
    noisy = _counted(a, contribution_of(a.agg, a.plan), a.part)
    return _finish(Noisy(noisy.value, noisy.ci95,
                         f"{noisy.mechanism}, its bound by the exponential mechanism"),
                   a.cal, "COUNT: each unit's rows in scope, counted, clipped to a bound drawn "
                          "privately per group from a public ladder with a third of the "
                          "epsilon (docs/privacy.md §3.14)")


def _joint_count(a: Asked) -> Released:
    """COUNT in a window (§3.3, "Counts in a window"; COUNT(DISTINCT unit) too: a unit
    once in each group it has rows in), or over a chain or a join (§3.14), under GROUP
    BY where one unit may touch more than 2 groups: each unit's rows in scope over all
    groups scaled to at most B, a bound drawn once for the query with a
    tenth of the whole loss (``draw_joint_bounds``), each group's count with Laplace
    noise of scale 2gB/ε_s on the integers' grid, rounded and kept ≥ 0."""
    plan = a.plan
    noisy = _counted(a, contribution_of(a.agg, plan), sum_loss(plan, a.agg)[1],
                     joint=a.group.joint[a.index])
    return _finish(Noisy(noisy.value, noisy.ci95,
                         f"{noisy.mechanism}, its bound by the exponential mechanism"),
                   a.cal, JOINT_COUNT_NOTE.format(
                       what=JOINT_UNITS if a.agg.kind == Kind.UNITS else JOINT_ROWS,
                       why=CHAINED_WHY if chained(plan) else WINDOW_WHY))


def _counted(a: Asked, contribution: Contribution, loss: Loss, confidence: float = 0.95,
             joint: int | None = None, kept: str = "") -> Noisy:
    """A count of each unit's rows (``contribution``: power 0) in scope, clipped on the
    count's ladder (c, c/2, …, 1; the fine one in a window, ``rungs``): to a bound drawn
    for this group (§3.14), or, ``joint``,
    across groups at that rung drawn for all (``draw_joint_bounds``, a tenth of the
    loss); rounded and kept ≥ 0. The noise of each rung worked out once a release, under
    ``kept`` + "noise" (an AVG's count beside its sum's)."""
    plan, group_size = a.plan, a.plan.table.group_size
    ladder = _ladder(a.group, contribution, None, a.cal.shift // group_size, a.kept)
    if joint is None:
        noisy, _ = clipped_sum(ladder, loss, group_size, 0.0, 1.0, 1.0, a.rng, confidence,
                               prior=COUNT_PRIOR, kept=a.once(f"{kept}noise", dict))
    else:
        noisy = joint_sum_at(ladder, joint, loss, group_size,
                             a.once("group count", lambda: plan.group_count), 1.0, a.rng,
                             confidence, share=COUNT_SHARE, shift=a.cal.shift,
                             kept=a.once(f"{kept}joint noise", dict))
    return Noisy(max(0, round(noisy.value)), noisy.ci95, noisy.mechanism)


# What a count clipped across groups says (the same in every group): the 95 % bound
# covers the noise, not the clipping, which only lowers a count.
JOINT_COUNT_NOTE = (
    "{what}, counted over all groups, scaled to a total of at "
    "most a bound drawn privately once for the query from a public ladder with a tenth of "
    "the epsilon, {why}; the 95 % bound covers the noise, not the clipping, which can "
    "only lower a count (docs/privacy.md §3.3, §3.14)")
JOINT_ROWS = "COUNT: each unit's rows in scope"
JOINT_UNITS = "COUNT(DISTINCT unit): each unit once in each group it has rows in"
WINDOW_WHY = "because the WHERE keeps a time column to at most half its domain"
CHAINED_WHY = "because one unit owns rows in many groups through the chain or the join"


def _units(a: Asked) -> Released:
    """COUNT(DISTINCT unit): one unit's change makes g units leave or join each cell it
    touches; in a window, under GROUP BY where one unit may touch more than 2 groups,
    each unit's groups are clipped across them as a COUNT's rows are (§3.3)."""
    if a.index in a.group.joint:
        return _joint_count(a)
    noisy = _integer_noise(a, a.group.units, _integer_scale(a.plan.table.group_size, a.cal),
                           a.part)
    return _finish(Noisy(max(0, noisy.value), noisy.ci95, noisy.mechanism), a.cal, None,
                   noisy.ci95 if a.cal.report_scale == "private" else None)


def _sum(a: Asked) -> Released:
    """SUM: of contributions clipped to a drawn bound (§3.14), else §3.4's."""
    if a.once("laddered", lambda: Contribution(a.agg.column) in laddered(a.plan)):
        return _release_clipped(a)
    return _laplace_release(a)


def _average(a: Asked) -> Released:
    """AVG: a noisy SUM over a noisy COUNT."""
    if a.once("laddered", lambda: Contribution(a.agg.column) in laddered(a.plan)):
        return _release_clipped(a)
    return _release_average(a, a.stats, a.column, a.cal, a.part, a.rng)


def _spread(a: Asked) -> Released:
    """STDDEV and VARIANCE: from clipped moments (§3.14), DP's noisy moments (§3.8), or
    raw iDP's local sensitivity."""
    agg, column, cal = a.agg, a.column, a.cal
    if Contribution(agg.column, column.lower, 2) in laddered(a.plan):
        return _release_clipped_moments(a.plan, a.index, a.group, column, cal, a.part, a.rng)
    if not cal.local:
        noisy = noisy_moments(agg.kind, a.stats, column, cal.shift, a.part, a.rng)
        return _finish(noisy, cal, spread_note(agg.kind, cal.local))
    answer, sensitivity, largest = spread_and_sensitivity(agg.kind, a.stats, column, cal.shift)
    noisy = laplace_real(answer, _real_scale(sensitivity, cal, column), a.part.epsilon, a.rng,
                         grid_step(column.resolution))
    return _finish(Noisy(_clamp(noisy.value, 0.0, largest), noisy.ci95, noisy.mechanism),
                   cal, spread_note(agg.kind, cal.local))


def _pair(a: Asked) -> Released:
    """CORR, COVAR_* and REGR_*: from a noisy count, noisy means and noisy centred moments
    (privacy/correlation.py), under every model and scale. Its 95 % bound is a function
    of released numbers alone (no local sensitivity), so raw iDP shows it too."""
    plan, agg, cal = a.plan, a.agg, a.cal
    x, y = plan.table.columns[agg.other], plan.table.columns[agg.column]
    sums = a.group.pairs[a.index]  # every group's, drawn bounds included (Engine._pairs)
    noisy, note = noisy_pair(agg.kind, sums, cal.shift, _integer_scale(cal.shift, cal),
                             group_part(a.part), x.lower, y.lower,
                             (x.upper - x.lower, y.upper - y.lower),
                             (x.resolution, y.resolution), a.rng)
    if cal.local:
        note += "; under iDP answered as under DP (no local sensitivity)"
    return Released(noisy.value, noisy.ci95, noisy.mechanism, note)


def _moment_origin(moment) -> str:
    """Where a moment's candidates are dense: the window's end, or each bucket's."""
    if moment.bucket is None:
        return moment.origin.isoformat(" ")
    return f"the {'end' if moment.anchor else 'start'} of each {moment.bucket}"


def _ranked(a: Asked) -> Released:
    """Percentiles, MAX and MIN: the exponential mechanism's draw where the plan made
    one (privacy/inverse_sensitivity.py), else Laplace noise."""
    agg, plan, cal = a.agg, a.plan, a.cal
    if a.index not in a.group.instance:
        return _laplace_release(a)
    mechanism = PIECEWISE_MECHANISM if plan.mechanism.scale == PIECEWISE else INSTANCE_MECHANISM
    # a MAX or MIN's K and scaled form (None: the rank target), worked out once
    extreme = extreme_offsets(plan, cal.shift)[a.index] if agg.kind in (MAX, MIN) else None
    if extreme is not None and extreme[1] is not None:
        mechanism = SCALED_MECHANISM
    moment = getattr(plan.table.columns[agg.column], "moment", None)
    digits = PERCENTILE_DIGITS if agg.kind == PERCENTILE else DIGITS
    note = _INSTANCE_NOTE.format(f"{100 * 2.0 ** (1 - digits):.2g} %",
                                 "away from 0" if moment is None else
                                 f"of their distance from {_moment_origin(moment)}, "
                                 f"every {'second' if moment.kind == 'timestamp' else 'day'} "
                                 "near it")
    # one line each (the notice lists each line once, however many aggregates share it)
    if agg.continuous:
        note += "\nPERCENTILE_CONT is answered as PERCENTILE_DISC"
    if agg.kind == PERCENTILE and one_row_per_unit(plan):
        note += _PER_UNIT_NOTE if plan.mechanism.scale == PIECEWISE else _WEIGHTED_NOTE
    if extreme is not None:
        note += _extreme_note(agg, *extreme, several_rows_per_unit(plan))
    return _finish(Noisy(a.group.instance[a.index], None, mechanism), cal, note)


def _laplace_release(a: Asked) -> Released:
    """A real-valued aggregate with Laplace noise at its (global or local) sensitivity,
    or the smooth sensitivity's, or with a private bound's share of ε taken."""
    agg, column, cal, index = a.agg, a.column, a.cal, a.index
    answer, sensitivity, note = _answer_and_sensitivity(agg, a.stats, column, cal)
    step, epsilon = grid_step(column.resolution), a.part.epsilon
    bound = None
    if index in a.group.smooth:
        noisy = smooth_real(answer, a.group.smooth[index], epsilon, a.plan.mechanism.gamma,
                            a.rng, step)
        note = _SMOOTH_NOTE
    elif index in a.group.bounds:  # report_scale "private": the bound took its share of ε
        epsilon = a.part.split(BOUND_SHARE, 1 - BOUND_SHARE)[1].epsilon
        noisy = laplace_real(answer, _real_scale(sensitivity, cal, column), epsilon, a.rng, step)
        bound = laplace_interval(a.group.bounds[index], epsilon, step, 1 - FAILURE)
    elif a.plan.gaussian(agg):
        noisy = gaussian_real(answer, _real_scale(sensitivity, cal, column), a.part.rho, a.rng,
                              step)
    else:
        noisy = laplace_real(answer, _real_scale(sensitivity, cal, column), epsilon, a.rng, step)
    value = (_clamp(noisy.value, column.lower, column.upper) if agg.kind != SUM
             else signed_sum(noisy.value, column))
    if column.type == "int":
        value = round(value)
    if agg.continuous:
        note = "PERCENTILE_CONT is answered as the discrete percentile (PERCENTILE_DISC)"
    return _finish(Noisy(value, noisy.ci95, noisy.mechanism), cal, note, bound)


# One row per aggregate kind: how its answer is released (VALUE, one unit's value, is
# only ever answered by knowledge refinement: privacy/refined_answers.py).
RELEASES: dict[Kind, Callable[[Asked], Released]] = {
    Kind.COUNT: _count, Kind.UNITS: _units, Kind.DISTINCT: _distinct, Kind.SUM: _sum,
    Kind.AVG: _average,
    Kind.PERCENTILE: _ranked, Kind.MAX: _ranked, Kind.MIN: _ranked,
    Kind.VAR_SAMP: _spread, Kind.VAR_POP: _spread,
    Kind.STDDEV_SAMP: _spread, Kind.STDDEV_POP: _spread,
    Kind.CORR: _pair, Kind.COVAR_POP: _pair, Kind.COVAR_SAMP: _pair,
    Kind.REGR_SLOPE: _pair, Kind.REGR_INTERCEPT: _pair, Kind.REGR_R2: _pair,
}


def _answer_and_sensitivity(agg, stats: ColumnStats, column, cal: Calibration):
    """(true answer, sensitivity, note) of one real-valued aggregate."""
    lower, upper, n, values = column.lower, column.upper, stats.n, stats.values
    if agg.kind == SUM:
        return _sum_and_sensitivity(stats, column, cal) + (_sum_note(cal),)
    if not cal.local:
        ref, fallback = {
            PERCENTILE: (RankRef(PCT, 0, agg.fraction), (lower + upper) / 2),
            MAX: (RankRef(TOP, 0), lower),
            MIN: (RankRef(BOTTOM, 0), upper),
        }[agg.kind]
        return _or(values.get(ref), fallback), upper - lower, None
    if agg.kind == PERCENTILE:
        return local_sensitivity_of_percentile(n, values, agg.fraction, cal.shift, lower, upper) + (None,)
    if agg.kind == MAX:
        note = None if upper is not None else (
            f"no upper bound is declared for {agg.column}: a value just below the maximum "
            "is answered instead (the largest once the rows of the unit with the most "
            "rows are set aside)")
        return local_sensitivity_of_max(values, cal.shift, lower, upper) + (note,)
    note = None if lower is not None else (
        f"no lower bound is declared for {agg.column}: a value just above the minimum "
        "is answered instead (the smallest once the rows of the unit with the most rows "
        "are set aside)")
    return local_sensitivity_of_min(values, cal.shift, lower, upper) + (note,)


def _sum_and_sensitivity(stats: ColumnStats, column, cal: Calibration) -> tuple[float, float]:
    if cal.local and cal.shift == 1:
        return local_sensitivity_of_winsorized_sum(
            stats.n, stats.total, stats.values, column.lower, column.upper)
    return stats.total, clamped_sum_sensitivity(cal.shift, column.lower, column.upper)


PUBLIC_COUNT = ("public: the row count of the whole table, which modifying records never "
                "changes (no epsilon spent)")
INSTANCE_MECHANISM = "exponential mechanism (inverse sensitivity) on the column's grid"
SCALED_MECHANISM = "exponential mechanism (scaled rank distance) on the column's grid"
PIECEWISE_MECHANISM = ("exponential mechanism (piecewise Laplace: interpolated inverse "
                       "sensitivity) on the column's grid")
# two lines: the first said once for every drawn aggregate of the answer
_INSTANCE_NOTE = ("no 95% bound: the exponential mechanism's (docs/privacy.md §5.3) would "
                  "tell how dense the data are around the answer\nthe answer is the middle "
                  "of the cell of one of the column's candidates, up to {} apart {}")
_PER_UNIT_NOTE = ("\nthe percentile of one row per privacy unit, each unit's row chosen by a "
                  "hash of its values (each unit counts once: docs/privacy.md §5.3)")
_WEIGHTED_NOTE = ("\nthe percentile of the rows weighted 1/(their privacy unit's rows in "
                  "scope), so that each unit counts once (docs/privacy.md §5.3)")
_SMOOTH_NOTE = ("DP with the smooth sensitivity (docs/privacy.md §5.2): heavy-tailed noise; no "
                "95% bound is shown, it would reveal the smooth sensitivity of the data")


def _extreme_note(agg, aside: int, scaled, per_unit: bool) -> str:
    """What a drawn MAX or MIN aims at (privacy/inverse_sensitivity.extreme_offset, or
    its scaled distance), and over what: each unit's own extreme where a unit may own
    several rows."""
    kind = agg.kind
    end = "largest" if kind == MAX else "smallest"
    over = (f"\ndrawn over each privacy unit's own {kind.upper()} (one value per unit "
            "and group: the same extreme, each unit counted once, docs/privacy.md §5.3)"
            ) if per_unit else ""
    values = "units' values" if per_unit else "values"
    if scaled is not None:
        side = "below" if kind == MAX else "above"
        return (f"{over}\n{kind.upper()}({agg.column}) is drawn by the scaled distance: "
                f"near the {end} value, the nearer the more of the {aside + 1} {end} "
                f"{values} lie within a factor {scaled.factor} {side} it (a tenth of them "
                "in a smaller scope); it may land beyond the data, docs/privacy.md §5.3")
    if not aside:
        return over
    return (f"{over}\n{kind.upper()}({agg.column}) is drawn around the value {aside} ranks "
            f"from the {end}\na drawn {kind.upper()} aims that many ranks from the {end}, or "
            f"a tenth of the {values} from it in a smaller scope (the {end} itself would be "
            "drawn almost anywhere between it and the domain's end, docs/privacy.md §5.3)")


def _sum_note(cal: Calibration) -> str:
    if cal.local and cal.shift == 1:
        return ("SUM is winsorized: the smallest and the largest value in scope count as "
                "their neighbours (docs/privacy.md §3.4)")
    return "SUM adds values clamped to the declared domain"


def _release_clipped(a: Asked) -> Released:
    """SUM, or AVG's sum, of contributions clipped to a bound drawn per group
    (privacy/contribution_bounds.py); AVG's count takes a quarter of the loss (Gaussian
    noise: of its ρ)."""
    plan, agg, group, cal, rng = a.plan, a.agg, a.group, a.cal, a.rng
    alike = a.once("clipped", lambda: _clipped_alike(a))
    column, rows_per_unit, confidence = alike.column, alike.rows_per_unit, alike.confidence
    group_size = plan.table.group_size
    ladder = _ladder(group, alike.contribution, column, rows_per_unit, a.kept)
    if a.index in group.joint:  # clipped across groups: the whole loss, drawn once
        of_count, of_sum = alike.joint_parts
        noisy_sum = joint_sum_at(ladder, group.joint[a.index], of_sum, group_size,
                                 alike.group_count, column.resolution, rng, confidence,
                                 share=alike.joint_share, shift=cal.shift,
                                 kept=alike.joint_noise)
        note, rung = alike.joint_note, None
    else:
        of_count, of_sum = alike.parts
        noisy_sum, rung = clipped_sum(ladder, of_sum, group_size, column.lower,
                                      column.upper, column.resolution, rng, confidence,
                                      alike.gaussian, kept=alike.noise)
        note = alike.bound_note
    mechanism = alike.mechanisms.get(noisy_sum.mechanism)
    if mechanism is None:
        mechanism = alike.mechanisms[noisy_sum.mechanism] = \
            f"{noisy_sum.mechanism}, its bound by the exponential mechanism"
    drawn = group.joint[a.index] if rung is None else rung
    note = f"{note}\n{CLIPPING_NOTE}"
    if ladder.rungs[drawn] <= ladder.rungs[-1] * FOOT:
        note = f"{note}\n{FOOT_NOTE}"
    if agg.kind == SUM:
        value = signed_sum(noisy_sum.value, column)
        value = round(value) if column.type == "int" else value
        return _finish(Noisy(value, noisy_sum.ci95, mechanism), cal, note)
    if alike.counted is None:
        noisy_count = _integer_noise(a, group.column(agg.column).n,
                                     _integer_scale(cal.shift, cal), of_count, confidence)
    else:  # the count's values clipped as a COUNT(col)'s over the chain (§3.14)
        noisy_count = _counted(a, alike.counted, of_count, confidence,
                               group.joint.get(count_slot(a.index)), "count ")
    released = _ratio(Noisy(noisy_sum.value, noisy_sum.ci95, mechanism), noisy_count,
                      column, cal, note)
    if rung is not None and rung < len(ladder.rungs) - 1 and rows_per_unit == 1 \
            and column.lower is not None and column.lower >= 0 \
            and released.value >= NEAR_BOUND * ladder.rungs[rung]:  # (the top clips none)
        return replace(released, note=f"{released.note}\n{NEAR_BOUND_NOTE}")
    return released


@dataclass(frozen=True)
class _ClippedAlike:
    """What a clipped SUM or AVG works out alike in every group of one release
    (``Asked.once``): its contribution, column, a unit's rows, noise and confidence,
    the loss's parts (clipped across the groups or per group), its notes, the number of
    groups, and each rung's noise and the mechanism's text as met."""

    contribution: Contribution
    column: Column  # its declared domain and resolution
    rows_per_unit: int
    gaussian: bool
    confidence: float
    joint_parts: tuple[Loss | None, Loss]
    parts: tuple[Loss | None, Loss]
    joint_note: str
    bound_note: str
    group_count: int
    counted: Contribution | None  # an AVG's count laddered too (``clipped_divisor``)
    joint_share: Fraction  # of the sum's loss, its bound's across groups (``joint_share``)
    joint_noise: dict = field(default_factory=dict)
    noise: dict = field(default_factory=dict)
    mechanisms: dict = field(default_factory=dict)


def _clipped_alike(a: Asked) -> _ClippedAlike:
    plan, agg, cal = a.plan, a.agg, a.cal
    rows_per_unit = cal.shift // plan.table.group_size
    gaussian = plan.gaussian(agg)
    counted = clipped_divisor(plan, a.index, a.group.joint)
    share = joint_bound_share(plan, agg)
    joint = joint_note(rows_per_unit, share)
    bound = bound_note(rows_per_unit, plan.table.privacy_unit is not None, gaussian)
    if agg.kind == SUM:
        joint, bound = f"SUM: {joint}", f"SUM: {bound}"
    else:
        which = "rho" if gaussian else "epsilon"
        counting = ", each unit's values counted and clipped as its values are summed" \
            if counted is not None else ""
        average = (f"AVG is a noisy SUM (three quarters of the {which}) over a noisy COUNT "
                   f"(a quarter){counting}; ")
        joint, bound = average + joint, average + bound
    return _ClippedAlike(
        Contribution(agg.column), a.column, rows_per_unit, gaussian,
        0.975 if agg.kind == AVG else 0.95,  # AVG: both parts at once, ≥ 95 %
        _joint_parts(plan, agg, cal.shift, counted is not None),
        (None, a.part) if agg.kind != AVG else a.part.split(1, 3, by_rho=gaussian),
        joint, bound, plan.group_count, counted, share)


# An AVG of values ≥ 0, each clipped to a drawn bound B, that comes out at 0.9·B or above
# was clipped in most of its values, likely far below them (a group of few units at a
# small ε draws a rung under the data now and then: AVG(income) of 142 people at ε 1
# came back 9–383 against 55,147 in 4.5 % of answers). The 95 % bound covers the noise,
# not that; the answer says so. A function of the released average and of the drawn
# bound (the draw's output): post-processing, no loss.
# A bound drawn at the foot of its ladder, at most 2⁻¹⁵ of the largest contribution the
# rules allow: where a scope's few units do not inform the draw it lands there, and the
# sum comes back near 0 with a small 95 % bound (docs/privacy.md §6, benchmarks/README.md
# "Small scopes"). Said, as a function of the drawn rung (the draw's output).
FOOT = 2.0 ** -15
FOOT_NOTE = ("the clipping bound was drawn at the foot of its ladder (at most 2⁻¹⁵ of the "
             "largest contribution the rules allow): unless the contributions are that "
             "small, most were clipped and the true value may be far higher; the 95 % bound "
             "does not cover that (too few units in scope for the draw; docs/privacy.md §6)")
# said of every clipped SUM and AVG: the bound a client reads is the noise's
CLIPPING_NOTE = ("the 95 % bound of a clipped SUM or AVG is its noise's: the clipping "
                 "itself may move the answer (each clipped unit's contribution towards 0), "
                 "which the bound does not include")
NEAR_BOUND = 0.9
NEAR_BOUND_NOTE = ("an AVG at 90 % or more of the clipping bound drawn for its group was "
                   "clipped in most of its values: the true average may be far higher (ask "
                   "again with a larger epsilon, or without GROUP BY; docs/privacy.md §3.14)")


def _joint_parts(plan: QueryPlan, agg, shift: int, counted: bool
                 ) -> tuple[Loss | None, Loss]:
    """A jointly clipped aggregate's (count's, sum's) parts of its whole loss: the count's
    (AVG's) that of a histogram of counts (§3.5), or, ``counted`` (clipped across the
    groups as its sum), the whole quarter."""
    of_count, of_sum = sum_loss(plan, agg)
    if of_count is not None and not counted:
        of_count = of_count * Fraction(1, group_share(plan, shift, True))
    return of_count, of_sum


def _ladder(group: GroupStats, contribution: Contribution, column, rows_per_unit: int,
            kept: dict | None = None):
    """The group's ladder of ``contribution``; an empty group's is of no units (its
    public rungs worked out once a release where ``kept``: ``release_groups``')."""
    found = group.ladders.get(contribution)
    if found:
        return found
    known = None if kept is None else kept.get(("empty", contribution))
    if known is None:
        known = empty_ladder(rungs(contribution, column, rows_per_unit))
        if kept is not None:
            kept[("empty", contribution)] = known
    return known


def _release_clipped_moments(plan: QueryPlan, index: int, group: GroupStats, column,
                             cal: Calibration, loss: Loss, rng) -> Released:
    """STDDEV/VARIANCE of clipped values about a released mean (docs/privacy.md §3.14).
    One value per unit: from the ladders of x − L and (x − L)²
    (``clipped_centred_moments``). Several: from each unit's Σ(x − m̂)² about the mean
    ``spread_centres`` released, read in a second statement (``unit_moments``)."""
    agg = plan.aggregates[index]
    group_size = plan.table.group_size
    rows_per_unit = cal.shift // group_size
    first = _ladder(group, Contribution(agg.column, column.lower, 1), column, rows_per_unit)
    bound = ("a bound drawn privately per group (a fifth of the epsilon)"
             if draws_bound(first.rungs) else "the declared domain")
    what = "STDDEV" if agg.kind.startswith("stddev") else "VARIANCE"
    if rows_per_unit == 1:
        second = _ladder(group, Contribution(agg.column, column.lower, 2), column,
                         rows_per_unit)
        noisy = clipped_centred_moments(agg.kind, group.column(agg.column).n, first, second,
                                        loss, _integer_scale(cal.shift, cal), group_size,
                                        column, rng)
        return _finish(noisy, cal, (
            f"{what} from a noisy count and a noisy mean (a tenth of the epsilon each) and "
            f"the noisy sum of squared distances to that mean, the values clipped to "
            f"{bound} (docs/privacy.md §3.8, §3.14); heavy tails clipped make it low"))
    noisy = unit_moments(agg.kind, group.centres[index], group.centred.get(index) or
                         empty_ladder(UNIT_RUNGS),
                         rows_per_unit, group_size, column, rng)
    return _finish(noisy, cal, (
        f"{what} from a noisy count and a noisy mean (a tenth of the epsilon each) and the "
        f"noisy sum of squared distances to that mean, each unit's sum of its values "
        f"clipped to {bound} and its sum of squared distances to a bound that follows "
        "from it (docs/privacy.md §3.8, §3.14); heavy tails clipped make it low"))


def spread_centres(plan: QueryPlan, groups: dict[tuple, GroupStats], cal: Calibration,
                   rng: RandomSource) -> dict[int, tuple[Contribution, tuple[float, ...]]]:
    """The first releases of every clipped STDDEV/VARIANCE over several rows per unit, in
    every group (``variance.unit_centre``, into its ``centres``), and per aggregate the
    contribution its second statement reads, each unit's Σ(x − m̂)² with each group's
    released mean m̂, divided by its B₂ (``square_scale``), and its ladder (one rung)."""
    group_size = plan.table.group_size
    rows_per_unit = cal.shift // group_size
    clipped = laddered(plan)
    wanted = {}
    for index, agg in enumerate(plan.aggregates):
        if agg.kind not in SPREADS or rows_per_unit == 1:
            continue
        column = plan.table.columns[agg.column]
        first = Contribution(agg.column, column.lower, 1)
        if Contribution(agg.column, column.lower, 2) not in clipped:
            continue
        part, centres = _part(plan, agg, cal), []
        for key in plan.group_keys() if plan.group_by else [()]:
            group = GroupStats.of(groups, key)
            centre = unit_centre(group.column(agg.column).n,
                                 _ladder(group, first, column, rows_per_unit), part,
                                 _integer_scale(cal.shift, cal), group_size, column, rng)
            group.centres[index] = centre
            centres.append((key, column.lower + centre.centre, square_scale(
                square_bound(centre.bound, centre.centre, rows_per_unit))))
        wanted[index] = (Contribution(agg.column, column.lower, 2, tuple(centres)),
                         UNIT_RUNGS)
    return wanted


def _release_average(a: Asked, stats: ColumnStats, column, cal: Calibration, loss: Loss,
                     rng):
    """AVG = noisy SUM / noisy COUNT, each with half the loss (post-processing of both;
    Gaussian noise: half the ρ each)."""
    total, sum_sensitivity = _sum_and_sensitivity(stats, column, cal)
    gaussian = a.plan.gaussian(a.agg)
    of_sum, of_count = loss.split(1, 1, by_rho=gaussian)
    # Each part inside its 97.5% interval: both at once with probability ≥ 95%.
    scale, step = _real_scale(sum_sensitivity, cal, column), grid_step(column.resolution)
    noisy_sum = (gaussian_real(total, scale, of_sum.rho, rng, step, 0.975) if gaussian
                 else laplace_real(total, scale, of_sum.epsilon, rng, step, 0.975))
    noisy_count = _integer_noise(a, stats.n, _integer_scale(cal.shift, cal), of_count, 0.975)
    half = "half the rho" if gaussian else "half the epsilon"
    return _ratio(noisy_sum, noisy_count, column, cal,
                  f"AVG is a noisy SUM over a noisy COUNT, each with {half}; "
                  f"{_sum_note(cal)}")


def _integer_noise(a: Asked, true: int, sensitivity: int, part: Loss,
                   confidence: float = 0.95) -> Noisy:
    """Discrete Laplace at the part's ε, or the discrete Gaussian at its ρ where the plan
    chose Gaussian noise for this aggregate."""
    if a.plan.gaussian(a.agg):
        return gaussian_integer(true, sensitivity, part.rho, a.rng, confidence)
    return laplace_integer(true, sensitivity, part.epsilon, a.rng, confidence)


def _ratio(noisy_sum: Noisy, noisy_count: Noisy, column, cal: Calibration,
           note: str) -> Released:
    """SUM / COUNT of the two noisy parts, clamped to the domain, with the widest ratio
    over the corners of their intervals as its 95 % bound."""
    count = max(1, noisy_count.value)
    value = _clamp(noisy_sum.value / count, column.lower, column.upper)
    low_count = max(1.0, count - noisy_count.ci95)
    spread = max(abs((noisy_sum.value + sign * noisy_sum.ci95) / divisor - value)
                 for sign in (-1, 1) for divisor in (low_count, count + noisy_count.ci95))
    return _finish(Noisy(value, spread, f"{noisy_sum.mechanism} / {noisy_count.mechanism}"),
                   cal, note)


def _real_scale(sensitivity: float, cal: Calibration, column) -> float:
    """The global sensitivity as is; raw iDP's local one at least the floor, rounded up
    to a power of two (0 only under exact_release with a zero floor)."""
    if not cal.local:
        return sensitivity
    floored = max(sensitivity, cal.floor_of(column))
    return round_up_to_power_of_two(floored) if floored > 0 else 0.0


def _integer_scale(sensitivity: int, cal: Calibration) -> int:
    """s ≥ 1 records: DP uses it as is; iDP at least the floor, and under raw iDP
    (``local``) rounded up to a power of two. Under the global scale the count's s = c·g
    is public (no neighbour changes c: units keep their rows, docs/privacy.md §1, §2), so
    rounding it hides nothing a neighbour could tell apart and only adds noise: 6 rows a
    person made 8 (a third more noise on every count of the demo's visits)."""
    if cal.model == "dp":
        return sensitivity
    floored = max(float(sensitivity), cal.floor)
    return max(1, math.ceil(round_up_to_power_of_two(floored) if cal.local else floored))


def _finish(noisy: Noisy, cal: Calibration, note: str | None = None,
            private: float | None = None) -> Released:
    """The 95% bound the client sees: that of a scale the data do not decide (public);
    raw iDP's by ``report_scale``: "rounded" the rounded scale's (the owner's opt-in),
    "private" one from a private level of the local sensitivity where there is one
    (``private``), "none" none."""
    if not cal.local or cal.report_scale == "rounded":
        return Released(noisy.value, noisy.ci95, noisy.mechanism, note)
    return Released(noisy.value, private, noisy.mechanism, note)


def signed_sum(value: float, column) -> float:
    """A SUM kept to the sign its domain allows (≥ 0 over a domain of no negative value,
    ≤ 0 over one of no positive value): post-processing of the released sum alone."""
    return _clamp(value, 0.0 if column.lower is not None and column.lower >= 0 else None,
                  0.0 if column.upper is not None and column.upper <= 0 else None)


def _clamp(value: float, lower: float | None, upper: float | None) -> float:
    if lower is not None:
        value = max(lower, value)
    if upper is not None:
        value = min(upper, value)
    return value


def _or(value, fallback):
    return fallback if value is None else value
