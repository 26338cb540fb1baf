"""The shadow catalog: a private PostgreSQL that holds the declared tables' definitions
and no rows, never ANALYZEd, answering every catalog query clients send (psql's ``\\d``,
pgcli's completion, SQLAlchemy's inspector, JDBC's DatabaseMetaData).

Why a real PostgreSQL: the catalog SQL of real clients uses dozens of PostgreSQL
functions, casts and operators, and changes with every client version; an emulation
fails on the first one it lacks. Catalog queries never reach the database that holds
the data, and the shadow cannot leak what it does not have. It listens on a Unix
socket in a private folder only; analysts reach it as non-superuser, read-only roles
named like them, in a database named as their client asked.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import importlib.util
import logging
import os
import pwd
import select
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import pq, sql

from proxy.backends.base import Backend
from proxy.errors import ProxyError
from proxy.result_types import column_type
from proxy.rules import Rules, Table, key_text

log = logging.getLogger("idp_proxy.shadow")

# The tables go into template1, as a DBA would put them, so that psql's \l lists only
# what any PostgreSQL lists (postgres, template0, template1) besides the clients' names.
_TEMPLATE = "template1"
_MAX_DATABASES = 32  # distinct database names clients may use (each is a copy of the template)
_OWNER = "idp"
# The private memory each process of the catalog may take (its RLIMIT_DATA; shared
# buffers are not counted): a value that a catalog statement builds beyond some 30 MB
# (``SELECT repeat('x', 500000000)``) fails there with 53200, instead of coming to the
# server whole (that one grew it by 2.7 GB). Catalog queries of tools take a few MB.
CATALOG_MEMORY = 128 * 2**20
# The temporary files each process of the catalog may write (kB; PostgreSQL's default is
# no limit): a sort spilled to disk (ORDER BY over generate_series) wrote 590 MB in its
# 10 s of catalog_timeout, per connection, on the disk the ledger and data share; it now
# fails there with 53400. Catalog queries of tools sort a few kB in memory.
CATALOG_TEMP_KB = 64 * 1024
# a catalog result asked in mixed formats is read whole, once a format: at most this much
MIXED_FORMAT_BYTES = 64 * 2**20
_SKELETONS = Path("/var/tmp")  # shared by the servers of the machine; made again if cleaned away


class ShadowError(ProxyError):
    """An error the shadow raised; its text is about the schema only, never data."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_size: int
    type_modifier: int


@dataclass(frozen=True)
class Description:
    params: tuple[int, ...]
    columns: tuple[Column, ...]


def _binaries() -> Path:
    """The machine's newest PostgreSQL server binaries, else those bundled in the
    ``pgserver`` wheel (a dependency, so that a machine with only Python can serve)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda path: int(Path(path).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    if on_path:
        return Path(on_path).parent
    spec = importlib.util.find_spec("pgserver")
    bundled = Path(spec.origin).parent / "pginstall" / "bin" if spec and spec.origin else None
    if bundled is not None and (bundled / "postgres").exists():
        return bundled
    raise ProxyError("the server needs PostgreSQL's binaries for its schema-only catalog; "
                     "install the postgresql package (Debian: apt-get install postgresql)")


def _unprivileged(binaries: Path) -> tuple[str, Path]:
    """As root: a system user to run PostgreSQL as (``postgres``, else a new
    ``idp-proxy`` user), and binaries that user can execute (bundled ones under a
    private home are copied once to /var/tmp)."""
    for name in ("postgres", "idp-proxy"):
        try:
            pwd.getpwnam(name)
            break
        except KeyError:
            continue
    else:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", "idp-proxy"], check=True, capture_output=True)
        name = "idp-proxy"
    probe = ["runuser", "-u", name, "--", str(binaries / "postgres"), "--version"]
    if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return name, binaries
    shared = Path("/var/tmp/idp-proxy-postgresql")
    if not (shared / "bin" / "postgres").exists():
        staging = Path(tempfile.mkdtemp(prefix="idp-proxy-postgresql-", dir="/var/tmp"))
        shutil.copytree(binaries.parent, staging / "tree", symlinks=True)
        if not shared.exists():  # another server may have finished the same copy first
            (staging / "tree").rename(shared)
        shutil.rmtree(staging, ignore_errors=True)
    return name, shared / "bin"


def _version(binaries: Path) -> str:
    """The binaries' PostgreSQL version as ``SHOW server_version`` begins (``15.18``):
    ``postgres --version`` prints ``postgres (PostgreSQL) 15.18 (Debian …)``."""
    return subprocess.run([str(binaries / "postgres"), "--version"], check=True,
                          capture_output=True, text=True).stdout.split()[2]


def _stop_orphans(binaries: Path) -> None:
    """Stop the catalogs of servers that were killed (SIGKILL leaves no chance to stop
    them): each catalog's folder names the server process that started it."""
    for marker in Path(tempfile.gettempdir()).glob("idp-shadow-*/proxy.pid"):
        try:
            os.kill(int(marker.read_text()), 0)
            continue  # its server still runs
        except ProcessLookupError:
            pass
        except (ValueError, OSError):
            continue
        data = marker.parent / "data"
        if (data / "postmaster.pid").exists():
            owner = data.stat().st_uid
            run_as = ["runuser", "-u", pwd.getpwuid(owner).pw_name, "--"] if (
                os.geteuid() == 0 and owner != 0) else []
            subprocess.run([*run_as, str(binaries / "pg_ctl"), "-D", str(data), "-w", "-m",
                            "immediate", "stop"], capture_output=True, check=False)
        log.warning("stopped the catalog of a server that was killed (%s)", marker.parent)
        shutil.rmtree(marker.parent, ignore_errors=True)


