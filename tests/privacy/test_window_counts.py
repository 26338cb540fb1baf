"""COUNT in a window, clipped across groups (docs/privacy.md §3.3, "Counts in a window";
proxy/privacy/contribution_bounds.py ``windowed_counts``): which COUNTs take the form is
read from the text and the rules alone; by brute force the composed release (the bound
drawn with a tenth of ε by the private quantile, then every group's count with Laplace
noise on the grid) loses at most ε on every neighbour (NULL keys and units, units of
several rows, rows entering and leaving the window, ties on the rungs, g = 2); and on
the backends the statement's counts are a reference's, and the release shows its noise
and spends ε once."""

from __future__ import annotations

import datetime as dt
import functools
import math
import random
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.contribution_bounds import (
    COUNT_SHARE,
    average_count,
    clipped_divisor,
    count_slot,
    joint_clipped,
    joint_rule,
    joint_sensitivity,
    laddered,
    ladders_alone,
    rung_weights,
    rungs,
    units_clipped,
    windowed_counts,
)
from proxy.privacy.mechanisms import grid_step, grid_steps, laplace_interval, snap
from proxy.pushdown.contributions import contribution_ladders
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from proxy.statistics import Contribution
from tests.factories import Table, engine_fixture
from tests.privacy.harness import Record, assert_sound, neighbours
from tests.privacy.reference import released_joint_ladder_of
from tests.probes import recorded_statistics, refused_for_free, run

DEPARTMENTS = ["a", "b", "c", "d", "e"]
RULES_TEXT = f"""
[defaults]
model = "idp"
epsilon_per_query = 1
budget_per_analyst = 1000

[analysts.zoe]
[analysts.alice]

[tables.v]
privacy_unit = "person"
max_rows_per_unit = 4
[tables.v.columns]
person = {{ type = "int" }}
department = {{ type = "text", keys = {DEPARTMENTS!r} }}
x = {{ type = "float", domain = [0, 10] }}
at = {{ type = "timestamp", domain = [2024-01-01T00:00:00, 2024-12-31T23:59:59] }}

[tables.once]
privacy_unit = "person"
max_rows_per_unit = 1
[tables.once.columns]
person = {{ type = "int" }}
at = {{ type = "timestamp", domain = [2024-01-01T00:00:00, 2024-12-31T23:59:59] }}
""".replace("'", '"')
RULES = parse_rules(RULES_TEXT)
MARCH = "at BETWEEN '2024-03-01' AND '2024-03-31 23:59:59'"
DAY = "date_trunc('day', at)"


def plan_of(sql: str):
    return analyze(parse_statements(sql)[0], RULES, Settings())


@pytest.mark.parametrize("sql,clipped", [
    (f"SELECT {DAY}, COUNT(*) FROM v WHERE {MARCH} GROUP BY 1", True),
    (f"SELECT department, COUNT(x) FROM v WHERE {MARCH} GROUP BY 1", True),
    # distinct people a day (Superset's trendline, Grafana's panel): each once a group
    (f"SELECT {DAY}, COUNT(DISTINCT person) FROM v WHERE {MARCH} GROUP BY 1", True),
    (f"SELECT {DAY}, COUNT(DISTINCT person) FROM v GROUP BY 1", False),
    # half the domain or less: the WHERE's literals against the declared domain
    (f"SELECT {DAY}, COUNT(*) FROM v WHERE at < '2024-07-01' GROUP BY 1", True),
    (f"SELECT {DAY}, COUNT(*) FROM v WHERE at >= '2024-03-01' GROUP BY 1", False),
    (f"SELECT {DAY}, COUNT(*) FROM v WHERE at >= '2024-01-01' GROUP BY 1", False),
    (f"SELECT {DAY}, COUNT(*) FROM v GROUP BY 1", False),
    (f"SELECT {DAY}, COUNT(*) FROM v WHERE x > 5 GROUP BY 1", False),
    # a window under an OR is not every row's: not read
    (f"SELECT {DAY}, COUNT(*) FROM v WHERE {MARCH} OR x > 5 GROUP BY 1", False),
    # two groups or none: §3.3's noise
    (f"SELECT department, COUNT(*) FROM v WHERE {MARCH} AND department IN ('a', 'b') "
     "GROUP BY 1", False),
    (f"SELECT COUNT(*) FROM v WHERE {MARCH}", False),
    # one row a unit at most, by the rules
    (f"SELECT {DAY}, COUNT(*) FROM once WHERE {MARCH} GROUP BY 1", False),
])
def test_the_rule_reads_the_text_and_the_rules(sql, clipped):
    """A grouped COUNT (more than 2 groups) whose WHERE keeps a time column to at most
    half its declared domain is clipped across groups (a COUNT(DISTINCT unit) too); the
    ladders read it and the draw across groups takes it where s > 1 (with s = 1, one
    unit touches at most 2 groups: §3.3's noise)."""
    plan = plan_of(sql)
    assert windowed_counts(plan) is clipped
    counts = [i for i, agg in enumerate(plan.aggregates)
              if agg.kind.name in ("COUNT", "UNITS")]
    assert joint_clipped(plan, 4) == (tuple(counts) if clipped else ())
    assert joint_clipped(plan, 1) == ()
    assert bool(laddered(plan)) is clipped


