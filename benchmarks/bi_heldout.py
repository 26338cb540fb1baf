"""A held-out corpus of BI-generated and analyst SQL (issues 32 and 33), checked against
the truth: benchmarks/bi_heldout/, one statement a file, written for this benchmark
(none taken from tests/bi/ or the tests), in the forms Metabase, Grafana, Tableau,
Power BI, Superset, Lightdash, Cube, dbt MetricFlow, dbplyr and Ibis send to
PostgreSQL, plus analysts' SQL. The ibis-*.sql files are Ibis's own output
(``--write-ibis`` regenerates them with the installed ibis-framework).

    python benchmarks/bi_heldout.py [--backend duckdb|postgres] [--epsilon 1] [--only NAME,...]

It serves the demo (rules/demo.toml, budget raised) with ``idp-proxy serve``, sends each
statement over the wire with psycopg after ``SET idp.epsilon = <--epsilon>``, runs the
same SQL directly on the backend database for the truth, and classifies it:

  correct                   answered; the same keys, every value within the tolerance
  wrong                     answered, but a key is missing or a value is off
  refused-but-answerable    refused although the corpus says it may be answered
  refused-correctly         refused, as the corpus says
  answered-but-must-refuse  answered although it must be refused (a leak)
  no-truth                  answered, but the backend itself cannot run the SQL, so it
                            is not judged (on DuckDB a statement with PostgreSQL-only
                            functions is run in sqlglot's DuckDB spelling first)

THE TOLERANCE (fixed before any result was seen). Rows are matched on the key columns the
file's ``-- keys:`` header names (output positions; none: rows matched in order). Every
key of the truth must be in the answer; an extra answer row (a public key whose group is
empty in SQL) is accepted only if each of its numbers is NULL or within the column's
absolute floor of 0 (below). A non-numeric cell must be equal (timestamps compared in UTC,
dates as midnight). A numeric cell with true value t and answer a is correct when

    |a - t| <= max(B, 0.10 * |t|, 0.01 * M)

where B is the 95 % error bound the proxy's NOTICE gives for that column (its widest, if
several; 0 when none is given — the demo's iDP rules report none), 0.10 * |t| a 10 %
relative tolerance, and M the largest |true value| in that column (an absolute floor of
1 % of the column's scale, for values near 0). NULL matches only NULL.

Beside it, for the statements judged wrong that hold MAX or MIN, the line says whether
every MAX/MIN cell lies between the data's 1 % quantile and its extreme (issue 32's own
goal for MAX and MIN: within the top or bottom 1 % of the data), the rest judged as
above; the totals do not change.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import math
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import sqlglot
from sqlglot import exp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = Path(__file__).resolve().parent / "bi_heldout"
RELATIVE, FLOOR = 0.10, 0.01
SHOW = False  # --show: print each answer, truth and NOTICE


@dataclass(frozen=True)
class Statement:
    name: str
    tool: str
    expect: str  # "answered" or "refused"
    sqlstate: str | None
    keys: tuple[int, ...]  # 0-based output positions
    sql: str


def read(path: Path) -> Statement:
    """A corpus file: ``-- key: value`` header lines, then the statement as sent."""
    lines = path.read_text().split("\n")
    header = 0
    while header < len(lines) and lines[header].startswith("--"):
        header += 1
    fields = {}
    for line in lines[:header]:
        key, _, value = line[2:].strip().partition(":")
        fields[key.strip()] = value.strip()
    expect = fields["expect"].split()
    assert expect[0] in ("answered", "refused") and fields["tool"] and fields["why"], path
    keys = tuple(int(k) - 1 for k in fields.get("keys", "").split(",") if k.strip())
    return Statement(path.stem, fields["tool"], expect[0], expect[1] if len(expect) > 1 else None,
                     keys, "\n".join(lines[header:]).strip())


def corpus() -> list[Statement]:
    return [read(path) for path in sorted(CORPUS.glob("*.sql"))]


# -- comparing ----------------------------------------------------------------------------

def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, decimal.Decimal)):
        return float(value)
    return None


def _key(value):
    """A key cell comparable across drivers: numbers as rounded floats, dates and
    timestamps as naive UTC datetimes."""
    number = _number(value)
    if number is not None:
        return round(number, 6)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    return value


def bounds_of(notices: list[str]) -> dict[str, float]:
    """Column -> the 95 % bound of a NOTICE's "95% error bound a ±1.2, b ±3 (widest)"."""
    found: dict[str, float] = {}
    for text in notices:
        match = re.search(r"95% error bound (.*?)(?:; |$)", text)
        if not match:
            continue
        for part in match.group(1).split(", "):
            name, _, rest = part.rpartition(" ±")
            try:
                found[name] = float(rest.split()[0])
            except (ValueError, IndexError):
                pass
    return found


