"""The embedded demo data: deterministic, synthetic, shaped like an HR/health table.

``people`` has one row per person (row-level and user-level privacy coincide);
``visits`` has several rows per person, so queries over it exercise user-level privacy.
``regions`` is public: one row per region ``code`` (people.region), with its ``name``; the
rules declare ``code`` unique, so people joins it many-to-one.
The numbers are drawn from a fixed seed, so every machine builds the same file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from proxy.backends.duckdb_backend import DuckDBBackend

if TYPE_CHECKING:
    import numpy as np

REGIONS = ("north", "south", "east", "west")
REGION_NAMES = ("Northern district", "Southern district", "Eastern district",
                "Western district")
DEPARTMENTS = ("cardiology", "dermatology", "oncology", "orthopedics", "pediatrics")
SEED = 20170601


def people_columns(n: int = 20_000, seed: int = SEED) -> dict[str, np.ndarray]:
    """Ages skewed toward working years, log-normal incomes, unequal regions."""
    import numpy as np  # here: every command imports this module, few make the demo

    rng = np.random.default_rng(seed)
    age = np.clip(np.round(rng.gamma(shape=4.0, scale=6.0, size=n) + 18), 18, 99).astype(np.int32)
    income = np.round(rng.lognormal(mean=10.6, sigma=0.65, size=n), 2)
    region = np.array(REGIONS, dtype=object)[rng.choice(4, size=n, p=[0.35, 0.3, 0.2, 0.15])]
    sex = np.array(("f", "m"), dtype=object)[rng.integers(0, 2, size=n)]
    return {
        "person_id": np.arange(1, n + 1, dtype=np.int64),
        "age": age,
        "income": income,
        "region": region,
        "sex": sex,
    }


# visited_at lies in this span (rules/demo.toml declares it as the column's domain)
VISITS_FROM, VISITS_DAYS = "2023-01-01T00:00:00", 731


def visits_columns(people: int = 20_000, seed: int = SEED + 1) -> dict[str, np.ndarray]:
    """Zero to six visits per person; costs heavy-tailed; visits in 2023 and 2024, more
    on weekdays and in office hours."""
    import numpy as np  # here: every command imports this module, few make the demo

    rng = np.random.default_rng(seed)
    per_person = np.minimum(rng.poisson(2.2, size=people), 6)
    person_id = np.repeat(np.arange(1, people + 1, dtype=np.int64), per_person)
    count = len(person_id)
    return {
        "visit_id": np.arange(1, count + 1, dtype=np.int64),
        "person_id": person_id,
        "department": np.array(DEPARTMENTS, dtype=object)[rng.integers(0, 5, size=count)],
        "cost": np.round(rng.lognormal(mean=6.0, sigma=1.0, size=count), 2),
        "days": np.minimum(rng.geometric(0.45, size=count) - 1, 60).astype(np.int32),
        "visited_at": _visit_times(rng, count),
    }


def _visit_times(rng: np.random.Generator, count: int) -> np.ndarray:
    import numpy as np

    """Drawn after the other columns, so adding it left them as they were."""
    day = rng.integers(0, VISITS_DAYS, size=count)
    weekend = (day + 6) % 7 >= 5  # 2023-01-01 was a Sunday
    day = np.where(weekend & (rng.random(count) < 0.6), day - 2, day).clip(0, VISITS_DAYS - 1)
    minute = np.clip(rng.normal(13 * 60, 150, size=count), 0, 24 * 60 - 1).astype(np.int64)
    return (np.datetime64(VISITS_FROM) + day.astype("timedelta64[D]")
            + minute.astype("timedelta64[m]")).astype("datetime64[us]")


def add_visit_times(path: Path) -> None:
    """A demo file made before ``visits.visited_at`` existed gains the column, with the
    values a new demo would have (the ledger in the same file is kept)."""
    con = duckdb.connect(str(path))
    try:
        present = [row[0] for row in con.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'visits'").fetchall()]
        if not present or "visited_at" in present:
            return
        columns = visits_columns()
        con.register("frame", {"visit_id": columns["visit_id"],
                               "visited_at": columns["visited_at"]})
        con.execute("ALTER TABLE visits ADD COLUMN visited_at TIMESTAMP")
        con.execute("UPDATE visits SET visited_at = frame.visited_at FROM frame "
                    "WHERE visits.visit_id = frame.visit_id")
        con.unregister("frame")
    finally:
        con.close()


def name_region_columns(path: Path) -> None:
    """A demo file made before ``regions`` was joinable names its columns as the rules
    now declare them: ``region`` → ``code``, ``label`` → ``name`` (same rows)."""
    con = duckdb.connect(str(path))
    try:
        present = {row[0] for row in con.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'regions'").fetchall()}
        for old, new in (("region", "code"), ("label", "name")):
            if old in present and new not in present:
                con.execute(f"ALTER TABLE regions RENAME COLUMN {old} TO {new}")
    finally:
        con.close()


# The columns an older demo file may lack (each added by an upgrade below).
_CURRENT_SQL = ("SELECT table_name, column_name FROM information_schema.columns WHERE "
                "(table_name = 'visits' AND column_name = 'visited_at') OR "
                "(table_name = 'regions' AND column_name IN ('code', 'name'))")


def needs_upgrade(read: Callable[[str], list]) -> bool:
    """Whether an opened demo file predates the current rules, asked through ``read``
    (a backend's ``read``: the file need not be opened a second time); then
    ``upgrade_demo`` brings it up to date."""
    return len(read(_CURRENT_SQL)) < 3


def upgrade_demo(path: Path) -> None:
    """Every upgrade an older demo file needs for the current rules (each a no-op on a
    file that has it)."""
    add_visit_times(path)
    name_region_columns(path)


def demo_path() -> Path:
    """Where the embedded demo database lives (``IDP_PROXY_HOME`` overrides)."""
    home = os.environ.get("IDP_PROXY_HOME") or Path.home() / ".local" / "share" / "idp-proxy"
    return Path(home) / "demo.duckdb"


def open_demo(progress: Callable[[str, float], None] = lambda step, done: None
              ) -> DuckDBBackend:
    """The embedded demo database, created deterministically on first use (``progress``
    hears of each table then)."""
    path = demo_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        create_demo(path, progress)
    return DuckDBBackend(str(path))


def create_demo(path: Path,
                progress: Callable[[str, float], None] = lambda step, done: None) -> None:
    """Write the demo tables into a new DuckDB file (atomically: build, then rename);
    ``progress`` hears of each table (the first use waits for this)."""
    partial = path.with_suffix(".building")
    partial.unlink(missing_ok=True)
    con = duckdb.connect(str(partial))
    try:
        for done, (name, columns) in enumerate((("people", people_columns),
                                                ("visits", visits_columns))):
            progress(f"creating the demo: table {name}", done / 3)
            con.register("frame", columns())
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            con.unregister("frame")
        progress("creating the demo: table regions", 2 / 3)
        rows = ", ".join(f"('{code}', '{name}')" for code, name in zip(REGIONS, REGION_NAMES))
        con.execute(f"CREATE TABLE regions AS SELECT * FROM (VALUES {rows}) v(code, name)")
    finally:
        con.close()
    partial.rename(path)


def regions_columns() -> dict[str, list[str]]:
    """The public regions table (create_demo writes the same rows)."""
    return {"code": list(REGIONS), "name": list(REGION_NAMES)}


def write_spark_demo(session: Any, location: str,
                     progress: Callable[[str, float], None] = lambda step, done: None
                     ) -> dict[str, str]:
    """Write the demo tables through a pyspark ``session`` (the Spark backend's) as
    Parquet folders under ``location`` (a path or URI as the Spark server sees it;
    replaced if there) and return each table's folder: the rules' ``location``, read by
    the Spark backend (a Sail server keeps no table another session created). Same rows
    and column types as the DuckDB demo."""
    import pyarrow as pa

    folders = {}
    for done, (name, columns) in enumerate((("people", people_columns),
                                            ("visits", visits_columns),
                                            ("regions", regions_columns))):
        progress(f"writing the demo through Spark: table {name}", done / 3)
        frame = session.createDataFrame(pa.table(columns()))
        if name == "visits":  # Arrow's zone-less timestamps arrive as Spark's zoned kind
            frame = frame.withColumn("visited_at", frame["visited_at"].cast("timestamp_ntz"))
        folders[name] = f"{location.rstrip('/')}/{name}"
        frame.write.mode("overwrite").parquet(folders[name])
    return folders


def located_rules(text: str, locations: dict[str, str]) -> str:
    """Rules ``text`` with ``location = "…"`` added under each ``[tables.NAME]`` header
    that ``locations`` names."""
    def header(match: re.Match) -> str:
        where = locations.get(match.group(1))
        return match.group(0) + ("" if where is None else f"\nlocation = {json.dumps(where)}")

    return re.sub(r"^\[tables\.(\w+)\]$", header, text, flags=re.MULTILINE)
