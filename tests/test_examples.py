"""The examples run from a clean checkout and show what they claim."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = str(Path(sys.executable).parent / "idp-proxy")


def test_idp_median_beats_dp_by_orders_of_magnitude():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "idp_vs_dp_median.py")],
                         capture_output=True, text=True, check=True, timeout=300)
    ratio = float(re.search(r"DP error / iDP error: ([\d,]+)x", out.stdout).group(1)
                  .replace(",", ""))
    assert ratio > 1000


def test_demo_sql_runs(tmp_path):
    env = {**os.environ, "IDP_PROXY_HOME": str(tmp_path)}
    out = subprocess.run([SCRIPT, "query", "--user", "bob", "-f",
                          str(ROOT / "examples" / "demo.sql")],
                         capture_output=True, text=True, check=True, env=env, timeout=300)
    assert out.stdout.count("NOTICE: iDP") == 4
    assert "budget" in out.stdout
