"""Knowledge refinement (seed 001, SPEC §5.4): answer by reweighting the analyst's prior.

The analyst states a prior P over the answer. The proxy multiplies the prior mass of a
ball U_u around the true answer f(D) by α_u ≥ 1 and the rest by α_d ≤ 1, and returns
one sample of the result. The total mass stays 1 when P(U_u) = p_u = (1 − α_d)/(α_u − α_d)
(the seed prints this fraction and p_d's swapped; SPEC §5.4). Every output probability is
then within [α_d, α_u] times the prior's, whatever f(D) is: the loss between any two true
answers is at most ln(α_u/α_d), which ``factors`` makes ε.

The law is over a public set of atoms that depends on the prior alone, never on f(D): a
table's values, or a continuous prior's ``Grid`` of ``CELLS`` cells of prior mass exactly
1/CELLS each, answered by each cell's prior median. A sample at full float precision
from a ball whose ends depend on f(D) would land on points that another true answer
cannot produce, and tell the two apart at any ε (issue 29). One code path serves
uniform, truncated normal and discrete priors, and every weight is exact: the prior's
as integers (a table's float probabilities over a common power of two, a grid's cells
1 each), the factors as rationals certified against e^{±ε/2}, so the refined law is a
rational distribution over the atoms, drawn with one uniform integer.

Algorithm 1's ``else`` branch (no ball has mass exactly p_u, as on every grid): α_u on
the largest ball of mass < p_u, α_d outside the smallest ball of mass > p_u, and on the
atoms between them the factor α_ud that makes the total 1. The seed writes α_ud with p_u
and p_d, which makes it 0/0; the masses of the two chosen sets are meant. α_ud is then a
convex combination of α_u and α_d, so the bounds still hold.

Priors are checked when they are SET and when a query gives them their range, both before
any debit: finite probabilities, at most ``MAX_ATOMS`` values, every number within
±``MAGNITUDE_CAP``. So every step below is finite, a table costs O(n) per answer and
O(n log n) for its error bound, and a grid O(log CELLS) values per answer.
"""

from __future__ import annotations

import functools
import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any

from proxy.privacy.exact_choice import exp_upper
from proxy.privacy.sampler import RandomSource
from proxy.statistics import MAGNITUDE_CAP  # the largest |number| a prior may name
from proxy.vocabulary import PriorSpec, prior_atoms

CELLS = 1 << 20  # a continuous prior's public grid: cells of prior mass 2^−20 each
_MIN_NORMAL_MASS = 1e-6  # less on the answer's range: a mistaken prior, short of digits
_MAX_REFINED_EPSILON = 30  # see factors
_DIGITS = 40  # decimal digits of the factors' enclosure of e^{−ε/2}


def factors(epsilon: float | Fraction | Any) -> tuple[Fraction, Fraction]:
    """(α_u, α_d) = (1/h, h), h a rational just above e^{−ε/2} (40 digits), for
    statistical and individual queries alike: so α_u ≤ e^{ε/2}, α_d ≥ e^{−ε/2} and
    α_u/α_d ≤ e^ε hold exactly, and the refined law is rational (sampled exactly).

    α_u/α_d ≤ e^ε bounds the loss between *any* two true answers by ε: the neighbour of a
    statistical query is any two data sets (seed 001 Prop. 1), and that of an individual
    query modifies the unit's value. The seed's individual factors e^{±ε} (Prop. 2) only
    bound the loss against the unit's absence (the prior itself); between two of its
    values they lose 2ε. Against absence these lose ε/2. For a uniform prior this split
    also minimises the expected absolute error among α_u ∈ [1, e^ε] (checked in the tests).
    An ε above 30 (an owner may allow it) is refined as 30, which loses less than it
    charges: there U_u holds p_u < 3·10⁻⁷ of the prior, under one cell of a grid.
    """
    epsilon = min(Fraction(epsilon), Fraction(_MAX_REFINED_EPSILON))
    digits = _DIGITS
    while (alpha_d := exp_upper(epsilon / 2, digits)) >= 1:  # ε below ~10^−40
        digits *= 2
    return 1 / alpha_d, alpha_d


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def quantile(self, q: float) -> float:
        return self.low + q * (self.high - self.low)


