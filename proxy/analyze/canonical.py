"""The canonical text of a statement: the key of the answer cache and what the ledger
records (a module of its own so that analysis and the shape cache both use it)."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from proxy.interrupts import checkpoint


def canonical_sql(statement: exp.Expression) -> str:
    """The statement as sqlglot renders it for PostgreSQL, without comments and with
    unquoted identifiers folded to lower case (as PostgreSQL folds them). A cancel is
    checked between its passes, each a few tenths of a second of a statement near the
    token limit. The generator renders the copy as it is (``copy=False``): its own
    copy of the whole tree, a second one, was a third of this function's time."""
    copied = statement.copy()
    checkpoint()
    folded = normalize_identifiers(copied, dialect="postgres")
    checkpoint()
    return folded.sql(dialect="postgres", comments=False, copy=False)
