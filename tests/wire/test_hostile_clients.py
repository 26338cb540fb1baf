"""A hostile or careless client below any driver: messages a driver never sends, batches
sent without reading the replies, portals never closed. Each costs its own session at
most and gets PostgreSQL's answer to the same bytes. One real server, real sockets."""

from __future__ import annotations

import re
import socket
import struct
import time
from pathlib import Path

import psycopg
import pytest

from proxy.wire import connection
from tests.factories import Served, served_rules
from tests.wireserver import backend_messages, serving_in_process, startup_message, typed

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


def bind(portal: bytes, statement: bytes, result_formats: tuple[int, ...] = ()) -> bytes:
    formats = struct.pack(f"!h{len(result_formats)}h", len(result_formats), *result_formats)
    return typed(b"B", portal + b"\0" + statement + b"\0\0\0\0\0" + formats)


def execute(portal: bytes, max_rows: int = 0) -> bytes:
    return typed(b"E", portal + b"\0" + struct.pack("!i", max_rows))


def parse(name: bytes, sql: str) -> bytes:
    return typed(b"P", name + b"\0" + sql.encode() + b"\0\0\0")


def test_a_named_portal_ends_with_its_transaction(server):
    """As in PostgreSQL, Sync outside a transaction block ends the portals: they were
    kept for the session, each holding the rest of its rows, without bound."""
    sock = raw(server)
    sock.sendall(parse(b"s", "SELECT generate_series(1, 10)") + bind(b"p", b"s")
                 + execute(b"p", 1) + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"2", b"D", b"s", b"Z"]
    sock.sendall(execute(b"p", 1) + SYNC)
    replies = backend_messages(sock)
    assert sqlstates(replies) == ["34000"]
    sock.sendall(query("BEGIN"))
    backend_messages(sock)
    sock.sendall(bind(b"p", b"s") + execute(b"p", 1) + SYNC)
    assert kinds(backend_messages(sock)) == [b"2", b"D", b"s", b"Z"]
    sock.sendall(execute(b"p", 2) + SYNC)  # within the block it goes on
    assert kinds(backend_messages(sock)) == [b"D", b"D", b"s", b"Z"]
    sock.sendall(query("COMMIT"))
    backend_messages(sock)
    sock.sendall(execute(b"p", 1) + SYNC)
    assert sqlstates(backend_messages(sock)) == ["34000"]


BIG = "SELECT repeat('x', 1000000), 1 FROM generate_series(1, 70)"  # 70 MB


def test_rows_held_for_later_executes_are_bounded(server):
    """An Execute with a row limit read its whole catalog result into memory and its
    portal held it: 100,000 rows of 1 KB a portal grew the server by 2.5 GB in 21
    portals; a row of 1 MB each, 100 GB. Now a session's portals hold 64 MB: beyond,
    54000, the session goes on, and the same rows stream when read without a limit."""
    sock = raw(server)
    sock.sendall(parse(b"big", BIG) + bind(b"", b"big") + execute(b"", 1) + SYNC)
    replies = backend_messages(sock)
    assert kinds(replies)[:2] == [b"1", b"2"] and sqlstates(replies) == ["54000"]
    assert "64 MB" in replies[2][1].decode()
    sock.sendall(bind(b"", b"big") + execute(b"") + SYNC)
    assert kinds(backend_messages(sock)) == [b"2"] + [b"D"] * 70 + [b"C", b"Z"]


def test_a_catalog_result_in_mixed_formats_is_bounded(server):
    """A column asked as text and another as binary: the catalog query runs once a
    format and its rows are held, which held 4 GB for 20,000 rows of 100 KB; now 64 MB
    at most (54000), and one format still streams."""
    sock = raw(server)
    sock.sendall(parse(b"big", BIG) + bind(b"", b"big", (0, 1)) + execute(b"") + SYNC)
    replies = backend_messages(sock)
    assert kinds(replies)[:2] == [b"1", b"2"] and sqlstates(replies) == ["54000"]
    sock.sendall(bind(b"", b"big", (1,)) + execute(b"") + SYNC)
    assert kinds(backend_messages(sock)) == [b"2"] + [b"D"] * 70 + [b"C", b"Z"]
    sock.sendall(query("SELECT 1"))
    assert kinds(backend_messages(sock)) == [b"T", b"D", b"C", b"Z"]


