"""The smoke test on a real Spark (Apache Spark in local mode behind its own Spark
Connect server, tests/sparkserver.py), where tests/backends/test_spark.py runs the whole backend
contract on Sail: a few of its queries, covering COUNT, SUM, AVG, MEDIAN, other
percentiles, MAX, MIN, WHERE and GROUP BY, all user-level, give the same statistics as
DuckDB on the same rows, and no SQL sent computes a percentile approximately.

One module-scoped server; the JVM's start and warm-up dominate, hence the slow mark
(the suite starts the longest modules first; one worker runs the module)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.settings import Settings
from tests.contract import APPROXIMATE, CONTRACT, RULES
from tests.databases import spark_session
from tests.sparkserver import throwaway_spark

# alone 38 s (setup: the JVM's start and a cold first write, 19 s); more in the suite
pytestmark = pytest.mark.slow(seconds=90)
SMOKE = [CONTRACT[0], CONTRACT[1], CONTRACT[2], CONTRACT[6]]


@pytest.fixture(scope="module")
def sail_url(tmp_path_factory):
    """Overrides the Sail server under conftest's ``engines``: a real Spark server."""
    with throwaway_spark(tmp_path_factory.mktemp("spark")) as url:
        yield url
        spark_session(url).stop()  # a session left open keeps the process from exiting


@pytest.fixture
def sent(engines, monkeypatch) -> list[str]:
    """Every statement the Spark engine sends, as Spark received it."""
    backend, statements = engines[0].backend, []
    opened = backend.transaction

    @contextmanager
    def recording(snapshot: bool = False):
        with opened(snapshot) as tx:
            execute = tx.execute
            tx.execute = lambda sql, params=(): statements.append(sql) or execute(sql, params)
            yield tx

    monkeypatch.setattr(backend, "transaction", recording)
    return statements


@pytest.mark.parametrize("sql", SMOKE)
def test_real_spark_gives_the_statistics_duckdb_gives(sql, engines, sent):
    plan = analyze(parse_statements(sql)[0], RULES, Settings())
    on_spark, on_duckdb = (engine.statistics(plan) for engine in engines)
    assert on_spark[:2] == on_duckdb[:2]  # the per-unit bound's shift, every statistic
    assert on_spark[2] is None  # no data version on a plain Spark table: nothing cached
    assert sent and not [text for text in sent if any(word in text.upper()
                                                      for word in APPROXIMATE)]
