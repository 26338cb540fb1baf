"""Every everyday aggregate on the demo data, idp-proxy against the peers (issue 32 item
7). A benchmark: it measures error, it asserts nothing. Run through ``utility.py``:

    python benchmarks/utility.py demo [--quick] [--releases 20] [--epsilon 0.1,1]
                                      [--aggregates count,sum,...] [--scopes whole,...]
                                      [--tables people,visits] [--peers none] [--out DIR]
                                      [--guarantee substitution|peers-native|both]

Cells: aggregate (COUNT, SUM, AVG, STDDEV, MEDIAN, p90 = percentile_disc(0.9), MAX, MIN,
COUNT(DISTINCT person_id)) × table (``people``: row-level, one row per person, over
``income``; ``visits``: user-level, up to 6 rows per person, over ``cost``) × scope
(the whole table; a WHERE; GROUP BY about 5 keys; GROUP BY about 50 keys) × ε. The
groupings are public buckets the demo rules already allow (rules/README.md, "Buckets"):

- people: ``WHERE age > 60``; 5 keys ``width_bucket(age, 30, 60, 3)`` (under 30, three
  decades, 60 and over); 50 keys ``width_bucket(age, 20, 68, 48)`` (one year each, with
  under 20 and 68 and over).
- visits: ``WHERE days >= 1``; 5 keys ``department``; 53 keys
  ``extract(week FROM visited_at)``.
- census (seed 002's CASC census, examples/data/census_casc.csv: 1,080 real people, one
  row each, over ``ptotval``, total person income, declared [0, 10⁷] like the demo's
  incomes; expert bound 10⁶): ``WHERE agi > 60000``; 5 keys
  ``width_bucket(afnlwgt, 100000, 400000, 3)``; 50 keys
  ``width_bucket(afnlwgt, 20000, 500000, 48)`` (bands of the survey weight). Its rules
  are appended to the benchmark's copy of the demo rules (``CENSUS_RULES``).

Data: the demo's own tables (``proxy.demo.create_demo``, deterministic) and the census
table in a temporary DuckDB file. True answers: the same SQL run by DuckDB directly (width_bucket, which
DuckDB lacks, written as the equivalent CASE).

Systems, each asked for ``--releases`` fresh answers per cell (default 20):

- idp-proxy: the demo rules (its default model, iDP with its private noise scale: every
  answer ε-DP) with the answer cache off and a large budget, through ``proxy.session``
  in process: each answer is a full fresh query (statistics, noise, ledger debit).
- OpenDP (its Polars context API), SmartNoise SQL (``snsql.from_df`` over a pandas frame
  of the same rows) and PipelineDP (``LocalBackend``), pure ε-DP, unbounded neighbours
  (one person added or removed; their ε per cell: "The guarantee" below), each given
  what a careful user would give it: the
  declared domains of rules/demo.toml (income [0, 10⁷], cost [0, 10⁵]) and the
  contribution bounds (people and census: 1 row per person; visits: 6 rows per person,
  at most 5 departments or 6 weeks per person), the group keys as public. Then the same
  peers again with "expert bounds" (income ≤ 10⁶, cost per visit ≤ 10⁴): columns
  marked *.
  The peers' grouping and WHERE columns are computed from the same DuckDB rows.

The guarantee (``--guarantee``). idp-proxy's answers are ε-DP for *substitution*
neighbours: one person's records are modified (docs/privacy.md §1: the person keeps
their number of rows and their id; values, WHERE columns and group keys change). The
peers calibrate for *add or remove one person*. A substitution is a removal and an
addition, so a peer at ε is always 2ε-DP under substitution, but how much of that
factor a cell really costs depends on the peer's calibration, so it is derived per peer,
aggregate and scope from each peer's own code (OpenDP 0.14.2's ``summarize()`` scales
and quantile scorer, PipelineDP 0.3.1's ``dp_computations``, SmartNoise 1.0.10's
mechanisms and ``get_privacy_cost``). ρ below is the worst privacy loss, over ε, of the
peer's release at ε under substitution; with ``--guarantee substitution`` (the default)
the peer runs at ε / max(1, ρ), which is ε-DP under substitution; ``peers-native`` runs
it at ε (its own guarantee, the behaviour before this option); ``both`` measures both
views in one run and reuses a draw where the two ε agree. k is the peers' row bound per
person (1 on people and census, 6 on visits), l0 the groups one person may touch (1;
visits: 5 departments, 6 weeks), G the number of keys.

- Ungrouped SUM, COUNT (idp-proxy's whole-table COUNT is exact: the count cannot move)
  and OpenDP's and PipelineDP's AVG: ρ ≤ 1. A substitution changes a bounded value
  within [0, U] (|x′ − x| ≤ U, the same as adding or removing x ≤ U) and a WHERE count
  by at most k, as adding or removing does. AVG's count, at ε/2 in both, does not move
  when the value changes within scope and moves only with the value's part when a row
  enters or leaves, so the two halves never both pay twice. PipelineDP's VARIANCE
  (count, Σ(x − m), Σ(x − m)² at ε/3 each, the squares calibrated to U²/2 but never
  moving more than U²/4) has ρ = 5/6.
- Grouped (a person's rows can change group): an L1 quantity calibrated to k moves
  2k. OpenDP calibrates every grouped count, sum and n_unique to its total row bound k,
  so ρ = 2 for COUNT, SUM, AVG; its n_unique per group moves by |A Δ B| ≤ 2·min(k, l0)
  (A, B: the person's groups before and after): ρ = 2 on people and per week, 10/6 per
  department. PipelineDP calibrates to l0·k (rows per partition times partitions), so
  ρ = 2/l0: 2 on people and census, 0.4 per department and 1/3 per week on visits (its
  release at ε is already ε-DP there: the contribution bounds it can be told are looser
  than "6 rows in all"); its PRIVACY_ID_COUNT (calibrated to l0) has ρ = 2·min(k, l0)/l0
  = 2; VARIANCE 5/(3·l0) (5/3 on people). SmartNoise calibrates to k: ρ = 2.
- SmartNoise's AVG is SUM and COUNT each at the full ε (its ``get_privacy_cost`` says
  2ε; STDDEV 3ε: SUM(v²), SUM(v), COUNT): ρ = 1 over a whole table (the count does not
  move), 2 with a WHERE, 4 grouped (STDDEV 2, 3, 6). So its native AVG is not ε-DP
  even under add/remove; the native view keeps it as it was measured.
- Percentiles. OpenDP's exponential mechanism scores a candidate by
  |α_den·#(x < c) − α_num·(n − #(x = c))| and is calibrated to the score's range under
  one added or removed row, 2·max(α, 1 − α)·α_den; a value moving across the candidates
  moves it by α_den, both ways (range 2·α_den): ρ = 1/max(α, 1 − α), 2 for the MEDIAN,
  1/0.9 for p90, 1/2 for MAX and MIN (α = 1 or 0: the score only grows) — checked by
  enumerating neighbours of small data sets against OpenDP's scorer. Grouped, OpenDP
  gives each group ε/l0′ (l0′ = l0, or G when only the row bound 1 is given) for k rows:
  ρ = 2/l0′ (MAX, MIN 1/l0′) ≤ 0.4. PipelineDP's quantile tree counts each row once per
  level (calibrated to l0·k per level); a changed value is −1 in one node and +1 in
  another: ρ = 2 ungrouped and on people, 2/l0 ≤ 0.4 per department or week.
  SmartNoise answers none.

Error: each released value's relative error |answer − true| / |true|; a group missing
from an answer, or answered with NULL, counts as 100 %; groups whose true value is 0 or
NULL (none on the demo) are skipped. A cell's number is the median over all its
releases and groups. ``—`` marks a system that cannot answer the cell; the footnote
says why (its error message, shortened).

Writes ``demo.csv`` (every cell and system, as the run goes; a peer's row names its
guarantee and the ε it ran with), ``demo.md`` (the tables of each guarantee measured,
and the cells where idp-proxy is best under each, side by side) and, if
matplotlib imports, ``demo_<aggregate>.png`` into ``--out`` (default
benchmarks/utility), and prints the tables.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AGGREGATES = ["count", "sum", "avg", "stddev", "median", "p90", "max", "min",
              "count_distinct"]
LABELS = {"count": "COUNT(*)", "sum": "SUM", "avg": "AVG", "stddev": "STDDEV",
          "median": "MEDIAN", "p90": "p90 (percentile_disc 0.9)", "max": "MAX",
          "min": "MIN", "count_distinct": "COUNT(DISTINCT person_id)"}
SCOPES = ["whole", "where", "group5", "group50"]


def aggregate_sql(aggregate: str, column: str) -> str:
    return {"count": "COUNT(*)", "sum": f"SUM({column})", "avg": f"AVG({column})",
            "stddev": f"STDDEV({column})", "median": f"MEDIAN({column})",
            "p90": f"percentile_disc(0.9) WITHIN GROUP (ORDER BY {column})",
            "max": f"MAX({column})", "min": f"MIN({column})",
            "count_distinct": "COUNT(DISTINCT person_id)"}[aggregate]


def _width_bucket(column: str, low: int, high: int, count: int) -> str:
    """DuckDB's CASE for width_bucket(column, low, high, count) with whole-number bins."""
    width = (high - low) // count
    return (f"CASE WHEN {column} < {low} THEN 0 WHEN {column} >= {high} THEN {count + 1} "
            f"ELSE CAST(floor(({column} - {low}) / {width}) AS INTEGER) + 1 END")


