"""Knowledge refinement (seed 001, SPEC §5.4): answer by reweighting the analyst's prior.

The analyst states a prior P over the answer. The proxy multiplies the prior mass of a
ball U_u around the true answer f(D) by α_u ≥ 1 and the rest by α_d ≤ 1, and returns
one sample of the result. The total mass stays 1 when P(U_u) = p_u = (1 − α_d)/(α_u − α_d)
(the seed prints this fraction and p_d's swapped; SPEC §5.4). Every output density is
then within [α_d, α_u] times the prior, which is what the privacy proofs use.

Everything happens in the prior's *quantile space* [0, 1]: the prior's CDF F maps a
ball around f(D) to an interval (or, for a discrete prior, a run of atoms), the refined
law is piecewise constant there, and a sample q maps back through F⁻¹. One
representation serves uniform, truncated normal and discrete priors.

Algorithm 1's ``else`` branch (a prior with atoms, where no ball has mass exactly p_u):
α_u on the largest ball of mass < p_u, α_d outside the smallest ball of mass > p_u, and
on the atoms between them the factor α_ud that makes the total 1. The seed writes α_ud
with p_u and p_d, which makes it 0/0; the masses of the two chosen sets are meant.
α_ud is then a convex combination of α_u and α_d, so the bounds still hold.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from proxy.privacy.sampler import RandomSource, uniform

_EXACT = 1e-12  # a ball's mass equals p_u to within this (float sums of atoms)


def factors(epsilon: float, individual: bool) -> tuple[float, float]:
    """(α_u, α_d). Individual queries (seed 001 Prop. 2: compared with the prior only):
    e^ε and e^−ε. Statistical queries need α_u/α_d = e^ε; we take α_u = e^{ε/2},
    α_d = e^{−ε/2}: for a uniform prior it minimises the expected absolute error among
    all α_u ∈ [1, e^ε] (checked in the tests), and it moves no output further than
    e^{ε/2} from the prior in either direction."""
    if individual:
        return math.exp(epsilon), math.exp(-epsilon)
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
    """normal(μ, σ) restricted to the declared domain [low, high]."""

    mu: float
    sigma: float
    low: float
    high: float

    def _bounds(self) -> tuple[NormalDist, float, float]:
        law = NormalDist(self.mu, self.sigma)
        return law, law.cdf(self.low), law.cdf(self.high)

    def cdf(self, x: float) -> float:
        law, below, above = self._bounds()
        return min(1.0, max(0.0, (law.cdf(min(max(x, self.low), self.high)) - below)
                            / (above - below)))

    def quantile(self, q: float) -> float:
        law, below, above = self._bounds()
        level = below + q * (above - below)
        if not 0.0 < level < 1.0:  # a bound far in the normal's tail
            return self.low if q < 0.5 else self.high
        return min(self.high, max(self.low, law.inv_cdf(level)))


@dataclass(frozen=True)
class Discrete:
    """Atoms (value, probability); ``nominal``: distance 0 between equal values, else 1
    (otherwise |x − y|)."""

    atoms: tuple[tuple[Any, float], ...]
    nominal: bool = False

    def distance(self, x: Any, y: Any) -> float:
        return (0.0 if x == y else 1.0) if self.nominal else abs(x - y)


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
        """One draw: a segment by its refined mass, then (continuous priors) a uniform
        prior quantile inside it mapped back through F⁻¹."""
        u = uniform(rng)
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
    """Algorithm 1 of seed 001 for the true ``answer``."""
    p_u = (1 - alpha_d) / (alpha_u - alpha_d)
    if isinstance(prior, Discrete):
        return _refine_atoms(prior, answer, alpha_u, alpha_d, p_u)
    low, high = _ball(prior, float(answer), p_u)
    return Refined((Segment(0.0, low, alpha_d), Segment(low, high, alpha_u),
                    Segment(high, 1.0, alpha_d)), prior)


def _ball(prior: Any, centre: float, p_u: float) -> tuple[float, float]:
    """The quantile interval [F(c − r), F(c + r)] of prior mass p_u (bisection on r: the
    mass grows continuously from 0 to 1)."""
    reach = max(abs(centre - prior.quantile(1e-12)), abs(centre - prior.quantile(1 - 1e-12)))
    short, long = 0.0, reach
    for _ in range(200):
        middle = (short + long) / 2
        if prior.cdf(centre + middle) - prior.cdf(centre - middle) < p_u:
            short = middle
        else:
            long = middle
    return prior.cdf(centre - long), prior.cdf(centre + long)


def _refine_atoms(prior: Discrete, answer: Any, alpha_u: float, alpha_d: float,
                  p_u: float) -> Refined:
    """Balls around the answer hold whole groups of atoms at equal distance; the
    ``then`` branch needs one whose mass is p_u, the ``else`` branch splits at the
    first group that crosses it."""
    radii = sorted({prior.distance(answer, value) for value, _ in prior.atoms})
    closed = [sum(p for v, p in prior.atoms if prior.distance(answer, v) <= r) for r in radii]
    factor_of: dict[float, float] = {}
    crossed = False
    inner = 0.0  # mass of the balls wholly inside U'_u
    for radius, mass in zip(radii, closed):
        if crossed:
            factor_of[radius] = alpha_d
        elif abs(mass - p_u) <= _EXACT or mass < p_u:
            factor_of[radius] = alpha_u
            inner = mass
            crossed = abs(mass - p_u) <= _EXACT
        else:  # the group that crosses p_u: the else branch's α_ud
            outer = 1 - mass
            factor_of[radius] = (1 - alpha_u * inner - alpha_d * outer) / (1 - inner - outer)
            crossed = True
    segments, start = [], 0.0
    for value, probability in prior.atoms:
        factor = factor_of[prior.distance(answer, value)]
        segments.append(Segment(start, start + probability, factor, value))
        start += probability
    return Refined(tuple(segments), prior)


def discrete(table: Sequence[tuple[Any, float]], nominal: bool = False) -> Discrete:
    """A discrete prior from (value, probability) pairs: sorted by value unless nominal,
    probabilities positive and summing to 1."""
    atoms = tuple(table if nominal else sorted(table, key=lambda pair: pair[0]))
    if any(p <= 0 for _, p in atoms) or abs(sum(p for _, p in atoms) - 1) > 1e-9:
        raise ValueError("a discrete prior needs positive probabilities that sum to 1")
    return Discrete(atoms, nominal)


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
        truncated to it; a table's keys are read with ``cast``)."""
        if self.kind == "uniform":
            return Uniform(*self.parameters)
        if self.kind == "normal":
            return TruncatedNormal(*self.parameters, -math.inf if low is None else low,
                                   math.inf if high is None else high)
        atoms = []
        for key, probability in self.parameters:
            try:
                atoms.append((cast(key), probability))
            except ValueError:
                raise ValueError(f"the prior table's key {key!r} is not a value of this "
                                 f"answer ({cast.__name__})") from None
        return discrete(atoms, nominal)


