"""The data owner's rules file (TOML): what is protected, how, and who may ask.

Loaded once at start and validated completely, so that a mistake is reported with the
file, the line and the reason before any analyst connects. Every key is documented in
``rules/README.md``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

from proxy.accounting import ACCOUNTANTS, GAUSSIAN, NOISES, Refresh
from proxy.errors import RulesError
from proxy.loss import parse_epsilon
from proxy.statistics import bound_problem

MODELS = ("idp", "dp")
REPORT_SCALE = ("private", "none", "rounded")
# How iDP noise is scaled: "private" (a scale no data set's values decide: docs/privacy.md
# §2) or "local", raw iDP (noise = LS(D)/ε, the owner's opt-in; docs/threat-model.md)
NOISE_SCALES = ("private", "local")
AUTH_METHODS = ("scram", "trust")
COLUMN_TYPES = ("int", "float", "text", "bool", "date", "timestamp")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The column of a linked table's derived unit (``unit_via``) in the SQL sent: computed
# by the join along the chain (proxy.pushdown.scope.table_rows), never a stored column,
# never one an analyst may name
LINKED_UNIT = "_idp_unit"


@dataclass(frozen=True)
class Link:
    """``unit_via = { column = "table.key" }``: a row belongs to the unit of the one row
    of ``table`` whose ``key`` equals its ``column`` (``key`` unique in ``table``, checked
    at start and enforced in every statement); ``unit`` is that table's unit column in
    the SQL sent (its own column, or ``LINKED_UNIT`` when ``then``, its own link, goes
    on along the chain)."""

    column: str
    table: str
    key: str
    unit: str
    then: Link | None = None

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the chain reads, nearest first."""
        return (self.table, *(self.then.tables if self.then else ()))


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    lower: float | None = None
    upper: float | None = None
    keys: tuple[Any, ...] | None = None
    public: bool = False  # not sensitive: may be copied into a release (--key)
    declared_resolution: float | None = None
    time_domain: tuple[dt.datetime, dt.datetime] | None = None  # date and timestamp columns
    # a property of the unit, the same on all its rows and not protected: neighbours keep
    # it, so GROUP BY over it composes in parallel (docs/privacy.md §3.5)
    unit_attribute: bool = False
    # the column's type as the backend stores it (a PostgreSQL name: "integer"), read from
    # its schema when the engine starts (engine._check_schema); what a released value of
    # it is typed as (proxy.result_types). Not part of the rules' equality.
    stored: str | None = field(default=None, compare=False, repr=False)

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    @property
    def resolution(self) -> float:
        """The smallest difference of values the owner cares about: public, so the
        noise floor and the output grid derived from it reveal nothing about the data
        (SPEC §3.3, §5.3). Declared, else 1 for integers and a millionth of the
        domain's width for floats."""
        if self.declared_resolution is not None:
            return self.declared_resolution
        return 1.0 if self.type == "int" else domain_resolution(self.lower, self.upper)


def domain_resolution(lower: float | None, upper: float | None) -> float:
    """A millionth of the width [lower, upper] (of the larger declared bound's magnitude
    when one is missing), and never below a millionth: a public default resolution."""
    if lower is not None and upper is not None:
        width = upper - lower
    else:
        width = max(abs(bound) for bound in (lower, upper, 1.0) if bound is not None)
    return max(width, 1.0) * 1e-6


@dataclass(frozen=True)
class Table:
    name: str
    public: bool = False
    privacy_unit: str | None = None
    group_size: int = 1
    max_rows_per_unit: int | None = None
    columns: Mapping[str, Column] = field(default_factory=lambda: MappingProxyType({}))
    individual_queries: bool = False  # one unit's value, answered by knowledge refinement
    # public tables: keys (one column, or several together) each of whose values occurs
    # in one row at most
    unique: tuple[tuple[str, ...], ...] = ()
    # public tables: columns each of whose values occurs in at most that many rows
    max_rows_per_key: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Spark: the Parquet files the backend reads the table from (a view in its session)
    location: str | None = None
    # the unit's identity: tables whose identities are equal name the same people and
    # join on their units whatever the columns are called (``unit_of``); by default the
    # unit column's name, as before ``unit_of`` existed
    unit_identity: str | None = None
    # ``unit_via``: the unit is derived through a foreign key (privacy_unit is then
    # LINKED_UNIT, a column of the SQL sent only)
    link: Link | None = None

    @property
    def join_keys(self) -> dict[tuple[str, ...], int]:
        """The keys (one column, or several matched together) a protected table may join
        this public table on, each with the most rows one of its values occurs in: 1 for
        ``unique``, m for ``max_rows_per_key``."""
        return {**dict.fromkeys(self.unique, 1),
                **{(name,): most for name, most in self.max_rows_per_key.items()}}


