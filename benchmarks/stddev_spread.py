"""How STDDEV's answers spread around the truth on the demo (issue 32: the held-out
corpus's STDDEV(income) for one sex came back 60,480 against 36,153): ``--releases``
fresh answers (a new WHERE that keeps every row each time) of ``SELECT sex,
STDDEV(income) FROM people GROUP BY sex`` at ``--epsilon``, through the engine in
process with the demo's rules (``utility_demo.Proxy``); per group the true value, the
median, the 10th and 90th percentiles of the answers, the median relative error, and
the share of answers above 1.5× or at 0. A benchmark: it asserts nothing.
``--column age`` measures STDDEV(age) instead, ``--whole`` over the whole table (one
group, "all") instead of per sex.

    PYTHONPATH=. python benchmarks/stddev_spread.py [--releases 40] [--epsilon 1]
                                                    [--column income|age] [--whole]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.utility_demo import Proxy, add_census  # noqa: E402
from proxy.demo import create_demo  # noqa: E402

SQL = "SELECT sex, STDDEV({column}) FROM people{where} GROUP BY sex ORDER BY sex"
WHOLE = "SELECT 'all', STDDEV({column}) FROM people{where}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=40)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--column", choices=["income", "age"], default="income")
    parser.add_argument("--whole", action="store_true")
    arguments = parser.parse_args()
    sql = (WHOLE if arguments.whole else SQL).replace("{column}", arguments.column)
    path = Path(tempfile.mkdtemp()) / "demo.duckdb"
    create_demo(path)
    with duckdb.connect(str(path), read_only=True) as con:
        truth = dict(con.execute(sql.format(where="")).fetchall())
    add_census(path)
    proxy = Proxy(path)
    list(proxy.session.execute(f"SET idp.epsilon = {arguments.epsilon}"))
    got: dict = {key: [] for key in truth}
    for i in range(arguments.releases):
        answer = list(proxy.session.execute(sql.format(where=f" WHERE age > {-1 - i}")))[-1]
        for key, value in answer.rows:
            got[key].append(float(value))
    proxy.close()
    print(f"| {'scope' if arguments.whole else 'sex'} | true | median | p10 | p90 | "
          "median relative error | > 1.5× true | 0 |\n|---|---|---|---|---|---|---|---|")
    for key, values in got.items():
        v, t = np.array(values), truth[key]
        p10, p90 = np.percentile(v, [10, 90])
        print(f"| {key} | {t:,.1f} | {np.median(v):,.1f} | {p10:,.1f} | {p90:,.1f} | "
              f"{100 * np.median(np.abs(v - t) / t):.2f} % | {100 * np.mean(v > 1.5 * t):.1f} % | "
              f"{100 * np.mean(v == 0):.1f} % |")


if __name__ == "__main__":
    main()
