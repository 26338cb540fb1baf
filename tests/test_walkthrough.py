"""README's "What you get" as a new user meets it: every `$ .venv/bin/idp-proxy ...` line
run in order on a fresh demo, alone and while `idp-proxy serve` holds the demo's file,
printing what README shows (the noisy answer's digits aside)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from contextlib import nullcontext

import pytest

from tests.conftest import ROOT
from tests.wireserver import SCRIPT, running_proxy

NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def _walkthrough() -> list[tuple[str, list[str]]]:
    """(command, the lines README shows it print) for each `$ ` line of the section."""
    text = ROOT.joinpath("README.md").read_text()
    section = text.split("## What you get", 1)[1].split("\n## ", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for block in section.split("```")[1::2]:
        for line in block.strip("\n").splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif line:
                steps[-1][1].append(line)
    return steps


def _matches(shown: str, printed: str, noisy: bool) -> bool:
    """A line as README shows it: exact (less trailing blanks); a trailing "..." stands
    for the rest of the line; in a noisy answer a number stands for any number and a
    rule of dashes for any width."""
    printed = printed.rstrip()
    if shown.endswith("..."):
        return printed.startswith(shown[:-3])
    if noisy and (NUMBER.fullmatch(shown) or set(shown) == {"-"}):
        return bool(NUMBER.fullmatch(printed) or set(printed) == {"-"})
    return printed == shown


@pytest.mark.postgres
@pytest.mark.parametrize("served", [False, True], ids=["alone", "while-serving"])
def test_readme_walkthrough_prints_what_readme_shows(tmp_path, served):
    steps = _walkthrough()
    assert [command.split()[:2] for command, _ in steps] == [
        [".venv/bin/idp-proxy", "query"], [".venv/bin/idp-proxy", "query"],
        [".venv/bin/idp-proxy", "budget"], [".venv/bin/idp-proxy", "budget"],
        [".venv/bin/idp-proxy", "budget"]]
    home = tmp_path / "home"
    env = {**os.environ, "IDP_PROXY_HOME": str(home)}
    with running_proxy(None, None, home, installed=True) if served else nullcontext():
        for command, shown in steps:
            args = [SCRIPT, *shlex.split(command)[1:]]
            out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=120, check=False)
            printed = (out.stdout + out.stderr).splitlines()
            noisy = any(line.startswith("NOTICE:") for line in shown)
            assert len(printed) == len(shown), (command, printed)
            assert all(_matches(a, b, noisy) for a, b in zip(shown, printed)), (command, printed)
            assert out.returncode == (1 if shown[0].startswith("ERROR") else 0)