def key_text(columns: tuple[str, ...]) -> str:
    """A join key as the rules and messages name it: ``code``, or ``(part, supplier)``
    for columns unique together."""
    return columns[0] if len(columns) == 1 else f"({', '.join(columns)})"


@dataclass(frozen=True)
class Defaults:
    model: str = "idp"
    epsilon_per_query: Decimal = Decimal("0.1")
    max_epsilon_per_query: Decimal = Decimal(1)
    min_epsilon_per_query: Decimal = Decimal("0.000001")  # the smallest ε written
    budget_per_analyst: Decimal = Decimal(1)
    report_scale: str = "none"
    noise_scale: str = "private"
    local_sensitivity_floor: float = 0.0
    exact_release: bool = False  # LS = 0 released without noise (an owner's opt-in)
    global_budget: Decimal | None = None  # across all analysts; None: no global limit
    answer_cache: bool = True  # repeats answered from idp.answers (docs/budget.md)
    time_quantum_ms: int = 0  # private answers padded to whole quanta (proxy/timing.py)
    # a repeat within this many ms of the last read of its tables' data version is
    # answered from memory without reading it again (docs/budget.md); 0: read every time
    replay_window_ms: int = 0
    max_groups: int = 10_000  # the most groups one GROUP BY may answer (product of key sets)
    # (ε, δ): GROUP BY a column without declared keys answers the keys a DP partition
    # selection releases (proxy.privacy.partition_selection); None: refused
    delta: Decimal | None = None
    # the accountant (docs/budget.md): "pure" sums ε; "zcdp" records each answer's ρ and
    # a privacy filter keeps every budget's ε at ``accounting_delta`` (proxy.accounting)
    accounting: str = "pure"
    accounting_delta: Decimal | None = None
    noise: str = "laplace"  # of DP's COUNT, SUM and AVG; "gaussian" needs zcdp
    # every budget counts only what was spent in its current window (docs/budget.md)
    budget_refresh: Refresh | None = None


@dataclass(frozen=True)
class ServerLimits:
    """``[server]``: how ``idp-proxy serve`` admits clients."""

    auth: str = "scram"  # "trust" is honoured for loopback clients only
    max_connections: int = 100
    idle_timeout: int = 3600  # seconds without a message before a session ends
    statement_timeout: int = 300  # seconds a statement may run before it is cancelled
    max_message: int = 1 << 20  # bytes; a longer protocol message ends the connection
    max_statement_length: int = 1 << 18  # characters of one query message; longer is refused unread
    authentication_timeout: int = 60  # seconds from connecting to being logged in
    max_pending_connections: int = 64  # connections not yet logged in, at once
    max_connections_per_analyst: int = 50  # sessions of one analyst at once
    catalog_max_rows: int = 100_000  # rows of one catalog (shadow) result
    catalog_timeout: int = 10  # seconds a catalog statement may run
    backend_connections: int = 4  # PostgreSQL: transactions at once, per worker process
    workers: int | None = None  # PostgreSQL: processes serving the port; None: one per core
    start_check_seconds: int = 10  # the start-time rules check's time box; 0: no check
    # PostgreSQL: ms between two reads of the write counters by each worker process; a
    # repeat may be of data up to this and a round trip old (docs/budget.md)
    write_poll_ms: int = 25


@dataclass(frozen=True)
class Rules:
    path: str
    defaults: Defaults
    analysts: Mapping[str, Decimal]
    tables: Mapping[str, Table]
    server: ServerLimits = ServerLimits()
    # analysts' own ``budget_refresh`` (``[analysts.NAME]``), over the defaults'
    refreshes: Mapping[str, Refresh] = field(default_factory=lambda: MappingProxyType({}))

    def budget_of(self, analyst: str) -> Decimal:
        return self.analysts.get(analyst, self.defaults.budget_per_analyst)

    def refresh_of(self, account: str) -> Refresh | None:
        """The refresh window of an analyst's budget (the global one's: the defaults')."""
        return self.refreshes.get(account, self.defaults.budget_refresh)

    def table(self, name: str) -> Table | None:
        return self.tables.get(name.lower())


