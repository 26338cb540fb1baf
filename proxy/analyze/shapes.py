"""The shape cache: a statement's analysis reused when it comes back with other literals.

A dashboard sends the same few statements again and again, with new literals in their
WHERE clauses (time ranges, thresholds, a selected region). Parsing and analysing each
costs more CPU than everything else the proxy does per answer, so the plan of a
statement is kept under its *shape*: its tokens with the NUMBER and STRING literals
replaced by their class (``shape_of``). The next statement of that shape gets the
kept plan with its own literals bound in (``ShapeCache.plan``), without sqlglot
parsing or analysing anything.

Correctness rests on which literals are bound anew (the *slots*); every other literal
stays as written: a statement whose other literals differ is analysed afresh (and its
plan replaces the kept one). A literal is a slot only when all of these hold:

- it is in the WHERE clause of a plain SELECT (no subquery, CTE or set operation, so
  the optimizer passes of ``proxy.analyze.merge_steps``, which fold and merge literals,
  never run);
- the plan holds it exactly once, unchanged and as the very node the parser made (its
  source position kept in ``meta``), inside ``plan.where``, and nowhere else in the
  plan: a literal the analysis rewrote (a time-zoned moment, ``CAST('…' AS DATE)``,
  ``INTERVAL``, ``.5``), moved or copied is not one;
- it is not compared with a column named outside WHERE: the time buckets of a
  grouped column are listed within the WHERE bounds on that column
  (``proxy.analyze.group_keys``), and an aggregated column's domain is narrowed to
  them (``key_restriction.narrowed_domains``), so those literals decide the plan.

And a plan is reused only where the new literals leave ``QueryPlan.window`` as it was
(whether the WHERE keeps a time column to at most half its domain: ``_Template.bind``
reads it again), and the window of each MAX or MIN of a date or timestamp
(``vocabulary.Moment``: its domain as the WHERE narrows it) too; else the statement is
analysed afresh.

What else the analysis reads of a WHERE literal is its kind, which the shape keeps: a
number or a string (``check_predicate`` refuses the wrong one for the column, and a
number a double cannot hold) and, for
a string, whether it reads as a date or moment without a time zone (``check_predicate``
refuses other strings compared with a date or timestamp column). So for a slot, a
fresh analysis would copy the new literal to the same place and decide everything else
as it did for the kept one. Refusals are never kept: a refused statement is analysed
afresh every time, so a literal can neither wrongly refuse nor wrongly admit one.

A statement over public tables only (a ``PassthroughPlan``, run as written) is kept
too, with no slots: every literal must match as written, so only the very statement
(but for spacing) gets it back, and with it its rendering (``remember_public``).

The key also holds what else the analysis reads: the session's settings, the analyst
and the rules object. The canonical SQL of the answer cache and the ledger
(``canonical_sql``) is kept as pieces around the slots, so it is
the same text a fresh rendering gives. The cache is an LRU of ``SIZE`` entries, shared
by an engine's sessions; an entry of a GROUP BY with four WHERE conditions holds about
11 KiB (measured), so a full cache of such adds some 20 MiB.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from proxy.analyze import POSTGRES
from proxy.analyze.canonical import canonical_sql
from proxy.analyze.comparisons import beyond_double
from proxy.analyze.constants import NOW
from proxy.analyze.group_keys import narrow_window, within_where
from proxy.interrupts import checkpoint
from proxy.rules import Rules, parse_moment
from proxy.trees import replace_all
from proxy.vocabulary import PassthroughPlan, QueryPlan

SIZE = 2048
_LITERALS = (TokenType.NUMBER, TokenType.STRING)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)
_STEPS = (exp.Subquery, exp.With, exp.Union, exp.Intersect, exp.Except)
_MARK = re.compile("'\x00([0-9]+)\x00'")  # a slot in the rendered SQL (NUL never occurs in SQL)
_RENDER = POSTGRES.generator()  # its literal_sql: a literal as canonical_sql renders it


@dataclass(frozen=True)
class Shape:
    """A statement's tokens with literals as classes (``key``), and its literal tokens."""

    key: str
    literals: tuple[Token, ...]


def shape_of(tokens: Sequence[Token]) -> Shape:
    """The key spells each token as its type, then its text (a literal's class
    instead) and comments, each preceded by its length: one string (small to keep),
    from which the tokens could be read back."""
    parts, literals = [], []
    for token in tokens:
        if token.token_type in _LITERALS:
            literals.append(token)
            text = _class(token)
        else:
            text = token.text
        parts.append(f"{token.token_type.name} {len(text)} {text} {len(token.comments)}")
        parts.extend(f" {len(comment)} {comment}" for comment in token.comments)
        parts.append("\n")
    return Shape("".join(parts), tuple(literals))


def _class(token: Token) -> str:
    """What the analysis reads of a literal besides its place: a number (one a double
    cannot hold is refused: ``check_predicate``; one with a point or an exponent is
    rewritten as a whole number where an int column meets it), a moment without a time
    zone, or another string."""
    if token.token_type == TokenType.NUMBER:
        if beyond_double(token.text):
            return "beyond a double"
        return "number" if token.text.isdigit() else "decimal"
    return "moment" if parse_moment(token.text) is not None else "string"


