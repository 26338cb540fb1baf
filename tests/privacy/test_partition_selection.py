"""Partition selection (issue 18, item 4; docs/privacy.md §3.12): the threshold, the
sampled law of the keep decision, and the (ε, δ) guarantee checked on every neighbour
of small data sets with the real pushed-down counts.

Brute force: small tables (a unit table with k = 2, units of one to three rows; the
same with group_size = 2; a row-level table), keys a–d, NULL keys, rows in and out of
the WHERE scope, a NULL unit. For every neighbour — all records of one unit (two, for
g = 2) set to any key and either side of the WHERE — the per-key counts come from
``key_counts_sql`` run on DuckDB and equal a Python reference (each unit's k smallest
keys in scope); the keys present in both data sets move by at most 2km in L1 (the noise
scale's numerator; attained), at most km keys are present in one data set only, each
held by at most m units; and the exact hockey-stick divergence of the released key sets,
Σ_S max(0, P_D(S) − e^ε·P_D′(S)) over every set S, is at most δ both ways.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from decimal import Decimal
from fractions import Fraction

import duckdb
import pytest
from scipy.stats import binomtest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.partition_selection import PartitionSelection, selection_of, whole_root
from proxy.privacy.sampler import SecureSource
from proxy.pushdown.selection import key_counts_sql
from proxy.rules import parse_rules
from proxy.settings import Settings, epsilon_hint
from tests.databases import refill
from tests.privacy.harness import assert_sound, neighbours

KEYS = ("a", "b", "c", "d", None)
SCOPES = (1, 7)  # x < 5 is the WHERE: 1 in scope, 7 out


def _rules(group_size: int) -> str:
    return f"""
