"""The brute-force harness of the privacy tests: small random data sets, every
neighbour of each, and the check that no neighbour moves a released statistic by more
than the sensitivity the product computes for it (sound) — nor, where a formula is
tight, by less.

A neighbour modifies all records of at most g units (SPEC §5; row level when each
record is its own unit), each record to any of a few options: values on a grid with
both domain bounds and ties, and raw values a float column can hold besides (NaN, ±inf,
overflow-sized; NULL where the test's records allow it), in or out of the WHERE scope
and in any group. A new formula's test names its statistic and its sensitivity and
leaves the rest here::

    assert_sound(lambda records: percentile(in_domain(records), ...),
                 lambda records: local_sensitivity_of_percentile(...)[1],
                 datasets(11, 40, 5, 1), modifying(group_size=2),
                 tight=lambda records: bool(records))

``statistic(D)`` computes the answer from the data as the backend does
(tests/privacy/reference.py), ``sensitivity(D)`` is the bound the product computes
for D. Either gives one number, or one per key (a group, an aggregate, any measure a
``change`` function makes of two answers): each key is checked on its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any, NamedTuple

from proxy.privacy.sensitivity import count_sensitivity, groups_touched
from tests.factories import random_datasets, rows_of

LOWER, UPPER = 0.0, 10.0


def unit_table_rules(max_rows_per_unit: int, keys: str) -> str:
    """The rules of the ranked mechanisms' brute-force table ``t``: a privacy unit of up
    to ``max_rows_per_unit`` rows, ``v`` on [LOWER, UPPER] with candidates k/2, an int
    ``w`` to filter on, and the group key ``k`` of the ``keys`` listed ("a", "b")."""
    listed = ", ".join(f'"{key}"' for key in keys)
    return f"""
