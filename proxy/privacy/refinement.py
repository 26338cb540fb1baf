"""Knowledge refinement (seed 001, SPEC §5.4): answer by reweighting the analyst's prior.

The analyst states a prior P over the answer. The proxy multiplies the prior mass of a
ball U_u around the true answer f(D) by α_u ≥ 1 and the rest by α_d ≤ 1, and returns
one sample of the result. The total mass stays 1 when P(U_u) = p_u = (1 − α_d)/(α_u − α_d)
(the seed prints this fraction and p_d's swapped; SPEC §5.4). Every output probability is
then within [α_d, α_u] times the prior's, whatever f(D) is: the loss between any two true
answers is at most ln(α_u/α_d), which ``factors`` makes ε.

Everything happens in the prior's *quantile space* [0, 1]: the prior's CDF F maps a
ball around f(D) to an interval (or, for a discrete prior, a run of atoms), the refined
law is piecewise constant there, and a sample q maps back through F⁻¹. One
representation serves uniform, truncated normal and discrete priors.

Algorithm 1's ``else`` branch (a prior with atoms, where no ball has mass exactly p_u):
α_u on the largest ball of mass < p_u, α_d outside the smallest ball of mass > p_u, and
on the atoms between them the factor α_ud that makes the total 1. The seed writes α_ud
with p_u and p_d, which makes it 0/0; the masses of the two chosen sets are meant.
α_ud is then a convex combination of α_u and α_d, so the bounds still hold.

Priors are checked when they are SET and when a query gives them their range, both before
any debit: finite probabilities, at most ``MAX_ATOMS`` values, every number within
±``MAGNITUDE_CAP``. So every step below is finite, and a discrete prior costs O(n) per
answer and O(n log² n) for its error bound (sorted once, prefix sums, bisection).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from proxy.privacy.sampler import RandomSource, uniform
from proxy.statistics import MAGNITUDE_CAP  # the largest |number| a prior may name

MAX_ATOMS = 1000  # the most values a prior table may list (its error bound: ~0.2 s at 1,000)
_MIN_NORMAL_MASS = 1e-6  # less on the answer's range: a mistaken prior, short of digits
_MAX_REFINED_EPSILON = 30.0  # see factors
_EXACT = 1e-12  # the coverage of the error bound is reached to within this (float sums)


def factors(epsilon: float) -> tuple[float, float]:
    """(α_u, α_d) = (e^{ε/2}, e^{−ε/2}), for statistical and individual queries alike.

    α_u/α_d = e^ε bounds the loss between *any* two true answers by ε: the neighbour of a
    statistical query is any two data sets (seed 001 Prop. 1), and that of an individual
    query modifies the unit's value. The seed's individual factors e^{±ε} (Prop. 2) only
    bound the loss against the unit's absence (the prior itself); between two of its
    values they lose 2ε. Against absence these lose ε/2. For a uniform prior this split
    also minimises the expected absolute error among α_u ∈ [1, e^ε] (checked in the tests).
    An ε above 30 (an owner may allow it) is refined as 30, which loses less than it
    charges: the rounding of the mass-1 normalisation, relative ~e^{ε/2}·1e-13, is
    negligible up to there, and e^{ε/2} overflows near 1,420.
    """
    epsilon = min(epsilon, _MAX_REFINED_EPSILON)
    return math.exp(epsilon / 2), math.exp(-epsilon / 2)


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def cdf(self, x: float) -> float:
        return min(1.0, max(0.0, (x - self.low) / (self.high - self.low)))

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

    def cdf(self, x: float) -> float:
        law, below, above = self._bounds
        return min(1.0, max(0.0, (law.cdf(min(max(x, self.low), self.high)) - below)
                            / (above - below)))

    def quantile(self, q: float) -> float:
        law, below, above = self._bounds
        level = below + q * (above - below)
        if not 0.0 < level < 1.0:  # a bound far in the normal's tail
            return self.low if q < 0.5 else self.high
        return min(self.high, max(self.low, law.inv_cdf(level)))


@dataclass(frozen=True)
class Discrete:
    """Distinct atoms (value, probability), sorted by value unless ``nominal`` (distance 0
    between equal values, else 1; otherwise |x − y|); the probabilities sum to 1."""

    atoms: tuple[tuple[Any, float], ...]
    nominal: bool = False

    def distance(self, x: Any, y: Any) -> float:
        return (0.0 if x == y else 1.0) if self.nominal else abs(x - y)

    @functools.cached_property
    def _values(self) -> list[Any]:
        return [value for value, _ in self.atoms]

    @functools.cached_property
    def _cumulative(self) -> list[float]:
        return list(itertools.accumulate((p for _, p in self.atoms), initial=0.0))

    @functools.cached_property
    def _probability(self) -> dict[Any, float]:
        return dict(self.atoms)

    def centre(self, answer: Any) -> Any:
        """Where the balls are centred: a number, as a float, clamped to the atoms' range,
        which keeps every distance's order (so the refined law) and distances finite."""
        if self.nominal:
            return answer
        return float(min(max(float(answer), self._values[0]), self._values[-1]))

    def within(self, centre: Any, radius: float, closed: bool = True) -> float:
        """Prior mass at distance ≤ radius (< radius unless ``closed``) from centre, by
        bisection on the sorted values: |v − c| ≤ r exactly when −r ≤ v − c ≤ r, and v − c
        rounds monotonically in v."""
        if self.nominal:
            here = self._probability.get(centre, 0.0)
            return sum(mass for distance, mass in ((0.0, here), (1.0, 1.0 - here))
                       if (distance <= radius if closed else distance < radius))
        offset = (-centre).__add__  # v ↦ v − c, exactly, without a Python call per value
        lower, upper = (bisect_left, bisect_right) if closed else (bisect_right, bisect_left)
        start = lower(self._values, -radius, key=offset)
        end = max(start, upper(self._values, radius, key=offset))  # open, radius 0: empty
        return self._cumulative[end] - self._cumulative[start]

    def radius(self, centre: Any, mass: float) -> float:
        """The smallest distance from centre to an atom whose closed ball holds ≥ mass (the
        largest distance if none does): a bisection along the atoms on each side of the
        centre, whose distances grow outwards."""
        if self.nominal:
            return 0.0 if self.within(centre, 0.0) >= mass else 1.0
        values = self._values
        split = bisect_left(values, 0.0, key=(-centre).__add__)
        found = []
        for side in (range(split, len(values)), range(split - 1, -1, -1)):
            at = bisect_left(side, True, key=lambda i: self.within(
                centre, abs(values[i] - centre)) >= mass)
            if at < len(side):
                found.append(abs(values[side[at]] - centre))
        return min(found, default=max(abs(values[0] - centre), abs(values[-1] - centre)))


