"""Issue 30's acceptance, tried as an attacker would: ``idp-proxy serve`` on the demo's
tables (DuckDB, or copied into a throwaway PostgreSQL), and over real sockets every
statement of tests/attacks.py (and a held-back set drawn at random from other
building blocks), each under ``max_statement_length``.

    python benchmarks/attacker.py [--backends duckdb,postgres] [--only NAME,...]
                                  [--held-back 40] [--seed 9000] [--timeout 30]

For each statement: the wall time to its answer or refusal (the client's), its SQLSTATE,
and the server's peak memory growth while it ran (VmHWM of every process of the
server after resetting it, less VmRSS before: /proc/PID/clear_refs, /proc/PID/status).
For each that took over a second, the same statement again (a fresh ε: no cache
answers it): cancelled (``conn.cancel()``) after half its time, the seconds from the
cancel to the client's 57014; then sent over a raw socket that is closed after half its
time, the seconds until the server (and the backend's PostgreSQL) burn no more CPU.
Last, SIGTERM while three heavy statements run: the seconds until the process exits.
The rules are rules/demo.toml with the budget raised and ``statement_timeout`` set to
``--timeout``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.attacks import ATTACKS, BY_NAME, held_back
from tests.pgserver import throwaway_postgres
from tests.wireserver import backend_messages, running_proxy, startup_message, typed

TICK = os.sysconf("SC_CLK_TCK")


def rules_text(timeout: int) -> str:
    text = (ROOT / "rules" / "demo.toml").read_text()
    text = text.replace('auth = "trust"', f'auth = "trust"\nstatement_timeout = {timeout}', 1)
    return text.replace("budget_per_analyst = 100 ", "budget_per_analyst = 1000000000 ", 1)


# /proc ----------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    children, found, stack = _children(), [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def status(pid: int, field: str) -> int:
    """A /proc/PID/status field in kB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


