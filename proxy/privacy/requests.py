"""What a mechanism asks of the data while it runs (SPEC §4: mechanisms are pure; the
engine reads). The exponential mechanism, the smooth sensitivity and the private bound
read windows of ranks whose width depends on what they found, and a draw from a tail
counts around its candidate; each is a generator that yields a request and is sent the
answer, as psycopg's protocol generators yield "wait for the socket" and leave the
waiting to their driver. The engine answers a request with the pushdown's SQL
(``proxy.engine``); a test answers it from a Python list. Nothing here runs a query."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RankRequest:
    """The values at ranks first..last (1-based, within 1..n; counted from the largest
    when ``from_top``) among ``column``'s non-null values in scope, in the group ``group``
    of a GROUP BY (``()`` without one), normalised. Answered by a list of the
    last − first + 1 values, by rank: ascending, or descending from the top."""

    column: str
    first: int
    last: int
    from_top: bool = False
    group: tuple = ()


@dataclass(frozen=True)
class CountRequest:
    """Around ``point`` (a candidate of the rules' grid, never an analyst's literal):
    how many of ``column``'s values in scope (in ``group``) are below it and at or
    below it, the largest below it and the smallest above it. Answered by that tuple
    (int, int, float | None, float | None), None where there is no such value."""

    column: str
    point: float
    group: tuple = ()


@dataclass(frozen=True)
class WeightRequest:
    """Weighted ranks (docs/privacy.md §5.3, "Weighted ranks"): each of ``column``'s
    non-null values in scope weighs its unit's ⌊2²⁰/n_u⌋ (n_u the unit's values in
    scope over all groups); in the group ``group``, the distinct values whose running
    weight interval [B − w, B] (w the value's weight, B the weight at or below it)
    meets [t − reach·2²⁰, t + reach·2²⁰], t = ``fraction``·N, N the group's total weight.
    Answered by (N, the weight below the first value returned, [(value, its weight)]
    ascending): the values returned are consecutive among the group's."""

    column: str
    fraction: Fraction
    reach: int
    group: tuple = ()


@dataclass(frozen=True)
class WeightCountRequest:
    """Around ``point`` (a candidate of the rules' grid): the total weight (as in
    ``WeightRequest``) of ``column``'s values in scope in ``group`` below ``point`` and
    below ``after`` (the next candidate; None: every value). Answered by (int, int)."""

    column: str
    point: float
    after: float | None
    group: tuple = ()


# A mechanism that reads as it goes: it yields requests, is sent their answers and
# returns its result (StopIteration.value).
Asking = Generator[RankRequest | CountRequest | WeightRequest | WeightCountRequest, Any, T]
