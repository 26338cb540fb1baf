"""A differential fuzzer of the backend SQL for aggregates over expressions (issue 29/30,
docs/privacy.md §3.6 "Totality"): random expressions of every operator and function the
analyser admits, over a table of adversarial rows, on a real backend.

For each expression, either the analysis refuses it (NotSupported: free, before any
debit), or

- the per-row value the statistics read (``scope.needed_value``) runs without error, every
  value is NULL or finite and inside the derived domain, and equals a Python reference of
  the guarded semantics (``reference``) within a tolerance; so does the expression's value
  before the final clamp, which must lie inside the derived domain too (the analysis's
  bounds are true bounds of what the SQL computes);
- the engine's own statistics statements for SUM, MAX, MIN, MEDIAN and COUNT of it
  (``Engine.statistics``) run without error and every number they return is finite, the
  order statistics inside the derived domain; and, for every ``PAIRED_EVERY``-th
  expression whose domain is bounded, those of CORR and REGR_SLOPE of it with a wide
  and a narrow column (``check_paired``: their two statements run, their sums finite and
  within their bounds, their answers finite).

Used by tests/pushdown/test_totality.py (a fixed seed set, bounded) and benchmarks/totality_fuzz.py
(a longer run). Nothing is mocked: DuckDB, PostgreSQL and Sail run the SQL.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from dataclasses import dataclass, field
from decimal import Decimal

import sqlglot
from sqlglot import exp

from proxy.analyze import analyze, parse_statements
from proxy.errors import NotSupported, ProxyError
from proxy.privacy import refuse_unanswerable
from proxy.pushdown.scope import needed_value
from proxy.pushdown.values import clamped_to_domain
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import MAGNITUDE_CAP, ColumnNeeds, clamp_to_domain
from proxy.vocabulary import DerivedColumn

TABLE = "totality"
RULES_TEXT = f"""
[defaults]
model = "idp"
epsilon_per_query = 0.3
budget_per_analyst = 1000000

[analysts.zoe]

[tables.{TABLE}]
privacy_unit = "id"
max_rows_per_unit = 1
[tables.{TABLE}.columns]
id = {{ type = "int" }}
x = {{ type = "float", domain = [0, 10] }}
y = {{ type = "int", domain = [-5, 5] }}
w = {{ type = "float" }}
p = {{ type = "float", domain = [1e-200, 1] }}
b = {{ type = "float", domain = [-1e15, 1e15] }}
s = {{ type = "float", domain = [1e-150, 1e-100] }}
at = {{ type = "timestamp", domain = [2023-01-01T00:00:00, 2024-12-31T23:59:59] }}
"""
RULES = parse_rules(RULES_TEXT)
TYPES = {"id": "INTEGER", "x": "DOUBLE PRECISION", "y": "INTEGER", "w": "DOUBLE PRECISION",
         "p": "DOUBLE PRECISION", "b": "DOUBLE PRECISION", "s": "DOUBLE PRECISION",
         "at": "TIMESTAMP"}
FLOATS = ("x", "w", "p", "b", "s")
NAN, INF = math.nan, math.inf
EPS = 2.0 ** -52
# Adversarial values of every float column, besides its own domain's ends and inside
ADVERSARIAL = [0.0, -0.0, 1e-310, -1e-310, 5e-324, 1e-300, -1e-300, 1e-150 * (1 + EPS),
               1e-150 * (1 - EPS), -1e-150 * (1 + EPS), -1e-150 * (1 - EPS), 1e-150, 1e-151,
               1e300, -1e300, 1e308, -1e308, 1.7976931348623157e308, NAN, INF, -INF, None,
               1.0, -1.0, 0.5, 1e15, -1e15, 1e16, 2.0 ** 53 + 2, 1e-15]
INTEGERS = [-5, 5, 0, 1, -1, 3, -7, 9, 2147483647, -2147483648, None]
_T = dt.datetime
# moments of the time column (whose fields are extracted): NULL, far and just outside the
# domain (not years 1 and 9999, which pyspark cannot convert; tests/where_totality.py and
# tests/analyze/test_time_fields.py have them, and ±infinity), its ends, a leap day,
# fractions of a second
MOMENTS = [None, _T(1901, 1, 1), _T(2999, 12, 31, 23, 59, 59), _T(2022, 12, 31, 23, 59, 59),
           _T(2025, 1, 1), _T(2023, 1, 1), _T(2024, 12, 31, 23, 59, 59), _T(2024, 2, 29, 13, 45),
           _T(2023, 7, 2, 6, 7, 8, 500000), _T(2023, 10, 29, 2, 30), _T(2024, 1, 1, 23, 59)]


def _ends(name: str) -> list[float]:
    column = RULES.tables[TABLE].columns[name]
    low, high = column.lower, column.upper
    if low is None:
        return []
    inside = [low + (high - low) * f for f in (0.25, 0.5, 0.999)]
    return [low, high, *inside, math.nextafter(low, -INF), math.nextafter(high, INF)]


def rows(count: int = 64, seed: int = 0) -> dict[str, list]:
    """The adversarial table: every value of each column's list appears, in varied
    combinations with the other columns'."""
    rng = random.Random(seed)
    values = {name: _ends(name) + ADVERSARIAL for name in FLOATS}
    columns: dict[str, list] = {"id": list(range(1, count + 1)), "y": []}
    for name in FLOATS:
        columns[name] = []
    for index in range(count):
        columns["y"].append(INTEGERS[index % len(INTEGERS)] if index < len(INTEGERS)
                            else rng.choice(INTEGERS))
        for offset, name in enumerate(FLOATS):
            pool = values[name]
            columns[name].append(pool[(index * (offset + 2) + offset) % len(pool)]
                                 if index < 2 * len(pool) else rng.choice(pool))
    columns["at"] = [MOMENTS[(index * 3 + 1) % len(MOMENTS)] for index in range(count)]
    return columns


