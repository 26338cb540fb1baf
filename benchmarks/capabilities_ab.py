"""A change a backend capability gates, before and after side by side: the statistics of
pushdown.py's cases (``engine.statistics``, all the backend computes for an answer) with
the named capabilities off and on in turn, on one server in one process, so that both
see the same load; the plain aggregate beside.

    python benchmarks/capabilities_ab.py --backend sail --rows 10000000 \
        --off extremes_in_pass --off bucketed_ranks [--only MAX] [--repeat 3]

``--backend`` is ``sail`` (pysail, tests/sailserver.py) or ``duckdb``; the ledger is a
DuckDB file beside Sail, as in pushdown.py. Each case runs plain, off, on, ``--repeat``
times over; the medians are printed: the wall-clock time, then the CPU time the backend
spent (Sail: its server process's, from /proc; DuckDB: this process's), which other
work on a shared machine disturbs far less than the wall clock.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.pushdown import _PLAIN, CASES, RULES, load
from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.settings import Settings
from tests import sailserver
from tests.sailserver import throwaway_sail


def backend_cpu() -> float:
    """The CPU seconds the backend has used: the Sail server's (user and system, from
    /proc/PID/stat), else this process's (DuckDB runs in it)."""
    if not sailserver.live:
        return time.process_time()
    (pid,) = sailserver.live.values()
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compare(backend, store, rows: int, off: list[str], only: str | None, repeat: int) -> None:
    load(backend, rows)
    engine = Engine(RULES, backend, store=store)
    modes = {"before": dataclasses.replace(backend.capabilities, **dict.fromkeys(off, False)),
             "after": backend.capabilities}
    print(f"{rows:,} rows, median of {repeat}; before: {', '.join(off)} off")
    print("| case | plain | before | after | plain CPU | before CPU | after CPU |")
    for name, private_sql, plain, *chosen in CASES:
        if only is not None and only not in name:
            continue
        plan = analyze(parse_statements(private_sql)[0], RULES, chosen[0] if chosen else Settings())
        times: dict[str, list[float]] = {"plain": [], "before": [], "after": []}
        cpu: dict[str, list[float]] = {"plain": [], "before": [], "after": []}
        for _ in range(repeat):
            for mode in times:
                if mode != "plain":
                    backend.capabilities = modes[mode]
                start, used = time.perf_counter(), backend_cpu()
                if mode == "plain":
                    backend.query(plain[_PLAIN[backend.dialect]])
                else:
                    engine.statistics(plan)
                times[mode].append(time.perf_counter() - start)
                cpu[mode].append(backend_cpu() - used)
        raw, before, after = (statistics.median(times[k]) for k in ("plain", "before", "after"))
        raw_cpu, before_cpu, after_cpu = (statistics.median(cpu[k])
                                          for k in ("plain", "before", "after"))
        print(f"| {name} | {raw:.3f} s | {before:.3f} s ({before / raw:.1f}×) | "
              f"{after:.3f} s ({after / raw:.1f}×) | {raw_cpu:.2f} s | "
              f"{before_cpu:.2f} s ({before_cpu / max(raw_cpu, 0.01):.1f}×) | "
              f"{after_cpu:.2f} s ({after_cpu / max(raw_cpu, 0.01):.1f}×) |", flush=True)
    engine.ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sail", "duckdb"], default="sail")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--off", action="append", required=True, metavar="CAPABILITY")
    parser.add_argument("--only", help="run the cases whose name contains this word")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.backend == "duckdb":
            backend = open_backend(f"duckdb:///{folder}/bench.duckdb")
            try:
                compare(backend, backend, args.rows, args.off, args.only, args.repeat)
            finally:
                backend.close()
            return
        with throwaway_sail(Path(folder) / "sail") as url:
            backend, store = open_backend(url), open_backend(f"duckdb:///{folder}/ledger.duckdb")
            try:
                compare(backend, store, args.rows, args.off, args.only, args.repeat)
            finally:  # an open Spark Connect session would keep the process from exiting
                backend.close()
                store.close()


if __name__ == "__main__":
    main()