@dataclass(frozen=True)
class Segment:
    """Prior quantiles [start, end) whose prior mass is multiplied by ``factor``; for a
    discrete prior one atom, whose ``value`` it is."""

    start: float
    end: float
    factor: float
    value: Any = None

    @property
    def mass(self) -> float:
        return self.factor * (self.end - self.start)


@dataclass(frozen=True)
class Refined:
    """The refined law over the prior's quantile space."""

    segments: tuple[Segment, ...]
    prior: Any

    def mass(self, start: float, end: float) -> float:
        """Refined probability of the prior quantiles [start, end]."""
        return sum(s.factor * max(0.0, min(s.end, end) - max(s.start, start))
                   for s in self.segments)

    def atoms(self) -> list[tuple[Any, float]]:
        """(value, refined probability) of each atom of a discrete prior."""
        return [(s.value, s.mass) for s in self.segments]

    def sample(self, rng: RandomSource) -> Any:
        """One draw: a segment by its refined mass (scaled by the total, which rounding
        leaves a hair off 1), then (continuous priors) a uniform prior quantile inside it
        mapped back through F⁻¹."""
        u = uniform(rng) * sum(s.mass for s in self.segments)
        chosen = self.segments[-1]
        for segment in self.segments:
            if u < segment.mass:
                chosen = segment
                break
            u -= segment.mass
        if isinstance(self.prior, Discrete):
            return chosen.value
        return self.prior.quantile(chosen.start + (chosen.end - chosen.start) * uniform(rng))


def refine(prior: Any, answer: Any, alpha_u: float, alpha_d: float) -> Refined:
    """Algorithm 1 of seed 001 for the true ``answer``. A number outside a continuous
    prior's support is clamped to it: the ball of mass p_u at its end is the same."""
    p_u = (1 - alpha_d) / (alpha_u - alpha_d)
    if isinstance(prior, Discrete):
        return _refine_atoms(prior, prior.centre(answer), alpha_u, alpha_d, p_u)
    low, high = _ball(prior, min(max(float(answer), prior.low), prior.high), p_u)
    return Refined((Segment(0.0, low, alpha_d), Segment(low, high, alpha_u),
                    Segment(high, 1.0, alpha_d)), prior)