def _owned_alone(folder: Path, uid: int) -> bool:
    """Whether ``folder`` is a folder of ``uid``'s that no one else may write (in
    /var/tmp, shared by the machine's users); a link (to a real cluster, say) is never
    followed."""
    try:
        owner = folder.lstat()
    except OSError:
        return False
    return (owner.st_uid == uid and not owner.st_mode & 0o077
            and stat.S_ISDIR(owner.st_mode))


class ShadowCatalog:
    """Made with the server, started on the first catalog query, stopped with the
    server. ``connect`` gives each client session its own connection as its analyst's
    role in its database name.

    Why lazily: many servers' sessions never send a catalog query (psycopg, scripts,
    the engine's own clients), and copying the empty cluster (``cp`` creates some 1,000
    files), starting it and running the DDL took about a second of CPU and of wall time
    from every start. What the owner can get wrong still fails at construction: the
    binaries, the template, and the DDL, built here from the rules and the backend's
    column types (so that no worker process reads the backend for it). PostgreSQL can
    still refuse that DDL (two names alike in their first 63 bytes, a public table of
    more than 1,600 columns), so DDL this PostgreSQL version has not accepted on the
    machine before is run at construction (the catalog then starts at once) and a
    digest of it kept (``_accepted``).

    The worker processes of a server (proxy/wire/workers.py) share the catalog: the
    start is made once, by the first process that needs it, under a lock on a file in
    the catalog's folder (``flock``: released by a process that dies starting it, whose
    successor starts it again from scratch); a ``started`` file there says it was made.
    A start is bounded (a copy, and ``pg_ctl -w -t``), so a session waiting on the lock
    waits that long at most; a session cancelled or gone meanwhile leaves the start to
    finish in its thread."""

    def __init__(self, rules: Rules, backend: Backend, max_connections: int) -> None:
        self._bin = _binaries()
        _stop_orphans(self._bin)
        self._folder = Path(tempfile.mkdtemp(prefix="idp-shadow-"))
        (self._folder / "proxy.pid").write_text(str(os.getpid()))
        self._run_as: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            name, self._bin = _unprivileged(self._bin)
            user = pwd.getpwnam(name)
            os.chown(self._folder, user.pw_uid, user.pw_gid)
            self._run_as = ["runuser", "-u", name, "--"]
        self._lock = threading.Lock()
        self._started = False  # known started by this process
        self._databases: set[str] = set()
        self._roles: set[str] = set()
        self._options = (f"-c listen_addresses='' -k {self._folder} -F "
                         f"-c max_connections={max_connections + 5} -c autovacuum=off "
                         "-c shared_buffers=16MB "
                         f"-c temp_file_limit={CATALOG_TEMP_KB} "
                         f"-c statement_timeout={rules.server.catalog_timeout}s")
        self._statements = _ddl(rules, backend)
        # what ``SHOW server_version`` says, its first word, without a started catalog
        self.version = _version(self._bin)
        self._template()  # made once a machine (or here, where it cannot be shared)
        accepted = self._accepted()
        if accepted is None or not accepted.exists():
            self._ensure_started()
            if accepted is not None:
                accepted.touch()

    def _accepted(self) -> Path | None:
        """The file that says this PostgreSQL version ran these statements once (named
        by their digest, in a folder only this user can write; None where there is
        none, and the statements run at every construction)."""
        texts = "\n".join(statement.as_string(None) for statement in self._statements)
        folder = _SKELETONS / f"idp-proxy-ddl-{self.version}-{os.geteuid()}"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return None
        if not _owned_alone(folder, os.geteuid()):
            return None
        return folder / hashlib.sha256(texts.encode()).hexdigest()

    def _template(self) -> Path:
        """The empty cluster the catalog is a copy of: the machine's (``_skeleton``),
        else one made by initdb in the catalog's folder."""
        skeleton = self._skeleton()
        if skeleton is not None:
            return skeleton
        private = self._folder / "template"
        if not (private / "PG_VERSION").exists():
            shutil.rmtree(private, ignore_errors=True)
            self._initdb(private)
        return private

    def _ensure_started(self) -> None:
        """Start the catalog unless a process of this server did (called under
        ``_lock``)."""
        if self._started:
            return
        with open(self._folder / "start.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed, or its process dies
            if not (self._folder / "started").exists():
                self._start()
        self._started = True

    def _start(self) -> None:
        """Copy the template, start PostgreSQL on it and run the DDL, from scratch: a
        start that a killed process left half made is stopped and removed first."""
        data = self._folder / "data"
        with suppress(subprocess.CalledProcessError):  # its postmaster.pid may be stale
            self._stop("immediate")
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run([*self._run_as, "cp", "-a", "--", str(self._template()), str(data)],
                       check=True, capture_output=True)
        limited = f'ulimit -d {CATALOG_MEMORY // 1024} && exec "$@"'  # children inherit it
        subprocess.run([*self._run_as, "sh", "-c", limited, "sh", str(self._bin / "pg_ctl"),
                        "-D", str(data), "-l", str(self._folder / "log"), "-w", "-t", "60",
                        "-o", self._options, "start"], check=True, capture_output=True,
                       text=True)
        for database in (_TEMPLATE, "postgres"):  # postgres exists already: it needs them too
            with self._admin(database) as con:
                for statement in self._statements:
                    con.execute(statement)
                con.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
                con.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")
                # information_schema lists only what a role holds a privilege on: without
                # SELECT, tools that read it (harlequin, node scripts, Grafana) see an
                # empty schema. The tables have no rows and no statistics, and a statement
                # naming one goes to the engine, never here (proxy/wire/route.py).
                con.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO PUBLIC")
        (self._folder / "started").touch()

    def _stop(self, mode: str) -> None:
        """Stop the catalog's PostgreSQL, if one runs."""
        if (self._folder / "data" / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self._folder / "data"), "-w", "-m", mode, "stop")

    def _initdb(self, data: Path) -> None:
        self._run("initdb", "-D", str(data), "-U", _OWNER, "--auth=trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")

    def _skeleton(self) -> Path | None:
        """An empty cluster made by initdb once per machine, PostgreSQL version and user,
        and copied for each catalog: initdb writes some 40 MB and costs a second or two
        of every server start, a copy a tenth of that. Only a folder that user owns and
        no one else can write is used (/var/tmp is shared); else None (initdb here)."""
        uid = pwd.getpwnam(self._run_as[2]).pw_uid if self._run_as else os.geteuid()
        skeleton = _SKELETONS / f"idp-proxy-catalog-{self.version}-{uid}"
        if not skeleton.exists():
            staging = Path(tempfile.mkdtemp(prefix=f"{skeleton.name}-", dir=_SKELETONS))
            try:
                os.chown(staging, uid, -1)
                self._initdb(staging / "data")
                (staging / "data").rename(skeleton)  # whole or not at all
            except OSError:
                pass  # another server made it first, or /var/tmp refuses: checked below
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        if not os.path.lexists(skeleton):  # lstat fails: none (as before, no warning)
            return None
        if not _owned_alone(skeleton, uid) or not (skeleton / "PG_VERSION").exists():
            log.warning("not using %s as the catalog's template: not %s's alone", skeleton, uid)
            return None
        return skeleton

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(self._run_as + [str(self._bin / program), *args], check=True,
                       capture_output=True, text=True)

    def _admin(self, database: str) -> psycopg.Connection:
        return psycopg.connect(host=str(self._folder), user=_OWNER, dbname=database,
                               autocommit=True)

    def connect(self, user: str, database: str) -> psycopg.Connection:
        if database in ("template0", _TEMPLATE):  # a session there would block new copies
            raise ShadowError(f'database "{database}" is not available; connect to any '
                              "other database name (e.g. demo)", "3D000")
        with self._lock:
            self._ensure_started()
            if user not in self._roles or database not in self._databases:
                self._provide(user, database)
        return psycopg.connect(host=str(self._folder), user=user, dbname=database,
                               autocommit=True)

    def _provide(self, user: str, database: str) -> None:
        """Create the analyst's role and the database name the client asked for, once.
        The worker processes of one server share the catalog (proxy/wire/workers.py), so
        the names are counted in it, under a lock held until this connection closes."""
        with self._admin("postgres") as con:
            con.execute("SELECT pg_advisory_lock(1)")
            if database not in self._databases:
                made = [name for (name,) in con.execute(
                    "SELECT datname FROM pg_database WHERE datname NOT IN "
                    "('template0', 'template1', 'postgres') ORDER BY datname")]
                if database not in made and len(made) >= _MAX_DATABASES:
                    raise ShadowError(f"too many database names in use; connect with one "
                                      f"of: {', '.join(made)}", "53300")
            if user not in self._roles:
                if not con.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                   (user,)).fetchone():
                    con.execute(sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"
                    ).format(sql.Identifier(user)))
                    con.execute(sql.SQL(
                        "ALTER ROLE {} SET default_transaction_read_only = on"
                    ).format(sql.Identifier(user)))
                self._roles.add(user)
            if database not in self._databases:
                if not con.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                   (database,)).fetchone():
                    # PostgreSQL 15 copies through the WAL by default: FILE_COPY copies
                    # the template's files (the catalog runs without fsync), a client's
                    # first connection to a name 25 ms of CPU instead of 40 (with the
                    # smaller WAL, the catalog's stop too)
                    copy = sql.SQL(" STRATEGY FILE_COPY" if con.info.server_version >= 150000
                                   else "")
                    con.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
                        sql.Identifier(database), sql.Identifier(_TEMPLATE), copy))
                self._databases.add(database)

    def close(self) -> None:
        """Stop the catalog if it was started (waiting for a start under way)."""
        try:
            with open(self._folder / "start.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                self._stop("fast")
        except subprocess.CalledProcessError as exc:
            log.warning("shadow catalog did not stop cleanly: %s", exc.stderr)
        shutil.rmtree(self._folder, ignore_errors=True)


def _ddl(rules: Rules, backend: Backend) -> list[sql.Composable]:
    """CREATE TABLE statements: protected tables with their declared columns (the only
    ones an analyst can use); public tables as the backend defines them."""
    statements = []
    for table in rules.tables.values():
        if table.public:
            columns = backend.column_types(table.name)
        else:
            # as the backend stores them where the engine read that (proxy.result_types):
            # the types its answers over them are given
            columns = [(name, column_type(column)) for name, column in table.columns.items()]
            if table.privacy_unit and table.privacy_unit not in table.columns and not table.link:
                columns.insert(0, (table.privacy_unit, "text"))
        statements.append(sql.SQL("CREATE TABLE {} ({})").format(
            sql.Identifier(table.name),
            sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
                               for name, kind in columns)))
        statements += _comments(table, [name for name, _ in columns])
    return statements


