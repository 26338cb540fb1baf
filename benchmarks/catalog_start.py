"""What the schema-only catalog (proxy/wire/shadow.py) costs a server: one construction
and close of ``ShadowCatalog`` over ``served_rules()`` (DuckDB, 10 people), N times,
with (``query``) or without (``noquery``) one catalog connection between them.

Prints the medians of the wall time, of this process's and its waited children's CPU
(``cp``, ``pg_ctl``, ``initdb``), and of the catalog's PostgreSQL's CPU (its postmaster
and children, read from /proc before the close: pg_ctl's daemon is no child of ours).

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/catalog_start.py noquery|query [N]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from proxy.backends import open_backend
from proxy.rules import parse_rules
from proxy.wire import shadow
from tests.factories import load_people, served_rules


def _cpu() -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _postgres_cpu(folder: Path) -> float:
    """CPU seconds of the processes whose command line names ``folder``, and their
    children (a catalog's postmaster and its backends)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(folder).encode() not in (entry / "cmdline").read_bytes():
                continue
            pids = [entry.name, *(entry / "task" / entry.name / "children").read_text().split()]
            for pid in pids:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += sum(int(value) for value in fields[11:15]) / tick
        except OSError:
            continue  # gone meanwhile
    return total


def main(mode: str, runs: int) -> None:
    url = f"duckdb:///{tempfile.mkdtemp()}/data.duckdb"
    load_people(url, 10)
    backend = open_backend(url)
    rules = parse_rules(served_rules())
    walls, cpus, postgres = [], [], []
    for _ in range(runs):
        began, used = time.monotonic(), _cpu()
        catalog = shadow.ShadowCatalog(rules, backend, 10)
        if mode == "query":
            catalog.connect("alice", "demo").close()
        postgres.append(_postgres_cpu(catalog._folder))
        catalog.close()
        walls.append(time.monotonic() - began)
        cpus.append(_cpu() - used)
    backend.close()
    middle = runs // 2
    print(f"{mode}: median wall {sorted(walls)[middle]:.3f} s, CPU {sorted(cpus)[middle]:.3f} s "
          f"+ its PostgreSQL {sorted(postgres)[middle]:.3f} s ({runs} runs)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 9)
