"""The noise-magnitude channel (issue 13, item 10): how many answers, and how much ε, an
analyst needs to tell a local sensitivity S from 2S from the spread of raw iDP answers
alone — the owner's opt-in ``noise_scale = "local"``, which this script sets; the default
has no such channel (docs/privacy.md §2).

The threat: an analyst who knows every row of the demo's ``people`` table but one
person's income asks an aggregate whose *value* barely depends on that income but whose
rounded local sensitivity does (S on the data set D, 2S on its neighbour D′, which
differs in that one person). The printed 95 % bound is not used (by default it is hidden;
the attacker does not need it), nor the output grid (public). Each data set is a private
copy of the demo in a temporary DuckDB file, queried through the real engine with the
demo's rules (rules/demo.toml; only the analyst's budget is raised so the measurement can
run). The answer cache returns the first answer to a repeated text, so every statement
is rephrased with a scope-preserving ``AND age >= -i`` (i = 1, 2, ...), and each asks for
50 copies of the aggregate (``SELECT MEDIAN(income) AS a0, MEDIAN(income) AS a1, ...``):
each copy is noised independently and charged its own ε, exactly as 50 one-aggregate
statements would be, for one pass over the backend.

Decision rule (the analyst knows ε, S and 2S, not the true answer): profile likelihood of
Laplace noise with unknown location, answers clamped to the declared domain. With m of
the k answers strictly inside the domain and T = Σ|yᵢ − median(y)| (clamped answers at
their bound), log L(b) − log L(2b) = m·ln 2 − T/(2b): decide "S" iff T < 2·b·m·ln 2.

For each case it prints the smallest number of answers k with ≥ 95 % correct decisions
(D and D′ equally likely) measured three ways: on the engine's answers (random k-subsets
of N fresh answers per data set), on a model (numpy Laplace, same clamping, 10,000
simulated attacks per k) and analytically (Laplace b vs 2b, known location, no clamping:
Gamma tails, k = 23); the total ε is k times the ε per answer. Then what the owner can set:
local_sensitivity_floor, the DP model, smooth sensitivity, the answer cache, the budget,
and a prototype (report only) of calibrating to a smooth upper bound of the local
sensitivity.

Usage: python examples/noise_magnitude_attack.py [--quick] [--seed N] [--json FILE]
(default ~1.5 min on 2 cores; --quick: MEDIAN and SUM only, fewer answers, for the test).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

os.environ.setdefault("IDP_PROXY_HOME", tempfile.mkdtemp(prefix="idp-example-"))

import duckdb
import numpy as np

from proxy.backends import open_backend
from proxy.demo import create_demo, people_columns
from proxy.engine import Engine
from proxy.privacy import sensitivity as sens
from proxy.rules import parse_rules
from proxy.session import Session

ROOT = Path(__file__).resolve().parent.parent
LOWER, UPPER = 0.0, 10_000_000.0  # income's declared domain (rules/demo.toml)
DEMO_BUDGET = 1.0                 # alice's budget in rules/demo.toml
TARGET = 0.95


# ---------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    """One aggregate, one neighbouring pair (D: the demo; D′: ``person``'s income set to
    ``new``), the attacker's ε per answer and how many fresh answers to collect per data
    set."""

    name: str
    aggregate: str          # median | max | sum (the formula in proxy.privacy.sensitivity)
    call: str               # the SQL aggregate
    scope_age: int | None   # WHERE age >= scope_age (None: the whole table)
    person: int
    new: float
    epsilon: str
    answers: int
    clamped: bool           # the engine clamps this aggregate's answer to the domain


def richest() -> int:
    return int(np.argmax(people_columns()["income"])) + 1


def cases(quick: bool) -> list[Case]:
    top = richest()
    found = [
        # person 18808 ranks just above the median of the over-60s: at 200,000 the median
        # is unchanged (40,394.66) and only the gap above it (so the scale) doubles
        Case("MEDIAN", "median", "MEDIAN(income)", 60, 18808, 200_000.0, "0.02",
             600 if quick else 1000, True),
        Case("SUM", "sum", "SUM(income)", None, top, 600_000.0, "0.01",
             600 if quick else 1000, False),
    ]
    if not quick:
        found[1:1] = [
            Case("MEDIAN (clamped)", "median", "MEDIAN(income)", 60, 18808, 200_000.0,
                 "0.00002", 2000, True),
            Case("MAX", "max", "MAX(income)", None, top, 2_000_000.0, "1", 2000, True),
        ]
    return found


def statement(call: str, scope_age: int | None, copies: int, i: int) -> str:
    """``copies`` copies of one aggregate (each noised and charged on its own), over a
    scope rephrased by ``age >= -i``: a new text for the answer cache, the same rows."""
    scope = "" if scope_age is None else f"age >= {scope_age} AND "
    items = ", ".join(f"{call} AS a{j}" for j in range(copies))
    return f"SELECT {items} FROM people WHERE {scope}age >= -{i}"


# ---------------------------------------------- the owner's view (not the attacker's)

def incomes(person: int | None = None, new: float | None = None) -> np.ndarray:
    x = people_columns()["income"].astype(float)
    if person is not None:
        x[person - 1] = new
    return x


def in_scope(values: np.ndarray, scope_age: int | None) -> np.ndarray:
    return values if scope_age is None else values[people_columns()["age"] >= scope_age]


def local_sensitivity(aggregate: str, values: np.ndarray) -> tuple[float, float]:
    """(true answer, local sensitivity) by the engine's formulas (row level, s = 1)."""
    x = np.sort(values)
    n = len(x)

    def at(refs):
        return {r: (float(x[r.rank(n) - 1]) if 1 <= r.rank(n) <= n else None) for r in refs}

    if aggregate == "median":
        half = Fraction(1, 2)
        return sens.local_sensitivity_of_percentile(
            n, at(sens.percentile_refs(half, 1)), half, 1, LOWER, UPPER)
    if aggregate == "max":
        return sens.local_sensitivity_of_max(at(sens.max_refs(1, True)), 1, LOWER, UPPER)
    return sens.local_sensitivity_of_winsorized_sum(n, float(x.sum()), at(sens.SUM_REFS),
                                                    LOWER, UPPER)