def judge(statement: Statement, columns: list[str], answer: list[tuple], truth: list[tuple],
          bounds: dict[str, float]) -> tuple[bool, str]:
    """(correct, why) under the tolerance in the module's docstring; "correct" answers
    that pass only thanks to B are marked "(by B)" in the why."""
    ok, why = _judge(statement, columns, answer, truth, bounds)
    if ok and bounds and not _judge(statement, columns, answer, truth, {})[0]:
        why += " (by B: outside 10 % / 1 % without the bound)"
    return ok, why


def _judge(statement: Statement, columns: list[str], answer: list[tuple], truth: list[tuple],
           bounds: dict[str, float]) -> tuple[bool, str]:
    width = len(truth[0]) if truth else len(columns)
    if answer and len(answer[0]) != width:
        return False, f"{len(answer[0])} columns, truth has {width}"
    scale = [max((abs(_number(row[i]) or 0.0) for row in truth), default=0.0) for i in range(width)]
    bound = [bounds.get(name, 0.0) for name in columns] + [0.0] * width

    def tolerance(i: int, t: float) -> float:
        return max(bound[i], RELATIVE * abs(t), FLOOR * scale[i])

    keys = statement.keys
    if keys:
        true_rows = {tuple(_key(row[k]) for k in keys): row for row in truth}
        got_rows = {tuple(_key(row[k]) for k in keys): row for row in answer}
        missing = [k for k in true_rows if k not in got_rows]
        if missing:
            return False, f"{len(missing)} of {len(true_rows)} groups missing, e.g. {missing[0]}"
        for extra in (k for k in got_rows if k not in true_rows):
            for i, value in enumerate(got_rows[extra]):
                number = _number(value)
                if i not in keys and number is not None and abs(number) > max(bound[i], FLOOR * scale[i]):
                    return False, f"extra group {extra}: {columns[i]} = {number:.4g} (empty in SQL)"
        pairs = [(got_rows[k], true_rows[k], k) for k in true_rows]
    else:
        if len(answer) != len(truth):
            return False, f"{len(answer)} rows, truth has {len(truth)}"
        pairs = [(a, t, i) for i, (a, t) in enumerate(zip(answer, truth))]
    worst, cells, off = 0.0, 0, []
    for got, true, where in pairs:
        for i in range(width):
            if i in keys:
                continue
            cells += 1
            a, t = got[i], true[i]
            if a is None or t is None:
                if not (a is None and t is None):
                    off.append(f"{columns[i]} at {where}: {a!r}, truth {t!r}")
                continue
            na, nt = _number(a), _number(t)
            if na is None or nt is None:
                if _key(a) != _key(t):
                    off.append(f"{columns[i]} at {where}: {a!r}, truth {t!r}")
                continue
            if math.isnan(na) or abs(na - nt) > tolerance(i, nt):
                off.append(f"{columns[i]} at {where}: {na:.6g}, truth {nt:.6g} "
                           f"(tol {tolerance(i, nt):.3g})")
            elif nt:
                worst = max(worst, abs(na - nt) / abs(nt))
    if off:  # every cell must be within; how many were not is told
        return False, f"{len(off)} of {cells} values outside; {off[0]}"
    return True, f"{len(pairs)} rows, worst rel. err {100 * worst:.1f} %"


def extremes_at_one_percent(sql: str, dialect: str) -> str | None:
    """The statement with each MAX(x) read as the data's 99th percentile of x and each
    MIN(x) as its 1st (PERCENTILE_DISC: a value of the data), or None without either:
    issue 32's own goal for MAX and MIN is an answer within the top or bottom 1 % of the
    data, a looser rule than this corpus's 10 %, reported beside it."""
    tree = sqlglot.parse_one(sql, read="postgres")
    if not any(tree.find_all(exp.Max, exp.Min)):
        return None

    def quantile(node):
        if isinstance(node, (exp.Max, exp.Min)) and not node.expressions:
            q = 0.99 if isinstance(node, exp.Max) else 0.01
            return exp.WithinGroup(
                this=exp.PercentileDisc(this=exp.Literal.number(q)),
                expression=exp.Order(expressions=[exp.Ordered(this=node.this.copy())]))
        return node
    return tree.transform(quantile).sql(dialect=dialect)


