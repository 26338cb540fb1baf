"""README's "What you get" as a new user meets it: every `$ .venv/bin/idp-proxy ...` line
run in order on a fresh demo, alone, while `idp-proxy serve` holds the demo's file, and
from a wheel installed in a fresh virtual environment (`pip install .` without -e and
pipx install one: the demo rules ship inside the package), printing what README shows
(the noisy answer's digits aside). From the wheel each line starts its installed script;
alone and while serving, the entry point forked ready-imported (tests/forked_cli.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import site
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest

from tests import forked_cli
from tests.conftest import ROOT
from tests.wireserver import running_proxy

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


def _installed_wheel(folder: Path, env: dict[str, str]) -> str:
    """``idp-proxy`` of a wheel built from this clone and installed, without its
    dependencies, in a new virtual environment that reads them from this one: offline,
    and a few seconds."""
    source = folder / "source"  # a copy: building in place leaves build/ in the clone
    for part in ("proxy", "rules"):  # proxy/demo.toml links to ../rules/demo.toml
        shutil.copytree(ROOT / part, source / part, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / part, source / part)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "--no-index", "-w", str(folder / "dist"),
                            str(source)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = (folder / "dist").glob("idp_proxy-*.whl")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = venv.glob("lib/python3*/site-packages")
    # the dependencies (and pip) as path lines: the .pth files there, one of which puts
    # a clone's proxy/ on the path, are not read from a path line
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = str(venv / "bin" / "python")
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                "--ignore-installed", str(wheel)], capture_output=True,
                               text=True, env=env, cwd=folder, check=False)
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run([python, "-c", "import proxy; print(proxy.__file__)"],
                           capture_output=True, text=True, env=env, cwd=folder, check=True)
    assert where.stdout.startswith(str(purelib))
    return str(venv / "bin" / "idp-proxy")


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["alone", "while-serving", "from-a-wheel"])
def test_readme_walkthrough_prints_what_readme_shows(tmp_path, how):
    steps = _walkthrough()
    assert [command.split()[:2] for command, _ in steps] == [
        [".venv/bin/idp-proxy", "query"], [".venv/bin/idp-proxy", "query"],
        [".venv/bin/idp-proxy", "budget"], [".venv/bin/idp-proxy", "budget"],
        [".venv/bin/idp-proxy", "budget"]]
    home = tmp_path / "home"
    env = {**os.environ, "IDP_PROXY_HOME": str(home)}
    script = None
    if how == "from-a-wheel":  # nothing of the clone on the path
        env.pop("PYTHONPATH", None)
        script = _installed_wheel(tmp_path, env)
    served = how == "while-serving"
    with running_proxy(None, None, home, installed=True) if served else nullcontext():
        for command, shown in steps:
            args = shlex.split(command)[1:]
            # A fresh interpreter's start-up and lazy imports: the wheel's script runs every
            # line; alone and while serving, the same entry point forked ready-imported
            # (tests/forked_cli.py; the clone's script itself starts the server here and
            # runs in test_readme and test_cli).
            out = (subprocess.run([script, *args], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=120, check=False)
                   if how == "from-a-wheel" else
                   forked_cli.run(args, env=env, cwd=ROOT, timeout=120))
            printed = (out.stdout + out.stderr).splitlines()
            noisy = any(line.startswith("NOTICE:") for line in shown)
            assert len(printed) == len(shown), (command, printed)
            assert all(_matches(a, b, noisy) for a, b in zip(shown, printed)), (command, printed)
            assert out.returncode == (1 if shown[0].startswith("ERROR") else 0)
