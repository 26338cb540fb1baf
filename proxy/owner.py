"""The data owner's side (issue 36): rules drafted from a table, and the declared rules
compared with the data.

Both read the data itself, for the owner only: they run in ``idp-proxy rules draft``,
``idp-proxy rules check`` and at ``idp-proxy serve``'s start, on the owner's terminal
and in the server's log, never through the analyst's path (no session, no wire, no
ledger). Nothing they print is sent to a client."""

from __future__ import annotations

import datetime as dt
import math
import os
import pwd
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sqlglot import exp

from proxy.backends import Backend, open_backend
from proxy.engine import Engine, schema_problems
from proxy.errors import BackendFailed, BackendUnavailable, ProxyError, QueryCanceled, RulesError
from proxy.rules import LINKED_UNIT, Rules, Table
from proxy.session import Session
from proxy.statistics import MAGNITUDE_CAP, bound_problem
from proxy.vocabulary import QueryPlan

_NUMBERS = {"smallint": "int", "integer": "int", "bigint": "int", "real": "float",
            "double precision": "float", "numeric": "float"}
_MOMENTS = {"date": "date", "timestamp": "timestamp", "timestamptz": "timestamp"}
MAX_KEYS = 50  # a text column with at most this many distinct values gets keys
_UNIT_WORDS = ("person", "user", "customer", "patient", "employee", "emp", "member",
               "client", "account", "student", "subject", "participant")
DATA_WARNING = ("drawn from the data: widen it to what you'd accept without looking; "
                "a domain fitted to the data leaks its extremes")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _finite(column: str) -> str:
    """A float column's finite values (NaN sorts above +inf in DuckDB and PostgreSQL)."""
    return f"{column} BETWEEN -1.7e308 AND 1.7e308"


def _toml_key(name: str) -> str:
    return name if name.replace("_", "a").isalnum() and name.isascii() else '"' + name + '"'


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def data_tables(backend: Backend) -> list[str]:
    """The backend's tables and views in its current schema (the proxy's ``idp`` schema
    is another one)."""
    rows = backend.read("SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema = current_schema() ORDER BY table_name")
    return [name for (name,) in rows]


def rule_type(stored: str) -> str:
    """The rules' type of a column the backend stores as ``stored`` (PostgreSQL names):
    a numeric of scale 0 (DECIMAL(18,0) ids, DuckDB's UBIGINT) is an int."""
    base = stored.split("(")[0]
    if base == "numeric" and re.fullmatch(r"numeric\(\d+, ?0\)", stored):
        return "int"
    if base in _NUMBERS:
        return _NUMBERS[base]
    if base in _MOMENTS:
        return _MOMENTS[base]
    return "bool" if base == "boolean" else "text"


def round_outward(low: float, high: float, integer: bool) -> tuple[float, float]:
    """[low, high] widened to round numbers: to a multiple of one significant figure of
    the larger magnitude (ages 18–70 → [10, 70]; salaries 20,000–2,450,000 →
    [0, 3,000,000]); a lower bound within one step of 0 goes to 0."""
    largest = max(abs(low), abs(high))
    if largest == 0:
        return 0, 1
    step = 10.0 ** math.floor(math.log10(largest))
    lower, upper = math.floor(low / step) * step, math.ceil(high / step) * step
    if 0 <= low < step:
        lower = 0
    if upper == lower:
        upper = lower + step
    if integer or step >= 1:
        return int(lower), int(upper)
    digits = max(0, -math.floor(math.log10(step)))
    return round(lower, digits), round(upper, digits)


def _moment_domain(low: Any, high: Any, kind: str) -> tuple[str, str]:
    """Whole years around [low, high], as TOML dates or date-times."""
    first, last = dt.date(low.year, 1, 1), dt.date(high.year, 12, 31)
    if kind == "date":
        return first.isoformat(), last.isoformat()
    return f"{first.isoformat()}T00:00:00", f"{last.isoformat()}T23:59:59"


