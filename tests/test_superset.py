"""A real Apache Superset (tests/system.py superset_env: its own virtual environment,
its own pins) drives ``idp-proxy serve`` over the demo's tables, on both backends,
through its REST API with Flask's test client (tests/superset_driver.py; no web server):
the database is added as an analyst would add it, SQL Lab runs aggregates (it sends
``SELECT pg_backend_pid()`` before each statement) and is refused raw rows, a dataset is
made from a table, and charts ask for their data. The SQL Superset generates for the
charts is the one kept verbatim in tests/bi/superset-*.sql (checked here)."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bicorpus import CORPUS, read_entry
from tests.factories import REGIONS
from tests.system import superset_config, superset_env
from tests.wireserver import RunningProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DRIVER = Path(__file__).resolve().parent / "superset_driver.py"


class Superset:
    """One Superset app in its own Python, answering REST calls (tests/superset_driver.py)."""

    def __init__(self, folder: Path) -> None:
        python, template = superset_env()
        metadata = folder / "superset.db"
        shutil.copy(template, metadata)
        env = {**os.environ, "SUPERSET_CONFIG_PATH": str(superset_config(folder, metadata)),
               "SUPERSET_HOME": str(folder)}
        env.pop("PYTHONPATH", None)
        self.log = folder / "superset.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen([str(python), str(DRIVER)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log, text=True,
                                            env=env)
        self.ready = False  # read on the first call: the proxy starts meanwhile
        self.datasets: dict[str, int] = {}

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        if not self.ready:
            self.ready = bool(self.process.stdout.readline())
            assert self.ready, "Superset did not start:\n" + self.log.read_text()[-5000:]
        self.process.stdin.write(json.dumps({"method": method, "path": path,
                                             "json": body}) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "Superset stopped:\n" + self.log.read_text()[-5000:]
        reply = json.loads(answer)
        return reply["status"], reply["json"] if reply["json"] is not None else {
            "text": reply["text"]}

    def close(self) -> None:
        """Ends the driver: with nothing left to ask, its interpreter's own shutdown
        (4.6 s here) serves no test, and its metadata is a copy in a temporary folder."""
        self.process.stdin.close()
        self.process.kill()
        self.process.wait(60)


@pytest.fixture(scope="module")
def superset(tmp_path_factory):
    app = Superset(tmp_path_factory.mktemp("superset"))
    yield app
    app.close()


@dataclass
class Served:
    proxy: RunningProxy
    database: int  # Superset's id of the proxy as a database


@pytest.fixture(scope="module")
def served(demo_server, superset):
    """The proxy over the demo on one backend (conftest's demo_server), added to
    Superset as a database."""
    status, body = superset.call("POST", "/api/v1/database/", {
        "database_name": f"idp-proxy on port {demo_server.port}",
        "sqlalchemy_uri": f"postgresql+psycopg2://alice@127.0.0.1:{demo_server.port}/demo",
        "expose_in_sqllab": True})
    assert status == 201, body
    yield Served(demo_server, body["id"])
    # Superset's metadata in SQLite keeps table names unique across databases: the
    # datasets go with their database before the other backend's are made.
    for key, dataset in list(superset.datasets.items()):
        if key.startswith(f"{body['id']}."):
            assert superset.call("DELETE", f"/api/v1/dataset/{dataset}")[0] == 200
            del superset.datasets[key]


_CLIENT_IDS = itertools.count(1)


def sql_lab(superset: Superset, served: Served, sql: str) -> tuple[int, dict]:
    return superset.call("POST", "/api/v1/sqllab/execute/", {
        "database_id": served.database, "sql": sql, "runAsync": False, "schema": "public",
        "client_id": f"t{next(_CLIENT_IDS)}", "queryLimit": 1000, "tab": "idp",
        "sql_editor_id": "1", "select_as_cta": False, "ctas_method": "TABLE"})


def test_sql_lab_runs_aggregates_and_is_refused_raw_rows(superset, served):
    status, body = sql_lab(superset, served,
                           "SELECT region, COUNT(*) AS n FROM people GROUP BY region")
    assert status == 200, body
    assert body["status"] == "success"
    # the session id SQL Lab read with SELECT pg_backend_pid(), kept to cancel the query
    assert isinstance(body["query"]["extra"]["cancel_query"], int)
    counts = {row["region"]: row["n"] for row in body["data"]}
    assert set(counts) == set(REGIONS) and 15_000 < sum(counts.values()) < 25_000
    status, body = sql_lab(superset, served, "SELECT MEDIAN(income) AS m FROM people")
    assert status == 200 and 10_000 < body["data"][0]["m"] < 100_000, body
    status, body = sql_lab(superset, served, "SELECT * FROM people")
    assert status != 200
    text = json.dumps(body)
    assert "42501" in text or "aggregates" in text, body
    assert "person_id" not in re.sub(r"SELECT \* FROM people", "", text)


def _dataset(superset: Superset, served: Served, table: str) -> int:
    """Superset's dataset of a table, made once (as "+ Dataset" makes it)."""
    key = f"{served.database}.{table}"
    if key not in superset.datasets:
        status, body = superset.call("POST", "/api/v1/dataset/", {
            "database": served.database, "schema": "public", "table_name": table})
        assert status == 201, body
        superset.datasets[key] = body["id"]
    return superset.datasets[key]


def _chart_data(superset: Superset, dataset: int, query: dict,
                result_type: str = "full") -> tuple[int, dict]:
    return superset.call("POST", "/api/v1/chart/data", {
        "datasource": {"id": dataset, "type": "table"}, "force": True,
        "queries": [query], "result_format": "json", "result_type": result_type})


# The queries of Superset's chart forms (as its frontend's buildQuery sends them), for
# the charts of tests/bi/superset-*.sql.
BAR_CHART = {"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "region",
                          "label": "region", "expressionType": "SQL"}],
             "metrics": ["count"], "orderby": [["count", False]], "row_limit": 10000,
             "filters": [], "extras": {"having": "", "where": ""}}