def scale_of(aggregate: str, values: np.ndarray, floor: float) -> tuple[float, float]:
    answer, ls = local_sensitivity(aggregate, values)
    return answer, sens.round_up_to_power_of_two(max(ls, floor))


# ------------------------------------------------------------- the engine side

class SeededSource:
    """A reproducible RandomSource for --seed (the default is the engine's CSPRNG)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def randbelow(self, n: int) -> int:
        return self._random.randrange(n)


def demo_rules(floor: float = 0.0):
    text = (ROOT / "rules" / "demo.toml").read_text()
    rules = parse_rules(text + "\n[analysts.attacker]\nbudget = 100000\n", "demo+attacker")
    return replace(rules, defaults=replace(rules.defaults, local_sensitivity_floor=floor,
                                           noise_scale="local"))


def build_database(folder: Path, person: int | None, new: float | None) -> Path:
    """The demo, or its neighbour with one person's income changed, as a DuckDB file."""
    name = "demo" if person is None else f"neighbour_{person}_{int(new)}"
    path = folder / f"{name}.duckdb"
    if not path.exists():
        create_demo(path)
        if person is not None:
            con = duckdb.connect(str(path))
            con.execute("UPDATE people SET income = ? WHERE person_id = ?", [new, person])
            con.close()
    return path


COPIES = 50  # aggregates per statement: 50 answers for one backend pass


