"""GROUP BY over the unit's own attributes composes in parallel (issue 32 item 5;
docs/privacy.md §3.5): a column declared ``unit_attribute`` is the same on all of a
unit's rows and kept by neighbours, so one unit's change touches its one group, and
each group gets the aggregate's whole ε instead of 1/min(2, G) (counts) or
1/min(2s, G) (the rest)."""

from __future__ import annotations

import pytest

from proxy.errors import RulesError
from proxy.rules import parse_rules
from proxy.session import Session
from tests.factories import Table, engine_fixture, open_engine, people
from tests.privacy.harness import VALUES, Record, assert_sound, datasets, neighbours
from tests.privacy.reference import normalise
from tests.probes import run

RULES = """
[defaults]
epsilon_per_query = 1
budget_per_analyst = 1000

[analysts.zoe]
""" + "".join(f"""
[tables.{name}]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.{name}.columns]
person_id = {{ type = "int" }}
age    = {{ type = "int", domain = [0, 120] }}
region = {{ type = "text", keys = ["north", "south", "east", "west"]{attribute} }}
""" for name, attribute in (("fixed", ", unit_attribute = true"), ("moving", "")))

engine = engine_fixture(RULES, {"fixed": people(400), "moving": people(400)}, shared=True)


def _bounds(engine, sql: str) -> list:
    answer, = run(Session.open(engine, "zoe"), sql)
    return [bound for bounds in answer.privacy["ci95"].values() for bound in bounds]


def test_each_group_of_a_unit_attribute_gets_the_whole_epsilon(engine):
    """The grouped COUNT's 95 % bounds equal the ungrouped one's under unit_attribute
    (the whole ε in each group), and are twice as wide without it (ε/2)."""
    once = _bounds(engine, "SELECT COUNT(*) FROM fixed WHERE age > 30")[0]
    for table, share in (("fixed", 1), ("moving", 2)):
        bounds = _bounds(engine, f"SELECT region, COUNT(*) FROM {table} WHERE age > 30 "
                                 "GROUP BY region")
        assert len(bounds) == 4 and all(b == pytest.approx(share * once, rel=0.05)
                                        for b in bounds), (table, bounds, once)


def test_a_unit_attribute_that_varies_within_a_unit_stops_the_start(backend_url):
    """Declared on a column whose rows of one unit differ, the proxy does not start:
    the message names the column and the count of such units."""
    visits = Table({"person_id": [1, 1, 2], "region": ["north", "south", "east"]},
                   {"person_id": "INTEGER", "region": "TEXT"})
    rules = """
[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = { type = "int" }
region = { type = "text", keys = ["north", "south", "east"], unit_attribute = true }
"""
    with pytest.raises(RulesError) as refused:
        with open_engine(backend_url, rules, {"visits": visits}):
            pass
    assert "unit_attribute" in str(refused.value) and "1 unit(s)" in str(refused.value)


def test_the_rules_refuse_a_unit_attribute_without_a_unit():
    with pytest.raises(RulesError) as refused:
        parse_rules('[tables.t]\n[tables.t.columns]\nx = { type = "text", keys = ["a"], '
                    'unit_attribute = true }\n')
    assert "unit_attribute" in str(refused.value)


def _histogram(records: list[Record]) -> dict:
    counts = {group: 0 for group in range(3)}
    for record in records:
        if record.in_scope and normalise(record.value, 0.0, 10.0) is not None:
            counts[record.group] += 1
    return counts


@pytest.mark.parametrize("rows", [1, 2])
def test_a_neighbour_moves_one_groups_count_by_at_most_s(rows):
    """Brute force: each unit's records in one group (its attribute), neighbours that
    modify every record of a unit (values, NaN, ±inf, in or out of scope) but keep the
    attribute: the counts' L1 change over all groups is at most s = rows per unit, so
    each cell's noise of scale s gives the whole histogram ε (not 2s: no record changes
    group)."""
    def own_group(records):
        return [record._replace(group=(record.unit or 0) % 3) for record in records]

    data = [own_group(records) for records in datasets(5, 30, 4, rows, 3)]
    keep_group = lambda record: [(v, s, record.group) for v in VALUES for s in (True, False)]
    outcomes = assert_sound(_histogram, lambda records: {"all groups": rows}, data,
                            lambda records: neighbours(records, keep_group),
                            change=lambda before, after: {"all groups": sum(
                                abs(after[g] - before[g]) for g in before)})
    assert max(outcome.worst["all groups"] for outcome in outcomes) == rows  # reached
