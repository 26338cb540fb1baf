"""What the command line shows while it works: ``--help`` without the heavy imports, a
progress bar on a terminal (a pseudo-terminal here) for the demo's creation, a release
and a query past a second, and nothing of it on a pipe."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import duckdb
import pytest

from tests.factories import Served
from tests.wireserver import SCRIPT

HEAVY = {"sqlglot", "duckdb", "psycopg", "numpy", "tqdm"}


def test_help_imports_none_of_the_engine():
    code = ("import json, sys\nfrom proxy.cli import main\n"
            "for args in (['--help'], ['query', '--help'], ['budget', 'grant', '--help'],\n"
            "             ['release', '--help'], ['serve', '--help']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert "Usage: " in out.stdout and "budget grant [OPTIONS] [NAME] [AMOUNT]" in out.stdout
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "click" in loaded and not loaded & HEAVY


def _home(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "IDP_PROXY_HOME": str(tmp_path / "home")}


def _on_a_terminal(args: list[str], env: dict[str, str], cwd: Path | None = None,
                   until: bytes | None = None) -> tuple[int, str, str]:
    """Run with stderr on an 80-column pseudo-terminal, stdout on a pipe: (exit code,
    stdout, what the terminal showed). ``until``: stop the command once the terminal
    has shown this."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=child, env=env, cwd=cwd)
    os.close(child)
    shown = b""
    try:
        while chunk := os.read(main, 4096):
            shown += chunk
            if until is not None and until in shown:
                process.kill()
    except OSError:  # the terminal closes with the process
        pass
    os.close(main)
    stdout = process.stdout.read().decode()
    process.stdout.close()
    return process.wait(60), stdout, shown.decode(errors="replace")


def test_the_demo_is_created_with_a_bar_on_a_terminal_and_silently_on_a_pipe(tmp_path):
    query = [SCRIPT, "query", "--user", "alice", "SELECT MEDIAN(income) FROM people"]
    code, stdout, shown = _on_a_terminal(query, _home(tmp_path / "a"))
    assert code == 0
    assert "creating the demo" in shown and "%|" in shown
    assert stdout.splitlines()[0].strip() == "median"  # stdout carries the answer only
    assert "creating" not in stdout and "%|" not in stdout
    piped = subprocess.run(query, env=_home(tmp_path / "b"), capture_output=True, text=True,
                           timeout=120, check=False)
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout.splitlines()[0].strip() == "median"


RELEASE = ["release", "people", "--user", "alice", "--columns", "income,age", "--k", "10",
           "--epsilon", "0.5", "--method", "idp-cbls", "--out", "masked.csv"]


def test_a_release_shows_its_steps_on_a_terminal(tmp_path):
    code, stdout, shown = _on_a_terminal([SCRIPT, *RELEASE], _home(tmp_path), cwd=tmp_path)
    assert code == 0
    assert "releasing people" in shown and "income: clustering" in shown
    assert stdout.startswith("released 20000 rows of people to masked.csv")


@pytest.mark.postgres
def test_a_release_through_the_server_shows_its_steps_too(tmp_path):
    """The server reports each step over its admin socket as it runs."""
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    served = Served.prepare(tmp_path, "[analysts.alice]\nbudget = 10\n[tables.people]\n"
                            "[tables.people.columns]\nincome = { type = 'float' }\n"
                            "age = { type = 'int' }\n", url, 2000)
    rules = served.rules
    with served.serve():
        code, stdout, shown = _on_a_terminal(
            [SCRIPT, *RELEASE, "--rules", str(rules), "--backend", url], _home(tmp_path),
            cwd=tmp_path)
    assert code == 0, shown
    assert "releasing people" in shown and "age: clustering" in shown
    assert stdout.startswith("released 2000 rows of people to masked.csv")


def test_a_query_past_a_second_shows_how_long_it_has_run(tmp_path):
    """A view whose every aggregate takes minutes: the terminal says what runs, then
    the command is stopped."""
    path = tmp_path / "slow.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE VIEW slow AS SELECT (a.range * b.range) % 1000 AS x "
                    "FROM range(1000000) a, range(1000000) b")
    rules = tmp_path / "rules.toml"
    rules.write_text("[analysts.alice]\nbudget = 10\n[tables.slow]\n[tables.slow.columns]\n"
                     "x = { type = 'int', domain = [0, 1000] }\n")
    _, stdout, shown = _on_a_terminal(
        [SCRIPT, "query", "--user", "alice", "--rules", str(rules), "--backend",
         f"duckdb:///{path}", "SELECT COUNT(*) FROM slow WHERE x > 5"], _home(tmp_path),
        until=b"answering (00:0")
    assert "answering (00:0" in shown and stdout == ""