class _Reader:
    """Walks the parsed TOML, reporting each problem with its dotted key and line."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def fail(self, key: str, reason: str) -> RulesError:
        line = self._line_of(key)
        where = f"{self.path}:{line}" if line else self.path
        return RulesError(f"{where}: [{key}] {reason}")

    def _line_of(self, key: str) -> int | None:
        """Best-effort line of a dotted key: its own line, else the nearest enclosing one."""
        parts = key.split(".")
        for depth in range(len(parts), 0, -1):
            own_header = self._header_line(".".join(parts[:depth]))
            if own_header is not None:
                return own_header + 1
            section = ".".join(parts[: depth - 1])
            start = self._header_line(section) if section else 0
            if start is None:
                continue
            leaf = re.escape(parts[depth - 1])
            for number, line in enumerate(self.lines[start:], start=start + 1):
                if re.match(rf"\s*[\"']?{leaf}[\"']?\s*=", line):
                    return number
        return None

    def _header_line(self, section: str) -> int | None:
        for number, line in enumerate(self.lines):
            if re.match(rf"\s*\[{re.escape(section)}\]", line):
                return number
        return None

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def only_keys(self, table: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> None:
        for name in table:
            if name not in allowed:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, f"unknown key; allowed here: {', '.join(allowed)}")

    def epsilon(self, value: Any, key: str) -> Decimal:
        try:
            return parse_epsilon(value, key)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def choice(self, value: Any, key: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise self.fail(key, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def number(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise self.fail(key, "must be finite")
        return float(value)

    def bound(self, value: Any, key: str) -> float:
        """A declared domain bound: finite and within ±MAGNITUDE_CAP (proxy.statistics),
        so that U − L and every sum of normalised values stay finite."""
        number = self.number(value, key)
        problem = bound_problem(number)
        if problem:
            raise self.fail(key, problem)
        return number

    def positive_int(self, value: Any, key: str, least: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise self.fail(key, f"must be a whole number of at least {least}, got {value!r}")
        return value

    def identifier(self, name: str, key: str) -> str:
        if not _IDENTIFIER.fullmatch(name):
            raise self.fail(key, f"{name!r} is not a plain SQL identifier")
        return name.lower()


def where_declared(rules: Rules, key: str) -> str:
    """``FILE:LINE`` of a dotted key of the rules file (``FILE`` alone when the line is
    not found or the rules were not read from a file): for problems found after
    loading, such as a ``unique`` column the data repeats."""
    try:
        text = Path(rules.path).read_text(encoding="utf-8")
    except OSError:
        return rules.path
    line = _Reader(rules.path, text)._line_of(key)
    return f"{rules.path}:{line}" if line else rules.path


def load_rules(path: str | Path) -> Rules:
    """Read and validate a rules file; raise RulesError naming file, line and reason."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"{path}: cannot read rules file ({exc.strerror})") from None
    return parse_rules(text, path)


def parse_rules(text: str, path: str = "<rules>") -> Rules:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{path}: invalid TOML: {exc}") from None
    reader = _Reader(path, text)
    reader.only_keys(data, "", ("defaults", "analysts", "tables", "server"))
    defaults = _defaults(reader, data.get("defaults", {}))
    analysts = _analysts(reader, data.get("analysts", {}), defaults.budget_per_analyst)
    refreshes = {name: _refresh(reader, entry["budget_refresh"],
                                f"analysts.{name}.budget_refresh")
                 for name, entry in data.get("analysts", {}).items()
                 if "budget_refresh" in entry}
    tables = {
        reader.identifier(name, f"tables.{name}"): _table(reader, name, body)
        for name, body in data.get("tables", {}).items()
    }
    tables = _units(reader, tables, data.get("tables", {}))
    return Rules(path, defaults, MappingProxyType(analysts), MappingProxyType(tables),
                 _server(reader, data.get("server", {})), MappingProxyType(refreshes))


def _refresh(reader: _Reader, value: Any, key: str) -> Refresh:
    try:
        return Refresh.parse(value)
    except ValueError as exc:
        raise reader.fail(key, str(exc)) from None


