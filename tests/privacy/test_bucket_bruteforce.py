"""Brute-force neighbours for GROUP BY buckets (issue 16): a record's bucket is computed
from its own value, so modifying it can move it from one bucket to another, into no
bucket (NULL, NaN) or out of the declared domain (clamped into the first or last
bucket). For small data sets with ties, domain bounds, NULL, NaN and ±inf, every
neighbour is built and each group's answer compared with the sensitivity the release
uses for it: counts move by at most s per group and min(2, G)·s over all groups (the
share of ε each group's noise gets), and per-group medians keep the total privacy loss
within groups_touched(s, G)."""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.privacy.sensitivity import (
    count_sensitivity,
    groups_touched,
    local_sensitivity_of_percentile,
    percentile_refs,
)
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import clamp_to_domain
from tests.factories import random_datasets, rows_of
from tests.privacy.buckets import bucket_of
from tests.privacy.harness import (
    Record,
    assert_loss_within,
    assert_sound,
    histogram,
    neighbours,
)
from tests.privacy.reference import contribution_bound, order_values, percentile

INF, NAN = float("inf"), float("nan")
NUMBERS = [None, NAN, INF, -INF, -7.0, 0.0, 1.9, 2.0, 4.0, 5.5, 8.0, 10.0, 25.0]
INTEGERS = [None, -20, -6, -5, -4, 0, 3, 4, 7, 10, 99]
MOMENTS = [None, dt.datetime.min, dt.datetime.max, dt.datetime(2023, 12, 31, 23, 59),
           dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 31, 23, 59, 59),
           dt.datetime(2024, 2, 1), dt.datetime(2024, 2, 14, 12), dt.datetime(2024, 3, 31, 23, 59,
                                                                               59),
           dt.datetime(2025, 6, 1)]
DATES = [None, dt.date.min, dt.date.max, dt.date(2023, 12, 31), dt.date(2024, 1, 1),
         dt.date(2024, 1, 7), dt.date(2024, 1, 8), dt.date(2024, 3, 31), dt.date(2025, 1, 1)]
MEASURES = [NAN, 0.0, 3.0, 10.0]  # the median's column, domain [0, 10]
LOWER, UPPER = 0.0, 10.0

RULES = parse_rules("""
[tables.t]
privacy_unit = "u"
[tables.t.columns]
u = { type = "int" }
x = { type = "float", domain = [0, 10] }
i = { type = "int", domain = [-6, 10] }
at = { type = "timestamp", domain = [2024-01-01T00:00:00, 2024-03-31T23:59:59] }
d = { type = "date", domain = ["2024-01-01", "2024-03-31"] }
m = { type = "float", domain = [0, 10] }
""")
TERMS = [  # (GROUP BY term, its column, the raw values records and neighbours take)
    ("floor(x / 2) * 2", "x", NUMBERS),
    ("width_bucket(x, 2, 8, 3)", "x", NUMBERS),
    ("i / 4 * 4", "i", INTEGERS),
    ("date_trunc('month', at)", "at", MOMENTS),
    ("extract(dow FROM at)", "at", MOMENTS),
    ("floor(extract(epoch FROM at) / 604800) * 604800", "at", MOMENTS),  # Grafana's bins
    ("floor(extract(epoch FROM at) / 86400)", "at", MOMENTS),
    ("floor(extract(epoch FROM d) / 259200) * 259200", "d", DATES),
]
SETTINGS = [(4, 1, 1), (3, 2, 1), (3, 1, 2)]  # (units, rows per unit, group size)


def _term(sql: str):
    plan = analyze(parse_statements(f"SELECT {sql}, COUNT(*) FROM t GROUP BY 1")[0], RULES,
                   Settings())
    (term,) = plan.group_by
    return term


def _datasets(seed: int, count: int, units: int, rows: int, values):
    """0..units units of 1..rows records: a measure, in scope or not, and the raw value
    of the bucketed column (in ``Record.group``)."""
    def record(rng, unit):
        return Record(unit, rng.choice(MEASURES), rng.random() < 0.8, rng.choice(values))
    return random_datasets(seed, count, rows_of(record, (1, rows)), units=(0, units))


def _buckets(records, term, column):
    """Record → its group key (the raw value is in ``Record.group``), None: no group."""
    return [bucket_of(term, column, r.group) for r in records]


def _counts(records, term, column):
    """In-scope rows per listed key (one pass: a fine grain lists 91 keys)."""
    counts = dict.fromkeys(term.keys, 0)
    for record, key in zip(records, _buckets(records, term, column)):
        if record.in_scope and key in counts:
            counts[key] += 1
    return counts


def _medians(records, term, column):
    """The sorted in-scope values per listed key, for the keys that have any."""
    values: dict = {}
    for record, key in zip(records, _buckets(records, term, column)):
        value = clamp_to_domain(record.value, LOWER, UPPER)
        if key is not None and record.in_scope and value is not None:
            values.setdefault(key, []).append(value)
    return {k: sorted(v) for k, v in values.items()}


@pytest.mark.parametrize("sql,name,values", TERMS)
def test_every_raw_value_lands_in_a_listed_key(sql, name, values):
    """The key set (from the rules) holds every bucket any value can reach: no key is
    ever derived from the data."""
    term, column = _term(sql), RULES.tables["t"].columns[name]
    reached = {bucket_of(term, column, v) for v in values} - {None}
    assert reached <= set(term.keys)
    assert bucket_of(term, column, None) is None