[tables.t]
privacy_unit = "unit"
max_rows_per_unit = {max_rows_per_unit}
[tables.t.columns]
unit = {{ type = "int" }}
v = {{ type = "float", domain = [{LOWER}, {UPPER}], resolution = 512 }}  # candidates k/2
w = {{ type = "int" }}
k = {{ type = "text", keys = [{listed}] }}
"""
GRID = [0.0, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0]  # includes both domain bounds
# Raw values a float column can hold besides ordinary numbers (DuckDB's read_csv makes
# NaN and ±inf from text; pandas keeps inf): in data sets and in neighbours.
EXTREME = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 1e300, -1e300]
VALUES = GRID + EXTREME  # what a record may hold, in data and in neighbours
TOLERANCE = 1e-9
# (units, rows per unit, group size): row-level, user-level, group privacy
SETTINGS = [(5, 1, 1), (4, 2, 1), (4, 1, 2)]


class Record(NamedTuple):
    unit: int | None
    value: float
    in_scope: bool = True
    group: int = 0


def grid_or_extreme(rng, grid=GRID, extreme=EXTREME, share: float = 0.8) -> float:
    """A value of ``grid`` (with probability ``share``), else one of ``extreme``."""
    return rng.choice(grid) if rng.random() < share else rng.choice(extreme)


def datasets(seed: int, count: int, max_units: int, max_rows_per_unit: int,
             groups: int = 1) -> Iterator[list[Record]]:
    """Random small data sets of 0..max_units units with 1..max_rows_per_unit records
    each: ties and bound values, one value in five NaN, ±inf or overflow-sized, one
    record in four out of scope, in any of ``groups`` groups."""
    def record(rng, unit) -> Record:
        return Record(unit, grid_or_extreme(rng), rng.random() < 0.75, rng.randrange(groups))
    return random_datasets(seed, count, rows_of(record, (1, max_rows_per_unit)),
                           units=(0, max_units))


def options(groups: int = 1, values=VALUES) -> list[tuple]:
    """(value, in scope, group) for a modified Record: every combination."""
    return [(v, s, g) for v in values for s in (True, False) for g in range(groups)]


def _remade(record, option):
    """``record`` of the same unit (its first field) with the other fields ``option``."""
    fields = (record[0], *option)
    return record._make(fields) if hasattr(record, "_make") else fields


def neighbours(records: list, options, group_size: int = 1, *,
               unit: Callable | None = itemgetter(0), make: Callable = _remade,
               limit: int | None = None, rng=None) -> Iterator[list]:
    """Every data set that modifies all records of at most ``group_size`` units, each
    record to any of ``options`` (a list, or a function of the record giving its own):
    user-level privacy, group size g. ``unit`` reads a record's unit (None: each record
    is its own, row level); ``make(record, option)`` is the modified record (by
    default the same unit, the other fields the option's). With ``limit``, a choice of
    units whose combinations are more than ``limit`` gets ``limit`` random ones from
    ``rng`` instead. With one record per unit this is the modify-one-record neighbour of
    seed 000; the records stay in their places."""
    owners: dict = {}
    for position, record in enumerate(records):
        owners.setdefault(position if unit is None else unit(record), []).append(position)
    units = sorted(owners, key=lambda u: (u is None, u))
    made: dict = {}  # (position, option's index) -> the record: made once, shared
    for chosen in itertools.combinations(units, min(group_size, len(units))):
        positions = sorted(p for u in chosen for p in owners[u])
        choices = [options(records[p]) if callable(options) else options for p in positions]
        remade = []  # each position's modified records, made once and shared
        for position, offered in zip(positions, choices):
            for index, option in enumerate(offered):
                if (position, index) not in made:
                    made[position, index] = make(records[position], option)
            remade.append([made[position, index] for index in range(len(offered))])
        combinations: Iterable = itertools.product(*remade)
        if limit is not None and math.prod(map(len, remade)) > limit:
            combinations = (tuple(rng.choice(c) for c in remade) for _ in range(limit))
        for combination in combinations:
            changed = list(records)
            for position, record in zip(positions, combination):
                changed[position] = record
            yield changed


def modifying(values=VALUES, group_size: int = 1, groups: int = 1) -> Callable:
    """The neighbours of a data set of Records: all records of ``group_size`` units set,
    each, to any of ``values`` in or out of scope and in any of ``groups`` groups."""
    choices = options(groups, values)
    return lambda records: neighbours(records, choices, group_size)


# -- what a neighbour changes -----------------------------------------------------------

def absolute(before, after):
    """|Δ| of a number, or of each value of a mapping."""
    if isinstance(before, Mapping):
        return {key: abs(after[key] - before[key]) for key in before}
    return abs(after - before)


def total(before: Mapping, after: Mapping) -> float:
    """Σ_k |Δ_k|: the L1 change of a histogram (or of any answers per key)."""
    return sum(abs(after[key] - before[key]) for key in before)


def squares(before: Mapping, after: Mapping) -> float:
    """Σ_k Δ_k²: the squared L2 change of answers per key (what Gaussian noise's ρ adds
    up over the groups)."""
    return sum((after[key] - before[key]) ** 2 for key in before)


def histogram(before: Mapping, after: Mapping) -> dict:
    """A histogram's change: each count's largest (the noise each group gets) and the
    L1 over all groups (what the groups' share of ε is divided by)."""
    changes = [abs(after[key] - before[key]) for key in before]
    return {"each group": max(changes, default=0), "all groups": sum(changes)}


def group_changes(before: Mapping, after: Mapping) -> dict:
    """A grouped query's change (group -> its answers, the COUNT first): each answer's
    ((group, i) -> |Δ|), the L1 change of the counts ("counts") and how many groups
    changed at all ("groups": at most the share ε is divided by)."""
    out: dict = {}
    counts = groups = 0
    for key, answers in before.items():
        moved = [abs(a - b) for a, b in zip(after[key], answers)]
        out.update(((key, index), change) for index, change in enumerate(moved))
        counts += moved[0]
        groups += any(moved)
    out["counts"], out["groups"] = counts, groups
    return out


def group_totals(grouped: bool, groups: int, shift: int) -> dict:
    """The bounds of ``group_changes``' two totals for ``groups`` groups (one when not
    ``grouped``): a unit's s records move the counts of two groups at most (leaving one,
    entering another), and touch ``groups_touched`` groups."""
    return {"counts": (min(2, groups) if grouped else 1) * count_sensitivity(shift),
            "groups": groups_touched(shift, groups) if grouped else 1}


def pushed_down_changes(column: str) -> Callable:
    """The change of the pushed-down statistics of each group (group -> GroupStats): its
    rows, units and the total of ``column`` ((group, "rows") -> |Δ|, …), and the rows
    over all groups ("rows")."""
    def change(before: Mapping, after: Mapping) -> dict:
        out: dict = {"rows": 0}
        for key, old in before.items():
            new = after[key]
            out[key, "rows"] = abs(new.rows - old.rows)
            out[key, "units"] = abs(new.units - old.units)
            out[key, column] = abs(new.column(column).total - old.column(column).total)
            out["rows"] += out[key, "rows"]
        return out
    return change


def privacy_loss(sensitivities: Mapping) -> Callable:
    """Σ_k |Δ_k| / LS_k: the privacy loss of a neighbour, in multiples of the ε each
    group's noise gets when it is scaled to that group's LS_k (a group whose LS_k is 0
    gets no noise: it must not move at all). Over the groups either answer holds: one
    that neither holds answers the same in both (a defaultdict's default)."""
    def change(before: Mapping, after: Mapping) -> float:
        loss = 0.0
        for key in before.keys() | after.keys():
            moved, scale = abs(after[key] - before[key]), sensitivities[key]
            if scale == 0:
                assert moved == 0, f"group {key} of sensitivity 0 moved by {moved}"
            else:
                loss += moved / scale
        return loss
    return change


# -- the checks ---------------------------------------------------------------------------

class Outcome(NamedTuple):
    records: Any
    bound: Any  # the sensitivity (per key)
    worst: Any  # the largest change over the neighbours (per key)


def assert_sound(statistic: Callable, sensitivity: Callable, datasets: Iterable,
                 neighbours: Callable | None = None, *, change: Callable = absolute,
                 tight: bool | Callable = False,
                 tolerance: float | Callable = TOLERANCE) -> list[Outcome]:
    """For every data set D and every one of ``neighbours(D)``: ``change(statistic(D),
    statistic(D'))`` ≤ ``sensitivity(D)``, both finite (per key when the sensitivity is
    a mapping); where ``tight`` (a flag, or a function of D) the largest change reaches
    the sensitivity. ``tolerance``: of float rounding (a number, or a function of D).
    ``neighbours``: by default, every Record of one unit set to any of VALUES (modifying).
    Returns each data set's bound and largest change, for checks of its own."""
    neighbours = neighbours or modifying()
    outcomes = []
    for records in datasets:
        bound = sensitivity(records)
        slack = tolerance(records) if callable(tolerance) else tolerance
        check = _each_key if isinstance(bound, Mapping) else _one_number
        worst = check(statistic, bound, records, neighbours(records), change, slack)
        if tight(records) if callable(tight) else tight:
            for key, limit in (bound.items() if isinstance(bound, Mapping) else [(None, bound)]):
                reached = worst if key is None else worst[key]
                assert reached >= limit - slack, (
                    f"not tight{'' if key is None else f' ({key})'}: change {reached} < "
                    f"{limit} on {records}")
        outcomes.append(Outcome(records, bound, worst))
    return outcomes


def _one_number(statistic, bound, records, others, change, slack) -> float:
    assert math.isfinite(bound), f"sensitivity {bound} on {records}"
    base, worst = statistic(records), 0.0
    for other in others:
        # |Δ| written out for the common case: the loop runs millions of times
        moved = abs(statistic(other) - base) if change is absolute else \
            change(base, statistic(other))
        assert moved <= bound + slack, f"unsound: change {moved} > {bound} on {records} -> {other}"
        worst = max(worst, moved)
    assert math.isfinite(worst), (records, worst)
    return worst


def _each_key(statistic, bound, records, others, change, slack) -> dict:
    assert all(math.isfinite(b) for b in bound.values()), f"sensitivity {bound} on {records}"
    base, worst = statistic(records), dict.fromkeys(bound, 0.0)
    limits = [(key, limit + slack) for key, limit in bound.items()]
    for other in others:
        moved = change(base, statistic(other))
        for key, limit in limits:  # within the worst so far: within its limit (NaN: not)
            if not moved[key] <= worst[key]:
                assert moved[key] <= limit, (
                    f"unsound ({key}): change {moved[key]} > {bound[key]} on {records} -> {other}")
                worst[key] = moved[key]
    assert all(math.isfinite(w) for w in worst.values()), (records, worst)
    return worst


def assert_loss_within(statistic: Callable, sensitivities: Callable, share: Callable,
                       datasets: Iterable, neighbours: Callable | None = None, *,
                       tolerance: float = TOLERANCE) -> list[Outcome]:
    """GROUP BY: each group's noise scaled to share(D)·LS_k(D) keeps the total privacy
    loss within ε: Σ_k |Δ_k| / LS_k ≤ share(D) for every neighbour (``statistic`` and
    ``sensitivities``: group -> answer, group -> LS_k)."""
    outcomes = []
    for records in datasets:
        bound = share(records)
        outcomes += assert_sound(statistic, lambda _, bound=bound: bound, [records], neighbours,
                                 change=privacy_loss(sensitivities(records)),
                                 tolerance=tolerance)
    return outcomes