def _guess_unit(table: str, columns: list[tuple[str, str]]) -> str | None:
    """An id-like column: one named after a person (``emp_id``, ``customer_id``), else
    the first ``*_id`` or ``id``."""
    ids = [name for name, stored in columns
           if (name.lower() == "id" or name.lower().endswith(("_id", "id")))
           and rule_type(stored) in ("int", "text")]
    for name in ids:
        if _personal(name):
            return name
    return ids[0] if ids else None


def _personal(name: str) -> bool:
    return any(word in name.lower() for word in _UNIT_WORDS)


# A table's single-column foreign keys (its column, the table and column it references),
# and its single-column primary and unique keys, as both backends' catalogs list them
_FOREIGN_KEYS = """SELECT f.table_name, f.column_name, p.table_name, p.column_name
FROM information_schema.referential_constraints r
JOIN information_schema.key_column_usage f ON f.constraint_schema = r.constraint_schema
  AND f.constraint_name = r.constraint_name
JOIN information_schema.key_column_usage p ON p.constraint_schema = r.unique_constraint_schema
  AND p.constraint_name = r.unique_constraint_name
WHERE f.table_schema = current_schema() AND (SELECT count(*) FROM
  information_schema.key_column_usage c WHERE c.constraint_schema = r.constraint_schema
  AND c.constraint_name = r.constraint_name AND c.table_name = f.table_name) = 1"""
_UNIQUE_KEYS = """SELECT k.table_name, k.column_name FROM information_schema.table_constraints t
JOIN information_schema.key_column_usage k ON k.constraint_schema = t.constraint_schema
  AND k.constraint_name = t.constraint_name AND k.table_name = t.table_name
WHERE t.table_schema = current_schema() AND t.constraint_type IN ('PRIMARY KEY', 'UNIQUE')
  AND (SELECT count(*) FROM information_schema.key_column_usage c WHERE
  c.constraint_schema = t.constraint_schema AND c.constraint_name = t.constraint_name
  AND c.table_name = t.table_name) = 1"""


@dataclass(frozen=True)
class Keys:
    """What the catalog declares: ``foreign`` (table, column) → (table, column) it
    references; ``unique`` the (table, column) pairs that are a key by themselves."""

    foreign: dict[tuple[str, str], tuple[str, str]]
    unique: frozenset[tuple[str, str]]

    def of(self, table: str) -> set[str]:
        """The table's key columns: ids, whose domain would only tell how many rows."""
        return ({c for t, c in self.foreign if t == table}
                | {c for t, c in self.unique if t == table}
                | {c for t, c in self.foreign.values() if t == table})


def catalog_keys(backend: Backend) -> Keys:
    """The declared keys (none where the backend has no such catalog, as Spark)."""
    try:
        foreign = {(t, c): (rt, rc) for t, c, rt, rc in backend.read(_FOREIGN_KEYS)}
        unique = frozenset((t, c) for t, c in backend.read(_UNIQUE_KEYS))
    except BackendFailed:
        return Keys({}, frozenset())
    return Keys(foreign, unique)


@dataclass(frozen=True)
class Unit:
    """The unit the draft proposes for a table: its own ``column`` (``of``: the other
    table's unit it holds, "table.column", when the names differ), or ``via`` its
    ``column``, a foreign key to "table.column" of a table with a unit."""

    column: str
    of: str | None = None
    via: str | None = None


