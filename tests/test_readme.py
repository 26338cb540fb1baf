"""README's two commands are the ones CI and a new user run."""

from tests.conftest import ROOT


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```")[1::2]
    return [line for block in blocks[:2] for line in block.splitlines()
            if line.strip()]


def test_ci_runs_the_readme_test_command():
    demo, tests = _readme_commands()[:2]
    assert "idp-proxy query" in demo
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()
