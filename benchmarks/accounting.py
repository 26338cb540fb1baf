"""How long a budget lasts under the pure and the zcdp accountant (issue 35).

    python benchmarks/accounting.py [--budget 1] [--delta 1e-6]

Prints (1) how many answers of a given ε fit one budget: the pure sum (budget / ε) and the
zCDP filter (ρ_B / (ε²/2) for Laplace or other ε-DP answers, ρ_B / (ε²/8) for the
exponential mechanism), ρ_B the largest ρ whose Canonne–Kamath–Steinke ε at δ is within
the budget (proxy/accounting.py, the code the ledger runs); (2) for k COUNTs of
sensitivity 1 sharing the budget equally, the Laplace noise's standard deviation
(√2/ε per answer) under either accountant, and the Gaussian's under zcdp (1/√(2ρ));
(3) the ledger itself: COUNTs at ε 0.02 asked through the engine until refused, on a
DuckDB file, both accountants (issue 35's first goal); (4) its second: 100 COUNTs with
Gaussian noise (``SET idp.noise = 'gaussian'``, DP) at the largest ε whose 100 answers
fit the budget, their σ = 1/ε and the standard deviation measured from the answers'
errors. Arithmetic only in (1)-(2).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.accounting import rho_budget  # noqa: E402


def answers_table(budget: Decimal, delta: Decimal) -> None:
    rho = rho_budget(budget, delta)
    print(f"budget epsilon {budget} at delta {delta}: zCDP filter rho_B = {rho}")
    print(f"{'epsilon per answer':>18} | {'pure':>7} | {'zcdp (Laplace)':>14} | "
          f"{'zcdp (exp. mech.)':>17}")
    for epsilon in ("0.001", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1"):
        e = Decimal(epsilon)
        if e > budget:
            continue
        pure = int(budget / e)
        laplace, exponential = int(rho / (e * e / 2)), int(rho / (e * e / 8))
        print(f"{epsilon:>18} | {pure:>7} | {laplace:>14} | {exponential:>17}")


def noise_table(budget: Decimal, delta: Decimal) -> None:
    rho = float(rho_budget(budget, delta))
    print(f"\nk COUNTs (sensitivity 1) sharing epsilon {budget} at delta {delta}: "
          "noise std per answer")
    print(f"{'k':>6} | {'pure sum':>9} | {'zcdp ledger':>11} | {'ratio':>5} | "
          f"{'zcdp Gaussian':>13}")
    for k in (1, 10, 20, 30, 50, 100, 1000):
        pure = math.sqrt(2) * k / float(budget)
        zcdp = math.sqrt(2) / math.sqrt(2 * rho / k)
        print(f"{k:>6} | {pure:>9.1f} | {zcdp:>11.1f} | {pure / zcdp:>5.2f} | "
              f"{zcdp / math.sqrt(2):>13.1f}")


def through_the_ledger() -> None:
    from proxy.backends import open_backend
    from proxy.engine import Engine
    from proxy.errors import BudgetExhausted
    from proxy.rules import parse_rules
    from proxy.session import Session
    from tests.factories import load_people, people_table

    print("\nthrough the engine: COUNTs at epsilon 0.02, budget 1 (zcdp at delta 1e-6), "
          "until refused")
    with tempfile.TemporaryDirectory() as folder:
        url = f"duckdb:///{folder}/bench.duckdb"
        load_people(url, 200)
        backend = open_backend(url)
        for name, accounting in (("pure", ""), ("zcdp", 'accounting = "zcdp"\n'
                                                         "accounting_delta = 1e-6")):
            rules = parse_rules(f"[defaults]\nbudget_per_analyst = 1\n{accounting}\n"
                                f"[analysts.{name}]\n" + people_table())
            session = Session.open(Engine(rules, backend), name)
            list(session.execute("SET idp.epsilon = 0.02"))
            answered = 0
            try:
                while True:
                    list(session.execute(f"SELECT COUNT(*) FROM people WHERE age > "
                                         f"{answered % 120} AND person_id >= {answered // 120}"))
                    answered += 1
            except BudgetExhausted:
                pass
            goal = " (issue 35's goal: at least 110)" if name == "zcdp" else ""
            print(f"  {name}: {answered} answers{goal}")
        backend.close()


def gaussian_counts(budget: Decimal, delta: Decimal, k: int = 100) -> None:
    """k distinct COUNTs with one true answer, Gaussian noise, sharing the budget."""
    import statistics

    import duckdb

    from proxy.accounting import largest_epsilon
    from proxy.backends import open_backend
    from proxy.engine import Engine
    from proxy.rules import parse_rules
    from proxy.session import Session
    from tests.factories import load_people, people_table

    epsilon = largest_epsilon(rho_budget(budget, delta) / k)
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/bench.duckdb"
        load_people(f"duckdb:///{path}", 400)
        with duckdb.connect(path) as con:
            truth = con.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchone()[0]
        backend = open_backend(f"duckdb:///{path}")
        rules = parse_rules(f'[defaults]\nmodel = "dp"\nbudget_per_analyst = {budget}\n'
                            f'accounting = "zcdp"\naccounting_delta = {delta}\n'
                            f"[analysts.g]\n" + people_table(max_rows_per_unit=1))
        session = Session.open(Engine(rules, backend), "g")
        list(session.execute("SET idp.noise = 'gaussian'"))
        list(session.execute(f"SET idp.epsilon = {epsilon}"))
        errors = [list(session.execute(f"SELECT COUNT(*) FROM people WHERE age > 30 AND "
                                       f"person_id > {-number}"))[0].rows[0][0] - truth
                  for number in range(1, k + 1)]
        left = session.engine.ledger.remaining("g")
        backend.close()
    print(f"\n{k} Gaussian COUNTs (DP, sensitivity 1) sharing epsilon {budget} at delta "
          f"{delta} under zcdp: idp.epsilon = {epsilon} each (rho {epsilon ** 2 / 2}),")
    print(f"  sigma = 1/epsilon = {1 / float(epsilon):.1f} (goal <= 46; Laplace: pure sum "
          f"{math.sqrt(2) * k / float(budget):.1f}, zcdp ledger "
          f"{math.sqrt(2) / float(epsilon):.1f}); measured std of the {k} errors "
          f"{statistics.pstdev(errors, 0):.1f} (root mean square); one more answer may take "
          f"epsilon {left}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="1")
    parser.add_argument("--delta", default="1e-6")
    parser.add_argument("--no-engine", action="store_true", help="arithmetic only")
    args = parser.parse_args()
    budget, delta = Decimal(args.budget), Decimal(args.delta)
    answers_table(budget, delta)
    noise_table(budget, delta)
    if not args.no_engine:
        through_the_ledger()
        gaussian_counts(budget, delta)


if __name__ == "__main__":
    main()
