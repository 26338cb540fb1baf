"""SPEC §9's time quantum: with `[defaults] time_quantum_ms`, a private answer — fresh,
from the cache, or failed — is not returned before a whole number of quanta. Only lower
bounds are asserted (sleep never returns early); how much later is not a promise."""

from __future__ import annotations

import time

import pytest

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import BudgetExhausted
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.timing import padded
from tests.factories import ENGINE_RULES, ODD, load, people
from tests.probes import run

pytestmark = pytest.mark.postgres


def _took(action) -> float:
    start = time.monotonic()
    action()
    return time.monotonic() - start


def test_a_block_longer_than_one_quantum_is_padded_to_two():
    def work():
        with padded(200):
            time.sleep(0.25)
    assert _took(work) >= 0.4


def test_a_block_that_raises_is_padded_and_still_raises():
    def work():
        with pytest.raises(ZeroDivisionError), padded(300):
            _ = 1 / 0
    assert _took(work) >= 0.3


def _session(url: str, analyst: str, rules_text: str = ENGINE_RULES):
    load(url, {"people": people(), "odd": ODD})
    rules = parse_rules(rules_text.replace('model = "idp"', 'model = "idp"\ntime_quantum_ms = 300'))
    assert rules.defaults.time_quantum_ms == 300
    return Session.open(Engine(rules, open_backend(url)), analyst)


def test_private_answers_fresh_and_cached_wait_for_the_quantum(backend_url):
    zoe = _session(backend_url, "zoe")
    query = "SELECT MEDIAN(income) FROM people WHERE age > 40"
    answers = []
    assert _took(lambda: answers.extend(run(zoe, query))) >= 0.3
    assert _took(lambda: answers.extend(run(zoe, query))) >= 0.3
    assert answers[0].rows == answers[1].rows  # the second came from the cache
    assert answers[1].privacy["epsilon_spent"] == 0


def test_a_refusal_from_the_ledger_waits_too(backend_url):
    alice = _session(backend_url, "alice", ENGINE_RULES.replace("[analysts.alice]\nbudget = 1.0",
                                                              "[analysts.alice]\nbudget = 0.1"))

    def refused():
        with pytest.raises(BudgetExhausted):
            run(alice, "SELECT COUNT(*) FROM people WHERE age > 0")  # costs 0.3
    assert _took(refused) >= 0.3
