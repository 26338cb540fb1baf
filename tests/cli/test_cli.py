"""The command line as a new user meets it: ``idp-proxy`` run as a process of its own
(forked ready-imported: tests/forked_cli.py; --help through the installed script), on
the embedded demo and on PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests import forked_cli
from tests.databases import load_table
from tests.factories import people_table

SCRIPT = str(Path(sys.executable).parent / "idp-proxy")
DEMO_RULES = Path(__file__).resolve().parents[2] / "rules" / "demo.toml"


@pytest.fixture(scope="session")
def demo_file(tmp_path_factory) -> Path:
    """The demo's tables, made once per test process by what a fresh home's first query
    runs (proxy.demo.create_demo): each home gets a copy, as making them costs a CLI
    run 0.35 s of CPU. test_progress and the README's walk-through still watch a fresh
    home make them."""
    from proxy.demo import create_demo

    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    create_demo(path)
    return path


@pytest.fixture
def home(tmp_path, demo_file):
    (tmp_path / "home").mkdir()
    shutil.copyfile(demo_file, tmp_path / "home" / "demo.duckdb")
    return {**os.environ, "IDP_PROXY_HOME": str(tmp_path / "home")}


def cli(env, *args, stdin=None):
    return forked_cli.run(list(args), env=env, input=stdin)


def ledger(env, *extra):
    out = cli(env, "ledger", "--format", "json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_readme_first_command_gives_a_noisy_median_with_metadata(home):
    out = cli(home, "query", "--user", "alice", "SELECT MEDIAN(income) FROM people")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].strip() == "median"
    assert 10_000 < float(lines[2]) < 100_000
    notice = next(line for line in lines if line.startswith("NOTICE:"))
    assert "iDP" in notice and "spent epsilon 0.1" in notice
    assert "95% error bound" not in notice  # the demo's report_scale is "none"


def test_select_star_is_refused_with_what_is_allowed_and_nothing_spent(home):
    cli(home, "query", "--user", "alice", "SELECT COUNT(*) FROM people WHERE age > 50")
    before = ledger(home)
    out = cli(home, "query", "--user", "alice", "SELECT * FROM people")
    assert out.returncode != 0
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("ERROR [42501]:") and "aggregates" in line and "MEDIAN" in line
    assert ledger(home) == before


def test_a_statement_nested_too_deeply_is_refused_as_the_server_refuses_it(home):
    """3,000 NOTs exhaust Python's stack while the statement is read: the command line
    called that an internal error (RecursionError); it is the server's 54001."""
    out = cli(home, "query", "--user", "alice",
              "SELECT COUNT(*) FROM people WHERE " + "NOT " * 3000 + "age > 1")
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith("ERROR [54001]: statement too complex"), line


def test_json_output_has_rows_and_privacy_metadata(home):
    out = cli(home, "query", "--user", "bob", "--format", "json", "--epsilon", "0.2",
              "SELECT region, COUNT(*) AS n FROM people WHERE age > 40 GROUP BY region")
    assert out.returncode == 0, out.stderr
    (statement,) = json.loads(out.stdout)
    assert statement["columns"] == ["region", "n"]
    assert [row[0] for row in statement["rows"]] == ["north", "south", "east", "west"]
    privacy = statement["privacy"]
    assert privacy["model"] == "iDP"
    assert privacy["epsilon_spent"] == 0.2 and privacy["epsilon_remaining"] == 99.8
    assert len(privacy["ci95"]["n"]) == 4 and privacy["mechanism"] == "discrete Laplace"


def test_script_file_with_settings_and_csv(home, tmp_path):
    script = tmp_path / "q.sql"
    script.write_text("SET idp.epsilon = 0.05;\n-- a comment\n"
                      "SELECT MAX(cost) FROM visits WHERE department = 'oncology';\n"
                      "SELECT MAX(cost) FROM visits WHERE department = 'cardiology';\n"
                      "SHOW idp.budget;\n")
    out = cli(home, "query", "--user", "alice", "--format", "csv", "-f", str(script))
    assert out.returncode == 0, out.stderr
    # data alone: no SET line, one header for the two MAX answers, another for SHOW
    header, first, second, shown, budget = out.stdout.splitlines()
    assert header == "max" and float(first) > 0 and float(second) > 0
    assert shown == "budget" and budget.startswith("99.9")


