"""README's two commands are the ones CI and a new user run."""

import shlex
import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from tests.wireserver import running_proxy


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```")[1::2]
    return [line for block in blocks[:3] for line in block.splitlines()
            if line.strip()]


def test_ci_runs_the_readme_test_command():
    demo, psql, tests = _readme_commands()[:3]
    assert demo.endswith("idp-proxy serve") and psql.startswith("psql ")
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.postgres
def test_the_readme_psql_line_answers_from_the_demo_server(tmp_path):
    """As a new user: `idp-proxy serve` with no options, then README's psql line."""
    psql_line = _readme_commands()[1]
    with running_proxy(None, None, tmp_path / "home") as proxy:
        args = shlex.split(psql_line.replace("port=5433", f"port={proxy.port}"))
        out = subprocess.run([shutil.which(args[0]), "-X", *args[1:]], capture_output=True,
                             text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "median" and 10_000 < float(out.stdout.split()[2]) < 100_000
    assert "NOTICE:  iDP" in out.stderr and "spent epsilon 0.1" in out.stderr
