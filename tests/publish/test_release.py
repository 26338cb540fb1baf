"""``idp-proxy release`` on both backends: the output's shape, each cluster's released
value against the method's law (the clusters rebuilt here in Python from the loaded
values; KS at significance 1e-4, as test_samplers), the SSE, the ledger, and every
refusal before any budget is spent."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest
from scipy import stats

from proxy.backends import open_backend
from proxy.errors import BadSetting, NotSupported, OutputFailed, UnknownColumn, UnknownTable
from proxy.ledger import Ledger
from proxy.privacy.mechanisms import grid_step
from proxy.privacy.microaggregation import Cluster, centroid, sensitivity
from proxy.publish.request import prepare
from proxy.publish.run import run_release
from proxy.rules import domain_resolution, parse_rules
from tests import forked_cli
from tests.databases import load_table
from tests.privacy.laws import ALPHA

pytestmark = pytest.mark.postgres

RULES = """
[analysts.owner]
budget = 100

[tables.tax]
[tables.tax.columns]
id = { type = "int", public = true }
income = { type = "float", domain = [0, 300000] }
age = { type = "int", domain = [0, 120] }
region = { type = "text", keys = ["n", "s"] }
secret_id = { type = "int" }

[tables.nodomain]
[tables.nodomain.columns]
x = { type = "float" }
"""

N = 1003  # not a multiple of k: the last cluster absorbs the remainder
RNG = np.random.default_rng(11)
INCOME = [float(v) for v in np.round(RNG.lognormal(10.5, 0.7, N), 2)]
INCOME[5] = None  # a NULL stays NULL
AGE = [int(v) for v in RNG.integers(18, 90, N)]


def _source(url: str):
    load_table(url, "tax", {"id": list(range(N)), "income": INCOME, "age": AGE,
                            "region": ["n", "s"] * (N // 2) + ["n"],
                            "secret_id": list(range(N))},
               {"id": "INTEGER", "income": "DOUBLE PRECISION", "age": "INTEGER",
                "region": "TEXT", "secret_id": "INTEGER"})
    load_table(url, "nodomain", {"x": [1.0, 2.0]}, {"x": "DOUBLE PRECISION"})
    backend = open_backend(url)
    rules = parse_rules(RULES)
    ledger = Ledger(backend, rules)
    ledger.ensure_analyst("owner")
    yield rules, backend, ledger
    backend.close()


@pytest.fixture
def source(backend_url):
    yield from _source(backend_url)


@pytest.fixture(scope="module")
def refusing_source(module_backend_url):
    """One source per backend for the refusals, which compare the whole ledger (entries
    and budgets) before and after their own refused release: loaded once, not per case."""
    yield from _source(module_backend_url)


def _release(source, out, columns="income,age", k=10, epsilon="1", method="idp-cbls",
             **options):
    rules, backend, ledger = source
    job = prepare(rules, backend, "tax", columns, k, epsilon, method,
                  options.get("split", "equal"), options.get("alpha"),
                  options.get("domains", ()), options.get("key", "id"), out)
    return job, run_release(backend, ledger, job, "owner")


def _read(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _clusters(values: list[float], k: int) -> list[list[int]]:
    """Positions of the non-null values, sorted by value (ties by position), cut into
    clusters of k with the last absorbing the remainder."""
    order = sorted((i for i, v in enumerate(values) if v is not None),
                   key=lambda i: (values[i], i))
    count = max(len(order) // k, 1)
    return [order[c * k: (c + 1) * k] if c < count - 1 else order[c * k:]
            for c in range(count)]


@pytest.mark.parametrize("method", ["idp-cbls", "idp-ls", "dp-um"])
def test_every_cluster_is_its_centroid_plus_laplace(source, tmp_path, method):
    """Each income cluster's released value, through the CDF of its own law (centroid
    + Laplace(S/ε_a), clamped to the domain: a clamped value is a uniform draw from the
    mass at the bound), is uniform (KS). The grid, a millionth of the domain over 1024, is
    too fine to see: ignored."""
    out = tmp_path / "release.csv"
    job, report = _release(source, str(out), method=method, epsilon="1")
    rows = {int(row["id"]): row for row in _read(out)}
    assert report.rows == N and len(rows) == N
    assert rows[5]["income"] == ""
    draw = np.random.default_rng(1)
    uniforms = []
    for name, values, (lower, upper), epsilon in zip(
            ("income", "age"), (INCOME, AGE), job.domains, job.epsilons):
        clusters = _clusters(values, 10)
        assert report.clusters[("income", "age").index(name)] == len(clusters)
        for members in clusters:
            released = {float(rows[i][name]) for i in members}
            assert len(released) == 1  # the whole cluster shares one value
            (value,) = released
            assert lower <= value <= upper
            if name == "age":  # rounded to integers: its law is checked through income
                continue
            ordered = sorted(min(max(values[i], lower), upper) for i in members)  # clamped
            cluster = Cluster(len(ordered), float(sum(ordered)), tuple(ordered[:3]),
                              tuple(ordered[-3:]))
            spread = sensitivity(method, cluster, lower, upper)
            law = stats.laplace(centroid(method, cluster), spread / float(epsilon))
            if value <= lower:
                uniforms.append(draw.uniform(0, law.cdf(lower)))
            elif value >= upper:
                uniforms.append(draw.uniform(law.cdf(upper), 1))
            else:
                step = grid_step(domain_resolution(lower, upper))
                assert value / step == round(value / step)  # on the domain's public grid
                uniforms.append(law.cdf(value))
    assert len(uniforms) == 100
    assert stats.kstest(uniforms, "uniform").pvalue > ALPHA


def test_the_reported_sse_is_seed_002s_formula(source, tmp_path):
    out = tmp_path / "release.parquet"
    _, report = _release(source, str(out))
    import duckdb

    masked = dict(duckdb.sql(f"SELECT id, income FROM '{out}'").fetchall())
    ages = dict(duckdb.sql(f"SELECT id, age FROM '{out}'").fetchall())
    income_var = np.var([v for v in INCOME if v is not None], ddof=1)
    age_var = np.var(AGE, ddof=1)
    total = 0.0
    for i in range(N):
        d_income = 0.0 if INCOME[i] is None else (masked[i] - INCOME[i]) / income_var
        total += d_income ** 2 + ((ages[i] - AGE[i]) / age_var) ** 2
    assert report.mean_sse == pytest.approx(total / N / 4, rel=1e-9)
    info = json.loads(Path(f"{out}.json").read_text())
    assert info["mean_sse"] == report.mean_sse and info["rows"] == N


CENSUS_RULES = """
[analysts.owner]
budget = 100

