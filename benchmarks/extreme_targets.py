"""How far a drawn MAX or MIN of the demo's columns lands (docs/privacy.md §5.3, "MAX and
MIN aim K ranks inside the data"): each person's least (MIN) or largest (MAX) cost in
``visits``, as the per-unit draw sees them without GROUP BY, and the people's incomes
and ages, each drawn ``--samples`` times by the product's own sampler
(``inverse_sensitivity.instance_release``), its requests answered from the sorted
values; the median relative error against the true MIN and MAX, for K =
``extreme_offset`` (the product's rule), then K = 10 and K = 0 (no public rule picks
them: which is better depends on where and how densely the data end inside the
domain). A benchmark: it asserts nothing.

``--exact`` prints instead the mechanism's exact law (its blocks over every value,
``inverse_sensitivity.blocks``: P(block) ∝ count·e^{−λd}, uniform inside) in the cells of
``utility.py demo`` for MAX and MIN (people's incomes and each person's least or largest
cost in ``visits``: whole table, WHERE, 5 and about 50 groups at the groups' share of ε)
and on the ages per region, for each ``--guards`` value g of K = ⌈ln(g·|G|)/λ⌉ − 1 (the
product's ``EXTREME_GUARD``, and 20 before issue 32's round on the extremes): the median
relative error over the groups' pooled law, the chance of landing within the top
(bottom) 1 % of the values and beyond the data, and the K between 0 and 60 with the
least median error (which no public rule knows).

    PYTHONPATH=. python benchmarks/extreme_targets.py [--epsilon 1,0.1] [--samples 1000]
    PYTHONPATH=. python benchmarks/extreme_targets.py --exact [--guards 20,4]
    PYTHONPATH=. python benchmarks/extreme_targets.py --corpus

``--corpus`` takes the MAX and MIN cells of the held-out corpus's statements that the
10 % rule judges wrong (benchmarks/bi_heldout.py, at its ε 1: each aggregate's ε, over
GROUP BY the group's share, as the engine gives it) and prints, per cell: the groups,
the candidates |G|, the product's K, the fewest values any group holds within the
corpus's tolerance of its true extreme (m), the exact chance that every group's draw is
correct at the product's K and at the best single K of 0..60, and an upper bound on that
chance for *any* ε-DP draw per group (docs/privacy.md §5.3, "What no K can reach"): with
D⁻ the group without its m values in the tolerance and J the disjoint tolerance bands
beyond D⁻'s extreme where m tied values could lie instead, a draw correct with chance p
on D and on each of those J data sets (each m changes from D⁻) has p ≤ e^{mε}/(J + 1).
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.demo import create_demo  # noqa: E402
from proxy.engine import answered  # noqa: E402
from proxy.privacy.inverse_sensitivity import (  # noqa: E402
    EXTREME_SHARE,
    SCALED_FACTORS,
    Scaled,
    blocks,
    candidate_grid,
    exponent,
    extreme_offset,
    instance_release,
    scaled_blocks,
)
from proxy.privacy.requests import CountRequest  # noqa: E402
from proxy.privacy.sampler import SecureSource  # noqa: E402
from proxy.vocabulary import MAX, MIN  # noqa: E402

COLUMNS = {  # name: (SQL of the sorted values, declared domain, resolution or None for int)
    "cost (per person)": ("SELECT {kind}(cost) FROM visits GROUP BY person_id", 0, 100_000, 0.01),
    "income": ("SELECT income FROM people", 0, 10_000_000, 0.01),
    "age": ("SELECT age FROM people", 0, 120, None),
}


def reader(values: list[float]):
    """Requests answered from the sorted values, as the engine answers them."""
    def read(request):
        if isinstance(request, CountRequest):
            y = request.point
            below, through = bisect.bisect_left(values, y), bisect.bisect_right(values, y)
            return (below, through, values[below - 1] if below else None,
                    values[through] if through < len(values) else None)
        return values[request.first - 1: request.last]
    return read


def median_error(draw, truth: float, samples: int) -> float:
    return float(np.median([abs(draw() - truth) / abs(truth) for _ in range(samples)]))


_BANDS5 = ("CASE WHEN age < 30 THEN 0 WHEN age < 40 THEN 1 WHEN age < 50 THEN 2 "
           "WHEN age < 60 THEN 3 ELSE 4 END")
_BANDS50 = "CASE WHEN age < 20 THEN 0 WHEN age >= 68 THEN 49 ELSE age - 19 END"
_INCOME, _COST, _AGE = (0, 10_000_000, 0.01, False), (0, 100_000, 0.01, False), \
    (0, 120, 1.0, True)
# cell: (SQL of (group, value) rows, {kind} the extreme, groups' share of ε, domain); the
# groups' shares are the engine's ε / min(2c·g, G) (c = 1 for people, 6 for visits)
EXACT_CELLS = {
    "people": ("SELECT 0, income FROM people", 1, _INCOME),
    "people, WHERE": ("SELECT 0, income FROM people WHERE age > 60", 1, _INCOME),
    "people, 5 age bands": (f"SELECT {_BANDS5}, income FROM people", 2, _INCOME),
    "people, 50 age bands": (f"SELECT {_BANDS50}, income FROM people", 2, _INCOME),
    "visits": ("SELECT 0, {kind}(cost) FROM visits GROUP BY person_id", 1, _COST),
    "visits, WHERE": ("SELECT 0, {kind}(cost) FROM visits WHERE days >= 1 "
                      "GROUP BY person_id", 1, _COST),
    "visits, 5 departments": ("SELECT department, {kind}(cost) FROM visits "
                              "GROUP BY department, person_id", 5, _COST),
    "visits, 53 weeks": ("SELECT extract(week FROM visited_at), {kind}(cost) FROM visits "
                         "GROUP BY 1, person_id", 12, _COST),
    "ages per region": ("SELECT region, age FROM people", 2, _AGE),
}


def exact_law(values: list[float], largest: bool, offset: int, epsilon: Fraction, grid):
    """(candidate values, probabilities) of the draw aimed ``offset`` ranks inside
    ``values`` (sorted), from the product's own blocks over the whole scope."""
    n = len(values)
    aside = min(offset, math.floor(EXTREME_SHARE * n))
    scale = float(exponent(epsilon, 1))
    points, weights = [], []
    for block in blocks(n, n - aside if largest else 1 + aside, grid, 1, values):
        points.extend(float(grid.value(k)) for k in range(block.first,
                                                          block.first + block.count))
        weights.extend([math.exp(-scale * block.distance)] * block.count)
    weights = np.array(weights)
    return np.array(points), weights / weights.sum()