def _ball(prior: Any, centre: float, p_u: float) -> tuple[float, float]:
    """The prior quantiles [a, a + p_u] of the ball around centre: bisection on a until
    the ball's ends are equally far from the centre (Q(a) + Q(a + p_u) − 2c grows with
    a), or the ball meets the support's end. Working in quantiles keeps the mass p_u
    to the last digit even where values have too few digits for the ball (a normal(0, 1)
    prior and a true answer near 1e15)."""
    at = prior.cdf(centre)
    low, high = max(0.0, at - p_u), min(at, 1 - p_u)
    for _ in range(64):  # to 2^−64 of the quantiles: past what the floats distinguish
        middle = (low + high) / 2
        if prior.quantile(middle) + prior.quantile(middle + p_u) < 2 * centre:
            low = middle
        else:
            high = middle
    return high, min(1.0, high + p_u)


def _split(prior: Discrete, centre: Any, alpha_u: float, alpha_d: float,
           p_u: float) -> tuple[float, float, float, float]:
    """Algorithm 1 on atoms, as (r, edge, P(ball), refined P(ball)), r the radius of the
    smallest ball of prior mass ≥ p_u: atoms nearer than r get α_u, those at distance r
    ``edge``, the rest α_d. ``edge`` makes the total 1: α_u when the ball's mass is p_u
    (the ``then`` branch), else the ``else`` branch's α_ud, a convex combination of the
    two (kept in [α_d, α_u] against rounding)."""
    radius = prior.radius(centre, p_u)
    closed = prior.within(centre, radius)
    inner = prior.within(centre, radius, closed=False)
    edge = (1 - alpha_u * inner - alpha_d * (1 - closed)) / (closed - inner)
    edge = min(alpha_u, max(alpha_d, edge))
    return radius, edge, closed, alpha_u * inner + edge * (closed - inner)


def _refine_atoms(prior: Discrete, centre: Any, alpha_u: float, alpha_d: float,
                  p_u: float) -> Refined:
    radius, edge, _, _ = _split(prior, centre, alpha_u, alpha_d, p_u)
    segments, start = [], 0.0
    for value, probability in prior.atoms:
        distance = prior.distance(value, centre)
        factor = alpha_u if distance < radius else edge if distance == radius else alpha_d
        segments.append(Segment(start, start + probability, factor, value))
        start += probability
    return Refined(tuple(segments), prior)


def discrete(table: Sequence[tuple[Any, Any]], nominal: bool = False) -> Discrete:
    """A discrete prior from (value, probability) pairs: at most MAX_ATOMS of them (the
    bound's cost grows with their number), probabilities in (0, 1] (NaN and ±inf fail
    the comparison) summing to 1 within 1e-9; equal values merged, sorted by value unless
    nominal, and scaled to sum to 1 as closely as floats allow."""
    if len(table) > MAX_ATOMS:
        raise ValueError(f"a prior table lists at most {MAX_ATOMS} values, got {len(table)}; "
                         "merge neighbouring values, or use uniform(a, b) or normal(mu, sigma)")
    if not all(0 < p <= 1 for _, p in table):
        raise ValueError("a prior table's probabilities must be finite, positive and sum to 1")
    merged: dict[Any, float] = {}
    for value, probability in table:
        merged[value] = merged.get(value, 0.0) + float(probability)
    total = math.fsum(merged.values())
    if abs(total - 1) > 1e-9:
        raise ValueError("a discrete prior needs positive probabilities that sum to 1")
    atoms = [(value, probability / total) for value, probability in merged.items()]
    return Discrete(tuple(atoms if nominal else sorted(atoms, key=lambda pair: pair[0])),
                    nominal)


_CALL = re.compile(r"^\s*(uniform|normal)\s*\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*$",
                   re.IGNORECASE)


@dataclass(frozen=True)
class PriorSpec:
    """A prior as an analyst writes it (``SET idp.prior = '...'``), before the column's
    domain and type give it its range: ``uniform(a, b)``, ``normal(mu, sigma)`` or a
    JSON table ``{"0": 0.99, "1": 0.01}``."""

    kind: str  # "uniform" | "normal" | "table"
    parameters: tuple = ()
    text: str = field(default="", compare=False, repr=False)  # as the analyst wrote it

    def over(self, low: float | None, high: float | None, nominal: bool = False,
             cast=float) -> Any:
        """The prior for an answer in [low, high] (None: unbounded; a normal is
        truncated to it, and to ±MAGNITUDE_CAP; a table's keys are read with ``cast``).
        A ValueError when the range leaves the prior (almost) nothing, or a key is not
        a number of the answer's type within ±MAGNITUDE_CAP."""
        if self.kind == "uniform":
            return Uniform(*self.parameters)
        if self.kind == "normal":
            prior = TruncatedNormal(*self.parameters,
                                    -MAGNITUDE_CAP if low is None else max(low, -MAGNITUDE_CAP),
                                    MAGNITUDE_CAP if high is None else min(high, MAGNITUDE_CAP))
            if not prior.mass >= _MIN_NORMAL_MASS:
                raise ValueError(f"{self.text} puts less than {_MIN_NORMAL_MASS:g} of its mass "
                                 f"on the answer's range [{prior.low:g}, {prior.high:g}]; "
                                 "choose mu inside it and sigma no wider than it")
            return prior
        atoms = []
        for key, probability in self.parameters:
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


