"""Reference implementations for the brute-force tests: the released statistics and
their order statistics computed directly from Python lists (what the backend computes
in SQL), and the window of ranks the backend serves.

Raw values may be anything a float column holds (tests/privacy/harness.py's
``EXTREME``: NaN, ±inf and overflow-sized numbers); the statistics are of the normalised
values (``proxy.statistics.normalise``), as the backend computes them."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from fractions import Fraction

from proxy.engine import answered
from proxy.privacy.requests import CountRequest, RankRequest
from proxy.pushdown.contributions import SHARE_SCALE
from proxy.statistics import RankRef, percentile_rank
from proxy.statistics import clamp_to_domain as _normalise
from tests.privacy.harness import LOWER, UPPER, Record

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

    def drawing(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        found = {}
        for _ in range(trials):
            draws.append((yield from remembered(
                real(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled), found)))
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


# -- contributions clipped across groups (L1; docs/privacy.md §3.14 "Across groups") ----

def _joint_parts(records: list[Record], lower: float, upper: float
                 ) -> tuple[dict[tuple[int, object], float], dict[object, float]]:
    """Each unit's contribution per group (its normalised values in scope summed) and
    its total |contribution| T over the groups."""
    sums: dict[tuple[int, object], float] = {}
    for record in records:
        value = normalise(record.value, lower, upper)
        if record.in_scope and value is not None:
            sums[record.group, record.unit] = sums.get((record.group, record.unit), 0.0) + value
    totals: dict[object, float] = {}
    for (_, unit), value in sums.items():
        totals[unit] = totals.get(unit, 0.0) + abs(value)
    return sums, totals


def joint_ladder_of(records: list[Record], lower: float, upper: float,
                    ladder: tuple[float, ...], groups: int) -> dict:
    """(k, "beyond") -> the units whose total |contribution| T over the groups exceeds
    B_k; (k, "clipped") -> each group's sum of contributions scaled by min(1, B_k/T):
    SUM's contributions clipped across groups, in real arithmetic."""
    sums, totals = _joint_parts(records, lower, upper)
    parts: list[list[tuple[float, float]]] = [[] for _ in range(groups)]
    for (group, unit), value in sums.items():
        parts[group].append((totals[unit], value))
    # each group's pairs by total: a rung keeps the values of totals ≤ B_k whole (a prefix
    # sum) and scales the rest by B_k / T (B_k times a suffix sum of value / T)
    scans = []
    for part in parts:
        part.sort()
        whole, scaled = [0.0], [0.0]
        for total, value in part:
            whole.append(whole[-1] + value)
        for total, value in reversed(part):
            scaled.append(scaled[-1] + (value / total if total else 0.0))
        scans.append(([total for total, _ in part], whole, scaled[::-1]))
    ordered = sorted(totals.values())
    numbers = []
    for bound in ladder:
        numbers.append(len(ordered) - bisect.bisect_right(ordered, bound))
        clipped = []
        for keys, whole, scaled in scans:
            at = bisect.bisect_right(keys, bound)
            clipped.append(whole[at] + bound * scaled[at])
        numbers.append(tuple(clipped))
    return dict(zip(_joint_keys(len(ladder)), numbers))


def released_joint_ladder_of(records: list[Record], lower: float, upper: float,
                             ladder: tuple[float, ...], groups: int) -> dict:
    """``joint_ladder_of`` as the bucketed statement releases it
    (proxy/pushdown/contributions.py): a unit of T ≤ B_k adds its contribution rounded
    to 10⁻⁶ (half up, exact_sum's integers), one above adds B_k·trunc(t/T·SHARE_SCALE)
    /SHARE_SCALE, its share rounded toward 0 once for every rung; each group's sum
    exact, then one double."""
    sums, totals = _joint_parts(records, lower, upper)
    units = sorted(totals, key=totals.get)  # by total: a rung clips a suffix of them
    order = [totals[unit] for unit in units]
    at = {unit: i for i, unit in enumerate(units)}
    whole = [[0] * (len(units) + 1) for _ in range(groups)]  # prefix sums by total
    share = [[0] * (len(units) + 1) for _ in range(groups)]  # suffix sums by total
    for (group, unit), value in sums.items():
        whole[group][at[unit] + 1] += math.floor(value * 10**6 + 0.5)
        if totals[unit]:
            share[group][at[unit]] += math.trunc(value / totals[unit] * SHARE_SCALE)
    for group in range(groups):
        whole[group] = list(itertools.accumulate(whole[group]))
        share[group] = list(itertools.accumulate(share[group][::-1]))[::-1]
    numbers = []
    for bound in ladder:
        cut = bisect.bisect_right(order, bound)  # units[cut:] lie beyond B_k
        numbers.append(len(units) - cut)
        # w/10⁶ + B·r/SHARE_SCALE exactly (B = n/d), then one double: int division rounds
        n, d = bound.as_integer_ratio()
        numbers.append(tuple((whole[g][cut] * d * SHARE_SCALE + n * share[g][cut] * 10**6)
                             / (10**6 * d * SHARE_SCALE) for g in range(groups)))
    return dict(zip(_joint_keys(len(ladder)), numbers))


@functools.cache
def _joint_keys(rungs: int) -> tuple:
    """joint_ladder_of's keys in its order: by rung, "beyond" then "clipped"."""
    return tuple((k, part) for k in range(rungs) for part in ("beyond", "clipped"))