def scaled_law(values: list[float], largest: bool, offset: int, epsilon: Fraction, grid):
    """(candidate values, probabilities) of the scaled distance's draw (docs/privacy.md
    §5.3, "MAX and MIN by the scaled distance"), t − 1 = ``offset`` capped at a tenth,
    from the product's own blocks over the whole scope."""
    n = len(values)
    aside = min(offset, math.floor(EXTREME_SHARE * n))
    rank = n - aside if largest else 1 + aside
    scaled = Scaled(SCALED_FACTORS[MAX if largest else MIN], largest)
    found = scaled_blocks(blocks(n, n if largest else 1, grid, 1, values), n, rank, grid,
                          1, values, scaled)
    scale = float(exponent(epsilon, 1))
    points = [float(grid.middle(k)) for b in found for k in range(b.first, b.first + b.count)]
    weights = np.array([math.exp(-scale * b.distance) for b in found for _ in range(b.count)])
    return np.array(points), weights / weights.sum()


def exact_cell(groups: list[list[float]], largest: bool, offset, epsilon: Fraction,
               grid, law_of=exact_law) -> tuple[float, float, float]:
    """Median relative error of the groups' pooled laws (each group weighing the same),
    and the chances of landing within the extreme 1 % and beyond the data; ``offset``
    maps a group's values to its K, ``law_of`` is ``exact_law`` or ``scaled_law``."""
    errors, masses, within, beyond = [], [], 0.0, 0.0
    for values in groups:
        points, law = law_of(values, largest, offset(values), epsilon, grid)
        truth = values[-1] if largest else values[0]
        edge = float(np.quantile(values, 0.99 if largest else 0.01))
        errors.append(np.abs(points - truth) / abs(truth))
        masses.append(law / len(groups))
        inside = (points >= edge) & (points <= truth) if largest else \
            (points <= edge) & (points >= truth)
        within += law[inside].sum() / len(groups)
        beyond += law[points > truth if largest else points < truth].sum() / len(groups)
    errors, masses = np.concatenate(errors), np.concatenate(masses)
    order = np.argsort(errors)
    median = errors[order][np.searchsorted(np.cumsum(masses[order]), 0.5)]
    return float(median), within, beyond


def scaled(con, epsilons: list[Fraction]) -> None:
    """The cells on log-spaced candidates: the rank target's law against the scaled
    distance's (the product's since issue 32's round on MIN), K = ``extreme_offset``."""
    print("| aggregate | cell | ε | K | rank target: error, in 1 %, beyond | "
          "scaled: error, in 1 %, beyond |\n|---|---|---|---|---|---|")
    for kind in ("max", "min"):
        for name, (sql, share, domain) in EXACT_CELLS.items():
            grid = candidate_grid(*domain)
            if not grid.log_spaced:
                continue
            groups = _groups(con, sql, kind)
            for epsilon in epsilons:
                part = epsilon / share
                offset = extreme_offset(part, 1, grid)
                cells = [exact_cell(groups, kind == "max", lambda v: offset, part, grid, law)
                         for law in (exact_law, scaled_law)]
                print(f"| {kind.upper()} | {name} | {float(epsilon):g} | {offset} | " + " | ".join(
                    f"{100 * e:,.0f} %, {w:.2f}, {b:.2f}" for e, w, b in cells) + " |",
                    flush=True)


