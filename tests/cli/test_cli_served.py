"""``idp-proxy query`` and ``release`` while ``idp-proxy serve`` holds the DuckDB file:
the command finds the file locked, sends its work to the server's admin socket
(proxy.admin), prints what it prints alone, and the budget pays once."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from tests import forked_cli
from tests.factories import Served, people_table

pytestmark = pytest.mark.postgres  # the server's catalog runs on PostgreSQL's binaries

RULES = """
[server]
auth = "trust"

[defaults]
answer_cache = false  # a repeat prints as the first run did (not "repeated answer")

[analysts.alice]
budget = 100

[analysts.poor]
budget = 0.15
""" + people_table(  # one row per person, so that a release may mask it
    max_rows_per_unit=1, individual_queries=False) + """
[tables.regions]
public = true
"""
# Answers that are exact (a whole table's count is public; regions is a public table),
# so a run alone and one through the server must print the very same bytes.
SCRIPT_SQL = ("SET idp.epsilon = 0.2;\nSELECT COUNT(*) FROM people;\n"
              "SELECT region, label FROM regions ORDER BY region;\nSHOW idp.budget;\n")
PEOPLE = 500


@pytest.fixture
def served(tmp_path):
    return Served.prepare(tmp_path, RULES, f"duckdb:///{tmp_path / 'data.duckdb'}", PEOPLE)


def run(served: Served, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return forked_cli.run([*args, "--rules", str(served.rules), "--backend", served.backend],
                          cwd=cwd, env={**os.environ, "IDP_PROXY_HOME": str(served.home)})


def _json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout, parse_float=Decimal)


def test_answers_and_refusals_print_the_same_alone_and_through_the_server(served, tmp_path):
    script = tmp_path / "exact.sql"
    script.write_text(SCRIPT_SQL)
    commands = [("query", "--user", "alice", "--format", fmt, "-f", str(script))
                for fmt in ("table", "csv", "json")] + [
        ("query", "--user", "alice", "SELECT * FROM people"),
        ("query", "--user", "alice", "--prior", "beta(1, 2)", "SELECT MEDIAN(income) FROM people"),
        ("query", "--user", "mallory", "SELECT COUNT(*) FROM people"),
        ("query", "--user", "poor", "--epsilon", "0.2",
         "SELECT COUNT(*) FROM people WHERE age > 30"),
        ("release", "people", "--user", "mallory", "--columns", "income", "--k", "10",
         "--epsilon", "0.5", "--method", "idp-cbls", "--out", str(tmp_path / "x.csv")),
        ("release", "people", "--user", "alice", "--columns", "region", "--k", "10",
         "--epsilon", "0.5", "--method", "idp-cbls", "--out", str(tmp_path / "x.csv"))]
    alone = [run(served, *command) for command in commands]
    with served.serve() as proxy:
        through = [run(served, *command) for command in commands]
        assert not any("admin call" in line and "failed" in line for line in proxy.log)
    for command, first, second in zip(commands, alone, through):
        assert (second.returncode, second.stdout, second.stderr) == (
            first.returncode, first.stdout, first.stderr), command
    codes = [out.stderr.split("]")[0] for out in alone[3:]]
    assert codes == ["ERROR [42501", "ERROR [22023", "ERROR [28000", "ERROR [PB001",
                     "ERROR [28000", "ERROR [0A000"]
    assert all(out.returncode == 1 and len(out.stderr.splitlines()) == 1 for out in alone[3:])
    assert "99.8" not in alone[0].stdout  # nothing in the script was charged
    assert [row["command"] for row in json.loads(alone[2].stdout)] == [
        "SET", "SELECT 1", "SELECT 4", "SHOW"]


def test_a_noisy_query_through_the_server_prints_as_alone_and_is_charged_once(served):
    sql = "SELECT COUNT(*) AS n, MEDIAN(age) FROM people WHERE age > 30"
    with served.serve():
        table = run(served, "query", "--user", "alice", "--epsilon", "0.05", sql)
        described = _json(run(served, "query", "--user", "alice", "--format", "json", sql))
        ledger = _json(run(served, "ledger", "--format", "json"))
        (account,) = _json(run(served, "budget", "show", "alice", "--format", "json"))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert [part.strip() for part in lines[0].split("|")] == ["n", "median"]
    assert re.fullmatch(r"-+\+-+", lines[1]) and lines[3] == "(1 row)"
    assert [float(part) for part in lines[2].split("|")]
    assert lines[4].startswith("NOTICE: iDP") and (
        "spent epsilon 0.1, 99.9 remaining; 95% error bound n ±" in lines[4]) and len(lines) == 5
    (answer,) = described
    assert answer["columns"] == ["n", "median"] and len(answer["rows"]) == 1
    assert answer["privacy"]["epsilon_spent"] == Decimal("0.2")
    assert [(e["analyst"], e["epsilon"], e["status"]) for e in ledger] == [
        ("alice", Decimal("0.1"), "charged"), ("alice", Decimal("0.2"), "charged")]
    assert account["spent"] == Decimal("0.3") and account["remaining"] == Decimal("99.7")


def test_a_release_through_the_server_writes_where_the_command_runs(served, tmp_path):
    """The server holds the file and writes the output; ``--out masked.csv`` is the file
    in the command's folder, not the server's."""
    work = tmp_path / "work"
    work.mkdir()
    release = ("release", "people", "--user", "alice", "--columns", "income,age", "--k", "10",
               "--epsilon", "0.5", "--method", "idp-cbls", "--out", "masked.csv")
    with served.serve():
        out = run(served, *release, cwd=work)
        again = run(served, *release, cwd=work)
        ledger = _json(run(served, "ledger", "--format", "json"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no progress on a pipe
    lines = out.stdout.splitlines()
    assert lines[0] == (f"released {PEOPLE} rows of people to masked.csv "
                        "(income: 50 clusters, age: 50 clusters)")
    assert lines[1].startswith("mean SSE (docs/release.md): ")
    assert lines[2] == "epsilon spent 0.5, 99.5 remaining"
    with (work / "masked.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == PEOPLE and all(row["age"].isdigit() for row in rows)
    assert (work / "masked.csv.json").exists()
    assert again.returncode == 1 and again.stderr == (
        f"ERROR [22023]: --out '{work / 'masked.csv'}' exists; choose a new file\n")
    assert [(e["epsilon"], e["status"]) for e in ledger] == [(Decimal("0.5"), "charged")]