def _server(reader: _Reader, body: Mapping[str, Any]) -> ServerLimits:
    reader.only_keys(body, "server", tuple(ServerLimits.__dataclass_fields__))
    values: dict[str, Any] = {}
    if "auth" in body:
        values["auth"] = reader.choice(body["auth"], "server.auth", AUTH_METHODS)
    for key in ServerLimits.__dataclass_fields__:
        if key != "auth" and key in body:  # start_check_seconds = 0: no start-time check
            values[key] = reader.positive_int(body[key], f"server.{key}",
                                              0 if key == "start_check_seconds" else 1)
    if values.get("write_poll_ms", 0) > 1000:  # the mark moves every second anyway
        raise reader.fail("server.write_poll_ms", f"must be at most 1000 (ms), got "
                                                  f"{values['write_poll_ms']!r}")
    return ServerLimits(**values)


def _defaults(reader: _Reader, body: Mapping[str, Any]) -> Defaults:
    allowed = tuple(Defaults.__dataclass_fields__)
    reader.only_keys(body, "defaults", allowed)
    base = Defaults()
    values: dict[str, Any] = {}
    if "model" in body:
        values["model"] = reader.choice(body["model"], "defaults.model", MODELS)
    if "report_scale" in body:
        values["report_scale"] = reader.choice(
            body["report_scale"], "defaults.report_scale", REPORT_SCALE
        )
    if "noise_scale" in body:
        values["noise_scale"] = reader.choice(body["noise_scale"], "defaults.noise_scale",
                                              NOISE_SCALES)
    for key in ("epsilon_per_query", "max_epsilon_per_query", "min_epsilon_per_query",
                "budget_per_analyst", "global_budget"):
        if key in body:
            values[key] = reader.epsilon(body[key], f"defaults.{key}")
    for key in ("answer_cache", "exact_release"):
        if key in body:
            values[key] = reader.boolean(body[key], f"defaults.{key}")
    for key in ("time_quantum_ms", "replay_window_ms"):
        if key in body:
            quantum = body[key]
            if isinstance(quantum, bool) or not isinstance(quantum, int) or \
                    not 0 <= quantum <= 60_000:
                raise reader.fail(f"defaults.{key}",
                                  f"must be a whole number of milliseconds from 0 (off) to "
                                  f"60000, got {quantum!r}")
            values[key] = quantum
    if "max_groups" in body:
        values["max_groups"] = reader.positive_int(body["max_groups"], "defaults.max_groups")
    if "delta" in body:
        values["delta"] = _delta(reader, body["delta"], "defaults.delta")
    if "accounting" in body:
        values["accounting"] = reader.choice(body["accounting"], "defaults.accounting",
                                             ACCOUNTANTS)
    if "noise" in body:
        values["noise"] = reader.choice(body["noise"], "defaults.noise", NOISES)
    if "budget_refresh" in body:
        values["budget_refresh"] = _refresh(reader, body["budget_refresh"],
                                            "defaults.budget_refresh")
    if "accounting_delta" in body:
        values["accounting_delta"] = _delta(reader, body["accounting_delta"],
                                            "defaults.accounting_delta")
    if "local_sensitivity_floor" in body:
        floor = reader.number(body["local_sensitivity_floor"], "defaults.local_sensitivity_floor")
        if floor < 0:
            raise reader.fail("defaults.local_sensitivity_floor", "must not be negative")
        values["local_sensitivity_floor"] = floor
    defaults = Defaults(**{**base.__dict__, **values})
    _accountant(reader, defaults)
    if not (defaults.min_epsilon_per_query <= defaults.epsilon_per_query
            <= defaults.max_epsilon_per_query):
        raise reader.fail(
            "defaults.epsilon_per_query",
            f"{defaults.epsilon_per_query} is outside [min_epsilon_per_query, "
            f"max_epsilon_per_query] = [{defaults.min_epsilon_per_query}, "
            f"{defaults.max_epsilon_per_query}]",
        )
    return defaults


def _accountant(reader: _Reader, defaults: Defaults) -> None:
    """zCDP needs its δ (and only zCDP takes one); the (ε, δ) answers of a partition
    selection (``delta``) are not accounted in ρ yet, so the two are not combined."""
    if defaults.accounting == "zcdp":
        if defaults.accounting_delta is None:
            raise reader.fail("defaults.accounting",
                              "\"zcdp\" needs accounting_delta, the δ at which budgets are "
                              "stated as ε (e.g. accounting_delta = 1e-6)")
        if defaults.delta is not None:
            raise reader.fail("defaults.delta",
                              "groups from the data (delta) are (ε, δ) answers, which the "
                              "zcdp accountant does not take yet; use accounting = \"pure\" "
                              "or declare the GROUP BY keys")
    elif defaults.accounting_delta is not None:
        raise reader.fail("defaults.accounting_delta",
                          "is the δ of accounting = \"zcdp\"; the pure accountant takes none")
    if defaults.noise == GAUSSIAN and defaults.accounting != "zcdp":
        raise reader.fail("defaults.noise",
                          "\"gaussian\" is charged by its ρ and needs accounting = \"zcdp\" "
                          "(the pure accountant sums ε, which Gaussian noise has none of)")


