"""The vocabulary shared by pushdown (which computes statistics) and privacy (which
consumes them): what to compute for one column, and what came back for one group."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

PCT, BOTTOM, TOP = "pct", "bottom", "top"
# A unit's whole weight under weighted ranks (docs/privacy.md §5.3): its rows in scope
# weigh ⌊WEIGHT_UNIT/n_u⌋ each (pushdown/weighted.py, privacy/inverse_sensitivity.py)
WEIGHT_UNIT = 1 << 20

# The largest magnitude any statistic sees (public): a value beyond it counts as ±1e15,
# and a declared bound must lie within it (proxy.rules). With every value in
# [−1e15, 1e15], differences (U − L ≤ 2e15) and sums stay finite, and the backend's
# exact integer sum (proxy.pushdown.scope.exact_sum) cannot overflow below 10^17 rows.
MAGNITUDE_CAP = 1e15


def value_range(lower: float | None, upper: float | None) -> tuple[float, float]:
    """The interval values are normalised into: the declared bounds, ±MAGNITUDE_CAP
    where a side is not declared."""
    return (-MAGNITUDE_CAP if lower is None else lower,
            MAGNITUDE_CAP if upper is None else upper)


def clamp_to_domain(value, lower: float | None, upper: float | None) -> float | None:
    """One value as every statistic sees it (SPEC §5.3): NaN is NULL (it is not counted
    and takes no rank); anything else, ±inf included, is clamped to ``value_range``.

    The backend applies this rule to every column before any statistic
    (``proxy.pushdown.values.clamped_to_domain``, its SQL form); this is the same rule in
    Python, for values read back (idempotent there) and for the tests' reference."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return None
    low, high = value_range(lower, upper)
    return min(max(value, low), high)


def sum_shrink(bound: float) -> float:
    """The power of two values within ±``bound`` are divided by before the backend's exact sum (``proxy.pushdown.scope.exact_sum``) (and
    the sum multiplied by after): 1 up to MAGNITUDE_CAP, else the least that brings the
    bound within it. A squared or multiplied value reaches (2·10¹⁵)² (times a unit's
    rows), whose whole part no BIGINT holds (the sum failed in the backend: STDDEV of a
    domain 10¹² wide, under DP); divided by a power of two the values are exact, and the
    sum's rounding (10⁻⁶ of the shrunk values) stays 10⁻²¹ of the bound."""
    if bound <= MAGNITUDE_CAP:
        return 1.0
    return 2.0 ** math.ceil(math.log2(bound / MAGNITUDE_CAP))


def bound_problem(value: float) -> str | None:
    """Why ``value`` cannot be a declared domain bound (None when it can): it must be
    finite and within ±MAGNITUDE_CAP, so that U − L and every sum stay finite."""
    if not math.isfinite(value) or abs(value) > MAGNITUDE_CAP:
        return f"must be a finite number within ±{MAGNITUDE_CAP:.0e}, got {value!r}"
    return None