class Memory:
    """The peak growth of the server's processes (the Python ones: the catalog's and
    the backend's PostgreSQL are other processes) while a statement runs."""

    def __init__(self, root: int) -> None:
        self.pids = [pid for pid in tree(root) if "python" in _exe(pid) or pid == root]

    def __enter__(self) -> Self:
        self.before = {}
        for pid in self.pids:
            with contextlib.suppress(OSError):
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
            self.before[pid] = status(pid, "VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        self.growth_mb = max((status(pid, "VmHWM") - self.before[pid]) / 1024
                             for pid in self.pids)


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def busy_until_idle(pids: list[int], quiet: float = 0.3, limit: float = 60) -> float:
    """Seconds until ``pids`` together use under 5 % of a core over ``quiet`` seconds."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        before, at = cpu(pids), time.perf_counter()
        time.sleep(quiet)
        if cpu(pids) - before < 0.05 * (time.perf_counter() - at):
            return at - started
    return limit


# Clients --------------------------------------------------------------------------------

def ask(dsn: str, sql: str) -> tuple[str, float]:
    """(SQLSTATE or 'ok', seconds)."""
    started = time.perf_counter()
    try:
        with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
            cur.execute(sql)
            while True:
                if cur.description is not None:
                    cur.fetchall()
                if not cur.nextset():
                    break
        outcome = "ok"
    except psycopg.Error as exc:
        outcome = exc.sqlstate or type(exc).__name__
    return outcome, time.perf_counter() - started


def cancelled(dsn: str, sql: str, after: float) -> tuple[str, float]:
    """Cancel ``sql`` after ``after`` seconds: (its SQLSTATE, seconds from the cancel to
    the client's error)."""
    with psycopg.connect(dsn, autocommit=True) as con:
        sent: list[float] = []
        timer = threading.Timer(after, lambda: sent.append(time.perf_counter()) or con.cancel())
        timer.start()
        try:
            con.execute(sql)
            outcome = "ok"
        except psycopg.Error as exc:
            outcome = exc.sqlstate or type(exc).__name__
        ended = time.perf_counter()
        timer.cancel()
    return outcome, (ended - sent[0]) if sent else float("nan")


def disconnected(port: int, sql: str, after: float, pids: list[int]) -> float:
    """Send ``sql`` on a raw socket, close it after ``after`` seconds: the seconds until
    ``pids`` are idle again."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(startup_message("alice"))
    backend_messages(sock)
    sock.sendall(typed(b"Q", sql.encode() + b"\0"))
    time.sleep(after)
    sock.close()
    return busy_until_idle(pids)


def sigterm_time(proxy, dsn: str, statements: list[str]) -> tuple[float, int | None]:
    """SIGTERM while ``statements`` run, one client each: (seconds to exit, status)."""
    clients = [threading.Thread(target=ask, args=(dsn, sql), daemon=True) for sql in statements]
    for client in clients:
        client.start()
    time.sleep(1.0)
    proxy.killed = True
    started = time.perf_counter()
    proxy.process.send_signal(signal.SIGTERM)
    try:
        code = proxy.process.wait(30)
    except Exception:  # noqa: BLE001 — reported as no exit
        proxy.process.kill()
        code = None
    return time.perf_counter() - started, code


# The run --------------------------------------------------------------------------------

def run_backend(backend: str, attacks: list[tuple[str, object, str]], timeout: int,
                folder: Path, postgres_url: str | None) -> None:
    from tests.factories import demo_database

    rules = folder / "rules.toml"
    rules.write_text(rules_text(timeout))
    with demo_database(backend, folder, postgres_url) as url:
        with running_proxy(rules, url, folder / "home") as proxy:
            dsn = proxy.dsn("alice")
            ask(dsn, "SELECT COUNT(*) FROM people")  # warm: the per-unit bound, the caches
            server = proxy.process.pid
            watched = tree(server)
            if postgres_url is not None and backend == "postgres":
                watched += _postgres_pids(url)
            print(f"\n{backend}: server pid {server}, load {os.getloadavg()}", flush=True)
            print(f"{'statement':28} {'what':40} {'outcome':>8} {'time':>7} {'RSS +MB':>8} "
                  f"{'cancel':>7} {'disconn':>7}", flush=True)
            variant = 1
            for name, make, what in attacks:
                sql = make(variant) if callable(make) else make
                variant += 1
                with Memory(server) as memory:
                    outcome, took = ask(dsn, sql)
                cancel = gone = ""
                if took > 1.0 and outcome in ("ok", "57014"):
                    probe = make(variant) if callable(make) else make
                    variant += 1
                    state, latency = cancelled(dsn, probe, min(took / 2, 5.0))
                    cancel = f"{latency:.2f}s" + ("" if state == "57014" else f" {state}")
                    probe = make(variant) if callable(make) else make
                    variant += 1
                    gone = f"{disconnected(proxy.port, probe, min(took / 2, 5.0), watched):.2f}s"
                print(f"{name:28} {what[:40]:40} {outcome:>8} {took:6.2f}s "
                      f"{memory.growth_mb:8.1f} {cancel:>7} {gone:>7}", flush=True)
            heavy = [BY_NAME[n].make(10_000 + i) for i, n in enumerate(
                ("heavy_statements", "case_group_by_median", "and_chain_virtual"))]
            took, code = sigterm_time(proxy, dsn, heavy)
            print(f"SIGTERM with 3 heavy statements running: exited in {took:.2f}s, "
                  f"status {code}", flush=True)


def _postgres_pids(url: str) -> list[int]:
    """The processes of the PostgreSQL serving ``url`` (its postmaster's tree)."""
    with psycopg.connect(url) as con:
        data = con.execute("SHOW data_directory").fetchone()[0]
    pid = int(Path(data, "postmaster.pid").read_text().split()[0])
    return tree(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--only", default="", help="attack names, comma-separated")
    parser.add_argument("--held-back", type=int, default=40, help="random statements")
    parser.add_argument("--seed", type=int, default=9000, help="first held-back seed")
    parser.add_argument("--timeout", type=int, default=30, help="statement_timeout, s")
    args = parser.parse_args()
    chosen = [a for a in ATTACKS if not args.only or a.name in args.only.split(",")]
    attacks = [(a.name, a.make, a.what) for a in chosen]
    attacks += [(f"held_back_{seed}", lambda v, s=seed: held_back(s, v), "random")
                for seed in range(args.seed, args.seed + args.held_back)]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()}", flush=True)
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix="idp-attack-") as folder:
            if backend == "postgres":
                with throwaway_postgres() as url:
                    run_backend(backend, attacks, args.timeout, Path(folder), url)
            else:
                run_backend(backend, attacks, args.timeout, Path(folder), None)
    print(f"done, load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
