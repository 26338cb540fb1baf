"""One person's tiny value (a subnormal double, or one near 10⁻²⁰⁰) inside a float
column's domain, on both backends: every statement is answered, and charged, exactly as
over the same data without it; and a domain narrower than 10⁻³⁰⁵ is answered at all.

PostgreSQL raises "value out of range: underflow" where a product or quotient of two
nonzero doubles rounds to 0, so a pushed-down ``x * x`` (STDDEV, VARIANCE), a sum
shrunk by a power of two (``* 0.5``: a domain reaching 10¹⁵), a unit's share of its
total or a bucket's scaled offset failed only when such a value was in scope: a
charged statement failed or not as one person's value was (the review of 2026-11-29,
F1 and F2). Each factor is now snapped first (``proxy.guards.snap``: 0, or at least
about 2⁻⁵⁰³ in magnitude, whose products with the statements' factors stay normal).
"""

from __future__ import annotations

import pytest

from proxy.errors import ProxyError
from proxy.session import Session
from tests.factories import open_engine, table_of_rows

# "tiny": a domain narrower than 1,024 parts a double holds (the window statement's
# scale of its buckets was infinite, sent as the literal inf: charged, then 58000)
DOMAINS = {"narrow": "[0, 100]", "wide": "[0, 1e15]", "signed": "[-1e15, 1e15]",
           "tiny": "[-1e-310, 1e-310]"}
TINY = {"base": None, "sub324": 5e-324, "sub310": 1e-310, "e200": 1e-200}
TYPES = {"person_id": "BIGINT", "g": "TEXT", "x": "DOUBLE PRECISION"}

RULES = """
[defaults]
epsilon_per_query = 0.25
budget_per_analyst = 100000
answer_cache = false
[analysts.ann]
""" + "".join(f"""
[tables.{domain}_{tiny}]
privacy_unit = "person_id"
[tables.{domain}_{tiny}.columns]
person_id = {{ type = "int" }}
g = {{ type = "text", keys = ["a", "b"] }}
x = {{ type = "float", domain = {bounds} }}
""" for domain, bounds in DOMAINS.items() for tiny in TINY)

STATEMENTS = [
    "SELECT SUM(x), AVG(x) FROM {t}",
    "SELECT STDDEV(x), VARIANCE(x), STDDEV_POP(x) FROM {t}",
    "SELECT g, VARIANCE(x), SUM(x) FROM {t} GROUP BY g",
    "SELECT MEDIAN(x), MAX(x) FROM {t} WHERE g = 'b'",
    "SELECT g, MAX(x), MEDIAN(x) FROM {t} GROUP BY g",
    "SELECT SUM(x) FILTER (WHERE g = 'a'), COUNT(DISTINCT CASE WHEN g = 'b' THEN person_id "
    "END) FROM {t}",
    "SELECT g, AVG(x), STDDEV(x) FROM {t} GROUP BY ROLLUP(g)",
]


def _rows(tiny: float | None) -> list[tuple]:
    """120 people with 1 to 3 rows each; person 1's rows hold ``tiny`` (else 1.5)."""
    rows = [(person, "ab"[(person + k) % 2], float((person * 7 + k) % 97) + 0.5)
            for person in range(1, 121) for k in range(1 + person % 3)]
    return [(p, g, tiny if p == 1 and tiny is not None else x) for p, g, x in rows]


@pytest.fixture(scope="module")
def engine(module_backend_url):
    tables = {f"{domain}_{tiny}": table_of_rows(_rows(value), TYPES)
              for domain in DOMAINS for tiny, value in TINY.items()}
    with open_engine(module_backend_url, RULES, tables) as opened:
        yield opened


def _outcome(engine, sql: str) -> tuple:
    """What an analyst sees of ``sql`` but the noisy numbers: answered (with how many
    rows) or the refusal's SQLSTATE, and what it was charged."""
    session = Session.open(engine, "ann")
    before = engine.ledger.remaining("ann")
    try:
        answers = list(session.execute(sql))
        seen = ("answered", [len(answer.rows) for answer in answers])
    except ProxyError as error:
        seen = (error.sqlstate, error.message)
    return seen, before - engine.ledger.remaining("ann")


@pytest.mark.parametrize("domain", list(DOMAINS))
@pytest.mark.parametrize("statement", STATEMENTS)
def test_a_tiny_value_changes_neither_the_outcome_nor_the_charge(engine, domain, statement):
    outcomes = {tiny: _outcome(engine, statement.format(t=f"{domain}_{tiny}"))
                for tiny in TINY}
    assert outcomes["base"][0][0] == "answered", outcomes["base"]
    assert all(outcome == outcomes["base"] for outcome in outcomes.values()), outcomes
