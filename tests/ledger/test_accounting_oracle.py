"""The zCDP accountant's ε(δ) against Google's ``dp-accounting`` (its RDP accountant) as
an oracle, on random mixed sequences of answers (issue 35 item 5).

A sequence mixes what the ledger records: Laplace answers at ε (ρ = ε²/2), draws of the
exponential mechanism at ε (ρ = ε²/8) and Gaussian answers of noise σ at sensitivity 1
(ρ = 1/(2σ²)). Given each as the Gaussian of the same ρ (whose Rényi curve is exactly
α·ρ), dp-accounting's conversion (the same Canonne–Kamath–Steinke / Balle et al. bound,
minimised over its list of orders) must agree with ours; given the Laplace answers as
Laplace (their exact, smaller Rényi curve), its ε must not pass ours, since ours
accounts them by an upper bound."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from proxy.accounting import epsilon_of, rho_budget

# orders α with α − 1 from 10⁻³ to 10⁵, log-spaced: fine enough that the grid's minimum is within
# 0.1 % of the infimum on these sequences
ORDERS = [1 + math.exp(math.log(1e-3) + i * (math.log(1e5) - math.log(1e-3)) / 799)
          for i in range(800)]


def _sequence(rng: random.Random) -> list[tuple[str, float]]:
    """1 to 150 answers: ε from 0.001 to 0.5, σ from 1 to 300."""
    kinds = [rng.choice(("laplace", "exponential", "gaussian")) for _ in range(rng.randint(1, 150))]
    return [(kind, rng.uniform(1.0, 300.0) if kind == "gaussian" else rng.uniform(0.001, 0.5))
            for kind in kinds]


def _rho(kind: str, value: float) -> float:
    """What the ledger records: ε²/2, ε²/8, or 1/(2σ²) (``value`` ε, or σ)."""
    return {"laplace": value * value / 2, "exponential": value * value / 8,
            "gaussian": 1 / (2 * value * value)}[kind]


def _oracle(events, delta: float) -> float:
    """dp-accounting's ε at δ of ``events``: ("gaussian", σ) or ("laplace", b) each
    (imported here: every test worker collects this module, and the import takes a
    second)."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    accountant = RdpAccountant(orders=ORDERS)
    for kind, scale in events:
        accountant.compose(dp_event.GaussianDpEvent(scale) if kind == "gaussian"
                           else dp_event.LaplaceDpEvent(scale))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("seed", range(16))
def test_random_mixed_sequences_convert_as_dp_accounting_does(seed):
    rng = random.Random(seed)
    sequence = _sequence(rng)
    delta = 10.0 ** -rng.randint(3, 12)
    rho = sum(_rho(kind, value) for kind, value in sequence)
    ours = epsilon_of(rho, delta)
    as_gaussians = _oracle([("gaussian", 1 / math.sqrt(2 * _rho(kind, value)))
                            for kind, value in sequence], delta)
    assert ours <= as_gaussians * (1 + 1e-9)  # a minimum over α > 1, not over a grid
    assert ours >= as_gaussians * (1 - 1e-3)
    with_laplace = _oracle([("laplace", 1 / value) if kind == "laplace"
                            else ("gaussian", 1 / math.sqrt(2 * _rho(kind, value)))
                            for kind, value in sequence], delta)
    assert with_laplace <= ours * (1 + 1e-9)


@pytest.mark.parametrize("budget, delta", [("1", "1e-6"), ("0.1", "1e-6"), ("10", "1e-9"),
                                           ("3", "0.001")])
def test_the_filters_rho_budget_stays_within_the_budget_by_the_oracle(budget, delta):
    """ρ_B spent as Gaussian answers: dp-accounting's ε at δ is the budget (to its grid)."""
    rho = float(rho_budget(Decimal(budget), Decimal(delta)))
    oracle = _oracle([("gaussian", 1 / math.sqrt(2 * rho))], float(delta))
    assert float(budget) * (1 - 1e-3) <= oracle <= float(budget) * (1 + 1e-3)