def within_one_percent(statement: Statement, columns: list[str], answer: list[tuple],
                       truth: list[tuple], quantiles: list[tuple],
                       bounds: dict[str, float]) -> bool:
    """The corpus's judgement with one change: a cell the rewrite moved (a MAX or MIN)
    that lies between the data's 1 % quantile and its extreme counts as exact."""
    keys = statement.keys

    def key(row, i):
        return tuple(_key(row[k]) for k in keys) if keys else i
    quantile = {key(row, i): row for i, row in enumerate(quantiles)}
    true = {key(row, i): row for i, row in enumerate(truth)}
    settled = []
    for i, row in enumerate(answer):
        t_row, q_row = true.get(key(row, i)), quantile.get(key(row, i))
        if t_row is None or q_row is None:
            settled.append(row)
            continue
        cells = list(row)
        for j, (a, t, q) in enumerate(zip(row, t_row, q_row)):
            na, nt, nq = _number(a), _number(t), _number(q)
            if None not in (na, nt, nq) and nq != nt and min(nq, nt) <= na <= max(nq, nt):
                cells[j] = t
        settled.append(tuple(cells))
    return _judge(statement, columns, settled, truth, bounds)[0]


# -- running ------------------------------------------------------------------------------

def rules_text() -> str:
    text = (ROOT / "rules" / "demo.toml").read_text()
    text = text.replace('auth = "trust"', 'auth = "trust"\nstatement_timeout = 120', 1)
    return text.replace("budget_per_analyst = 100 ", "budget_per_analyst = 1000000000 ", 1)


def truth_runner(backend: str, url: str, folder: Path):
    if backend == "duckdb":
        import duckdb

        copy = folder / "truth.duckdb"
        shutil.copy(url.removeprefix("duckdb:///"), copy)
        con = duckdb.connect(str(copy))
        con.execute("SET TimeZone = 'UTC'")
        # the tools qualify tables with PostgreSQL's "public" schema; DuckDB's is "main"
        con.execute("CREATE SCHEMA IF NOT EXISTS public")
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables "
                                    "WHERE table_schema = 'main'").fetchall():
            con.execute(f'CREATE VIEW public."{table}" AS SELECT * FROM main."{table}"')

        def run(sql: str):
            try:
                cursor = con.execute(sql.rstrip().rstrip(";"))
            except duckdb.Error:
                # PostgreSQL-only functions (Superset's TO_TIMESTAMP(text, format)): the
                # truth is what the statement means in PostgreSQL, in DuckDB's spelling
                cursor = con.execute(sqlglot.transpile(sql, read="postgres", write="duckdb")[0])
            return [d[0] for d in cursor.description], cursor.fetchall()
        return run
    con = psycopg.connect(url, autocommit=True)
    con.execute("SET TimeZone = 'UTC'")

    def run(sql: str):
        cursor = con.execute(sql)
        return [d.name for d in cursor.description], cursor.fetchall()
    return run