# ---------------------------------------------------------------- random expressions

CONSTANTS = ["0", "1", "2", "3", "-1", "0.5", "10", "1000", "0.1", "12345.678", "1e15",
             "-1e15", "1e-15", "1e-150", "1e-151", "1e-200", "1e-310", "1e-400", "1e150",
             "1e100", "7", "1e-100"]
COLUMNS = ["x", "y", "w", "p", "b", "s"]


def expression(rng: random.Random, depth: int = 4) -> str:
    """A random expression over the columns, every admitted form equally likely at each
    level, with some of the shapes that meet tiny and huge values."""
    if depth <= 0 or rng.random() < 0.22:
        return _leaf(rng)
    sub = lambda: expression(rng, depth - 1)  # noqa: E731
    form = rng.randrange(27)
    if form < 3:
        return f"({sub()} * {sub()})"
    if form < 5:
        return f"({sub()} / {_divisor(rng)})"
    if form == 5:
        return f"({sub()} + {sub()})"
    if form == 6:
        return f"({sub()} - {sub()})"
    if form == 7:
        return f"-({sub()})"
    if form == 8:
        return f"abs({sub()})"
    if form == 9:
        return f"{rng.choice(['least', 'greatest'])}({sub()}, {sub()})"
    if form == 10:
        return f"coalesce({sub()}, {sub()})"
    if form == 11:
        otherwise = f" ELSE {sub()}" if rng.random() < 0.7 else ""
        return f"CASE WHEN {_condition(rng)} THEN {sub()}{otherwise} END"
    if form == 12:
        kind = rng.choice(["int", "bigint", "smallint", "double precision", "numeric"])
        return f"CAST({sub()} AS {kind})"
    if form == 13:
        return f"{rng.choice(['floor', 'ceil', 'round', 'trunc'])}({sub()})"
    if form in (14, 15):
        inner = sub()
        return rng.choice([f"sqrt({inner})", f"sqrt(abs({inner}))",
                           f"sqrt(({inner}) * {rng.choice(['1', '1e-15', '2'])})"])
    if form in (16, 17):
        inner = sub()
        shifted = f"ln(abs({inner}) + {rng.choice(CONSTANTS)})"
        positive = f"{rng.choice(['p', 's', 'x + 1'])} * {rng.choice(['1', '1e-15', '0.5'])}"
        return rng.choice([f"ln({inner})", shifted, f"ln({positive})"])
    if form == 18:  # a chain of factors (the exponential size of issue 30)
        factors = " * ".join(rng.choice(["1", "1e15", "1e-15", "2", "0.5", "x", "p"])
                             for _ in range(rng.randint(2, 6)))
        return f"({sub()} * {factors})"
    if form == 19:  # a difference of quotients by a large product (issue 29's oracle)
        big = " * ".join(["1e15"] * rng.randint(1, 10))
        return f"sqrt((({sub()} + 1) / ({big})) * 1 - 1 / ({big}))"
    if form == 20:
        return f"({sub()} * {sub()} * {sub()})"
    if form == 21:  # a condition as 1, 0 or NULL (Ibis's mean of a boolean)
        return f"CAST({_condition(rng)} AS int)"
    if form == 22:  # a field of the time column (issue 33), or one that is refused
        field = rng.choice(FIELDS)
        return rng.choice([f"extract({field} FROM at)", f"date_part('{field}', at)",
                           f"date_part('{field}', at::timestamp)", *TIME_ARITHMETIC])
    if form == 23:  # a square (an exponent other than 2 is refused)
        return rng.choice([f"power({sub()}, 2)", f"(({sub()}) ^ 2)", f"power({sub()}, 3)"])
    if form == 24:
        inner = sub()
        positive = f"{rng.choice(['p', 's', 'x + 1'])} * {rng.choice(['1', '1e-15', '0.5'])}"
        return rng.choice([f"log({inner})", f"log(2, {positive})", f"log10({positive})",
                           f"log(0.5, abs({inner}) + 1)"])
    if form == 25:  # refused unless the argument stays within ±700
        return rng.choice([f"exp({sub()})",
                           f"exp({rng.choice(['x', 'y', 'p', 's', 'x * y', 'b'])})"])
    return _leaf(rng)


