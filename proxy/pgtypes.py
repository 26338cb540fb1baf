"""PostgreSQL's built-in types as the proxy names them: OIDs, names, and the
translations from the rules' column types and DuckDB's type names. One table, read by
the backends (what a result column is), the shadow catalog (its DDL), the engine (what
a released value is) and the wire (which OID a client is told)."""

from __future__ import annotations

import datetime

BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 19, 20, 21, 23, 25, 26
FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR = 700, 701, 705, 1043, 1042
DATE, TIMESTAMP, TIMESTAMPTZ, NUMERIC = 1082, 1114, 1184, 1700
INTERVAL = 1186  # only a difference of two released moments (proxy.postprocess)

NAMES = {BOOL: "boolean", INT2: "smallint", INT4: "integer", INT8: "bigint", TEXT: "text",
         FLOAT4: "real", FLOAT8: "double precision", NUMERIC: "numeric", DATE: "date",
         TIMESTAMP: "timestamp", TIMESTAMPTZ: "timestamptz", VARCHAR: "varchar", OID: "oid",
         INTERVAL: "interval"}
BY_NAME = {name: oid for oid, name in NAMES.items()}

# The one-dimensional arrays of those types: a client's list parameter (``= ANY($1)``)
ARRAYS = {BOOL: 1000, INT2: 1005, INT4: 1007, INT8: 1016, TEXT: 1009, FLOAT4: 1021,
          FLOAT8: 1022, NUMERIC: 1231, DATE: 1182, TIMESTAMP: 1115, TIMESTAMPTZ: 1185,
          VARCHAR: 1015}
ELEMENTS = {array: element for element, array in ARRAYS.items()}

# The rules' column types (rules.COLUMN_TYPES) as PostgreSQL stores and sends them.
RULE_TYPES = {"int": "bigint", "float": "double precision", "text": "text",
              "bool": "boolean", "date": "date", "timestamp": "timestamp",
              "timestamptz": "timestamptz"}  # the last only of a GROUP BY key

_POSTGRES_TYPES = {
    "boolean": "boolean", "tinyint": "smallint", "smallint": "smallint",
    "integer": "integer", "bigint": "bigint", "hugeint": "numeric(39,0)", "float": "real",
    "real": "real", "double": "double precision", "double precision": "double precision",
    "numeric": "numeric", "date": "date", "timestamp": "timestamp",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
    "interval": "interval",
    # DuckDB's unsigned integers, each as the least signed type that holds its range
    # (whole numerics: an owner's draft types them int), and its timestamps of other
    # precisions
    "utinyint": "smallint", "usmallint": "integer", "uinteger": "bigint",
    "ubigint": "numeric(20,0)", "uhugeint": "numeric(39,0)", "timestamp_s": "timestamp",
    "timestamp_ms": "timestamp", "timestamp_ns": "timestamp",
}


def postgres_type(name: str) -> str:
    """The PostgreSQL spelling of a DuckDB or PostgreSQL column type; text otherwise (an
    array, ``DOUBLE[]``, of its element's spelling)."""
    if name.endswith("[]"):
        element = postgres_type(name[:-2])
        return f"{element}[]" if oid_of(element) in ARRAYS else "text"
    base = name.lower().split("(")[0].strip()
    if base == "decimal":
        return "numeric" + name[len("decimal"):]
    return _POSTGRES_TYPES.get(base, "text")


def oid_of(name: str) -> int:
    """The OID of a type named as above (a modifier such as numeric(10,2) ignored; an
    array of a type with one, ``double precision[]``, that array's)."""
    if name.endswith("[]"):
        return ARRAYS.get(oid_of(name[:-2]), TEXT)
    return BY_NAME.get(name.split("(")[0], TEXT)


def interval_parts(value: datetime.timedelta) -> tuple[int, int]:
    """(days, microseconds) of a difference of two moments as PostgreSQL's timestamp
    subtraction gives it (``interval_justify_hours``): whole days, and the rest of less
    than a day, both of the difference's sign."""
    total = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    days, micros = divmod(abs(total), 86_400_000_000)
    sign = -1 if total < 0 else 1
    return sign * days, sign * micros


def interval_text(value: datetime.timedelta) -> str:
    """An interval as PostgreSQL writes it (IntervalStyle postgres): ``730 days
    10:39:00``, ``1 day``, ``-1 days -01:00:00``, ``00:00:00``."""
    days, micros = interval_parts(value)
    parts = [f"{days} day{'' if days == 1 else 's'}"] if days else []
    if micros or not days:
        seconds, fraction = divmod(abs(micros), 1_000_000)
        hours, rest = divmod(seconds, 3600)
        clock = f"{'-' if micros < 0 else ''}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
        parts.append(clock + (f".{fraction:06d}".rstrip("0") if fraction else ""))
    return " ".join(parts)