@dataclass(frozen=True)
class Table:
    name: str
    column: str  # the aggregated column
    domain: tuple[float, float]  # rules/demo.toml
    expert: tuple[float, float]  # what a domain expert would say without the data
    rows_per_unit: int  # the contribution bound (rules' max_rows_per_unit)
    where: str  # the WHERE scope, in both dialects
    groups: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    # scope: (proxy SQL term, DuckDB SQL term, groups one unit may touch)


TABLES = {
    "people": Table("people", "income", (0, 10_000_000), (0, 1_000_000), 1, "age > 60", {
        "group5": ("width_bucket(age, 30, 60, 3)", _width_bucket("age", 30, 60, 3), 1),
        "group50": ("width_bucket(age, 20, 68, 48)", _width_bucket("age", 20, 68, 48), 1)}),
    "visits": Table("visits", "cost", (0, 100_000), (0, 10_000), 6, "days >= 1", {
        "group5": ("department", "department", 5),
        "group50": ("extract(week FROM visited_at)", "extract(week FROM visited_at)", 6)}),
    # seed 002's real data (examples/data/census_casc.csv, ../shared/data): 1,080 people,
    # one row each; its rules are added to the benchmark's copy of the demo rules
    "census": Table("census", "ptotval", (0, 10_000_000), (0, 1_000_000), 1,
                    "agi > 60000", {
        "group5": ("width_bucket(afnlwgt, 100000, 400000, 3)",
                   _width_bucket("afnlwgt", 100000, 400000, 3), 1),
        "group50": ("width_bucket(afnlwgt, 20000, 500000, 48)",
                    _width_bucket("afnlwgt", 20000, 500000, 48), 1)}),
}
CENSUS_RULES = """
# benchmarks/utility_demo.py only: seed 002's census table, one row per person
[tables.census]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.census.columns]
person_id = { type = "int" }
ptotval   = { type = "int", domain = [0, 10000000] }
agi       = { type = "int", domain = [0, 1000000] }
afnlwgt   = { type = "int", domain = [0, 1000000] }
"""
SCOPE_LABELS = {("people", "whole"): "people", ("people", "where"): "people, age > 60",
                ("people", "group5"): "people, 5 age bands",
                ("people", "group50"): "people, 50 age bands",
                ("visits", "whole"): "visits", ("visits", "where"): "visits, days >= 1",
                ("visits", "group5"): "visits, 5 departments",
                ("visits", "group50"): "visits, 53 weeks",
                ("census", "whole"): "census", ("census", "where"): "census, agi > 60000",
                ("census", "group5"): "census, 5 weight bands",
                ("census", "group50"): "census, 50 weight bands"}