def test_distinct_units_are_clipped_where_their_own_noise_is_wider():
    """COUNT(DISTINCT unit) in a window is clipped across groups only where its own
    noise, g·min(2s, G)/ε a group, is wider than the clipped form's at the ladder's
    second rung, 2g·B₁/(9ε/10): per day from s = 4 (rungs 1, 2, 4: 7.2 > 4; at s = 2,
    rungs 1, 2: 3.6 < 4); per department (G 5) at s = 4 (4.5 > 4), not at s = 6 (1.5,
    3, 6: 4.5 < 6); never at s = 1 (one rung)."""
    by_day = plan_of(f"SELECT {DAY}, COUNT(DISTINCT person) FROM v WHERE {MARCH} GROUP BY 1")
    by_department = plan_of(f"SELECT department, COUNT(DISTINCT person) FROM v "
                            f"WHERE {MARCH} GROUP BY 1")
    assert [units_clipped(by_day, s) for s in (1, 2, 4, 6)] == [False, False, True, True]
    assert [units_clipped(by_department, s) for s in (1, 2, 4, 6)] == [
        False, False, True, False]
    assert joint_clipped(by_department, 6) == () and joint_clipped(by_department, 4) == (0,)


def test_a_count_after_an_average_is_clipped_in_the_window_too():
    """The COUNT is clipped across groups whatever aggregate comes before it (an AVG
    once reset the rule's flag while ``laddered`` walked the aggregates); the AVG's own
    count is clipped across groups as a COUNT(x) in the window is (its count's noise
    was §3.3's at a quarter of ε: 48 on the demo's 57 visits a day)."""
    plan = plan_of(f"SELECT department, AVG(x), COUNT(*) FROM v WHERE {MARCH} GROUP BY 1")
    assert Contribution("", power=0, fine=True) in laddered(plan)
    assert average_count(plan, plan.aggregates[0]) == Contribution("x", power=0, fine=True)
    assert Contribution("x", power=0, fine=True) in laddered(plan)
    assert joint_clipped(plan, 4) == (0, 1)
    # with s = 1 (at most one row a unit in the data) the AVG is clipped per group and
    # divides by §3.3's count, which needs the statistics pass and spends nothing on a draw
    assert clipped_divisor(plan, 0, joint_clipped(plan, 4)) == Contribution(
        "x", power=0, fine=True)
    alone = plan_of(f"SELECT department, AVG(x) FROM v WHERE {MARCH} GROUP BY 1")
    assert clipped_divisor(alone, 0, joint_clipped(alone, 1)) is None
    assert ladders_alone(alone, 4) and not ladders_alone(alone, 1)


def _reads_of_v(statements: list[tuple[str, int]]) -> list[str]:
    """The statements that read the rows of v (c, the largest unit's rows, aside)."""
    return [text for text, _ in statements
            if (" FROM v" in text or '"v"' in text) and "per_unit" not in text]


