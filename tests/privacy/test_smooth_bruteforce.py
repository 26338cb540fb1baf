"""The β-smooth sensitivities by brute force (NRS 2007 Def. 2.1): on small data sets
(ties, domain bounds, records leaving the scope, several rows per unit, group size
g > 1, raw values NaN, ±inf or overflow-sized, in data and neighbours, normalised as
the backend does) S(D) is at least the largest change of the statistic over every neighbour, and
S(D) ≤ e^β·S(D') for every neighbour D'. The window is read through the same
requests the engine answers (privacy/requests.py), answered here from the list."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import pytest

from proxy.engine import answered
from proxy.privacy.sensitivity import SensitivityError
from proxy.privacy.smooth_sensitivity import (
    smooth_sensitivity_of_max,
    smooth_sensitivity_of_min,
    smooth_sensitivity_of_percentile,
)
from proxy.statistics import percentile_rank
from tests.privacy.harness import (
    EXTREME,
    GRID,
    LOWER,
    UPPER,
    assert_sound,
    datasets,
    modifying,
)
from tests.privacy.reference import by_hand, in_domain, percentile


def _percentile_case(fraction):
    def statistic(values):
        return percentile(values, fraction, LOWER, UPPER)

    def smooth(values, shift, beta):
        rank = percentile_rank(len(values), fraction)
        return by_hand(smooth_sensitivity_of_percentile(len(values), rank, shift, beta,
                                                        LOWER, UPPER), values)
    return statistic, smooth


CASES = {
    "median": _percentile_case(Fraction(1, 2)),
    "p90": _percentile_case(Fraction(9, 10)),
    "max": (lambda values: values[-1] if values else LOWER,
            lambda values, shift, beta: by_hand(smooth_sensitivity_of_max(
                len(values), shift, beta, LOWER, UPPER), values)),
    "min": (lambda values: values[0] if values else UPPER,
            lambda values, shift, beta: by_hand(smooth_sensitivity_of_min(
                len(values), shift, beta, LOWER, UPPER), values)),
}


def _neighbour_values(index: int) -> list[float]:
    """What a neighbour may set a record to: the grid and two of the extreme values,
    in turn (every one of them every few data sets), to bound the enumeration."""
    return GRID + [EXTREME[index % len(EXTREME)], EXTREME[(index + 3) % len(EXTREME)]]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("units,rows,group_size", [(5, 1, 1), (4, 2, 1), (4, 1, 2)])
@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_smooth_sensitivity_bounds_the_change_and_is_smooth(case, units, rows, group_size,
                                                            beta):
    """Two measures of each neighbour D': the change of the answer, within S(D), and
    S(D) − e^β·S(D'), within 0 (S(D) ≤ e^β·S(D'))."""
    statistic, smooth = CASES[case]
    shift = rows * group_size  # DP: the declared bound c times g

    found: dict = {}  # a function of the values in scope alone: computed once for each

    def answer_and_smooth(records):
        values = in_domain(records)
        key = tuple(values)
        if key not in found:
            found[key] = statistic(values), smooth(values, shift, beta)
        return found[key]

    def change(before, after):
        return {"answer": abs(after[0] - before[0]),
                "smoothness": before[1] - math.exp(beta) * after[1]}

    seed = zlib.crc32(f"{case} {units} {rows} {group_size} {beta}".encode())
    for index, records in enumerate(datasets(seed, 25, units, rows)):
        assert_sound(answer_and_smooth,
                     lambda rs: {"answer": answer_and_smooth(rs)[1], "smoothness": 0.0},
                     [records], modifying(_neighbour_values(index), group_size),
                     change=change)


def test_a_wide_window_is_read_only_as_far_as_needed():
    """10 000 equal values: A(k) = 0 until the window reaches the data's ends, so the
    window grows; with spread values it stops after the first reads."""
    reads = []

    def counting(values):
        def read(request):
            reads.append(request.last - request.first + 1)
            return values[request.first - 1: request.last]
        return read

    spread = [i / 10_000 * UPPER for i in range(10_000)]
    answered(smooth_sensitivity_of_percentile(10_000, 5_000, 1, 1.0, LOWER, UPPER),
             counting(spread))
    assert sum(reads) < 100
    reads.clear()
    equal = [5.0] * 10_000
    assert answered(smooth_sensitivity_of_percentile(10_000, 5_000, 1, 0.01, LOWER, UPPER),
                    counting(equal)) > 0
    assert sum(reads) < 10_000 * 3


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("case", CASES)
def test_a_non_finite_value_in_the_window_is_refused(case, bad):
    """The window is normalised in the backend; a NaN or ±inf read there anyway is
    refused (SensitivityError), never turned into a sensitivity."""
    values = [1.0, 2.0, bad, 4.0, 5.0] if case != "max" else [1.0, 2.0, 3.0, 4.0, bad]
    with pytest.raises(SensitivityError):
        CASES[case][1](values, 1, 0.5)