FIELDS = ["dow", "isodow", "hour", "month", "year", "day", "quarter", "minute", "doy", "week",
          "epoch"]
# epochs and day differences of the time column (dbt's datediff, an age in days), and
# forms PostgreSQL has no function for (the epoch of a number of days), refused
TIME_ARITHMETIC = ["extract(epoch FROM (TIMESTAMP '2025-01-01' - at))",
                   "extract(epoch FROM (at - TIMESTAMP '2023-06-01 12:00:00.5'))",
                   "(at::date - '2023-01-01'::date)", "(DATE '2024-02-29' - at::date)",
                   "date_part('hour', '2023-01-01 07:00'::timestamp)",
                   "extract(epoch FROM (at::date - '2023-01-01'::date))",
                   "(at - TIMESTAMP '2023-01-01')",
                   # under an outer minus: the difference was written unbracketed, so
                   # the SQL computed x - a - b for x - (a - b) (the fuzzer's seed 29)
                   "abs(1e-15) - extract(epoch FROM (TIMESTAMP '2025-01-01' - at))"]
_EPOCH = dt.datetime(1970, 1, 1)
_FIELD = {"dow": lambda m: (m.weekday() + 1) % 7, "isodow": lambda m: m.isoweekday(),
          "hour": lambda m: m.hour, "month": lambda m: m.month, "year": lambda m: m.year,
          "day": lambda m: m.day, "quarter": lambda m: (m.month - 1) // 3 + 1,
          "minute": lambda m: m.minute, "doy": lambda m: m.timetuple().tm_yday,
          "week": lambda m: m.isocalendar()[1]}


def _leaf(rng: random.Random) -> str:
    if rng.random() < 0.65:
        return rng.choice(COLUMNS)
    # NULL now and then: an always-NULL operand of a function (log(2, NULL) failed on
    # PostgreSQL, untyped)
    return "NULL" if rng.random() < 0.05 else rng.choice(CONSTANTS)


def _divisor(rng: random.Random) -> str:
    return rng.choice(["2", "3", "-4", "0.5", "1e15", "1e-15", "1e150", "1e-150", "1e200",
                       "1e-200", "7", "(1e15 * 1e15)", "0.001", "1e-310", "0",
                       # columns whose domains keep the divisor from 0, or not
                       "(x + 1)", "(y + 6)", "(y - 6)", "s", "p", "(x + 1e-151)", "(b + 1)",
                       "(s * 1e-60)", "(abs(y) + 0.5)", "(s * 1e250)",
                       # NULLIF of an int whose range ends at 0 keeps from it; others not
                       "nullif(y + 5, 0)", "nullif(y - 5, 0)", "nullif(y, 0)",
                       "nullif(x, 0)", "nullif(y + 5, 3)"])