def replies_until_closed_or_quiet(sock: socket.socket) -> list[bytes]:
    """The types of the messages the server sends, up to its closing the connection
    (b"closed") or half a second of silence (b"quiet")."""
    sock.settimeout(0.5)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        end = b"quiet"
    else:
        end = b"closed"
    found = []
    while len(data) >= 5:
        found.append(data[:1])
        data = data[1 + struct.unpack("!i", data[1:5])[0]:]
    return found + [end]


@pytest.mark.parametrize(("message", "replies", "then"), [
    # a type no frontend message has, and a second StartupMessage (type 0): FATAL 08P01
    (typed(b"z", b"abc"), [b"E", b"closed"], None),
    (startup_message("alice"), [b"E", b"closed"], None),
    # FunctionCall: refused in its own cycle, as PostgreSQL refuses an unknown function
    (typed(b"F", b"\0\0\4\xd2\0\0\0\0\0\0\0\0"), [b"E", b"Z", b"quiet"], [b"T", b"D", b"C", b"Z"]),
    # a Bind of -1 parameters, read as none before: PostgreSQL reads a count unsigned,
    # 65,535 values the message does not hold (08P01; here FATAL, as every framing error),
    # after the Parse before it is answered
    (parse(b"s", "SELECT 1") + typed(b"B", b"\0s\0\0\0\xff\xff\0\0") + SYNC,
     [b"1", b"E", b"closed"], None),
    # a length no message has, after a query: the query answered first, as PostgreSQL
    # reads one message at a time (the batch's answers were dropped)
    (query("SELECT 1") + b"X\0\0\0\2", [b"T", b"D", b"C", b"Z", b"E", b"closed"], None),
    # COPY data outside a COPY: ignored
    (typed(b"d", b"abc") + typed(b"c", b"") + typed(b"f", b"x\0"), [b"quiet"],
     [b"T", b"D", b"C", b"Z"]),
])
def test_a_message_no_driver_sends_gets_postgresqls_answer(server, message, replies, then):
    """Each was refused with 0A000 and the session then skipped every message up to a
    Sync, so a client of the simple protocol (which sends none) waited forever for the
    answers of its next queries. PostgreSQL 15's answers to the same bytes."""
    sock = raw(server)
    sock.sendall(message)
    assert replies_until_closed_or_quiet(sock) == replies
    if then:
        sock.settimeout(20)
        sock.sendall(query("SELECT 1"))
        assert kinds(backend_messages(sock)) == then


def test_the_sessions_statement_timeout_stops_a_statement(server):
    """``SET statement_timeout`` was shown back and ignored: an OR of 4,000 terms, which
    takes seconds to analyse, was answered and charged after 5.4 s under a timeout of
    300 ms (load 8). Now the shorter of the session's and the server's stops it, as
    PostgreSQL's does: 57014, nothing spent, and the session goes on."""
    chain = " OR ".join(f"age = {i}" for i in range(1500))
    with psycopg.connect(server.dsn("alice"), autocommit=True) as con:
        con.execute("SET statement_timeout = '10ms'")
        assert con.execute("SHOW statement_timeout").fetchone() == ("10ms",)
        budget = con.execute("SHOW idp.budget").fetchone()
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            con.execute(f"SELECT COUNT(*) FROM people WHERE {chain}")
        assert con.execute("SHOW idp.budget").fetchone() == budget
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            con.execute("SET statement_timeout = 'soon'")
        con.execute("SET statement_timeout = 5000")
        assert con.execute("SHOW statement_timeout").fetchone() == ("5s",)
        assert con.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchone()[0] >= 0


