"""The SQL that BI tools send for a bar chart, a time series and a big number (and a raw
table view, which must stay refused), kept verbatim in tests/bi/ (tests/bicorpus.py
reads it), run through ``idp-proxy serve`` over the demo's tables on both backends.

PENDING lists the statements that need analyser features not built yet (issue 16):
they are expected to be answered, and are marked xfail(strict=True) here, so that the
test fails as soon as the analyser answers one of them: then take it out of PENDING.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.bicorpus import CORPUS, read_entry

pytestmark = pytest.mark.postgres

# file -> the analyser feature it waits for
PENDING: dict[str, str] = {}


ENTRIES = sorted(CORPUS.glob("*.sql"))


def test_the_corpus_covers_each_tool_and_chart():
    names = {path.name for path in ENTRIES}
    for tool in ("superset", "metabase", "grafana"):
        assert any(name.startswith(tool) for name in names), tool
    assert set(PENDING) <= names
    for path in ENTRIES:
        entry = read_entry(path)
        assert entry.sql.strip() and (entry.expect == "answered") == (entry.sqlstate is None)
        assert path.name not in PENDING or entry.expect == "answered"


@pytest.mark.parametrize("path", [
    pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(
        strict=True, reason=f"pending in the analyser: {PENDING[path.name]}")]
                 if path.name in PENDING else [])
    for path in ENTRIES])
def test_each_statement_is_answered_or_refused_as_recorded(demo_server, path):
    entry = read_entry(path)
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        before = con.execute("SHOW idp.budget").fetchone()
        if entry.expect == "answered":
            rows = con.execute(entry.sql).fetchall()
            assert rows, entry.name
            return
        with pytest.raises(psycopg.Error) as refused:
            con.execute(entry.sql)
        error = refused.value
        assert error.sqlstate == entry.sqlstate, (entry.name, str(error))
        assert len(error.diag.message_primary.splitlines()) == 1
        assert con.execute("SHOW idp.budget").fetchone() == before
