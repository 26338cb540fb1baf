"""Privacy loss as a value, and strict parsing of ε and budgets in exact micro-units.

A ``Loss`` is what one release costs: ε, and δ for an (ε, δ) part. It is exact (rational),
so a query's loss splits into the parts its mechanisms spend and they add back to it
(sequential composition) without rounding. Beside ε and δ it carries ρ, what the release
costs under zero-concentrated DP (the ``zcdp`` accountant, proxy/accounting.py): ε²/2
for an ε-DP release unless the mechanism states less (the exponential mechanism: ε²/8).
A Gaussian answer is charged the same ρ = ε²/2 of its ε share, and its noise is set from
that ρ (``rho_part``): ε is then the share of the budget whose ε²/2 is its ρ.

Budgets are sums of many small ε: adding floats drifts, so the ledger stores integers of
one millionth of ε (SPEC §9), and every ε an analyst types is parsed as a plain ASCII
decimal with at most six places.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from proxy.accounting import pure_rho, rho_decimal

MICRO = 1_000_000
_PLAIN_DECIMAL = re.compile(r"[0-9]+(\.[0-9]{1,6})?|\.[0-9]{1,6}")


@dataclass(frozen=True)
class Loss:
    """ε (pure DP) and δ of one release or of one part of it, as exact rationals."""

    epsilon: Fraction
    delta: Fraction = Fraction(0)
    rho: Fraction | None = None  # None: ε²/2, that of any ε-DP release (``__post_init__``)

    def __post_init__(self) -> None:
        if self.rho is None:
            object.__setattr__(self, "rho", pure_rho(self.epsilon))

    def __hash__(self) -> int:
        """The fields' hash, kept: the caches below are asked once per group (three
        Fraction hashes each time cost more than the split they save)."""
        known = self.__dict__.get("_hash")
        if known is None:
            known = hash((self.epsilon, self.delta, self.rho))
            object.__setattr__(self, "_hash", known)
        return known

    @classmethod
    def of(cls, epsilon: Decimal | Fraction | int, delta: Decimal | Fraction | int = 0,
           rho: Fraction | None = None) -> Loss:
        return cls(Fraction(epsilon), Fraction(delta), rho)

    def __add__(self, other: Loss) -> Loss:
        """Sequential composition: both releases, of the same data (ρ adds too: zCDP
        composes additively, Bun–Steinke Lemma 2.3)."""
        return Loss(self.epsilon + other.epsilon, self.delta + other.delta,
                    self.rho + other.rho)

    def __mul__(self, share: int | Fraction) -> Loss:
        """``share`` times this loss: k releases of it (an int: ρ times k), or a part of
        it (a Fraction: the same mechanism at share·ε, ρ times share²)."""
        return _times(self, share)

    def split(self, *weights: int | Fraction, by_rho: bool = False) -> tuple[Loss, ...]:
        """Parts in proportion to ``weights`` that add back to this loss exactly: what
        a mechanism made of several draws spends on each (the one place a loss is
        divided); ``by_rho``: parts of its ρ (``rho_part``), for draws whose noise is
        set from their ρ (Gaussian)."""
        return _split(self, weights, by_rho)

    def rho_part(self, share: Fraction) -> Loss:
        """``share`` of this loss for noise set from its ρ (Gaussian noise): zCDP parts
        add up exactly (ρ times ``share``, where a part of an ε-DP mechanism is ε times
        it and ρ times its square), so k parts of 1/k spend this ρ and no more. The part's
        ε is its share of the budget's ε, not an ε-DP guarantee (Gaussian noise has
        none): only its ρ sets the noise."""
        return Loss(self.epsilon * share, self.delta * share, self.rho * share)

    @property
    def spent(self) -> Decimal:
        """ε as the ledger and the analyst see it (exact: a charged loss is a whole number
        of micro-units, ``to_micro``)."""
        return Decimal(self.epsilon.numerator) / Decimal(self.epsilon.denominator)

    @property
    def spent_rho(self) -> Decimal:
        """ρ as the ledger records it (15 places, rounded up: ``accounting.rho_decimal``)."""
        return rho_decimal(self.rho)

    @property
    def spent_delta(self) -> Decimal:
        return Decimal(self.delta.numerator) / Decimal(self.delta.denominator)


# A loss split or shared alike in each of thousands of groups (TPC-H Q20: 8,508): each
# once. Typed: k releases (an int) and a part (a Fraction) of the same number differ.
@functools.lru_cache(maxsize=1024, typed=True)
def _times(loss: Loss, share: int | Fraction) -> Loss:
    rho = loss.rho * share if isinstance(share, int) else loss.rho * share * share
    return Loss(loss.epsilon * share, loss.delta * share, rho)


@functools.lru_cache(maxsize=1024)
def _split(loss: Loss, weights: tuple[int | Fraction, ...], by_rho: bool) -> tuple[Loss, ...]:
    total = sum(weights)
    shares = [Fraction(weight) / total for weight in weights]
    return tuple(loss.rho_part(share) if by_rho else loss * share for share in shares)


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
