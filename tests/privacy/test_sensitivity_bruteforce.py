"""Brute-force neighbour enumeration for every formula of SPEC §5.2.

For small random data sets (ties, values at the domain bounds, records entering and
leaving the WHERE scope and moving between groups, odd and even n, n < 3, units with
several rows, group size g > 1, and raw values that are NaN, ±inf or overflow-sized)
every neighbouring data set is built — a neighbour may set a record to any of those
values too — and the change of the released statistic, computed from the normalised
values as the backend does, is compared with the formula: never larger (sound), and
equal to the largest change where docs/privacy.md says the formula is tight (row-level).
"""

from __future__ import annotations

import functools
import math
import random
from fractions import Fraction

import pytest

from proxy.privacy.sensitivity import (
    SUM_REFS,
    SensitivityError,
    clamped_sum_sensitivity,
    count_sensitivity,
    groups_touched,
    local_sensitivity_of_max,
    local_sensitivity_of_min,
    local_sensitivity_of_percentile,
    local_sensitivity_of_winsorized_sum,
    max_refs,
    min_refs,
    percentile_refs,
    round_up_to_power_of_two,
    winsorized_sum,
)
from proxy.statistics import MAGNITUDE_CAP, RankRef
from tests.privacy.reference import (
    EXTREME,
    Record,
    contribution_bound,
    neighbours,
    order_values,
    percentile,
    scope_values,
)

LOWER, UPPER = 0.0, 10.0
GRID = [0.0, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0]  # includes both domain bounds
VALUES = GRID + EXTREME  # what a record may hold, in data and in neighbours
TOLERANCE = 1e-9

# The values in scope as the backend sees them with both bounds declared.
in_domain = functools.partial(scope_values, lower=LOWER, upper=UPPER)


def datasets(seed: int, count: int, max_units: int, max_rows_per_unit: int, groups: int = 1):
    """Random small data sets with ties and bound values, one value in five NaN, ±inf or
    overflow-sized; some records out of scope."""
    rng = random.Random(seed)
    for _ in range(count):
        records = []
        for unit in range(rng.randint(0, max_units)):
            for _ in range(rng.randint(1, max_rows_per_unit)):
                value = rng.choice(GRID) if rng.random() < 0.8 else rng.choice(EXTREME)
                records.append(Record(unit, value, rng.random() < 0.75, rng.randrange(groups)))
        yield records


def options(groups: int = 1, values=VALUES):
    return [(v, s, g) for v in values for s in (True, False) for g in range(groups)]


# (units, rows per unit, group size): row-level, user-level, group privacy
SETTINGS = [(5, 1, 1), (4, 2, 1), (4, 1, 2)]


def _worst_change(records, statistic, group_size, values=VALUES):
    base = statistic(records)
    return max((abs(statistic(n) - base)
                for n in neighbours(records, options(1, values), group_size)), default=0.0)


def _check(records, ls, worst, tight):
    assert math.isfinite(ls) and math.isfinite(worst), (records, ls, worst)
    assert worst <= ls + TOLERANCE, f"unsound: change {worst} > LS {ls} on {records}"
    if tight:
        assert worst >= ls - TOLERANCE, f"not tight: change {worst} < LS {ls} on {records}"


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("fraction", [Fraction(1, 2), Fraction(1, 4), Fraction(9, 10), Fraction(0)])
def test_percentile(units, rows, group_size, fraction):
    for records in datasets(11, 40, units, rows):
        shift = contribution_bound(records) * group_size
        values = in_domain(records)
        stats = order_values(values, percentile_refs(fraction, shift))
        answer, ls = local_sensitivity_of_percentile(len(values), stats, fraction, shift,
                                                     LOWER, UPPER)
        statistic = lambda rs: percentile(in_domain(rs), fraction, LOWER, UPPER)
        assert answer == statistic(records)
        _check(records, ls, _worst_change(records, statistic, group_size),
               tight=shift == 1 and bool(records))


def _extreme_statistic(kind, shift, bound):
    """MAX (or MIN) as released: the extreme value with a declared bound on its side,
    else the (s+1)-th most extreme; the opposite bound when there are too few values.
    Values are normalised with the bounds declared (±MAGNITUDE_CAP on the open side)."""
    def statistic(records):
        values = _extreme_scope(records, kind, bound)
        if kind == "min":
            values = [-v for v in reversed(values)]
        fallback = LOWER if kind == "max" else -UPPER
        if bound is not None:
            answer = values[-1] if values else fallback
        else:
            answer = values[-1 - shift] if len(values) > shift else fallback
        return answer if kind == "max" else -answer
    return statistic