@dataclass(frozen=True)
class _Template:
    """A kept analysis: the plan and canonical SQL of the statement it was made from,
    which slots to bind anew, and the literals that must match as written."""

    rules: Rules
    plan: QueryPlan | PassthroughPlan
    slots: dict[int, int]  # source position of a slot's node in plan.where -> literal index
    fixed: tuple[tuple[int, str], ...]  # (literal index, text) of every other literal
    # the canonical SQL: text pieces, and slots by index (None: a passthrough, which has none)
    sql: tuple[str | int, ...] | None

    def bind(self, literals: Sequence[Token]
             ) -> tuple[str | None, QueryPlan | PassthroughPlan] | None:
        """The canonical SQL and plan with ``literals`` bound in; None where they would
        change what the analysis decided from the WHERE's literals: whether it keeps a
        time column to a narrow window (``QueryPlan.window``, which decides how counts
        are clipped and what the note says)."""
        plan = self.plan
        if self.sql is None:
            return None, plan
        if self.slots:
            where = plan.where.copy()
            replace_all((node, _literal(literals[index])) for node in list(where.find_all(
                exp.Literal)) if (index := self.slots.get(node.meta.get("start"))) is not None)
            if narrow_window(plan.table, where, _named) != plan.window or any(
                    within_where(plan.table.columns[m.column], where, _named) != m.window
                    for m in _moments(plan.table)):
                return None
            plan = replace(plan, where=where)
        return self.canonical(literals), plan

    def canonical(self, literals: Sequence[Token]) -> str:
        return "".join(piece if isinstance(piece, str)
                       else _RENDER.literal_sql(_literal(literals[piece])) for piece in self.sql)


def _moments(table) -> list:
    """What each MAX or MIN of a date or timestamp column ranks (``vocabulary.Moment``):
    its window, narrowed by the WHERE's literals, is the plan's own."""
    return [column.moment for column in table.columns.values()
            if getattr(column, "moment", None) is not None]


def _named(column: exp.Column) -> str:
    """The plan's column a column of ``plan.where`` reads: its name (resolved already)."""
    return column.name


def _literal(token: Token) -> exp.Literal:
    """The node the parser makes of a literal token, with its position."""
    literal = exp.Literal(this=token.text, is_string=token.token_type == TokenType.STRING)
    return literal.update_positions(token)


class ShapeCache:
    """Plans by shape, shared by an engine's sessions (threads): an LRU under a lock."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[tuple, _Template] = OrderedDict()
        self._shapes: dict[str, int] = {}  # shape key -> how many entries have it
        self._lock = threading.Lock()

    def knows(self, tokens: Sequence[Token]) -> bool:
        """Whether a statement of this shape was analysed to a private plan or a
        passthrough (in any session): routing sends it to the engine without parsing it
        (proxy.wire.route; a passthrough names a rules table, so it went there anyway)."""
        return shape_of(tokens).key in self._shapes

    def plan(self, shape: Shape, context: tuple, rules: Rules
             ) -> tuple[str | None, QueryPlan | PassthroughPlan] | None:
        """The canonical SQL (None for a passthrough) and plan of a statement of
        ``shape``, analysed under ``context`` (analyst, settings) and ``rules``; None when
        not kept."""
        key = (id(rules), context, shape.key)
        with self._lock:
            template = self._entries.get(key)
            if template is not None:
                self._entries.move_to_end(key)
        if template is None or template.rules is not rules or any(
                shape.literals[index].text != text for index, text in template.fixed):
            return None
        return template.bind(shape.literals)

    def remember(self, shape: Shape, context: tuple, rules: Rules, tree: exp.Expression,
                 plan: QueryPlan) -> str:
        """Keep ``plan``, the fresh analysis of ``tree`` (of ``shape``); return the
        statement's canonical SQL."""
        checkpoint()
        template = _template(shape, rules, tree, plan)
        if template is None:
            return canonical_sql(tree)
        self._keep((id(rules), context, shape.key), template)
        return template.canonical(shape.literals)

    def remember_public(self, shape: Shape, context: tuple, rules: Rules,
                        plan: PassthroughPlan) -> None:
        """Keep ``plan``, a statement over public tables run as written (the fresh
        analysis of a statement of ``shape``), for that statement only: every literal
        must match as written (no slots), so the very tokens get the very tree back,
        and its rendering with it (``PassthroughPlan.text``)."""
        fixed = tuple((index, token.text) for index, token in enumerate(shape.literals))
        self._keep((id(rules), context, shape.key), _Template(rules, plan, {}, fixed, None))

    def _keep(self, key: tuple, template: _Template) -> None:
        with self._lock:
            if key not in self._entries:
                self._shapes[key[2]] = self._shapes.get(key[2], 0) + 1
            self._entries[key] = template
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                (_, _, evicted), _ = self._entries.popitem(last=False)
                self._shapes[evicted] -= 1
                if not self._shapes[evicted]:
                    del self._shapes[evicted]


