"""The vocabulary shared by pushdown (which computes statistics) and privacy (which
consumes them): what to compute for one column, and what came back for one group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

PCT, BOTTOM, TOP = "pct", "bottom", "top"


def percentile_rank(n: int, fraction: Fraction) -> int:
    """r = max(1, ⌈p·n⌉), the rank PERCENTILE_DISC(p) answers (MEDIAN: ⌈n/2⌉)."""
    return max(1, -((-fraction.numerator * n) // fraction.denominator))


# fetch(first, last): the values at ranks first..last of one column in scope
Fetch = Callable[[int, int], list[float]]


@dataclass(frozen=True)
class RankRef:
    """Rank ``anchor + offset`` among the sorted non-null values in scope.

    Anchors: PCT (the percentile rank r of ``fraction``), BOTTOM (rank 1) and TOP
    (rank n, the offset counting down: TOP+2 is rank n − 2).
    """

    anchor: str
    offset: int = 0
    fraction: Fraction | None = None

    def rank(self, n: int) -> int:
        if self.anchor == PCT:
            return percentile_rank(n, self.fraction) + self.offset
        if self.anchor == BOTTOM:
            return 1 + self.offset
        return n - self.offset


@dataclass(frozen=True)
class ColumnNeeds:
    """Statistics of one column: order statistics at ``ranks``, its sum (``total``) and
    its non-null count (``count``; always computed with a sum or a percentile).

    Values are clamped to [lower, upper] (the declared domain, where declared): inside
    the sum, and after the fact for order statistics, since clamping preserves order."""

    column: str
    ranks: frozenset[RankRef] = frozenset()
    total: bool = False
    count: bool = False
    lower: float | None = None
    upper: float | None = None

    def clamp(self, value: float | None) -> float | None:
        if value is None:
            return None
        value = float(value)
        if self.lower is not None and value < self.lower:
            return self.lower
        if self.upper is not None and value > self.upper:
            return self.upper
        return value


@dataclass
class ColumnStats:
    """What the backend returned for one column in one group: n non-null values in
    scope, their (clamped) sum and the values at the requested ranks (None: no such
    rank, a "missing neighbour")."""

    n: int = 0
    total: float = 0.0
    values: dict[RankRef, float | None] = field(default_factory=dict)


@dataclass
class GroupStats:
    """All statistics of one group (or of the whole scope without GROUP BY)."""

    rows: int = 0
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    smooth: dict[int, float] = field(default_factory=dict)  # aggregate index -> β-smooth S

    def column(self, name: str) -> ColumnStats:
        """A column's statistics; an empty group (absent from the backend's answer)
        has none, which is the statistics of no values."""
        return self.columns.get(name) or ColumnStats()
