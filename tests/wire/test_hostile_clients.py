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