def statement(table: Table, scope: str, aggregate: str, plain: bool) -> str:
    agg = aggregate_sql(aggregate, table.column)
    where = f" WHERE {table.where}" if scope == "where" else ""
    if scope in table.groups:
        term = table.groups[scope][1 if plain else 0]
        return f"SELECT {term} AS g, {agg} FROM {table.name}{where} GROUP BY 1"
    return f"SELECT {agg} FROM {table.name}{where}"


class Refused(Exception):
    """A system cannot answer a cell: the reason goes into a footnote."""


def _short(exc: BaseException) -> str:
    import re

    text = re.sub(r" at line \d+ column \d+", "", " ".join(str(exc).split()))
    return (text[:150] + "…") if len(text) > 150 else text


# ---------------------------------------------------------------- idp-proxy

def _proxy_rules() -> str:
    text = (ROOT / "rules" / "demo.toml").read_text()
    # only what running 20 releases per cell needs: no answer cache, a budget for them
    return text.replace("budget_per_analyst = 100",
                        "budget_per_analyst = 1000000000\nanswer_cache = false") + CENSUS_RULES


def add_census(path: Path) -> None:
    """Seed 002's census table into the benchmark's copy of the demo file."""
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE census AS SELECT CAST(row_number() OVER () AS BIGINT) "
                    "AS person_id, CAST(PTOTVAL AS BIGINT) AS ptotval, CAST(AGI AS BIGINT) "
                    "AS agi, CAST(AFNLWGT AS BIGINT) AS afnlwgt FROM read_csv(?)",
                    [str(ROOT / "examples" / "data" / "census_casc.csv")])
    finally:
        con.close()


class Proxy:
    name = "idp-proxy"

    def __init__(self, path: Path) -> None:
        from proxy.backends import open_backend
        from proxy.engine import Engine
        from proxy.rules import parse_rules
        from proxy.session import Session

        self.engine = Engine(parse_rules(_proxy_rules()), open_backend(f"duckdb:///{path}"))
        self.session = Session.open(self.engine, "alice")

    def releases(self, table: Table, scope: str, aggregate: str, epsilon: float,
                 n: int) -> list[dict]:
        list(self.session.execute(f"SET idp.epsilon = {epsilon}"))
        sql = statement(table, scope, aggregate, plain=False)
        out = []
        for _ in range(n):
            try:
                answer = list(self.session.execute(sql))[-1]
            except Exception as exc:  # a refusal is the result
                raise Refused(_short(exc)) from exc
            out.append(_keyed(answer.rows, grouped=scope in table.groups))
        return out

    def close(self) -> None:
        self.engine.backend.close()


def _keyed(rows, grouped: bool) -> dict:
    if grouped:
        return {_key(row[0]): _number(row[1]) for row in rows}
    return {(): _number(rows[0][0]) if rows else None}