@dataclass(frozen=True)
class TruncatedNormal:
    """normal(μ, σ) restricted to [low, high]: the declared domain, within ±MAGNITUDE_CAP."""

    mu: float
    sigma: float
    low: float
    high: float

    @functools.cached_property
    def _bounds(self) -> tuple[NormalDist, float, float]:
        law = NormalDist(self.mu, self.sigma)
        return law, law.cdf(self.low), law.cdf(self.high)

    @property
    def mass(self) -> float:
        """The normal's mass on [low, high]."""
        _, below, above = self._bounds
        return above - below

    def quantile(self, q: float) -> float:
        law, below, above = self._bounds
        level = below + q * (above - below)
        if not 0.0 < level < 1.0:  # a bound far in the normal's tail
            return self.low if q < 0.5 else self.high
        return min(self.high, max(self.low, law.inv_cdf(level)))


class _Atoms:
    """Algorithm 1's view of a prior: atoms with ``values`` (sorted unless nominal) and
    exact integer weights, given as running sums ``cumulative`` (len(values) + 1 of them).
    Distances: 0 between equal values and 1 otherwise if ``nominal``, else |x − y|."""

    nominal: bool
    values: Sequence[Any]
    cumulative: Sequence[int]

    @property
    def total(self) -> int:
        return self.cumulative[-1]

    def distance(self, x: Any, y: Any) -> float:
        return (0.0 if x == y else 1.0) if self.nominal else abs(x - y)

    def centre(self, answer: Any) -> Any:
        """Where the balls are centred: a number, as a float, clamped to the atoms' range,
        which keeps every distance's order (so the refined law) and distances finite."""
        if self.nominal:
            return answer
        values = self.values
        return float(min(max(float(answer), values[0]), values[-1]))

    def span(self, centre: Any, radius: float, closed: bool = True) -> tuple[int, int]:
        """The atoms at distance ≤ radius (< radius unless ``closed``) from centre, as an
        index range [start, end): by bisection on the sorted values, since |v − c| ≤ r
        exactly when −r ≤ v − c ≤ r, and v − c rounds monotonically in v. A nominal
        ball is the centre's atom or everything."""
        def inside(distance: float) -> bool:
            return distance <= radius if closed else distance < radius

        if self.nominal:
            at = self._index.get(centre)
            if inside(1.0):
                return 0, len(self.values)
            if at is None:
                return 0, 0
            return (at, at + 1) if inside(0.0) else (at, at)
        offset = (-centre).__add__  # v ↦ v − c, exactly, without a Python call per value
        lower, upper = (bisect_left, bisect_right) if closed else (bisect_right, bisect_left)
        start = lower(self.values, -radius, key=offset)
        return start, max(start, upper(self.values, radius, key=offset))  # open, 0: empty

    def within(self, centre: Any, radius: float, closed: bool = True) -> int:
        """The prior weight at distance ≤ radius (< radius unless ``closed``)."""
        start, end = self.span(centre, radius, closed)
        return self.cumulative[end] - self.cumulative[start]

    def radius(self, centre: Any, weight: Fraction | int) -> float:
        """The smallest distance from centre to an atom whose closed ball holds ≥ weight
        (the largest distance if none does). A closed ball is a window of consecutive
        atoms, so this is the least, over windows holding the weight, of the distance to
        the window's farther end. For the window that starts at atom a and ends as soon as
        it holds the weight, the left end's distance c − v_a shrinks with a and the right
        end's grows: a bisection finds where they cross, reading O(log n) values (a
        grid's are computed, not stored)."""
        if self.nominal:
            return 0.0 if self.within(centre, 0.0) >= weight else 1.0
        values, cumulative = self.values, self.cumulative
        count = len(values)
        last = min(count - 1, bisect_right(cumulative, cumulative[count] - weight) - 1)
        if last < 0:
            return max(abs(values[0] - centre), abs(values[-1] - centre))

        def ends(a: int) -> tuple[float, float]:
            b = bisect_left(cumulative, cumulative[a] + weight, lo=a + 1)  # atoms a..b−1
            return centre - values[a], values[b - 1] - centre

        def crossed(a: int) -> bool:
            left, right = ends(a)
            return right >= left

        at = bisect_left(range(last + 1), True, key=crossed)
        return min(max(ends(a)) for a in (at - 1, at) if 0 <= a <= last)


