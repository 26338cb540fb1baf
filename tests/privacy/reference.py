"""Reference implementations for the brute-force tests: the released statistics and
their order statistics computed directly from Python lists (what the backend computes
in SQL), and the window of ranks the backend serves.

Raw values may be anything a float column holds (tests/privacy/harness.py's
``EXTREME``: NaN, ±inf and overflow-sized numbers); the statistics are of the normalised
values (``proxy.statistics.normalise``), as the backend computes them."""

from __future__ import annotations

import functools
from fractions import Fraction

from proxy.engine import answered
from proxy.privacy.requests import CountRequest, RankRequest
from proxy.statistics import RankRef, percentile_rank
from proxy.statistics import clamp_to_domain as _normalise
from tests.privacy.harness import LOWER, UPPER

# The same rule, remembered: the enumerations normalise the same few raw values millions
# of times (it is pure; a NaN is found again only as the same object, else recomputed).
# (lower, upper) -> raw value -> normalised; scope_values reads it inline (its hot loop).
_normalised: dict = {}


def normalise(value, lower: float | None, upper: float | None) -> float | None:
    known = _normalised.setdefault((lower, upper), {})
    if value not in known:
        known[value] = _normalise(value, lower, upper)
    return known[value]


def order_values(sorted_values: list[float], refs) -> dict[RankRef, float | None]:
    """What the pushdown query returns: the value at each rank, None outside 1..n."""
    n = len(sorted_values)
    out = {}
    for ref in refs:
        rank = ref.rank(n)
        out[ref] = sorted_values[rank - 1] if 1 <= rank <= n else None
    return out


def answer(sorted_values: list[float], request: RankRequest | CountRequest):
    """What the engine answers a mechanism's request with (privacy/requests.py), from
    the sorted values in scope: the values at a run of ranks (from the largest when
    ``from_top``), or the counts and nearest values around a point."""
    if isinstance(request, CountRequest):
        y = request.point
        return (sum(v < y for v in sorted_values), sum(v <= y for v in sorted_values),
                max((v for v in sorted_values if v < y), default=None),
                min((v for v in sorted_values if v > y), default=None))
    ordered = sorted_values[::-1] if request.from_top else sorted_values
    return ordered[request.first - 1: request.last]


def by_hand(asking, sorted_values: list[float]):
    """The result of a mechanism that asks for data as it goes, its requests answered
    here from the sorted values in scope (no backend): ``answer`` through the engine's
    loop."""
    return answered(asking, lambda request: answer(sorted_values, request))


def remembered(asking, found: dict):
    """``asking``, its requests passed on (yielded) once and answered again from
    ``found`` when repeated: many draws from the reads of one."""
    reply = None
    try:
        while True:
            request = asking.send(reply)
            if request not in found:
                found[request] = yield request
            reply = found[request]
    except StopIteration as done:
        return done.value


def instance_draws(engine, plan, trials: int) -> list[float]:
    """``trials`` draws of the plan's one percentile, MAX or MIN by the exponential
    mechanism ('instance' and 'piecewise'), made inside one computation of its
    statistics: the windows of ranks the first draw reads are answered again to the
    others (``remembered``), each draw with fresh randomness."""
    from proxy.privacy import inverse_sensitivity

    real, draws = inverse_sensitivity.instance_release, []

    def drawing(n, rank, shift, epsilon, grid, rng, piecewise, column, key):
        found = {}
        for _ in range(trials):
            draws.append((yield from remembered(
                real(n, rank, shift, epsilon, grid, rng, piecewise, column, key), found)))
        return draws[0]

    inverse_sensitivity.instance_release = drawing
    try:
        engine.statistics(plan)
    finally:
        inverse_sensitivity.instance_release = real
    return [float(value) for value in draws]


def scope_values(records, group: int | None = None, lower: float | None = None,
                 upper: float | None = None) -> list[float]:
    """The sorted normalised values in scope (NaN dropped, the rest clamped to the
    declared [lower, upper] or ±MAGNITUDE_CAP)."""
    # one dictionary look-up a record (the enumerations call this millions of times),
    # in ``normalise``'s memory
    known = _normalised.setdefault((lower, upper), {})
    values = []
    for r in records:
        if r.in_scope and (group is None or r.group == group):
            raw = r.value
            v = known[raw] if raw in known else normalise(raw, lower, upper)
            if v is not None:
                values.append(v)
    values.sort()
    return values


# The values in scope as the backend sees them with both bounds declared.
in_domain = functools.partial(scope_values, lower=LOWER, upper=UPPER)


def percentile(values: list[float], fraction: Fraction, lower: float, upper: float) -> float:
    if not values:
        return (lower + upper) / 2
    return values[_rank(len(values), fraction) - 1]


# The rank of a few sizes and fractions, asked millions of times (Fraction's arithmetic
# is slow)
_rank = functools.lru_cache(maxsize=None)(percentile_rank)


def contribution_bound(records) -> int:
    counts: dict[int, int] = {}
    for r in records:
        counts[r.unit] = counts.get(r.unit, 0) + 1
    return max(counts.values(), default=1)


def unit_extremes(records, largest: bool, cap: int | None, groups: int = 1,
                  lower: float = LOWER, upper: float = UPPER) -> list[list[float]]:
    """Each group's sorted values of a user-level MAX (``largest``) or MIN drawn over
    one value per unit (docs/privacy.md §5.3): per unit and group its most extreme
    normalised value in scope (None where all are NaN or NULL), then at most ``cap`` of
    a unit's groups (None: all), its most extreme values first, ties by group."""
    extremes: dict = {}
    for r in records:
        if r.in_scope:
            v = normalise(r.value, lower, upper)
            slot = (r.unit, r.group)
            old = extremes.get(slot)
            if slot not in extremes or (v is not None and (
                    old is None or (v > old if largest else v < old))):
                extremes[slot] = v
    by_unit: dict = {}
    for (unit, group), v in extremes.items():
        by_unit.setdefault(unit, []).append((v is None, -v if largest and v is not None
                                             else v or 0.0, group, v))
    found: list[list[float]] = [[] for _ in range(groups)]
    for kept in by_unit.values():
        for _, _, group, v in sorted(kept)[:cap]:
            if v is not None:
                found[group].append(v)
    return [sorted(values) for values in found]