def _delta(reader: _Reader, value: Any, key: str) -> Decimal:
    """δ of partition selection: a number strictly between 0 and 1, kept as the decimal
    it was written as (TOML reads ``1e-6`` as a float; its shortest repr is the text)."""
    number = reader.number(value, key)
    if not 0 < number < 1:
        raise reader.fail(key, f"must be a number strictly between 0 and 1 (e.g. 1e-6), got "
                          f"{value!r}")
    return Decimal(repr(number))


def _analysts(
    reader: _Reader, body: Mapping[str, Any], default_budget: Decimal
) -> dict[str, Decimal]:
    analysts = {}
    for name, entry in body.items():
        key = f"analysts.{name}"
        if not isinstance(entry, dict):
            raise reader.fail(key, "must be a table, e.g. [analysts.alice] budget = 1.0")
        reader.only_keys(entry, key, ("budget", "budget_refresh"))
        budget = entry.get("budget")
        analysts[name] = default_budget if budget is None else reader.epsilon(budget, f"{key}.budget")
    return analysts


def _table(reader: _Reader, name: str, body: Any) -> Table:
    key = f"tables.{name}"
    if not isinstance(body, dict):
        raise reader.fail(key, "must be a table")
    reader.only_keys(
        body, key, ("public", "privacy_unit", "group_size", "max_rows_per_unit", "columns",
                    "individual_queries", "unique", "max_rows_per_key", "location",
                    "unit_of", "unit_via", "max_rows_per_link")
    )
    public = reader.boolean(body.get("public", False), f"{key}.public")
    columns = {
        reader.identifier(col, f"{key}.columns.{col}"): _column(reader, key, col, spec)
        for col, spec in body.get("columns", {}).items()
    }
    unit = body.get("privacy_unit")
    if unit is not None:
        if not isinstance(unit, str):
            raise reader.fail(f"{key}.privacy_unit", "must be a column name")
        unit = reader.identifier(unit, f"{key}.privacy_unit")
    group_size = reader.positive_int(body.get("group_size", 1), f"{key}.group_size")
    max_rows = body.get("max_rows_per_unit")
    if max_rows is not None:
        max_rows = reader.positive_int(max_rows, f"{key}.max_rows_per_unit")
        if unit is None and "unit_via" not in body:
            raise reader.fail(f"{key}.max_rows_per_unit", "needs privacy_unit (or "
                              "unit_via) to be set")
    if not public and not columns:
        raise reader.fail(key, "a protected table must declare its columns")
    for column in columns.values():
        if column.unit_attribute and (unit is None or column.name == unit):
            raise reader.fail(f"{key}.columns.{column.name}.unit_attribute",
                              "is for a column of a table with privacy_unit other than the "
                              "unit itself: a property of the unit, the same on all its rows")
    individual = reader.boolean(body.get("individual_queries", False),
                                f"{key}.individual_queries")
    if individual and unit is None:
        raise reader.fail(f"{key}.individual_queries", "needs privacy_unit to be set (an "
                          "individual query names one unit)")
    unique = _unique(reader, f"{key}.unique", body.get("unique", []), public, columns)
    per_key = _max_rows_per_key(reader, f"{key}.max_rows_per_key",
                                body.get("max_rows_per_key", {}), public, columns, unique)
    location = body.get("location")
    if location is not None and (not isinstance(location, str) or not location.strip()):
        raise reader.fail(f"{key}.location", "must be the path or URI of the table's Parquet "
                          'files, e.g. location = "/data/people"')
    return Table(name.lower(), public, unit, group_size, max_rows, MappingProxyType(columns),
                 individual, unique, MappingProxyType(per_key), location)


