"""What a client can learn or break beyond its answers (issue 13), with real clients over
real sockets: an internal error after the debit (item 2), cancels at random moments
(item 8), failed logins (item 9), SET SESSION AUTHORIZATION and the ledger's sums
(item 11)."""

from __future__ import annotations

import base64
import random
import re
import socket
import struct
import threading
from contextlib import contextmanager
from decimal import Decimal

import psycopg
import pytest

from proxy.users import secret_of
from proxy.wire.connection import INTERNAL_ERROR
from tests.factories import Served, served_rules
from tests.wireserver import backend_messages, serving_in_process, startup_message, typed

pytestmark = pytest.mark.postgres

SECRET = "secret 123"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One in-process server (trust auth, DuckDB) for the tests that reach into it;
    bob's budget pays for two queries at ε 0.1."""
    folder = tmp_path_factory.mktemp("served")
    served = Served.prepare(folder, served_rules() + "\n[analysts.bob]\nbudget = 0.25\n",
                            f"duckdb:///{folder / 'data.duckdb'}", 200)
    with serving_in_process(served.rules, served.backend) as proxy:
        yield proxy


@contextmanager
def failing_after_the_debit(proxy):
    """A bug in the engine once the query is paid for: an exception whose text must not
    reach the client."""
    engine = proxy.server.engine

    def answer(plan, view=None):
        raise RuntimeError(SECRET)

    engine.answer = answer
    try:
        yield
    finally:
        del engine.answer


def _budget(con) -> Decimal:
    return Decimal(con.execute("SHOW idp.budget").fetchone()[0])


# Item 2 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("prepare", [False, True], ids=["simple", "extended"])
def test_an_internal_error_after_the_debit_is_one_fixed_error_and_the_session_goes_on(
        served, prepare, caplog):
    with psycopg.connect(served.dsn("alice"), autocommit=True) as con:
        before = _budget(con)
        # Without parameters psycopg sends a simple Query; prepared, Parse/Bind/Execute.
        sql, params = (("SELECT COUNT(*) FROM people WHERE age > %s", (41,)) if prepare
                       else ("SELECT COUNT(*) FROM people WHERE age > 40", None))
        with failing_after_the_debit(served), pytest.raises(psycopg.Error) as failed:
            con.execute(sql, params, prepare=prepare)
        assert failed.value.sqlstate == "XX000"
        assert failed.value.diag.message_primary == INTERNAL_ERROR
        assert SECRET not in str(failed.value) and "RuntimeError" not in str(failed.value)
        assert _budget(con) == before - Decimal("0.1")  # the debit stands
        assert con.execute("SELECT COUNT(*) FROM people WHERE age > 50").fetchone()[0] > 0
    assert SECRET in caplog.text and "Traceback" in caplog.text  # the server log has it


def test_after_an_extended_error_everything_up_to_sync_is_skipped(served):
    """As PostgreSQL: one ErrorResponse, then nothing until Sync (a Query included);
    framed by hand, since drivers never send more after a failing Execute."""
    parse = typed(b"P", b"\0SELECT COUNT(*) FROM people WHERE age > 60\0\0\0")
    bind = typed(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))
    execute = typed(b"E", b"\0" + struct.pack("!i", 0))
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(startup_message("alice"))
        backend_messages(sock)
        with failing_after_the_debit(served):
            sock.sendall(parse + bind + execute + parse + bind + execute
                         + typed(b"Q", b"SELECT 1\0") + typed(b"S", b""))
            replies = backend_messages(sock)
        assert [kind for kind, _ in replies] == [b"1", b"2", b"E", b"Z"]
        assert SECRET.encode() not in replies[2][1]
        sock.sendall(typed(b"Q", b"SELECT COUNT(*) FROM people WHERE age > 61\0"))
        kinds = [kind for kind, _ in backend_messages(sock)]
        assert b"D" in kinds and b"E" not in kinds and kinds[-1] == b"Z"


# Item 8 ------------------------------------------------------------------------------------

def test_cancels_at_random_moments_give_57014_and_the_session_survives(proxy):
    """40 cancels, each at a random moment of a query: on BEGIN, COMMIT, a statement, a
    fetch or between them; every query answers or fails with 57014, and the connection
    keeps working."""
    chance = random.Random(13)
    outcomes = []
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        for number in range(40):  # distinct queries: each is computed, none cached
            cancel = threading.Timer(chance.uniform(0, 0.04), con.cancel_safe)
            cancel.start()
            try:
                con.execute(f"SELECT COUNT(*) FROM people WHERE age > {number}").fetchone()
                outcomes.append("answer")
            except psycopg.Error as exc:
                outcomes.append(exc.sqlstate)
            cancel.join()
        assert con.execute("SELECT COUNT(*) FROM people WHERE age > 99").fetchone()[0] >= 0
    assert set(outcomes) <= {"answer", "57014"}, outcomes
    assert "57014" in outcomes  # some cancels landed


