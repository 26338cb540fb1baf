"""A hostile or careless client below any driver: messages a driver never sends, batches
sent without reading the replies, portals never closed. Each costs its own session at
most and gets PostgreSQL's answer to the same bytes. One real server, real sockets."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import psycopg
import pytest

from tests.factories import Served, served_rules
from tests.wireserver import backend_messages, startup_message, typed

pytestmark = pytest.mark.postgres  # the catalog is a PostgreSQL


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``idp-proxy serve`` over the people table (DuckDB), alice logging in by trust."""
    folder = tmp_path_factory.mktemp("hostile")
    served = Served.prepare(folder, served_rules(), f"duckdb:///{folder / 'data.duckdb'}", 200)
    with served.serve() as proxy:
        yield proxy


def raw(proxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=20)
    sock.sendall(startup_message("alice"))
    backend_messages(sock)
    return sock


def kinds(messages) -> list[bytes]:
    return [kind for kind, _ in messages]


def sqlstates(messages) -> list[str]:
    return [re.search(rb"C(\w{5})\0", body).group(1).decode()
            for kind, body in messages if kind == b"E"]


def query(sql: str) -> bytes:
    return typed(b"Q", sql.encode() + b"\0")


SYNC = typed(b"S", b"")


def peak_memory_mib(proxy) -> int:
    status = Path(f"/proc/{proxy.process.pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) // 1024


@pytest.mark.parametrize("sql", ["SELECT", "SELECT FROM generate_series(1, 3)"])
def test_a_query_of_no_column_is_described_as_postgresql_describes_it(server, sql):
    """PostgreSQL sends a RowDescription of no field before the rows of ``SELECT``; the
    proxy sent the rows alone and psycopg lost the session ("server sent data without
    prior row description")."""
    with psycopg.connect(server.dsn("alice"), autocommit=True) as con:
        for prepare in (False, True):
            cursor = con.execute(sql, prepare=prepare)
            assert cursor.description == []
            assert len(cursor.fetchall()) == (1 if sql == "SELECT" else 3)
        assert con.execute("SET application_name = 'x'").description is None
        assert con.execute("SELECT 1").fetchone() == (1,)


def received(sock: socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the connection"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def test_a_client_that_pipelines_without_reading_is_not_buffered_without_bound(server):
    """5,000 Describes of a statement of 100 long-named columns (45 KB sent at once, the
    replies not read): the server held every reply to one read's messages before it
    waited for the client (146 MB more at its peak here; 4 GB from 900 KB of Describes of
    1,600 columns); now it waits once 1 MB is unread (3 MB more), and the client gets
    every reply in order."""
    columns = ", ".join(f"1 AS c{i:060d}" for i in range(100))
    sock = raw(server)
    sock.sendall(typed(b"P", f"wide\0SELECT {columns}\0\0\0".encode()) + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"Z"]
    describe = typed(b"D", b"Swide\0")
    sock.sendall(describe + SYNC)
    one = sum(5 + len(body) for _, body in backend_messages(sock)[:-1])  # t and T
    before = peak_memory_mib(server)
    count = 5000
    sock.sendall(describe * count + SYNC)
    sock.settimeout(20)
    data = received(sock, count * one + 6)
    assert data.endswith(b"Z\0\0\0\5I") and data.count(b"T\0\0") >= count
    assert peak_memory_mib(server) - before < 30
    sock.sendall(query("SELECT 1"))
    assert kinds(backend_messages(sock)) == [b"T", b"D", b"C", b"Z"]