def test_an_average_in_the_window_divides_by_a_clipped_count(engine):
    """AVG(x) per week in the window: its sum and its count are read from the ladders
    alone (no statistics pass), the count drawn across groups in its own slot, and the
    note says the count is clipped as the values are summed; the answers lie in the
    domain."""
    sql = ("SELECT date_trunc('week', at), AVG(x) FROM v " + WINDOW.split(" FROM v ")[1])
    shift, groups, keys, statements = recorded_statistics(engine, sql)
    reads = _reads_of_v(statements)
    assert len(reads) == 1, reads
    assert all(count_slot(0) in groups[key].joint for key in keys)
    answer, = run(Session.open(engine, "zoe"), sql)
    assert any("each unit's values counted and clipped as its values are summed" in note
               for note in answer.privacy["notes"]), answer.privacy["notes"]
    assert all(0 <= value <= 10 for _, value in answer.rows)


# -- the composed release, by brute force --------------------------------------------------

GROUPS = 3
C = 3  # rows a unit may own: the ladder 1.5, 3
LADDER = rungs(Contribution("", power=0, fine=True), None, C)  # 1, 1.5, 2, 3
STEP = grid_step(1.0)  # a count's grid (resolution 1)


@functools.cache
def _log_odds(beyond: tuple[int, ...], epsilon: Fraction, group_size: int
              ) -> tuple[float, ...]:
    """log P(rung k) of the engine's draw across groups at the count's share of ε."""
    x = [float(w) for _, w in rung_weights(beyond, epsilon * COUNT_SHARE, group_size,
                                           **joint_rule(GROUPS, COUNT_SHARE))]
    low = min(x)
    total = math.log(sum(math.exp(low - v) for v in x))
    return tuple(low - v - total for v in x)


def released(records: list[Record], group_size: int, epsilons, distinct: bool = False
             ) -> dict:
    """Per rung k: the snapped clipped counts of the groups (grid steps, as
    ``laplace_real`` adds noise to them) and, per ε, the draw's log-probability. A row
    of no group (a NULL key) and a NULL or NaN value (COUNT(col)) count nowhere;
    ``distinct`` (COUNT(DISTINCT unit)): a unit counts once in each group it has rows
    in scope in, the NULL unit nowhere."""
    counted = [r._replace(in_scope=False, group=0) if r.group is None else r
               for r in records]
    if distinct:
        present = {(r.unit, r.group) for r in counted if r.in_scope and r.unit is not None}
        counted = [Record(unit, 1.0, True, group) for unit, group in sorted(present)]
    ladder = released_joint_ladder_of(counted, 0.0, 1.0, LADDER, GROUPS)
    beyond = tuple(ladder[k, "beyond"] for k in range(len(LADDER)))
    out = {}
    for k in range(len(LADDER)):
        out[k, "steps"] = tuple(snap(c, STEP) for c in ladder[k, "clipped"])
        for epsilon in epsilons:
            out[k, epsilon] = _log_odds(beyond, epsilon, group_size)[k]
    return out


def composed_loss(group_size: int, epsilons):
    """Per rung and ε, the loss of one output (k, y): |Δ log P(k)| plus the Laplace
    vector's Σ_g |Δ steps_g|·ε_s/steps_k, steps_k the engine's grid steps for its
    sensitivity (``joint_sensitivity``, ``grid_steps``)."""
    shift = C * group_size
    steps = [grid_steps(joint_sensitivity(bound, group_size, GROUPS, shift, STEP), STEP)
             for bound in LADDER]

    def change(before: dict, after: dict) -> dict:
        out = {}
        for k in range(len(LADDER)):
            moved = sum(abs(a - b) for a, b in zip(after[k, "steps"], before[k, "steps"]))
            for epsilon in epsilons:
                of_sum = float(epsilon * (1 - COUNT_SHARE))
                out[k, epsilon] = (abs(after[k, epsilon] - before[k, epsilon])
                                   + moved * of_sum / steps[k])
                out[k, epsilon, "noise"] = moved * of_sum / steps[k]
                out[k, epsilon, "draw"] = abs(after[k, epsilon] - before[k, epsilon])
        return out
    return change


