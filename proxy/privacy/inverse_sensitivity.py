"""DP percentiles, MAX and MIN by the exponential mechanism over a data-independent grid
of candidates, with utility minus the inverse sensitivity (Asi and Duchi 2020; for
quantiles McSherry and Talwar 2007, Smith 2011): ``SET idp.sensitivity = 'instance'``.
docs/privacy.md §5.3 has the derivation and the proof.

Candidates are points k·Λ of the declared domain [L, U] (Λ a power of two ≤ the
resolution; 1 on an int column, whose answers are integers): every one near the
domain's point nearest 0, then geometrically spaced, 128 an octave (``candidate_grid``),
so that an empty stretch of a wide domain holds few of them. For a candidate y with
a(y) values in scope below it and b(y) at or below it, the number of values that must
change for y to be the value at rank r is
    d(y) = max(0, a(y) − r + 1, r − b(y)),
and y is released with probability ∝ exp(−ε·d(y) / (2s)), s the records one neighbour
step may change (1 for one record; c·g for user-level privacy, as every DP aggregate).
A grouped percentile of a table whose unit may own several rows is drawn over weighted
ranks instead (``weighted_release``): every row weighs ⌊2²⁰/n_u⌋, n_u its unit's values
in scope, so each unit counts once, and d(y) = max(0, A(y) − t, t − B(y)) over the
weights below and at or below y, t = p·N: exact rationals, λ = ε/(4·max(p, 1 − p)).
MAX and MIN are the ranks n and 1 (aimed K ranks inside: ``extreme_offset``; of a
number column on log-spaced candidates by the scaled distance, ``scaled_blocks``); on a
table whose unit may own several rows they are drawn over each unit's own MAX or MIN
(per group and unit), where s is g (``draw_scope``). Candidates between consecutive
values in scope share a(y), b(y), so they are sampled as blocks: a band of nearby distances by an envelope
weight, exactly (``exact_choice.choose``), a block of it by its count, a candidate
uniformly inside it, kept with an exact Bernoulli (``_draw``).

``SET idp.sensitivity = 'piecewise'`` (Durfee 2025's piecewise Laplace, as §5.3
reconstructs it) replaces d by its interpolation: with Q the piecewise-linear map
through (0, L), (i, x₍ᵢ₎), (n + 1, U), d(y) is the distance from r to {u : Q(u) = y}.
At a value it is the d above; strictly between x₍ᵦ₎ and x₍ᵦ₊₁₎ it is |r − b − t|, t the
position in that gap (an exact fraction), so inside each gap the law is a piece of a
Laplace density whose scale is the gap's width. Same λ, same blocks: a gap's block
enters with its integer floor and each candidate is kept with its own exact distance.

What is read (§5.3's pushdown): the values at ranks r − K .. r + K only. Candidates
outside them form at most two tail blocks whose distance is only bounded from below
(d ≥ K + 1, d > K in the piecewise form); a tail block enters the draw with that
bound's weight, and when it is drawn one uniform candidate of it is taken, its ranks
(and its gap's ends) counted in the backend (the draw is a generator that asks for
them, a ``CountRequest`` of privacy/requests.py, and the engine reads), and it is kept
with probability exp(−ε·(d − bound)/(2s)), else the draw starts again. That is a
rejection step from an envelope: the output's law is the mechanism's exactly, whatever
K. K starts where the tails weigh below 2^−20 when the data are dense around the
target (``first_reach``) and grows (×4) until the tails' share of the envelope is below
that, so the count is rarely needed — up to 2^17 ranks each side: at a tiny ε the tails
stay heavy, and the draw then resolves more tail candidates by counts (a scan each).
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_right
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

from proxy.interrupts import checkpoint
from proxy.privacy.exact_choice import choose
from proxy.privacy.mechanisms import grid_step
from proxy.privacy.requests import (
    Asking,
    CountRequest,
    RankRequest,
    WeightCountRequest,
    WeightRequest,
)
from proxy.privacy.sampler import RandomSource, bernoulli_exp
from proxy.privacy.sensitivity import SensitivityError, group_share, require_finite
from proxy.statistics import BOTTOM, PCT, TOP, WEIGHT_UNIT, GroupStats, RankRef, UnitExtremes
from proxy.vocabulary import MAX, MIN, PERCENTILE, PIECEWISE, QueryPlan

_FIRST_REACH = 16
_MOST_REACH = 1 << 17  # ranks each side at most: a window, never the column
_TAIL_SHARE = 2.0 ** -20  # the envelope's tails, at most this share of it
_EXACT_FLOATS = 1 << 53  # |k| below it: k·Λ is an exact float (Λ a power of two)
_NORMAL = 2.0 ** -1022  # the least normal double: a power-of-two scaling above it is exact
DIGITS = 8  # significant bits of a candidate's offset: neighbours ≤ 2^−7 of it apart
PERCENTILE_DIGITS = 12  # a percentile's: no offset K grows with ln |G| (§5.3)


@dataclass(frozen=True)
class Grid:
    """The candidates, indexed first..last in increasing order: the points
    (origin + j)·step whose offset j from the origin has at most ``digits`` significant
    bits (``candidate_grid``; every j when ``digits`` is None, a uniform grid). step is
    a power of two (or 1 on an int column), so every candidate is an exact float and
    compares exactly in SQL; lower and upper are the declared domain's ends (Q(0) and
    Q(n + 1) of the piecewise form). The index of a candidate is ``ordinal(j)``."""

    step: Fraction
    first: int
    last: int
    lower: float
    upper: float
    integers: bool = False
    origin: int = 0
    digits: int | None = None

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def log_spaced(self) -> bool:
        """Whether some candidate lies beyond the uniform part (2^digits·Λ from the
        origin), where the candidates are 0.78 % of their distance from it apart: a
        column whose answers are judged by their relative error (money, counts of a wide
        domain), not one of every integer of a narrow domain (ages, days)."""
        return self.digits is not None and max(
            abs(offset(self.first, self.digits)),
            abs(offset(self.last, self.digits))) >> self.digits > 0

    @property
    def origin_value(self) -> float | int:
        return self.origin if self.integers else float(self.origin * self.step)

    def value(self, k: int) -> float | int:
        multiple = self.origin + offset(k, self.digits)
        return multiple if self.integers else float(multiple * self.step)

    def middle(self, k: int) -> float | int:
        """The middle of candidate k's cell [value(k), value(k + 1)) (the last one's:
        [value(k), upper]), a whole number on an int column: what the step form answers
        for k, whose snapped values (``snapped``) are that cell's. Post-processing of k."""
        low = self.value(k)
        high = self.value(k + 1) if k < self.last else self.upper
        if self.integers:
            high = high - 1 if k < self.last else math.floor(high)
            return low + max(0, (high - low) // 2)
        return low + (high - low) / 2 if high > low else low

    def below(self, x: float) -> int:
        """How many candidates are < x (x/step exactly, in integers: a window holds up
        to 2^18 values)."""
        num, den = _over_step(x, self.step)
        j = -(-num // den) - self.origin  # the least offset ≥ x
        if self.digits is not None and abs(j) >> self.digits:
            j = ordinal(_allowed_at_least(j, self.digits), self.digits)
        return min(max(j - self.first, 0), self.count)

    def at_or_below(self, x: float) -> int:
        num, den = _over_step(x, self.step)
        j = num // den - self.origin  # the greatest offset ≤ x
        if self.digits is not None and abs(j) >> self.digits:
            j = ordinal(-_allowed_at_least(-j, self.digits), self.digits)
        return min(max(j - self.first + 1, 0), self.count)

    def places(self, xs: list[float]) -> tuple[list[int], list[int]]:
        """``below`` and ``at_or_below`` of each x, together: a window's thousands of
        values took 0.3 s one by one under a grouped percentile of 11 groups. In numpy
        where each x/step is an exact float of magnitude below 2^52 (step is a power of
        two: exact unless it leaves the normal floats), else one by one."""
        import numpy as np  # here: most answers never need it, and it costs every start

        x = np.asarray(xs, dtype=np.float64)
        q = x * float(1 / self.step)  # exact: the step is a power of two
        size = np.abs(q)
        exact = bool(np.all((size < 2.0 ** 52) & ((size >= _NORMAL) | (x == 0))))
        if exact:
            least = np.ceil(q).astype(np.int64) - self.origin  # the least offset ≥ x
            greatest = np.floor(q).astype(np.int64) - self.origin  # the greatest ≤ x
            exact = bool(np.all(np.maximum(np.abs(least), np.abs(greatest)) < 2 ** 52))
        if not exact:
            return [self.below(v) for v in xs], [self.at_or_below(v) for v in xs]
        if self.digits is not None:
            least = _ordinals(_allowed_at_least_all(least, self.digits), self.digits)
            greatest = _ordinals(-_allowed_at_least_all(-greatest, self.digits), self.digits)
        return (np.clip(least - self.first, 0, self.count).tolist(),
                np.clip(greatest - self.first + 1, 0, self.count).tolist())


def _bit_lengths(magnitudes):
    """int.bit_length of each (numpy int64 below 2^53: exact as doubles)."""
    import numpy as np

    return np.frexp(magnitudes.astype(np.float64))[1].astype(np.int64)


def _allowed_at_least_all(c, digits: int):
    """``_allowed_at_least`` of each of a numpy int64 array (|c| < 2^52)."""
    import numpy as np

    size = np.abs(c)
    shift = np.maximum(_bit_lengths(size) - digits, 0)  # 0 where |c| < 2^digits: c itself
    up = ((c + (np.int64(1) << shift) - 1) >> shift) << shift
    return np.where(c > 0, up, -((size >> shift) << shift))


def _ordinals(j, digits: int):
    """``ordinal`` of each of a numpy int64 array of allowed offsets (|j| ≤ 2^52)."""
    import numpy as np

    size, half = np.abs(j), 1 << (digits - 1)
    shift = _bit_lengths(size) - digits
    index = (1 << digits) + (shift - 1) * half + (size >> np.maximum(shift, 0)) - half
    index = np.where(size < 1 << digits, size, index)
    return np.where(j < 0, -index, index)


def ordinal(j: int, digits: int | None) -> int:
    """The index of the offset j among the offsets of at most ``digits`` significant
    bits (j itself for a uniform grid): all of 0 .. 2^m − 1, then 2^(m−1) per octave,
    [2^(m−1+e), 2^(m+e)) by steps of 2^e; odd in j. j must be such an offset."""
    if digits is None or abs(j) < 1 << digits:
        return j
    half = 1 << (digits - 1)
    shift = abs(j).bit_length() - digits
    index = (1 << digits) + (shift - 1) * half + (abs(j) >> shift) - half
    return index if j > 0 else -index


def offset(index: int, digits: int | None) -> int:
    """The offset whose ``ordinal`` is ``index``."""
    if digits is None or abs(index) < 1 << digits:
        return index
    half = 1 << (digits - 1)
    octave, place = divmod(abs(index) - (1 << digits), half)
    j = (place + half) << (octave + 1)
    return j if index > 0 else -j


def _allowed_at_least(c: int, digits: int | None) -> int:
    """The least offset ≥ the integer c with at most ``digits`` significant bits."""
    if digits is None or abs(c) < 1 << digits:
        return c
    shift = abs(c).bit_length() - digits
    if c > 0:  # up to the octave's next multiple of 2^shift (2^(m+shift) is one too)
        return -(-c >> shift) << shift
    return -((-c >> shift) << shift)  # |c| down to its octave's multiple: ≥ c


def _power_of_two_below(x: float) -> Fraction:
    """The largest power of two ≤ x (x > 0; the smallest positive float otherwise)."""
    if not x > 0 or not math.isfinite(x):
        return Fraction(math.ulp(0.0)) if not x > 0 else Fraction(2) ** 1023
    _, exponent = math.frexp(x)
    return Fraction(2) ** (exponent - 1)


def _over_step(x: float, step: Fraction) -> tuple[int, int]:
    """x / step as an integer ratio with a positive denominator."""
    num, den = float(x).as_integer_ratio()
    return num * step.denominator, den * step.numerator


def candidate_grid(lower: float, upper: float, resolution: float, integers: bool,
                   digits: int | None = DIGITS) -> Grid:
    """The candidates of a column's declared domain: the multiples k·Λ in [L, U] whose
    offset k − k₀ from the multiple k₀ nearest 0 (0 itself when L ≤ 0 ≤ U) has at most
    ``digits`` significant bits — every multiple within 2^digits·Λ of k₀Λ, then
    2^(digits−1) per octave of the distance, neighbours at most 2^(1−digits) of it
    apart (0.78 % for 8 digits): in an empty stretch of the domain the candidates are
    logarithmically many in its width, not linearly (docs/privacy.md §5.3). Λ = 1 on an
    int column, else the largest power of two ≤ both the column's resolution ρ and
    (U − L)/1024, but no finer than the noise grid's ρ/1024 (``grid_step``); doubled
    while some k·Λ would not be an exact float. A function of the rules alone."""
    finest = Fraction(grid_step(resolution))
    step = Fraction(1) if integers else max(finest, min(
        _power_of_two_below(resolution), _power_of_two_below((upper - lower) / 1024)))
    while True:
        low, high = math.ceil(Fraction(lower) / step), math.floor(Fraction(upper) / step)
        if max(abs(low), abs(high)) < _EXACT_FLOATS or integers:
            break
        step *= 2
    if low > high:
        raise SensitivityError(f"no candidate of step {float(step)} in [{lower}, {upper}]")
    origin = min(max(0, low), high)
    first = ordinal(_allowed_at_least(low - origin, digits), digits)
    last = ordinal(-_allowed_at_least(origin - high, digits), digits)
    return Grid(step, first, last, lower, upper, integers, origin, digits)


def ranked_grid(column, percentile: bool) -> Grid:
    """The candidates of a percentile (``PERCENTILE_DIGITS``) or a MAX or MIN
    (``DIGITS``) of a column of the rules. A percentile's target is a rank of the data,
    so a finer grid only narrows the cell its answer lies in (0.78 % → 0.049 %: on the
    demo's whole tables the median's error fell about tenfold); MAX's and MIN's offset
    K grows with ln |G| (docs/privacy.md §5.3)."""
    return candidate_grid(column.lower, column.upper, column.resolution,
                          column.type == "int", PERCENTILE_DIGITS if percentile else DIGITS)


@dataclass(frozen=True)
class Block:
    """Candidates first .. first + count − 1 at distance ``distance`` (``exact``), or a
    tail block whose candidates' distances are at least ``distance``. A gap's block of
    the piecewise form has ``gap`` = (b, x₍ᵦ₎, x₍ᵦ₊₁₎) and ``distance`` its floor."""

    first: int
    count: int
    distance: int | Fraction  # a rational under weighted ranks
    exact: bool = True
    gap: tuple[int, float, float] | None = None


def distance(below: int, at_or_below: int, rank: int) -> int:
    """d(y) = max(0, a − r + 1, r − b): the values to change for y to be at rank r."""
    return max(0, below - rank + 1, rank - at_or_below)


def fractional_distance(below: int, at_or_below: int, rank: int, under: float, over: float,
                        y: float) -> Fraction:
    """The piecewise form's d(y): at a value (a < b) the step form's; strictly inside
    the gap from x₍ᵦ₎ = under to x₍ᵦ₊₁₎ = over (L and U at the ends, where y may equal
    them) |r − b − t| with t = (y − under)/(over − under), exactly (floats are
    rationals)."""
    if below < at_or_below or under == over:
        return Fraction(distance(below, at_or_below, rank))
    base = Fraction(under)
    return abs(rank - below - (Fraction(y) - base) / (Fraction(over) - base))


def blocks(n: int, rank: int, grid: Grid, low: int, values: list[float],
           piecewise: bool = False) -> list[Block]:
    """The candidates in blocks of equal a(y), b(y), from the values at ranks
    low .. low + len(values) − 1 (sorted, normalised), which hold rank r. The candidates
    strictly inside the gap b (between x₍ᵦ₎ and x₍ᵦ₊₁₎, x₍₀₎ = L, x₍ₙ₊₁₎ = U) are at
    distance distance(b, b, r), in the piecewise form within [that − 1, that]. Below
    the lowest value read (when low > 1) b(y) ≤ low − 1 and above the highest (short of
    rank n) a(y) ≥ high: the two tail blocks, whose distance is at least that of the
    gap next to the window, low − 1 or high. Within the values read, a(y) and b(y) count
    the unread ranks as below or above: exact, except a(y) at the lowest value (unread
    ties) and b(y) at the highest, where both the counted and the true value leave their
    term of d at most 0 (low ≤ r ≤ high)."""
    found = []
    if not piecewise:
        values = snapped(grid, values)

    def add(start: int, count: int, gap: int, under: float | None = None,
            over: float | None = None) -> None:
        """The candidates start .. start + count − 1 inside gap ``gap``; ``under`` and
        ``over`` its ends, None for a tail (ends not read)."""
        if count <= 0:
            return
        floor = distance(gap, gap, rank) - int(piecewise)
        known = under is not None and over is not None
        found.append(Block(grid.first + start, count, floor, known,
                           (gap, under, over) if known and piecewise else None))

    if n == 0:
        add(0, grid.count, 0, grid.lower, grid.upper)
        return found
    high = low + len(values) - 1
    starts = [i for i in range(len(values)) if i == 0 or values[i] != values[i - 1]]
    belows, throughs = grid.places([values[i] for i in starts])  # of each distinct value
    belows.append(grid.count)  # the end of the last one's gap
    starts.append(len(values))
    below = belows[0]
    add(0, below, low - 1, grid.lower if low == 1 else None, values[0])
    for at, i in enumerate(starts[:-1]):
        j, through, end = starts[at + 1], throughs[at], belows[at + 1]
        if through > below:
            found.append(Block(grid.first + below, through - below,
                               distance(low - 1 + i, low - 1 + j, rank)))
        over = values[j] if j < len(values) else grid.upper if high == n else None
        add(through, end - through, low - 1 + j, values[i], over)
        below = end
    return found


def snapped(grid: Grid, values: list[float]) -> list[float]:
    """Each value as the greatest candidate at or below it (one below every candidate
    as it is: every candidate counts it alike). The step form draws over the values so
    snapped, a function of each record alone, so a neighbour moves the snapped data by
    one record as it moves the data, and the proof stands for them: the candidate whose
    cell [y, next y) holds the target is then at distance 0. Over the values as they
    are, where the values around the target lie denser than the candidates (0.78 % of
    the distance from the domain's end apart) no candidate was near the target in rank,
    and the whole empty stretch beyond the data, as near as the nearest candidate in
    it, took the draw (MIN of 120 moments within a day of a month's domain came back
    days early at any ε: the review of 2026-11-29)."""
    if not values:
        return values
    _, throughs = grid.places(values)
    return [value if through == 0 else grid.value(grid.first + through - 1)
            for value, through in zip(values, throughs)]


def instance_release(n: int, rank: int, shift: int, epsilon: Fraction, grid: Grid,
                     rng: RandomSource, piecewise: bool = False, column: str = "",
                     key: tuple = (), scaled: Scaled | None = None) -> Asking[float | int]:
    """One draw of the mechanism (its piecewise form if asked) for the value at ``rank``
    among n values of ``column`` in scope (in the group ``key``): it asks for windows of
    ranks (ascending) and, for a tail draw, the counts around a candidate. With
    ``scaled`` a MAX or MIN by the scaled distance (``scaled_blocks``), ``rank`` its
    target n + 1 − t (MAX) or t (MIN); its windows reach the end they count from, and
    its tails are the rank distance to that end's own rank."""
    scale = exponent(epsilon, shift)
    reach = first_reach(scale, grid)
    end = rank if scaled is None else n if scaled.largest else 1
    while True:
        checkpoint()
        low, high = max(1, rank - reach), min(n, rank + reach)
        if scaled is not None:
            low, high = (low, n) if scaled.largest else (1, high)
        values = (yield RankRequest(column, low, high, group=key)) if n else []
        require_finite(values, "instance window")
        found = blocks(n, end, grid, low, values, piecewise)
        if scaled is not None:
            found = scaled_blocks(found, n, rank, grid, low, values, scaled)
        if ((low == 1 and high == n) or reach >= _MOST_REACH
                or _tail_share(found, float(scale)) <= _TAIL_SHARE):
            break
        reach = min(reach * 4, _MOST_REACH)
    drawn = yield from _draw(found, scale, rng, lambda block, k: _rank_distance(
        block, k, end, grid, piecewise, column, key))
    return grid.value(drawn) if piecewise else grid.middle(drawn)


@dataclass(frozen=True)
class Scaled:
    """A MAX (``largest``) or MIN drawn by the scaled distance: the neighbourhood of a
    candidate y is the values between y and y scaled by ``factor`` away from the data
    (towards the origin for MAX, away from it for MIN)."""

    factor: int
    largest: bool


@functools.lru_cache(maxsize=64)
def _points(grid: Grid):
    """Every candidate's value, in order, as exact floats (a MAX's or MIN's grid holds
    thousands: computed once per grid, not once per draw and group)."""
    import numpy as np  # here: most answers never need it, and it costs every start

    return np.array([float(grid.value(k)) for k in range(grid.first, grid.last + 1)])


def scaled_distances(ys, values: list[float], before: int, after: int, t: int,
                     origin: float, scaled: Scaled):
    """d(y) of the candidates ``ys`` (an array): for MIN a(y) + max(1 − b(y), t − m(y),
    0), m(y) the values below φ(y) = o + c(y − o) (o + (y − o)/c below the origin o);
    for MAX the mirror, (values above y) + max(1 − (values at or above y), t − (values
    above ψ(y)), 0), ψ(y) = o + (y − o)/c (o + c(y − o) below o). φ ≥ y ≥ ψ, each
    nondecreasing and exact (c is a power of two). ``values`` are sorted and snapped,
    ``before`` and ``after`` the ranks in scope below and above them (docs/privacy.md
    §5.3, "MAX and MIN by the scaled distance")."""
    import numpy as np

    rest, c = ys - origin, scaled.factor
    edge = origin + np.where((rest >= 0) != scaled.largest, rest * c, rest / c)
    if scaled.largest:
        top = after + len(values)
        above = top - np.searchsorted(values, ys, "right")
        at = top - np.searchsorted(values, ys, "left")
        near = top - np.searchsorted(values, edge, "right")
        return above + np.maximum(np.maximum(1 - at, t - near), 0)
    below = before + np.searchsorted(values, ys, "left")
    through = before + np.searchsorted(values, ys, "right")
    near = before + np.searchsorted(values, edge, "left")
    return below + np.maximum(np.maximum(1 - through, t - near), 0)


def scaled_blocks(found: list[Block], n: int, rank: int, grid: Grid, low: int,
                  values: list[float], scaled: Scaled) -> list[Block]:
    """The blocks of the scaled distance: the candidates of ``found``'s exact blocks
    (the rank distance to rank 1 or n over the window from rank ``low``, which reaches
    that end) in runs of equal d(y) (``scaled_distances``), its tail blocks as they are
    (beyond the window every candidate has t values between it and the end it is drawn
    towards, so d is the rank distance there). t = rank (MIN) or n + 1 − rank (MAX)."""
    import numpy as np

    t = n + 1 - rank if scaled.largest else rank
    points, origin = _points(grid), float(grid.origin_value)
    throughs = np.asarray(grid.places(values)[1], dtype=np.int64)
    values = np.where(throughs > 0, points[np.maximum(throughs - 1, 0)],
                      np.asarray(values, dtype=np.float64))  # ``snapped``, in numpy
    before, after = low - 1, n - low + 1 - len(values)
    spans: list[list[int]] = []  # [first, end) of each run of consecutive exact blocks
    for block in found:
        if block.exact and spans and spans[-1][1] == block.first:
            spans[-1][1] += block.count
        elif block.exact:
            spans.append([block.first, block.first + block.count])
    runs = {}
    for first, end in spans:
        ds = scaled_distances(points[first - grid.first:end - grid.first], values, before,
                              after, t, origin, scaled)
        cuts = [0, *(np.flatnonzero(np.diff(ds)) + 1).tolist(), len(ds)]
        runs[first] = [Block(first + a, b - a, int(ds[a])) for a, b in zip(cuts, cuts[1:])]
    out: list[Block] = []
    for block in found:
        if not block.exact:
            out.append(block)
        elif block.first in runs:
            out.extend(runs[block.first])
    return out


def exponent(epsilon: Fraction, shift: int) -> Fraction:
    """λ = ε/(2Δu), Δu = s: the weight of a candidate at distance d is e^{−λd} (both
    forms: a neighbour moves every d, and so the normaliser, by at most s)."""
    return epsilon / (2 * shift)


def _draw(found: list[Block], scale: Fraction, rng: RandomSource,
          distance_of) -> Asking[int]:
    """The candidate's k, by rejection from an envelope that is exact where it can be.

    Blocks are pooled in bands of distances [d₀, d₀ + w), w = ⌊1/λ⌋ (at least 1); a band
    weighs (its candidates)·e^{−λd₀} ≥ its true weight, and is chosen exactly
    (``choose``, rational exponents); a block of it by its count, a candidate uniformly,
    and the candidate is kept with probability e^{−λ(d(y) − d₀)} ≥ e^{−1}
    (``distance_of(block, k)``, a generator: d(y) counted in the backend for a tail
    block, asked for between two uses of ``rng``; a gap's d(y) of the piecewise form is
    at most its floor + 1, so there d(y) − d₀ < w + 1 and the chance is at least
    e^{−1−λ}). Distances may be rationals (weighted ranks): the bands' floors are then
    rationals, every step still exact. A round keeps y with probability e^{−λd(y)} / (the
    envelope's total), so the kept y follows the mechanism's law; banding makes the exact
    choice run over a few dozen bands instead of every block of a wide window."""
    width = max(1, math.floor(1 / scale))
    nearest = min(block.distance for block in found)
    bands: dict[int, list[Block]] = {}
    for block in found:
        bands.setdefault(math.floor((block.distance - nearest) / width), []).append(block)
    order = sorted(bands)
    members = [bands[band] for band in order]
    floors = [nearest + band * width for band in order]
    totals = [sum(block.count for block in band) for band in members]
    weights = [(total, Fraction(scale * (floor - nearest)))
               for total, floor in zip(totals, floors)]
    while True:
        checkpoint()
        band = choose(weights, rng)
        k = rng.randbelow(totals[band])
        for block in members[band]:  # the block holding the k-th candidate of the band
            if k < block.count:
                break
            k -= block.count
        k += block.first
        gap = yield from distance_of(block, k)
        if gap < block.distance:  # the tail's bound is a theorem: a backend fault
            raise SensitivityError("a tail candidate's ranks contradict the window")
        if bernoulli_exp(Fraction(scale * (gap - floors[band])), rng):
            return k


def _rank_distance(block: Block, k: int, rank: int, grid: Grid, piecewise: bool,
                   column: str, key: tuple) -> Asking[int | Fraction]:
    """d of candidate k of ``block`` (``candidate_distance``), a tail's counts asked of
    the engine first."""
    around = None
    if not block.exact:  # a tail block: its candidate's counts, read by the engine
        around = yield CountRequest(column, grid.value(k), key)
        below, through, under, over = around
        if not piecewise and over is not None and k < grid.last \
                and over < grid.value(k + 1):  # values snapped to y from its cell
            through = (yield CountRequest(column, grid.value(k + 1), key))[0]
            around = (below, through, under, over)
    return candidate_distance(block, k, rank, grid, around, piecewise)


def candidate_distance(block: Block, k: int, rank: int, grid: Grid,
                       around: tuple[int, int, float | None, float | None] | None,
                       piecewise: bool) -> int | Fraction:
    """d of the candidate k of the block: the block's own, from its gap's ends, or (a
    tail) from ``around``, the answer to its ``CountRequest`` (values below y, at or
    below y, the largest below y, the smallest above y)."""
    y = grid.value(k)
    if block.gap is not None:
        below, under, over = block.gap
        return fractional_distance(below, below, rank, under, over, y)
    if block.exact:
        return block.distance
    below, through, under, over = around
    if not piecewise:
        return distance(below, through, rank)
    return fractional_distance(below, through, rank, grid.lower if under is None else under,
                               grid.upper if over is None else over, y)


def weighted_distance(below: int, through: int, target: Fraction) -> Fraction:
    """d(y) = max(0, A(y) − t, t − B(y)) in units (docs/privacy.md §5.3, "Weighted
    ranks"): A and B the weights (``WEIGHT_UNIT`` a unit) of the values below y and
    below the next candidate (at or below y once snapped), t = p·N."""
    return max(Fraction(0), below - target, target - through) / WEIGHT_UNIT


def weighted_blocks(total: int, fraction: Fraction, grid: Grid, below: int,
                    rows: list[tuple[float, int]]) -> list[Block]:
    """The candidates in blocks of equal A(y), B(y) from a window of weighted ranks: the
    group's total weight N, the weight below the window and its distinct values with
    their weights (``WeightRequest``'s answer), which must hold t = p·N. With τ(x) the
    candidates at or below x, a value counts in A(y_i) iff τ(x) ≤ i and in B(y_i) iff
    τ(x) ≤ i + 1 (snapped, ``snapped``). Values not read lie below the window (τ at most
    the first's) or above it (τ at least the last's), so candidates τ₁ − 1 .. τₘ − 1
    have their exact d — at τ₁ − 1 A is not known but at most the weight below, ≤ t, so
    its term is at most 0 either way, likewise B at τₘ − 1 — and those below (above) are
    a tail with d ≥ t − (the weight below) (≥ the weight through the window − t),
    exact where the window reaches that end."""
    target = fraction * total
    if not rows:
        if total:
            raise SensitivityError("a weighted window without values in a group that has some")
        return [Block(grid.first, grid.count, weighted_distance(0, 0, target))]
    top = below + sum(weight for _, weight in rows)
    if not below <= target <= top:  # the window holds the target: a backend fault else
        raise SensitivityError("a weighted window that misses its target")
    _, throughs = grid.places([value for value, _ in rows])
    taus: list[int] = []
    masses: list[int] = []
    for tau, (_, weight) in zip(throughs, rows):
        if taus and taus[-1] == tau:
            masses[-1] += weight
        else:
            taus.append(tau)
            masses.append(weight)
    running = list(accumulate(masses, initial=0))

    def through(i: int) -> int:  # the window's weight at τ ≤ i, and the weight below it
        return below + running[bisect_right(taus, i)]

    found = []
    low, end = max(0, taus[0] - 1), min(taus[-1], grid.count)
    if low:
        found.append(Block(grid.first, low, weighted_distance(0, 0, target) if below == 0
                           else max(Fraction(0), target - below) / WEIGHT_UNIT, below == 0))
    cuts = sorted({low, end} | {cut for tau in taus for cut in (tau - 1, tau) if low < cut < end})
    for start, stop in zip(cuts, cuts[1:]):
        found.append(Block(grid.first + start, stop - start,
                           weighted_distance(through(start), through(start + 1), target)))
    if end < grid.count:
        found.append(Block(grid.first + end, grid.count - end,
                           weighted_distance(total, total, target) if top == total
                           else max(Fraction(0), top - target) / WEIGHT_UNIT, top == total))
    return found


def weighted_release(fraction: Fraction, scale: Fraction, grid: Grid, rng: RandomSource,
                     column: str = "", key: tuple = ()) -> Asking[float | int]:
    """One draw of the step form over weighted ranks (docs/privacy.md §5.3, "Weighted
    ranks"): windows of running weight around t = p·N (``WeightRequest``) grown as
    ``instance_release`` grows its windows of ranks, tail candidates resolved by their
    weights (``WeightCountRequest``); the answer is the drawn candidate's cell's middle."""
    reach = first_reach(scale, grid)
    while True:
        checkpoint()
        total, below, rows = yield WeightRequest(column, fraction, reach, key)
        require_finite([value for value, _ in rows], "weighted window")
        found = weighted_blocks(total, fraction, grid, below, rows)
        whole = below == 0 and below + sum(weight for _, weight in rows) == total
        if whole or reach >= _MOST_REACH or _tail_share(found, float(scale)) <= _TAIL_SHARE:
            break
        reach = min(reach * 4, _MOST_REACH)
    target = fraction * total

    def distance_of(block: Block, k: int) -> Asking[int | Fraction]:
        if block.exact:
            return block.distance
        after = grid.value(k + 1) if k < grid.last else None
        below_y, below_after = yield WeightCountRequest(column, grid.value(k), after, key)
        return weighted_distance(below_y, below_after, target)

    drawn = yield from _draw(found, scale, rng, distance_of)
    return grid.middle(drawn)


def weighted_exponent(plan: QueryPlan, epsilon: Fraction, fraction: Fraction) -> Fraction:
    """λ of a draw over weighted ranks: a neighbour moves the groups' d by at most
    g·min(2·max(p, 1 − p), G) together (docs/privacy.md §5.3), so one ε covers every
    group at λ = ε/(2·that): ε/2 for a MEDIAN, ε/3.8 for a p95 (g = 1)."""
    spread = max(fraction, 1 - fraction)
    return epsilon / (2 * plan.table.group_size * min(2 * spread, plan.group_count))


def weighted_releases(plan: QueryPlan, rng: RandomSource, key: tuple = ()
                      ) -> Asking[dict[int, float | int]]:
    """The released value of every percentile of the plan drawn over weighted ranks
    (``draw_scope``) in the group ``key``, by aggregate index."""
    found = {}
    for index, agg in enumerate(plan.aggregates):
        if agg.kind.row.ranked and draw_scope(plan, agg) == WEIGHTED:
            grid = ranked_grid(plan.table.columns[agg.column], True)
            found[index] = yield from weighted_release(
                agg.fraction, weighted_exponent(plan, plan.aggregate_loss.epsilon, agg.fraction),
                grid, rng, agg.column, key)
    return found


def weighted_reaches(plan: QueryPlan) -> set[tuple[str, Fraction, int]]:
    """(column, p, K) of every first window the plan's weighted draws read: what the
    engine reads for all groups at once."""
    return {(agg.column, agg.fraction, first_reach(weighted_exponent(
        plan, plan.aggregate_loss.epsilon, agg.fraction), ranked_grid(
            plan.table.columns[agg.column], True)))
        for agg in plan.aggregates
        if agg.kind.row.ranked and draw_scope(plan, agg) == WEIGHTED}


def first_reach(scale: Fraction, grid: Grid) -> int:
    """K of the first read: where a candidate is within one rank of the target, tails
    beyond K weigh at most count·e^{−λK} against e^{−λ}, below 2^−20 of it for
    K ≥ (ln count + 20 ln 2)/λ + 1. From public numbers only (ε, s, the grid)."""
    return min(_MOST_REACH, max(_FIRST_REACH, math.ceil(
        (math.log(grid.count) + 20 * math.log(2)) / float(scale)) + 1))


def _tail_share(found: list[Block], scale: float) -> float:
    """The tail blocks' share of the envelope's weight (floating point: it only decides
    how far to read, never the output's law)."""
    logs = [(math.log(b.count) - scale * b.distance, b.exact) for b in found]
    top = max(value for value, _ in logs)
    total = sum(math.exp(value - top) for value, _ in logs)
    return sum(math.exp(value - top) for value, exact in logs if not exact) / total


def one_row_per_unit(plan: QueryPlan) -> bool:
    """Whether the plan's percentiles count each unit once (docs/privacy.md §5.3,
    "Percentiles of user-level tables"): over weighted ranks in the step form
    (``WEIGHTED``: every row weighs 1/n_u of a unit), over one row per unit in the
    piecewise form (``ONE_ROW``). The table has a privacy unit that may own
    several rows (``max_rows_per_unit`` other than 1, or joins that multiply rows) and
    the GROUP BY has groups one unit may span, where the exponent's c·min(2c, G) over
    all rows falls to min(2, G) (weighted: 2·max(p, 1 − p)). Without such groups all rows are drawn over (Δu = c·g:
    no sampling error, which dominates at a few thousand rows). A function of the rules
    and the query alone."""
    return several_rows_per_unit(plan) and bool(plan.group_by) and not plan.groups_fixed \
        and plan.group_count > 1


def several_rows_per_unit(plan: QueryPlan) -> bool:
    """The table has a privacy unit that may own several rows in scope (its
    ``max_rows_per_unit`` is not 1, or joins multiply rows): from the rules alone."""
    return (plan.per_unit is None and plan.table.privacy_unit is not None
            and plan.contribution_bound != 1)


def sampled_shift(plan: QueryPlan) -> int:
    """s of a draw over one value per unit: the g units a neighbour changes, one row
    (one value per group) each."""
    return plan.table.group_size


ALL_ROWS = None  # a draw over every row in scope (clipped to c per unit under DP)
ONE_ROW = "one row per unit"  # a piecewise percentile over one row per unit
WEIGHTED = "weighted ranks"  # a percentile over weighted ranks (``one_row_per_unit``)
DrawScope = UnitExtremes | str | None


def draw_scope(plan: QueryPlan, agg) -> DrawScope:
    """What a percentile, MAX or MIN of the plan is drawn over: a percentile where a
    unit may span the GROUP BY's groups (``one_row_per_unit``) over weighted ranks, or
    in the piecewise form one row per unit, else over all rows. MAX over rows is MAX
    over the units' own maxima, exactly (MIN likewise), and a neighbour changes one
    value per unit and group instead of c, so the draw's s falls from c·g to g wherever
    a unit may own several rows (``several_rows_per_unit``); with one row per unit the
    two scopes are the same and all rows are kept. A function of the rules and the
    query alone."""
    if agg.kind == PERCENTILE:
        if not one_row_per_unit(plan):
            return ALL_ROWS
        return ONE_ROW if plan.mechanism.scale == PIECEWISE else WEIGHTED
    return UnitExtremes(agg.column, agg.kind == MAX) if several_rows_per_unit(plan) \
        else ALL_ROWS


def draw_scopes(plan: QueryPlan) -> list[DrawScope]:
    """The scopes of the plan's draws, each once, in the order of its aggregates."""
    found: list[DrawScope] = []
    for agg in plan.aggregates:
        if agg.kind.row.ranked and (scope := draw_scope(plan, agg)) not in found:
            found.append(scope)
    return found


def instance_releases(plan: QueryPlan, group: GroupStats, shift: int, rng: RandomSource,
                      key: tuple = (), scope: DrawScope = ALL_ROWS
                      ) -> Asking[dict[int, float | int]]:
    """The released value of every percentile, MAX and MIN of the plan drawn over
    ``scope`` (``draw_scope``) in the group ``key``, by aggregate index; ``group`` holds
    that scope's statistics in that group, ``shift`` is the plan's s over all rows. The
    draws ask for the ranks and counts they need, of that group's scope."""
    found = {}
    for index, column, target, epsilon, grid, draw_shift, scaled in _targets(plan, shift,
                                                                             scope):
        n = group.column(column).n
        found[index] = yield from instance_release(n, min(max(1, target.rank(n)), max(n, 1)),
                                                   draw_shift, epsilon,
                                                   grid, rng, plan.mechanism.scale == PIECEWISE,
                                                   column, key, scaled)
    return found


def first_windows(plan: QueryPlan, shift: int, scope: DrawScope = ALL_ROWS
                  ) -> dict[str, list[tuple[RankRef, int]]]:
    """Per column, the (target rank, K) of the first window each of its draws over
    ``scope`` reads: what the engine reads for every group at once under GROUP BY
    (``grouped_windows``); ``shift`` as in ``instance_releases``."""
    spans: dict[str, list[tuple[RankRef, int]]] = {}
    for _, column, target, epsilon, grid, draw_shift, _ in _targets(plan, shift, scope):
        spans.setdefault(column, []).append(
            (target, first_reach(exponent(epsilon, draw_shift), grid)))
    return spans


# A MAX's target rank is n − min(K, ⌊n/10⌋) (MIN's 1 + min(K, ⌊n/10⌋)): in a scope of
# fewer than 10·K values n − K would cross to the other end (a per-bucket MAX of 15
# values came back as their minimum); the tenth keeps it among the largest. Like the
# percentile's ⌈p·n⌉, the target is nondecreasing in n by steps of 0 or 1, so a
# candidate's distance still moves by at most one per row (docs/privacy.md §5.3).
EXTREME_SHARE = Fraction(1, 10)


# The weight the candidates beyond the data may have against one candidate at the
# target (``extreme_offset``): 1/4, so a draw lands beyond the data with probability at
# most 1/5 where a single candidate lies at the target (every value tied there) and far
# less where the values near the target hold several candidates, as continuous values
# on the 0.78 % grid do. Chosen by the exact law over the demo's columns
# (benchmarks/extreme_targets.py --exact): against 1/20 (until issue 32's round on the
# extremes) every cell's median error falls or stays, by 1–10 %, and at ε 0.1 the
# chance of landing in the top 1 % of incomes rises from 0.26 to 0.81.
EXTREME_GUARD = 4


def extreme_offset(epsilon: Fraction, shift: int, grid: Grid) -> int:
    """K of MAX's target rank n − K (MIN's 1 + K): the least K for which the candidates
    beyond the largest value, each at distance K + 1, weigh together at most a quarter
    of one candidate at the target, |grid|·e^{−λ(K+1)} ≤ 1/4 (``EXTREME_GUARD``), so
    that a draw lands beyond the data with probability under 1/5 where a single
    candidate lies at the target (less where several do: on the demo's columns at ε 1
    at most 3 %). Aimed at the largest value itself (K = 0), the draw falls almost surely
    in the empty stretch between it and the domain's end, every candidate of which is
    one change away (MAX(age) at ε 0.1: 120, 120, 71, 0 against 99); aimed K values
    down, it lands among the top values: at ε 1, s 1, K = 12 on ages (121 candidates),
    18 on incomes (3,097 candidates on 0..10⁷ by cents). At least 1: where the values
    are off the grid (incomes by cents on geometric candidates) no candidate is at
    distance 0 from rank n, the ones next to the largest value are at 1, as are all of
    the empty stretch beyond it, so aimed at K = 0 (a large ε) the draw fell anywhere in
    that stretch, and MAX(income) got worse as ε grew (ε 1000: 2·10⁶ against 448,306; the
    review of 2026-11-29); aimed at K = 1 the stretch is at 2. A function of ε, s and
    the rules."""
    return max(1, math.ceil(math.log(EXTREME_GUARD * grid.count)
                            / exponent(epsilon, shift)) - 1)


def _targets(plan: QueryPlan, shift: int, scope: DrawScope = ALL_ROWS):
    """(aggregate index, column, target rank, ε, candidates, s of the draw, ``Scaled``
    or None) of every percentile, MAX and MIN drawn over ``scope``, ``shift`` the plan's
    s over all rows: MAX is the value at rank n − min(K, ⌊n/10⌋), MIN at rank
    1 + min(K, ⌊n/10⌋) (``extreme_offset``, ``EXTREME_SHARE``; ranks outside 1..n are
    taken as the nearest; by the scaled distance, ``scaled_end``, that rank is the
    draw's t, MAX's n + 1 − t). ε is each aggregate's own
    (sequential composition, as for every aggregate of a SELECT), over GROUP BY divided
    by the groups one unit can touch, as every DP aggregate's (§3.5): with one row per
    unit those of its g rows; with one value per unit and group those of its rows (at
    most c under DP: ``UnitExtremes``' cap), as over all rows. The draw's s is g over
    one value per unit (``sampled_shift``)."""
    draw = shift if scope is ALL_ROWS else sampled_shift(plan)
    part = plan.aggregate_loss * Fraction(1, group_share(plan, draw if scope == ONE_ROW
                                                         else shift))
    for index, agg in enumerate(plan.aggregates):
        if not agg.kind.row.ranked or draw_scope(plan, agg) != scope:
            continue
        column = plan.table.columns[agg.column]
        grid = ranked_grid(column, agg.kind == PERCENTILE)
        scaled = scaled_end(plan, agg, grid)
        target = (RankRef(PCT, fraction=agg.fraction) if agg.kind == PERCENTILE
                  else RankRef(TOP if agg.kind == MAX else BOTTOM,
                               extreme_offset(part.epsilon, draw, grid), EXTREME_SHARE))
        yield index, agg.column, target, part.epsilon, grid, draw, scaled


# MAX and MIN of a number column on log-spaced candidates, in the step form: the factor
# of a candidate's neighbourhood (``Scaled``). Chosen by the exact law over the cells of
# ``utility.py demo`` at ε 1 and 0.1 (benchmarks/README.md, "MAX and MIN by the scaled
# distance"): a MIN lands below the data at most 100 % away on a domain from 0, so its
# neighbourhood may be wide; a MAX lands above it without bound, so it is one octave.
SCALED_FACTORS = {MAX: 2, MIN: 8}


def scaled_end(plan: QueryPlan, agg, grid: Grid) -> Scaled | None:
    """The scaled distance of a MAX or MIN (docs/privacy.md §5.3, "MAX and MIN by the
    scaled distance"), or None for the rank distance: for a number column (not a date or
    timestamp's seconds) whose candidates are log-spaced (``Grid.log_spaced``), in the
    step form. A function of the rules and the statement alone."""
    if (agg.kind not in SCALED_FACTORS or plan.mechanism.scale == PIECEWISE
            or not grid.log_spaced
            or getattr(plan.table.columns[agg.column], "moment", None) is not None):
        return None
    return Scaled(SCALED_FACTORS[agg.kind], agg.kind == MAX)


def extreme_offsets(plan: QueryPlan, shift: int) -> dict[int, tuple[int, Scaled | None]]:
    """K of each MAX and MIN of the plan (by the scaled distance t − 1) and its
    ``Scaled``, by aggregate index (for its note)."""
    return {index: (target.offset, scaled) for scope in draw_scopes(plan)
            for index, _, target, _, _, _, scaled in _targets(plan, shift, scope)
            if target.anchor != PCT}