def test_arrays_and_intervals_are_shown_as_psql_shows_them(home):
    """An array of percentiles and a difference of two released moments, in each
    format: psql's ``{33,48}`` and ``730 days 03:13:03`` (Python's list and timedelta
    texts until 2026-11-29)."""
    sql = ("SELECT MAX(visited_at) - MIN(visited_at) AS span, percentile_disc(ARRAY[0.25, "
           "0.75]) WITHIN GROUP (ORDER BY days) AS q FROM visits")
    table, csv_out, json_out = (cli(home, "query", "--user", "alice", "--format", fmt, sql)
                                for fmt in ("table", "csv", "json"))
    interval = re.compile(r"\d+ days \d\d:\d\d:\d\d")
    assert interval.search(table.stdout) and re.search(r"\{\d+,\d+\}", table.stdout)
    span, q = next(csv.reader(io.StringIO(csv_out.stdout.splitlines()[1])))
    assert interval.fullmatch(span) and re.fullmatch(r"\{\d+,\d+\}", q)
    (row,) = json.loads(json_out.stdout)[0]["rows"]
    assert interval.fullmatch(row[0]) and len(row[1]) == 2


def _budget(env, *args) -> list[dict]:
    """``budget show --format json``, its numbers read as exact decimals."""
    out = cli(env, "budget", "show", *args, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout, parse_float=Decimal)


def test_budget_commands(home):
    cli(home, "query", "--user", "alice", "SELECT COUNT(*) FROM people WHERE age > 30")
    shown = cli(home, "budget", "show", "--user", "alice", "--format", "json").stdout
    assert json.loads(shown) == [{"analyst": "alice", "budget": 100, "spent": 0.1,
                                  "remaining": 99.9}]
    assert '"spent": 0.1,' in shown  # the exact decimal, a JSON number
    assert cli(home, "budget", "grant", "--user", "alice", "--epsilon", "0.5").returncode == 0
    assert cli(home, "budget", "reset", "--user", "alice").returncode == 0
    assert _budget(home, "--user", "alice")[0]["remaining"] == Decimal("100.5")
    bad = cli(home, "budget", "grant", "--user", "alice", "--epsilon", "lots")
    assert bad.returncode == 2 and "plain decimal" in bad.stderr


def test_budget_grant_and_reset_take_the_name_and_amount_as_arguments(home, tmp_path):
    """The forms README's walk-through uses; the --user/--epsilon/--global ones stay."""
    cli(home, "query", "--user", "alice", "SELECT COUNT(*) FROM people WHERE age > 30")
    granted = cli(home, "budget", "grant", "alice", "50")
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout == "granted 50 to alice; remaining 149.9\n"
    assert cli(home, "budget", "grant", "--user", "alice", "0.000001").returncode == 0
    assert _budget(home, "alice") == [{"analyst": "alice", "budget": Decimal("150.000001"),
                                       "spent": Decimal("0.1"),
                                       "remaining": Decimal("149.900001")}]
    reset = cli(home, "budget", "reset", "alice")
    assert reset.returncode == 0 and reset.stdout == "reset alice; remaining 150.000001\n"
    rules = tmp_path / "r.toml"
    rules.write_text(DEMO_RULES.read_text().replace(
        "[analysts.alice]", "global_budget = 1\n[analysts.alice]", 1))
    assert cli(home, "budget", "grant", "--rules", str(rules), "--global", "5").stdout == (
        "granted 5 to the global budget; remaining 6\n")
    for wrong, says in [(["alice"], "budget grant NAME AMOUNT"),
                        (["alice", "5", "--epsilon", "5"], "budget grant NAME AMOUNT"),
                        (["--user", "alice", "bob", "5"], "name one budget"),
                        (["alice", "-5"], "No such option"),
                        (["alice", "lots"], "plain decimal")]:
        out = cli(home, "budget", "grant", *wrong)
        assert out.returncode == 2 and says in out.stderr, (wrong, out.stderr)
    assert "name one budget" in cli(home, "budget", "reset", "--global", "alice").stderr


