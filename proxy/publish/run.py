"""Run a prepared release: debit, microaggregate in the backend, noise in the proxy,
write the output, report the information loss (SPEC §6).

Data flow: the backend ranks and clusters every column and summarises each cluster
(``proxy.publish.sql``); the proxy reads the summaries a batch at a time, releases
each cluster's centroid (``proxy.privacy.microaggregation``) and writes it back; the
backend joins rows to their released centroids, and the proxy streams that result
into the output file (or the backend keeps it as a table). Memory in the proxy is one
batch; the backend sorts and joins as it does for any query.
"""

from __future__ import annotations

import csv
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb

from proxy.backends.base import Backend, Transaction
from proxy.errors import BackendUnavailable, OutputFailed
from proxy.ledger import Charge, Ledger
from proxy.loss import Loss
from proxy.privacy.microaggregation import IDP_CBLS, Cluster, release
from proxy.privacy.sampler import RandomSource, SecureSource
from proxy.publish import sql
from proxy.publish.request import Release

BATCH = 50_000


@dataclass(frozen=True)
class Report:
    rows: int
    clusters: tuple[int, ...]
    mean_sse: float
    epsilon_remaining: Decimal


def run_release(backend: Backend, ledger: Ledger, job: Release, analyst: str,
                progress: Callable[[str, float], None] = lambda step, done: None,
                rng: RandomSource | None = None) -> Report:
    """Debit ε (committed), then release; refund only if the backend was unreachable."""
    rng = rng or SecureSource()
    model = "dp" if job.method.startswith("dp") else "idp"
    charge = Charge(analyst, job.describe(), model, f"release {job.method} k={job.k}",
                    Loss.of(job.epsilon), "modify one record (clusters held fixed, docs/release.md)")
    remaining = ledger.debit(charge)
    try:
        with backend.transaction(snapshot=True) as tx:
            rows, clusters, mean_sse = _release(backend, tx, job, rng, progress)
    except BackendUnavailable:
        ledger.refund(charge)
        raise
    report = Report(rows, clusters, mean_sse, remaining)
    _record(job, report)
    return report


def _release(backend: Backend, tx: Transaction, job: Release, rng: RandomSource,
             progress) -> tuple[int, tuple[int, ...], float]:
    """(rows written, clusters per column, mean SSE)."""
    dialect, width, k = backend.dialect, len(job.columns), job.k
    k = 1 if job.method == "dp" else k  # plain DP: every record is its own "cluster"
    names = [name for name, _ in job.sources]

    def run(statement: str, *params) -> list[tuple]:
        return tx.execute(sql.render(statement, dialect), params)

    progress("ranking every column in the backend", 0.0)
    run(sql.rows_table(job.table.name, names, job.key, backend.row_identity))
    stats = run(sql.counts(width))[0]
    sizes, variances = stats[0::2], stats[1::2]
    lasts = [sql.last_cluster(n, k) for n in sizes]
    clusters = []
    for j, n in enumerate(sizes):
        lower, upper = job.domains[j]
        share = 0.1 + 0.7 * j / width  # ranking 10 %, the columns 70 %, the output 20 %
        progress(f"{job.columns[j]}: clustering", share)
        run(sql.summaries(j, k, n, lower, upper))
        run(sql.create_noisy(j))
        count = lasts[j] + 1 if n else 0
        clusters.append(count)
        for first in range(0, count, BATCH):
            rows = run(sql.summary_batch(j, first, first + BATCH))
            noisy = [_noisy(job, j, row, rng) for row in rows]
            tx.append(sql.noisy_table(j), ([row[0] for row in rows], noisy))
            done = min(first + BATCH, count) / count
            progress(f"{job.columns[j]}: {min(first + BATCH, count)} of {count} clusters",
                     share + 0.7 / width * done)
    integer = [job.table.columns[name].type == "int" for name in job.columns]
    masked = sql.masked(width, k, lasts, integer, [kind for _, kind in job.sources],
                        job.key is not None)
    progress(f"writing {job.out}", 0.8)
    delivered = sql.render(sql.output(masked, names, job.key), dialect)
    if job.out_table:
        tx.execute(f'CREATE TABLE "{job.out_table}" AS {delivered}')
        rows = tx.execute(f'SELECT count(*) FROM "{job.out_table}"')[0][0]
    else:
        rows = _export(tx, delivered, Path(job.out))
    mean_sse = run(sql.mean_sse(masked, list(variances)))[0][0] or 0.0
    for statement in sql.drop_all(width):
        run(statement)
    progress("done", 1.0)
    return rows, tuple(clusters), float(mean_sse)


def _noisy(job: Release, j: int, row: tuple, rng: RandomSource) -> float | None:
    _, size, total, s1, s2, s3, l3, l2, l1 = row
    lower, upper = job.domains[j]
    if job.method == IDP_CBLS and size < 3:  # fewer values than the table has k: n < k
        if lower is None or upper is None:
            return None  # no bound for so few values: nothing is released
        method = "dp-um"
    else:
        method = job.method
    cluster = Cluster(size, float(total), tuple(v for v in (s1, s2, s3) if v is not None),
                      tuple(v for v in (l3, l2, l1) if v is not None))
    return release(method, cluster, lower, upper, job.epsilons[j], rng)


def _export(tx: Transaction, statement: str, path: Path) -> int:
    """Stream the rows into ``path``: CSV as they come; Parquet through a CSV beside
    it that a private DuckDB converts (both bounded in memory)."""
    target = path if path.suffix.lower() == ".csv" else path.with_suffix(".csv.partial")
    try:
        return _write(tx, statement, path, target)
    except OSError as exc:
        raise OutputFailed(f"could not write {path}: {exc.strerror or exc}; the epsilon "
                           "of this release is spent") from None


def _write(tx: Transaction, statement: str, path: Path, target: Path) -> int:
    rows = 0
    with target.open("w", newline="") as handle:
        writer = csv.writer(handle)
        for batch in tx.batches(statement, BATCH):
            if not rows:
                writer.writerow(name for name, _ in tx.columns())
            writer.writerows(batch)
            rows += len(batch)
        if not rows:
            writer.writerow(name for name, _ in tx.columns())
    if target != path:
        # the columns' types as the output has them (read_csv would guess BIGINT, DOUBLE);
        # a numeric without precision (PostgreSQL's) needs one in DuckDB
        types = {name: "numeric(38,10)" if kind == "numeric" else kind
                 for name, kind in tx.columns()}
        with duckdb.connect() as con:
            con.execute("COPY (SELECT * FROM read_csv(?, header = true, columns = ?)) TO "
                        f"'{_literal(path)}' (FORMAT parquet)", [str(target), types])
        target.unlink()
    return rows


def _literal(path: Path) -> str:
    return str(path).replace("'", "''")


def _record(job: Release, report: Report) -> None:
    """The information loss beside the output: a JSON file next to a file output."""
    if job.out_table:
        return
    info = {"table": job.table.name, "columns": [name for name, _ in job.sources],
            "method": job.method,
            "k": job.k, "epsilon": str(job.epsilon),
            "epsilon_per_column": [float(e) for e in job.epsilons],
            "domains": [list(d) for d in job.domains], "rows": report.rows,
            "clusters": list(report.clusters), "mean_sse": report.mean_sse,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    Path(f"{job.out}.json").write_text(json.dumps(info, indent=2) + "\n")