# Item 9 ------------------------------------------------------------------------------------

def _login_refused(proxy, user: str, password: str | None = None) -> str:
    extra = {} if password is None else {"password": password}
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(proxy.dsn(user, **extra))
    return str(refused.value)


def _sasl_salt(port: int, user: str) -> bytes:
    """The salt the server offers ``user`` in the first SCRAM round (the exchange is
    then dropped)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(startup_message(user))
        assert backend_messages(sock, until=b"R")[-1][1][:4] == struct.pack("!i", 10)
        first = b"n,,n=,r=abcdefghijklmnop"
        sock.sendall(typed(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
        body = backend_messages(sock, until=b"R")[-1][1]
    assert body[:4] == struct.pack("!i", 11)
    return base64.b64decode(re.search(rb"s=([^,]+)", body).group(1))


def test_unknown_user_wrong_password_and_disabled_login_look_the_same(duckdb_url, tmp_path,
                                                                      caplog):
    served = Served.prepare(tmp_path, served_rules("scram"), duckdb_url, 50)
    with serving_in_process(served.rules, duckdb_url) as proxy:
        users = proxy.server.users
        users.add("bob", secret_of("right"))
        messages = {user: _login_refused(proxy, user, "wrong") for user in ("bob", "nobody")}
        # the mock salt of an unknown name is as stable as a real one
        assert _sasl_salt(proxy.port, "nobody") == _sasl_salt(proxy.port, "nobody")
        assert _sasl_salt(proxy.port, "bob") == _sasl_salt(proxy.port, "bob")
        users.disable("bob")
        disabled = _login_refused(proxy, "bob", "right")
    for user, message in [*messages.items(), ("bob", disabled)]:
        assert f'FATAL:  password authentication failed for user "{user}"' in message
    assert disabled == messages["bob"]
    assert 'user "bob": wrong password' in caplog.text
    assert 'user "nobody": no enabled login of this name' in caplog.text


def test_an_unknown_user_under_trust_learns_neither_the_rules_nor_the_analysts(served,
                                                                                caplog):
    message = _login_refused(served, "nobody")
    assert 'FATAL:  password authentication failed for user "nobody"' in message
    assert "rules" not in message and "alice" not in message
    assert "not declared" in caplog.text  # the reason, for the server log only


def test_login_failures_carry_sqlstate_28p01(served):
    """psycopg does not expose a failed login's SQLSTATE; read the ErrorResponse."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(startup_message("nobody"))
        ((_kind, body),) = backend_messages(sock, until=b"E")
    fields = {part[:1]: part[1:] for part in body.split(b"\0") if part}
    assert fields[b"C"] == b"28P01" and fields[b"S"] == b"FATAL"


# Item 11 -----------------------------------------------------------------------------------

def test_set_session_authorization_is_refused(served):
    with psycopg.connect(served.dsn("alice"), autocommit=True) as con:
        for sql in ("SET SESSION AUTHORIZATION bob", "SET SESSION AUTHORIZATION DEFAULT",
                    "SET LOCAL SESSION AUTHORIZATION 'bob'"):
            with pytest.raises(psycopg.Error) as refused:
                con.execute(sql)
            assert refused.value.sqlstate == "42501", sql
        assert con.execute("SHOW SESSION AUTHORIZATION").fetchone() == ("alice",)


def test_spent_is_the_sum_of_the_ledger_rows_whose_debit_took_effect(served):
    """docs/budget.md: a budget's spent equals the sum of ε over its ledger rows except
    `refused: budget` ones (which carry the ε that was asked for)."""
    with psycopg.connect(served.dsn("bob"), autocommit=True) as con:
        for age in (20, 30, 20, 40):  # two charged, one from the cache, one refused
            try:
                con.execute(f"SELECT COUNT(*) FROM people WHERE age > {age}")
            except psycopg.Error as exc:
                assert exc.sqlstate == "PB001"
    ledger = served.server.engine.ledger
    rows = [(entry[9], entry[6]) for entry in ledger.entries("bob")]  # status, epsilon
    assert [status for status, _ in rows] == [
        "charged", "charged", "served from cache", "refused: budget"]
    ((_, _, spent, _),) = ledger.budgets("bob")
    assert spent == sum(e for status, e in rows if status != "refused: budget") == \
        Decimal("0.2")
    assert sum(e for _, e in rows) != spent