def _key(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def _number(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


# ---------------------------------------------------------------- the peers' data

@dataclass
class Frame:
    """A cell's rows for the peers: unit, value and group key, the WHERE applied."""
    unit: np.ndarray
    value: np.ndarray
    group: np.ndarray | None
    keys: list


def frame(con, table: Table, scope: str) -> Frame:
    where = f" WHERE {table.where}" if scope == "where" else ""
    term = table.groups[scope][1] if scope in table.groups else "0"
    unit, value, group = con.execute(
        f"SELECT person_id, CAST({table.column} AS DOUBLE), {term} FROM {table.name}{where}"
    ).fetchnumpy().values()
    keys = sorted({_key(k) for k in group.tolist()}) if scope in table.groups else [0]
    group = np.array([_key(k) for k in group.tolist()], dtype=object) \
        if scope in table.groups else None
    return Frame(np.asarray(unit), np.asarray(value, dtype=float), group, keys)


def _groups_touched(table: Table, scope: str) -> int:
    return table.groups[scope][2] if scope in table.groups else 1


def _candidates(low: float, high: float) -> list[float]:
    """The quantile candidates a careful user gives OpenDP on a skewed money column:
    1,001 evenly spaced over the bounds and 1,001 log-spaced from 1 to the upper bound."""
    grid = np.concatenate([np.linspace(low, high, 1001), np.geomspace(1, high, 1001)])
    return sorted({float(round(c, 2)) for c in grid if low <= c <= high})


# ---------------------------------------------------------------- OpenDP

class OpenDP:
    name = "OpenDP"

    def releases(self, data: Frame, table: Table, scope: str, aggregate: str,
                 epsilon: float, bounds: tuple[float, float], n: int) -> list[dict]:
        import opendp.prelude as dp
        import polars as pl

        dp.enable_features("contrib")
        grouped = data.group is not None
        columns = {"person_id": data.unit, "v": data.value}
        if grouped:
            columns["g"] = [str(k) for k in data.group]
        lf = pl.LazyFrame(columns)
        touched = _groups_touched(table, scope)
        if table.rows_per_unit == 1:
            unit = dp.unit_of(contributions=1)
        elif grouped:
            unit = dp.unit_of(contributions=[
                dp.polars.Bound(per_group=table.rows_per_unit),
                dp.polars.Bound(by=["g"], num_groups=touched)])
        else:
            unit = dp.unit_of(contributions=table.rows_per_unit)
        margins = [dp.polars.Margin(by=[], max_length=1_000_000)]
        if grouped:
            margins.append(dp.polars.Margin(by=["g"], invariant="keys",
                                            max_length=1_000_000, max_groups=len(data.keys)))
        value = pl.col("v").fill_nan(0.0).fill_null(0.0)
        candidates = _candidates(*bounds)
        expr = {
            "count": lambda: dp.len(),
            "sum": lambda: value.dp.sum(bounds),
            "avg": lambda: value.dp.mean(bounds),
            "median": lambda: value.dp.median(candidates),
            "p90": lambda: value.dp.quantile(0.9, candidates),
            "max": lambda: value.dp.quantile(1.0, candidates),
            "min": lambda: value.dp.quantile(0.0, candidates),
            "count_distinct": lambda: pl.col("person_id").dp.n_unique(),
        }.get(aggregate)
        if expr is None:
            raise Refused("its Polars API has no variance or standard deviation")
        try:
            context = dp.Context.compositor(data=lf, privacy_unit=unit,
                                            privacy_loss=dp.loss_of(epsilon=epsilon),
                                            split_evenly_over=1, margins=margins)
            query = context.query()
            query = query.group_by("g").agg(expr()) if grouped else query.select(expr())
            measurement = query.resolve()  # the scale found once, then fresh draws
        except Exception as exc:
            raise Refused(_short(exc)) from exc
        out = []
        for _ in range(n):
            result = measurement(lf).collect()
            if grouped:
                keys, values = result.get_column("g").to_list(), result.to_series(1).to_list()
                out.append({_key(_parse(k)): _number(v) for k, v in zip(keys, values)})
            else:
                out.append({(): _number(result.to_series(0)[0])})
        return out


def _parse(key: str):
    try:
        return int(key)
    except ValueError:
        return key


# ---------------------------------------------------------------- SmartNoise SQL

class SmartNoise:
    name = "SmartNoise"

    def releases(self, data: Frame, table: Table, scope: str, aggregate: str,
                 epsilon: float, bounds: tuple[float, float], n: int) -> list[dict]:
        import pandas as pd
        import snsql
        import yaml

        grouped = data.group is not None
        columns = {"person_id": data.unit, "v": data.value}
        described = {"person_id": {"type": "int", "private_id": True},
                     "v": {"type": "float", "lower": bounds[0], "upper": bounds[1]}}
        if grouped:
            columns["g"] = [str(k) for k in data.group]
            described["g"] = {"type": "string"}
        metadata = {"demo": {"demo": {"t": dict(
            max_ids=table.rows_per_unit, row_privacy=False, censor_dims=False,
            **described)}}}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
            yaml.safe_dump(metadata, handle)
        sql = {"count": "COUNT(*)", "sum": "SUM(v)", "avg": "AVG(v)", "stddev": "STDDEV(v)",
               "median": "percentile_cont(0.5) WITHIN GROUP (ORDER BY v)",
               "p90": "percentile_cont(0.9) WITHIN GROUP (ORDER BY v)",
               "max": "MAX(v)", "min": "MIN(v)",
               "count_distinct": "COUNT(DISTINCT person_id)"}[aggregate]
        sql = f"SELECT g, {sql} FROM demo.t GROUP BY g" if grouped else \
            f"SELECT {sql} FROM demo.t"
        try:
            reader = snsql.from_df(pd.DataFrame(columns), metadata=handle.name,
                                   privacy=snsql.Privacy(epsilon=epsilon, delta=0.0))
            out = []
            for _ in range(n):
                rows = reader.execute(sql)[1:]
                out.append({_parse(str(row[0])): _number(row[1]) for row in rows}
                           if grouped else {(): _number(rows[0][0]) if rows else None})
            return out
        except Exception as exc:
            if aggregate in ("median", "p90"):  # its grammar's PERCENTILE_CONT(v) is
                # parsed, then refused the same way as MAX: "We don't know how to rewrite"
                raise Refused("no percentiles: its grammar has no WITHIN GROUP (and "
                              "PERCENTILE_CONT(v) is parsed but not rewritten, as MAX "
                              "and MIN)") from exc
            raise Refused(_short(exc)) from exc
        finally:
            Path(handle.name).unlink()


# ---------------------------------------------------------------- PipelineDP

class PipelineDP:
    name = "PipelineDP"

    def releases(self, data: Frame, table: Table, scope: str, aggregate: str,
                 epsilon: float, bounds: tuple[float, float], n: int) -> list[dict]:
        import pipeline_dp

        metric = {"count": pipeline_dp.Metrics.COUNT, "sum": pipeline_dp.Metrics.SUM,
                  "avg": pipeline_dp.Metrics.MEAN, "stddev": pipeline_dp.Metrics.VARIANCE,
                  "median": pipeline_dp.Metrics.PERCENTILE(50),
                  "p90": pipeline_dp.Metrics.PERCENTILE(90),
                  "max": pipeline_dp.Metrics.PERCENTILE(100),
                  "min": pipeline_dp.Metrics.PERCENTILE(0),
                  "count_distinct": pipeline_dp.Metrics.PRIVACY_ID_COUNT}[aggregate]
        grouped = data.group is not None
        group = data.group if grouped else np.zeros(len(data.unit), dtype=int)
        rows = list(zip(data.unit.tolist(), data.value.tolist(), list(group)))
        # The rows already keep the bounds (checked here), so PipelineDP's per-unit
        # sampling would keep every row: told so, it skips that pass (a third of its time)
        # and releases from the same distribution. Its PRIVACY_ID_COUNT needs the pass.
        within = _within_bounds(data, table.rows_per_unit, _groups_touched(table, scope))
        params = pipeline_dp.AggregateParams(
            metrics=[metric], noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            max_partitions_contributed=_groups_touched(table, scope),
            max_contributions_per_partition=table.rows_per_unit,
            min_value=bounds[0], max_value=bounds[1],
            contribution_bounds_already_enforced=within and aggregate != "count_distinct")
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda row: row[0], value_extractor=lambda row: row[1],
            partition_extractor=lambda row: row[2])
        out = []
        try:
            for _ in range(n):
                accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon,
                                                               total_delta=0)
                engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
                result = engine.aggregate(rows, params, extractors,
                                          public_partitions=list(data.keys))
                accountant.compute_budgets()
                answers = {}
                for key, metrics in result:
                    value = _number(metrics[0])
                    if aggregate == "stddev" and value is not None:
                        value = math.sqrt(max(value, 0.0))  # post-processing of VARIANCE
                    answers[_key(key) if grouped else ()] = value
                out.append(answers)
        except Exception as exc:
            raise Refused(_short(exc)) from exc
        return out


