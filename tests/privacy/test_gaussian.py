"""Gaussian noise (issue 35 item 2): ``SET idp.noise = 'gaussian'`` or the owner's
``[defaults] noise``, for DP's COUNT, SUM and AVG under the zcdp accountant. Its 95 %
bound is valid, the answers' spread over the wire is the σ = Δ/ε its ledger ρ = ε²/2
says, histograms take ρ/2 per cell, and it is refused where it cannot be accounted."""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import duckdb
import psycopg
import pytest

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import BadSetting, RulesError
from proxy.privacy.contribution_bounds import bounded_range_epsilon
from proxy.privacy.mechanisms import discrete_gaussian_interval
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import Served, load_people, people_table

ZCDP = 'accounting = "zcdp"\naccounting_delta = 1e-6'


def _rules(accounting: str = ZCDP, extra: str = "", model: str = "dp") -> str:
    return (f'[server]\nauth = "trust"\n[defaults]\nmodel = "{model}"\nbudget_per_analyst = 1000\n'
            f"{accounting}\n{extra}\n[analysts.alice]\n"
            + people_table(max_rows_per_unit=1))


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(2), Fraction(50), Fraction(10**6, 7)])
def test_the_interval_holds_and_is_not_loose(sigma2):
    """P(|Z| > k) of the discrete Gaussian, summed exactly, is at most 5 % at the bound
    and above 5 % two steps inside it (the continuous normal's quantile, rounded up)."""
    k = discrete_gaussian_interval(sigma2)
    weights = lambda z: math.exp(-z * z / (2 * float(sigma2)))  # noqa: E731
    reach = int(40 * math.sqrt(float(sigma2))) + 40
    total = weights(0) + 2 * sum(weights(z) for z in range(1, reach))
    def tail(j: int) -> float:
        return 2 * sum(weights(z) for z in range(j + 1, reach)) / total
    assert tail(k) <= 0.05
    assert k < 2 or tail(k - 2) > 0.05


def test_gaussian_counts_over_the_wire_spread_as_their_ledger_rho_says(tmp_path):
    """300 distinct COUNTs with one true answer at ε 0.5 (σ = 2): the ledger records
    ρ = ε²/2 = 0.125 for each, labelled gaussian, and Σ(answer − truth)²/σ² with σ² =
    1/(2ρ) lies within χ²₃₀₀'s central 1 − 10⁻⁶ (a Laplace answer's spread, twice the
    variance, would fall far above). The notice gives the 95 % bound ±4."""
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    served = Served.prepare(tmp_path, _rules(), url, 400)
    with duckdb.connect(str(tmp_path / "data.duckdb")) as con:
        truth = con.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchone()[0]
    draws = 300
    with served.serve() as proxy, psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        notices: list[str] = []
        con.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        con.execute("SET idp.noise = 'gaussian'")
        con.execute("SET idp.epsilon = 0.5")
        answers = [con.execute(f"SELECT COUNT(*) FROM people WHERE age > 30 "
                               f"AND person_id > {-number}").fetchone()[0]
                   for number in range(1, draws + 1)]
    rows = [line for line in served.admin("ledger", "--format", "csv").stdout.splitlines()[1:]
            if "gaussian" in line]
    assert len(rows) == draws and all(row.endswith(",0.125") for row in rows)
    sigma2 = 1 / (2 * 0.125)
    statistic = sum((answer - truth) ** 2 for answer in answers) / sigma2
    # χ²_k quantiles by Wilson–Hilferty (accurate to <1 % at k = 300)
    def quantile(p: float) -> float:
        z = NormalDist().inv_cdf(p)
        return draws * (1 - 2 / (9 * draws) + z * math.sqrt(2 / (9 * draws))) ** 3
    assert quantile(5e-7) < statistic < quantile(1 - 5e-7)
    assert len(notices) >= draws and all("(discrete Gaussian)" in text and "95% error bound count ±4" in text
               for text in notices[-draws:]), notices[-1]


def _session(url: str, rules: str) -> Session:
    load_people(url, 300)
    return Session.open(Engine(parse_rules(rules), open_backend(url)), "alice")


def test_the_owner_default_applies_to_dp_and_histograms_take_half_the_rho(backend_url):
    """``[defaults] noise = "gaussian"``: a COUNT at ε 0.1 has σ = 10 (bound ⌈19.6⌉ = 20),
    each cell of a GROUP BY histogram ρ/2 (σ = 10√2: bound 28), a SUM and an AVG are
    Gaussian too; an iDP session keeps Laplace (and SHOW says so); the ledger's ρ is ε²/2 per aggregate."""
    session = _session(backend_url, _rules(extra='noise = "gaussian"'))
    list(session.execute("SET idp.epsilon = 0.1"))
    count = list(session.execute("SELECT COUNT(*) FROM people WHERE age > 30"))[0]
    assert count.privacy["mechanism"] == "discrete Gaussian"
    assert count.privacy["ci95"]["count"] == [20.0] and count.privacy["rho_spent"] == 0.005
    grouped = list(session.execute("SELECT region, COUNT(*) FROM people GROUP BY region"))[0]
    assert set(grouped.privacy["ci95"]["count"]) == {28.0}
    both = list(session.execute("SELECT SUM(income), AVG(age) FROM people"))[0]
    assert both.privacy["mechanism"].count("discrete Gaussian") == 3
    assert both.privacy["rho_spent"] == 0.01
    assert list(session.execute("SHOW idp.noise"))[0].rows == [("gaussian",)]
    list(session.execute("SET idp.model = 'idp'"))
    assert list(session.execute("SHOW idp.noise"))[0].rows == [("laplace",)]
    idp = list(session.execute("SELECT COUNT(*) FROM people WHERE age > 31"))[0]
    assert idp.privacy["mechanism"] == "discrete Laplace"
    labels = [entry[5].split(":")[0] for entry in session.engine.ledger.entries("alice")]
    assert labels == ["dp gaussian"] * 3 + ["idp"]
    session.engine.backend.close()