@dataclass(frozen=True)
class Discrete(_Atoms):
    """A prior table: distinct atoms (value, probability), sorted by value unless
    ``nominal``; the probabilities sum to 1 (within float rounding: the weights, exact,
    are what the law uses)."""

    atoms: tuple[tuple[Any, float], ...]
    nominal: bool = False

    @functools.cached_property
    def values(self) -> list[Any]:
        return [value for value, _ in self.atoms]

    @functools.cached_property
    def cumulative(self) -> list[int]:
        """The probabilities' running sums as integers over one power of two (a float is
        a dyadic rational), so masses add and compare exactly."""
        ratios = [probability.as_integer_ratio() for _, probability in self.atoms]
        scale = max(denominator for _, denominator in ratios)
        return list(itertools.accumulate((n * (scale // d) for n, d in ratios), initial=0))

    @functools.cached_property
    def _index(self) -> dict[Any, int]:
        return {value: i for i, value in enumerate(self.values)}


class _Medians(Sequence):
    """The values of a grid's cells, computed on demand: F⁻¹((2j + 1)/2n) for cell j."""

    def __init__(self, law: Any, cells: int) -> None:
        self._law, self._cells = law, cells

    def __len__(self) -> int:
        return self._cells

    def __getitem__(self, j: int) -> float:
        if j < 0:
            j += self._cells
        if not 0 <= j < self._cells:
            raise IndexError(j)
        return self._law.quantile((2 * j + 1) / (2 * self._cells))


@dataclass(frozen=True)
class Grid(_Atoms):
    """A continuous prior's public grid: ``cells`` cells of equal prior mass, cell j the
    prior quantiles [j/n, (j + 1)/n), answered by its median F⁻¹((2j + 1)/2n) (n a power
    of two: the quantile is an exact float). It depends on the prior alone, so every true
    answer's law has the same support, and each cell weighs exactly 1. Equal masses (not
    the column's grid step) keep the seed's law to within one cell's mass for a uniform
    and a normal alike, with no irrational cell masses and O(log n) work per answer."""

    law: Uniform | TruncatedNormal
    cells: int = CELLS
    nominal = False

    @functools.cached_property
    def values(self) -> _Medians:
        return _Medians(self.law, self.cells)

    @property
    def cumulative(self) -> range:
        return range(self.cells + 1)


def grid(prior: Any) -> _Atoms:
    """The atoms a prior is refined over: a continuous prior's grid, or the table itself."""
    return Grid(prior) if isinstance(prior, (Uniform, TruncatedNormal)) else prior


@dataclass(frozen=True)
class Run:
    """Atoms start..end − 1 (by index), whose prior weights are multiplied by ``factor``."""

    start: int
    end: int
    factor: Fraction


@dataclass(frozen=True)
class Refined:
    """The refined law: runs of atoms and their factors; the reweighted prior weights
    sum to the prior's total exactly."""

    runs: tuple[Run, ...]
    prior: _Atoms

    def mass(self, start: int = 0, end: int | None = None) -> Fraction:
        """Refined probability of atoms start..end − 1, exactly."""
        cumulative = self.prior.cumulative
        end = len(self.prior.values) if end is None else end
        held = Fraction(0)
        for run in self.runs:
            low, high = max(run.start, start), min(run.end, end)
            if high > low:
                held += run.factor * (cumulative[high] - cumulative[low])
        return held / self.prior.total

    def atoms(self) -> list[tuple[Any, Fraction]]:
        """(value, refined probability) of every atom: for small priors (tables, tests)."""
        return [(value, self.mass(i, i + 1)) for i, value in enumerate(self.prior.values)]

    def draw(self, rng: RandomSource) -> int:
        """An atom's index, with probability exactly its refined mass: on the factors'
        common denominator every run's weight is an integer, so one uniform integer
        picks the run and, within it, a unit of prior weight (so an atom by its weight)."""
        cumulative = self.prior.cumulative
        denominator = math.lcm(*(run.factor.denominator for run in self.runs))
        scaled = [(run, run.factor.numerator * (denominator // run.factor.denominator),
                   cumulative[run.end] - cumulative[run.start]) for run in self.runs]
        u = rng.randbelow(sum(factor * weight for _, factor, weight in scaled))
        for run, factor, weight in scaled:
            if u < factor * weight:
                return bisect_right(cumulative, cumulative[run.start] + u // factor) - 1
            u -= factor * weight
        raise AssertionError("u is below the runs' total weight")

    def sample(self, rng: RandomSource) -> Any:
        """One answer: the value of a drawn atom (a function of its index alone)."""
        return self.prior.values[self.draw(rng)]


def refine(prior: Any, answer: Any, alpha_u: Any, alpha_d: Any) -> Refined:
    """Algorithm 1 of seed 001 for the true ``answer``, over the prior's atoms (a
    continuous prior's grid), with the factors as exact rationals. A number beyond the
    atoms is clamped to them: its nearest atoms are the same."""
    atoms = grid(prior)
    _, inner, closed, (near, edge, far) = _split(atoms, atoms.centre(answer),
                                                 Fraction(alpha_u), Fraction(alpha_d))
    runs = (Run(0, closed[0], far), Run(closed[0], inner[0], edge), Run(*inner, near),
            Run(inner[1], closed[1], edge), Run(closed[1], len(atoms.values), far))
    return Refined(tuple(run for run in runs if run.end > run.start), atoms)


def _split(atoms: _Atoms, centre: Any, alpha_u: Fraction, alpha_d: Fraction) -> tuple[
        float, tuple[int, int], tuple[int, int], tuple[Fraction, Fraction, Fraction]]:
    """Algorithm 1 on atoms, as (r, inner, closed, factors): with r the radius of the
    smallest closed ball of prior mass ≥ p_u, the atoms nearer than r (``inner``, an
    index range) get α_u, the rest of the closed ball α_ud, the others α_d. Written as a fill: a group's factor is
    α_d + (α_u − α_d)·φ, φ its weight's share of a ball of weight exactly p_u·W filled
    nearest first (φ = 1, then (p_u·W − I)/(C − I), then 0: the seed's α_u, α_ud, α_d).
    So the total is α_d·W + (α_u − α_d)·p_u·W = W exactly and every factor lies in
    [α_d, α_u], whatever float distances decided about ties."""
    cumulative, total = atoms.cumulative, atoms.total
    ball = total * (1 - alpha_d) / (alpha_u - alpha_d)  # p_u·W
    radius = atoms.radius(centre, ball)
    inner = atoms.span(centre, radius, closed=False)
    closed = atoms.span(centre, radius)
    closed = min(closed[0], inner[0]), max(closed[1], inner[1])  # the ball at r holds the open one
    held, edge = (cumulative[end] - cumulative[start] for start, end in (inner, closed))
    shares = (min(Fraction(1), ball / held) if held else Fraction(1),
              min(Fraction(1), max(Fraction(0), (ball - held) / (edge - held))) if edge > held
              else Fraction(0),
              max(Fraction(0), (ball - edge) / (total - edge)) if total > edge else Fraction(0))
    return radius, inner, closed, tuple(alpha_d + (alpha_u - alpha_d) * share for share in shares)


def discrete(table: Sequence[tuple[Any, Any]], nominal: bool = False) -> Discrete:
    """A discrete prior from (value, probability) pairs, checked and merged as
    ``proxy.vocabulary.prior_atoms`` says."""
    return Discrete(prior_atoms(table, nominal), nominal)


def prior_over(spec: PriorSpec, low: float | None, high: float | None, nominal: bool = False,
               cast=float) -> Any:
    """The analyst's prior for an answer in [low, high] (None: unbounded; a normal is
    truncated to it, and to ±MAGNITUDE_CAP; a table's keys are read with ``cast``).
    A ValueError when the range leaves the prior (almost) nothing, or a key is not
    a number of the answer's type within ±MAGNITUDE_CAP."""
    if spec.kind == "uniform":
        return Uniform(*spec.parameters)
    if spec.kind == "normal":
        prior = TruncatedNormal(*spec.parameters,
                                -MAGNITUDE_CAP if low is None else max(low, -MAGNITUDE_CAP),
                                MAGNITUDE_CAP if high is None else min(high, MAGNITUDE_CAP))
        if not prior.mass >= _MIN_NORMAL_MASS:
            raise ValueError(f"{spec.text} puts less than {_MIN_NORMAL_MASS:g} of its mass "
                             f"on the answer's range [{prior.low:g}, {prior.high:g}]; "
                             "choose mu inside it and sigma no wider than it")
        return prior
    atoms = []
    for key, probability in spec.parameters:
        try:
            value = cast(key)
        except ValueError:
            raise ValueError(f"the prior table's key {key!r} is not a value of this "
                             f"answer ({cast.__name__})") from None
        if not nominal and not abs(value) <= MAGNITUDE_CAP:  # NaN fails too
            raise ValueError(f"the prior table's key {key!r} is not a finite number "
                             f"within ±{MAGNITUDE_CAP:g}")
        atoms.append((value, probability))
    return discrete(atoms, nominal)


def unrefined(prior: Any) -> Refined:
    """The prior itself, as a refined law over its atoms: the answer about a unit that is
    not in the data (seed 001 §3, case (i) of an individual query), or that has no value."""
    atoms = grid(prior)
    return Refined((Run(0, len(atoms.values), Fraction(1)),), atoms)


@functools.lru_cache(maxsize=256)
def error_bound(prior: Any, alpha_u: Any, alpha_d: Any, coverage: float = 0.95) -> float | None:
    """The smallest r with P(|answer − f(D)| ≤ r) ≥ coverage *whatever f(D) is* (over
    the prior's atoms, or 201 prior quantiles, the support's ends included): a bound that
    does not depend on the data. The refined law's own interval is centred on f(D) and
    would reveal it. None for a nominal prior, whose answers have no distance to report."""
    if isinstance(prior, Discrete):
        if prior.nominal:
            return None
        centres = [float(value) for value in prior.values]
    else:
        centres = [prior.quantile(i / 200) for i in range(201)]
    atoms, goal = grid(prior), Fraction(str(coverage))
    return max(_coverage_radius(atoms, atoms.centre(centre), Fraction(alpha_u),
                                Fraction(alpha_d), goal) for centre in centres)


def _coverage_radius(atoms: _Atoms, centre: float, alpha_u: Fraction, alpha_d: Fraction,
                     coverage: Fraction) -> float:
    """The refined law's coverage radius around centre from prior weights alone (no law
    built: O(log n) bisections): inside the split's radius every atom has the inner
    factor, beyond the closed ball the outer one."""
    radius, inner, closed, (near, edge, far) = _split(atoms, centre, alpha_u, alpha_d)
    cumulative = atoms.cumulative
    held_inner = cumulative[inner[1]] - cumulative[inner[0]]
    held_closed = cumulative[closed[1]] - cumulative[closed[0]]
    goal = coverage * atoms.total
    held = near * held_inner + edge * (held_closed - held_inner)
    if held >= goal:
        return min(radius, atoms.radius(centre, goal / near))
    return atoms.radius(centre, held_closed + (goal - held) / far)