def _unique(reader: _Reader, key: str, value: Any, public: bool,
            columns: Mapping[str, Column]) -> tuple[tuple[str, ...], ...]:
    """``unique = ["code"]``: keys of a public table whose every value occurs in one row
    at most (checked against the backend at start), so that a protected table joins it
    many-to-one (docs/privacy.md §3.9); a key of several columns, unique together, is a
    list of them (``unique = [["ps_partkey", "ps_suppkey"]]``), matched by a join on
    all of them."""
    if not isinstance(value, list) or not all(
            isinstance(entry, str) or (isinstance(entry, list) and entry and all(
                isinstance(name, str) for name in entry)) for entry in value):
        raise reader.fail(key, 'must be a list of column names (a list of columns for a key '
                          'unique together), e.g. unique = ["code"] or unique = '
                          '[["part", "supplier"]]')
    if value and not public:
        raise reader.fail(key, "is for public tables (set public = true): a protected table "
                          "is joined to public tables on their unique keys")
    keys = tuple(tuple(reader.identifier(name, key)
                       for name in ([entry] if isinstance(entry, str) else entry))
                 for entry in value)
    for names in keys:
        for name in names:
            _declared_join_key(reader, key, name, columns)
    return keys


def _max_rows_per_key(reader: _Reader, key: str, value: Any, public: bool,
                      columns: Mapping[str, Column], unique: tuple[tuple[str, ...], ...]
                      ) -> dict[str, int]:
    """``max_rows_per_key = { kind = 3 }``: columns of a public table whose every value
    occurs in at most that many rows (checked against the backend at start), so that a
    protected table joins it with each of its rows meeting at most m public rows; the
    shift is then multiplied by m (docs/privacy.md §3.9). m = 1 is ``unique``."""
    if not isinstance(value, dict):
        raise reader.fail(key, "must be an inline table of column = most rows per value, "
                          "e.g. max_rows_per_key = { kind = 3 }")
    if value and not public:
        raise reader.fail(key, "is for public tables (set public = true): a protected table "
                          "is joined to public tables on their bounded keys")
    bounds = {}
    for name, most in value.items():
        column = reader.identifier(name, f"{key}.{name}")
        _declared_join_key(reader, key, column, columns)
        if (column,) in unique:
            raise reader.fail(key, f"{column} is listed in unique too (unique is "
                              "max_rows_per_key = 1); declare it once")
        bounds[column] = reader.positive_int(most, f"{key}.{name}")
    return bounds


def _declared_join_key(reader: _Reader, key: str, name: str,
                       columns: Mapping[str, Column]) -> None:
    if name not in columns:
        raise reader.fail(key, f"{name} is not a declared column; declare it in "
                          "[tables.<name>.columns] with its type")


def _column(reader: _Reader, table_key: str, name: str, spec: Any) -> Column:
    key = f"{table_key}.columns.{name}"
    if not isinstance(spec, dict):
        raise reader.fail(key, 'must be an inline table, e.g. { type = "int", domain = [0, 120] }')
    reader.only_keys(spec, key, ("type", "domain", "lower", "upper", "keys", "public",
                                    "resolution", "unit_attribute"))
    col_type = reader.choice(spec.get("type"), f"{key}.type", COLUMN_TYPES)
    lower = upper = time_domain = None
    if "domain" in spec and col_type in ("date", "timestamp"):
        time_domain = _time_domain(reader, f"{key}.domain", spec["domain"])
    elif "domain" in spec:
        domain = spec["domain"]
        if not isinstance(domain, list) or len(domain) != 2:
            raise reader.fail(f"{key}.domain", "must be a list [lower, upper]")
        lower = reader.bound(domain[0], f"{key}.domain")
        upper = reader.bound(domain[1], f"{key}.domain")
    if "lower" in spec:
        lower = reader.bound(spec["lower"], f"{key}.lower")
    if "upper" in spec:
        upper = reader.bound(spec["upper"], f"{key}.upper")
    if (lower is not None or upper is not None) and col_type not in ("int", "float"):
        raise reader.fail(key, "a domain is only meaningful for int, float, date and timestamp "
                          "columns")
    if lower is not None and upper is not None and lower >= upper:
        raise reader.fail(f"{key}.domain", f"lower bound {lower} must be below upper {upper}")
    keys = spec.get("keys")
    if keys is not None:
        if not isinstance(keys, list) or not keys:
            raise reader.fail(f"{key}.keys", "must be a non-empty list of the public key values")
        if len(set(map(repr, keys))) != len(keys):
            raise reader.fail(f"{key}.keys", "lists a value twice")
        keys = tuple(keys)
    public = reader.boolean(spec.get("public", False), f"{key}.public")
    resolution = None
    if "resolution" in spec:
        resolution = reader.number(spec["resolution"], f"{key}.resolution")
        if col_type not in ("int", "float") or resolution <= 0:
            raise reader.fail(f"{key}.resolution", "must be a positive number, for an int or "
                              "float column")
    attribute = reader.boolean(spec.get("unit_attribute", False), f"{key}.unit_attribute")
    return Column(name.lower(), col_type, lower, upper, keys, public, resolution, time_domain,
                  attribute)