[tables.census]
[tables.census.columns]
id = { type = "int", public = true }
afnlwgt = { type = "int", domain = [0, 100000] }
tax = { type = "float", domain = [0, 1000] }
age = { type = "int", domain = [40000, 50000] }
price = { type = "float", domain = [0, 1000] }
"""


def test_the_output_keeps_the_source_column_names_and_types(backend_url, tmp_path):
    """AFNLWGT stays AFNLWGT (the rules fold names to lower case) and an integer column
    stays an integer one, in a CSV, a Parquet file and a table. A released value beyond
    its type's range is clamped to it (every age is clamped into the domain [40000,
    50000], beyond SMALLINT), not refused after the ε is spent. A DECIMAL keeps its
    precision on DuckDB; PostgreSQL's numeric comes out as double precision."""
    n = 60
    load_table(backend_url, "census", {
        "ID": list(range(n)), "AFNLWGT": [1000 + 37 * i for i in range(n)],
        "Tax": [0.5 * i for i in range(n)], "Age": [30000] * n,
        "Price": [Decimal(i) / 4 for i in range(n)]},
        {"ID": "BIGINT", "AFNLWGT": "INTEGER", "Tax": "DOUBLE PRECISION", "Age": "SMALLINT",
         "Price": "NUMERIC(10,2)"})
    backend = open_backend(backend_url)
    rules = parse_rules(CENSUS_RULES)
    ledger = Ledger(backend, rules)
    ledger.ensure_analyst("owner")
    names = ["ID", "AFNLWGT", "Tax", "Age", "Price"]
    for out in (tmp_path / "r.csv", tmp_path / "r.parquet", "table:census_masked"):
        job = prepare(rules, backend, "census", "afnlwgt,tax,age,price", 10, "1", "idp-cbls",
                      "equal", None, (), "id", str(out))
        run_release(backend, ledger, job, "owner")
    with (tmp_path / "r.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == names and len(rows) == n + 1
    assert all(re.fullmatch(r"-?[0-9]+", row[1]) for row in rows[1:])
    assert {row[3] for row in rows[1:]} == {"32767"}
    decimal = backend_url.startswith("duckdb")
    parquet = duckdb.sql(f"DESCRIBE SELECT * FROM '{tmp_path / 'r.parquet'}'").fetchall()
    assert [(row[0], row[1]) for row in parquet] == list(zip(names, [
        "BIGINT", "INTEGER", "DOUBLE", "SMALLINT", "DECIMAL(10,2)" if decimal else "DOUBLE"]))
    assert backend.column_types("census_masked") == list(zip(names, [
        "bigint", "integer", "double precision", "smallint",
        "numeric(10,2)" if decimal else "double precision"]))
    assert backend.query('SELECT DISTINCT "Age" FROM census_masked') == [(32767,)]
    backend.close()


def test_a_table_output_and_the_ledger(source):
    _rules, backend, ledger = source
    _job, report = _release(source, "table:tax_masked", epsilon="0.5", k=20)
    assert backend.query('SELECT count(*), count(income) FROM "tax_masked"')[0] == (N, N - 1)
    columns = [name for name, _ in backend.column_types("tax_masked")]
    assert columns == ["id", "income", "age"]
    (entry,) = ledger.entries("owner")
    assert entry[6] == 0.5 and entry[9] == "charged"
    assert report.epsilon_remaining == 99.5


@pytest.mark.parametrize("args,error", [
    ({"columns": "income,nosuch"}, UnknownColumn),
    ({"columns": "region"}, NotSupported),
    ({"method": "laplace"}, BadSetting),
    ({"k": 2}, BadSetting),
    ({"epsilon": "0"}, BadSetting),
    ({"epsilon": "2"}, BadSetting),
    ({"key": "secret_id"}, NotSupported),
    ({"split": "1,2,3"}, BadSetting),
    ({"domains": ("income=5:1",)}, BadSetting),
    ({"out": "table:tax"}, BadSetting),
    ({"out": "release.txt"}, BadSetting),
])
def test_refusals_spend_nothing(refusing_source, tmp_path, args, error):
    rules, backend, ledger = refusing_source
    before = ledger.entries(), ledger.budgets()
    options = {"columns": "income,age", "k": 10, "epsilon": "1", "method": "idp-cbls",
               "split": "equal", "alpha": None, "domains": (), "key": "id",
               "out": str(tmp_path / "r.csv"), **args}
    with pytest.raises(error) as refused:
        prepare(rules, backend, "tax", options["columns"], options["k"], options["epsilon"],
                options["method"], options["split"], options["alpha"], options["domains"],
                options["key"], options["out"])
    assert len(str(refused.value).splitlines()) == 1
    assert (ledger.entries(), ledger.budgets()) == before


def test_an_output_that_cannot_be_written_is_one_line_and_the_epsilon_stays_spent(
        source, tmp_path):
    """The folder disappears between the checks and the writing (as a full disk or a
    revoked permission would fail it)."""
    rules, backend, ledger = source
    folder = tmp_path / "gone"
    folder.mkdir()
    job = prepare(rules, backend, "tax", "income", 10, "0.5", "idp-cbls", "equal", None, (),
                  None, str(folder / "r.csv"))
    folder.rmdir()
    with pytest.raises(OutputFailed) as failed:
        run_release(backend, ledger, job, "owner")
    assert failed.value.sqlstate == "58030" and "r.csv" in failed.value.message
    assert [entry[9] for entry in ledger.entries("owner")] == ["charged"]


def test_methods_that_need_a_domain_say_so_and_cbls_does_not(source, tmp_path):
    rules, backend, _ = source
    with pytest.raises(NotSupported, match="idp-ls needs a domain for x"):
        prepare(rules, backend, "nodomain", "x", 1, "1", "idp-ls", "equal", None, (), None,
                str(tmp_path / "a.csv"))
    with pytest.raises(UnknownTable):
        prepare(rules, backend, "nosuch", "x", 3, "1", "idp-cbls", "equal", None, (), None,
                str(tmp_path / "a.csv"))
    job = prepare(rules, backend, "nodomain", "x", 3, "1", "idp-cbls", "equal", None, (), None,
                  str(tmp_path / "a.csv"))
    assert job.domains == ((None, None),)


def test_alpha_and_split_and_domain_options(source, tmp_path):
    job, _ = _release(source, str(tmp_path / "a.csv"), alpha=1.5, split="3,1",
                      domains=("age=0:200",))
    assert job.domains[0] == (0.0, 1.5 * max(v for v in INCOME if v is not None))
    assert job.domains[1] == (0.0, 200.0)
    assert job.epsilons == (Fraction(3, 4), Fraction(1, 4))


def test_the_command_line_explains_itself_and_refuses_before_spending(tmp_path):
    script = str(Path(sys.executable).parent / "idp-proxy")
    env = {**os.environ, "IDP_PROXY_HOME": str(tmp_path / "home")}
    helped = subprocess.run([script, "release", "--help"], capture_output=True, text=True,
                            env=env, check=True, timeout=60).stdout
    for option in ("--columns", "--k", "--epsilon", "--method", "--budget-split", "--alpha",
                   "--domain", "--key", "--out", "--user", "Examples:"):
        assert option in helped
    out = forked_cli.run(["release", "people", "--user", "alice", "--columns", "income", "--k",
                          "2", "--epsilon", "0.5", "--method", "idp-cbls", "--out",
                          str(tmp_path / "p.csv")], env=env)
    assert out.returncode == 1 and out.stderr.startswith("ERROR [22023]: --k 2 is too small")
    budget = forked_cli.run(["budget", "show", "--user", "alice", "--format", "json"], env=env)
    assert json.loads(budget.stdout)[0]["spent"] in (0, "0", 0.0)
    released = forked_cli.run(["release", "people", "--user", "alice", "--columns",
                               "income,age", "--k", "10", "--epsilon", "0.5", "--method",
                               "idp-cbls", "--out", str(tmp_path / "p.parquet")], env=env,
                              timeout=300)
    assert released.returncode == 0, released.stderr
    assert "released 20000 rows of people" in released.stdout
    assert math.isfinite(float(released.stdout.split("mean SSE (docs/release.md): ")[1]
                               .split()[0]))