def _datasets(seed: int, count: int, units: int, rows: int, values) -> list[list[Record]]:
    """Small data sets: 1..units units (one NULL) of 1..rows rows, a row in or out of the
    window, in a group or none (NULL key); ties: units of C rows sit on the top rung."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        records = []
        for unit in [*range(rng.randint(1, units - 1)), None]:
            for _ in range(rng.randint(1, rows)):
                records.append(Record(unit, rng.choice(values), rng.random() < 0.75,
                                      rng.choice([0, 1, 2, None])))
        found.append(records)
    return found


# ε 1, and ε whose draw's share bites on a few units (ε_b = 14g/t: evidence counts t of
# 1 and 2, as the draw's own brute force)
@pytest.mark.parametrize("values,rows,group_size,epsilons,limit,distinct", [
    ((1.0,), 3, 1, (Fraction(1), Fraction(140), Fraction(70)), None, False),  # COUNT(*)
    ((1.0, math.nan), 2, 1, (Fraction(1), Fraction(140)), None, False),  # NaN: none
    ((1.0,), 2, 2, (Fraction(1), Fraction(280)), 150, False),  # g = 2, a sample of pairs
    ((1.0,), 3, 1, (Fraction(1), Fraction(140), Fraction(70)), None, True),  # DISTINCT
    ((1.0,), 2, 2, (Fraction(1), Fraction(280)), 150, True),
])
def test_the_composed_release_loses_at_most_epsilon(values, rows, group_size, epsilons,
                                                     limit, distinct):
    """For every neighbour (all rows of g units, the NULL unit's too, each set to any
    value, in or out of the window, in any group or none), and every rung: the draw's
    log-probability and the noisy vector together move by at most ε (``COUNT_SHARE`` for
    the draw, the rest for the counts; each part within its own); the vector's part
    reaches ε_s up to the grid's allowance (a unit's whole count leaving one group for
    another; COUNT(DISTINCT unit), a unit once a group, 5/6 of it: over three groups a
    unit's two vectors hold at most 1 and 1.5), the draw's by about ε_b/2 where it
    bites."""
    keys = (0, 1, 2, None) if len(values) == 1 else (0, 1, None)  # with NaN: fewer (time)
    options = [(v, s, g) for v in values for s in (True, False) for g in keys]
    rng = random.Random(7)
    data = _datasets(11 + rows + group_size, 4, 4, rows, values)
    if group_size == 1:  # ties: a unit whose C rows all count, on the top rung
        data.append([Record(0, 1.0, True, 0)] * C + [Record(1, 1.0, True, 1)])
    if distinct and group_size == 1:  # two units in every group: beyond the lower rung
        data.append([Record(unit, 1.0, True, group) for unit in (0, 1) for group in range(C)]
                    + [Record(2, 1.0, True, 1)])
    parts = {(): 1, ("noise",): 1 - COUNT_SHARE, ("draw",): COUNT_SHARE}
    bound = {(k, e, *part): float(e * share) for k in range(len(LADDER)) for e in epsilons
             for part, share in parts.items()}
    outcomes = assert_sound(
        lambda records: released(records, group_size, epsilons, distinct),
        lambda records: bound,
        data, lambda records: neighbours(records, options, group_size, limit=limit, rng=rng),
        change=composed_loss(group_size, epsilons), tolerance=1e-9)
    for epsilon in epsilons if limit is None else ():  # reached: over every neighbour
        of_sum = float(epsilon * (1 - COUNT_SHARE))
        noise = max(o.worst[k, epsilon, "noise"] for o in outcomes for k in range(len(LADDER)))
        assert noise >= of_sum * (0.83 if distinct else 0.99), (epsilon, noise)
    # where the draw's share bites (units of 3 rows, beyond 1.5), its log-probabilities
    # move by about ε_b/2 (λg)
    top = max(epsilons)
    assert rows < 3 or max(o.worst[k, top, "draw"] for o in outcomes for k in range(len(LADDER))) >= \
        float(top * COUNT_SHARE) * 0.4


# -- on the backends ------------------------------------------------------------------------

def _visits() -> Table:
    """120 people, 1–4 visits each over 2024 (a few NULL times, NULL people, NULL x;
    departments undeclared or NULL), and rows on the window's two edges."""
    rng = random.Random(3)
    person, department, x, at = [], [], [], []
    for p in range(120):
        for _ in range(rng.randint(1, 4)):
            person.append(p if rng.random() > 0.02 else None)
            department.append(rng.choice([*DEPARTMENTS, "z", None]))  # z: undeclared
            x.append(None if rng.random() < 0.1 else rng.choice([1.0, math.nan, 12.0]))
            at.append(None if rng.random() < 0.03 else
                      dt.datetime(2024, 1, 1) + dt.timedelta(minutes=rng.randrange(366 * 1440)))
    for moment in (dt.datetime(2024, 2, 1), dt.datetime(2024, 6, 1)):  # the edges: in, out
        person += [7, 8]
        department += ["a", "b"]
        x += [1.0, 1.0]
        at += [moment, moment]
    return Table({"person": person, "department": department, "x": x, "at": at},
                 {"person": "INTEGER", "department": "TEXT", "x": "DOUBLE PRECISION",
                  "at": "TIMESTAMP"})