MAX_KEYS_SHOWN = 50  # a column's comment lists this many of its declared keys, then a count


def _comments(table: Table, columns: list[str]) -> list[sql.Composable]:
    """COMMENT ON the table and its columns: what the rules declare (public, as the
    rules are), so that an analyst sees what may be asked (psql ``\\d+``, and
    ``pg_description``/``col_description``, which BI tools read)."""
    def comment(kind: str, target: sql.Composable, text: str) -> sql.Composable:
        return sql.SQL("COMMENT ON {} {} IS {}").format(sql.SQL(kind), target,
                                                         sql.Literal(text))

    if table.public:
        joined = ", ".join(f"{key_text(key)} (at most {m} rows per value)" if m > 1
                           else f"{key_text(key)} (unique)"
                           for key, m in table.join_keys.items())
        text = "idp-proxy: public table, answered as written" + (
            f"; joins protected tables on {joined}" if joined else "")
        return [comment("TABLE", sql.Identifier(table.name), text)]
    if table.link is not None:
        unit = (f"privacy unit: that of {table.link.table}, through {table.link.column} = "
                f"{table.link.table}.{table.link.key}")
    elif table.privacy_unit:
        unit = f"privacy unit: {table.privacy_unit}"
    else:
        unit = "privacy unit: one row"
    rows = "row" if table.max_rows_per_unit == 1 else "rows"
    bound = (f"; at most {table.max_rows_per_unit} {rows} per unit"
             if table.max_rows_per_unit and table.privacy_unit else "")
    statements = [comment("TABLE", sql.Identifier(table.name),
                          f"idp-proxy: protected table, aggregates only (differentially "
                          f"private); {unit}{bound}")]
    for name in columns:
        text = _column_comment(table, name)
        if text:
            statements.append(comment("COLUMN", sql.Identifier(table.name, name), text))
    return statements