def _groups(con, sql: str, kind: str) -> list[list[float]]:
    """A cell's groups: each key's values (NULLs left out), sorted."""
    found: dict = {}
    for key, value in con.execute(sql.format(kind=kind)).fetchall():
        if value is not None:
            found.setdefault(key, []).append(float(value))
    return [sorted(v) for v in found.values()]


def exact(con, epsilons: list[Fraction], guards: list[float]) -> None:
    print("| aggregate | cell | ε | " + " | ".join(
        f"g = {g:g}: K, error, in 1 %, beyond" for g in guards) + " | best K (error) |")
    print("|---" * (4 + len(guards)) + "|")
    for kind in ("max", "min"):
        for name, (sql, share, domain) in EXACT_CELLS.items():
            grid = candidate_grid(*domain)
            groups = _groups(con, sql, kind)
            for epsilon in epsilons:
                part = epsilon / share
                cells = []
                for guard in guards:
                    offset = max(0, math.ceil(math.log(guard * grid.count)
                                              / exponent(part, 1)) - 1)
                    error, within, beyond = exact_cell(groups, kind == "max",
                                                       lambda v, k=offset: k, part, grid)
                    cells.append(f"{offset}, {100 * error:,.0f} %, {within:.2f}, {beyond:.2f}")
                best = min(range(61), key=lambda k: exact_cell(
                    groups, kind == "max", lambda v, k=k: k, part, grid)[0])
                error = exact_cell(groups, kind == "max", lambda v: best, part, grid)[0]
                print(f"| {kind.upper()} | {name} | {float(epsilon):g} | " + " | ".join(cells)
                      + f" | {best} ({100 * error:,.0f} %) |", flush=True)


_B30 = "floor(extract(epoch FROM visited_at) / 2592000)"
_DAYS = (0, 60, 1.0, True)
_PER_UNIT_MAX_DAYS = "SELECT {g}, max(days) FROM visits {where} GROUP BY {g}, person_id"
# statement: its MAX/MIN cells (label, SQL of (group, value) rows, extreme, group's ε at
# the corpus's ε 1, domain); per-unit extremes on visits, as the draw sees them
CORPUS_CELLS = {
    "analyst-extremes": [
        ("MAX(income)", "SELECT 0, income FROM people", "max", Fraction(1), _INCOME),
        ("MIN(income)", "SELECT 0, income FROM people", "min", Fraction(1), _INCOME)],
    "dbplyr-max-min-filter": [
        ("MAX(days), pediatrics", _PER_UNIT_MAX_DAYS.format(
            g="'all'", where="WHERE department = 'pediatrics'"), "max", Fraction(1), _DAYS),
        ("MIN(cost), pediatrics", "SELECT 0, min(cost) FROM visits WHERE department = "
         "'pediatrics' GROUP BY person_id", "min", Fraction(1), _COST)],
    "metabase-min-max-age-by-region": [
        ("MIN(age) per region", "SELECT region, age FROM people", "min", Fraction(1, 2), _AGE),
        ("MAX(age) per region", "SELECT region, age FROM people", "max", Fraction(1, 2), _AGE)],
    "powerbi-min-max-days, ibis-department-stats": [
        ("MAX(days) per department", _PER_UNIT_MAX_DAYS.format(g="department", where=""),
         "max", Fraction(1, 5), _DAYS)],
    "superset-table-multi-metric": [
        ("MAX(age) per region, sex", "SELECT region || sex, age FROM people", "max",
         Fraction(1, 2), _AGE)],
    "grafana-30d-max-days": [
        ("MAX(days) per 30 days", _PER_UNIT_MAX_DAYS.format(g=_B30, where=""), "max",
         Fraction(1, 12), _DAYS)],
}


def tolerance(truth: float, largest_truth: float) -> float:
    """The corpus's tolerance without a bound (bi_heldout.py): 10 % of |truth|, at least
    1 % of the column's largest |truth|."""
    return max(0.10 * abs(truth), 0.01 * largest_truth)


def correct_chance(values: list[float], largest: bool, offset: int, epsilon: Fraction,
                   grid, largest_truth: float) -> float:
    points, law = exact_law(values, largest, offset, epsilon, grid)
    truth = values[-1] if largest else values[0]
    return float(law[np.abs(points - truth) <= tolerance(truth, largest_truth)].sum())