def test_bad_rules_file_is_one_line_with_file_and_line(home, tmp_path):
    rules = tmp_path / "r.toml"
    rules.write_text("[defaults]\nmodel = 'dp'\nepsilon_per_query = 'x'\n")
    out = cli(home, "query", "--rules", str(rules), "--user", "a", "SELECT COUNT(*) FROM t")
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"ERROR: {rules}:3:") and "epsilon_per_query" in line


def test_the_smallest_epsilon_written_in_a_rules_file_is_read(home, tmp_path):
    """TOML hands 0.000001 over as a float whose repr is 1e-06; it is still the plain
    decimal the owner wrote (and 0.0000001 is still refused, as written)."""
    rules = tmp_path / "r.toml"
    rules.write_text(DEMO_RULES.read_text().replace("epsilon_per_query = 0.1",
                                                    "epsilon_per_query = 0.000001"))
    out = cli(home, "query", "--rules", str(rules), "--user", "alice", "--format", "json",
              "SELECT COUNT(*) FROM people WHERE age > 30")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["privacy"]["epsilon_spent"] == 0.000001
    ledger_rows = ledger(home, "--rules", str(rules))
    assert [row["epsilon"] for row in ledger_rows] == [0.000001]
    rules.write_text(rules.read_text().replace("0.000001", "0.0000001"))
    out = cli(home, "budget", "show", "--rules", str(rules))
    assert out.returncode == 2 and "at most 6 decimal places, got '0.0000001'" in out.stderr


@pytest.mark.postgres
def test_budget_runs_out_on_the_fourth_query_on_postgres(home, fresh_postgres, tmp_path):
    load_table(fresh_postgres, "people", {"person_id": list(range(100)),
                                          "age": [20 + i % 50 for i in range(100)]},
               {"person_id": "INTEGER", "age": "INTEGER"})
    rules = tmp_path / "r.toml"
    rules.write_text("[defaults]\nepsilon_per_query = 0.3\n[analysts.alice]\nbudget = 1.0\n"
                     + people_table(individual_queries=False, income=None, regions=None))
    common = ["--rules", str(rules), "--backend", fresh_postgres]
    codes = [cli(home, "query", *common, "--user", "alice", f"SELECT MEDIAN(age) FROM people "
                 f"WHERE age > {i}").returncode for i in range(4)]
    assert codes == [0, 0, 0, 1]
    entries = ledger(home, *common)
    assert [e["status"] for e in entries] == ["charged"] * 3 + ["refused: budget"]
    assert all(e["epsilon"] == 0.3 for e in entries)


def test_help_lists_every_command():
    out = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, check=True)
    for command in ("query", "budget", "ledger"):
        assert command in out.stdout



def test_an_older_demo_home_is_brought_up_to_date_by_its_next_command(home):
    """A demo file made before visits.visited_at and the joinable regions (code, name)
    is upgraded in place by the next command, its ledger kept."""
    import duckdb

    cli(home, "query", "--user", "alice", "SELECT COUNT(*) FROM people WHERE age > 50")
    spent = ledger(home)
    con = duckdb.connect(str(Path(home["IDP_PROXY_HOME"]) / "demo.duckdb"))
    con.execute("ALTER TABLE visits DROP COLUMN visited_at")
    con.execute("ALTER TABLE regions RENAME COLUMN code TO region")
    con.execute("ALTER TABLE regions RENAME COLUMN name TO label")
    con.close()
    joined = ("SELECT r.name, COUNT(*) FROM people p JOIN regions r ON p.region = r.code "
              "GROUP BY r.name")
    for sql in ("SELECT COUNT(*) FROM visits WHERE visited_at >= DATE '2023-06-01'", joined):
        out = cli(home, "query", "--user", "alice", sql)
        assert out.returncode == 0, out.stderr
    assert ledger(home)[: len(spent)] == spent