def _condition(rng: random.Random) -> str:
    column = rng.choice(COLUMNS)
    return rng.choice([f"{column} > {rng.choice(['0', '1', '5', '-1'])}",
                       f"{column} < {rng.choice(['0', '1', '0.5'])}", f"{column} IS NULL",
                       f"{column} BETWEEN 0 AND 1"])


# ---------------------------------------------------------------- the reference

# The guards of docs/privacy.md §3.6 (proxy.analyze.expressions), restated here.
SNAP = 2.0 ** -450      # operands of * and dividends: (v + SNAP) - SNAP
LOG_FLOOR = 2.0 ** -1022  # ln(v) is ln(|v| + LOG_FLOOR)
_INTEGERS = {exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
             exp.DataType.Type.BIGINT}


def _snap(v):
    return None if v is None else (v + SNAP) - SNAP


def _half_even(v):
    return float(round(v))


def _half_away(v):
    return float(math.copysign(math.floor(abs(v) + 0.5), v))


ROUND = {"postgres": _half_even, "duckdb": _half_away, "sparkexact": _half_away}
CAST_INT = {"postgres": _half_even, "duckdb": _half_even,
            "sparkexact": lambda v: float(math.trunc(v))}


@dataclass
class _Ref:
    value: float | None
    integer: bool


def reference(tree: exp.Expression, row: dict, dialect: str) -> float | None:
    """The value of the analyst's expression on one raw row, by the guarded semantics."""
    return _ref(tree, row, dialect).value


