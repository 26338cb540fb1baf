"""The package as `pip install .`, a wheel or pipx installs it (issue 36 item 5): a wheel
built from the source and installed in a fresh virtual environment runs README's demo
commands, so the demo rules must ship inside the package. Offline: the wheel is built
with this environment's setuptools, and the new environment sees its dependencies."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import site
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def _readme_demo_session() -> list[tuple[str, list[str]]]:
    """README's "What you get" commands (``$ .venv/bin/idp-proxy …``), each with the
    lines it shows under it."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## What you get", 1)[1].split("\n## ", 1)[0]
    session: list[tuple[str, list[str]]] = []
    for line in "\n".join(section.split("```")[1::2]).splitlines():
        if line.startswith("$ .venv/bin/idp-proxy "):
            session.append((line.removeprefix("$ .venv/bin/idp-proxy "), []))
        elif line.strip():
            session[-1][1].append(line)
    return session


def _shown_as(actual: str, shown: str) -> bool:
    """One printed line against README's: its "…" ends a prefix, a number stands for
    the noisy answer, otherwise equal but for trailing blanks."""
    if shown.endswith("..."):
        return actual.startswith(shown[:-3])
    if re.fullmatch(r"-?[0-9.]+", shown.strip()):
        return re.fullmatch(r"-?[0-9.]+", actual.strip()) is not None
    return actual.rstrip() == shown.rstrip()


def test_a_wheel_in_a_fresh_environment_runs_the_readme_demo(tmp_path):
    pytest.importorskip("setuptools.command.bdist_wheel",
                        reason="setuptools >= 70.1 builds wheels (pip install -e '.[test]')")
    source = tmp_path / "source"  # a copy: building in place leaves build/ in the clone
    for part in ("proxy", "rules"):  # proxy/demo.toml links to ../rules/demo.toml
        shutil.copytree(ROOT / part, source / part, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / part, source / part)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "--no-index", "-w", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("idp_proxy-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = venv.glob("lib/python3*/site-packages")
    # the dependencies (and pip) from this environment, as path lines: its own .pth files,
    # which put a clone's proxy/ on the path, are not read from there
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                               capture_output=True, text=True, env=env, check=False)
    assert installed.returncode == 0, installed.stderr

    env["IDP_PROXY_HOME"] = str(tmp_path / "home")  # the demo made afresh
    session = _readme_demo_session()
    assert [command.split()[0] for command, _ in session] == ["query", "query", "budget",
                                                              "budget", "budget"]
    for command, shown in session:
        ran = subprocess.run([str(venv / "bin" / "idp-proxy"), *shlex.split(command)],
                             capture_output=True, text=True, env=env, cwd=tmp_path,
                             timeout=60, check=False)
        assert ran.returncode == (1 if shown[0].startswith("ERROR") else 0), ran.stderr
        printed = ran.stdout.splitlines() + ran.stderr.splitlines()
        assert len(printed) == len(shown), (command, printed)
        assert all(map(_shown_as, printed, shown)), (command, printed, shown)
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import proxy; print(proxy.__file__)"], capture_output=True,
                           text=True, env=env, cwd=tmp_path, check=True)
    assert where.stdout.startswith(str(purelib))