def test_a_duckdb_file_held_by_another_process_is_a_clear_error(home, tmp_path):
    path = tmp_path / "held.duckdb"
    script = (f"import duckdb, sys; con = duckdb.connect({str(path)!r}); "
              "print('ready', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    try:
        out = cli(home, "budget", "show", "--backend", f"duckdb:///{path}")
    finally:
        holder.communicate("")
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith("ERROR [55006]: the DuckDB file") and "in use" in line


def test_global_budget_commands(home, tmp_path):
    unset = cli(home, "budget", "grant", "--global", "5")  # the demo sets none
    assert unset.returncode == 1
    assert unset.stderr.startswith("ERROR [55000]: ") and "sets no global budget: add " \
        "global_budget = EPSILON under [defaults]" in unset.stderr
    rules = tmp_path / "r.toml"
    demo = DEMO_RULES.read_text()
    rules.write_text(demo.replace("budget_per_analyst = 100",
                                  "global_budget = 0.15\nbudget_per_analyst = 100"))
    common = ["--rules", str(rules)]
    assert cli(home, "query", *common, "--user", "alice", "SELECT COUNT(*) FROM people WHERE age > 0"
               ).returncode == 0
    refused = cli(home, "query", *common, "--user", "bob",
                  "SELECT COUNT(*) FROM people WHERE age > 0")
    assert refused.returncode == 1 and "global budget" in refused.stderr
    shown = _budget(home, *common)
    assert {row["analyst"]: row["spent"] for row in shown} == {
        "(global)": Decimal("0.1"), "alice": Decimal("0.1"), "bob": 0}
    alone = json.loads(cli(home, "budget", "show", *common, "--global", "--format", "json").stdout)
    assert [row["analyst"] for row in alone] == ["(global)"]
    granted = cli(home, "budget", "grant", *common, "--global", "--epsilon", "1")
    assert granted.returncode == 0 and "the global budget" in granted.stdout
    assert cli(home, "query", *common, "--user", "bob", "SELECT COUNT(*) FROM people WHERE age > 0"
               ).returncode == 0
    both = cli(home, "budget", "reset", *common, "--global", "--user", "bob")
    assert both.returncode == 2 and "name one budget" in both.stderr


def test_ledger_since(home):
    cli(home, "query", "--user", "alice", "SELECT COUNT(*) FROM people")
    assert len(ledger(home)) == 1
    assert len(ledger(home, "--since", "2000-01-01T00:00:00")) == 1
    assert ledger(home, "--since", "2999-01-01") == []
    bad = cli(home, "ledger", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_query_with_a_prior_answers_by_knowledge_refinement(home):
    out = cli(home, "query", "--user", "alice", "--prior", "uniform(20000, 80000)",
              "SELECT MEDIAN(income) FROM people")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert 20_000 <= float(lines[2]) <= 80_000
    notice = next(line for line in lines if line.startswith("NOTICE:"))
    assert notice.startswith("NOTICE: DP (knowledge refinement of the prior uniform(20000, 80000))")
    refused = cli(home, "query", "--user", "alice", "--prior", "beta(1, 2)",
                  "SELECT MEDIAN(income) FROM people")
    assert refused.returncode == 1 and refused.stderr.startswith("ERROR [22023]: idp.prior:")


def test_a_syntax_error_says_where_with_a_caret(home):
    out = cli(home, "query", "--user", "alice", "SELECT COUNT(*)\nFROMM people")
    assert out.returncode == 1
    error, line, caret = out.stderr.splitlines()
    assert error == 'ERROR [42601]: syntax error at or near "people" (line 2, column 7)'
    assert line == "LINE 2: FROMM people"
    assert caret.index("^") == line.index("people")
    assert "Invalid expression" not in out.stderr
    # a misspelt first word is where PostgreSQL says it is, not at the "(" read after it
    out = cli(home, "query", "--user", "alice", "SELEC COUNT(*) FROM people")
    error, line, caret = out.stderr.splitlines()
    assert error == 'ERROR [42601]: syntax error at or near "SELEC" (line 1, column 1)'
    assert caret.index("^") == line.index("SELEC")
