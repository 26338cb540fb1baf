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


# A mechanism that reads as it goes: it yields requests, is sent their answers and
# returns its result (StopIteration.value).
Asking = Generator[RankRequest | CountRequest, Any, T]