[defaults]
delta = 0.1
max_epsilon_per_query = 2
[tables.v]
privacy_unit = "unit"
max_rows_per_unit = 2
group_size = {group_size}
[tables.v.columns]
unit = {{ type = "int" }}
city = {{ type = "text" }}
x    = {{ type = "int", domain = [0, 10] }}
[tables.r]
[tables.r.columns]
unit = {{ type = "int" }}
city = {{ type = "text" }}
x    = {{ type = "int", domain = [0, 10] }}
"""


def _plan(table: str, group_size: int = 1):
    rules = parse_rules(_rules(group_size))
    sql = f"/*+ epsilon=2 */ SELECT city, COUNT(*) FROM {table} WHERE x < 5 GROUP BY city"
    (statement,) = parse_statements(sql)
    return analyze(statement, rules, Settings(), epsilon_hint(statement))


def test_threshold_is_the_least_that_delta_allows():
    """km·P(m + Z ≥ T) ≤ δ, and T − 1 would exceed it (unless T = m + 1); for m = 1 it
    is at least Wilson et al.'s τ = 1 + b·ln(k/(2δ)) with b = 2k/ε, and above it by
    less than b·ln(2/(1 + α)) + 1 (the discrete law's heavier tail, the ceiling)."""
    for k, m in itertools.product((1, 2, 5), (1, 2)):
        for epsilon in (Fraction(1, 20), Fraction(1, 2), Fraction(2)):
            for delta in (Decimal("1e-9"), Decimal("1e-6"), Decimal("0.01"), Decimal("0.5")):
                selection = PartitionSelection(k, m, epsilon, delta)
                threshold = selection.threshold
                assert threshold > m and selection.failure() <= float(delta) * (1 + 1e-12)
                alpha = math.exp(-1 / float(selection.scale))
                below = k * m * alpha ** (threshold - 1 - m) / (1 + alpha)
                assert threshold == m + 1 or below > float(delta)
                if m == 1:
                    b = float(selection.scale)
                    wilson = 1 + b * math.log(k / (2 * float(delta)))
                    assert wilson - 1e-9 <= threshold < wilson + b * math.log(2 / (1 + alpha)) + 1


def test_keep_probability_matches_the_sampled_law():
    """The decision the proxy samples (from the CSPRNG; below T by the Bernoulli(αᵗ)
    shortcut) has the exact probability ``keep_probability`` at, below and above T, and
    a kept count has the law of count + Z given count + Z ≥ T (checked on P(the lowest
    value it can take)): two-sided binomial tests at significance 10⁻⁹ each, so a wrong
    direction of the comparison, a wrong scale or a wrong shortcut fails, and a correct
    sampler fails once in 10⁹."""
    selection = PartitionSelection(1, 1, Fraction(1), Decimal("0.05"))
    threshold, rng, trials = selection.threshold, SecureSource(), 4000
    alpha = math.exp(-1 / float(selection.scale))
    for count in (1, threshold - 2, threshold, threshold + 3):
        noisy = [selection.kept(count, rng) for _ in range(trials)]
        kept = [value for value in noisy if value is not None]
        assert binomtest(len(kept), trials, selection.keep_probability(count)).pvalue > 1e-9
        lowest = max(threshold, count)  # P(count + Z = lowest | count + Z ≥ T)
        at_lowest = (1 - alpha) / (1 + alpha) * alpha ** (lowest - count) / \
            selection.keep_probability(count)
        assert all(value >= threshold for value in kept)
        if kept:
            hits = sum(value == lowest for value in kept)
            assert binomtest(hits, len(kept), at_lowest).pvalue > 1e-9


def test_a_key_of_one_unit_is_rare_and_a_common_key_is_kept():
    """A key held by one unit is kept with probability ≤ δ/k (here ≈ 0.048 ≤ 0.05); one
    held by T + 10 scales' worth of units is dropped with probability < 10⁻⁴: over 4000
    draws each, tested one-sided at 10⁻⁹ against those bounds."""
    selection = PartitionSelection(1, 1, Fraction(1), Decimal("0.05"))
    rng, trials = SecureSource(), 4000
    rare = sum(bool(selection.select([("one", 1)], 1, rng)) for _ in range(trials))
    assert binomtest(rare, trials, 0.05, alternative="greater").pvalue > 1e-9
    common = selection.threshold + 10 * int(selection.scale)
    missed = sum(not selection.select([("many", common)], 1, rng) for _ in range(trials))
    assert binomtest(missed, trials, 1e-4, alternative="greater").pvalue > 1e-9


def test_cap_keeps_the_largest_noisy_counts_in_key_order():
    selection = PartitionSelection(1, 1, Fraction(1), Decimal("1e-6"))
    counts = [("c", 10_000), ("a", 100_000), ("b", 50_000), ("d", 1)]
    assert selection.select(counts, 2, SecureSource()) == ("a", "b")
    assert selection.select(counts, 10, SecureSource()) == ("a", "b", "c")
    assert selection.select([], 10, SecureSource()) == ()


def test_cap_over_a_stream_longer_than_it_keeps_the_largest():
    """The keys are read from the backend a batch at a time and the kept ones pruned to
    the cap as they come (memory bounded by the cap): the largest noisy counts still
    win wherever they stand in the stream. Counts 100 apart (noise of scale 2: a swap
    needs a draw 25 scales out, about 10⁻¹¹ a pair), the largest last."""
    selection = PartitionSelection(1, 1, Fraction(1), Decimal("1e-6"))
    counts = ((f"k{i:05}", 1_000 + 100 * i) for i in range(5_000))
    assert selection.select(counts, 10, SecureSource()) == tuple(
        f"k{i:05}" for i in range(4_990, 5_000))


def test_whole_root():
    assert [whole_root(v, 1) for v in (1, 7, 10_000)] == [1, 7, 10_000]
    assert [whole_root(v, 2) for v in (1, 3, 4, 99, 100, 10_000)] == [1, 1, 2, 9, 10, 100]
    assert whole_root(10_000, 3) == 21 and whole_root(26, 3) == 2 and whole_root(27, 3) == 3


def _reference(rows, per_unit: int, units: bool) -> Counter:
    """Per key, the units (rows without a unit column) whose k smallest keys in scope
    hold it; a NULL unit is one unit."""
    if not units:
        return Counter(key for _, key, x in rows if key is not None and x < 5)
    held: dict = {}
    for unit, key, x in rows:
        if key is not None and x < 5:
            held.setdefault(unit, set()).add(key)
    return Counter(key for keys in held.values() for key in sorted(keys)[:per_unit])


class _Counts:
    """``key_counts_sql`` of a plan run on one in-memory DuckDB table per data set."""

    def __init__(self, plan) -> None:
        self.plan, self.con = plan, duckdb.connect(":memory:")
        self.sql = key_counts_sql(plan, 0, selection_of(plan).keys_per_unit, "duckdb")
        self.con.execute(f"CREATE TABLE {plan.table.name} (unit INT, city TEXT, x INT)")

    def __call__(self, rows) -> Counter:
        refill(self.con, self.plan.table.name, rows)
        return Counter(dict(self.con.execute(self.sql).fetchall()))


def _divergence(selection: PartitionSelection, ours: Counter, theirs: Counter) -> float:
    """Σ_S max(0, P_ours(S) − e^ε·P_theirs(S)) over every set S of keys (each key of a
    data set is kept independently with its ``keep_probability``; others never)."""
    keys = sorted(set(ours) | set(theirs))
    bound = math.exp(float(selection.epsilon))

    def probabilities(counts: Counter) -> dict:
        return {key: selection.keep_probability(counts[key]) if counts[key] else 0.0
                for key in keys}

    def probability(keep: dict, chosen: set) -> float:
        return math.prod(keep[key] if key in chosen else 1 - keep[key] for key in keys)

    ours, theirs = probabilities(ours), probabilities(theirs)
    total = 0.0
    for size in range(len(keys) + 1):
        for chosen in itertools.combinations(keys, size):
            chosen = set(chosen)
            total += max(0.0, probability(ours, chosen) - bound * probability(theirs, chosen))
    return total


DATA = [  # unit, city, x: units of 1–3 rows (unit 3 beyond k = 2), a NULL unit
    (1, "a", 1), (1, "b", 1), (2, "a", 1), (3, "a", 1), (3, "c", 1), (3, "b", 7),
    (4, "d", 1), (5, None, 1), (5, "b", 1), (None, "c", 1),
]


@pytest.mark.parametrize("table,group_size", [("v", 1), ("v", 2), ("r", 1)])
def test_every_neighbour_moves_the_counts_within_the_bound_and_delta_holds(table, group_size):
    plan = _plan(table, group_size)
    selection = selection_of(plan)
    k, m = selection.keys_per_unit, selection.units_changed
    assert (k, m) == ((2 if table == "v" else 1), group_size)
    assert selection.epsilon == 1 and selection.delta == Decimal("0.1")
    counts, rng = _Counts(plan), random.Random(18)
    rows = DATA if table == "v" else [(i, key, x) for i, (_, key, x) in enumerate(DATA)]

    def key_counts(rows):  # from the SQL, as the Python reference counts them
        found = counts(rows)
        assert found == _reference(rows, k, table == "v")
        return found

    def change(base, moved):
        shared = set(base) & set(moved)
        alone = [(ours, set(ours) - set(theirs)) for ours, theirs in ((base, moved),
                                                                       (moved, base))]
        return {"shared keys' counts": sum(abs(base[key] - moved[key]) for key in shared),
                "keys in one only": max(len(keys) for _, keys in alone),
                "units of such a key": max((ours[key] for ours, keys in alone for key in keys),
                                           default=0),
                "divergence": max(_divergence(selection, base, moved),
                                  _divergence(selection, moved, base))}

    # every record of m units set to any key and side of the WHERE: every combination,
    # or 120 (m = 2: 25) random ones when there are more
    (outcome,) = assert_sound(
        key_counts, lambda _: {"shared keys' counts": selection.sensitivity,
                               "keys in one only": k * m, "units of such a key": m,
                               "divergence": float(selection.delta)},
        [rows], lambda rows: neighbours(rows, list(itertools.product(KEYS, SCOPES)), m,
                                        limit=120 if m == 1 else 25, rng=rng),
        change=change, tolerance=1e-12)
    largest = outcome.worst["shared keys' counts"]
    assert largest == selection.sensitivity or (table == "v" and m == 2)  # attained