def _within_bounds(data: Frame, rows: int, groups: int) -> bool:
    """Whether every unit has at most ``rows`` rows in a group and rows in at most
    ``groups`` groups."""
    import pandas as pd

    frame = pd.DataFrame({"u": data.unit, "g": data.group if data.group is not None else 0})
    per_group = frame.groupby(["u", "g"]).size()
    return bool(per_group.max() <= rows
                and per_group.groupby(level=0).size().max() <= groups)


# ---------------------------------------------------------------- the run

def truth(con, table: Table, scope: str, aggregate: str) -> dict:
    rows = con.execute(statement(table, scope, aggregate, plain=True)).fetchall()
    return _keyed(rows, grouped=scope in table.groups)


def relative_errors(true: dict, releases: list[dict]) -> list[float]:
    errors = []
    for answer in releases:
        for key, value in true.items():
            if value is None or value == 0:
                continue
            got = answer.get(key)
            errors.append(1.0 if got is None else abs(got - value) / abs(value))
    return errors


@dataclass
class Result:
    table: str
    scope: str
    aggregate: str
    epsilon: float
    system: str
    error: float | None  # median relative error; None: refused
    reason: str = ""
    seconds: float = 0.0
    guarantee: str = "peers-native"  # a peer's view; idp-proxy's rows serve both
    peer_epsilon: float | None = None  # the ε the peer was run with (None: epsilon)


# ---------------------------------------------------------------- the guarantee

GUARANTEES = ["substitution", "peers-native"]


def substitution_loss(peer: str, table: Table, scope: str, aggregate: str,
                      groups: int) -> float:
    """ρ: the worst privacy loss, over ε, of the peer's release at ε when one person's
    records are modified (idp-proxy's neighbours: the person keeps their rows and their
    id; values, WHERE columns and group keys change). The peer run at ε / max(1, ρ) is
    ε-DP under substitution. Derived from each peer's own calibration (module docstring,
    "The guarantee"); ``groups`` is the number of public keys of the cell.

    k rows per person (the contribution bound the peers are given), l0 groups one
    person may touch; a substitution moves at most k rows out of their groups and k
    rows into others, so an L1 quantity a peer calibrates to k (add/remove) moves 2k.
    """
    k, l0 = table.rows_per_unit, _groups_touched(table, scope)
    grouped = scope in table.groups
    quantile = aggregate in ("median", "p90", "max", "min")
    # per row, a value changed within scope against one row added or removed, for the
    # exponential mechanism's score (OpenDP) over its calibration 2·max(α, 1 − α)
    within = {"median": 2.0, "p90": 1 / 0.9, "max": 0.5, "min": 0.5}
    # COUNT(DISTINCT unit): a person leaves up to min(k, l0) groups, joins as many
    distinct = 2 * min(k, l0)
    if peer == "OpenDP":  # calibrated to L1 = k (its total row bound), whatever l0
        if aggregate == "stddev":
            return 1.0  # it has none
        if aggregate == "count_distinct":
            return distinct / k if grouped else 1.0
        if quantile:  # grouped: ε / l0' per group (l0' = l0, or the key count when
            # only the row bound is given), each for k rows: 2k (max/min k) units of
            # one row's add/remove against l0'·k
            if not grouped:
                return within[aggregate]
            touched = groups if k == 1 else l0
            return (1.0 if aggregate in ("max", "min") else 2.0) / touched
        return 2.0 if grouped else 1.0  # count, sum, avg (sum ε/2 + count ε/2)
    if peer == "PipelineDP":  # calibrated to L1 = l0 · (k rows per partition)
        if aggregate == "count_distinct":
            return distinct / l0 if grouped else 1.0
        if aggregate == "stddev":  # VARIANCE: count, Σ(x − m), Σ(x − m)² at ε/3 each
            return 5 / (3 * l0) if grouped else 5 / 6
        if quantile:  # its quantile tree: one row's change is −1 and +1 per level
            return 2 / l0 if grouped else 2.0
        return 2 / l0 if grouped else 1.0  # count, sum, avg (count ε/2 + Σ(x − m) ε/2)
    if peer == "SmartNoise":  # calibrated to L1 = k; every part of AVG/STDDEV at ε
        if aggregate == "count_distinct":
            return distinct / k if grouped else 1.0
        if aggregate == "avg":  # SUM at ε and COUNT at ε (its cost: 2ε)
            return 4.0 if grouped else 2.0 if scope == "where" else 1.0
        if aggregate == "stddev":  # SUM(v²), SUM(v), COUNT at ε each (its cost: 3ε)
            return 6.0 if grouped else 3.0 if scope == "where" else 2.0
        if quantile:
            return 1.0  # it answers none
        return 2.0 if grouped else 1.0
    raise ValueError(peer)


def peer_epsilon(guarantee: str, peer: str, table: Table, scope: str, aggregate: str,
                 epsilon: float, groups: int) -> float:
    if guarantee == "peers-native":
        return epsilon
    return epsilon / max(1.0, substitution_loss(peer, table, scope, aggregate, groups))


PEERS = [OpenDP(), SmartNoise(), PipelineDP()]
# the value bounds do not enter these aggregates: the expert column is the same mechanism
BOUNDLESS = {"count", "count_distinct"}


FIELDS = ["table", "scope", "aggregate", "epsilon", "system", "median_relative_error",
          "refused", "seconds", "guarantee", "peer_epsilon"]


def _row(r: Result) -> list:
    return [r.table, r.scope, r.aggregate, r.epsilon, r.system,
            "" if r.error is None else f"{r.error:.6g}", r.reason, f"{r.seconds:.2f}",
            r.guarantee, "" if r.peer_epsilon is None else f"{r.peer_epsilon:.6g}"]