def proposed_units(columns: dict[str, list[tuple[str, str]]], keys: Keys
                   ) -> dict[str, Unit]:
    """Each drafted table's unit: a column named after a person (``customer_id``) is
    the unit, and names the unit it references (``unit_of``) where it is a foreign key
    to another table's unit of another name; a table without one takes, through a
    foreign key, the unit of the table it references (its own, or ``unit_via`` that
    table: order items through their order); else the first id-like column."""
    guesses = {table: _guess_unit(table, cols) for table, cols in columns.items()}
    found: dict[str, Unit | None] = {}

    def resolve(table: str, seen: frozenset[str]) -> Unit | None:
        if table in found:
            return found[table]
        guess = guesses[table]
        links = [(column, ref) for (t, column), ref in sorted(keys.foreign.items())
                 if t == table and ref[0] in columns and ref[0] not in seen]
        unit = Unit(guess) if guess else None
        if guess and _personal(guess):
            ref = keys.foreign.get((table, guess))
            target = resolve(ref[0], seen | {table}) if ref and ref[0] in columns else None
            if target and target.via is None and target.column == ref[1] != guess:
                unit = Unit(guess, of=target.of or f"{ref[0]}.{ref[1]}")
        else:
            targets = [(column, ref, resolve(ref[0], seen | {table})) for column, ref in links]
            targets = [(column, ref, target) for column, ref, target in targets if target]
            own = [(c, r, t) for c, r, t in targets if t.via is None and t.column == r[1]]
            if own:
                column, ref, target = own[0]
                unit = Unit(column, of=(target.of or f"{ref[0]}.{ref[1]}")
                            if column != ref[1] else target.of)
            elif linked := [(c, r) for c, r, _ in targets if r in keys.unique]:
                column, ref = linked[0]
                unit = Unit(column, via=f"{ref[0]}.{ref[1]}")
        found[table] = unit
        return unit

    return {table: resolve(table, frozenset()) for table in columns}


