"""benchmarks/bi_heldout/ (the held-out BI corpus that benchmarks/bi_heldout.py runs) is
well formed: each file names its tool, why it is there and what the proxy must do, and
none repeats a statement of tests/bi/. Reading files only: no server."""

from __future__ import annotations

from pathlib import Path

from tests.bicorpus import CORPUS as TESTS_BI
from tests.bicorpus import read_entry

HELD_OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "bi_heldout"


def test_every_held_out_statement_has_a_tool_a_reason_and_an_expectation():
    paths = sorted(HELD_OUT.glob("*.sql"))
    assert len(paths) >= 80
    seen = {" ".join(read_entry(p).sql.split()) for p in TESTS_BI.glob("*.sql")}
    refused = 0
    for path in paths:
        entry = read_entry(path)
        header = [line for line in path.read_text().split("\n") if line.startswith("-- ")]
        assert any(line.startswith("-- tool: ") for line in header), path.name
        assert any(line.startswith("-- why: ") for line in header), path.name
        assert entry.sql.strip() and (entry.expect == "answered") == (entry.sqlstate is None)
        assert " ".join(entry.sql.split()) not in seen, path.name
        refused += entry.expect == "refused"
    assert refused >= 15