def _time_domain(reader: _Reader, key: str, domain: Any) -> tuple[dt.datetime, dt.datetime]:
    """``[first, last]`` of a date or timestamp column: TOML dates or date-times, or ISO
    8601 strings; kept as (naive) date-times, the bounds values are clamped to."""
    if not isinstance(domain, list) or len(domain) != 2:
        raise reader.fail(key, 'must be a list [first, last], e.g. [2024-01-01, 2025-12-31]')
    bounds = []
    for value in domain:
        moment = parse_moment(value)
        if moment is None:
            raise reader.fail(key, f"{value!r} is not a date or date-time (e.g. 2024-01-01 or "
                              "2024-01-01T08:00:00, without a time zone)")
        bounds.append(moment)
    if bounds[0] >= bounds[1]:
        raise reader.fail(key, f"first {bounds[0]} must be before last {bounds[1]}")
    return bounds[0], bounds[1]


# The text of a date or date-time as DuckDB, PostgreSQL and Python all read it: Python's
# fromisoformat alone also reads '20240101', '2024-W01-1', '2024-01-01T00', a decimal
# comma and surrounding blanks, which a backend then failed on after the debit (a
# naive literal is sent as written). A zone, if any, is rewritten away (below); after
# a time it may follow a space, as PostgreSQL reads it and Metabase writes it
# ('2024-02-01 00:00:00.000 -08:00'). At most microseconds: a seventh digit PostgreSQL
# rounds, DuckDB and Python cut, so ``.9999999`` would be another second in one of them.
_OFFSET = r"(?:Z|[+-]\d{2}(?::?\d{2})?)"
_MOMENT_TEXT = re.compile(r"(\d{4}-\d{2}-\d{2})(?:([T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)"
                          rf"(?: ?({_OFFSET}))?|({_OFFSET}))?")


def read_moment(text: str) -> dt.datetime | None:
    """ISO 8601 text of the form ``_MOMENT_TEXT`` takes as a datetime, aware where it
    writes an offset (a date's offset is its midnight's: Python would read
    '2024-02-01+02:00' as 02:00); None for other text."""
    match = _MOMENT_TEXT.fullmatch(text)
    if match is None:
        return None
    day, clock, offset, day_offset = match.groups()
    try:
        return dt.datetime.fromisoformat(f"{day}{clock or 'T00:00'}{offset or day_offset or ''}")
    except ValueError:
        return None