def read_csv(path: Path) -> list[Result]:
    """A demo.csv; one written before ``--guarantee`` existed holds peers-native rows."""
    with open(path, newline="") as handle:
        return [Result(row["table"], row["scope"], row["aggregate"], float(row["epsilon"]),
                       row["system"], float(row["median_relative_error"])
                       if row["median_relative_error"] else None, row["refused"],
                       float(row["seconds"]), row.get("guarantee") or "peers-native",
                       float(row["peer_epsilon"]) if row.get("peer_epsilon") else None)
                for row in csv.DictReader(handle)]


def run(args) -> list[Result]:
    """Every cell, ε = 1 first; each cell's results are appended to ``demo.csv`` as
    they come, so a run stopped early keeps what it measured (``--report`` redraws
    the tables from it)."""
    from proxy.demo import create_demo

    results: list[Result] = []
    args.out.mkdir(parents=True, exist_ok=True)
    sink = open(args.out / "demo.csv", "w", newline="")  # noqa: SIM115 - closed below
    writer = csv.writer(sink)
    writer.writerow(FIELDS)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.duckdb"
        create_demo(path)
        add_census(path)
        plain = duckdb.connect(str(path), read_only=False)
        frames = {(t, s): frame(plain, TABLES[t], s) for t in args.tables for s in args.scopes}
        truths = {(t, s, a): truth(plain, TABLES[t], s, a)
                  for t in args.tables for s in args.scopes for a in args.aggregates}
        plain.close()
        proxy = Proxy(path)
        try:
            for epsilon in sorted(args.epsilon, reverse=True):
                for aggregate in args.aggregates:
                    for name in args.tables:
                        table = TABLES[name]
                        for scope in args.scopes:
                            true = truths[(name, scope, aggregate)]
                            cell = (name, scope, aggregate, epsilon)
                            done = len(results)
                            results.append(_measure(
                                cell, proxy.name, true, proxy.releases,
                                table, scope, aggregate, epsilon, args.releases))
                            results[-1].guarantee = "substitution"  # its own
                            data = frames[(name, scope)]
                            for peer in (p for p in PEERS if p.name in args.peers):
                                measured: dict[tuple[str, float], Result] = {}  # by label, ε
                                for guarantee in args.guarantee:
                                    eps = peer_epsilon(guarantee, peer.name, table, scope,
                                                       aggregate, epsilon, len(data.keys))
                                    for label, bounds in ((peer.name, table.domain),
                                                          (peer.name + "*", table.expert)):
                                        same = measured.get((label, eps))
                                        if same is None and label.endswith("*") \
                                                and aggregate in BOUNDLESS:
                                            same = measured[(peer.name, eps)]
                                        if same is not None:  # the same mechanism at
                                            # the same ε: its draws serve both views
                                            results.append(Result(
                                                *cell, label, same.error, same.reason, 0.0,
                                                guarantee, eps))
                                            continue
                                        result = _measure(cell, label, true, peer.releases,
                                                          data, table, scope, aggregate,
                                                          eps, bounds, args.releases)
                                        result.guarantee, result.peer_epsilon = guarantee, eps
                                        measured[(label, eps)] = result
                                        results.append(result)
                            _print_cell(results, cell)
                            writer.writerows(_row(r) for r in results[done:])
                            sink.flush()
        finally:
            proxy.close()
            sink.close()
    return _ordered(results)


def _ordered(results: list[Result]) -> list[Result]:
    """By aggregate, table, scope, then ε (the order of the tables)."""
    return sorted(results, key=lambda r: (AGGREGATES.index(r.aggregate),
                                          list(TABLES).index(r.table),
                                          SCOPES.index(r.scope), r.epsilon))


def _measure(cell, system: str, true: dict, draw: Callable[..., list[dict]],
             *arguments) -> Result:
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            releases = draw(*arguments)
    except Refused as refused:
        return Result(*cell, system, None, str(refused), time.perf_counter() - started)
    errors = relative_errors(true, releases)
    return Result(*cell, system, float(np.median(errors)) if errors else None,
                  "" if errors else "no comparable value",
                  time.perf_counter() - started)


def _print_cell(results: list[Result], cell) -> None:
    mine = [r for r in results if (r.table, r.scope, r.aggregate, r.epsilon) == cell]
    text = "  ".join(f"{r.system}{_at(r)} {_pct(r.error)} ({r.seconds:.1f}s)" for r in mine)
    print(f"{cell[2]:<14} {SCOPE_LABELS[cell[:2]]:<24} eps={cell[3]:<4} {text}", flush=True)


def _pct(error: float | None) -> str:
    if error is None:
        return "—"
    percent = 100 * error
    if percent >= 1000:
        return f"{percent:,.0f} %"
    if percent >= 10:
        return f"{percent:.0f} %"
    if percent >= 0.01:
        return f"{percent:.2g} %"
    return f"{percent:.1g} %"


def _at(r: Result) -> str:
    """A peer's ε where it is not the cell's: " @0.5ε"."""
    if r.peer_epsilon is None or math.isclose(r.peer_epsilon, r.epsilon):
        return ""
    return f" @{r.peer_epsilon / r.epsilon:.2g}ε"


VIEWS = {"substitution": "each peer at the ε that makes its release ε-DP when one "
                         "person's records are modified (idp-proxy's guarantee; @xε where "
                         "that is below the cell's ε)",
         "peers-native": "each peer at the cell's ε, its own guarantee (add or remove "
                         "one person)"}


def view(results: list[Result], guarantee: str) -> list[Result]:
    """idp-proxy's rows and the peers' rows of one guarantee."""
    return [r for r in results if r.system == "idp-proxy" or r.guarantee == guarantee]


SYSTEMS = ["idp-proxy", "OpenDP", "SmartNoise", "PipelineDP", "OpenDP*", "SmartNoise*",
           "PipelineDP*"]