def percentile_rank(n: int, fraction: Fraction) -> int:
    """r = max(1, ⌈p·n⌉), the rank PERCENTILE_DISC(p) answers (MEDIAN: ⌈n/2⌉)."""
    return max(1, -((-fraction.numerator * n) // fraction.denominator))


# fetch(first, last): the values at ranks first..last of one column in scope
Fetch = Callable[[int, int], list[float]]


@dataclass(frozen=True)
class RankRef:
    """Rank ``anchor + offset`` among the sorted non-null values in scope.

    Anchors: PCT (the percentile rank r of ``fraction``), BOTTOM (rank 1) and TOP
    (rank n, the offset counting down: TOP+2 is rank n − 2). A BOTTOM or TOP with a
    ``fraction`` f keeps its offset within ⌊f·n⌋: a drawn MAX or MIN's target, which in a
    small scope stays among its largest (smallest) values instead of crossing to the
    other end.
    """

    anchor: str
    offset: int = 0
    fraction: Fraction | None = None

    def __hash__(self) -> int:  # kept: a grouped statement fills millions of dict slots,
        try:                    # and hashing the Fraction each time took seconds
            return self.__dict__["_hash"]
        except KeyError:
            value = hash((self.anchor, self.offset, self.fraction))
            self.__dict__["_hash"] = value
            return value

    def rank(self, n: int) -> int:
        if self.anchor == PCT:
            return percentile_rank(n, self.fraction) + self.offset
        aside = self.offset if self.fraction is None else min(
            self.offset, self.fraction.numerator * n // self.fraction.denominator)
        return 1 + aside if self.anchor == BOTTOM else n - aside


@dataclass(frozen=True)
class ColumnNeeds:
    """Statistics of one column: order statistics at ``ranks``, its sum (``total``) and
    its non-null count (``count``; always computed with a sum or a percentile).

    Every statistic is of the normalised values (``normalise`` with the declared
    ``lower`` and ``upper``): NaN is NULL, everything else clamped to the domain or to
    ±MAGNITUDE_CAP. The backend normalises before it counts, sums or sorts."""

    column: str
    ranks: frozenset[RankRef] = frozenset()
    total: bool = False
    count: bool = False
    lower: float | None = None
    upper: float | None = None
    spread: bool = False  # m2, the sum of squared deviations from the mean (VAR_POP · n)
    distinct: bool = False  # how many distinct (normalised) values: COUNT(DISTINCT col)

    def clamp_to_domain(self, value) -> float | None:
        """A value read back from the backend, as a float (already normalised there;
        normalising again changes nothing)."""
        return clamp_to_domain(value, self.lower, self.upper)


@dataclass(frozen=True)
class UnitExtremes:
    """A scope of one value per unit, per group and unit under GROUP BY: the least (or,
    ``largest``, the largest) normalised value of ``column`` among the unit's rows in
    scope (of that group), NULL where it has none: what a user-level MAX or MIN is drawn
    over (privacy/inverse_sensitivity.draw_scope; the SQL: pushdown/scope.unit_extremes,
    docs/privacy.md §5.3). Under GROUP BY at most ``cap`` of each unit's groups are kept
    (the DP clip c: one unit then touches at most c groups, as over its c rows), those
    of its most extreme values; None keeps all (iDP, whose s counts the unit's rows)."""

    column: str
    largest: bool
    cap: int | None = None


@dataclass
class ColumnStats:
    """What the backend returned for one column in one group: n non-null values in
    scope, their (normalised) sum and the values at the requested ranks (None: no such
    rank, a "missing neighbour")."""

    n: int = 0
    total: float = 0.0
    values: dict[RankRef, float | None] = field(default_factory=dict)
    m2: float = 0.0  # Σ(x − mean)², when ``spread`` was asked
    distinct: int = 0  # how many distinct values, when ``distinct`` was asked


@dataclass(frozen=True)
class Contribution:
    """What one unit contributes to a sum, per group: Σ (x − origin)^power over its
    normalised values x of ``column`` in scope (SUM: origin 0, power 1; the moments of
    STDDEV and VARIANCE: origin L, powers 1 and 2). ``centres``: per group key its own
    origin and scale, ((x − origin)·scale)^power (a released mean and 1/√B₂,
    proxy.privacy.noisy_answers.spread_centres); other groups' terms are 0. ``units``
    (power 0, no column: COUNT(DISTINCT unit)): 1 for a unit with rows in the group's
    scope, whatever their number, 0 for the NULL unit. ``fine``: a count on the fine
    ladder (proxy.privacy.contribution_bounds.rungs: counts in a time window, an AVG's
    there too)."""

    column: str
    origin: float = 0.0
    power: int = 1
    centres: tuple[tuple[tuple, float, float], ...] = ()
    units: bool = False
    fine: bool = False


@dataclass(frozen=True)
class Ladder:
    """Per-unit contributions of one column in one group, measured against a public
    ladder of bounds B₀ < B₁ < …: how many units' contributions (the sum of their
    normalised values in scope) lie beyond ±B_k, and the sum of the contributions
    clipped to [−B_k, B_k] (proxy.privacy.contribution_bounds)."""

    rungs: tuple[float, ...]
    beyond: tuple[int, ...]
    clipped: tuple[float, ...]


@dataclass(frozen=True)
class PairSums:
    """What the backend returned for one paired aggregate (CORR(y, x) and its kin) in one
    group, at the bounds ``bx``, ``by`` drawn for the query: over the rows where neither
    value is NULL, their count ``n`` and the exact sums of x̃, x̃², ỹ, ỹ² and x̃·ỹ, where
    x̃ = min(x − Lx, bx) and ỹ = min(y − Ly, by) (proxy.privacy.correlation)."""

    bx: float
    by: float
    n: int = 0
    sx: Fraction = Fraction(0)
    sxx: Fraction = Fraction(0)
    sy: Fraction = Fraction(0)
    syy: Fraction = Fraction(0)
    sxy: Fraction = Fraction(0)


@dataclass
class GroupStats:
    """All statistics of one group (or of the whole scope without GROUP BY)."""

    rows: int = 0
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    units: int = 0  # distinct privacy units in scope, when the plan counts them
    smooth: dict[int, float] = field(default_factory=dict)  # aggregate index -> β-smooth S
    instance: dict[int, float] = field(default_factory=dict)  # index -> its released draw
    bounds: dict[int, float] = field(default_factory=dict)  # index -> private level of LS
    ladders: dict[Contribution, Ladder] = field(default_factory=dict)
    joint: dict[int, int] = field(default_factory=dict)  # index -> rung drawn for all groups
    pairs: dict[int, PairSums] = field(default_factory=dict)  # index -> CORR's sums
    # index -> a spread's first releases and its ladder of centred per-unit sums
    # (proxy.privacy.variance.UnitCentre, several rows per unit)
    centres: dict[int, Any] = field(default_factory=dict)
    centred: dict[int, Ladder] = field(default_factory=dict)

    @staticmethod
    def of(groups: dict[tuple, GroupStats], key: tuple) -> GroupStats:
        """``groups[key]``, an empty group's statistics put there first where it has none
        (``setdefault`` without building a new, unused one for every key present:
        nine dicts, TPC-H Q15's 10,000 groups)."""
        group = groups.get(key)
        if group is None:
            group = groups[key] = GroupStats()
        return group

    def column(self, name: str) -> ColumnStats:
        """A column's statistics; an empty group (absent from the backend's answer)
        has none, which is the statistics of no values."""
        return self.columns.get(name) or ColumnStats()