def _column_comment(table: Table, name: str) -> str:
    """What the rules declare for one column of a protected table."""
    if name == table.privacy_unit:
        return "privacy unit: COUNT(DISTINCT " + name + ") counts units; not a group key"
    column = table.columns.get(name)
    if column is None:
        return ""
    parts = []
    if column.keys is not None:
        shown = ", ".join("NULL" if key is None else str(key)
                          for key in column.keys[:MAX_KEYS_SHOWN])
        more = (f", … ({len(column.keys)} keys)" if len(column.keys) > MAX_KEYS_SHOWN
                else "")
        parts.append(f"keys: {shown}{more}")
    if column.time_domain is not None:
        low, high = column.time_domain
        parts.append(f"domain: [{low.isoformat(sep=' ')}, {high.isoformat(sep=' ')}]")
    elif column.lower is not None and column.upper is not None:
        parts.append(f"domain: [{_number(column.lower)}, {_number(column.upper)}]")
    if column.numeric:
        declared = "" if column.declared_resolution is not None else " (default)"
        parts.append(f"resolution: {_number(column.resolution)}{declared}")
    if column.unit_attribute:
        parts.append("a property of the unit (unit_attribute)")
    if column.public:
        parts.append("declared public (not sensitive)")
    if not parts:
        parts.append("no declared keys or domain: filter on it; group by it only where "
                     "the rules select keys")
    return "; ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