def test_the_sessions_statement_timeout_stops_a_catalog_statement(server):
    """Catalog statements stopped only at ``catalog_timeout`` (10 s), whatever the session
    had set: a count over 300 million generated rows under '1s' ran 10.4 s. Now the
    session's, where shorter, is set on its catalog connection (and RESET when it goes)."""
    with psycopg.connect(server.dsn("alice"), autocommit=True) as con:
        con.execute("SET statement_timeout = '300ms'")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            con.execute("SELECT count(*) FROM generate_series(1, 300000000)")
        assert time.monotonic() - started < 5
        con.execute("SET statement_timeout = 0")
        assert con.execute("SELECT count(*) FROM generate_series(1, 3000000)"
                           ).fetchone() == (3000000,)
        assert con.execute("SHOW statement_timeout").fetchone() == ("0",)


@pytest.mark.parametrize("statement", ["SELECT COUNT(*) FROM people WHERE age > 30",
                                       "SELECT 1"])
def test_a_format_code_other_than_text_or_binary_is_refused(server, statement):
    """Result format 9 was refused for a catalog statement (22023, PostgreSQL's "unsupported
    format code: 9") but answered in text for a private one; now refused at Bind for
    every statement, before anything is spent."""
    sock = raw(server)
    sock.sendall(parse(b"s", statement) + bind(b"", b"s", (9,)) + execute(b"") + SYNC)
    replies = backend_messages(sock)
    assert kinds(replies) == [b"1", b"E", b"Z"] and sqlstates(replies) == ["22023"]
    assert b"unsupported format code: 9" in replies[1][1]


def test_settings_in_the_startup_options_are_applied(server):
    """libpq's ``options='-c name=value'`` was dropped: a statement_timeout or TimeZone
    set there was silently not in effect."""
    chain = " OR ".join(f"age = {i}" for i in range(1500))
    dsn = server.dsn("alice", options="-c statement_timeout=10ms --TimeZone=Europe/Berlin")
    with psycopg.connect(dsn, autocommit=True) as con:
        assert con.execute("SHOW TimeZone").fetchone() == ("Europe/Berlin",)
        assert con.execute("SHOW statement_timeout").fetchone() == ("10ms",)
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            con.execute(f"SELECT COUNT(*) FROM people WHERE {chain}")
    with pytest.raises(psycopg.OperationalError, match="invalid command-line argument"):
        psycopg.connect(server.dsn("alice", options="-x"))


@pytest.fixture
def in_process(tmp_path):
    """A server in this process, for tests that look into its sessions or lower its
    limits (the real ones take 256 statements of 250 KB to reach)."""
    served = Served.prepare(tmp_path, served_rules(), f"duckdb:///{tmp_path / 'd.duckdb'}",
                            20)
    with serving_in_process(served.rules, served.backend) as proxy:
        yield proxy


def test_a_session_holds_a_bounded_number_and_text_of_prepared_statements(in_process,
                                                                         monkeypatch):
    """Beyond the limits Parse is refused (54000) and the session goes on; a name
    prepared again replaces its statement; Close makes room."""
    monkeypatch.setattr(connection, "_MAX_PREPARED", 5)
    monkeypatch.setattr(connection, "_PREPARED_TEXT", 1000)
    sock = raw(in_process)
    sock.sendall(b"".join(parse(b"s%d" % index, "SELECT 1") for index in range(6)) + SYNC)
    replies = backend_messages(sock)
    assert kinds(replies) == [b"1"] * 5 + [b"E", b"Z"] and sqlstates(replies) == ["54000"]
    sock.sendall(parse(b"s1", "SELECT 2") + typed(b"C", b"Ss2\0") + parse(b"t", "SELECT 3")
                 + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"3", b"1", b"Z"]
    sock.sendall(parse(b"s1", "SELECT 1 -- " + "x" * 990) + SYNC)  # 4 others hold 32
    assert sqlstates(backend_messages(sock)) == ["54000"]
    sock.sendall(parse(b"s1", "SELECT 1 -- " + "x" * 900) + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"Z"]