def tables(results: list[Result], guarantee: str = "peers-native") -> tuple[str, dict]:
    """The Markdown tables of one guarantee, one per aggregate, with footnotes, and the
    counts."""
    lines, counts = [], {}
    results = view(results, guarantee)
    for aggregate in dict.fromkeys(r.aggregate for r in results):
        rows = [r for r in results if r.aggregate == aggregate]
        cells = list(dict.fromkeys((r.table, r.scope, r.epsilon) for r in rows))
        notes: dict[str, int] = {}
        lines += [f"### {LABELS[aggregate]} — guarantee: {guarantee}", "",
                  f"Peers: {VIEWS[guarantee]}.", "",
                  "| cell | ε | " + " | ".join(SYSTEMS) + " |",
                  "|---|---|" + "---|" * len(SYSTEMS)]
        best = near = compared = 0
        for table, scope, epsilon in cells:
            by = {r.system: r for r in rows if (r.table, r.scope, r.epsilon)
                  == (table, scope, epsilon)}
            texts = []
            for system in SYSTEMS:
                r = by.get(system)
                if r is None:
                    texts.append("")
                elif r.error is None:
                    note = notes.setdefault(f"{system.rstrip('*')}: {r.reason}",
                                            len(notes) + 1)
                    texts.append(f"— [{note}]")
                else:
                    texts.append(_pct(r.error) + _at(r))
            ours = by["idp-proxy"].error if "idp-proxy" in by else None
            declared = [by[s].error for s in ("OpenDP", "SmartNoise", "PipelineDP")
                        if s in by and by[s].error is not None]
            expert = [by[s].error for s in ("OpenDP*", "SmartNoise*", "PipelineDP*")
                      if s in by and by[s].error is not None]
            if ours is not None and declared:
                compared += 1
                best += ours <= min(declared)
                near += not expert or ours <= 1.5 * min(expert)
            lines.append(f"| {SCOPE_LABELS[(table, scope)]} | {epsilon:g} | "
                         + " | ".join(texts) + " |")
        counts[aggregate] = (compared, best, near)
        lines += ["", (f"idp-proxy best (at or below every peer with the declared domains) "
                       f"in {best} of {compared} cells; within 1.5× of the best peer with "
                       f"expert bounds in {near} of {compared}."), ""]
        lines += [f"[{number}] {text}" for text, number in notes.items()]
        lines.append("")
    return "\n".join(lines), counts


def headline(results: list[Result], epsilon: float = 1.0,
             guarantee: str = "peers-native") -> str:
    """Per aggregate at ε = 1: idp-proxy's median over the cells against the best peer's."""
    lines = [(f"| aggregate (ε = {epsilon:g}, median over its cells; {guarantee}) | "
              "idp-proxy | best peer, declared domains | best peer, expert bounds | "
              "idp-proxy best | within 1.5× of the best expert peer |"),
             "|---|---|---|---|---|---|"]
    results = view(results, guarantee)
    _, counts = tables([r for r in results if r.epsilon == epsilon], guarantee)
    for aggregate in dict.fromkeys(r.aggregate for r in results):
        rows = [r for r in results if r.aggregate == aggregate and r.epsilon == epsilon]
        if not rows:
            continue

        def best(systems, rows=rows):
            found = {}
            for r in rows:
                if r.system in systems and r.error is not None:
                    key = (r.table, r.scope)
                    found[key] = min(found.get(key, math.inf), r.error)
            return float(np.median(list(found.values()))) if found else None

        ours = [r.error for r in rows if r.system == "idp-proxy" and r.error is not None]
        lines.append(f"| {LABELS[aggregate]} | "
                     f"{_pct(float(np.median(ours)) if ours else None)} | "
                     f"{_pct(best({'OpenDP', 'SmartNoise', 'PipelineDP'}))} | "
                     f"{_pct(best({'OpenDP*', 'SmartNoise*', 'PipelineDP*'}))} | "
                     f"{counts[aggregate][1]} of {counts[aggregate][0]} | "
                     f"{counts[aggregate][2]} of {counts[aggregate][0]} |")
    return "\n".join(lines)