def collect(job: dict) -> list[float]:
    """``answers`` answers of one aggregate through the engine, ``COPIES`` per statement,
    each statement's text new (so none comes from the cache and each is charged).
    ``job``: database, call, scope_age, epsilon, answers, floor, settings, seed."""
    copy = Path(tempfile.mkdtemp(prefix="idp-attack-")) / "db.duckdb"
    shutil.copy(job["database"], copy)
    rng = SeededSource(job["seed"]) if job["seed"] is not None else None
    engine = Engine(demo_rules(job["floor"]), open_backend(f"duckdb:///{copy}"), rng)
    session = Session.open(engine, "attacker")
    for setting in job["settings"]:
        list(session.execute(setting))
    hint = f"/*+ epsilon={job['epsilon']} */ "
    values: list[float] = []
    i = 0
    while len(values) < job["answers"]:
        i += 1
        copies = min(COPIES, job["answers"] - len(values))
        (answer,) = session.execute(hint + statement(job["call"], job["scope_age"], copies, i))
        values.extend(float(v) for v in answer.rows[0])
    engine.backend.close()
    shutil.rmtree(copy.parent, ignore_errors=True)
    return values


def run_jobs(jobs: list[dict], workers: int) -> list[list[float]]:
    """Each job's answers (``collect``), in ``workers`` fresh processes; one worker: in
    this process, without a fresh interpreter to import everything again (each job has its
    own engine, database copy and seed, so the answers are the same either way)."""
    if workers <= 1:
        return [collect(job) for job in jobs]
    order = sorted(range(len(jobs)), key=lambda j: -jobs[j]["answers"])
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        results = pool.map(collect, [jobs[j] for j in order], chunksize=1)
    out: list[list[float]] = [[] for _ in jobs]
    for j, values in zip(order, results):
        out[j] = values
    return out


# ----------------------------------------------------------------- the attack

def decide_small(y: np.ndarray, b: float, clamped: bool) -> np.ndarray:
    """Per row of y (k answers): True where the likelihood ratio says scale b, not 2b."""
    med = np.median(y, axis=1, keepdims=True)
    t = np.abs(y - med).sum(axis=1)
    m = ((y > LOWER) & (y < UPPER)).sum(axis=1) if clamped else y.shape[1]
    return t < 2 * b * m * math.log(2)


def k_grid(largest: int) -> list[int]:
    """Every k up to 40, then steps of about 5 %."""
    grid = list(range(1, min(40, largest) + 1))
    while grid[-1] < largest:
        grid.append(min(largest, max(grid[-1] + 1, round(grid[-1] * 1.05))))
    return grid


def engine_accuracy(small: list[float], large: list[float], b: float, clamped: bool,
                    trials: int, rng: np.random.Generator) -> dict[int, float]:
    """Accuracy for k up to N/4 (N answers per data set), each over ``trials`` random
    k-subsets of each data set's answers (nested: the first k of one permutation)."""
    pools = (np.array(small), np.array(large))
    largest = min(len(p) for p in pools) // 4
    draws = [p[np.argsort(rng.random((trials, len(p))), axis=1)[:, :largest]] for p in pools]
    return {k: 0.5 * (decide_small(draws[0][:, :k], b, clamped).mean()
                      + (~decide_small(draws[1][:, :k], b, clamped)).mean())
            for k in k_grid(largest)}


def first_k_staying_above(acc: dict[int, float]) -> int | None:
    """The smallest k from which the accuracy stays ≥ 95 % up to the largest k tried."""
    found = None
    for k in sorted(acc, reverse=True):
        if acc[k] < TARGET:
            break
        found = k
    return found


def model_accuracy(k: int, b: float, mu_small: float, mu_large: float, clamped: bool,
                   trials: int, rng: np.random.Generator, ratio: float = 2.0) -> float:
    def draw(mu, scale):
        y = mu + rng.laplace(0.0, scale, size=(trials, k))
        return np.clip(y, LOWER, UPPER) if clamped else y
    return 0.5 * (decide_small(draw(mu_small, b), b, clamped).mean()
                  + (~decide_small(draw(mu_large, ratio * b), b, clamped)).mean())