class ShadowSession:
    """One client session's view of the shadow: describe and run catalog statements
    with the client's own parameter bytes and formats (types inferred by PostgreSQL)."""

    def __init__(self, connection: psycopg.Connection) -> None:
        self._pgconn = connection.pgconn
        self._connection = connection
        self._names = 0
        self._timeout_ms = 0  # the session's statement_timeout set on it; 0: the catalog's
        self.tag = ""  # the command tag of the last statement ``execute`` finished

    def prepare(self, text: str, param_types: tuple[int, ...]) -> tuple[bytes, Description]:
        self._names += 1
        name = f"s{self._names}".encode()
        self._pgconn.send_prepare(name, text.encode(), list(param_types) or None)
        _check(self._last_result())
        self._pgconn.send_describe_prepared(name)
        described = _check(self._last_result())
        params = tuple(described.param_type(i) for i in range(described.nparams))
        return name, Description(params, _columns(described))

    def _timeout(self, ms: int) -> None:
        """Statements stop after ``ms`` (the client's ``statement_timeout`` where shorter
        than ``catalog_timeout``, the catalog's own; 0: that one), set when it changed."""
        if ms != self._timeout_ms:
            self._pgconn.send_query(b"SET statement_timeout = %d" % ms if ms
                                    else b"RESET statement_timeout")
            _check(self._last_result())
            self._timeout_ms = ms

    def execute(self, name: bytes, params: tuple[bytes | None, ...],
                param_formats: tuple[int, ...], result_formats: list[int],
                limit: int, row_bytes: int, timeout_ms: int) -> Iterator[list[bytes | None]]:
        """Run a prepared catalog statement and yield its rows as PostgreSQL sends them
        (libpq's single-row mode: memory stays bounded, and a slow client slows only its
        own session); ``tag`` holds the command tag once the rows are read. More than
        ``limit`` rows, or a row of more than ``row_bytes``, is refused (54000). Each
        column comes in the format the client asked for; libpq takes one format per
        result, so a mix runs twice and is held (within the limit: the shadow never
        changes under a session), at most ``MIXED_FORMAT_BYTES`` of it (54000): 20,000
        rows of 100 KB asked as text and binary held 4 GB. ``timeout_ms``: as
        ``_timeout`` takes it, set before the statement runs, in the thread reading it."""
        self._timeout(timeout_ms)
        formats = sorted(set(result_formats) or {0})
        if len(formats) == 1:
            yield from self._rows(name, params, param_formats, formats[0], limit, row_bytes)
            return
        runs, size = {}, 0
        for fmt in formats:
            runs[fmt] = []
            rows = self._rows(name, params, param_formats, fmt, limit, row_bytes)
            try:
                for row in rows:
                    size += sum(len(value) for value in row if value is not None) + len(row)
                    if size > MIXED_FORMAT_BYTES:
                        raise ShadowError(
                            f"a catalog result asked in both text and binary columns may "
                            f"hold at most {MIXED_FORMAT_BYTES >> 20} MB; ask all its columns "
                            "in one format, or add a WHERE or a LIMIT", "54000")
                    runs[fmt].append(row)
            finally:  # refused: the statement stopped, the connection drained
                rows.close()
        for index, row in enumerate(runs[formats[0]]):
            yield [runs[fmt][index][column] for column, fmt in enumerate(result_formats)]

    def _rows(self, name: bytes, params, param_formats, result_format: int,
              limit: int, row_bytes: int) -> Iterator[list[bytes | None]]:
        pgconn = self._pgconn
        pgconn.send_query_prepared(name, list(params), list(param_formats) or None,
                                   result_format)
        pgconn.set_single_row_mode()
        count, done = 0, False
        try:
            while (result := _next_result(pgconn)) is not None:
                if result.status != pq.ExecStatus.SINGLE_TUPLE:
                    self.tag = (_check(result).command_status or b"").decode()
                    continue
                count += 1
                if count > limit:
                    raise ShadowError(f"a catalog result may hold at most {limit} rows "
                                      "([server] catalog_max_rows); add a WHERE or a LIMIT",
                                      "54000")
                row = [result.get_value(0, c) for c in range(result.nfields)]
                size = sum(len(value) for value in row if value is not None)
                if size > row_bytes:
                    raise ShadowError(f"a catalog row may hold at most {row_bytes:,} bytes "
                                      f"([server] max_message); this one holds {size:,}",
                                      "54000")
                yield row
            done = True
        finally:
            if not done:  # refused, failed or abandoned mid-result: stop it, then drain
                try:
                    self._connection.cancel_safe()
                    while _next_result(pgconn) is not None:
                        pass
                except psycopg.Error:
                    self._connection.close()  # the session's next catalog query reconnects

    def release(self, name: bytes) -> None:
        self._pgconn.send_query(b"DEALLOCATE " + name)
        _check(self._last_result())

    def _last_result(self) -> pq.abc.PGresult:
        """The result of the command just sent (its only one), read as ``_next_result``
        reads."""
        result = last = _next_result(self._pgconn)
        while last is not None:
            last = _next_result(self._pgconn)
        return result

    def cancel(self) -> None:
        """Interrupt the catalog statement running on this session's connection, if any."""
        self._connection.cancel_safe()

    def close(self) -> None:
        self._connection.close()


