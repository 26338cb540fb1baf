"""README's two commands are the ones CI and a new user run."""

import shlex
import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from tests.wireserver import running_proxy


def _readme_commands() -> list[str]:
    """The two commands README opens with (its first two code blocks)."""
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```")[1::2]
    return [line for block in blocks[:2] for line in block.splitlines()
            if line.strip()]


def _psql_line() -> str:
    """The psql command README gives (inline) to connect to the served demo."""
    text = (ROOT / "README.md").read_text()
    return next(piece for piece in text.split("`") if piece.startswith("psql "))


def test_ci_runs_the_readme_test_command():
    demo, tests = _readme_commands()
    assert demo.endswith("idp-proxy serve")
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.postgres
def test_the_readme_psql_line_answers_from_the_demo_server(tmp_path):
    """As a new user: `idp-proxy serve` with no options, then README's psql line."""
    psql_line = _psql_line()
    with running_proxy(None, None, tmp_path / "home") as proxy:
        args = shlex.split(psql_line.replace("port=5433", f"port={proxy.port}"))
        out = subprocess.run([shutil.which(args[0]), "-X", *args[1:]], capture_output=True,
                             text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "median" and 10_000 < float(out.stdout.split()[2]) < 100_000
    assert "NOTICE:  iDP" in out.stderr and "spent epsilon 0.1" in out.stderr