def _ref(node: exp.Expression, row: dict, dialect: str) -> _Ref:  # noqa: C901, PLR0911, PLR0912
    of = lambda child: _ref(child, row, dialect)  # noqa: E731
    columns = RULES.tables[TABLE].columns
    if isinstance(node, exp.Paren):
        return of(node.this)
    if isinstance(node, exp.Sub) and _moment_of(node.this, row) is not None:  # days
        days = [_moment_of(side, row) for side in (node.this, node.expression)]
        if any(day[1] is None for day in days):
            return _Ref(None, True)
        return _Ref(float((days[0][1].date() - days[1][1].date()).days), True)
    if isinstance(node, exp.Column):
        column = columns[node.name]
        value = clamp_to_domain(row[node.name], column.lower, column.upper)
        return _Ref(value, column.type == "int")
    if isinstance(node, exp.Literal):
        return _Ref(float(Decimal(node.name)), not any(c in node.name for c in ".eE"))
    if isinstance(node, exp.Null):
        return _Ref(None, True)
    if isinstance(node, exp.Neg):
        inner = of(node.this)
        return _Ref(None if inner.value is None else -inner.value, inner.integer)
    if isinstance(node, exp.Abs):
        inner = of(node.this)
        return _Ref(None if inner.value is None else abs(inner.value), inner.integer)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        left, right = of(node.this), of(node.expression)
        integer = left.integer and right.integer
        a, b = left.value, right.value
        if isinstance(node, exp.Mul):
            a, b = _snap(a), _snap(b)
        if a is None or b is None:
            return _Ref(None, integer)
        if isinstance(node, exp.Add):
            return _Ref(a + b, integer)
        if isinstance(node, exp.Sub):
            return _Ref(a - b, integer)
        return _Ref(a * b, integer)
    if isinstance(node, exp.Div):
        left, right = of(node.this), of(node.expression)
        integer = left.integer and right.integer
        a = _snap(left.value)
        if a is None or right.value is None:
            return _Ref(None, integer)
        quotient = a / right.value
        if integer:
            quotient = _whole(quotient, lambda v: float(math.trunc(v)))
        return _Ref(quotient, integer)
    if isinstance(node, exp.Sqrt):
        inner = of(node.this)
        return _Ref(None if inner.value is None else math.sqrt(abs(inner.value)), False)
    if isinstance(node, exp.Ln):
        inner = of(node.this)
        value = inner.value
        return _Ref(None if value is None else math.log(abs(value) + LOG_FLOOR), False)
    if isinstance(node, exp.Pow):  # of the snapped operand, as *
        value = _snap(of(node.this).value)
        return _Ref(None if value is None else value * value, False)
    if isinstance(node, exp.Log):  # ln over the constant ln(base); LOG(x) is base 10
        argument, base = ((node.this, 10.0) if node.expression is None
                          else (node.expression, of(node.this).value))
        value = of(argument).value
        return _Ref(None if value is None or base is None
                    else math.log(abs(value) + LOG_FLOOR) / math.log(base), False)
    if isinstance(node, exp.Exp):
        value = of(node.this).value
        return _Ref(None if value is None else math.exp(value), False)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Predicate):
        condition = node.this
        if not isinstance(condition, exp.Is) and row[condition.this.name] is None:
            return _Ref(None, True)
        return _Ref(1.0 if _holds(condition, row) else 0.0, True)
    if isinstance(node, exp.Cast):
        inner = of(node.this)
        if node.to.this in _INTEGERS:
            return _Ref(_whole(inner.value, CAST_INT[dialect]), True)
        return _Ref(inner.value, False)
    if isinstance(node, (exp.Floor, exp.Ceil, exp.Round, exp.Trunc)):
        inner = of(node.this)
        function = {exp.Floor: lambda v: float(math.floor(v)),
                    exp.Ceil: lambda v: float(math.ceil(v)),
                    exp.Trunc: lambda v: float(math.trunc(v)),
                    exp.Round: ROUND[dialect]}[type(node)]
        return _Ref(_whole(inner.value, function), True)
    if isinstance(node, (exp.Least, exp.Greatest)):
        values = [of(a) for a in [node.this, *node.expressions]]
        present = [v.value for v in values if v.value is not None]
        pick = min if isinstance(node, exp.Least) else max
        return _Ref(pick(present) if present else None, all(v.integer for v in values))
    if isinstance(node, exp.Coalesce):
        values = [of(a) for a in [node.this, *node.expressions]]
        return _Ref(next((v.value for v in values if v.value is not None), None),
                    all(v.integer for v in values))
    if isinstance(node, exp.Nullif):
        value, other = of(node.this), of(node.expression)
        equal = value.value is not None and other.value is not None \
            and value.value == other.value
        return _Ref(None if equal else value.value, value.integer)
    if isinstance(node, exp.Extract) and node.this.name.lower() == "epoch":
        inner = node.expression.unnest()
        sides = [inner.this, inner.expression] if isinstance(inner, exp.Sub) else [inner]
        moments = [_moment_of(side, row)[1] for side in sides]
        if any(moment is None for moment in moments):
            return _Ref(None, False)
        seconds = [(moment - _EPOCH).total_seconds() for moment in moments]
        return _Ref(seconds[0] - (seconds[1] if len(seconds) > 1 else 0.0), False)
    if isinstance(node, exp.Extract):  # the field of the moment clamped to the domain
        moment = _moment_of(node.expression, row)[1]
        if moment is None:
            return _Ref(None, False)
        return _Ref(float(_FIELD[node.this.name.lower()](moment)), False)
    if isinstance(node, exp.Case):
        branches = [(i.this, i.args["true"]) for i in node.args.get("ifs", [])]
        default = node.args.get("default")
        refs = [of(b) for _, b in branches] + ([of(default)] if default is not None else [])
        integer = all(r.integer for r in refs)
        for (condition, _), ref in zip(branches, refs):
            if _holds(condition, row):
                return _Ref(ref.value, integer)
        return _Ref(refs[-1].value if default is not None else None, integer)
    raise AssertionError(f"no reference for {node.sql()}")


def _moment_of(node: exp.Expression, row: dict) -> tuple[str, dt.datetime | None] | None:
    """(kind, moment) of a time operand: the column clamped to its domain, its
    fraction of a second cut (what the guarded SQL reads: whole seconds), or a constant;
    a cast to date is its midnight. None for a number."""
    node = node.unnest()
    day = False
    while isinstance(node, exp.Cast) and node.to.this in (
            exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP):
        day = day or node.to.this == exp.DataType.Type.DATE
        node = node.this.unnest()
    if isinstance(node, exp.Literal) and node.is_string:
        moment = dt.datetime.fromisoformat(node.name)
    elif isinstance(node, exp.Column) and node.name == "at":
        raw = row["at"]
        if raw is None:
            return ("day" if day else "moment"), None
        first, last = RULES.tables[TABLE].columns["at"].time_domain
        moment = min(max(raw, first), last).replace(microsecond=0)
    else:
        return None
    if day:
        moment = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return ("day" if day else "moment"), moment