def _extreme_scope(records, kind, bound):
    """In-scope values of a column with ``bound`` (or none) on the extreme's side."""
    return scope_values(records, lower=LOWER if kind == "max" else bound,
                        upper=bound if kind == "max" else UPPER)


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("declared", [True, False])
def test_max_and_min(units, rows, group_size, kind, declared):
    for records in datasets(12, 40, units, rows):
        shift = contribution_bound(records) * group_size
        bound = (UPPER if kind == "max" else LOWER) if declared else None
        values = _extreme_scope(records, kind, bound)
        if kind == "max":
            stats = order_values(values, max_refs(shift, declared))
            answer, ls = local_sensitivity_of_max(stats, shift, LOWER, bound)
        else:
            stats = order_values(values, min_refs(shift, declared))
            answer, ls = local_sensitivity_of_min(stats, shift, bound, UPPER)
        statistic = _extreme_statistic(kind, shift, bound)
        assert answer == statistic(records)
        _check(records, ls, _worst_change(records, statistic, group_size),
               tight=shift == 1 and bool(records) and declared)


def test_second_maximum_is_tight_when_neighbours_exist():
    """Without U the (s+1)-th largest is answered; its LS is attained (row-level)."""
    for records in datasets(14, 60, 6, 1):
        values = _extreme_scope(records, "max", None)
        if len(values) < 3:
            continue
        stats = order_values(values, max_refs(1, False))
        _, ls = local_sensitivity_of_max(stats, 1, LOWER, None)
        _check(records, ls, _worst_change(records, _extreme_statistic("max", 1, None), 1),
               tight=True)


def test_winsorized_sum_row_level():
    """Seed 002 Prop. 3 data-only bound, extended to records entering and leaving."""
    for records in datasets(15, 80, 7, 1):
        values = in_domain(records)
        stats = order_values(values, SUM_REFS)
        answer, ls = local_sensitivity_of_winsorized_sum(len(values), sum(values), stats,
                                                         LOWER, UPPER)

        def statistic(rs):
            vs = in_domain(rs)
            return winsorized_sum(sum(vs), vs[:2], vs[-2:], len(vs))

        assert answer == pytest.approx(statistic(records))
        # Tight when a record can both leave and enter the scope (one of each exists).
        can_move = {r.in_scope for r in records} == {True, False}
        _check(records, ls, _worst_change(records, statistic, 1), tight=can_move)


def test_winsorized_sum_matches_prop3_inside_a_fixed_cluster():
    """Without a WHERE filter (no entering/leaving) the change never exceeds seed 002
    Prop. 3's expression, max of (2) and (3)."""
    rng = random.Random(16)
    for _ in range(200):
        values = sorted(rng.choice(GRID) for _ in range(rng.randint(3, 7)))
        y = values
        prop3 = max((y[-1] - y[1]) + (y[2] - y[1]) + (y[-1] - y[-2]),
                    (y[-2] - y[0]) + (y[-2] - y[-3]) + (y[1] - y[0]))
        base = winsorized_sum(sum(y), y[:2], y[-2:], len(y))
        worst = 0.0
        for i in range(len(y)):
            for v in GRID:
                changed = sorted(y[:i] + [v] + y[i + 1:])
                worst = max(worst, abs(winsorized_sum(sum(changed), changed[:2], changed[-2:],
                                                      len(changed)) - base))
        assert worst <= prop3 + TOLERANCE


@pytest.mark.parametrize("units,rows,group_size", [(4, 2, 1), (4, 1, 2), (4, 2, 2)])
def test_clamped_sum(units, rows, group_size):
    """Up to four records change at once here: neighbours take the domain bounds (where
    a clamped sum changes most) and every extreme value, not the whole grid."""
    for records in datasets(17, 15, units, rows):
        shift = contribution_bound(records) * group_size
        ls = clamped_sum_sensitivity(shift, LOWER, UPPER)
        statistic = lambda rs: sum(in_domain(rs))
        _check(records, ls, _worst_change(records, statistic, group_size,
                                          [LOWER, UPPER, *EXTREME]), tight=False)


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
def test_count_with_where(units, rows, group_size):
    """COUNT(col) — also AVG's count — counts the non-NaN values in scope: s."""
    for records in datasets(18, 40, units, rows):
        shift = contribution_bound(records) * group_size
        statistic = lambda rs: len(scope_values(rs))
        _check(records, count_sensitivity(shift), _worst_change(records, statistic,
               group_size), tight=shift == 1 and bool(records))


def test_count_of_whole_table_never_changes():
    """Why a whole-table COUNT(*) is public (QueryPlan.public): no neighbour changes it."""
    for records in datasets(19, 30, 4, 2):
        statistic = lambda rs: len(rs)
        _check(records, 0, _worst_change(records, statistic, 1), tight=True)


@pytest.mark.parametrize("units,rows,group_size,groups", [(4, 1, 1, 3), (3, 2, 1, 3),
                                                          (3, 1, 2, 2), (4, 1, 1, 1)])
