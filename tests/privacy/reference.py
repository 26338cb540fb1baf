"""Reference implementations for the brute-force tests: the released statistics and
their order statistics computed directly from Python lists (what the backend computes
in SQL), and the window of ranks the backend serves.

Raw values may be anything a float column holds (tests/privacy/harness.py's
``EXTREME``: NaN, ±inf and overflow-sized numbers); the statistics are of the normalised
values (``proxy.statistics.normalise``), as the backend computes them."""

from __future__ import annotations

import functools
from fractions import Fraction

from proxy.statistics import RankRef
from proxy.statistics import normalise as _normalise
from tests.privacy.harness import LOWER, UPPER

# The same rule, remembered: the enumerations normalise the same few raw values millions
# of times (it is pure; a NaN is found again only as the same object, else recomputed).
normalise = functools.lru_cache(maxsize=None)(_normalise)


def order_values(sorted_values: list[float], refs) -> dict[RankRef, float | None]:
    """What the pushdown query returns: the value at each rank, None outside 1..n."""
    n = len(sorted_values)
    out = {}
    for ref in refs:
        rank = ref.rank(n)
        out[ref] = sorted_values[rank - 1] if 1 <= rank <= n else None
    return out


def scope_values(records, group: int | None = None, lower: float | None = None,
                 upper: float | None = None) -> list[float]:
    """The sorted normalised values in scope (NaN dropped, the rest clamped to the
    declared [lower, upper] or ±MAGNITUDE_CAP)."""
    values = (normalise(r.value, lower, upper) for r in records
              if r.in_scope and (group is None or r.group == group))
    return sorted(v for v in values if v is not None)


# The values in scope as the backend sees them with both bounds declared.
in_domain = functools.partial(scope_values, lower=LOWER, upper=UPPER)


def percentile(values: list[float], fraction: Fraction, lower: float, upper: float) -> float:
    from proxy.statistics import percentile_rank
    if not values:
        return (lower + upper) / 2
    return values[percentile_rank(len(values), fraction) - 1]


def contribution_bound(records) -> int:
    counts: dict[int, int] = {}
    for r in records:
        counts[r.unit] = counts.get(r.unit, 0) + 1
    return max(counts.values(), default=1)


def window(values: list[float]):
    """The ``fetch(first, last)`` the backend serves: the sorted values at those ranks."""
    return lambda first, last: values[first - 1: last]


def window_from_top(values: list[float]):
    """``fetch`` of the ranks counted from the largest value down."""
    descending = values[::-1]
    return lambda first, last: descending[first - 1: last]