@pytest.mark.parametrize("sql,name,values", TERMS)
@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
def test_bucketed_counts_move_within_the_sensitivity_used(sql, name, values, units, rows,
                                                         group_size):
    """Each group's count moves by at most s (the noise each gets), all of them by at
    most min(2, G)·s (the ε split over the groups); a record moving between two buckets
    reaches that bound."""
    term, column = _term(sql), RULES.tables["t"].columns[name]
    groups = len(term.keys)
    options = [(m, s, v) for v in values for m in (0.0,) for s in (True, False)]

    def bounds(records):
        shift = contribution_bound(records) * group_size
        return {"each group": count_sensitivity(shift), "all groups": min(2, groups) * shift}

    outcomes = assert_sound(lambda rs: _counts(rs, term, column), bounds,
                            _datasets(31, 40, units, rows, values),
                            lambda records: neighbours(records, options, group_size),
                            change=histogram)
    assert any(o.worst["all groups"] == o.bound["all groups"] for o in outcomes)


@pytest.mark.parametrize("sql,name,values", TERMS)
@pytest.mark.parametrize("units,rows,group_size", SETTINGS)
def test_bucketed_medians_keep_the_privacy_loss(sql, name, values, units, rows, group_size):
    """Per-group noise scaled by groups_touched(s, G)·LS_g: Σ_g |Δ_g| / LS_g stays within
    groups_touched(s, G) for every neighbour, as for declared keys."""
    term, column = _term(sql), RULES.tables["t"].columns[name]
    fraction = Fraction(1, 2)
    options = [(m, s, v) for v in values[::2] + values[-1:] for m in MEASURES
               for s in (True,)]

    empty = percentile([], fraction, LOWER, UPPER)  # the domain's midpoint

    def medians(records):  # a key without values in scope answers ``empty``
        return defaultdict(lambda: empty, {
            key: percentile(values, fraction, LOWER, UPPER)
            for key, values in _medians(records, term, column).items()})

    def ls(records):
        shift, held, out = contribution_bound(records) * group_size, _medians(
            records, term, column), {}
        for key in term.keys:
            sorted_values = held.get(key, [])
            stats = order_values(sorted_values, percentile_refs(fraction, shift))
            out[key] = local_sensitivity_of_percentile(len(sorted_values), stats, fraction,
                                                       shift, LOWER, UPPER)[1]
        return out

    assert_loss_within(medians, ls,
                       lambda rs: groups_touched(contribution_bound(rs) * group_size,
                                                 len(term.keys)),
                       _datasets(32, 25, units, rows, values),
                       lambda records: neighbours(records, options, group_size))


ZONES = ["", "Z", "+00:00", "+02:00", "-05:30"]


def _literal(moment: dt.datetime, zone: str) -> tuple[str, dt.datetime]:
    """``moment`` written with ``zone`` (as a client may), and the timestamp it names
    where PostgreSQL reads the text as one: the zone dropped."""
    if not zone or moment in (dt.datetime.min, dt.datetime.max):
        return moment.isoformat(" "), moment
    return f"{moment.isoformat('T')}{zone}", moment


@pytest.mark.parametrize("term_sql", ["date_trunc('day', at)", "date_trunc('month', at)",
                                      "date_trunc('hour', at)",
                                      "floor(extract(epoch FROM at) / 86400) * 86400",
                                      "floor(extract(epoch FROM at) / 3600)",
                                      "floor(extract(epoch FROM d) / 3600) * 3600",
                                      "date_trunc('hour', d)"])
def test_every_value_a_where_range_admits_lands_in_a_listed_key(term_sql):
    """Time buckets are listed only within the WHERE's literal range (narrowed by the text,
    never the data; a literal's time zone dropped); every raw value the range
    admits still lands in a listed bucket, those beyond the domain too (clamped into its
    first or last). A date column is compared, as the engines do, with the moment's date."""
    rng = random.Random(33)
    name = "d" if "d)" in term_sql else "at"
    column = RULES.tables["t"].columns[name]
    moments = [m for m in MOMENTS if m is not None] + [
        dt.datetime(2024, 1, 1) + dt.timedelta(minutes=rng.randrange(200_000)) for _ in range(60)]
    values = moments if name == "at" else [
        d for d in DATES if d is not None] + [m.date() for m in moments[3:]]
    for _ in range(60):
        low, high = sorted(rng.sample(moments[1:], 2))
        (low_text, low), (high_text, high) = (_literal(m, rng.choice(ZONES))
                                              for m in (low, high))
        low_op, high_op = rng.choice([">", ">="]), rng.choice(["<", "<="])
        sql = (f"SELECT {term_sql}, COUNT(*) FROM t WHERE {name} {low_op} '{low_text}' AND "
               f"{name} {high_op} '{high_text}' GROUP BY 1")
        plan = analyze(parse_statements(sql)[0], RULES, Settings())
        (term,) = plan.group_by
        if name == "d":
            low, high = low.date(), high.date()
        admitted = [v for v in values if (v > low if low_op == ">" else v >= low)
                    and (v < high if high_op == "<" else v <= high)]
        assert {bucket_of(term, column, v) for v in admitted} <= set(term.keys)