def test_what_a_session_keeps_of_a_long_statement_is_its_text(in_process):
    """A prepared statement kept its tokens and sqlglot tree (10 MB for an IN list of
    9,000 values: 500 of them, 5 GB in one session), and the session kept the plans of
    its last 64 statements whatever their length (an IN list of 9,000 values: 7 MB each,
    450 MB a session, though only prepared: nothing spent). Now a prepared statement
    keeps its text, read again when it runs, and a plan is kept for texts up to 20,000
    characters, 100,000 together."""
    sql = ("SELECT COUNT(*) FROM people WHERE age IN ("
           + ",".join(str(i) for i in range(5000)) + ")")
    sock = raw(in_process)
    sock.sendall(parse(b"s", sql) + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"Z"]
    (session,) = in_process.server._live.values()
    kept = session.statements["s"].statement
    assert kept.text == sql and kept.tokens == () and kept.tree is None
    assert sql not in session.session._checked
    sock.sendall(bind(b"", b"s") + execute(b"") + SYNC)
    assert kinds(backend_messages(sock)) == [b"2", b"D", b"N", b"C", b"Z"]
    short = "SELECT COUNT(*) FROM people WHERE age > {}"
    for age in range(40):
        sock.sendall(query(short.format(age) + " " * 4000))
        backend_messages(sock)
    assert 0 < sum(map(len, session.session._checked)) <= 100_000


def test_the_values_bound_to_a_blocks_portals_are_bounded(in_process, monkeypatch):
    """Within a transaction block portals last until its end, each holding its bound
    values (up to ``max_message``, 1 MB, a Bind): they count against the rows the
    session's portals hold (64 MB; 4 MB here), so the Bind past it is refused (54000);
    the block's end frees them."""
    monkeypatch.setattr(connection, "_HELD_BYTES", 4 << 20)
    value = b"x" * 900_000

    def bound(portal: bytes) -> bytes:
        return typed(b"B", portal + b"\0s\0\0\0\0\1" + struct.pack("!i", len(value)) + value
                     + b"\0\0")

    sock = raw(in_process)
    sock.sendall(query("BEGIN"))
    backend_messages(sock)
    sock.sendall(typed(b"P", b"s\0SELECT length($1::text)\0\0\0") + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"Z"]
    for index in range(10):
        sock.sendall(bound(b"p%d" % index) + SYNC)
        replies = backend_messages(sock)
        if sqlstates(replies):
            break
    assert index == 4 and sqlstates(replies) == ["54000"]  # 5 × 0.9 MB > 4 MiB
    sock.sendall(query("ROLLBACK"))
    backend_messages(sock)
    sock.sendall(bound(b"p") + execute(b"p") + SYNC)
    assert kinds(backend_messages(sock)) == [b"2", b"D", b"C", b"Z"]


def test_a_long_catalog_statement_or_parameter_is_sent_at_once(server):
    """The catalog's connection is nonblocking and the proxy only waited to read: the
    rest of a long statement or parameter went out a piece a second (a parameter of
    900 KB took 4 s, a worker held meanwhile; a statement of 250 KB 0.45 s)."""
    value = b"x" * 900_000
    sock = raw(server)
    sock.sendall(parse(b"s", "SELECT length($1::text)") + SYNC)
    assert kinds(backend_messages(sock)) == [b"1", b"Z"]
    began = time.monotonic()
    sock.sendall(typed(b"B", b"\0s\0\0\0\0\1" + struct.pack("!i", len(value)) + value + b"\0\0")
                 + execute(b"") + SYNC)
    replies = backend_messages(sock)
    assert kinds(replies) == [b"2", b"D", b"C", b"Z"] and b"900000" in replies[1][1]
    assert time.monotonic() - began < 2


def test_a_startup_message_is_at_most_10000_bytes(server):
    """As PostgreSQL's (08P01 "invalid length of startup packet"): a user name of 1 MB
    was echoed in the login error and twice in the log, 10,000 settings took 2.7 s."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.sendall(startup_message("a" * 10_000))
    replies = backend_messages(sock, until=b"E")
    assert sqlstates(replies) == ["08P01"] and b"invalid length of startup packet" in \
        replies[0][1]
    with psycopg.connect(server.dsn("alice", application_name="a" * 9000)) as con:
        assert con.execute("SELECT 1").fetchone() == (1,)