def run_all(backend: str, statements: list[Statement], epsilon: str, folder: Path,
            postgres_url: str | None) -> list[tuple[Statement, str, str]]:
    from tests.factories import demo_database
    from tests.wireserver import running_proxy

    rules = folder / "rules.toml"
    rules.write_text(rules_text())
    results = []
    with demo_database(backend, folder, postgres_url) as url:
        truth = truth_runner(backend, url, folder)
        with running_proxy(rules, url, folder / "home") as proxy:
            con = psycopg.connect(proxy.dsn("alice"), autocommit=True)
            notices: list[str] = []
            con.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            con.execute(f"SET idp.epsilon = {epsilon}")
            for st in statements:
                notices.clear()
                started = time.monotonic()
                try:
                    cursor = con.execute(st.sql)
                    columns = [d.name for d in cursor.description]
                    rows = cursor.fetchall()
                    error = None
                except psycopg.Error as exc:
                    error = (exc.sqlstate or "?????", (exc.diag.message_primary or str(exc)).splitlines()[0])
                    if con.closed:
                        con = psycopg.connect(proxy.dsn("alice"), autocommit=True)
                        con.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
                        con.execute(f"SET idp.epsilon = {epsilon}")
                seconds = time.monotonic() - started
                if error is not None:
                    sqlstate, message = error
                    if st.expect == "refused":
                        note = "" if sqlstate == st.sqlstate else f" (expected {st.sqlstate})"
                        results.append((st, "refused-correctly", f"{sqlstate}{note}: {message}"))
                    else:
                        results.append((st, "refused-but-answerable", f"{sqlstate}: {message}"))
                elif st.expect == "refused":
                    results.append((st, "answered-but-must-refuse", f"{len(rows)} rows"))
                else:
                    try:
                        _, true_rows = truth(st.sql)
                    except Exception as exc:  # the backend cannot run this dialect
                        results.append((st, "no-truth", f"backend: {str(exc).splitlines()[0][:90]}"))
                    else:
                        ok, why = judge(st, columns, rows, true_rows, bounds_of(notices))
                        rewritten = None if ok else extremes_at_one_percent(st.sql, backend)
                        if rewritten and within_one_percent(st, columns, rows, true_rows,
                                                            truth(rewritten)[1],
                                                            bounds_of(notices)):
                            why += " (MAX/MIN within the data's top/bottom 1 %)"
                        results.append((st, "correct" if ok else "wrong", why))
                        if SHOW:
                            print("   answer:", rows[:40], "\n   truth: ", true_rows[:40],
                                  "\n   bounds:", bounds_of(notices), notices)
                print(f"{st.name:46} {results[-1][1]:25} {seconds:6.2f}s  {results[-1][2][:150]}",
                      flush=True)
            con.close()
    return results


CLASSES = ("correct", "wrong", "refused-but-answerable", "refused-correctly",
           "answered-but-must-refuse", "no-truth")