VISITS = _visits()
ONCE = Table({"person": [1], "at": [dt.datetime(2024, 3, 1)]},
             {"person": "INTEGER", "at": "TIMESTAMP"})
engine = engine_fixture(RULES_TEXT, lambda: {"v": VISITS, "once": ONCE}, shared=True)
WINDOW = ("SELECT date_trunc('month', at), COUNT(*), COUNT(x) FROM v "
          "WHERE at >= '2024-02-01' AND at < '2024-06-01' GROUP BY 1")


def _reference(bound: float, counted, by: str, distinct: bool = False) -> tuple[int, dict]:
    """(units whose rows in the window exceed B, per group Σ_u n·min(1, B/T_u)) by hand:
    rows of a NULL time are in no month (nor in the window), of an undeclared or NULL
    department in no group (nor in T_u), NULL people one unit; ``distinct``: n is 1 in
    each group a person has rows in, the NULL person's 0."""
    cells: dict = {}
    for person, department, x, at in zip(*(VISITS.columns[c] for c in
                                           ("person", "department", "x", "at"))):
        if at is None or not dt.datetime(2024, 2, 1) <= at < dt.datetime(2024, 6, 1) \
                or not counted(x):
            continue
        day = dt.datetime(at.year, at.month, at.day)
        key = {"month": dt.datetime(at.year, at.month, 1),
               "week": day - dt.timedelta(days=at.weekday())}.get(by, department)
        if (key in DEPARTMENTS or by != "department") and not (distinct and person is None):
            cells[key, person] = 1 if distinct else cells.get((key, person), 0) + 1
    totals: dict = {}
    for (_, person), n in cells.items():
        totals[person] = totals.get(person, 0) + n
    groups: dict = {}
    for (key, person), n in cells.items():
        groups[key] = groups.get(key, 0.0) + n * min(1.0, bound / totals[person])
    return sum(1 for t in totals.values() if t > bound), groups


@pytest.mark.parametrize("by,term,distinct", [
    ("month", "date_trunc('month', at)", False), ("department", "department", False),
    # distinct people: over more groups than one unit's 2s records reach (``units_clipped``)
    ("week", "date_trunc('week', at)", True), ("department", "department", True)])
def test_the_statement_counts_each_units_rows_scaled_to_its_total(engine, by, term,
                                                                   distinct):
    """COUNT(*) and COUNT(x) per month, or per department, over four months of twelve
    (or COUNT(DISTINCT person): each person once a group, the NULL person nowhere):
    every rung's units beyond (each counted once, over the groups) and each group's
    clipped count are the reference's."""
    session = Session.open(engine, "zoe")
    sql = WINDOW.replace("date_trunc('month', at)", term)
    if distinct:
        sql = sql.replace("COUNT(*), COUNT(x)", "COUNT(DISTINCT person)")
    (_, plan), = session.check(sql)
    wanted = ((Contribution("", power=0, units=True, fine=True),) if distinct else
              (Contribution("", power=0, fine=True), Contribution("x", power=0, fine=True)))
    assert laddered(plan) == wanted and joint_clipped(plan, 4) == tuple(range(len(wanted)))
    ladder = rungs(wanted[0], None, 4)
    with engine.view(plan) as view:
        groups = contribution_ladders(plan, wanted, (ladder,) * len(wanted),
                                      engine.backend.capabilities, None, view.tx.execute,
                                      frozenset(wanted))
    for contribution, counted in zip(wanted, (lambda x: True,
                                              lambda x: x is not None and not math.isnan(x))):
        for k, bound in enumerate(ladder):
            beyond, expected = _reference(bound, counted, by, distinct)
            assert sum(found[contribution].beyond[k] for found in groups.values()) == beyond
            for key, count in expected.items():
                assert groups[key,][contribution].clipped[k] == pytest.approx(
                    count, abs=1e-6 * 500), (contribution, k, key)


