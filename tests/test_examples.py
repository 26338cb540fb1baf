"""The examples run from a clean checkout and show what they claim."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked_cli
from tests.conftest import ROOT

SCRIPT = str(Path(sys.executable).parent / "idp-proxy")


def test_idp_median_beats_dp_by_orders_of_magnitude():
    """20 queries per setting instead of the script's 50. DP's answers are Laplace with
    b = 10⁷ (the domain) clamped to [0, 10⁷]: an answer errs by less than 36,000 with
    probability 0.0036, and by more than 720,000 (noise above it) with probability 0.47.
    A ratio below 1,000 with iDP's mean error under 36 (12 measured over 50 runs) needs
    the 20 DP errors to sum below 720,000: one of them under 36,000 and none of the other
    19 above 720,000, probability < 20 · 0.0036 · 0.535¹⁹ ≈ 5e-7."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "idp_vs_dp_median.py"),
                          "--runs", "20"], capture_output=True, text=True, check=True,
                         timeout=300)
    ratio = float(re.search(r"DP error / iDP error: ([\d,]+)x", out.stdout).group(1)
                  .replace(",", ""))
    assert ratio > 1000


def test_demo_sql_runs(tmp_path):
    env = {**os.environ, "IDP_PROXY_HOME": str(tmp_path)}
    out = forked_cli.run(["query", "--user", "bob", "-f", str(ROOT / "examples" / "demo.sql")],
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("NOTICE: iDP") == 6
    assert "budget" in out.stdout


def _example(name: str, *args: str, tmp_path: Path) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / name), "--out",
                          str(tmp_path), *args], capture_output=True, text=True, check=True,
                         timeout=300)
    stem = name.removesuffix(".py")
    assert (tmp_path / f"{stem}.png").stat().st_size > 10_000
    assert (tmp_path / f"{stem}.csv").read_text().count("\n") > 3
    return out.stdout


def test_paper_table_1_intervals_agree_within_one(tmp_path):
    """The agreement is of the exact half-widths; the sampled column (the script's 20,000
    draws per mechanism) is shown, not checked: 2,000 draws here."""
    stdout = _example("paper_table1.py", "--draws", "2000", tmp_path=tmp_path)
    assert stdout.count("agrees (within ±1)") == 3, stdout


def test_paper_table_5_and_the_boolean_example(tmp_path):
    stdout = _example("paper_table5.py", tmp_path=tmp_path)
    assert stdout.count("refinement columns agree to three decimals") == 4, stdout
    assert "P(answer = 1 | B = 0) = 0.003679" in stdout
    assert "P(answer = 1 | B = 1) = 0.027183" in stdout


@pytest.mark.postgres
def test_paper_figure_2_orders_idp_below_dp_smooth(tmp_path, fresh_postgres):
    """Fewer runs than the script's default (100) and only ε 0.5 and 1 (--quick) keep
    the suite short: 25 runs per point of n = 10, 10 per point of n = 100 and 1000. The
    closest panels are those of n = 10 (DP-smooth's error 2–4 times iDP's); resampling
    150 answers per point of each mechanism there, the chance that 25 runs leave some
    point of the 45 unordered is about 3e-5 (of the 18 points --quick keeps: less). At
    n = 100 and 1000 DP-smooth's mean error is 8–490 times iDP's (150 answers per point
    and mechanism, both ε); resampling those, the chance that 10 runs leave one of
    those 12 points unordered is about 5e-6 (5 runs: 5e-4). On PostgreSQL, where each
    answer costs a third of DuckDB's (the script's default backend; its
    smooth-sensitivity answers are tested in test_smooth_sql.py on both)."""
    stdout = _example("paper_fig2.py", "--quick", "--runs", "25", "--runs-large", "10",
                      "--backend", fresh_postgres, tmp_path=tmp_path)
    assert "iDP below DP-smooth in every panel and at every epsilon: yes" in stdout, stdout


