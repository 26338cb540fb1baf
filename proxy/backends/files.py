"""CSV and Parquet files served directly (issue 36 item 3): ``--backend data.csv``,
``--backend file.parquet`` or ``--backend folder/`` becomes an embedded DuckDB file
beside the data holding an imported copy of each file, one table per file named after
it (its ledger in the SQLite store beside that file, ``DuckDBBackend.ledger_store``).

A copy, not views over ``read_csv``/``read_parquet``: the DuckDB backend is opened with
external access switched off and its configuration locked (SPEC §9, duckdb_backend's
``_HARDENED``), so a view reading a file would fail inside the proxy; and the ledger
needs a database file to live in anyway. The copy is refreshed by the next command or
start after a file's size or modification time changes (the table is replaced; a file
removed from a folder drops its table; the ledger, logins and answer cache in its
store are kept), so budgets survive restarts and edits of the data. A running server
keeps serving the copy it started with."""

from __future__ import annotations

import json
import re
from pathlib import Path

from proxy.errors import ProxyError

SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".parquet")
DATABASE = "idp-proxy.duckdb"  # in a served folder, or <file>.idp-proxy.duckdb beside a file


def is_file_backend(value: str) -> bool:
    """Whether ``--backend`` names data files (a path, not a URL)."""
    if "://" in value:
        return False
    path = Path(value)
    return path.is_dir() or value.lower().endswith(SUFFIXES)


def data_files(value: str) -> tuple[Path, list[Path]]:
    """(the DuckDB file to hold the copy, the data files) of ``--backend PATH``."""
    path = Path(value).resolve()
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.is_file() and p.name.lower().endswith(SUFFIXES))
        if not files:
            raise ProxyError(f"the folder {value} holds no .csv, .tsv or .parquet file", "58P01")
        return path / DATABASE, files
    if not path.is_file():
        raise ProxyError(f"no such data file: {value}", "58P01")
    return path.with_name(path.name + "." + DATABASE), [path]


def table_name(path: Path) -> str:
    """The table of a data file: its name without the suffix, lower case, other
    characters than letters, digits and _ as _ (``Sales 2024.csv`` → ``sales_2024``)."""
    name = path.name
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[:-len(suffix)]
            break
    name = re.sub(r"[^0-9a-z_]", "_", name.lower()) or "data"
    return "t_" + name if name[0].isdigit() else name


def _reader(path: Path) -> str:
    quoted = "'" + str(path).replace("'", "''") + "'"
    if path.name.lower().endswith(".parquet"):
        return f"read_parquet({quoted})"
    return f"read_csv({quoted}, auto_detect = true)"


def import_files(value: str) -> str:
    """Copy the data files of ``--backend PATH`` into their DuckDB file (only those new
    or changed since the last copy); the ``duckdb:///`` URL that serves it."""
    import duckdb

    database, files = data_files(value)
    stamps_path = database.with_name(database.name + ".sources.json")
    try:
        stamps = json.loads(stamps_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stamps = {}
    names: dict[str, Path] = {}
    for path in files:
        name = table_name(path)
        if name in names:
            raise ProxyError(f"{names[name].name} and {path.name} would both be table {name}: "
                             "rename one", "42P07")
        names[name] = path
    wanted = {name: [path.stat().st_size, path.stat().st_mtime_ns]
              for name, path in names.items()}
    changed = [name for name in names if stamps.get(name) != wanted[name]]
    gone = [name for name in stamps if name not in names]  # files removed from a folder
    if changed or gone or not database.exists():
        try:
            con = duckdb.connect(str(database))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():  # a server holds it: it serves the last copy
                return f"duckdb:///{database}"
            raise
        try:
            for name in changed:
                try:
                    con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM '
                                f"{_reader(names[name])}")
                except duckdb.Error as exc:
                    raise ProxyError(f"could not read {names[name]}: {str(exc).splitlines()[0]}",
                                     "22P04") from None
                stamps[name] = wanted[name]
            for name in gone:
                con.execute(f'DROP TABLE IF EXISTS "{name}"')
                del stamps[name]
        finally:
            con.close()
        stamps_path.write_text(json.dumps(stamps), encoding="utf-8")
    return f"duckdb:///{database}"