@pytest.mark.parametrize("aggregate,note", [
    ("COUNT(*)", "COUNT: each unit's rows in scope, counted over all groups"),
    ("COUNT(DISTINCT person)", "COUNT(DISTINCT unit): each unit once in each group it has "
                               "rows in, counted over all groups"),
])
def test_counts_clipped_across_groups_read_their_ladders_alone(engine, aggregate, note):
    """COUNT per week in the window, clipped across groups, is answered from its
    ladders: the one statement that reads the rows is the ladders' (TPC-H Q04 sent a
    second, the plain counts per priority, which nothing read); so are distinct people
    a week (Superset's trendline, Grafana's daily patients), each once in each week,
    which said so and spent ε once."""
    sql = (f"SELECT date_trunc('week', at), {aggregate} FROM v "
           + WINDOW.split(" FROM v ")[1])
    shift, groups, keys, statements = recorded_statistics(engine, sql)
    assert shift > 1  # one unit may touch more than two months: clipped across them
    reads = _reads_of_v(statements)
    assert len(reads) == 1 and " j0" in reads[0], reads
    assert all(groups[key].ladders for key in groups) and len(keys) == 18  # Monday weeks
    answer, = run(Session.open(engine, "zoe"), sql)
    assert len(answer.rows) == 18 and all(isinstance(n, int) and n >= 0
                                         for _, n in answer.rows)
    assert answer.privacy["epsilon_spent"] == 1.0
    assert any(note in line for line in answer.privacy["notes"]), answer.privacy["notes"]


def test_counts_released_together_draw_what_each_month_alone_draws(engine):
    """The windowed COUNTs per month, each group's noise worked out once per release
    (``release_groups``): the same answers from the same bits as group by group."""
    from tests.privacy.laws import released_both_ways

    (_, plan), = Session.open(engine, "zoe").check(WINDOW)
    together, apart = released_both_ways(engine, plan, 5)
    assert together == apart and len(together) == 4  # the window's four months


def test_the_release_shows_its_noise_and_spends_epsilon_once(engine):
    """Each month's 95 % bound is the Laplace interval of one rung's calibration (not
    §3.3's min(2, G)·s/ε's), the same in every month; each COUNT spends ε once and says
    its counts are clipped; counts are integers ≥ 0. A refused one spends nothing."""
    session = Session.open(engine, "zoe")
    before = engine.ledger.remaining("zoe")
    answer, = run(session, WINDOW)
    assert answer.privacy["epsilon_spent"] == 2.0  # two COUNTs, ε 1 each
    assert engine.ledger.remaining("zoe") == before - 2
    assert "its bound by the exponential mechanism" in answer.privacy["mechanism"]
    assert any("scaled to a total of at most a bound" in note
               for note in answer.privacy["notes"])
    # c is the data's (iDP): each rung of each ladder c, c/2, … the engine could use
    widths = {laplace_interval(joint_sensitivity(bound, 1, 4, c, grid_step(1.0)),
                               Fraction(9, 10), grid_step(1.0))
              for c in range(1, 12)
              for bound in rungs(Contribution("", power=0, fine=True), None, c)}
    for shown in answer.privacy["ci95"].values():
        assert len(set(shown)) == 1 and any(shown[0] == pytest.approx(w) for w in widths), \
            shown
        # (not asserted below §3.3's width: a draw at the top rung, B = c, is wider; a
        # clean-clone run drew it)
    assert all(isinstance(n, int) and n >= 0 for row in answer.rows for n in row[1:])
    refused = WINDOW.replace("month", "minute")
    refused_for_free(engine, refused, "0A000", "more than the rules' max_groups")
