"""Shared fixtures: a throwaway PostgreSQL server started from the system's binaries,
DuckDB databases in temporary folders, and loaders that put the same rows into both."""

from __future__ import annotations

import compileall
import hashlib
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import psycopg
import pytest
from sqlglot import exp

from tests import pgserver, watchdog
from tests.pgserver import throwaway_postgres

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Before the workers start: pytest's temporary folders (tmp_path: the tests'
    DuckDB files) go where the clusters go (pgserver.ROOT: a RAM file system when
    there is one), unless asked for elsewhere. And where Python is told not to write
    bytecode (PYTHONDONTWRITEBYTECODE), each of the suite's hundreds of ``idp-proxy``
    processes would compile the package again: compile it once (into the ignored
    __pycache__ folders)."""
    if hasattr(config, "workerinput"):
        return
    if config.option.basetemp is None:
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(pgserver.ROOT))
    if sys.flags.dont_write_bytecode:
        for folder in ("proxy", "tests", "examples"):
            compileall.compile_dir(ROOT / folder, quiet=1)


# Modules whose tests share a module-scoped server or database: their tests go to one
# xdist worker, which starts it once (elsewhere each worker would start its own). Tests
# of other modules run over Spark with the parameter "spark" (ids "[spark…"): they go
# to test_spark.py's worker, whose Sail server (sail_url) they share.
SAIL_MODULE = "tests/test_spark.py"
SHARED_MODULES = {"tests/test_attacks.py", "tests/test_bi_corpus.py", "tests/test_catalog_tools.py",
                  "tests/test_clients.py", "tests/test_joins_multiplicity.py",
                  "tests/test_nonfinite.py", "tests/test_spark.py", "tests/test_spark_real.py",
                  "tests/test_superset.py",
                  "tests/test_wire_hardening.py", "tests/test_wire_limits.py"}


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker more than the cores, because the tests spend much of their
    time waiting for the servers and programs they start (on 2 cores: 281 s with 3
    workers, 305 s with 2)."""
    return (os.cpu_count() or 1) + 1


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist (pyproject's addopts: ``-n auto``) hands out one test at a time to
    the worker that is free, in collection order, except that a module of
    SHARED_MODULES goes to one worker whole. (xdist's own ``loadgroup`` would do that
    with marks, but its marks do not reach pytest 9's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if "[spark" in nodeid:
                return SAIL_MODULE
            return module if module in SHARED_MODULES else nodeid

    config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems set
    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """The slow tests start first, the longest first (``slow(seconds=…)``, else a
    minute), so that the short ones fill the workers' ends instead of a minute-long test
    starting last."""
    def expected(item) -> float:
        slow = item.get_closest_marker("slow")
        return 0 if slow is None else slow.kwargs.get("seconds", 60)

    items.sort(key=expected, reverse=True)  # stable

@pytest.fixture(scope="session", autouse=True)
def own_temporary_folder(tmp_path_factory):
    """Each test process (each xdist worker) gets its own TMPDIR, inherited by the
    servers it starts: their catalogs' folders, their admin sockets and their sweeps of
    killed servers' catalogs stay among themselves, apart from tests running beside
    them in another worker or another checkout. Deleted at the end, after stopping any
    PostgreSQL still running in it; if this process is killed, the watchdog does that
    (tests/watchdog.py), and should it be killed too, the next run's sweep."""
    tmp_path_factory.getbasetemp()  # pytest's own folders stay where they were
    pgserver.sweep("idp-run-*")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder = Path(tempfile.mkdtemp(prefix=f"idp-run-{worker}-", dir=pgserver.ROOT))
    folder.chmod(0o755)  # the catalogs' PostgreSQL (another user) reaches its folder
    pgserver.mark_owner(folder)
    watchdog.watch_folder(folder)
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        if saved[0] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[0]
        tempfile.tempdir = saved[1]
        for data in folder.glob("*/data"):  # a catalog whose server was killed last
            pgserver.stop_postmaster(data)
        shutil.rmtree(folder, ignore_errors=True)
        watchdog.unwatch_folder(folder)


@pytest.fixture(scope="session")
def postgres_url():
    """A fresh PostgreSQL cluster on 127.0.0.1 for the whole test session (one per
    xdist worker)."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(scope="session")
def sail_url(tmp_path_factory):
    """``sc://127.0.0.1:PORT`` of a Sail server (Spark Connect) for the whole test
    session (one per xdist worker: the tests using it run on one, see SHARED_MODULES);
    pysail and the ``[spark]`` extra's pyspark come with the ``[test]`` extra."""
    from tests.sailserver import throwaway_sail

    with throwaway_sail(tmp_path_factory.mktemp("sail")) as url:
        yield url
        _spark_session(url).stop()  # a session left open keeps the process from exiting


@contextmanager
def new_database(postgres_url: str):
    """A new empty database on the shared server, dropped afterwards."""
    name = f"t{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        # FILE_COPY (PostgreSQL 15) copies the template's files: 11 ms against 23 ms for
        # the default, which writes them through the WAL (the suite makes hundreds).
        copy = " STRATEGY FILE_COPY" if con.info.server_version >= 150000 else ""
        con.execute(f'CREATE DATABASE "{name}"{copy}')
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_postgres(postgres_url):
    """A new empty database for one test (its own ledger, its own tables)."""
    with new_database(postgres_url) as url:
        yield url


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def module_backend_url(request, tmp_path_factory):
    """One database per backend for a whole test module, for modules whose tests share
    one engine over tables they only read (each test looks at its own ledger entries)."""
    if request.param == "duckdb":
        yield f"duckdb:///{tmp_path_factory.mktemp('module') / 'data.duckdb'}"
        return
    with new_database(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture
def second_backend_url(backend_url, tmp_path, postgres_url):
    """Another empty database of the same kind as ``backend_url`` (a neighbour's data)."""
    if backend_url.startswith("duckdb"):
        yield f"duckdb:///{tmp_path / 'second.duckdb'}"
        return
    with new_database(postgres_url) as url:
        yield url


@pytest.fixture
def duckdb_url(tmp_path):
    return f"duckdb:///{tmp_path / 'data.duckdb'}"


def load_table(url: str, table: str, columns: dict[str, list], types: dict[str, str],
               location: str | None = None) -> None:
    """Create ``table`` with the given columns and rows in any backend; on Spark with
    ``location``, as Parquet files there instead (the rules' ``location``: another
    process's Sail session sees no table this one creates)."""
    names = list(columns)
    rows = list(zip(*columns.values()))
    ddl = f'CREATE TABLE "{table}" (' + ", ".join(f'"{n}" {types[n]}' for n in names) + ")"
    if url.startswith("duckdb"):
        path = Path(url.removeprefix("duckdb:///"))
        key = _DUCKDB_LOADS.restore(path, repr((table, columns, types)))
        if key == "":
            return
        con = duckdb.connect(str(path))
        con.execute(ddl)
        if rows:  # one statement: the columns travel as list parameters and are unnested
            unnest = ", ".join(f"unnest(${i + 1}::{types[n]}[])" for i, n in enumerate(names))
            con.execute(f'INSERT INTO "{table}" SELECT {unnest}', list(columns.values()))
        con.close()
        _DUCKDB_LOADS.remember(path, key)
        return
    if url.startswith("sc://"):
        schema = ", ".join(f"`{name}` {exp.DataType.build(types[name], dialect='postgres').sql('spark')}"
                           for name in names)
        frame = _spark_session(url).createDataFrame(rows, schema=schema)
        if location is None:
            frame.write.saveAsTable(table)
        else:
            frame.write.parquet(location)
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(ddl)
        with con.cursor() as cur, cur.copy(f'COPY "{table}" FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row)


def _spark_session(url: str):
    """The process's Spark Connect session (as the Spark backend's: Sail keeps tables in
    a catalog per session)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()


class _LoadedFiles:
    """DuckDB files as load_table left them, by the loads that made them: opening and
    closing a DuckDB file costs about 25 ms, copying a loaded one 0.4 ms, and most tests
    load the same few tables into a fresh file. A file is known only while it is as the
    last load left it (same size and mtime); once anything else wrote it, loads into it
    are made for real again."""

    def __init__(self) -> None:
        self._state: dict[Path, tuple[str, tuple[int, int]]] = {}  # path -> (key, stat)

    def restore(self, path: Path, load: str) -> str | None:
        """Make ``path`` what ``load`` would make of it from a copy and return "", or
        return the key to remember the caller's own load by (None: do not remember)."""
        known = self._state.pop(path, None)
        if path.exists() and (known is None or known[1] != _stamp(path)):
            return None  # written by someone else since: not ours to predict
        before = known[0] if known and path.exists() else ""
        key = hashlib.sha256((before + "\0" + load).encode()).hexdigest()
        if not self._copy(key).exists():
            return key
        shutil.copyfile(self._copy(key), path)
        self._state[path] = (key, _stamp(path))
        return ""

    def remember(self, path: Path, key: str | None) -> None:
        if key is not None:
            self._copy(key).parent.mkdir(exist_ok=True)
            shutil.copyfile(path, self._copy(key))
            self._state[path] = (key, _stamp(path))

    @staticmethod
    def _copy(key: str) -> Path:
        return Path(tempfile.gettempdir()) / "idp-loaded" / f"{key}.duckdb"


def _stamp(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


_DUCKDB_LOADS = _LoadedFiles()


@pytest.fixture(params=["duckdb", "postgres"])
def backend_url(request, tmp_path):
    """Each test using this runs once per backend."""
    if request.param == "duckdb":
        return f"duckdb:///{tmp_path / 'data.duckdb'}"
    return request.getfixturevalue("fresh_postgres")


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def proxy(request, tmp_path_factory):
    """``idp-proxy serve`` (trust auth on loopback) over the people table, one per
    backend for a test module, as a deployment's clients share one server: a test
    compares budgets before and after its own queries, and a question an earlier test
    asked may come from the answer cache."""
    from tests.wireserver import people_proxy

    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with people_proxy(request.param, tmp_path_factory.mktemp("served"), url) as running:
        yield running


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def demo_server(request, tmp_path_factory):
    """``idp-proxy serve`` under rules/demo.toml over the demo's tables, one per backend
    for a test module (the BI corpus, Superset, the analyst SQL of issue 16)."""
    from tests.wireserver import demo_proxy

    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with demo_proxy(request.param, tmp_path_factory.mktemp("demo"), url) as running:
        yield running