def _whole(value, function):
    return None if value is None else function(value)


def _holds(condition: exp.Expression, row: dict) -> bool:
    """A CASE condition on the raw row, as the engines evaluate it (NaN above every
    number, NULL meets nothing)."""
    if isinstance(condition, exp.Paren):
        return _holds(condition.this, row)
    if isinstance(condition, exp.Is):
        return row[condition.this.name] is None
    raw = row[condition.this.name]
    if raw is None:
        return False
    key = (1, 0.0) if isinstance(raw, float) and math.isnan(raw) else (0, raw)
    if isinstance(condition, exp.Between):
        low, high = (float(Decimal(condition.args[k].name)) for k in ("low", "high"))
        return (0, low) <= key <= (0, high)
    limit = (0, float(Decimal(_number(condition.expression))))
    return key > limit if isinstance(condition, exp.GT) else key < limit


def _number(node: exp.Expression) -> str:
    return f"-{node.this.name}" if isinstance(node, exp.Neg) else node.name


# ---------------------------------------------------------------- one expression on one backend

AGGREGATES = ("SUM", "MAX", "MIN", "MEDIAN", "COUNT")


@dataclass
class Outcome:
    refused: int = 0
    admitted: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, sql, detail)

    def add(self, other: Outcome) -> None:
        self.refused += other.refused
        self.admitted += other.admitted
        self.failures += other.failures


def analysed(sql: str, rules, settings: Settings, label: str, outcome: Outcome,
             refused: type[Exception] = NotSupported):
    """``sql``'s plan as a session checks it before any debit (admitted, counted), or
    None: ``refused`` (counted), or a crash of the analysis (a finding, under ``label``)."""
    try:
        plan = analyze(parse_statements(sql)[0], rules, settings)
        refuse_unanswerable(plan)
    except refused:
        outcome.refused += 1
        return None
    except Exception as exc:  # noqa: BLE001 -- an analysis that crashes is a finding
        outcome.failures.append(("analysis", label, f"{type(exc).__name__}: {exc}"))
        return None
    outcome.admitted += 1
    return plan


def check(text: str, table_rows: list[dict], engine, dialect: str,
          close: float = 1e-9, paired: bool = False) -> Outcome:
    """Analyse ``SUM(text), MAX, MIN, MEDIAN, COUNT`` over the adversarial table and, when
    admitted, run the per-row values and the engine's statistics on its backend (and,
    ``paired``, CORR's: ``check_paired``)."""
    outcome = Outcome()
    sql = "SELECT " + ", ".join(f"{a}({text})" for a in AGGREGATES) + f" FROM {TABLE}"
    plan = analysed(sql, RULES, Settings(), text, outcome)
    if plan is None:
        return outcome
    column = plan.table.columns[plan.aggregates[0].column]
    if not isinstance(column, DerivedColumn):  # a constant's aggregate reads no value
        return outcome
    low = -MAGNITUDE_CAP if column.lower is None else column.lower
    high = MAGNITUDE_CAP if column.upper is None else column.upper
    value = needed_value(plan.table, ColumnNeeds(column.name, lower=column.lower,
                                                 upper=column.upper))
    columns = plan.table.columns
    raw = column.render(lambda name: clamped_to_domain(exp.column(name, quoted=True),
                                                columns[name].lower, columns[name].upper))
    select = exp.select(exp.column("id"), exp.alias_(value, "v"), exp.alias_(raw, "r")
                        ).from_(TABLE).order_by("id")
    try:
        got = {key: (v, r) for key, v, r in engine.backend.read(select.sql(dialect=dialect))}
    except ProxyError as exc:
        outcome.failures.append(("error", text, f"per-row values: {exc}"))
        return outcome
    tree = sqlglot.parse_one(text, read="postgres")
    # The analysis's bounds, which must hold for what the SQL computes before the final
    # clamp (an end clamped to ±MAGNITUDE_CAP bounds nothing beyond it)
    proven = (-math.inf if column.lower in (None, -MAGNITUDE_CAP) else column.lower,
              math.inf if column.upper in (None, MAGNITUDE_CAP) else column.upper)
    for row in table_rows:
        value, computed = (None if v is None else float(v) for v in got[row["id"]])
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            outcome.failures.append(("domain", text, f"row {row}: {value} not in "
                                     f"[{low}, {high}]"))
            break
        if computed is not None and not (math.isfinite(computed)
                                         and proven[0] <= computed <= proven[1]):
            outcome.failures.append(("bound", text, f"row {row}: the SQL computes "
                                     f"{computed}, outside the derived domain {proven}"))
            break
        unclamped = reference(tree, row, dialect)
        expected = clamp_to_domain(unclamped, column.lower, column.upper)
        if not (_same(value, expected, close) and _same(computed, unclamped, close)):
            outcome.failures.append(("differential", text, f"row {row}: backend {value} "
                                     f"({computed} unclamped), reference {expected} "
                                     f"({unclamped} unclamped)"))
            break
    try:
        _, groups, _ = engine.statistics(plan)
    except ProxyError as exc:
        outcome.failures.append(("error", text, f"statistics: {exc}"))
        return outcome
    for group in groups.values():
        for stats in group.columns.values():
            numbers = [stats.total, stats.m2, *(v for v in stats.values.values()
                                                if v is not None)]
            ranked = [v for v in stats.values.values() if v is not None]
            if not all(math.isfinite(v) for v in numbers) or not all(
                    low <= v <= high for v in ranked):
                outcome.failures.append(("statistics", text, f"{stats}"))
    if column.lower is not None and column.upper is not None and paired:
        outcome.add(check_paired(text, engine))
    return outcome


