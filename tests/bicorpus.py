"""Reading tests/bi/: the SQL that BI tools send, one statement a file, its header
saying where it comes from and what the proxy must do with it (``-- expect: answered``
or ``-- expect: refused SQLSTATE``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "bi"


@dataclass(frozen=True)
class Entry:
    name: str
    sql: str
    expect: str  # "answered" or "refused"
    sqlstate: str | None


def read_entry(path: Path) -> Entry:
    """A corpus file: ``-- key: value`` header lines (continued by ``--   …``), then the
    statement exactly as the tool sends it."""
    lines = path.read_text().split("\n")
    header = 0
    while header < len(lines) and lines[header].startswith("--"):
        header += 1
    fields = {}
    for line in lines[:header]:
        key, _, value = line[2:].strip().partition(":")
        if value and not line.startswith("--  "):
            fields[key] = value.strip()
    sql = "\n".join(lines[header:]).rstrip("\n")
    expect = fields["expect"].split()
    assert expect[0] in ("answered", "refused"), path
    return Entry(path.name, sql, expect[0], expect[1] if len(expect) > 1 else None)
