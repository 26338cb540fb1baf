"""The rules file: the documented keys work as spelled; mistakes name file, line, reason."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from proxy.errors import RulesError
from proxy.rules import load_rules, parse_moment, parse_rules
from tests.conftest import ROOT

ISSUE_EXAMPLE = """
[defaults]
model = "idp"              # "idp" | "dp"
epsilon_per_query = 0.1
budget_per_analyst = 1.0

[analysts.alice]
budget = 1.0

[tables.people]
privacy_unit = "person_id"          # omit for row-level privacy
[tables.people.columns]
age    = { type = "int",   domain = [0, 120] }
income = { type = "float", domain = [0, 10000000] }
region = { type = "text",  keys = ["north", "south", "east", "west"] }

[tables.regions]
public = true
"""


def test_the_documented_example_loads():
    rules = parse_rules(ISSUE_EXAMPLE)
    assert rules.defaults.model == "idp"
    assert rules.defaults.epsilon_per_query == Decimal("0.1")
    assert rules.budget_of("alice") == Decimal("1.0")
    people = rules.table("people")
    assert people.privacy_unit == "person_id" and not people.public
    assert (people.columns["age"].lower, people.columns["age"].upper) == (0, 120)
    assert people.columns["region"].keys == ("north", "south", "east", "west")
    assert rules.table("regions").public


def test_shipped_rules_files_load():
    for path in (ROOT / "rules").glob("*.toml"):
        load_rules(path)


@pytest.mark.parametrize("text,line,fragment", [
    ('[defaults]\nmodel = "magic"\n', 2, "[defaults.model] must be one of idp, dp"),
    ('[defaults]\nepsilon_per_query = -0.1\n', 2, "must be positive"),
    ('[defaults]\nepsilon_per_query = 1e-9\n', 2, "plain decimal"),
    ('[defaults]\nbudget_per_analyst = nan\n', 2, "plain decimal"),
    ('[defaults]\nepsilon = 0.1\n', 2, "unknown key"),
    ('[tables.t]\nprivacy_unit = "id"\n[tables.t.columns]\nx = { type = "int", domain = [5, 1] }\n',
     4, "lower bound 5.0 must be below upper 1.0"),
    ('[tables.t]\n[tables.t.columns]\nx = { type = "decimal" }\n', 3, "must be one of int"),
    ('[tables.t]\npublic = true\nlocation = 3\n', 3, "must be the path or URI of the table"),
    ('[tables.t]\n[tables.t.columns]\nx = { type = "text", keys = [] }\n', 3, "non-empty list"),
    ('[tables.t]\npublic = "yes"\n', 2, "true or false"),
    ('[defaults]\nanswer_cache = 0\n', 2, "[defaults.answer_cache] must be true or false"),
    ('[defaults]\ntime_quantum_ms = 0.5\n', 2, "whole number of milliseconds from 0 (off)"),
    ('[defaults]\ntime_quantum_ms = -1\n', 2, "whole number of milliseconds from 0 (off)"),
    ('[defaults]\ntime_quantum_ms = 60001\n', 2, "to 60000, got 60001"),
    ('[defaults]\ntime_quantum_ms = true\n', 2, "whole number of milliseconds"),
    ('[server]\nstart_check_seconds = false\n', 2, "whole number of at least 0, got False"),
    ('[server]\nstart_check_seconds = -1\n', 2, "whole number of at least 0, got -1"),
    ('[server]\nworkers = 0\n', 2, "whole number of at least 1, got 0"),
    ('[server]\nwrite_poll_ms = 0\n', 2, "whole number of at least 1, got 0"),
    ('[server]\nwrite_poll_ms = 1001\n', 2, "[server.write_poll_ms] must be at most 1000"),
    ('[tables.t]\nmax_rows_per_unit = 3\n[tables.t.columns]\nx = { type = "int" }\n', 2,
     "needs privacy_unit"),
    ('[tables.t]\nprivacy_unit = "id"\n', 1, "must declare its columns"),
    ('[tables.t]\n[tables.t.columns]\n"bad name" = { type = "int" }\n', 3, "not a plain SQL identifier"),
    ('[defaults\n', 1, "invalid TOML"),
    ('[defaults]\nmodel = "idp"\ndelta = 0\n', 3,
     "[defaults.delta] must be a number strictly between 0 and 1 (e.g. 1e-6), got 0"),
    ('[defaults]\ndelta = 1\n', 2, "strictly between 0 and 1"),
    ('[defaults]\ndelta = -1e-6\n', 2, "strictly between 0 and 1"),
    ('[defaults]\ndelta = 1e-400\n', 2, "strictly between 0 and 1"),
    ('[defaults]\ndelta = "1e-6"\n', 2, "[defaults.delta] must be a number"),
    ('[defaults]\ndelta = true\n', 2, "[defaults.delta] must be a number"),
    ('[defaults]\ndelta = inf\n', 2, "[defaults.delta] must be finite"),
])
def test_a_bad_file_is_rejected_with_file_line_and_reason(tmp_path, text, line, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RulesError) as error:
        load_rules(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}") or (
        "invalid TOML" in message and message.startswith(str(path)))
    assert fragment in message


def test_delta_is_kept_as_written_and_none_by_default():
    """δ of partition selection (docs/privacy.md §3.12): the decimal the file shows."""
    assert parse_rules(ISSUE_EXAMPLE).defaults.delta is None
    for text, value in (("1e-6", "0.000001"), ("0.05", "0.05"), ("1e-12", "1E-12")):
        rules = parse_rules(ISSUE_EXAMPLE.replace("[defaults]", f"[defaults]\ndelta = {text}"))
        assert rules.defaults.delta == Decimal(value)


def test_missing_file():
    with pytest.raises(RulesError, match="cannot read rules file"):
        load_rules("/nonexistent/rules.toml")


def test_every_server_key_of_rules_readme_is_read():
    """Each `[server]` key in rules/README.md's table is accepted and taken as written."""
    readme = (ROOT / "rules" / "README.md").read_text().split("## `[server]`")[1].split("##")[0]
    keys = [line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")]
    assert "backend_connections" in keys and "max_connections_per_analyst" in keys
    numeric = [key for key in keys if key != "auth"]
    body = "".join(f"{key} = {index + 7}\n" for index, key in enumerate(numeric))
    server = parse_rules(ISSUE_EXAMPLE + "\n[server]\n" + body).server
    assert [getattr(server, key) for key in numeric] == [i + 7 for i in range(len(numeric))]
    with pytest.raises(RulesError, match="max_connections_per_analyst"):
        parse_rules(ISSUE_EXAMPLE + "\n[server]\nmax_connections_per_analyst = 0\n")


@pytest.mark.parametrize("text, zoned, expected", [
    ("2024-02-01 00:00:00.000 -08:00", True, dt.datetime(2024, 2, 1)),  # Metabase's space
    ("2024-02-01+02:00", True, dt.datetime(2024, 2, 1)),  # a date's offset: its midnight
    ("2024-02-01+02:00", False, None),  # a zone, where none may be
    ("2024-02-01 -08:00", True, None),  # a space before a date's offset: not ISO
    ("2024-01-04 23:59:59.999999", False, dt.datetime(2024, 1, 4, 23, 59, 59, 999999)),
    # a seventh decimal: PostgreSQL rounds it to the next second, DuckDB and Python cut it
    ("2024-01-04 23:59:59.9999999", False, None),
])
def test_moments_are_read_as_postgresql_reads_them_or_not_at_all(text, zoned, expected):
    assert parse_moment(text, zoned=zoned) == expected