@pytest.mark.parametrize("accounting, model, problem", [
    ("", "dp", "needs the zcdp accountant"),
    (ZCDP, "idp", "is for idp.model = 'dp'"),
])
def test_gaussian_is_refused_where_it_cannot_be_accounted(duckdb_url, accounting, model,
                                                          problem):
    """Under the pure accountant (no δ to state it at) and under iDP: one line, SQLSTATE
    22023, nothing charged."""
    session = _session(duckdb_url, _rules(accounting, model=model))
    list(session.execute("SET idp.noise = 'gaussian'"))
    before = session.engine.ledger.budgets("alice")
    with pytest.raises(BadSetting, match=problem) as refused:
        list(session.execute("SELECT COUNT(*) FROM people WHERE age > 30"))
    assert refused.value.sqlstate == "22023" and "\n" not in str(refused.value)
    assert session.engine.ledger.entries("alice") == []
    assert session.engine.ledger.budgets("alice") == before
    session.engine.backend.close()


def test_the_rules_refuse_a_gaussian_default_without_zcdp():
    with pytest.raises(RulesError, match="needs accounting"):
        parse_rules(_rules("", extra='noise = "gaussian"'))


def test_gaussian_sums_are_clipped_to_a_drawn_bound_at_the_datas_scale(duckdb_url):
    """SUM and AVG with Gaussian noise clip each unit to a bound drawn from a third of
    the ρ (privacy/contribution_bounds.py): over 300 people of incomes near 30,000 at
    ε 1, SUM(income)'s 95 % bound is mostly that of a rung of 500,000 or below, not the
    domain's 1,000,000 per person (±1.96·10⁶), AVG's a few thousand, both land within
    their bounds, and the ledger's ρ is still ε²/2 per aggregate."""
    load_people(duckdb_url, 300)
    with duckdb.connect(duckdb_url.removeprefix("duckdb:///")) as raw:
        incomes = [row[0] for row in raw.execute("SELECT income FROM people").fetchall()]
    session = Session.open(Engine(parse_rules(_rules(extra='noise = "gaussian"')),
                                  open_backend(duckdb_url)), "alice")
    true_sum, true_avg = sum(incomes), sum(incomes) / len(incomes)
    list(session.execute("SET idp.epsilon = 1"))
    bounds, within = [], []
    for i in range(20):  # a new text each time: a repeated one is answered from the cache
        answer = list(session.execute(
            f"SELECT SUM(income), AVG(income) FROM people WHERE age >= -{i}"))[0]
        (noisy_sum, noisy_avg), = answer.rows
        assert answer.privacy["mechanism"].count("its bound by the exponential mechanism") == 2
        assert answer.privacy["rho_spent"] == 1.0, answer.privacy
        bound, avg_bound = answer.privacy["ci95"]["sum"][0], answer.privacy["ci95"]["avg"][0]
        bounds.append((bound, avg_bound))
        within.append((abs(noisy_sum - true_sum) <= bound, abs(noisy_avg - true_avg) <= avg_bound))
    # The top rung (±2.4·10⁶ with a third of ρ gone) is drawn with probability about
    # 0.1, so in more than half of 20 with one below 10⁻⁵; each bound holds with
    # probability ≥ 95 % (clipping only near the largest incomes), 14 of 20 fail below 10⁻⁴.
    assert sorted(bounds)[10][0] < 1.3e6 and sorted(b for _, b in bounds)[10] < 5_000, bounds
    assert sum(s for s, _ in within) >= 14 and sum(a for _, a in within) >= 14, within
    session.engine.backend.close()


@pytest.mark.parametrize("rho", [Fraction(1, 6), Fraction(1, 600), Fraction(2, 3) * Fraction(
    1, 10**6), Fraction(50), Fraction(1, 8 * 10**12)])
def test_a_gaussian_sums_bound_draw_stays_within_its_share_of_rho(rho):
    """The exponential mechanism at ε is ε²/8-zCDP: the bound's ε is the largest of six
    places with ε²/8 ≤ its ρ (rounded down, never up), and one more millionth would not fit."""
    epsilon = bounded_range_epsilon(rho)
    assert epsilon * epsilon / 8 <= rho < (epsilon + Fraction(1, 10**6)) ** 2 / 8
    assert 10**6 % epsilon.denominator == 0
