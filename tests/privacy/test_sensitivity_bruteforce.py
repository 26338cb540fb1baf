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
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import (
    EXTREME,
    GRID,
    LOWER,
    SETTINGS,
    UPPER,
    assert_loss_within,
    assert_sound,
    datasets,
    modifying,
    neighbours,
    squares,
    total,
)
from tests.privacy.reference import (
    contribution_bound,
    in_domain,
    order_values,
    percentile,
    scope_values,
)


def _shift(records, group_size: int) -> int:
    return contribution_bound(records) * group_size


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("fraction", [Fraction(1, 2), Fraction(1, 4), Fraction(9, 10), Fraction(0)])
def test_percentile(units, rows, group_size, fraction):
    statistic = lambda rs: percentile(in_domain(rs), fraction, LOWER, UPPER)

    def ls(records):
        shift = _shift(records, group_size)
        values = in_domain(records)
        stats = order_values(values, percentile_refs(fraction, shift))
        answer, ls = local_sensitivity_of_percentile(len(values), stats, fraction, shift,
                                                     LOWER, UPPER)
        assert answer == statistic(records)
        return ls

    assert_sound(statistic, ls, datasets(11, 40, units, rows), modifying(group_size=group_size),
                 tight=lambda rs: _shift(rs, group_size) == 1 and bool(rs))


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


def _extreme_ls(kind, shift, bound, declared):
    """The released MAX (or MIN) and its LS from the order statistics the backend reads."""
    def ls(records):
        values = _extreme_scope(records, kind, bound)
        if kind == "max":
            stats = order_values(values, max_refs(shift, declared))
            return local_sensitivity_of_max(stats, shift, LOWER, bound)
        stats = order_values(values, min_refs(shift, declared))
        return local_sensitivity_of_min(stats, shift, bound, UPPER)
    return ls


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("declared", [True, False])
def test_max_and_min(units, rows, group_size, kind, declared):
    bound = (UPPER if kind == "max" else LOWER) if declared else None
    for records in datasets(12, 40, units, rows):
        shift = _shift(records, group_size)
        statistic = _extreme_statistic(kind, shift, bound)
        answer, ls = _extreme_ls(kind, shift, bound, declared)(records)
        assert answer == statistic(records)
        assert_sound(statistic, lambda _, ls=ls: ls, [records], modifying(group_size=group_size),
                     tight=shift == 1 and bool(records) and declared)


def test_second_maximum_is_tight_when_neighbours_exist():
    """Without U the (s+1)-th largest is answered; its LS is attained (row-level)."""
    scopes = (records for records in datasets(14, 60, 6, 1)
              if len(_extreme_scope(records, "max", None)) >= 3)
    assert_sound(_extreme_statistic("max", 1, None),
                 lambda records: _extreme_ls("max", 1, None, False)(records)[1], scopes,
                 tight=True)


def _winsorized(records) -> float:
    vs = in_domain(records)
    return winsorized_sum(sum(vs), vs[:2], vs[-2:], len(vs))


def test_winsorized_sum_row_level():
    """Seed 002 Prop. 3 data-only bound, extended to records entering and leaving."""
    def ls(records):
        values = in_domain(records)
        stats = order_values(values, SUM_REFS)
        answer, ls = local_sensitivity_of_winsorized_sum(len(values), sum(values), stats,
                                                         LOWER, UPPER)
        assert answer == pytest.approx(_winsorized(records))
        return ls

    # Tight when a record can both leave and enter the scope (one of each exists).
    assert_sound(_winsorized, ls, datasets(15, 80, 7, 1),
                 tight=lambda rs: {r.in_scope for r in rs} == {True, False})


def test_winsorized_sum_matches_prop3_inside_a_fixed_cluster():
    """Without a WHERE filter (no entering/leaving) the change never exceeds seed 002
    Prop. 3's expression, max of (2) and (3): every value set to any of the grid."""
    def prop3(values):
        y = sorted(values)
        return max((y[-1] - y[1]) + (y[2] - y[1]) + (y[-1] - y[-2]),
                   (y[-2] - y[0]) + (y[-2] - y[-3]) + (y[1] - y[0]))

    def statistic(values):
        y = sorted(values)
        return winsorized_sum(sum(y), y[:2], y[-2:], len(y))

    clusters = random_datasets(16, 200, rows_of(lambda rng, _: rng.choice(GRID)), units=(3, 7))
    assert_sound(statistic, prop3, clusters,
                 lambda values: neighbours(values, GRID, unit=None, make=lambda _, v: v))


