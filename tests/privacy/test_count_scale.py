"""A count's noise under iDP's global scale (the default) is calibrated to the shift
s = c·g as is, not rounded up to a power of two (docs/privacy.md §2, "Rounding"; §3.3):
c, the most rows one unit owns, is the same on a data set and every neighbour (units
keep their rows, §1), so the scale is public, and rounding it (6 rows a person made 8 on
the demo's visits) only added noise. Raw iDP (``noise_scale = "local"``) keeps the
rounding.

The brute-force test reads the engine's own calibration (``noisy_answers._part`` and
``_integer_scale`` on the analyser's plan) and checks, for every neighbour of small data
sets with units of up to 3 or 5 rows (c not a power of two), g = 1 and 2, records
leaving the WHERE and moving between groups: the scale is the same on D and D′, and the
histogram's privacy loss Σ_k |Δ_k|·ε_k/scale is at most ε — reached, so no noise is
left over. The engine tests read the 95 % bound the client sees."""

from __future__ import annotations

from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.mechanisms import discrete_laplace_interval
from proxy.privacy.noisy_answers import Calibration, _integer_scale, _part
from proxy.privacy.sensitivity import count_sensitivity
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from tests.factories import Table, engine_fixture
from tests.privacy.harness import Record, assert_sound, datasets, modifying
from tests.privacy.reference import contribution_bound
from tests.probes import run

EPSILON = 1


def _rules(extra: str = "") -> str:
    return f"""
[defaults]
epsilon_per_query = {EPSILON}
budget_per_analyst = 1000
{extra}
[analysts.zoe]

[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = {{ type = "int" }}
days = {{ type = "int", domain = [0, 30] }}
ward = {{ type = "text", keys = ["a", "b", "c"] }}
"""


WHERE = "SELECT COUNT(*) FROM visits WHERE days >= 1"
GROUPED = "SELECT ward, COUNT(*) FROM visits WHERE days >= 1 GROUP BY ward"
TWO_WARDS = "SELECT ward, COUNT(*) FROM visits WHERE ward IN ('a', 'b') GROUP BY ward"


def _plan(sql: str):
    return analyze(parse_statements(sql)[0], parse_rules(_rules()), Settings())


# (statement, answered groups, rows per unit at most, group size): c = 3 and 5, s = 3,
# 5 and 6; a record's group index ``groups`` is a ward the statement does not answer
# (a NULL ward, or 'c' outside the IN list)
CASES = [(WHERE, 1, 3, 1), (WHERE, 1, 5, 1), (WHERE, 1, 3, 2),
         (GROUPED, 3, 3, 1), (TWO_WARDS, 2, 3, 1), (TWO_WARDS, 2, 3, 2)]


def _full_units(rows: int, groups: int, group_size: int) -> list[list[Record]]:
    """Data sets where the loss can reach ε: g units of c rows in scope (in one group,
    or spread over the answered ones), beside a unit of one row out of scope and one
    in a group not answered."""
    spread = [[Record(u, 1.0, True, (u + i) % groups) for i in range(rows)]
              for u in range(group_size)]
    alone = [[Record(u, 1.0, True, 0) for _ in range(rows)] for u in range(group_size)]
    others = [Record(group_size, 1.0, False, 0), Record(group_size + 1, 1.0, True, groups)]
    return [sum(spread, []) + others, sum(alone, []) + others]


@pytest.mark.parametrize("sql,groups,rows,group_size", CASES)
def test_an_idp_count_at_the_shift_as_is_loses_at_most_epsilon(sql, groups, rows, group_size):
    plan = _plan(sql)
    agg = plan.aggregates[0]
    assert (len(plan.group_keys()) if plan.group_by else 1) == groups
    grouped = plan.group_by != ()
    calibrations: dict[int, tuple] = {}

    def calibrated(records) -> tuple:
        """The engine's scale and ε part of each group's count on these records."""
        shift = contribution_bound(records) * group_size
        if shift not in calibrations:
            cal = Calibration("idp", shift)
            calibrations[shift] = (_integer_scale(count_sensitivity(shift), cal),
                                   _part(plan, agg, cal).epsilon)
        return calibrations[shift]

    def released(records):
        """The calibration and each answered group's count (records in scope)."""
        counts = dict.fromkeys(range(groups), 0)
        for record in records:
            if record.in_scope and (not grouped or record.group < groups):
                counts[record.group if grouped else 0] += 1
        return calibrated(records), counts

    def loss(before, after):
        """The privacy loss of the histogram's discrete Laplace noise, in units of ε."""
        (scale, part), counts = before
        assert after[0] == before[0], f"the calibration moved: {before[0]} -> {after[0]}"
        return sum(abs(after[1][k] - counts[k]) for k in counts) * part / scale

    def reachable(records) -> bool:
        """g units of c rows each, all in scope and, grouped, all in one answered group:
        moved out of the scope (ungrouped) or into another answered group, the counts
        move by g·c (ungrouped) or 2·g·c in L1, and the loss is ε."""
        c = contribution_bound(records)
        for group in range(groups):
            full = [u for u in {r.unit for r in records}
                    if sum(r.unit == u for r in records) == c
                    and all(r.in_scope and (not grouped or r.group == group)
                            for r in records if r.unit == u)]
            if len(full) >= group_size:
                return True
        return False

    outcomes = assert_sound(
        released, lambda _: EPSILON,
        [*_full_units(rows, groups, group_size), *datasets(31 + rows, 10, 3, rows, groups + 1)],
        modifying(values=[1.0], group_size=group_size, groups=groups + 1),
        change=loss, tight=reachable)
    # calibrated to s as is (not a power of two) on a data set where the loss reached ε
    assert any(reachable(o.records) and calibrated(o.records)[0] not in (1, 2, 4, 8)
               for o in outcomes)


def _visits() -> Table:
    """Units of 1 to 3 visits (c = 3), 2 in 3 of them at least one day."""
    person, days, ward = [], [], []
    for unit in range(1, 301):
        for visit in range(1 + unit % 3):
            person.append(unit)
            days.append((unit + visit) % 3)
            ward.append("abc"[(unit + 2 * visit) % 3])
    return Table({"person_id": person, "days": days, "ward": ward},
                 {"person_id": "INTEGER", "days": "INTEGER", "ward": "TEXT"})


engine = engine_fixture(_rules(), {"visits": _visits()}, shared=True)
local = engine_fixture(_rules('noise_scale = "local"\nreport_scale = "rounded"'),
                       {"visits": _visits()}, name="local")  # its own database


def _bounds(engine, sql: str) -> list[float]:
    answer, = run(Session.open(engine, "zoe"), sql)
    return [bound for bounds in answer.privacy["ci95"].values() for bound in bounds]


def test_the_count_bound_is_that_of_the_shift_as_is(engine):
    """c = 3: the 95 % bound of discrete Laplace at scale 3/ε ungrouped, 2·3/ε per ward
    (the histogram's ε over min(2, G) = 2 cells), not 4/ε and 8/ε."""
    assert _bounds(engine, WHERE) == [float(discrete_laplace_interval(Fraction(3), 0.95))]
    assert _bounds(engine, GROUPED) == [float(discrete_laplace_interval(Fraction(6), 0.95))] * 3


def test_raw_idp_keeps_its_count_rounded(local):
    """Under raw iDP (the owner's opt-in) the count's scale is still rounded up: 4."""
    assert _bounds(local, WHERE) == [float(discrete_laplace_interval(Fraction(4), 0.95))]
