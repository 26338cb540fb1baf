"""The analyser refuses what it cannot handle in one line with a stable SQLSTATE, never
with an internal error (issue 30 item 6: ``SELECT EXISTS (SELECT 1 FROM people)`` was
``XX000``, a KeyError). Statements are grown from sqlglot's own trees: each is a
statement of the BI corpus and the written tests with one subtree swapped for a subtree
of another (the other's clause, condition, function, subquery, literal...), so every
construct the grammar parsed somewhere meets every place it can go. A fixed seed keeps
the run the same in CI; ``FUZZ_STATEMENTS`` asks for more."""

from __future__ import annotations

import os
import random

import pytest
from sqlglot import exp

from proxy.analyze import parse_statements
from proxy.errors import ProxyError
from tests.corpora import CORPORA, DEMO, checking_session

STATEMENTS = int(os.environ.get("FUZZ_STATEMENTS", "1500"))


def _corpus_trees() -> list[exp.Expression]:
    trees = []
    for _, _, corpus, _ in CORPORA:
        for sql in corpus:
            try:
                trees.extend(parse_statements(sql))
            except ProxyError:
                continue
    extra = ["SELECT EXISTS (SELECT 1 FROM people)",
             "SELECT COUNT(*) FROM people WHERE age IN (SELECT age FROM people)",
             "SELECT (SELECT MAX(income) FROM people) + 1",
             "SELECT COUNT(*) FROM people p, regions r WHERE p.region = r.code",
             "SELECT COUNT(*) FROM people WHERE region LIKE 'n%' OR name ILIKE '%x'",
             "SELECT region, GROUPING(region), COUNT(*) FROM people GROUP BY ROLLUP (region)",
             "SELECT COUNT(*) OVER (), ROW_NUMBER() OVER (ORDER BY age) FROM people"]
    for sql in extra:
        trees.extend(parse_statements(sql))
    return trees


def _grafted(trees: list[exp.Expression], rng: random.Random) -> str:
    """One tree with a random node replaced by a copy of a random node of another."""
    host = rng.choice(trees).copy()
    donor = rng.choice(trees)
    sites = [node for node in host.walk() if node.parent is not None]
    parts = [node for node in donor.walk() if node.parent is not None]
    if sites and parts:
        rng.choice(sites).replace(rng.choice(parts).copy())
    return host.sql(dialect="postgres")


def test_no_statement_grown_from_the_grammar_meets_an_internal_error():
    rng = random.Random(29_30)
    trees = _corpus_trees()
    internal, outcomes = [], {"plan": 0, "refused": 0}
    for _ in range(STATEMENTS):
        try:
            sql = _grafted(trees, rng)
        except Exception:  # sqlglot cannot render the graft: not a statement anyone sends
            continue
        try:
            checking_session(DEMO).check(sql)
            outcomes["plan"] += 1
        except ProxyError as exc:
            if exc.sqlstate == "XX000" or len(exc.message.splitlines()) > 1:
                internal.append((sql, exc.sqlstate, exc.message))
            outcomes["refused"] += 1
        except Exception as exc:  # noqa: BLE001 — exactly what the test is looking for
            internal.append((sql, type(exc).__name__, str(exc)))
    assert internal == [], internal[:5]
    assert outcomes["plan"] > STATEMENTS // 20 and outcomes["refused"] > STATEMENTS // 4


@pytest.mark.parametrize("sql, sqlstate", [
    ("SELECT region, COUNT(*) JOIN people USING (person_id) GROUP BY 1", "42601"),
    ("SELECT EXISTS(SELECT 1 FROM (SELECT region FROM people) AS v)", "0A000"),
    ("SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (north') FROM people", "42601"),
    ("SELECT COUNT(*) AS age FROM people GROUP BY region HAVING *", "42601"),
    ("SELECT COUNT(*) FROM people WHERE *", "42601"),
])
def test_the_fuzzer_s_finds_are_refused_in_one_line(sql, sqlstate):
    """What the fuzzer grew once met a KeyError (a JOIN with no FROM; a subquery in a
    FROM-less SELECT), sqlglot's TokenError (an unclosed quote) or, compiled, its
    TypeError (``HAVING *`` joined to a condition): now a refusal."""
    with pytest.raises(ProxyError) as refused:
        checking_session(DEMO).check(sql)
    assert refused.value.sqlstate == sqlstate and "\n" not in refused.value.message
