"""Helpers for sqlglot trees that stay linear in their size."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlglot import exp


def replace_all(replacements: Iterable[tuple[exp.Expression, exp.Expression]]) -> None:
    """Each (node, new) pair: ``node`` replaced by ``new`` in its tree, in time linear in
    the nodes and the lists they stand in. sqlglot's ``replace`` of one element of a
    list sets the parent of every element again, so replacing the n literals of an IN
    list one by one took n² steps (9,900 values bound in 20 s)."""
    lists: dict[tuple[int, str], tuple[exp.Expression, str, dict[int, exp.Expression]]] = {}
    for node, new in replacements:
        parent, key = node.parent, node.arg_key
        if parent is not None and isinstance(parent.args.get(key), list):
            lists.setdefault((id(parent), key), (parent, key, {}))[2][id(node)] = new
        else:
            node.replace(new)
    for parent, key, news in lists.values():
        parent.set(key, [news.get(id(item), item) for item in parent.args[key]])


def balanced(kind: type[exp.Connector], operands: list[exp.Expression]) -> exp.Expression:
    """``operands`` joined by ``kind`` (AND, OR) as a balanced tree, log n deep; it reads
    as the same SQL as the chain ``a AND b AND c …``."""
    if len(operands) == 1:
        return operands[0]
    middle = len(operands) // 2
    return kind(this=balanced(kind, operands[:middle]),
                expression=balanced(kind, operands[middle:]))


def operands(condition: exp.Expression, kind: type[exp.Connector]) -> list[exp.Expression]:
    """The terms of ``condition`` joined by ``kind`` (AND, OR) at its top, parentheses
    removed; ``[condition]`` (unwrapped) when it is not such a chain."""
    condition = condition.unnest()
    if isinstance(condition, kind):
        return [term.unnest() for term in condition.flatten()]
    return [condition]


def implied_condition(term: exp.Expression, keep: Callable[[exp.Expression], bool]
            ) -> exp.Expression | None:
    """What a disjunction implies of the conjuncts ``keep`` accepts (a copy; None: nothing
    to say): where ``term`` is an OR whose every branch has such conjuncts, the OR over
    the branches of their AND. It is TRUE wherever ``term`` is (a TRUE branch has every
    conjunct TRUE), so a row or key it does not make TRUE cannot make ``term`` TRUE."""
    branches = operands(term, exp.Or)
    if len(branches) < 2:
        return None
    parts = [[conjunct for conjunct in operands(branch, exp.And) if keep(conjunct)]
             for branch in branches]
    if not all(parts):
        return None
    return exp.or_(*[exp.and_(*[c.copy() for c in conjuncts], copy=False)
                     for conjuncts in parts], copy=False)
