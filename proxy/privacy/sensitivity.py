"""Local and global sensitivities of the supported aggregates (SPEC §5.2).

Inputs are the few order statistics pushdown/ computed in the backend, addressed by
``RankRef``: a rank relative to the percentile rank, the bottom or the top of the
sorted values in scope. A rank outside 1..n has value None (a "missing neighbour"),
replaced by the declared domain bound. Every function returns (answer, sensitivity),
so the statistic released is exactly the one whose sensitivity was computed.
Every value reaching here is normalised (NaN as NULL, the rest clamped to the domain or
±MAGNITUDE_CAP: ``proxy.pushdown.values.clamped_to_domain``), so every input and result is a
finite number; ``finite_only`` checks it on each call and refuses otherwise.
Derivations and the seed equations are in docs/privacy.md; brute-force neighbour
enumeration in tests/privacy/test_sensitivity_bruteforce.py checks each of them.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from numbers import Real

from proxy.statistics import BOTTOM, PCT, TOP, RankRef

Values = Mapping[RankRef, float | None]


class SensitivityError(AssertionError):
    """An internal invariant broke: a sensitivity helper met or produced a number that
    is not finite, or a negative sensitivity. It cannot happen on any data (the backend
    normalises every value), and if it did, refusing is the only safe answer: a NaN or
    infinite scale would release the answer without noise."""


def require_finite(numbers, what: str) -> None:
    """Raise SensitivityError unless every number (None: a missing rank) is finite."""
    for number in numbers:
        if number is not None and not math.isfinite(number):
            raise SensitivityError(f"{what}: {number!r} is not a finite number")


def finite_only(function: Callable) -> Callable:
    """Wrap a sensitivity helper: its numeric arguments (and the values of mapping or
    list arguments) must be finite, and so must what it returns — a sensitivity, or an
    (answer, sensitivity) pair — with the sensitivity not negative. A helper that asks
    for data as it goes (a generator, privacy/requests.py) has its arguments checked
    when called and its result when it returns."""
    name = function.__name__

    @functools.wraps(function)
    def checked(*args, **kwargs):
        require_finite(_numbers((*args, *kwargs.values())), f"{name} input")
        if inspect.isgeneratorfunction(function):
            return _checked_when_done(function(*args, **kwargs), name)
        return _checked_result(function(*args, **kwargs), name)
    return checked


def _checked_when_done(asking, name: str):
    return _checked_result((yield from asking), name)


def _checked_result(result, name: str):
    sensitivity = result[-1] if isinstance(result, tuple) else result
    require_finite(_numbers((result,)), f"{name} result")
    if sensitivity < 0:
        raise SensitivityError(f"{name} result: negative sensitivity {sensitivity!r}")
    return result


def _numbers(arguments) -> list:
    found = []
    for argument in arguments:
        if isinstance(argument, Mapping):
            argument = list(argument.values())
        if isinstance(argument, (list, tuple)):
            found += _numbers(argument)
        elif isinstance(argument, Real) or argument is None:
            found.append(argument)
    return found


def percentile_refs(fraction: Fraction, shift: int) -> tuple[RankRef, ...]:
    return tuple(RankRef(PCT, offset, fraction) for offset in (-shift, 0, shift))


@finite_only
def local_sensitivity_of_percentile(
    n: int, values: Values, fraction: Fraction, shift: int, lower: float, upper: float
) -> tuple[float, float]:
    """Seed 000 §VI-A1 generalised to shift s = c·g and to a WHERE scope.

    LS = max(x₍ᵣ₊ₛ₎ − x₍ᵣ₎, x₍ᵣ₎ − x₍ᵣ₋ₛ₎); a missing neighbour is the domain bound.
    An empty scope answers the domain midpoint, whose sensitivity is half the domain.
    """
    below_ref, middle_ref, above_ref = percentile_refs(fraction, shift)
    middle = values.get(middle_ref) if n else None
    answer = (lower + upper) / 2 if middle is None else middle
    below = _or(values.get(below_ref), lower)
    above = _or(values.get(above_ref), upper)
    return answer, max(above - answer, answer - below, 0.0)


def max_refs(shift: int, has_upper: bool) -> tuple[RankRef, ...]:
    if has_upper:
        return (RankRef(TOP, 0), RankRef(TOP, shift))
    return (RankRef(TOP, 0), RankRef(TOP, shift), RankRef(TOP, 2 * shift))


@finite_only
def local_sensitivity_of_max(
    values: Values, shift: int, lower: float, upper: float | None
) -> tuple[float, float]:
    """MAX with declared U: max(U − x₍ₙ₎, x₍ₙ₎ − x₍ₙ₋ₛ₎) (seed 000 §VI-B1).

    Without U the (s+1)-th largest x₍ₙ₋ₛ₎ is answered instead (seed 000 §VI-B, "second
    maximum"): LS = max(x₍ₙ₎ − x₍ₙ₋ₛ₎, x₍ₙ₋ₛ₎ − x₍ₙ₋₂ₛ₎). Missing ranks are L; an empty
    scope has no TOP+0 value. Only the values from the top are needed, not n.
    """
    if upper is not None:
        answer = _or(values.get(RankRef(TOP, 0)), lower)
        below = _or(values.get(RankRef(TOP, shift)), lower)
        return answer, max(upper - answer, answer - below, 0.0)
    answer = _or(values.get(RankRef(TOP, shift)), lower)
    top = _or(values.get(RankRef(TOP, 0)), answer)
    below = _or(values.get(RankRef(TOP, 2 * shift)), lower)
    return answer, max(top - answer, answer - below, 0.0)


def min_refs(shift: int, has_lower: bool) -> tuple[RankRef, ...]:
    return tuple(RankRef(BOTTOM, ref.offset) for ref in max_refs(shift, has_lower))


@finite_only
def local_sensitivity_of_min(
    values: Values, shift: int, lower: float | None, upper: float
) -> tuple[float, float]:
    """Mirror of MAX: negate the values and swap the bounds."""
    mirrored = {RankRef(TOP, ref.offset): (None if v is None else -v)
                for ref, v in values.items() if ref.anchor == BOTTOM}
    answer, sensitivity = local_sensitivity_of_max(
        mirrored, shift, -upper, None if lower is None else -lower
    )
    return -answer, sensitivity


SUM_REFS = (RankRef(BOTTOM, 0), RankRef(BOTTOM, 1), RankRef(BOTTOM, 2),
            RankRef(TOP, 2), RankRef(TOP, 1), RankRef(TOP, 0))


def winsorized_sum(total: float, smallest: list[float], largest: list[float], n: int) -> float:
    """Σx with the smallest value replaced by the 2nd smallest and the largest by the 2nd
    largest (seed 002 §3.2.2); unchanged for n ≤ 2."""
    if n <= 2:
        return total
    return total - smallest[0] - largest[-1] + smallest[1] + largest[-2]


@finite_only
def local_sensitivity_of_winsorized_sum(
    n: int, total: float, values: Values, lower: float, upper: float
) -> tuple[float, float]:
    """Row-level (s = 1) local sensitivity of the winsorized sum over a WHERE scope.

    Seed 002 Prop. 3 bounds a change *inside* a fixed cluster; with a WHERE clause a
    record may also enter or leave the scope. The winsorized sum after one change
    depends only on Σx and the three smallest and largest values, and is piecewise
    linear in the new value v with breaks at data values, so the exact maximum over
    all neighbours is attained on a finite candidate set: remove one of the six extreme
    ranks (an interior value changes the sum linearly, so its extremes are ranks 3 and
    n − 2) and/or add v at a domain bound or a data value. This evaluates all of them.
    """
    known = _known_values(n, values)
    answer = winsorized_sum(total, known[:2], known[-2:], n)
    removals: list[float | None] = [None, *dict.fromkeys(known)]
    additions: list[float | None] = [None, lower, upper, *dict.fromkeys(known)]
    worst = 0.0
    for removed in removals:
        for added in additions:
            if removed is None and added is None:
                continue
            changed = list(known)
            if removed is not None:
                changed.remove(removed)
            if added is not None:
                changed.append(added)
            changed.sort()
            size = n - (removed is not None) + (added is not None)
            new_total = total - (removed or 0.0) + (added or 0.0)
            other = winsorized_sum(new_total, changed[:2], changed[-2:], size) if size else 0.0
            worst = max(worst, abs(other - answer))
    return answer, worst


def _known_values(n: int, values: Values) -> list[float]:
    """The values at ranks {1, 2, 3, n−2, n−1, n}, each distinct rank once, sorted."""
    by_rank: dict[int, float] = {}
    for ref in SUM_REFS:
        rank = ref.rank(n)
        value = values.get(ref)
        if 1 <= rank <= n and value is not None:
            by_rank[rank] = value
    return [by_rank[rank] for rank in sorted(by_rank)]


@finite_only
def clamped_sum_sensitivity(shift: int, lower: float, upper: float) -> float:
    """Sum of values clamped to [L, U] when s records may change, enter or leave:
    each moves the sum by at most max(U − L, |L|, |U|). Used for DP (global) and for
    iDP with s > 1, where no data-only bound is derived yet."""
    return shift * max(upper - lower, abs(lower), abs(upper))


@finite_only
def count_sensitivity(shift: int) -> int:
    """With a WHERE range or COUNT(col) a modified record may enter or leave: s (SPEC
    §5.2). COUNT(*) of the whole table is unchanged by modifying records: it is public
    (QueryPlan.public) and never comes here."""
    return shift


def groups_touched(shift: int, group_count: int) -> int:
    """How many GROUP BY cells one unit's change can touch: each of its s records may
    leave one group and join another (SPEC §5.1), and there are only so many groups."""
    return min(2 * shift, group_count)


def group_share(plan, shift: int, counting: bool = False) -> int:
    """What each group's part of an aggregate's loss is divided by (§3.5): 1 without
    GROUP BY, or when the groups are the unit's own attributes (one unit's change stays
    in its one group: ``QueryPlan.groups_fixed``); a COUNT's histogram moves by at most
    2s over all its cells of scale s, so min(2, G); any other aggregate the groups one
    unit's s records can touch."""
    if not plan.group_by or plan.groups_fixed:
        return 1
    if counting:
        return min(2, plan.group_count)
    return groups_touched(shift, plan.group_count)


def round_up_to_power_of_two(value: float) -> float:
    """The coarse grid of SPEC §3.3: hides the exact local sensitivity, only adds noise.
    A NaN or infinite value is refused (frexp would make it 1.0)."""
    require_finite((value,), "round_up_to_power_of_two input")
    if value <= 0:
        return 0.0
    mantissa, exponent = math.frexp(value)  # value = mantissa · 2**exponent, ½ ≤ mantissa < 1
    return value if mantissa == 0.5 else math.ldexp(1.0, exponent)


def _or(value: float | None, fallback: float | None) -> float:
    return fallback if value is None else value