def side_by_side(results: list[Result]) -> str:
    """Per aggregate and ε, the cells where idp-proxy is best under each guarantee."""
    present = [g for g in GUARANTEES if any(r.guarantee == g for r in results
                                            if r.system != "idp-proxy")]
    lines = ["| aggregate | ε | " + " | ".join(
                 f"idp-proxy best, {g}" for g in present) + " |",
             "|---|---|" + "---|" * len(present)]
    for aggregate in dict.fromkeys(r.aggregate for r in results):
        for epsilon in sorted({r.epsilon for r in results if r.aggregate == aggregate}):
            rows = [r for r in results if r.aggregate == aggregate and r.epsilon == epsilon]
            texts = []
            for g in present:
                compared, best, _ = tables(rows, g)[1].get(aggregate, (0, 0, 0))
                texts.append(f"{best} of {compared}")
            lines.append(f"| {LABELS[aggregate]} | {epsilon:g} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def both_views(results: list[Result]) -> str:
    """One table per aggregate, every cell's peers under both guarantees side by side
    ("native → substitution"), and whether idp-proxy is best under each."""
    lines = []
    peers = ["OpenDP", "SmartNoise", "PipelineDP"]
    for aggregate in dict.fromkeys(r.aggregate for r in results):
        rows = [r for r in results if r.aggregate == aggregate]
        cells = list(dict.fromkeys((r.table, r.scope, r.epsilon) for r in rows))
        lines += [f"#### {LABELS[aggregate]}: peers-native → substitution", "",
                  "| cell | ε | idp-proxy | " + " | ".join(
                      peers + [p + "*" for p in peers]) + " | best, native | best, substitution |",
                  "|---|---|---|" + "---|" * (2 * len(peers) + 2)]
        for table, scope, epsilon in cells:
            here = [r for r in rows if (r.table, r.scope, r.epsilon) == (table, scope, epsilon)]
            ours = next((r.error for r in here if r.system == "idp-proxy"), None)
            texts, best = [], {}
            for system in peers + [p + "*" for p in peers]:
                got = {r.guarantee: r for r in here if r.system == system}
                parts = [got[g] for g in ("peers-native", "substitution") if g in got]
                text = " → ".join((_pct(r.error) if r.error is not None else "—")
                                  + (_at(r) if r.guarantee == "substitution" else "")
                                  for r in parts)
                texts.append(text)
            for g in ("peers-native", "substitution"):
                declared = [r.error for r in here if r.system in peers
                            and r.guarantee == g and r.error is not None]
                best[g] = "" if ours is None or not declared else \
                    ("yes" if ours <= min(declared) else "no")
            lines.append(f"| {SCOPE_LABELS[(table, scope)]} | {epsilon:g} | {_pct(ours)} | "
                         + " | ".join(texts) + f" | {best['peers-native']} | "
                         f"{best['substitution']} |")
        lines.append("")
    return "\n".join(lines)


def write(results: list[Result], out: Path, text: str,
          guarantee: str = "peers-native") -> list[str]:
    """demo.md, and the charts of one guarantee."""
    out.mkdir(parents=True, exist_ok=True)
    results = view(results, guarantee)
    (out / "demo.md").write_text(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for aggregate in dict.fromkeys(r.aggregate for r in results):
        rows = [r for r in results if r.aggregate == aggregate]
        cells = list(dict.fromkeys((r.table, r.scope, r.epsilon) for r in rows))
        figure, axis = plt.subplots(figsize=(max(8, 0.6 * len(cells)), 6))
        width = 0.8 / len(SYSTEMS)
        for i, system in enumerate(SYSTEMS):
            values = []
            for cell in cells:
                r = next((r for r in rows if (r.table, r.scope, r.epsilon) == cell
                          and r.system == system), None)
                values.append(np.nan if r is None or r.error is None
                              else max(100 * r.error, 1e-4))
            axis.bar(np.arange(len(cells)) + i * width, values, width, label=system,
                     hatch="//" if system.endswith("*") else None)
        axis.set_xticks(np.arange(len(cells)) + 0.4 - width / 2)
        axis.set_xticklabels([f"{SCOPE_LABELS[c[:2]]}\nε={c[2]:g}" for c in cells],
                             fontsize=7, rotation=30, ha="right")
        axis.set(yscale="log", ylabel="median relative error, %",
                 title=f"{LABELS[aggregate]} on the demo, peers {guarantee} (* = expert "
                       "bounds; missing bar = cannot answer)")
        axis.legend(fontsize=7, ncol=len(SYSTEMS), loc="upper center",
                    bbox_to_anchor=(0.5, -0.3))
        figure.tight_layout()
        name = f"demo_{aggregate}.png"
        figure.savefig(out / name, dpi=80)
        plt.close(figure)
        written.append(name)
    return written


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="utility.py demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 5 releases, ε = 1, the whole table and 5 groups")
    parser.add_argument("--releases", type=int, default=None, help="default 20 (quick: 5)")
    parser.add_argument("--epsilon", default=None,
                        type=lambda text: [float(v) for v in text.split(",")])
    def split(text):
        return text.split(",")
    parser.add_argument("--aggregates", default=AGGREGATES, type=split)
    parser.add_argument("--scopes", default=None, type=split)
    parser.add_argument("--tables", default=list(TABLES), type=split,
                        help="people, visits, census (default: all three)")
    parser.add_argument("--peers", default=[p.name for p in PEERS],
                        type=lambda text: [] if text == "none" else text.split(","),
                        help="OpenDP, SmartNoise, PipelineDP (default: all); 'none' "
                             "measures idp-proxy alone (a before/after of its own)")
    parser.add_argument("--guarantee", default="substitution",
                        choices=GUARANTEES + ["both"],
                        help="the peers' ε: 'substitution' (default) the ε that makes "
                             "each peer's release ε-DP under idp-proxy's neighbours (one "
                             "person's records modified); 'peers-native' the cell's ε "
                             "(their add/remove-one-person guarantee); 'both' measures "
                             "both views in one run (idp-proxy once)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "utility")
    parser.add_argument("--report", type=Path, default=None, metavar="CSV",
                        help="measure nothing: the tables and charts of a demo.csv")
    args = parser.parse_args(argv)
    args.releases = args.releases or (5 if args.quick else 20)
    args.epsilon = args.epsilon or ([1.0] if args.quick else [0.1, 1.0])
    args.scopes = args.scopes or (["whole", "group5"] if args.quick else SCOPES)
    args.guarantee = GUARANTEES if args.guarantee == "both" else [args.guarantee]
    started = time.perf_counter()
    results = _ordered(read_csv(args.report)) if args.report else run(args)
    views = [g for g in GUARANTEES if any(r.guarantee == g for r in results
                                          if r.system != "idp-proxy")] or args.guarantee
    text, summary = "", []
    for guarantee in views:
        part, counts = tables(results, guarantee)
        text += part + f"\n### Headline, {guarantee}\n\n" \
            + headline(results, guarantee=guarantee) + "\n\n"
        compared = sum(c[0] for c in counts.values())
        summary.append(f"{guarantee}: idp-proxy best in {sum(c[1] for c in counts.values())}"
                       f" of {compared} cells; within 1.5x of the best expert-bounded peer "
                       f"in {sum(c[2] for c in counts.values())} of {compared}")
    text += "### idp-proxy best, by guarantee\n\n" + side_by_side(results) + "\n"
    if len(views) > 1:
        text += "\n### Both guarantees, cell by cell\n\n" + both_views(results)
    charts = write(results, args.out, text, views[0])
    print()
    print(text)
    print("\n".join(summary))
    print(f"wrote {args.out / 'demo.csv'}, demo.md and {len(charts)} charts; "
          f"{time.perf_counter() - started:.0f} s")