def _template(shape: Shape, rules: Rules, tree: exp.Expression, plan: QueryPlan
              ) -> _Template | None:
    if tree.find(*NOW) is not None:  # its plan holds the moment it was analysed at
        return None
    by_start = {token.start: index for index, token in enumerate(shape.literals)}
    slots = {start: by_start[start] for start, text in _slot_starts(tree, plan)
             if start in by_start and shape.literals[by_start[start]].text == text}
    checkpoint()
    split = _MARK.split(_with_marks(tree, set(slots)))
    texts, marks = split[0::2], [int(start) for start in split[1::2]]
    if sorted(marks) != sorted(slots) or any("\x00" in text for text in texts):
        return None  # a NUL in the statement itself: not kept
    pieces: list[str | int] = [texts[0]]
    for start, text in zip(marks, texts[1:]):
        pieces += [slots[start], text]
    bound = set(slots.values())
    fixed = tuple((index, token.text) for index, token in enumerate(shape.literals)
                  if index not in bound)
    return _Template(rules, plan, slots, fixed, tuple(pieces))


def _with_marks(tree: exp.Expression, starts: set[int]) -> str:
    """``canonical_sql`` of ``tree`` with each slot a mark naming its position. The
    marks are set in ``tree`` itself and taken back after (canonical_sql renders a copy):
    a copy of its own cost a statement near the token limit a tenth of a second that no
    cancel reached."""
    marked = []
    try:
        for node in list(tree.find_all(exp.Literal)):
            start = node.meta.get("start")
            if start in starts:  # in place: replacing an item of a long IN list is linear
                marked.append((node, node.this, node.args.get("is_string")))
                node.set("this", f"\x00{start}\x00")
                node.set("is_string", True)
        return canonical_sql(tree)
    finally:
        for node, this, is_string in marked:
            node.set("this", this)
            node.set("is_string", is_string)


def _slot_starts(tree: exp.Expression, plan: QueryPlan) -> list[tuple[int, str]]:
    """Source positions and texts of the WHERE literals that may be bound anew (module
    doc)."""
    where = tree.args.get("where")
    if not isinstance(tree, exp.Select) or where is None or plan.where is None \
            or tree.find(*_STEPS) is not None \
            or any(select is not tree for select in tree.find_all(exp.Select)):
        return []
    outside = {column.name.lower() for column in tree.find_all(exp.Column)
               if not _within(column, where)}
    candidates = []
    columns_of: dict[int, set[str]] = {}  # per comparison: its many literals share it
    years: set[int] = set()  # the comparisons of EXTRACT(YEAR …) (``_of_a_year``)
    for count, literal in enumerate(where.find_all(exp.Literal)):
        if count % 512 == 0:
            checkpoint()  # a WHERE of thousands of comparisons: tenths of a second
        comparison = literal.find_ancestor(*_COMPARISONS)
        if comparison is not None and id(comparison) not in columns_of:
            columns_of[id(comparison)] = {c.name.lower()
                                          for c in comparison.find_all(exp.Column)}
            if _of_a_year(comparison):
                years.add(id(comparison))
        compared = columns_of[id(comparison)] if comparison is not None else set()
        if "start" in literal.meta and not compared & outside \
                and not _in_substring(literal, comparison) \
                and id(comparison) not in years:  # its bounds are checked
            candidates.append(literal)
    checkpoint()
    held = _literals_by_start(plan)
    in_where = {id(node) for node in plan.where.find_all(exp.Literal)}
    return [(literal.meta["start"], literal.this) for literal in candidates
            if len(nodes := held.get(literal.meta["start"], [])) == 1
            and id(nodes[0]) in in_where
            and (nodes[0].this, nodes[0].is_string) == (literal.this, literal.is_string)]


def _of_a_year(comparison: exp.Expression) -> bool:
    """Whether ``comparison`` reads EXTRACT(YEAR …): a year of 1 to 9998 is read as a
    range of the column, any other number as the clamped field
    (``time_filters._constant``), so one such number's plan is not another's."""
    return any(node.this.name.lower() == "year" for node in comparison.find_all(exp.Extract))


def _in_substring(literal: exp.Literal, comparison: exp.Expression | None) -> bool:
    """Whether ``literal`` is a SUBSTRING's argument, looking up to its comparison only
    (walking a long OR chain to its root for each literal was quadratic)."""
    node = literal.parent
    while node is not None and node is not comparison:
        if isinstance(node, exp.Substring):
            return True
        node = node.parent
    return False


def _within(node: exp.Expression, ancestor: exp.Expression) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False


def _literals_by_start(plan: QueryPlan) -> dict[int, list[exp.Literal]]:
    """Every literal node anywhere in the plan that carries a source position."""
    held: dict[int, list[exp.Literal]] = {}
    for tree in _trees(plan):
        for node in tree.find_all(exp.Literal):
            if "start" in node.meta:
                held.setdefault(node.meta["start"], []).append(node)
    return held


def _trees(value: Any) -> Iterator[exp.Expression]:
    """The sqlglot trees a plan holds, in any field, however nested; a tree held in two
    places comes twice."""
    if isinstance(value, exp.Expression):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _trees(getattr(value, field.name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _trees(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _trees(item)
