"""A release as asked on the command line, checked against the rules and the backend's
schema before any budget is spent (SPEC §3.4: refusals never depend on the data,
except ``--alpha``, which reads the data's maxima and says so)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from proxy.backends.base import Backend
from proxy.errors import BackendFailed, BadSetting, NotSupported, UnknownColumn, UnknownTable
from proxy.loss import parse_epsilon
from proxy.privacy.microaggregation import METHODS, MIN_K, NEEDS_DOMAIN
from proxy.publish.sql import maxima, render
from proxy.rules import Rules, Table
from proxy.statistics import MAGNITUDE_CAP, bound_problem

FORMATS = (".parquet", ".csv")
_DOMAIN = re.compile(r"^([A-Za-z_]\w*)=([^:]+):([^:]+)$")


@dataclass(frozen=True)
class Release:
    """Everything a release needs, validated. ``columns``: as the rules name them;
    ``sources``: each one's (name, PostgreSQL type) as the backend stores it, which the
    release reads and writes (the output keeps the source's names and types);
    ``epsilons``: each column's share; ``domains``: (lower, upper) per column, None
    where the method needs none; ``key``: the key column's stored name."""

    table: Table
    columns: tuple[str, ...]
    sources: tuple[tuple[str, str], ...]
    k: int
    epsilon: Decimal
    epsilons: tuple[Fraction, ...]
    method: str
    domains: tuple[tuple[float | None, float | None], ...]
    key: str | None
    out: str  # a file path, or "table:NAME"

    @property
    def out_table(self) -> str | None:
        return self.out.removeprefix("table:") if self.out.startswith("table:") else None

    def describe(self) -> str:
        """One line for the ledger: what was released, how."""
        return (f"release {self.table.name}({', '.join(self.columns)}) method={self.method} "
                f"k={self.k} epsilon={self.epsilon} to {self.out}")


def prepare(rules: Rules, backend: Backend, table: str, columns: str, k: int, epsilon: str,
            method: str, split: str, alpha: float | None, domains: tuple[str, ...],
            key: str | None, out: str) -> Release:
    """Check every argument; raise a Refused error that says what is allowed instead."""
    if not backend.capabilities.transactional:  # a release writes its work tables into the backend
        raise NotSupported("a release does not run over a Spark backend yet (it writes work "
                           "tables into the backend); release from DuckDB or PostgreSQL")
    declared = _table(rules, table)
    names = _columns(declared, columns)
    if method not in METHODS:
        raise BadSetting(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if k < MIN_K[method]:
        raise BadSetting(f"--k {k} is too small for {method}: it needs k ≥ {MIN_K[method]}")
    try:
        total = parse_epsilon(epsilon)
    except ValueError as exc:
        raise BadSetting(str(exc)) from None
    if total > rules.defaults.max_epsilon_per_query:
        raise BadSetting(f"epsilon {total} is above this proxy's limit of "
                         f"{rules.defaults.max_epsilon_per_query} per release")
    _check_source(backend, declared)
    if key is not None:
        _check_key(declared, key.lower())
    stored = _stored(backend, declared, names + ((key.lower(),) if key is not None else ()))
    sources = stored[:len(names)]
    bounds = _domains(declared, names, method, alpha, domains, backend,
                      [name for name, _ in sources])
    _check_output(backend, out)
    return Release(declared, names, sources, k, total, _split(total, split, len(names)),
                   method, bounds, stored[-1][0] if key is not None else None, out)


def _table(rules: Rules, name: str) -> Table:
    declared = rules.table(name)
    if declared is None:
        raise UnknownTable(f"table {name} is not in the rules; the rules declare: "
                           f"{', '.join(sorted(rules.tables)) or 'no tables'}")
    if declared.public:
        raise NotSupported(f"{declared.name} is public: copy it directly, a release is for "
                           "protected tables")
    if declared.privacy_unit and declared.max_rows_per_unit != 1:
        raise NotSupported(f"a release protects one row; {declared.name} has privacy unit "
                           f"{declared.privacy_unit}, so the rules must declare "
                           "max_rows_per_unit = 1 (one row per unit) for it")
    return declared


def _columns(table: Table, text: str) -> tuple[str, ...]:
    names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    if not names:
        raise BadSetting("--columns needs at least one column, e.g. --columns income,age")
    if len(set(names)) != len(names):
        raise BadSetting("--columns names a column twice")
    for name in names:
        column = table.columns.get(name)
        if column is None:
            raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                                f"{', '.join(table.columns)}")
        if not column.numeric:
            raise NotSupported(f"column {name} is {column.type}; a release masks numeric "
                               "(int or float) columns")
    return names


def _split(total: Decimal, text: str, width: int) -> tuple[Fraction, ...]:
    """``equal`` or one positive weight per column (e.g. ``2,1,1``): ε_a ∝ weight,
    summing to ε (sequential composition over the columns)."""
    if text == "equal":
        weights = [Fraction(1)] * width
    else:
        try:
            weights = [Fraction(part.strip()) for part in text.split(",")]
        except ValueError:
            weights = []
        if len(weights) != width or any(w <= 0 for w in weights):
            raise BadSetting(f"--budget-split takes 'equal' or {width} positive weights, one "
                             "per column, e.g. 2,1,1")
    scale = Fraction(total) / sum(weights)
    return tuple(w * scale for w in weights)


def _domains(table: Table, names, method: str, alpha: float | None, texts, backend,
             stored: list[str]):
    """Per column: --domain, else --alpha's [0, α·max] (the paper's protocol; reads the
    data; the bound at most MAGNITUDE_CAP), else the rules' domain. Only CBLS may go
    without one (it then clamps only to ±MAGNITUDE_CAP). A bound is finite and within
    ±MAGNITUDE_CAP, as in the rules."""
    given = {}
    for text in texts:
        match = _DOMAIN.match(text.replace(" ", ""))
        try:
            lower, upper = float(match.group(2)), float(match.group(3))
        except (AttributeError, ValueError):
            raise BadSetting(f"--domain {text!r}: write it as column=lower:upper, "
                             "e.g. income=0:500000") from None
        name = match.group(1).lower()
        if name not in names or not lower < upper:
            raise BadSetting(f"--domain {text!r}: the column must be one of --columns and "
                             "lower < upper")
        problem = bound_problem(lower) or bound_problem(upper)
        if problem:
            raise BadSetting(f"--domain {text!r}: each bound {problem}")
        given[name] = (lower, upper)
    if alpha is not None and not alpha > 0:
        raise BadSetting("--alpha must be positive, e.g. 1.5")
    maxima = _maxima(backend, table.name, names, stored) if alpha is not None else {}
    bounds = []
    for name in names:
        column = table.columns[name]
        bound = given.get(name) or (
            (0.0, min(alpha * maxima[name], MAGNITUDE_CAP)) if alpha is not None and maxima[name]
            else (column.lower, column.upper))
        if method in NEEDS_DOMAIN and None in bound:
            raise NotSupported(f"{method} needs a domain for {name}: declare domain = [L, U] "
                               f"in the rules, pass --domain {name}=L:U, or use idp-cbls")
        bounds.append(bound)
    return tuple(bounds)


def _maxima(backend: Backend, table: str, names, stored: list[str]) -> dict[str, float]:
    row = backend.read(render(maxima(table, stored), backend.dialect))[0]
    return {name: float(value) if value is not None else None for name, value in zip(names, row)}


def _check_key(table: Table, key: str) -> None:
    column = table.columns.get(key)
    if column is None or not column.public:
        raise NotSupported(f"--key {key}: only a column the rules declare public = true for "
                           f"{table.name} may be copied into a release; public columns: "
                           f"{', '.join(n for n, c in table.columns.items() if c.public) or 'none'}")


def _check_source(backend: Backend, table: Table) -> None:
    """A base table (its rows have an identity), with the declared columns."""
    probe = f'SELECT {backend.row_identity} FROM "{table.name}" LIMIT 0'
    try:
        backend.read(render(probe, backend.dialect))
    except BackendFailed:
        raise NotSupported(f"{table.name} is not a base table of the backend; a release "
                           "reads a table (views have no row identity)") from None


def _stored(backend: Backend, table: Table, names) -> tuple[tuple[str, str], ...]:
    """Each column's (name, type) as the backend stores it: AFNLWGT stays AFNLWGT
    (the rules fold names to lower case), an integer stays an integer."""
    probe = f'SELECT * FROM "{table.name}" LIMIT 0'
    columns, _ = backend.query_with_columns(render(probe, backend.dialect))
    stored = {name.lower(): (name, kind) for name, kind in columns}
    missing = [name for name in names if name not in stored]
    if missing:
        raise UnknownColumn(f"the backend's table {table.name} lacks the declared column(s) "
                            f"{', '.join(missing)}; fix the rules or the table")
    return tuple(stored[name] for name in names)


def _check_output(backend: Backend, out: str) -> None:
    if out.startswith("table:"):
        name = out.removeprefix("table:")
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise BadSetting(f"--out {out!r}: a table name is letters, digits and _")
        try:
            backend.read(f'SELECT 1 FROM "{name}" LIMIT 0')
        except BackendFailed:
            return
        raise BadSetting(f"--out {out!r}: table {name} exists; choose a new name")
    path = Path(out)
    if path.suffix.lower() not in FORMATS:
        raise BadSetting(f"--out {out!r}: write FILE.parquet, FILE.csv or table:NAME")
    if path.exists():
        raise BadSetting(f"--out {out!r} exists; choose a new file")
    if not path.parent.resolve().is_dir():
        raise BadSetting(f"--out {out!r}: folder {path.parent} does not exist")
