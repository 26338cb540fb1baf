"""README's two commands are the ones CI and a new user run."""

import os
import pty
import shlex
import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from tests.wireserver import SCRIPT, running_proxy


def _readme_commands() -> list[str]:
    """README's two commands: the demo's (its first code block) and the test suite's
    (the first of its section "Running the tests")."""
    text = (ROOT / "README.md").read_text()
    tests = text.split("\n## Running the tests\n", 1)[1]
    return [line for block in (text.split("```")[1], tests.split("```")[1])
            for line in block.splitlines() if line.strip()]


def _psql_line() -> str:
    """The psql command README gives (inline) to connect to the served demo."""
    text = (ROOT / "README.md").read_text()
    return next(piece for piece in text.split("`") if piece.startswith("psql "))


@pytest.fixture(scope="module")
def demo_served(tmp_path_factory):
    """`idp-proxy serve` with no options, as README starts it, and its home: one for the
    module (each of its tests starts from what a new user's first server shows: alice
    answered from the demo; bob added, and then only bob's own ledger read)."""
    home = tmp_path_factory.mktemp("readme") / "home"
    with running_proxy(None, None, home, installed=True) as proxy:
        yield proxy, home


def test_ci_runs_the_readme_test_command():
    demo, tests = _readme_commands()
    assert demo.endswith("idp-proxy serve")
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.postgres
def test_the_readme_psql_line_answers_from_the_demo_server(demo_served):
    """As a new user: `idp-proxy serve` with no options, then README's psql line."""
    psql_line = _psql_line()
    proxy, _ = demo_served
    args = shlex.split(psql_line.replace("port=5433", f"port={proxy.port}"))
    out = subprocess.run([shutil.which(args[0]), "-X", *args[1:]], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "median" and 10_000 < float(out.stdout.split()[2]) < 100_000
    assert "NOTICE:  iDP" in out.stderr and "spent epsilon 0.1" in out.stderr


def _at_a_terminal(args: list[str], answers: list[tuple[str, str]], env: dict) -> str:
    """Run a command on a pseudo-terminal, answering each prompt as a person would."""
    main, child = pty.openpty()
    process = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    seen = ""
    for prompt, answer in answers:
        while prompt not in seen:
            seen += os.read(main, 1024).decode()
        seen = seen[seen.index(prompt) + len(prompt):]
        os.write(main, answer.encode() + b"\n")
    try:
        while chunk := os.read(main, 1024):
            seen += chunk.decode()
    except OSError:  # the terminal closes with the process
        pass
    assert process.wait(60) == 0, seen
    return seen


@pytest.mark.postgres
def test_a_new_user_is_added_while_the_demo_is_served(demo_served):
    """As a new user: `idp-proxy serve`, then in another terminal `idp-proxy users add
    bob` (it prompts for the password twice), bob's psql query, `idp-proxy ledger --user
    bob` — all while the server holds the demo's DuckDB file."""
    proxy, home = demo_served
    env = {**os.environ, "IDP_PROXY_HOME": str(home)}
    said = _at_a_terminal([SCRIPT, "users", "add", "bob"],
                          [("Password:", "bob's pw"), ("Repeat for confirmation:",
                                                       "bob's pw")], env)
    assert "user bob added" in said and "bob's pw" not in said
    args = shlex.split(_psql_line().replace("port=5433", f"port={proxy.port}")
                       .replace("user=alice", "user=bob"))
    out = subprocess.run([shutil.which(args[0]), "-X", *args[1:]], capture_output=True,
                         text=True, timeout=60, env={**env, "PGPASSWORD": "bob's pw"},
                         check=False)
    assert out.returncode == 0, out.stderr
    ledger = subprocess.run([SCRIPT, "ledger", "--user", "bob", "--format", "csv"],
                            capture_output=True, text=True, env=env, check=False)
    assert ledger.returncode == 0, ledger.stderr
    (header, row) = ledger.stdout.splitlines()
    entry = dict(zip(header.split(","), row.split(",")))
    assert entry["analyst"] == "bob" and entry["status"] == "charged"
    assert entry["epsilon"] == "0.1"


def _readme_sql() -> list[str]:
    """Every statement of README's "Supported SQL" block, and the SELECTs "Using it"
    gives inline before what it refuses."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```sql\n", 1)[1].split("```", 1)[0]
    lines = [line.split("--", 1)[0] for line in block.splitlines()]
    inline = text.split("\n## Using it\n", 1)[1].split("Refused, each in one line", 1)[0]
    return [sql.strip() for sql in " ".join(lines).split(";") if sql.strip()] + [
        " ".join(piece.split()) for piece in inline.split("`")[1::2]
        if piece.startswith("SELECT ")]


def test_every_supported_sql_example_is_answered_on_the_demo(tmp_path):
    """README's examples run on the demo as they are written (a JOIN with a table the
    demo does not have was one of them)."""
    from proxy.backends import open_backend
    from proxy.cli import DEMO_RULES
    from proxy.demo import create_demo
    from proxy.engine import Engine
    from proxy.rules import load_rules
    from proxy.session import Session

    statements = _readme_sql()
    assert len(statements) > 30 and any("JOIN regions" in sql for sql in statements)
    create_demo(tmp_path / "demo.duckdb")
    backend = open_backend(f"duckdb:///{tmp_path / 'demo.duckdb'}")
    try:
        session = Session.open(Engine(load_rules(DEMO_RULES), backend), "alice")
        for sql in statements:
            (answer, *more) = list(session.execute(sql))
            assert not more and answer, sql
    finally:
        backend.close()