def any_draw_bound(values: list[float], largest: bool, epsilon: Fraction, grid,
                   largest_truth: float) -> tuple[int, float]:
    """(m, e^{mε}/(J + 1) capped at 1): m the values within the tolerance of the true
    extreme, J the disjoint tolerance bands of candidates beyond the extreme of the rest
    (m tied values at a band's centre v make v the extreme, m changes from the rest)."""
    truth = values[-1] if largest else values[0]
    tol = tolerance(truth, largest_truth)
    inside = [v for v in values if abs(v - truth) <= tol]
    rest = [v for v in values if abs(v - truth) > tol]
    edge = (rest[-1] if largest else rest[0]) if rest else (grid.lower if largest
                                                            else grid.upper)
    taken = [(truth - tol, truth + tol)]
    points = [float(grid.value(k)) for k in range(grid.first, grid.last + 1)]
    for v in (points if largest else points[::-1]):
        if (v <= edge if largest else v >= edge):
            continue
        band = (v - tolerance(v, largest_truth), v + tolerance(v, largest_truth))
        if all(band[1] < low or band[0] > high for low, high in taken):
            taken.append(band)
    return len(inside), min(1.0, math.exp(len(inside) * float(epsilon)) / len(taken))


def corpus(con) -> None:
    print("| statement | cell | groups, values each | group's ε | \\|G\\|, K | m (fewest) | "
          "all groups correct at K | at the best K | any DP draw ≤ |")
    print("|---" * 9 + "|")
    for statement, cells in CORPUS_CELLS.items():
        for label, sql, kind, epsilon, domain in cells:
            grid, largest = candidate_grid(*domain), kind == "max"
            found: dict = {}
            for key, value in con.execute(sql).fetchall():
                if value is not None:
                    found.setdefault(key, []).append(float(value))
            groups = [sorted(v) for v in found.values()]
            truths = [abs(v[-1] if largest else v[0]) for v in groups]
            top = max(truths)
            rule = extreme_offset(epsilon, 1, grid)

            def chance(k):
                return math.prod(correct_chance(v, largest, k, epsilon, grid, top)
                                 for v in groups)
            best = max(range(61), key=chance)
            bounds = [any_draw_bound(v, largest, epsilon, grid, top) for v in groups]
            sizes = [len(v) for v in groups]
            print(f"| {statement} | {label} | {len(groups)}, {min(sizes):,}–{max(sizes):,} | "
                  f"{float(epsilon):.3g} | {grid.count:,}, {rule} | "
                  f"{min(m for m, _ in bounds)} | {chance(rule):.3f} | "
                  f"{chance(best):.3f} (K = {best}) | "
                  f"{math.prod(b for _, b in bounds):.3g} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", default="1,0.1",
                        type=lambda text: [Fraction(v) for v in text.split(",")])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--corpus", action="store_true")
    parser.add_argument("--scaled", action="store_true")
    parser.add_argument("--guards", default="20,4",
                        type=lambda text: [float(v) for v in text.split(",")])
    arguments = parser.parse_args()
    path = Path(tempfile.mkdtemp()) / "demo.duckdb"
    create_demo(path)
    if arguments.exact or arguments.corpus or arguments.scaled:
        with duckdb.connect(str(path), read_only=True) as con:
            if arguments.scaled:
                scaled(con, arguments.epsilon)
            elif arguments.corpus:
                corpus(con)
            else:
                exact(con, arguments.epsilon, arguments.guards)
        return
    rng = SecureSource()
    print("| column | ε | MIN: K (rule) | K = 10 | K = 0 | MAX: K (rule) | K = 10 | K = 0 |"
          "\n|---|---|---|---|---|---|---|---|")
    with duckdb.connect(str(path), read_only=True) as con:
        for name, (sql, lower, upper, resolution) in COLUMNS.items():
            grid = candidate_grid(lower, upper, resolution or 1.0, resolution is None)
            for epsilon in arguments.epsilon:
                cells = []
                for kind in ("min", "max"):
                    values = sorted(float(row[0]) for row in
                                    con.execute(sql.format(kind=kind)).fetchall())
                    n, read, largest = len(values), reader(values), kind == "max"
                    truth = values[-1] if largest else values[0]

                    def rank(offset, n=n, largest=largest):
                        aside = min(offset, math.floor(EXTREME_SHARE * n))
                        return n - aside if largest else 1 + aside

                    for offset in (extreme_offset(epsilon, 1, grid), 10, 0):
                        cells.append(median_error(lambda r=rank(offset): answered(
                            instance_release(n, r, 1, epsilon, grid, rng), read),
                            truth, arguments.samples))
                print(f"| {name} | {float(epsilon):g} | "
                      + " | ".join(f"{100 * c:,.0f} %" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
