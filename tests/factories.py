"""The tests' shared builders: random data sets.

A builder gives a test what it needs made the way every other test makes it; a test
that needs something else says so in its arguments rather than copying the builder."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator


def _how_many(rng: random.Random, count: int | tuple[int, int]) -> int:
    """``count`` itself, or a number drawn from the range (low, high), both included."""
    return count if isinstance(count, int) else rng.randint(*count)


def random_datasets(seed: int, count: int, unit_rows: Callable[[random.Random, int | None], list],
                    units: int | tuple[int, int] = (0, 5),
                    null_unit: float = 0.0) -> Iterator[list]:
    """``count`` random data sets from one seed, each the rows ``unit_rows(rng, unit)``
    of its units 0, 1, … — ``units`` of them (a range: drawn) — and, with probability
    ``null_unit``, of the NULL unit after them. The draws are made in that order, so a
    data set is the same for the same seed and arguments."""
    rng = random.Random(seed)
    for _ in range(count):
        numbered = range(_how_many(rng, units))
        present = [*numbered, *([None] if null_unit and rng.random() < null_unit else [])]
        yield [row for unit in present for row in unit_rows(rng, unit)]


def rows_of(row: Callable[[random.Random, int | None], object],
            count: int | tuple[int, int] = 1) -> Callable[[random.Random, int | None], list]:
    """``unit_rows`` of random_datasets: ``count`` rows a unit (a range: drawn), each
    ``row(rng, unit)``."""
    return lambda rng, unit: [row(rng, unit) for _ in range(_how_many(rng, count))]