@pytest.mark.parametrize("units,rows,group_size", [(4, 2, 1), (4, 1, 2), (4, 2, 2)])
def test_clamped_sum(units, rows, group_size):
    """Up to four records change at once here: neighbours take the domain bounds (where
    a clamped sum changes most) and every extreme value, not the whole grid."""
    assert_sound(lambda rs: sum(in_domain(rs)),
                 lambda rs: clamped_sum_sensitivity(_shift(rs, group_size), LOWER, UPPER),
                 datasets(17, 15, units, rows),
                 modifying([LOWER, UPPER, *EXTREME], group_size))


@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
def test_count_with_where(units, rows, group_size):
    """COUNT(col) — also AVG's count — counts the non-NaN values in scope: s."""
    assert_sound(lambda rs: len(scope_values(rs)),
                 lambda rs: count_sensitivity(_shift(rs, group_size)),
                 datasets(18, 40, units, rows), modifying(group_size=group_size),
                 tight=lambda rs: _shift(rs, group_size) == 1 and bool(rs))


def test_count_of_whole_table_never_changes():
    """Why a whole-table COUNT(*) is public (QueryPlan.public): no neighbour changes it."""
    assert_sound(len, lambda _: 0, datasets(19, 30, 4, 2), tight=True)


@pytest.mark.parametrize("units,rows,group_size,groups", [(4, 1, 1, 3), (3, 2, 1, 3),
                                                          (3, 1, 2, 2), (4, 1, 1, 1)])
def test_group_by_counts_l1(units, rows, group_size, groups):
    """A histogram over declared keys: L1 change ≤ min(2, G)·s (SPEC §5.1)."""
    assert_sound(lambda rs: {g: len(scope_values(rs, g)) for g in range(groups)},
                 lambda rs: min(2, groups) * _shift(rs, group_size),
                 datasets(20, 30, units, rows, groups),
                 modifying(group_size=group_size, groups=groups), change=total,
                 tight=lambda rs: (_shift(rs, group_size) == 1 and groups > 1
                                   and any(r.in_scope for r in rs)))


@pytest.mark.parametrize("units,rows,group_size,groups", [(4, 1, 1, 3), (3, 2, 1, 2),
                                                          (3, 1, 2, 3)])
def test_group_by_medians_privacy_loss(units, rows, group_size, groups):
    """Per-group noise scaled by groups_touched(s, G)·LS_g keeps the total loss ≤ ε:
    Σ_g |Δ_g| / LS_g ≤ groups_touched(s, G) for every neighbour."""
    fraction = Fraction(1, 2)

    def medians(records):
        return {g: percentile(in_domain(records, g), fraction, LOWER, UPPER)
                for g in range(groups)}

    def ls(records):
        shift, out = _shift(records, group_size), {}
        for g in range(groups):
            values = in_domain(records, g)
            stats = order_values(values, percentile_refs(fraction, shift))
            out[g] = local_sensitivity_of_percentile(len(values), stats, fraction, shift,
                                                     LOWER, UPPER)[1]
        return out

    assert_loss_within(medians, ls, lambda rs: groups_touched(_shift(rs, group_size), groups),
                       datasets(21, 25, units, rows, groups),
                       modifying(group_size=group_size, groups=groups))


@pytest.mark.parametrize("units,rows,group_size,groups", [(4, 1, 1, 3), (3, 2, 1, 3),
                                                          (3, 1, 2, 2), (4, 1, 1, 1)])
def test_group_by_counts_l2(units, rows, group_size, groups):
    """Gaussian noise on a histogram (noisy_answers._part): each cell at ρ/min(2, G) for
    sensitivity s keeps the total ρ because the squared L2 change is ≤ min(2, G)·s²."""
    assert_sound(lambda rs: {g: len(scope_values(rs, g)) for g in range(groups)},
                 lambda rs: min(2, groups) * _shift(rs, group_size) ** 2,
                 datasets(22, 30, units, rows, groups),
                 modifying(group_size=group_size, groups=groups), change=squares,
                 tight=lambda rs: (_shift(rs, group_size) == 1 and groups > 1
                                   and any(r.in_scope for r in rs)))


@pytest.mark.parametrize("units,rows,group_size,groups", [(3, 2, 1, 3), (3, 1, 2, 2)])
def test_group_by_sums_l2(units, rows, group_size, groups):
    """Gaussian SUM per group: each group at ρ/groups_touched(s, G) for the clamped sum's
    sensitivity S: the squared L2 change over the groups is ≤ groups_touched(s, G)·S²."""
    assert_sound(lambda rs: {g: sum(in_domain(rs, g)) for g in range(groups)},
                 lambda rs: groups_touched(_shift(rs, group_size), groups)
                 * clamped_sum_sensitivity(_shift(rs, group_size), LOWER, UPPER) ** 2,
                 datasets(23, 15, units, rows, groups),
                 modifying([LOWER, UPPER, *EXTREME], group_size, groups), change=squares)


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