def _number(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _drawn_bound(backend: Backend, table: str, column: str, key: str, counted: str,
                 dropped: str) -> list[str]:
    """The line of a rows-per-value bound (``max_rows_per_unit``, ``max_rows_per_link``)
    at the 99th percentile of rows per value of ``column``, labelled as drawn from the
    data; none for an empty table."""
    percentile = ("quantile_disc(n, 0.99)" if backend.capabilities.dialect == "duckdb"
                  else "percentile_disc(0.99) WITHIN GROUP (ORDER BY n)")
    (groups, p99, most), = backend.read(
        f"SELECT count(*), {percentile}, max(n) FROM (SELECT count(*) AS n FROM "
        f"{_q(table)} GROUP BY {_q(column)}) t")
    if not groups:
        return []
    return [f"{key} = {int(p99)}   # drawn from the data: the 99th percentile of rows per "
            f"{column} ({groups} {counted}, the most {int(most)} rows){dropped}. Set what "
            "you'd accept without looking"]


def draft_table(backend: Backend, table: str, from_data: bool = True,
                unit: Unit | None = None, ids: frozenset[str] = frozenset(),
                columns: list[tuple[str, str]] | None = None) -> list[str]:
    """The TOML lines of one table's rules, commented: ``unit`` as proposed
    (``proposed_units``), ``ids`` its key columns (no domain)."""
    columns = columns or backend.column_types(table)
    if not columns:
        raise ValueError(f"no table {table} in the backend")
    lines = [f"[tables.{_toml_key(table)}]",
             "# TODO: protected (the safe default). If nothing in this table is about a "
             "person, write public = true."]
    if unit is not None and unit.via is not None:
        lines.append(f"unit_via = {{ {_toml_key(unit.column)} = {_toml_str(unit.via)} }}   "
                     "# a GUESS from its foreign key: each row belongs to the person of the "
                     "row it references (confirm it, or declare a privacy_unit)")
        if from_data:
            lines += _drawn_bound(backend, table, unit.column, "max_rows_per_link", "values",
                                  "")
    elif unit is not None:
        why = "its foreign key" if unit.of else "its name"
        lines.append(f"privacy_unit = {_toml_str(unit.column)}   # a GUESS from {why}: confirm "
                     "it names the person each row is about (or delete it for row-level "
                     "privacy)")
        if unit.of:
            lines.append(f"unit_of = {_toml_str(unit.of)}   # the same people as that table's "
                         "unit, so the two join on them")
        if from_data:
            lines += _drawn_bound(backend, table, unit.column, "max_rows_per_unit", "units",
                                  "; under DP a unit's rows beyond it are dropped")
    lines.append(f"[tables.{_toml_key(table)}.columns]")
    width = max(len(_toml_key(name)) for name, _ in columns)
    for name, stored in columns:
        kind = rule_type(stored)
        spec = f'type = "{kind}"'
        note = ""
        column = _q(name)
        own = unit is not None and name == unit.column
        if name in ids and not own and kind in ("int", "float"):
            note = "  # a key: no domain (its extremes would tell how many rows there are)"
        elif not own and from_data and kind in ("int", "float", "date", "timestamp"):
            where = f" WHERE {_finite(column)}" if kind == "float" else ""
            low, high = backend.read(
                f"SELECT min({column}), max({column}) FROM {_q(table)}{where}")[0]
            if low is not None and kind in ("int", "float"):
                if math.isfinite(float(low)) and math.isfinite(float(high)):
                    lower, upper = round_outward(float(low), float(high), kind == "int")
                    if bound_problem(lower) or bound_problem(upper):
                        note = (f"  # TODO: its values reach {_number(low)}..{_number(high)}, "
                                f"beyond the ±{MAGNITUDE_CAP:.0e} a domain may span (an id? "
                                "then no domain: COUNT and COUNT(DISTINCT) need none)")
                    else:
                        spec += f", domain = [{_number(lower)}, {_number(upper)}]"
                        note = f"  # {DATA_WARNING}"
            elif low is not None:
                first, last = _moment_domain(low, high, kind)
                spec += f", domain = [{first}, {last}]"
                note = f"  # {DATA_WARNING}"
        elif not own and from_data and kind == "text":
            keys = backend.read(f"SELECT DISTINCT {column} FROM {_q(table)} WHERE {column} IS "
                                f"NOT NULL ORDER BY 1 LIMIT {MAX_KEYS + 1}")
            if len(keys) <= MAX_KEYS:
                spec += ", keys = [" + ", ".join(_toml_str(str(k)) for (k,) in keys) + "]"
                note = ("  # drawn from the data: list every value you'd accept without "
                        "looking; a key missing here drops its rows from GROUP BY")
            else:
                note = (f"  # more than {MAX_KEYS} distinct values: no keys (GROUP BY on it "
                        "needs [defaults] delta)")
        elif kind in ("int", "float") and not own:
            note = "  # TODO: domain = [L, U] (needed by every aggregate but COUNT)"
        lines.append(f"{_toml_key(name).ljust(width)} = {{ {spec} }}{note}")
    return lines


def draft(backend: Backend, tables: list[str] | None = None, from_data: bool = True,
          source: str = "") -> str:
    """A rules file for ``tables`` (default: every table), as TOML text that loads."""
    tables = tables or data_tables(backend)
    source = re.sub(r"://([^:/@]*):[^@/]*@", r"://\1@", source)  # never a password
    out = [f"# Rules drafted by `idp-proxy rules draft`{' from ' + source if source else ''} "
           f"on {dt.date.today().isoformat()}.",
           "# Every key is documented in rules/README.md. Lines marked TODO or GUESS are "
           "yours to decide;",
           "# every value \"drawn from the data\" is a fact about the data: replace it with "
           "one you'd",
           "# accept without looking (public knowledge, a standard, a contract). Then run",
           "# `idp-proxy rules check` and `idp-proxy serve`.",
           "",
           "[defaults]",
           'model = "idp"',
           "epsilon_per_query = 0.1",
           "budget_per_analyst = 1.0      # TODO: the total epsilon one analyst may spend",
           "",
           "# [analysts.alice]            # or: idp-proxy users add alice",
           "# budget = 1.0",
           ""]
    columns = {table: backend.column_types(table) for table in tables}
    keys = catalog_keys(backend)
    units = proposed_units({t: c for t, c in columns.items() if c}, keys)
    for table in tables:
        out += draft_table(backend, table, from_data, units.get(table),
                           frozenset(keys.of(table)), columns[table]) + [""]
    return "\n".join(out)


@dataclass(frozen=True)
class Finding:
    """One line of ``rules check`` (and of ``serve``'s log at start). ``error``: the
    proxy would not start, or an analyst's query would fail; else a warning (a narrow
    domain may clip on purpose). ``table`` None: the line names its place itself."""

    table: str | None
    column: str | None
    text: str
    error: bool = False

    def __str__(self) -> str:
        where = f"{self.table}.{self.column}" if self.column else self.table
        return f"rules check: {f'[tables.{where}] ' if where else ''}{self.text}"


def _literal(value: Any) -> str:
    if isinstance(value, (dt.date, dt.datetime)):
        return f"'{value.isoformat(sep=' ')}'"
    return repr(float(value))


def check(rules: Rules, backend: Backend, values: bool = True) -> list[Finding]:
    """The declared rules against the data, for the owner: NULL (and NaN) counts,
    values outside a declared domain, text values missing from ``keys``, units with more
    rows than ``max_rows_per_unit``. Warnings: the owner may mean a rule (a domain narrower than
    the data clamps outliers on purpose). ``values``: with the domains that would hold
    the data and the most rows of a unit (the console leaves them out: counts only)."""
    found = []
    for table in rules.tables.values():
        if table.public:
            continue
        source = _q(table.name)
        # one scan of the table: per column, its counts (and the range of a domain's)
        items: list[str] = []
        asked: list[tuple[str, Any, Any, Any]] = []  # (column, kind, lower, upper)
        for name, column in table.columns.items():
            col = _q(name)
            # NaN (above +inf in both engines' order) is read as NULL, so counted with it
            nan = (f"count(*) FILTER (WHERE {col} > CAST('Infinity' AS FLOAT8))"
                   if column.type == "float" else "0")
            items += [f"count(*) FILTER (WHERE {col} IS NULL)", nan]
            asked.append((name, "nulls", None, None))
            if column.numeric or column.type in ("date", "timestamp"):
                lower, upper = ((column.lower, column.upper) if column.numeric
                                else column.time_domain or (None, None))
                bounds = [(op, bound) for op, bound in (("<", lower), (">", upper))
                          if bound is not None]
                if bounds:
                    outside = " OR ".join(f"{col} {op} {_literal(bound)}"
                                          for op, bound in bounds)
                    # NaN counts as NULL (it sorts above +inf); ±inf are clamped like others
                    if column.type == "float":
                        outside = f"({outside}) AND {col} <= CAST('Infinity' AS FLOAT8)"
                    finite = (f" FILTER (WHERE {_finite(col)})" if column.type == "float"
                              else "")
                    items += [f"count(*) FILTER (WHERE {outside})", f"min({col}){finite}",
                              f"max({col}){finite}"]
                    asked.append((name, "domain", lower, upper))
            if column.keys:
                keys = ", ".join("'" + _key_as_text(k).replace("'", "''") + "'"
                                 for k in column.keys)
                missing = f"{col} IS NOT NULL AND CAST({col} AS TEXT) NOT IN ({keys})"
                items += [f"count(*) FILTER (WHERE {missing})",
                          f"count(DISTINCT {col}) FILTER (WHERE {missing})"]
                asked.append((name, "keys", None, None))
        answers = list(backend.read(f"SELECT {', '.join(items)} FROM {source}")[0]) \
            if items else []
        for name, kind, lower, upper in asked:
            column = table.columns[name]
            if kind == "nulls":
                nulls, nans = answers[:2]
                del answers[:2]
                if nulls or nans:
                    found.append(Finding(table.name, name, _missing_values(
                        nulls + nans, nans, name == table.privacy_unit)))
                continue
            if kind == "keys":
                count, distinct = answers[:2]
                del answers[:2]
                if count:
                    found.append(Finding(table.name, name, (
                        f"{count} rows hold {distinct} values missing from keys: they belong "
                        "to no group of a GROUP BY on it (add the values you'd accept to "
                        "keys)")))
                continue
            count, low, high = answers[:3]
            del answers[:3]
            if count and low is not None:
                if column.numeric:
                    least = min(float(low), lower) if lower is not None else float(low)
                    most = max(float(high), upper) if upper is not None else float(high)
                    wider = round_outward(least, most, column.type == "int")
                    hint = f"; a domain holding them: [{_number(wider[0])}, " \
                           f"{_number(wider[1])}]"
                else:
                    first, last = _moment_domain(low or high, high or low, column.type)
                    hint = f"; the data runs from {first[:4]} to {last[:4]}"
                found.append(Finding(table.name, name, (
                    f"{count} rows lie outside the declared domain "
                    f"[{_shown(lower)}, {_shown(upper)}]: every aggregate clamps them to "
                    f"its bounds{hint if values else ''} (widen it, or keep it to clip on "
                    "purpose)")))
        if table.privacy_unit is not None and table.max_rows_per_unit is not None \
                and table.privacy_unit in _columns(backend, table.name):
            unit = _q(table.privacy_unit)
            units, most = backend.read(
                f"SELECT count(*), max(n) FROM (SELECT count(*) AS n FROM {source} "
                f"GROUP BY {unit} HAVING count(*) > {int(table.max_rows_per_unit)}) t")[0]
            if units:
                found.append(Finding(table.name, None, (
                    f"{units} units of {table.privacy_unit} have more rows than "
                    f"max_rows_per_unit = {table.max_rows_per_unit}"
                    f"{f' (the most: {most})' if values else ''}: under DP their rows "
                    "beyond it are dropped")))
    return found


def _missing_values(count: int, nans: int, unit: bool) -> str:
    """What the owner is told of a column's NULLs (NaN read as NULL), and what follows."""
    what = f"{count} rows are NULL" + (f" or NaN ({nans} NaN, read as NULL)" if nans else "")
    if unit:
        return f"{what}: together they count as one unit, one person's share of an answer"
    return f"{what}: aggregates of the column skip them (COUNT(*) counts them)"


def _key_as_text(key: Any) -> str:
    """A declared key as the backend's CAST(… AS TEXT) writes the value: a bool as
    true or false."""
    return str(key).lower() if isinstance(key, bool) else str(key)


def _shown(bound: Any) -> str:
    if isinstance(bound, dt.datetime) and bound.time() == dt.time():
        return bound.date().isoformat()
    if isinstance(bound, (dt.date, dt.datetime)):
        return bound.isoformat()
    return "none" if bound is None else _number(bound)


def _columns(backend: Backend, table: str) -> set[str]:
    return {name for name, _ in backend.column_types(table)}


def privileges(rules: Rules, backend: Backend) -> list[Finding]:
    """What the proxy must be allowed that the role or user it runs as is not, each
    with the GRANT or command that fixes it: on PostgreSQL SELECT on every declared
    table and the schema ``idp`` (its ledger, logins and answer cache) usable, or the
    right to create it; on DuckDB a folder it may write its journal in (a file it may
    not write does not open: ``DuckDBBackend``). Asked of the catalog: nothing runs."""
    if backend.capabilities.dialect == "duckdb":
        return _duckdb_privileges(getattr(backend, "path", ":memory:"))
    if backend.capabilities.dialect != "postgres":
        return []
    (role, database), = backend.read("SELECT current_user, current_database()")
    names = [exp.to_table(name, quoted=True).sql(dialect="postgres") for name in rules.tables]
    refused = {name for (name,) in backend.read(
        "SELECT name FROM unnest(%s::text[]) AS name "
        "WHERE NOT has_table_privilege(to_regclass(name), 'SELECT')", (names,))}
    found = [Finding(table, None, f"the proxy's database role {role} may not read the "
                     f"table {table}: as its owner, run GRANT SELECT ON {table} TO {role}",
                     error=True)
             for table, name in zip(rules.tables, names) if name in refused]
    (present, usable, creatable), = backend.read(
        "SELECT n.oid IS NOT NULL, has_schema_privilege(n.oid, 'USAGE') AND "
        "has_schema_privilege(n.oid, 'CREATE'), has_database_privilege(current_database(), "
        "'CREATE') FROM (SELECT 1) AS one LEFT JOIN pg_namespace n ON n.nspname = 'idp'")
    if present and not usable:
        found.append(Finding(None, None, f"the proxy's database role {role} may not use the "
                             "schema idp (its ledger, logins and answer cache): as the "
                             f"schema's owner, run GRANT USAGE, CREATE ON SCHEMA idp TO {role}",
                             error=True))
    elif not present and not creatable:
        found.append(Finding(None, None, f"the proxy's database role {role} may not create "
                             "the schema idp (its ledger, logins and answer cache): as the "
                             f"database's owner, run GRANT CREATE ON DATABASE {database} TO "
                             f"{role}, or CREATE SCHEMA idp AUTHORIZATION {role}", error=True))
    return found


def _duckdb_privileges(path: str) -> list[Finding]:
    if path == ":memory:":
        return []
    folder = Path(path).resolve().parent
    if os.access(folder, os.W_OK | os.X_OK):
        return []
    user = pwd.getpwuid(os.geteuid()).pw_name
    return [Finding(None, None, f"DuckDB writes its journal {path}.wal beside the file and "
                    f"the user {user} may not write the folder {folder}: the ledger's writes "
                    f"would fail; as the folder's owner, let {user} write it (chown {user} "
                    f"{folder}), or move the file to a folder {user} may write", error=True)]


def review(rules: Rules, backend: Backend) -> list[Finding]:
    """Everything ``idp-proxy rules check`` tells the owner: the privileges the proxy
    lacks, what in the schema keeps each table's rules from starting it, the rules
    against the data (``check``) and the dry run (``dry_run``) of the tables with no
    such problem; the dry run only if the proxy could start (it opens the ledger)."""
    found = privileges(rules, backend)
    unreadable = {finding.table for finding in found}
    startable = None not in unreadable  # else the proxy could not open its ledger
    for table in rules.tables.values():
        if table.name not in unreadable:
            problems = schema_problems(rules, table, backend)
            found += [Finding(None, None, str(problem), error=True) for problem in problems]
            if problems:
                unreadable.add(table.name)
    usable = replace(rules, tables=MappingProxyType(
        {name: table for name, table in rules.tables.items() if name not in unreadable}))
    found += check(usable, backend)
    if not startable:
        return found
    # a backend without transactions (Spark) keeps no ledger: the dry run, charging
    # nothing, needs only a throwaway one
    store = None if backend.capabilities.transactional else open_backend("duckdb:///:memory:")
    try:
        try:
            engine = Engine(usable, backend, store=store)
        except (ProxyError, RulesError) as exc:  # what the checks above did not foresee
            return found + [Finding(None, None, f"the proxy could not start, so no dry run: "
                                    f"{exc}", error=True)]
        return found + dry_run(engine)
    finally:
        if store is not None:
            store.close()


DRY_RUN_ANALYST = "(rules check)"  # the session's name only: no budget is read or debited


def dry_run(engine: Engine) -> list[Finding]:
    """Every aggregate family on each protected table, planned and pushed down as an
    analyst's query is (the session's analysis, the engine's snapshot, statistics and
    release), with no debit and no answer cache, the answers dropped: nothing charged,
    nothing shown. It finds the rules an analyst would be refused or the backend cannot
    run (a column's stored type the rules' SQL does not fit) before an analyst does.
    Each table's ungrouped aggregates go in one statement, one each only if it fails."""
    session = Session(engine, DRY_RUN_ANALYST)
    found = []
    for table in engine.rules.tables.values():
        if table.public:
            continue
        source = _q(table.name)
        families = _families(table)
        ungrouped = [(column, sql) for column, sql, grouped in families if not grouped]
        together = f"SELECT {', '.join(sql for _, sql in ungrouped)} FROM {source}"
        runs = [] if _failure(session, together) is None else [
            (column, sql, f"SELECT {sql} FROM {source}") for column, sql in ungrouped]
        runs += [(column, f"GROUP BY {_q(column)}", f"SELECT {_q(column)}, {sql} FROM "
                  f"{source} GROUP BY {_q(column)}") for column, sql, grouped in families
                 if grouped]
        # a column's failures of one kind in one line: (column, refused) -> [(what, why)]
        failed: dict[tuple[str | None, bool], list[tuple[str, str]]] = {}
        for column, what, sql in runs:
            failure = _failure(session, sql)
            if failure is not None:
                shown = what.replace('"', '')  # the names as the rules write them
                failed.setdefault((column, failure[0]), []).append((shown, failure[1]))
        for (column, refused), whats in failed.items():
            named = ", ".join(what for what, _ in whats)
            cause = whats[0][1]
            if refused:
                found.append(Finding(table.name, column, f"dry run: {named} "
                                     f"{'is' if len(whats) == 1 else 'are'} refused to "
                                     f"analysts: {cause}"))
                continue
            declared = table.columns.get(column) if column is not None else None
            fix = (f"; make its declared type ({declared.type})"
                   f"{' and keys' if declared.keys else ''} fit how the backend stores the "
                   "column, or cast the column in a view" if declared is not None else "")
            found.append(Finding(table.name, column, f"dry run: {named} "
                                 f"{'fails' if len(whats) == 1 else 'fail'} in the backend "
                                 f"({cause}){fix}", error=True))
    return found


def _families(table: Table) -> list[tuple[str | None, str, bool]]:
    """(column, aggregate, grouped by the column) of every aggregate family: COUNT,
    COUNT(DISTINCT unit), SUM, AVG, a percentile, MAX and MIN of each numeric column
    with a domain (without one they are refused by design: the draft marks it TODO),
    a GROUP BY on each column with keys."""
    families: list[tuple[str | None, str, bool]] = [(None, "COUNT(*)", False)]
    unit = table.privacy_unit if table.privacy_unit not in (None, LINKED_UNIT) else None
    if unit is not None:
        families.append((unit, f"COUNT(DISTINCT {_q(unit)})", False))
    for name, column in table.columns.items():
        col = _q(name)
        if column.numeric and column.lower is not None and column.upper is not None:
            families += [(name, f"{kind}({col})", False) for kind in ("SUM", "AVG", "MAX", "MIN")]
            families.append((name, f"PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY {col})", False))
        if column.keys:
            families.append((name, "COUNT(*)", True))
    return families


def _failure(session: Session, sql: str) -> tuple[bool, str] | None:
    """Why ``sql`` fails as an analyst's query, answered but not charged: (refused to the
    analyst, the reason; else the backend's own error), or None. A cancel and a backend
    out of reach go up: they say nothing of the rules."""
    engine = session.engine
    try:
        for _, plan in session.check(sql):
            if isinstance(plan, QueryPlan):
                with engine.view(plan) as view:
                    engine.answer(plan, view)
    except (QueryCanceled, BackendUnavailable):
        raise
    except BackendFailed as exc:
        return False, _backend_text(exc)
    except ProxyError as exc:
        return True, exc.message
    except RulesError as exc:
        return True, str(exc)
    return None


def _backend_text(exc: BackendFailed) -> str:
    """The backend's own error under ``exc`` (kept from analysts: it is the exception
    the backend's error turned into; the owner may read it), in one line."""
    cause = exc.__context__
    while isinstance(cause, ProxyError):
        cause = cause.__context__
    if cause is None:
        return exc.message
    return " ".join(str(cause).split("\n")[0].split())
