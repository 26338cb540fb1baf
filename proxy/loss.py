"""Strict parsing of ε and budgets, kept in exact integer micro-units.

Budgets are sums of many small ε: adding floats drifts, so the ledger stores integers of
one millionth of ε (SPEC §9), and every ε an analyst types is parsed as a plain ASCII
decimal with at most six places.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

MICRO = 1_000_000
_PLAIN_DECIMAL = re.compile(r"[0-9]+(\.[0-9]{1,6})?|\.[0-9]{1,6}")


def parse_epsilon(text: str | float | Decimal, what: str = "epsilon") -> Decimal:
    """Parse a positive ε written as a plain decimal (``0.1``, ``1``, ``.05``).

    Refuses exponents, signs, NaN, infinities, non-ASCII digits and more than six
    decimal places, so the value stored is exactly the value typed.
    """
    raw = text if isinstance(text, str) else _number_text(text)
    raw = raw.strip()
    if raw.startswith("-") and _PLAIN_DECIMAL.fullmatch(raw[1:]):
        raise ValueError(f"{what} must be positive, got {raw}")
    if not raw.isascii() or not _PLAIN_DECIMAL.fullmatch(raw):
        raise ValueError(
            f"{what} must be a plain decimal number with at most 6 decimal places, got {raw!r}"
        )
    value = Decimal(raw)
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {raw}")
    return value


def _number_text(value: float | Decimal) -> str:
    """A number from TOML or Python as positional text, so it passes the same strict
    check: TOML reads ``0.000001`` as a float whose repr is ``1e-06``; that shortest
    repr written without an exponent is the literal (of up to 15 significant digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return repr(value)  # refused by the pattern
    if isinstance(value, float):
        return format(Decimal(repr(value)), "f") if math.isfinite(value) else "nan"
    return str(value)


def to_micro(value: Decimal) -> int:
    """ε as an exact integer number of micro-units (the ledger's unit)."""
    micro = value * MICRO
    if micro != micro.to_integral_value():
        raise ValueError(f"epsilon {value} has more than 6 decimal places")
    return int(micro)


def from_micro(micro: int) -> Decimal:
    return Decimal(micro) / MICRO