def _next_result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """libpq's next result, waited for outside libpq: psycopg's C implementation holds
    the GIL in a ``get_result`` that blocks, so a catalog statement that ran for its
    whole timeout (``SELECT count(*) FROM generate_series(1, 1e9)``: 10 s) froze every
    session of the process, and the cancel meant to stop it."""
    while pgconn.is_busy():
        # the rest of a long statement or parameter, which a nonblocking connection
        # sends as the socket takes it: waiting to read alone sent it a piece a second
        # (a parameter of 900 KB: 4 s, a statement of 250 KB: 0.45 s)
        unsent = pgconn.flush()
        select.select([pgconn.socket], [pgconn.socket] if unsent else [], [], 1.0)
        pgconn.consume_input()  # the GIL is free meanwhile
    return pgconn.get_result()


def _columns(result: pq.abc.PGresult) -> tuple[Column, ...]:
    return tuple(Column(result.fname(i).decode(), result.ftype(i), result.fsize(i),
                        result.fmod(i)) for i in range(result.nfields))


def _check(result: pq.abc.PGresult) -> pq.abc.PGresult:
    if result.status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK,
                         pq.ExecStatus.EMPTY_QUERY):
        return result
    code = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"XX000").decode()
    text = (result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"catalog error").decode()
    raise ShadowError(text, code)