def parse_prior(text: str) -> PriorSpec:
    """Read a prior; a ValueError says what was wrong and what is allowed."""
    allowed = ("use uniform(a, b), normal(mu, sigma) or a table such as "
               "'{\"0\": 0.99, \"1\": 0.01}'")
    if text.strip().startswith("{"):
        try:
            table = json.loads(text)
        except (ValueError, RecursionError):  # incl. integers beyond Python's digit limit
            raise ValueError(f"the prior table is not valid JSON; {allowed}") from None
        if not table or not all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                for p in table.values()):
            raise ValueError(f"a prior table maps values to probabilities; {allowed}")
        pairs = tuple(discrete(list(table.items()), nominal=True).atoms)
        return PriorSpec("table", pairs, text.strip())
    match = _CALL.match(text)
    if match is None:
        raise ValueError(f"unknown prior {text!r}; {allowed}")
    try:
        first, second = float(match.group(2)), float(match.group(3))
    except ValueError:
        raise ValueError(f"the parameters of {text!r} must be numbers; {allowed}") from None
    if not (abs(first) <= MAGNITUDE_CAP and abs(second) <= MAGNITUDE_CAP):  # NaN fails too
        raise ValueError(f"the parameters of {text!r} must be finite, within "
                         f"±{MAGNITUDE_CAP:g}")
    kind = match.group(1).lower()
    if kind == "uniform" and not first < second:
        raise ValueError(f"uniform(a, b) needs a < b, got {text!r}")
    if kind == "normal" and not second > 0:
        raise ValueError(f"normal(mu, sigma) needs sigma > 0, got {text!r}")
    return PriorSpec(kind, (first, second), text.strip())


def unrefined(prior: Any) -> Refined:
    """The prior itself, as a refined law: the answer about a unit that is not in the
    data (seed 001 §3, case (i) of an individual query), or that has no value."""
    if isinstance(prior, Discrete):
        segments, start = [], 0.0
        for value, probability in prior.atoms:
            segments.append(Segment(start, start + probability, 1.0, value))
            start += probability
        return Refined(tuple(segments), prior)
    return Refined((Segment(0.0, 1.0, 1.0),), prior)


@functools.lru_cache(maxsize=256)
def error_bound(prior: Any, alpha_u: float, alpha_d: float, coverage: float = 0.95) -> float | None:
    """The smallest r with P(|answer − f(D)| ≤ r) ≥ coverage *whatever f(D) is* (over
    the prior's atoms, or a grid of 201 prior quantiles): a bound that does not depend
    on the data. The refined law's own interval is centred on f(D) and would reveal it.
    None for a nominal prior, whose answers have no distance to report."""
    if isinstance(prior, Discrete):
        if prior.nominal:
            return None
        return max(_atom_bound(prior, float(t), alpha_u, alpha_d, coverage)
                   for t, _ in prior.atoms)
    grid = [prior.quantile(min(max(i / 200, 1e-4), 1 - 1e-4)) for i in range(201)]
    return max(_continuous_bound(prior, refine(prior, t, alpha_u, alpha_d), t, coverage)
               for t in grid)


def _atom_bound(prior: Discrete, centre: float, alpha_u: float, alpha_d: float,
                coverage: float) -> float:
    """The refined law's coverage radius around an atom from prior masses alone (no law
    built: O(log² n)): inside the split's radius every atom has α_u, beyond it α_d."""
    radius, _, closed, held = _split(prior, centre, alpha_u, alpha_d,
                                     (1 - alpha_d) / (alpha_u - alpha_d))
    goal = coverage - _EXACT
    if held >= goal:
        return min(radius, prior.radius(centre, goal / alpha_u))
    return prior.radius(centre, closed + (goal - held) / alpha_d)


def _continuous_bound(prior: Any, refined: Refined, centre: float, coverage: float) -> float:
    short = 0.0
    long = max(abs(centre - prior.quantile(1e-9)), abs(centre - prior.quantile(1 - 1e-9)))
    for _ in range(60):
        middle = (short + long) / 2
        if refined.mass(prior.cdf(centre - middle), prior.cdf(centre + middle)) < coverage:
            short = middle
        else:
            long = middle
    return long