def parse_moment(value: Any, zoned: bool = False) -> dt.datetime | None:
    """A date or naive date-time (a ``datetime``, a ``date`` or ISO 8601 text of the
    form ``_MOMENT_TEXT`` takes) as a naive datetime; None for anything else. A time
    zone (``Z``, ``+02:00``) is refused, unless ``zoned``: then it is dropped and the
    wall clock kept, as PostgreSQL reads such text as a ``date`` or ``timestamp``
    (``2024-01-01T00:00:00+02:00`` compared with a timestamp column is ``2024-01-01
    00:00:00``). Query literals are read so (BI tools send ``…Z``); the rules' domains
    are not."""
    if isinstance(value, str):
        value = read_moment(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and zoned:
            return value.replace(tzinfo=None)
        return value if value.tzinfo is None else None
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    return None


def _units(reader: _Reader, tables: dict[str, Table], bodies: Mapping[str, Any]
           ) -> dict[str, Table]:
    """``unit_of`` and ``unit_via`` resolved across tables (docs/privacy.md §3.13): each
    protected table's unit identity, and each linked table's chain to a unit column
    (``Link``) with its DP bound, the product of the bounds along the chain. A link to
    an undeclared column, to a public table or to one without a unit, a cycle, and a
    ``max_rows_per_link`` without a link stop the proxy here, with the file and line."""
    raw = {name.lower(): body for name, body in bodies.items() if isinstance(body, dict)}
    done: dict[str, Table] = {}

    def target(name: str, key: str, value: Any) -> tuple[Table, str]:
        if not isinstance(value, str) or value.count(".") != 1:
            raise reader.fail(key, f'must name a table\'s column as "table.column", got '
                              f"{value!r}")
        table_name, column = (reader.identifier(part, key) for part in value.split("."))
        other = tables.get(table_name)
        if other is None or other.public:
            raise reader.fail(key, f"{table_name} is not a protected table of these rules")
        if column not in other.columns and column != other.privacy_unit:
            raise reader.fail(key, f"{column} is not a declared column of {table_name}")
        return resolve(table_name, (*seen_stack, name)), column

    seen_stack: tuple[str, ...] = ()

    def resolve(name: str, stack: tuple[str, ...]) -> Table:
        nonlocal seen_stack
        if name in done:
            return done[name]
        if name in stack:
            raise reader.fail(f"tables.{name}", "the units' links form a cycle: "
                              f"{' -> '.join((*stack, name))}; a chain must end at a table "
                              "with its own privacy_unit")
        table, body, key = tables[name], raw.get(name, {}), f"tables.{name}"
        saved, seen_stack = seen_stack, stack
        try:
            table = _unit_of(reader, table, body, key, target)
        finally:
            seen_stack = saved
        done[name] = table
        return table

    for name in tables:
        resolve(name, ())
    return done


def _unit_of(reader: _Reader, table: Table, body: Mapping[str, Any], key: str,
             target) -> Table:
    """``table`` with its unit identity, link and DP bound resolved (``_units``)."""
    of, via, per_link = body.get("unit_of"), body.get("unit_via"), body.get("max_rows_per_link")
    if table.public:
        for name in ("unit_of", "unit_via", "max_rows_per_link"):
            if name in body:
                raise reader.fail(f"{key}.{name}", "is for protected tables")
        return table
    if per_link is not None:
        per_link = reader.positive_int(per_link, f"{key}.max_rows_per_link")
        if via is None:
            raise reader.fail(f"{key}.max_rows_per_link", "needs unit_via (it bounds the "
                              "rows per row of the linked table)")
    if of is not None:
        if table.privacy_unit is None:
            raise reader.fail(f"{key}.unit_of", "needs privacy_unit: the column whose "
                              "values are the other table's units")
        if via is not None:
            raise reader.fail(f"{key}.unit_via", "a table has its own unit column "
                              "(privacy_unit, unit_of) or a link to one (unit_via), not both")
        other, column = target(table.name, f"{key}.unit_of", of)
        if other.link is not None or column != other.privacy_unit:
            raise reader.fail(f"{key}.unit_of", f"{of} is not {other.name}'s privacy_unit; "
                              "unit_of names the privacy_unit of a table that has its own")
        return replace(table, unit_identity=other.unit_identity)
    if via is None:
        return replace(table, unit_identity=table.privacy_unit)
    if table.privacy_unit is not None:
        raise reader.fail(f"{key}.unit_via", "a table has its own unit column (privacy_unit) "
                          "or a link to one (unit_via), not both")
    if not isinstance(via, dict) or len(via) != 1:
        raise reader.fail(f"{key}.unit_via", 'must be one link, e.g. unit_via = { l_orderkey '
                          '= "orders.o_orderkey" }')
    ((column, reference),) = via.items()
    column = reader.identifier(column, f"{key}.unit_via")
    if column not in table.columns:
        raise reader.fail(f"{key}.unit_via", f"{column} is not a declared column of "
                          f"{table.name}; declare it in [{key}.columns]")
    other, referenced = target(table.name, f"{key}.unit_via", reference)
    if other.name == table.name:
        raise reader.fail(f"{key}.unit_via", "a table cannot link to itself")
    if other.privacy_unit is None:
        raise reader.fail(f"{key}.unit_via", f"{other.name} has no privacy_unit nor unit_via: "
                          "the chain reaches no unit")
    if table.individual_queries:
        raise reader.fail(f"{key}.individual_queries", "is not available on a table whose "
                          "unit comes through unit_via")
    link = Link(column, other.name, referenced, other.privacy_unit, other.link)
    bound = table.max_rows_per_unit
    if per_link is not None and other.max_rows_per_unit is not None:
        chained = per_link * other.max_rows_per_unit
        bound = chained if bound is None else min(bound, chained)
    return replace(table, privacy_unit=LINKED_UNIT, unit_identity=other.unit_identity,
                   link=link, max_rows_per_unit=bound)