# the paired aggregates' partners of an expression: a wide domain (products near 10³⁰) and
# a narrow one; the expressions whose paired statements run (each costs two statements
# of the expression's whole SQL: about 0.15 s on DuckDB, so one in 8 adds about 15 %)
PARTNERS = ("b", "x")
PAIRED_EVERY = 8


def check_paired(text: str, engine) -> Outcome:
    """CORR of the expression with a wide column and REGR_SLOPE of a narrow one on it:
    the engine's two statements (units beyond each rung, the sums at the drawn bounds)
    run without error over the adversarial rows, every sum is finite and within its
    bounds, and every released answer is finite."""
    from proxy.privacy.noisy_answers import Calibration, release_group
    from proxy.privacy.sampler import SecureSource

    outcome = Outcome()
    items = [f"CORR({text}, {PARTNERS[0]})", f"REGR_SLOPE({PARTNERS[1]}, {text})"]
    sql = "SELECT " + ", ".join(items) + f" FROM {TABLE}"
    try:
        plan = analyze(parse_statements(sql)[0], RULES, Settings())
        refuse_unanswerable(plan)
    except NotSupported:
        outcome.refused += 1
        return outcome
    try:
        shift, groups, _ = engine.statistics(plan)
        released = release_group(plan, groups[()], Calibration(plan.mechanism.model, shift),
                                 SecureSource())
    except ProxyError as exc:
        outcome.failures.append(("error", text, f"paired statistics: {exc}"))
        return outcome
    for index, sums in groups[()].pairs.items():
        bounded = ((sums.sx, sums.bx), (sums.sy, sums.by), (sums.sxx, sums.bx ** 2),
                   (sums.syy, sums.by ** 2), (sums.sxy, sums.bx * sums.by))
        if not all(0 <= value <= sums.n * bound * (1 + 1e-9) + 1e-6 * sums.n
                   for value, bound in bounded):
            outcome.failures.append(("paired", text, f"{items[index]}: {sums}"))
    if not all(math.isfinite(answer.value) for answer in released):
        outcome.failures.append(("paired", text, f"answers {released}"))
    return outcome


def _same(got: float | None, expected: float | None, close: float) -> bool:
    if got is None or expected is None:
        return got is None and expected is None
    return math.isclose(got, expected, rel_tol=close, abs_tol=1e-300)


def run(engine, dialect: str, table_rows: list[dict], seed: int, count: int,
        depth: int = 4) -> Outcome:
    rng = random.Random(seed)
    total = Outcome()
    for number in range(count):
        text = expression(rng, depth)
        while text in COLUMNS or text in CONSTANTS:  # an operator at the top
            text = expression(rng, depth)
        total.add(check(text, table_rows, engine, dialect,
                        paired=number % PAIRED_EVERY == 0))
    return total


def as_rows(columns: dict[str, list]) -> list[dict]:
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())]
