"""Shared fixtures: a throwaway PostgreSQL server started from the system's binaries,
DuckDB databases in temporary folders (tests/databases.py puts the same rows into
both), and served proxies (tests/factories.py)."""

from __future__ import annotations

import compileall
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests import pgserver, watchdog
from tests.databases import load_table, new_database, spark_session
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


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module is imported with pytest's assertions rewritten, and the rewritten
    bytecode is kept (``__pycache__/*-pytest-*.pyc``) only where bytecode may be written:
    under PYTHONDONTWRITEBYTECODE every worker rewrote every test module at every run
    (3.7 s of CPU each, a third of collecting). Written while a module is collected,
    beside pytest_configure's compiled package; read back by the next run."""
    if not (isinstance(collector, pytest.Module) and sys.dont_write_bytecode):
        return (yield)
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = True


def pytest_collection_finish(session):
    """Once a process (each xdist worker) has collected: what it holds by then (the
    modules, their parameters, the corpora read at import) is frozen out of the cyclic
    collector, which walked all of it again at every full collection, and the young
    generation is collected every 10,000 allocations instead of 700. Only the suite's
    own process: the servers and programs the tests start keep Python's defaults. In
    one process (-n 0) over tests/analyze/test_shape_cache.py, tests/test_engine.py and
    tests/privacy/test_bucket_bruteforce.py: 34.98 s of CPU -> 33.71 s."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


# A worker runs a module's tests whole, so a module-scoped server or database starts once
# (handed out one test at a time, each worker running part of a module started its own;
# the suite is CPU-bound on 2 cores, 650 s of CPU: the whole suite took 334 s that way,
# 298 s this way with the longest modules first). The tests of other modules run over Spark
# (ids "[spark…") go with test_spark.py, whose Sail server (sail_url) they share.
SAIL_MODULE = "tests/backends/test_spark.py"


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker more than the cores, because the tests spend much of their
    time waiting for the servers and programs they start (2 cores, 2026-11-27, modules
    whole: 330 s with 2 workers, 296–298 s with 3, 302 s with 4)."""
    return (os.cpu_count() or 1) + 1


def _scope(nodeid: str) -> str:
    """The worker's unit of work: a test's module (the tests over Spark: Sail's)."""
    return SAIL_MODULE if "[spark" in nodeid else nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist (pyproject's addopts: ``-n auto``) hands out one module (``_scope``)
    at a time to the worker that is free, in the order pytest_collection_modifyitems
    set. (xdist's own ``loadscope`` groups by module too, but its order is its own.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems set
    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """The longest modules start first (the sum of their tests' expected seconds: a
    ``slow(seconds=…)`` test's, a minute for a bare ``slow``, else a tenth), so that
    short modules fill the workers' ends instead of a minute-long one starting last; a
    module's tests keep their order (its fixtures' parameters stay grouped)."""
    def expected(item) -> float:
        slow = item.get_closest_marker("slow")
        return 0.1 if slow is None else slow.kwargs.get("seconds", 60)

    totals: dict[str, float] = {}
    for item in items:
        scope = _scope(item.nodeid)
        totals[scope] = totals.get(scope, 0.0) + expected(item)
    items.sort(key=lambda item: totals[_scope(item.nodeid)], reverse=True)  # stable


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
    session (one per xdist worker: the tests using it run on one, see SAIL_MODULE);
    pysail and the ``[spark]`` extra's pyspark come with the ``[test]`` extra."""
    from tests.sailserver import throwaway_sail

    with throwaway_sail(tmp_path_factory.mktemp("sail")) as url:
        yield url
        spark_session(url).stop()  # a session left open keeps the process from exiting


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
    from tests.factories import people_proxy

    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with people_proxy(request.param, tmp_path_factory.mktemp("served"), url) as running:
        yield running


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def demo_server(request, tmp_path_factory):
    """``idp-proxy serve`` under rules/demo.toml over the demo's tables, one per backend
    for a test module (the BI corpus, Superset, the analyst SQL of issue 16)."""
    from tests.factories import demo_proxy

    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with demo_proxy(request.param, tmp_path_factory.mktemp("demo"), url) as running:
        yield running


@pytest.fixture
def no_noise(monkeypatch):
    """The mechanisms return the true value: what remains is the answer's plumbing. The
    exponential mechanism gives the value at its target rank (its law's mode), read
    through the same window a draw reads; an empty scope the domain's lower end. A
    clipped sum takes the ladder's top rung, which clips nothing (the true sum), also
    where one rung was drawn for all groups (``joint_sum_at``). CORR and its kin release
    their true count, sums and centred moments, winsorized at the top rung."""
    from proxy.privacy import correlation, inverse_sensitivity, noisy_answers, variance
    from proxy.privacy.mechanisms import Noisy
    from proxy.privacy.requests import RankRequest, WeightRequest

    def at_target(n, rank, shift, epsilon, grid, rng, piecewise, column, key, scaled=None):
        return (yield RankRequest(column, rank, rank, group=key))[0] if n else grid.lower

    def at_weighted_target(fraction, scale, grid, rng, column="", key=()):
        """The least value whose running weight reaches t = p·N (the weighted
        percentile_disc, where the law's distance is 0)."""
        total, running, rows = yield WeightRequest(column, fraction, 1, key)
        for value, weight in rows:
            running += weight
            if running >= fraction * total:
                return value
        return grid.lower  # an empty scope

    def unclipped(ladder, *args, **kwargs):
        return Noisy(ladder.clipped[-1], 0.0, "none"), len(ladder.rungs) - 1

    def exact_at(ladder, k, *args, **kwargs):
        return Noisy(ladder.clipped[k], 0.0, "none")

    def unclipped_at(ladder, k, *args, **kwargs):
        return Noisy(ladder.clipped[-1], 0.0, "none")

    exact = lambda true, *args, **kwargs: Noisy(true, 0.0, "none")
    monkeypatch.setattr(noisy_answers, "laplace_real", exact)
    monkeypatch.setattr(noisy_answers, "laplace_integer", exact)
    monkeypatch.setattr(noisy_answers, "clipped_sum", unclipped)
    monkeypatch.setattr(noisy_answers, "joint_sum_at", unclipped_at)
    monkeypatch.setattr(inverse_sensitivity, "instance_release", at_target)
    monkeypatch.setattr(inverse_sensitivity, "weighted_release", at_weighted_target)
    # the spreads' noisy count, mean and squares, their bound the top rung
    monkeypatch.setattr(variance, "laplace_real", exact)
    monkeypatch.setattr(variance, "laplace_integer", exact)
    monkeypatch.setattr(variance, "sum_at", exact_at)
    monkeypatch.setattr(variance, "draw_rung", lambda beyond, *args, **kwargs: len(beyond) - 1)
    monkeypatch.setattr(correlation, "laplace_real", exact)
    monkeypatch.setattr(correlation, "laplace_integer", exact)
    monkeypatch.setattr(correlation, "draw_rung", lambda beyond, *args, **kwargs: len(beyond) - 1)


@pytest.fixture(scope="module")
def engines(sail_url, tmp_path_factory):
    """One engine over Spark (its ledger in an in-memory DuckDB) and one over DuckDB,
    both over the same rows of the contract's ``t`` (tests/contract.py); the Spark
    server is ``sail_url``'s (a module may override it: tests/backends/test_spark_real.py)."""
    from proxy.backends import open_backend
    from proxy.backends.duckdb_backend import DuckDBBackend
    from proxy.engine import Engine
    from tests.contract import RULES, TYPES, table_rows

    data = table_rows()
    duckdb_url = f"duckdb:///{tmp_path_factory.mktemp('spark') / 'd.duckdb'}"
    load_table(sail_url, "t", data, TYPES)
    load_table(duckdb_url, "t", data, TYPES)
    backends = open_backend(sail_url), DuckDBBackend(":memory:"), open_backend(duckdb_url)
    spark, store, duck = backends
    try:
        yield Engine(RULES, spark, store=store), Engine(RULES, duck)
    finally:  # an open Spark Connect session would keep the process from exiting
        for backend in backends:
            backend.close()