def model_k95(b: float, mu_small: float, mu_large: float, clamped: bool, trials: int,
              seed: int) -> int:
    rng = np.random.default_rng(seed)
    lo, hi = 0, 1
    while model_accuracy(hi, b, mu_small, mu_large, clamped, trials, rng) < TARGET:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if model_accuracy(mid, b, mu_small, mu_large, clamped, trials, rng) >= TARGET:
            hi = mid
        else:
            lo = mid
    return hi


def gamma_sf(k: int, x: float) -> float:
    """P(Gamma(k, 1) > x) = e^−x Σ_{j<k} x^j/j!, in log space."""
    if x <= 0:
        return 1.0
    logs = [j * math.log(x) - math.lgamma(j + 1) - x for j in range(k)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def analytic_accuracy(k: int, ratio: float = 2.0) -> float:
    """Laplace scale b vs ratio·b, location known, no clamping: T/b ~ Gamma(k), and the
    likelihood ratio decides b iff T/b < c·ratio with c = k·ln(ratio)/(ratio − 1)."""
    c = k * math.log(ratio) / (ratio - 1)
    return 1 - 0.5 * (gamma_sf(k, c * ratio) + (1 - gamma_sf(k, c)))


def analytic_k95(ratio: float = 2.0) -> int:
    lo, hi = 0, 1
    while analytic_accuracy(hi, ratio) < TARGET:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if analytic_accuracy(mid, ratio) >= TARGET else (mid, hi)
    return hi


# --------------------------------------------- a smooth upper bound (prototype only)

def smooth_upper_bound_of_median(values: np.ndarray, beta: float) -> float:
    """S*(D) = max_k e^{−kβ}·A(k), A(k) the largest local sensitivity of the median at
    distance k (docs/privacy.md; proxy/privacy/smooth_sensitivity.py), values padded with
    the domain bounds. Neighbours' S* differ by a factor ≤ e^β: no factor-2 jump."""
    x = np.sort(values)
    n = len(x)
    r = (n + 1) // 2
    padded = np.concatenate([np.full(n + 2, LOWER), x, np.full(n + 2, UPPER)])
    at = r - 1 + n + 2  # index of rank r
    best = 0.0
    for k in range(n + 1):
        if math.exp(-k * beta) * (UPPER - LOWER) <= best:
            break
        width = k + 1
        ts = np.arange(0, width + 1)
        a_k = float(np.max(padded[at + ts] - padded[at + ts - width]))
        best = max(best, math.exp(-k * beta) * a_k)
    return best


# ------------------------------------------------------------------- main

def fmt_eps(value: float) -> str:
    return f"{value:.2g}" if value < 0.01 else f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="MEDIAN and SUM only, 600 answers per data set (for the test)")
    parser.add_argument("--seed", type=int, default=None,
                        help="a reproducible noise source (default: the engine's CSPRNG)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--spread", type=int, default=0, metavar="R",
                        help="also run the engine-pool estimator of k on R simulated pools "
                             "of the same size per case (how much k engine scatters)")
    args = parser.parse_args()
    started = time.monotonic()
    quick = args.quick
    seeds = iter(range(args.seed or 0, 10**9))
    next_seed = (lambda: None) if args.seed is None else (lambda: next(seeds))
    np_rng = np.random.default_rng(args.seed if args.seed is not None else 2017)
    folder = Path(tempfile.mkdtemp(prefix="idp-attack-dbs-"))
    report: dict = {"quick": quick, "cases": {}, "mitigations": {}}

    # the jobs: every case's two pools, then the mitigations' answers, in one pool
    the_cases = cases(quick)
    jobs: list[dict] = []
    plan: list[tuple] = []  # what each job is for

    def job(database, call, scope_age, epsilon, answers, floor=0.0, settings=(), what=()):
        jobs.append({"database": str(database), "call": call, "scope_age": scope_age,
                     "epsilon": epsilon, "answers": answers, "floor": floor,
                     "settings": list(settings), "seed": next_seed()})
        plan.append(what)

    demo = build_database(folder, None, None)
    for case in the_cases:
        neighbour = build_database(folder, case.person, case.new)
        for label, database in (("D", demo), ("D'", neighbour)):
            job(database, case.call, case.scope_age, case.epsilon, case.answers,
                what=("case", case.name, label))
    median_case = the_cases[0]
    # (a) the floor: the attack on the MEDIAN pair with a floor of 2S, and its cost
    closing_floor = 128.0
    floor_answers = 400 if quick else 1000
    for label, database in (("D", demo), ("D'", build_database(folder, median_case.person,
                                                                median_case.new))):
        job(database, median_case.call, median_case.scope_age, median_case.epsilon,
            floor_answers, closing_floor, what=("floor-attack", label))
    floors = (0.0, 128.0) if quick else (0.0, 16.0, 128.0, 1024.0, 16384.0)
    runs = 100 if quick else 200
    for floor in floors:
        job(demo, "MEDIAN(income)", None, "0.1", runs, floor, what=("floor-cost", floor))
    if not quick:
        # (b) DP and (c) smooth sensitivity, against iDP, at the demo's default ε 0.1
        models = {"iDP": [], "DP": ["SET idp.model = 'dp'", "SET idp.sensitivity = 'global'"],
                  "DP smooth": ["SET idp.model = 'dp'", "SET idp.sensitivity = 'smooth'"]}
        for label, settings in models.items():
            for aggregate in ("MEDIAN", "MAX", "SUM"):
                if label == "DP smooth" and aggregate == "SUM":
                    continue  # smooth sensitivity covers percentiles, MAX and MIN only
                if label == "iDP" and aggregate == "MEDIAN":
                    continue  # the floor-0 row above
                job(demo, f"{aggregate}(income)", None, "0.1", runs, settings=settings,
                    what=("model", label, aggregate))
    print(f"collecting {sum(j['answers'] for j in jobs):,} answers through the engine "
          f"({args.workers} worker(s)) ...", flush=True)
    pools = run_jobs(jobs, args.workers)
    results = {what: values for what, values in zip(plan, pools)}
    collect_s = time.monotonic() - started

    # ------------------------------------------------------------- the attack
    k_analytic = analytic_k95()
    report["analytic_k95"] = k_analytic
    print(f"\nAnalytic (Laplace b vs 2b, location known, no clamping): k = {k_analytic} answers"
          f" for {TARGET:.0%} correct (accuracy {analytic_accuracy(k_analytic):.3f}); at k = "
          f"{k_analytic // 2}: {analytic_accuracy(k_analytic // 2):.3f}")
    print("\nThe attack: D (the demo) vs D' (one person's income changed), decided from the "
          "answers' spread")
    header = (f"{'aggregate':<17} {'neighbour D -> D′':<28} {'S(D)':>9} {'S(D′)':>9} "
              f"{'eps/answer':>10} {'inside':>6} {'k engine':>8} {'k model':>7} "
              f"{'total eps':>9} {'x budget':>8}")
    print(header)
    model_trials = 4000 if quick else 10000
    for case in the_cases:
        base = in_scope(incomes(), case.scope_age)
        moved = in_scope(incomes(case.person, case.new), case.scope_age)
        (answer_d, s_d), (answer_n, s_n) = (scale_of(case.aggregate, base, 0.0),
                                            scale_of(case.aggregate, moved, 0.0))
        assert max(s_d, s_n) == 2 * min(s_d, s_n), (case.name, s_d, s_n)
        eps = float(case.epsilon)
        small_first = s_d < s_n
        small, large = (results[("case", case.name, "D")], results[("case", case.name, "D'")])
        mu_small, mu_large = answer_d, answer_n
        if not small_first:
            small, large, mu_small, mu_large = large, small, answer_n, answer_d
        b = min(s_d, s_n) / eps
        acc = engine_accuracy(small, large, b, case.clamped, 1000, np_rng)
        k_engine = first_k_staying_above(acc)
        k_model = model_k95(b, mu_small, mu_large, case.clamped, model_trials,
                            int(np_rng.integers(1 << 31)))
        inside = np.mean([LOWER < v < UPPER for v in small + large]) if case.clamped else 1.0
        k_shown = k_engine if k_engine is not None else k_model
        total = k_shown * eps
        old = incomes()[case.person - 1]
        print(f"{case.name:<17} {f'#{case.person} {old:,.0f} -> {case.new:,.0f}':<28} "
              f"{s_d:>9,.0f} "
              f"{s_n:>9,.0f} {case.epsilon:>10} {inside:>6.0%} "
              f"{k_engine if k_engine is not None else '>' + str(max(acc)):>8} {k_model:>7} "
              f"{fmt_eps(total):>9} {total / DEMO_BUDGET:>8.2g}")
        largest = max(acc)
        report["cases"][case.name] = {
            "S_D": s_d, "S_neighbour": s_n, "epsilon_per_query": eps,
            "answers_per_data_set": case.answers, "inside_domain": float(inside),
            "k95_engine": k_engine, "k95_model": k_model, "k95_analytic": k_analytic,
            "total_epsilon": total, "locations": [mu_small, mu_large],
            "accuracy_by_k": {str(k): float(v) for k, v in acc.items()},
            "largest_k": largest, "accuracy_at_largest_k": float(acc[largest]),
            "noise_scale_check": (float(np.mean(np.abs(np.array(small) - mu_small))) / b
                                  if not case.clamped or inside > 0.99 else None),
        }
    print("k engine: smallest k from which the accuracy over 1,000 random k-subsets of each "
          "data set's answers stays >= 95%;\nk model: numpy Laplace with the same scales and "
          "clamping; inside: share of answers strictly inside the domain [0, 1e7] (the rest "
          "are clamped to a bound); total eps = k engine x eps/answer; x budget: total / the "
          "demo's budget of 1.0")
    if args.spread:
        print(f"k engine's scatter: the same estimator on {args.spread} simulated pools of the "
              "same size (model law), min / median / max:")
        for case in the_cases:
            entry = report["cases"][case.name]
            b = min(entry["S_D"], entry["S_neighbour"]) / entry["epsilon_per_query"]
            mu = entry["locations"]
            ks = []
            for _ in range(args.spread):
                pools = [mu[j] + np_rng.laplace(0.0, scale, case.answers)
                         for j, scale in ((0, b), (1, 2 * b))]
                if case.clamped:
                    pools = [np.clip(p, LOWER, UPPER) for p in pools]
                acc = engine_accuracy(list(pools[0]), list(pools[1]), b, case.clamped, 1000,
                                      np_rng)
                ks.append(first_k_staying_above(acc) or max(acc) + 1)
            entry["k95_engine_scatter"] = [min(ks), statistics.median(ks), max(ks)]
            print(f"  {case.name:<17} N = {case.answers}: {min(ks)} / "
                  f"{statistics.median(ks):g} / {max(ks)} (engine: {entry['k95_engine']})")
    for name, entry in report["cases"].items():
        if entry["noise_scale_check"] is not None:
            print(f"  {name}: mean |answer - true| on the smaller scale = "
                  f"{entry['noise_scale_check']:.3f} x S/eps (Laplace: 1)")

    if not quick:
        # clamping: the model over the attacker's choice of ε
        print("\nClamping (model, 4,000 attacks per k): k and total eps over the ε per query")
        sweeps = {"MEDIAN": (the_cases[0], ("0.1", "0.02", "0.002", "0.0002", "0.00002",
                                            "0.000005", "0.000002")),
                  "MAX": (the_cases[2], ("1", "0.5", "0.2", "0.1"))}
        report["clamping"] = {}
        for name, (case, epsilons) in sweeps.items():
            base = in_scope(incomes(), case.scope_age)
            moved = in_scope(incomes(case.person, case.new), case.scope_age)
            (a_d, s_d), (a_n, s_n) = (scale_of(case.aggregate, base, 0.0),
                                      scale_of(case.aggregate, moved, 0.0))
            mu_small, mu_large = (a_d, a_n) if s_d < s_n else (a_n, a_d)
            row = []
            for text in epsilons:
                b = min(s_d, s_n) / float(text)
                k = model_k95(b, mu_small, mu_large, True, 4000, int(np_rng.integers(1 << 31)))
                row.append((text, k, k * float(text)))
            report["clamping"][name] = row
            print(f"  {name:<7} " + "  ".join(f"eps {t}: k {k}, total {fmt_eps(tot)}"
                                             for t, k, tot in row))

    # ----------------------------------------------------------- mitigations
    print("\nWhat the owner can set")
    floor_small = results[("floor-attack", "D")]
    floor_large = results[("floor-attack", "D'")]
    base = in_scope(incomes(), median_case.scope_age)
    b_guess = scale_of("median", base, 0.0)[1] / float(median_case.epsilon)
    acc = engine_accuracy(floor_small, floor_large, b_guess, True, 1000, np_rng)
    largest = max(acc)
    report["mitigations"]["floor_attack"] = {"floor": closing_floor, "largest_k": largest,
                                             "accuracy_at_largest_k": float(acc[largest])}
    print(f"(a) local_sensitivity_floor = {closing_floor:g} (= 2S of the MEDIAN pair): the "
          f"same attack at k = {largest} is right {acc[largest]:.0%} of the time (coin: 50%)")
    true_median = float(np.sort(incomes())[(len(incomes()) + 1) // 2 - 1])
    _, ls_whole = local_sensitivity("median", incomes())
    print(f"    cost, MEDIAN(income) of all 20,000 at eps 0.1 (local sensitivity "
          f"{ls_whole:.2f}), {runs} answers per floor:")
    print(f"    {'floor':>8} {'mean |error|':>13} {'95th pct |error|':>17} {'implied S':>10}")
    report["mitigations"]["floor_cost"] = {}
    for floor in floors:
        errors = [abs(v - true_median) for v in results[("floor-cost", floor)]]
        mean, q95 = statistics.mean(errors), float(np.quantile(errors, 0.95))
        report["mitigations"]["floor_cost"][str(floor)] = {"mean_abs_error": mean,
                                                           "q95_abs_error": q95}
        print(f"    {floor:>8g} {mean:>13,.1f} {q95:>17,.1f} {mean * 0.1:>10,.1f}")
    print("    implied S = mean |error| x eps (Laplace; below the floor the engine may also "
          "apply the column's public resolution)")
    print("    a floor F hides S vs 2S only where 2S <= F; scopes of a few hundred people "
          "have S ~ 512-1,024 on this data")

    if not quick:
        truths = {"MEDIAN": true_median, "MAX": float(incomes().max()),
                  "SUM": float(incomes().sum())}
        idp_errors = {"MEDIAN": report["mitigations"]["floor_cost"]["0.0"]["mean_abs_error"]}
        print(f"(b, c) mean |error| at eps 0.1, {runs} answers each (20,000 people):")
        print(f"    {'':<10} {'iDP':>14} {'DP (global)':>14} {'DP smooth':>14}")
        report["mitigations"]["models"] = {}
        for aggregate in ("MEDIAN", "MAX", "SUM"):
            row = {}
            for label in ("iDP", "DP", "DP smooth"):
                values = results.get(("model", label, aggregate))
                if values is not None:
                    row[label] = statistics.mean(abs(v - truths[aggregate]) for v in values)
                elif label == "iDP":
                    row[label] = idp_errors[aggregate]
            report["mitigations"]["models"][aggregate] = row
            print(f"    {aggregate:<10} " + " ".join(
                f"{row[label]:>14,.0f}" if label in row else f"{'(n/a)':>14}"
                for label in ("iDP", "DP", "DP smooth")))
        print("    DP's scale is a constant ((U-L)/eps), so its spread says nothing about the "
              "data; smooth sensitivity is DP: its scale moves by <= e^beta per neighbour, "
              "and that is inside its eps")

    # (d) the answer cache
    cache_copy = Path(tempfile.mkdtemp(prefix="idp-attack-")) / "db.duckdb"
    shutil.copy(demo, cache_copy)
    engine = Engine(demo_rules(), open_backend(f"duckdb:///{cache_copy}"),
                    SeededSource(args.seed) if args.seed is not None else None)
    session = Session.open(engine, "attacker")
    same = "/*+ epsilon=0.02 */ SELECT MEDIAN(income) FROM people WHERE age >= 60"
    repeats = [next(session.execute(same)) for _ in range(3)]
    rephrased = [next(session.execute(same + f" AND age >= -{i}")) for i in (1, 2, 3)]
    engine.backend.close()
    same_values = {a.rows[0][0] for a in repeats}
    re_values = {a.rows[0][0] for a in rephrased}
    spent = [a.privacy["epsilon_spent"] for a in repeats + rephrased]
    report["mitigations"]["cache"] = {"same_text_distinct": len(same_values),
                                      "rephrased_distinct": len(re_values), "spent": spent}
    print(f"(d) answer cache: the same text 3 times -> {len(same_values)} distinct answer(s), "
          f"eps spent {spent[:3]}; 3 rephrasings (AND age >= -i) -> {len(re_values)} distinct, "
          f"eps spent {spent[3:]}")

    # (e) the budget
    print(f"(e) budget: the demo gives alice {DEMO_BUDGET:g}; the cheapest attack above needs "
          + ", ".join(f"{name} {fmt_eps(entry['total_epsilon'])}"
                      for name, entry in report["cases"].items()))

    # prototype: a smooth upper bound of the local sensitivity
    if not quick:
        print("\nPrototype (not in the proxy): Laplace calibrated to S* = the beta-smooth upper "
              "bound of the median's local sensitivity, beta = eps/3, not rounded")
        case = the_cases[0]
        base = in_scope(incomes(), case.scope_age)
        moved = in_scope(incomes(case.person, case.new), case.scope_age)
        s_rounded = scale_of("median", base, 0.0)[1]
        report["smooth_prototype"] = []
        print(f"    {'eps':>6} {'S*(D)':>10} {'S*(D′)':>10} {'ratio':>6} {'S*/S':>7} "
              f"{'bound e^beta':>12} {'k95 at e^beta':>13} {'total eps':>9}")
        for eps in (1.0, 0.1, 0.02):
            beta = eps / 3
            s_d = smooth_upper_bound_of_median(base, beta)
            s_n = smooth_upper_bound_of_median(moved, beta)
            ratio = math.exp(beta)
            k = analytic_k95(ratio)
            report["smooth_prototype"].append({"epsilon": eps, "S_D": s_d, "S_neighbour": s_n,
                                               "k95_worst_case": k, "total_epsilon": k * eps})
            print(f"    {eps:>6g} {s_d:>10,.1f} {s_n:>10,.1f} {max(s_d, s_n) / min(s_d, s_n):>6.3f}"
                  f" {s_d / s_rounded:>7.1f} {ratio:>12.3f} {k:>13,} {fmt_eps(k * eps):>9}")
        whole = smooth_upper_bound_of_median(incomes(), 0.1 / 3)
        report["smooth_prototype_whole_median_eps_0.1"] = whole / 0.1
        print(f"    over-60s, S(D) = {s_rounded:g}. k95 at e^beta: analytic answers needed to "
              "tell scale b from e^beta*b (the most two neighbours' S* can differ);\n"
              "    MEDIAN(income) of all 20,000 at eps 0.1: S* = "
              f"{whole:,.1f}, mean |error| S*/eps = {whole / 0.1:,.0f} (computed; iDP "
              f"{report['mitigations']['floor_cost']['0.0']['mean_abs_error']:,.0f}, DP smooth "
              f"{report['mitigations']['models']['MEDIAN']['DP smooth']:,.0f} measured above)")

    report["seconds"] = time.monotonic() - started
    print(f"\n{collect_s:.0f} s collecting answers, {report['seconds']:.0f} s in all")
    shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
