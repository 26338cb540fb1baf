"""A killed test run leaves no PostgreSQL running (issue 15): neither the suite's own
cluster (tests/pgserver.py) nor the catalog of a server it started. A pytest of its own
runs tests/killed_run.py, which holds both and reports their processes; this test kills
that pytest as ``timeout`` (SIGTERM) or an OOM killer or a CI runner (SIGKILL) would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import pgserver
from tests.conftest import ROOT

pytestmark = pytest.mark.postgres


def _running(pid: int, data: str) -> bool:
    """Whether process ``pid`` is still the PostgreSQL server of ``data`` (a zombie is
    not running: it only waits for its parent to collect it)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return data.encode() in command and state != "Z"


def _gone(postmasters: dict[str, int], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while any(_running(pid, data) for data, pid in postmasters.items()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


HOLD_POSTGRESQL = "test_hold_the_suites_postgresql_and_a_server_with_its_catalog"


def _killed_run(tmp_path: Path, test: str = HOLD_POSTGRESQL):
    """Start the run to be killed (its ``test``); return it, its report once written, and
    the folder it uses as TMPDIR (short: PostgreSQL's socket paths are limited)."""
    root = Path(tempfile.mkdtemp(prefix="k"))  # in this run's own TMPDIR
    root.chmod(0o755)
    report = tmp_path / "report.json"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTEST_", "COV_"))}
    env.update(TMPDIR=str(root), IDP_KILLED_RUN_REPORT=str(report))
    log = (tmp_path / "run.log").open("w")
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-o", "addopts=", "--basetemp", str(tmp_path / "run"),
                            f"{ROOT / 'tests' / 'killed_run.py'}::{test}"],
                           cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    deadline = time.monotonic() + 180
    while True:
        try:
            # written in one call: read until it has landed whole
            return run, json.loads(report.read_text()), root
        except (OSError, ValueError):
            assert run.poll() is None, (tmp_path / "run.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "run.log").read_text()
            time.sleep(0.05)


@pytest.mark.parametrize("signum,group,test", [
    (signal.SIGTERM, True, HOLD_POSTGRESQL), (signal.SIGTERM, False, HOLD_POSTGRESQL),
    (signal.SIGKILL, False, HOLD_POSTGRESQL),
    (signal.SIGKILL, False, "test_hold_a_sail_server_and_a_server_over_it")],
    ids=["timeout", "TERM", "KILL", "KILL-over-sail"])
def test_a_killed_run_stops_its_postgresql_at_once(tmp_path, signum, group, test):
    """SIGTERM to the run's process group (as ``timeout`` sends it): the server stops by
    itself, pytest's handler stops the cluster. SIGTERM to pytest alone: the handler
    stops the cluster, the watchdog (tests/watchdog.py) sends the server the SIGTERM the
    test would have. SIGKILL: the watchdog does both, and stops a Sail server too."""
    run, report, root = _killed_run(tmp_path, test)
    processes = {**report["postmasters"], **({"sail": report["sail"]} if "sail" in report
                                             else {})}
    assert all(_running(pid, data) for data, pid in processes.items())
    (os.killpg if group else os.kill)(run.pid, signum)
    assert run.wait(60) == -signum
    assert _gone(processes), report
    deadline = time.monotonic() + 30
    while left := [folder for folder in report["folders"] if Path(folder).exists()]:
        assert time.monotonic() < deadline, left
        time.sleep(0.05)
    assert not any(root.iterdir())
    root.rmdir()


def test_what_survives_a_kill_of_everything_is_swept_by_the_next_run(tmp_path):
    """SIGKILL to the watchdog, then to the run's whole process group (pytest and its
    server): nothing stops PostgreSQL then, until the next run's sweep does."""
    run, report, root = _killed_run(tmp_path)
    os.kill(report["watchdog"], signal.SIGKILL)
    os.killpg(run.pid, signal.SIGKILL)
    assert run.wait(60) == -signal.SIGKILL
    time.sleep(1)
    assert all(_running(pid, data) for data, pid in report["postmasters"].items())
    swept = pgserver.sweep(root=root) + pgserver.sweep("idp-run-*", root)
    assert _gone(report["postmasters"], 5), report
    assert {str(folder) for folder in swept} == {report["folders"][0], report["folders"][2]}
    assert not any(root.iterdir())
    root.rmdir()
