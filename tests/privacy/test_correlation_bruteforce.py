"""Brute-force neighbour enumeration for CORR and its kin (proxy/privacy/correlation.py):
small data sets of (x, y) records (ties, both domain bounds, NULL, NaN, ±inf and
overflow-sized values in either column, records entering and leaving the scope, units
with several rows, group size g > 1), every neighbour that modifies all records of g
units, and the change of each released statistic — the units beyond each rung (the
bounds' utility), N, Sx, Sy and the centred moments Txx, Tyy, Txy at several public
bounds and centres — compared with the sensitivity the product uses."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import NamedTuple

import pytest

from proxy.privacy.correlation import centred_moments, row_rungs, sensitivities
from proxy.rules import Column
from proxy.statistics import PairSums, clamp_to_domain
from tests.factories import random_datasets, rows_of
from tests.privacy.harness import assert_sound, neighbours

X = Column("x", "float", 0.0, 10.0)
Y = Column("y", "float", -5.0, 5.0)
XS = [0.0, 3.5, 10.0, 10.0, float("nan"), float("inf"), -1e308, None]
YS = [-5.0, 0.0, 5.0, float("nan"), float("-inf"), 1e300, None]
OPTIONS = [(x, y, scope, 0) for x in XS for y in YS for scope in (True, False)]


class Pair(NamedTuple):
    unit: int
    x: float | None
    y: float | None
    in_scope: bool = True
    group: int = 0


def pairs(seed: int, count: int, units: int, rows: int):
    def record(rng, unit):
        return Pair(unit, rng.choice(XS), rng.choice(YS), rng.random() < 0.8)
    return random_datasets(seed, count, rows_of(record, (1, rows)), units=(0, units))


def _present(records) -> list[tuple[float, float]]:
    """(x − Lx, y − Ly) of the rows in scope where neither normalised value is NULL,
    as the backend reads them (NaN is NULL, the rest clamped into the domain)."""
    out = []
    for record in records:
        x = clamp_to_domain(record.x, X.lower, X.upper)
        y = clamp_to_domain(record.y, Y.lower, Y.upper)
        if record.in_scope and x is not None and y is not None:
            out.append((x - X.lower, y - Y.lower))
    return out


def sums_at(records, bx: float, by: float) -> PairSums:
    """The backend's statement 2 for one group, in exact arithmetic."""
    rows = [(Fraction(min(x, bx)), Fraction(min(y, by))) for x, y in _present(records)]
    return PairSums(bx, by, len(rows), sum((x for x, _ in rows), Fraction(0)),
                    sum((x * x for x, _ in rows), Fraction(0)),
                    sum((y for _, y in rows), Fraction(0)),
                    sum((y * y for _, y in rows), Fraction(0)),
                    sum((x * y for x, y in rows), Fraction(0)))


def _rows_per_unit(records) -> int:
    counts: dict = {}
    for record in records:
        counts[record.unit] = counts.get(record.unit, 0) + 1
    return max(counts.values(), default=1)


def _modifying(group_size: int, limit: int | None = None):
    rng = random.Random(5)
    return lambda records: neighbours(records, OPTIONS, group_size, limit=limit, rng=rng)


# (units, rows per unit, g, neighbours per choice of units): row level, user level,
# group privacy; user level samples its 16² neighbours' combinations
SETTINGS = [(4, 1, 1, None), (3, 2, 1, 60), (3, 1, 2, 60)]
# (bx, by, cx, cy): a bound below the data, the domain's, centres at an end or inside
BOUNDS = [(10.0, 10.0, 5.0, 5.0), (2.5, 5.0, 0.0, 5.0), (10.0, 1.25, 10.0, 0.3)]


@pytest.mark.parametrize("units,rows,group_size,limit", SETTINGS)
def test_units_beyond_each_rung_move_by_at_most_g(units, rows, group_size, limit):
    """The bounds' utility (statement 1): per rung, the units with a present row beyond
    it; a neighbour moves each count by at most g (what ``draw_rung`` is calibrated
    to), attained where a unit can cross."""
    ladders = {"x": row_rungs(X), "y": row_rungs(Y)}

    def beyond(records) -> dict:
        largest: dict = {}
        for record in records:
            for (x, y) in _present([record]):
                old = largest.get(record.unit, (-1.0, -1.0))
                largest[record.unit] = (max(old[0], x), max(old[1], y))
        return {(side, k): sum(1 for m in largest.values() if m[at] > bound)
                for at, side in enumerate(ladders) for k, bound in enumerate(ladders[side])}

    outcomes = assert_sound(beyond, lambda _: dict.fromkeys(beyond([]), group_size),
                            pairs(61, 25, units, rows), _modifying(group_size, limit))
    assert any(o.worst[("x", 0)] == group_size for o in outcomes)


@pytest.mark.parametrize("bx,by,cx,cy", BOUNDS)
@pytest.mark.parametrize("units,rows,group_size,limit", SETTINGS)
def test_sums_and_centred_moments_move_within_their_sensitivities(units, rows, group_size,
                                                                  limit, bx, by, cx, cy):
    """N, Sx, Sy, Txx, Tyy and Txy at public bounds and centres (statement 2 and the
    exact algebra of ``centred_moments``): each within what ``sensitivities`` gives
    for s = c·g, and N within s."""
    def released(records) -> dict:
        sums = sums_at(records, bx, by)
        txx, tyy, txy = centred_moments(sums, cx, cy)
        return {"n": sums.n, "sx": float(sums.sx), "sy": float(sums.sy),
                "txx": float(txx), "tyy": float(tyy), "txy": float(txy)}

    def bound(records) -> dict:
        shift = _rows_per_unit(records) * group_size
        return {"n": shift, **sensitivities(bx, by, cx, cy, shift)}

    outcomes = assert_sound(released, bound, pairs(62, 12, units, rows),
                            _modifying(group_size, limit))
    moved = [o for o in outcomes if o.worst["txy"] > 0]
    assert moved, "no neighbour moved the cross moment"
    if rows == 1 and group_size == 1:  # one row in [0, b]: the bound of Sx is reached
        assert any(o.worst["sx"] == pytest.approx(bx) for o in outcomes)


def test_the_centred_moments_are_exact_for_any_centre():
    """Σx̃² − 2c·Σx̃ + N·c² is Σ(x̃ − c)² exactly (Fractions), also far from the data
    (no cancellation error can depend on one row)."""
    rng = random.Random(63)
    records = [Pair(u, rng.uniform(0, 10), rng.uniform(-5, 5)) for u in range(30)]
    sums = sums_at(records, 7.5, 2.5)
    for cx, cy in ((0.0, 0.0), (3.3, 1.7), (7.5, 2.5)):
        rows = [(Fraction(min(x, 7.5)), Fraction(min(y, 2.5))) for x, y in _present(records)]
        assert centred_moments(sums, cx, cy) == (
            sum((x - Fraction(cx)) ** 2 for x, _ in rows),
            sum((y - Fraction(cy)) ** 2 for _, y in rows),
            sum((x - Fraction(cx)) * (y - Fraction(cy)) for x, y in rows))
    assert math.isfinite(sensitivities(1e15, 2e15, 1e15, 0.0, 6)["txy"])