def test_group_by_counts_l1(units, rows, group_size, groups):
    """A histogram over declared keys: L1 change ≤ min(2, G)·s (SPEC §5.1)."""
    for records in datasets(20, 30, units, rows, groups):
        shift = contribution_bound(records) * group_size
        base = [len(scope_values(records, g)) for g in range(groups)]
        worst = 0
        for other in neighbours(records, options(groups), group_size):
            worst = max(worst, sum(abs(len(scope_values(other, g)) - b)
                                   for g, b in enumerate(base)))
        bound = min(2, groups) * shift
        assert worst <= bound
        if shift == 1 and groups > 1 and any(r.in_scope for r in records):
            assert worst == bound


@pytest.mark.parametrize("units,rows,group_size,groups", [(4, 1, 1, 3), (3, 2, 1, 2),
                                                          (3, 1, 2, 3)])
def test_group_by_medians_privacy_loss(units, rows, group_size, groups):
    """Per-group noise scaled by groups_touched(s, G)·LS_g keeps the total loss ≤ ε:
    Σ_g |Δ_g| / LS_g ≤ groups_touched(s, G) for every neighbour."""
    fraction = Fraction(1, 2)
    for records in datasets(21, 25, units, rows, groups):
        shift = contribution_bound(records) * group_size
        share = groups_touched(shift, groups)
        base, ls = [], []
        for g in range(groups):
            values = in_domain(records, g)
            stats = order_values(values, percentile_refs(fraction, shift))
            answer, sensitivity = local_sensitivity_of_percentile(
                len(values), stats, fraction, shift, LOWER, UPPER)
            base.append(answer)
            ls.append(sensitivity)
        for other in neighbours(records, options(groups), group_size):
            loss = 0.0
            for g in range(groups):
                change = abs(percentile(in_domain(other, g), fraction, LOWER, UPPER) - base[g])
                if ls[g] == 0:
                    assert change == 0
                else:
                    loss += change / ls[g]
            assert loss <= share + TOLERANCE


NON_FINITE = [float("nan"), float("inf"), float("-inf")]
MEDIAN = Fraction(1, 2)


def _at(refs, values):
    return dict(zip(refs, values))


@pytest.mark.parametrize("bad", NON_FINITE)
@pytest.mark.parametrize("call", [
    lambda bad: local_sensitivity_of_percentile(
        3, _at(percentile_refs(MEDIAN, 1), [1.0, bad, 3.0]), MEDIAN, 1, LOWER, UPPER),
    lambda bad: local_sensitivity_of_percentile(
        3, _at(percentile_refs(MEDIAN, 1), [bad, 2.0, 3.0]), MEDIAN, 1, LOWER, UPPER),
    lambda bad: local_sensitivity_of_percentile(0, {}, MEDIAN, 1, LOWER, bad),
    lambda bad: local_sensitivity_of_max(_at(max_refs(1, False), [bad, 5.0, 1.0]), 1, LOWER,
                                         None),
    lambda bad: local_sensitivity_of_max(_at(max_refs(1, True), [5.0, bad]), 1, LOWER, UPPER),
    lambda bad: local_sensitivity_of_min(_at(min_refs(1, False), [1.0, bad, 5.0]), 1, None,
                                         UPPER),
    lambda bad: local_sensitivity_of_winsorized_sum(3, bad, _at(SUM_REFS, [1.0] * 6), LOWER,
                                                    UPPER),
    lambda bad: local_sensitivity_of_winsorized_sum(
        3, 6.0, _at(SUM_REFS, [1.0, 2.0, bad, 1.0, 2.0, 3.0]), LOWER, UPPER),
    lambda bad: clamped_sum_sensitivity(2, bad, UPPER),
    lambda bad: round_up_to_power_of_two(bad),
])
def test_a_non_finite_input_is_refused(call, bad):
    """The backend normalises every value, so a NaN or ±inf never reaches these helpers;
    if one did, they refuse instead of returning a NaN, an infinite or a made-up scale
    (round_up_to_power_of_two once turned NaN and inf into 1.0)."""
    with pytest.raises(SensitivityError):
        call(bad)


def test_an_overflowing_result_is_refused():
    """Finite inputs whose differences overflow (bounds the rules refuse, beyond
    ±MAGNITUDE_CAP) give an infinite sensitivity: refused; a negative one too."""
    with pytest.raises(SensitivityError):
        clamped_sum_sensitivity(1, -1e308, 1e308)
    with pytest.raises(SensitivityError):
        local_sensitivity_of_percentile(1, {RankRef("pct", 0, MEDIAN): 1e308}, MEDIAN, 1,
                                        -1e308, 1e308)
    with pytest.raises(SensitivityError):
        count_sensitivity(-1)
    assert clamped_sum_sensitivity(1, -MAGNITUDE_CAP, MAGNITUDE_CAP) == 2 * MAGNITUDE_CAP