def parse_prior(text: str) -> PriorSpec:
    """Read a prior; a ValueError says what was wrong and what is allowed."""
    allowed = ("use uniform(a, b), normal(mu, sigma) or a table such as "
               "'{\"0\": 0.99, \"1\": 0.01}'")
    if text.strip().startswith("{"):
        try:
            table = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"the prior table is not valid JSON; {allowed}") from None
        if not table or not all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                for p in table.values()):
            raise ValueError(f"a prior table maps values to probabilities; {allowed}")
        pairs = tuple((key, float(p)) for key, p in table.items())
        discrete(pairs, nominal=True)  # probabilities positive, summing to 1
        return PriorSpec("table", pairs, text.strip())
    match = _CALL.match(text)
    if match is None:
        raise ValueError(f"unknown prior {text!r}; {allowed}")
    try:
        first, second = float(match.group(2)), float(match.group(3))
    except ValueError:
        raise ValueError(f"the parameters of {text!r} must be numbers; {allowed}") from None
    if not (math.isfinite(first) and math.isfinite(second)):
        raise ValueError(f"the parameters of {text!r} must be finite")
    kind = match.group(1).lower()
    if kind == "uniform" and not first < second:
        raise ValueError(f"uniform(a, b) needs a < b, got {text!r}")
    if kind == "normal" and not second > 0:
        raise ValueError(f"normal(mu, sigma) needs sigma > 0, got {text!r}")
    return PriorSpec(kind, (first, second), text.strip())


def unrefined(prior: Any) -> Refined:
    """The prior itself, as a refined law: the answer about a unit that is not in the
    data (seed 001 §3, case (i) of an individual query)."""
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
        return max(_atom_bound(refine(prior, t, alpha_u, alpha_d), t, coverage)
                   for t, _ in prior.atoms)
    grid = [prior.quantile(min(max(i / 200, 1e-4), 1 - 1e-4)) for i in range(201)]
    return max(_continuous_bound(prior, refine(prior, t, alpha_u, alpha_d), t, coverage)
               for t in grid)


def _atom_bound(refined: Refined, centre: float, coverage: float) -> float:
    by_distance = sorted((abs(value - centre), mass) for value, mass in refined.atoms())
    total = 0.0
    for distance, mass in by_distance:
        total += mass
        if total >= coverage - _EXACT:
            return distance
    return by_distance[-1][0]


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