BIG_NUMBER = {"columns": [], "metrics": ["count"], "row_limit": 10000, "filters": [],
              "extras": {"having": "", "where": ""}}
TIME_SERIES = {"columns": [{"timeGrain": "P1M", "columnType": "BASE_AXIS",
                            "sqlExpression": "visited_at", "label": "visited_at",
                            "expressionType": "SQL"}],
               "metrics": ["count"], "orderby": [["count", False]], "row_limit": 10000,
               "filters": [{"col": "visited_at", "op": "TEMPORAL_RANGE",
                            "val": "2023-01-01T00:00:00 : 2025-01-01T00:00:00"}],
               "extras": {"having": "", "where": "", "time_grain_sqla": "P1M"}}
SERIES_LIMIT = {"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "sex",
                             "label": "sex", "expressionType": "SQL"}, "region"],
                "series_columns": ["region"], "series_limit": 2,
                "series_limit_metric": "count", "metrics": ["count"],
                "orderby": [["count", False]], "row_limit": 10000, "filters": [],
                "extras": {"having": "", "where": ""}}


def _same_sql(generated: str, corpus_file: str) -> None:
    kept = read_entry(CORPUS / corpus_file).sql
    assert " ".join(generated.split()) == " ".join(kept.split()), (corpus_file, generated)


def test_a_dataset_and_bar_chart_and_big_number(superset, served):
    people = _dataset(superset, served, "people")
    status, body = _chart_data(superset, people, BAR_CHART)
    assert status == 200, body
    result = body["result"][0]
    counts = {row["region"]: row["count"] for row in result["data"]}
    assert set(counts) == set(REGIONS) and 15_000 < sum(counts.values()) < 25_000
    _same_sql(result["query"], "superset-bar-chart.sql")
    status, body = _chart_data(superset, people, BIG_NUMBER)
    assert status == 200, body
    result = body["result"][0]
    assert 15_000 < result["data"][0]["count"] < 25_000
    _same_sql(result["query"], "superset-big-number.sql")
    status, body = _chart_data(superset, people, SERIES_LIMIT, "query")
    assert status == 200, body
    _same_sql(body["result"][0]["query"], "superset-series-limit.sql")


def _months(rows: list[dict]) -> bool:
    return 12 <= len(rows) <= 24  # the demo's visits span 2023 and 2024


def _top_two_regions(rows: list[dict]) -> bool:
    return {row["region"] for row in rows} < set(REGIONS)


@pytest.mark.parametrize("table,query,corpus_file,check", [
    pytest.param("visits", TIME_SERIES, "superset-time-series.sql", _months, id="time-grain"),
    pytest.param("people", SERIES_LIMIT, "superset-series-limit.sql", _top_two_regions,
                 id="series-limit"),
])
def test_time_series_and_series_limit_charts(superset, served, table, query, corpus_file, check):
    """A time series with a time grain (date_trunc buckets of the demo's visits.visited_at,
    declared as a timestamp with a domain), and a chart with a series limit (Superset's
    join of the query with its own top-N subquery, answered from one release)."""
    status, body = _chart_data(superset, _dataset(superset, served, table), query)
    assert status == 200, body
    result = body["result"][0]
    assert check(result["data"]), result["data"]
    _same_sql(result["query"], corpus_file)