def write_ibis() -> None:
    """Regenerate benchmarks/bi_heldout/ibis-*.sql with the installed Ibis."""
    import ibis
    from ibis import _

    people = ibis.table({"person_id": "int64", "age": "int32", "income": "float64",
                         "region": "string", "sex": "string"}, name="people")
    visits = ibis.table({"visit_id": "int64", "person_id": "int64", "department": "string",
                         "cost": "float64", "days": "int32", "visited_at": "timestamp"},
                        name="visits")
    answered, refused = "answered", "refused 42501"
    exprs = [
        ("count-by-region", "people.group_by('region').aggregate(n=_.count()).order_by('region')",
         people.group_by("region").aggregate(n=_.count()).order_by("region"), answered, "1"),
        ("mean-income-over-60", "people.filter(_.age > 60).aggregate(mean_income=_.income.mean())",
         people.filter(_.age > 60).aggregate(mean_income=_.income.mean()), answered, ""),
        ("monthly-cost", "visits.group_by(month=_.visited_at.truncate('M')).aggregate(sum, count)",
         visits.group_by(month=_.visited_at.truncate("M")).aggregate(
             total_cost=_.cost.sum(), visits=_.count()).order_by("month"), answered, "1"),
        ("department-stats", "visits.group_by('department').aggregate(mean days, std cost, max days)",
         visits.group_by("department").aggregate(mean_days=_.days.mean(), sd_cost=_.cost.std(),
                                                 max_days=_.days.max()), answered, "1"),
        ("median-income-by-sex", "people.group_by('sex').aggregate(median_income=_.income.median())",
         people.group_by("sex").aggregate(median_income=_.income.median()), answered, "1"),
        ("p90-days", "visits.aggregate(p90=_.days.quantile(0.9))",
         visits.aggregate(p90=_.days.quantile(0.9)), answered, ""),
        ("patients-by-department", "visits.group_by('department').aggregate(patients=_.person_id.nunique())",
         visits.group_by("department").aggregate(patients=_.person_id.nunique()), answered, "1"),
        ("age-bucket", "people.mutate(band=_.age.bucket([0, 30, 45, 65, 120], close_extreme=True))",
         people.mutate(band=_.age.bucket([0, 30, 45, 65, 120], close_extreme=True))
         .group_by("band").aggregate(n=_.count()), answered, "1"),
        ("year-department-count", "visits.group_by(year=_.visited_at.year(), department=...)",
         visits.group_by(year=_.visited_at.year(), department=_.department).aggregate(n=_.count()),
         answered, "1,2"),
        ("share-long-stays", "visits.group_by('department').aggregate(share=(_.days > 7).mean())",
         visits.group_by("department").aggregate(share=(_.days > 7).mean()), answered, "1"),
        ("income-brackets", "people.group_by(bracket=ibis.cases(...)).aggregate(n=_.count())",
         people.group_by(bracket=ibis.cases((_.income < 30000, "low"), (_.income < 80000, "mid"),
                                            else_="high")).aggregate(n=_.count()), answered, "1"),
        ("raw-head", "people.filter(_.region == 'north').select('person_id', 'income').limit(20)",
         people.filter(_.region == "north").select("person_id", "income").limit(20), refused, ""),
        ("top-spenders", "visits.group_by('person_id').aggregate(total=sum).order_by(desc).limit(10)",
         visits.group_by("person_id").aggregate(total=_.cost.sum())
         .order_by(ibis.desc("total")).limit(10), refused, ""),
    ]
    for name, code, expr, expect, keys in exprs:
        why = ("Ibis's own compiler output" if expect == answered
               else "Ibis's own compiler output; per-person values: must be refused")
        head = [f"-- tool: Ibis {ibis.__version__}, ibis.to_sql(expr, dialect=\"postgres\") of {code}",
                "-- chart: data frame"] + ([f"-- keys: {keys}"] if keys else []) + [
                f"-- why: {why}", f"-- expect: {expect}"]
        (CORPUS / f"ibis-{name}.sql").write_text(
            "\n".join(head) + "\n" + ibis.to_sql(expr, dialect="postgres").strip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="duckdb", choices=("duckdb", "postgres"))
    parser.add_argument("--epsilon", default="1")
    parser.add_argument("--only", default="", help="statement names, comma-separated")
    parser.add_argument("--write-ibis", action="store_true")
    parser.add_argument("--show", action="store_true", help="print answers, truths, notices")
    args = parser.parse_args()
    global SHOW
    SHOW = args.show
    if args.write_ibis:
        write_ibis()
        return
    statements = corpus()
    if args.only:
        wanted = set(args.only.split(","))
        statements = [s for s in statements if s.name in wanted]
    print(f"$ python benchmarks/bi_heldout.py {' '.join(sys.argv[1:])}")
    print(f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {len(statements)} statements, "
          f"backend {args.backend}, epsilon {args.epsilon}; tolerance max(B95, "
          f"{RELATIVE:.0%} of |truth|, {FLOOR:.0%} of the column's largest |truth|)")
    with tempfile.TemporaryDirectory(prefix="idp-bi-heldout-") as folder:
        if args.backend == "postgres":
            from tests.pgserver import throwaway_postgres

            with throwaway_postgres() as url:
                results = run_all("postgres", statements, args.epsilon, Path(folder), url)
        else:
            results = run_all("duckdb", statements, args.epsilon, Path(folder), None)
    counts = {c: sum(1 for _, k, _ in results if k == c) for c in CLASSES}
    answerable = sum(1 for s, _, _ in results if s.expect == "answered")
    print()
    print(f"totals ({args.backend}, epsilon {args.epsilon}, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}): "
          + ", ".join(f"{c} {n}" for c, n in counts.items()))
    by_bound = sum(1 for _, k, why in results if k == "correct" and "(by B" in why)
    print(f"correct {counts['correct']}/{answerable} answerable ({by_bound} of them only "
          f"within the proxy's own 95 % bound B); leaks {counts['answered-but-must-refuse']}")
    by_tool: dict[str, list[int]] = {}
    for st, kind, _ in results:
        tool = st.name.split("-")[0]
        row = by_tool.setdefault(tool, [0, 0])
        row[0] += kind == "correct"
        row[1] += st.expect == "answered"
    print("by tool: " + ", ".join(f"{t} {c}/{n}" for t, (c, n) in sorted(by_tool.items())))
    at_one = [st.name for st, kind, why in results if kind == "wrong" and "top/bottom 1 %" in why]
    print(f"wrong by the 10 % rule but every MAX/MIN within the data's top/bottom 1 % "
          f"(issue 32's goal for them): {len(at_one)} {', '.join(at_one)}")


if __name__ == "__main__":
    main()