@pytest.mark.slow
def test_paper_release_orders_cbls_lowest_and_the_product_agrees(tmp_path):
    """The quick grid (ε 0.01 and 1, α 1.5, three k per data set) and one run per point
    instead of the paper's 10 keep the suite short; iDP-CBLS's best is several times
    below the others' in every panel even so."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "paper_release.py"),
                          "--quick", "--runs", "1", "--out", str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=600)
    assert "iDP-CBLS lowest in every panel: yes" in out.stdout, out.stdout
    assert out.stdout.count("idp-proxy release (iDP-CBLS, eps 1, k 10) mean SSE") == 2
    for name in ("census", "wine"):
        assert (tmp_path / f"paper_release_{name}.png").stat().st_size > 10_000
    # a header, then 1 alpha x 2 epsilons x 4 methods x (3 Census + 3 Wine) values of k
    assert (tmp_path / "paper_release.csv").read_text().count("\n") == 1 + 1 * 2 * 4 * 6


@pytest.mark.slow
def test_paper_release_classification_keeps_cbls_near_the_original_data(tmp_path):
    """Seed 002 Figs. 5–6 on the quick grid (ε 0.01 and 1, α 1.5, two k for Census, three
    for Wine) with 1 run per point (the paper: 10) and forests of 30 trees (the
    default: 100): a forest trained on an iDP-CBLS release scores within 5 % of one
    trained on the original data at every ε, above one trained on an iDP-LS release at
    the smallest ε and not 1 % of the bound below it at any (the gaps at 10 runs: ≤ 2 %
    and ≥ 3 %; at 2 runs: iDP-CBLS at worst 0.6 % below the bound, iDP-LS ≥ 11 % below;
    at this setting here, 1 run: 1.6 % and ≥ 11 % at ε 0.01 on Census — at ε 1 on Census
    and at ε 0.01 on Wine both can reach the bound, and CI runs saw them tie: the lead
    is asked of Census at the smallest ε, where the paper shows it)."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" /
                                              "paper_release_classification.py"),
                          "--quick", "--runs", "1", "--trees", "30", "--out", str(tmp_path)],
                         capture_output=True, text=True, check=True, timeout=600)
    verdicts = {line.split(":", 1)[0]: line for line in out.stdout.splitlines()
                if "iDP-CBLS within" in line}
    for name in ("census", "wine"):
        assert ("iDP-CBLS within 5% of the bound at every eps: yes; not 1% of the bound "
                "below iDP-LS at any: yes") in verdicts[name], out.stdout
        assert (tmp_path / f"paper_release_classification_{name}.png").stat().st_size > 10_000
    assert verdicts["census"].endswith("above it at the smallest eps: yes"), out.stdout
    # a header, then 1 alpha x 2 epsilons x (original + 2 methods) x (2 + 3) values of k
    rows = (tmp_path / "paper_release_classification.csv").read_text().count("\n")
    assert rows == 1 + 1 * 2 * 3 * 5


def test_noise_magnitude_attack_tells_s_from_2s_and_the_floor_hides_it(tmp_path):
    """Issue 13 item 10, quick mode (600 fresh answers per data set, a seeded noise source
    so the run is reproducible): from the spread of the answers alone the attack tells a
    local sensitivity S from 2S on neighbouring data sets, after about as many answers as
    the analytic Laplace b-vs-2b test needs (23); a local_sensitivity_floor of 2S makes it
    a coin toss; the answer cache stops a repeated text but not a rephrased one. (Over
    40 simulated pools of this size the engine-pool estimate of k ranged 16-36.) One
    worker: the jobs run in the script's own process, not in two freshly spawned ones
    that import everything again; seeded per job, the answers are the same."""
    report_path = tmp_path / "attack.json"
    subprocess.run([sys.executable, str(ROOT / "examples" / "noise_magnitude_attack.py"),
                    "--quick", "--seed", "13", "--workers", "1", "--json", str(report_path)],
                   capture_output=True, text=True, check=True, timeout=300)
    report = json.loads(report_path.read_text())
    analytic = report["analytic_k95"]
    assert analytic == 23  # Gamma tails: P(Γ(k) > 2k ln 2) + P(Γ(k) < k ln 2) ≤ 10 %
    for name in ("MEDIAN", "SUM"):
        case = report["cases"][name]
        assert case["S_neighbour"] == 2 * case["S_D"], case
        assert case["accuracy_at_largest_k"] >= 0.95, (name, case["accuracy_by_k"])
        assert case["k95_engine"] is not None, (name, case["accuracy_by_k"])
        assert analytic / 2 <= case["k95_engine"] <= 2 * analytic, (name, case)
        assert analytic / 1.5 <= case["k95_model"] <= 1.5 * analytic, (name, case)
        assert case["accuracy_by_k"]["3"] < 0.9  # a few answers do not suffice
    floor = report["mitigations"]["floor_attack"]
    assert floor["accuracy_at_largest_k"] <= 0.65, floor
    cache = report["mitigations"]["cache"]
    assert cache["same_text_distinct"] == 1 and cache["rephrased_distinct"] == 3, cache
    assert cache["spent"] == [0.02, 0.0, 0.0, 0.02, 0.02, 0.02], cache
