"""The zCDP accountant's arithmetic (``[defaults] accounting = "zcdp"``, docs/budget.md):
what an answer costs in ρ, and the conversion between a budget stated as ε at the owner's
δ and the ρ the privacy filter may spend.

Costs (ρ-zCDP, Bun and Steinke 2016, Def. 1.1):

- an ε-DP (or ε-iDP) answer is ε²/2-zCDP (Bun–Steinke Prop. 1.4; the statement is about
  one pair of neighbouring data sets, so it holds pair by pair for iDP too);
- the exponential mechanism at ε (weights e^{ε·u/(2Δu)}) is ε-bounded-range and so
  ε²/8-zCDP (Cesar and Rogers 2021, "Bounded-range implies tight privacy loss
  composition", Lemma 3.2 with Thm. 3.1 of Durfee and Rogers 2019 for ε-BR of the EM).

Conversion (Canonne, Kamath and Steinke 2020, "The discrete Gaussian for differential
privacy", Prop. 12 / Cor. 13): ρ-zCDP implies (ε, δ)-DP for

    ε(ρ, δ) = inf_{α > 1}  αρ + (log(1/δ) − log α)/(α − 1) + log(1 − 1/α).

Every α gives a valid ε, so a numerical search that misses the exact infimum only
reports a slightly larger (still valid) ε; the inverse ``rho_budget`` keeps the largest
ρ whose ε, so evaluated, stays within the budget (rounded down: a smaller ρ budget only
refuses sooner).

Filter (fully adaptive composition): Feldman and Zrnic 2021, "Individual privacy
accounting via a Rényi filter", Thm. 3.1 (stated for one fixed pair of neighbours, so it
covers iDP's pairs), at every order α with the stopping rule Σ α·ρ_i ≤ α·ρ_B, which is
one rule for all α: Σ ρ_i ≤ ρ_B; the interaction is then (α, αρ_B)-RDP for every α, i.e.
ρ_B-zCDP, and (ε_B, δ)-DP by the conversion above. Whitehouse, Ramdas, Rogers and Wu
2023 ("Fully-adaptive composition in differential privacy", §4) state the same zCDP
filter. The number this guarantees is the budget ε_B at δ, not a running total of what
was spent (that would be an odometer, which costs more): the ε "spent" shown is the
conversion of the ρ spent, an account, and what "remains" is the largest ε one more
pure answer may take.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

# ρ is kept in the ledger as a DECIMAL(38, 15): ε has six decimal places, so ε²/2 has 13
# and ε²/8 has 15; every cost of a pure or exponential answer is exact.
RHO_PLACES = 15
RHO_QUANTUM = Decimal(1).scaleb(-RHO_PLACES)
RHO_SQL = "DECIMAL(38, 15)"
ACCOUNTANTS = ("pure", "zcdp")
# The noise of COUNT, SUM and AVG under DP (``SET idp.noise``, ``[defaults] noise``):
# Laplace (ε-DP), or the discrete Gaussian (ρ-zCDP: under the zcdp accountant only, the
# pure one has no δ to state it at)
LAPLACE, GAUSSIAN = "laplace", "gaussian"
NOISES = (LAPLACE, GAUSSIAN)


def pure_rho(epsilon: Fraction) -> Fraction:
    """ρ of an ε-DP answer: ε²/2."""
    return epsilon * epsilon / 2


def exponential_rho(epsilon: Fraction) -> Fraction:
    """ρ of the exponential mechanism at ε (ε-bounded-range): ε²/8."""
    return epsilon * epsilon / 8


def rho_decimal(rho: Fraction) -> Decimal:
    """ρ as the ledger stores it, rounded up to 15 places (exact for ε²/2 and ε²/8 of an
    ε of six places; rounding up only charges more)."""
    with localcontext() as ctx:
        ctx.prec = 60
        value = Decimal(rho.numerator) / Decimal(rho.denominator)
        return value.quantize(RHO_QUANTUM, rounding=ROUND_CEILING)


def _epsilon_at(alpha: float, rho: float, log_inverse_delta: float) -> float:
    return (alpha * rho + (log_inverse_delta - math.log(alpha)) / (alpha - 1)
            + math.log1p(-1 / alpha))


def epsilon_of(rho: float, delta: float) -> float:
    """ε(ρ, δ) of Canonne–Kamath–Steinke: the infimum over α > 1, searched on a grid of
    log(α − 1) and refined by golden section around the best point. Each value returned
    is the bound at one α, so it is valid whatever the search misses."""
    if rho < 0 or not 0 < delta < 1:
        raise ValueError(f"need rho >= 0 and 0 < delta < 1, got {rho}, {delta}")
    log_inverse_delta = -math.log(delta)
    if rho == 0:
        return 0.0

    def at(t: float) -> float:
        return _epsilon_at(1 + math.exp(t), rho, log_inverse_delta)

    points = [-12 + 0.05 * i for i in range(721)]  # α − 1 from e^-12 to e^24
    best = min(range(len(points)), key=lambda i: at(points[i]))
    low, high = points[max(best - 1, 0)], points[min(best + 1, len(points) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if at(a) <= at(b):
            high = b
        else:
            low = a
    return min(at(points[best]), at((low + high) / 2))


def epsilon_decimal(rho: Decimal, delta: Decimal) -> Decimal:
    """ε(ρ, δ) rounded up to six places (the ε people see: never below the bound)."""
    value = epsilon_of(float(rho), float(delta)) * (1 + 1e-12)  # float rounding, upwards
    return Decimal(repr(value)).quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


@functools.lru_cache(maxsize=1024)
def rho_budget(epsilon: Decimal, delta: Decimal) -> Decimal:
    """The largest ρ (15 places, rounded down) whose ε(ρ, δ) is at most ``epsilon``:
    the privacy filter's budget for a budget of ε at δ. Zero when even ρ → 0 does not
    fit (never: ε(0, δ) = 0)."""
    target = float(epsilon) * (1 - 1e-12)  # float rounding, downwards
    low, high = 0.0, float(epsilon)  # ε(ρ, δ) > ρ, so ρ_B < ε
    for _ in range(64):  # ε·2^-64: below the 15th place for any ε up to 10^3
        middle = (low + high) / 2
        if epsilon_of(middle, float(delta)) <= target:
            low = middle
        else:
            high = middle
    return Decimal(repr(low)).quantize(RHO_QUANTUM, rounding=ROUND_FLOOR)


def largest_epsilon(rho_left: Decimal) -> Decimal:
    """The largest ε of six places whose pure answer (ρ = ε²/2) the ``rho_left`` still
    pays: what "remains" means under zCDP."""
    if rho_left <= 0:
        return Decimal(0)
    with localcontext() as ctx:
        ctx.prec = 60
        micro = int((2 * rho_left).sqrt() * 1_000_000)
        while micro > 0 and Decimal(micro * micro) / 2_000_000_000_000 > rho_left:
            micro -= 1
        while Decimal((micro + 1) ** 2) / 2_000_000_000_000 <= rho_left:
            micro += 1
    return Decimal(micro) / 1_000_000


_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86_400, "week": 7 * 86_400}
_REFRESH = re.compile(r"\s*([1-9][0-9]{0,5})\s+(second|minute|hour|day|week|month)s?\s*")


@dataclass(frozen=True)
class Refresh:
    """A budget refresh window (``budget_refresh = "30 days"``, docs/budget.md): calendar
    windows, fixed in UTC and the same for every proxy and restart — ``count`` units from
    1970-01-01T00:00Z on (months: calendar months, so "1 month" is each UTC month).
    Only the spending inside the current window counts against a budget; chosen over a
    rolling window because it keeps the debit one conditional UPDATE on a row (a rolling
    window would sum the ledger's rows of the last 30 days on every debit)."""

    count: int
    unit: str

    @classmethod
    def parse(cls, text: str) -> Refresh:
        match = _REFRESH.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"must be a whole number of seconds, minutes, hours, days, weeks "
                             f"or months, e.g. \"30 days\", got {text!r}")
        return cls(int(match.group(1)), match.group(2))

    def window_end(self, now: int) -> int:
        """When the window holding ``now`` (seconds since the epoch) ends: the start of
        the next one, in seconds since the epoch."""
        if self.unit != "month":
            length = self.count * _UNITS[self.unit]
            return (now // length + 1) * length
        moment = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        month = (moment.year - 1970) * 12 + moment.month - 1
        following = (month // self.count + 1) * self.count
        start = datetime.datetime(1970 + following // 12, following % 12 + 1, 1,
                                  tzinfo=datetime.timezone.utc)
        return int(start.timestamp())

    def __str__(self) -> str:
        return f"{self.count} {self.unit}{'s' if self.count > 1 else ''}"
