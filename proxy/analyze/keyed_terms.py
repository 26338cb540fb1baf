"""WHERE terms on a column with declared keys decided per key (issue 33, BI reach):
``region ~ '^(n|s)'`` (also ``~*``, ``!~``, ``!~*``), ``department SIMILAR TO
'(onc|card)%'``, ``LENGTH(region) = 5``, ``LEFT(region, 1) = 'n'``, ``UPPER(region) =
'NORTH'``, ``LOWER(TRIM(region)) IN (…)``.

A term that reads one column with declared keys, and constants only, is a function of
the row's key; the keys are public, so it is evaluated here on each of them (and on
NULL) and written as ``col IN (the keys it holds for)`` (``col <> col`` where none: FALSE,
NULL for NULL; ``OR col IS NULL`` where it holds for NULL), before anything runs. The
refusal or the answer then follows from the rules and the text alone, never from the
data; the IN list is what the other checks, the key restriction of the GROUP BY
(``key_restriction.restricted``) and the backend read, so ``GROUP BY region`` answers
only the keys the term keeps. A row whose value is no declared key meets no rewritten
term (as it meets no ``region IN (…)``); under NOT it does.

Where the evaluation happens: here, in Python, on a subset whose PostgreSQL meaning is
certain, not in the backend nor in the post-processing DuckDB. PostgreSQL's regular
expressions are Spencer's AREs, DuckDB's RE2, Python's its own: they agree on literals,
``.``, ``^``, ``$``, ``|``, groups, bracket lists of characters and ASCII ranges, and the
quantifiers ``* + ? {m} {m,} {m,n}`` (with their lazy forms), and differ beyond (escapes
such as ``\\d`` or ``\\y``, POSIX classes, back references, lookahead, embedded
options, ``$`` before a trailing newline, possessive ``*+`` in Python). So the pattern
is parsed here into that subset and matched by a Thompson automaton of its own (``.``
matches a newline, as in PostgreSQL's default mode; ``^`` and ``$`` only at the ends),
in time linear in the key's length whatever the pattern (a backtracking engine, Python's
``re``, takes exponential time on ``(a|a)*b``); anything else is refused (0A000) rather
than guessed, and a pattern PostgreSQL would refuse to compile (an unbalanced bracket or
parenthesis, a trailing backslash, a quantifier with nothing to repeat, a bound beyond
255) is refused as PostgreSQL refuses it (2201B), whatever the data. ``~*``
(case-insensitive) is decided only on ASCII keys and patterns (beyond
ASCII the case folding is the server's locale's). SIMILAR TO is translated as
PostgreSQL translates it (``similar_escape``: ``%`` any text, ``_`` one character,
``. ^ $`` ordinary, anchored at both ends, ESCAPE one character or none, but not one
of the syntax ``|*+?{}()[]^$.-``, which PostgreSQL escapes where this parser would read
syntax). A differential fuzzer against PostgreSQL 15 (2026-11-29, about 30,000 terms
over keys with newlines, blanks, case and non-ASCII) found every decided term as
PostgreSQL decides it once these were refused: such an ESCAPE, a quantifier after
``%``, a ``-`` inside ``[…]`` that is neither first, last nor a range's, unbalanced
parentheses and a trailing escape in SIMILAR TO (PostgreSQL's wrapping and
``similar_escape`` treat them otherwise), and automata of more than 2,000 states
(PostgreSQL refuses some such patterns as too complex); a bound's leading zeros are
read as PostgreSQL reads them. Functions of
the column are evaluated as ``proxy.analyze.derived_keys`` evaluates GROUP BY terms
(exactly as PostgreSQL, else not at all: the term keeps its refusal); text is compared
for equality only (its order is the collation's).
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Any

from sqlglot import exp

from proxy.analyze import derived_keys
from proxy.analyze.comparisons import between_as_range
from proxy.analyze.patterns import CASED, ESCAPE, PATTERNS, respelled
from proxy.errors import NotSupported, Refused
from proxy.rules import Table

_REGEX = (exp.RegexpLike, exp.RegexpILike)
# functions of the column a comparison may read (derived_keys evaluates them); a
# SUBSTRING alone is answered as it is (predicate._fixed_substring)
_EVALUATED = (exp.Length, exp.Left, exp.Right, exp.Upper, exp.Lower, exp.Initcap, exp.Trim,
              exp.DPipe, exp.Concat, exp.ConcatWs, exp.Coalesce, exp.Nullif)
_COMPARED = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between,
             exp.Is)
_DUPMAX = 255  # PostgreSQL's largest bound {m,n}
# the most work one statement's terms take here: per key, the term's nodes, and for a
# pattern its automaton's states × (the text's length + 1)
_WORK = 2_000_000
_BUDGET: ContextVar[list[int]] = ContextVar("keyed_terms_budget")


class _Undecided(Exception):
    """Not decided here: the term is left as written (and refused as before)."""


def keyed_terms(condition: exp.Expression, table: Table, resolve) -> exp.Expression:
    """``condition`` with each term decided per declared key written as an IN list (the
    module doc); the same node when there is none."""
    token = _BUDGET.set([_WORK])
    try:
        if _term(condition):
            return _decided(condition, table, resolve) or condition
        for node in _terms(condition):
            rewritten = _decided(node, table, resolve)
            if rewritten is not None:
                node.replace(rewritten)
        return condition
    finally:
        _BUDGET.reset(token)


def _spend(work: int) -> None:
    budget = _BUDGET.get()
    budget[0] -= work
    if budget[0] < 0:
        raise NotSupported("the WHERE's terms decided per declared key (patterns, functions "
                           "of a keyed column) are too many or too long for its keys; write "
                           "fewer, or list the keys: col IN (…)")


def _terms(condition: exp.Expression) -> list[exp.Expression]:
    """The terms under AND, OR, NOT and brackets that are to be decided per key."""
    found, pending = [], [condition]
    while pending:
        node = pending.pop()
        if _term(node):
            found.append(node)
        elif isinstance(node, (exp.And, exp.Or, exp.Not, exp.Paren)):
            pending += [child for child in (node.this, node.args.get("expression"))
                        if child is not None]
    return found


def _term(node: exp.Expression) -> bool:
    """A regular expression or SIMILAR TO match, a LIKE of a function of a column, or a
    comparison reading a function ``derived_keys`` evaluates."""
    if isinstance(node, _REGEX) or isinstance(node, exp.SimilarTo) or (
            isinstance(node, exp.Escape) and isinstance(node.this, exp.SimilarTo)):
        return True
    if isinstance(node, exp.Escape):
        node = node.this
    if isinstance(node, PATTERNS):
        subject = node.this.unnest()
        inner = subject.this.unnest() if isinstance(subject, CASED) else subject
        return not isinstance(inner, exp.Column) and _reads_functions(subject)
    return isinstance(node, _COMPARED) and any(
        _reads_functions(operand) for operand in _operands(node))


def _reads_functions(node: exp.Expression) -> bool:
    return node.find(*_EVALUATED) is not None and node.find(
        exp.Subquery, exp.Select, exp.Extract) is None


def _operands(node: exp.Expression) -> list[exp.Expression]:
    return [operand for key in ("this", "expression", "low", "high")
            if (operand := node.args.get(key)) is not None] + list(
        node.args.get("expressions") or [])


def _decided(node: exp.Expression, table: Table, resolve) -> exp.Expression | None:
    """The IN list ``node`` equals on the declared keys of the one column it reads;
    None where it reads another column, or one without declared keys, or is not
    decided here."""
    columns = list(node.find_all(exp.Column))
    names = {resolve(column) for column in columns}
    if len(names) != 1:
        return None
    name = names.pop()
    column = table.columns.get(name)
    keys = getattr(column, "keys", None)
    if keys is None:
        return None
    _spend((len(keys) + 1) * sum(1 for _ in node.walk()))
    try:
        holds = {key: _truth(node, {name: key}, table, resolve) for key in keys}
        on_null = _truth(node, {name: None}, table, resolve)
    except (_Undecided, derived_keys.Unevaluated, ArithmeticError, ValueError,
            RecursionError):
        return None
    if any(truth is None for truth in holds.values()):
        return None  # NULL on a key: left as written (its NOT differs from FALSE's)
    reference = columns[0].copy()
    kept = [derived_keys.typed_literal(key) for key, truth in holds.items() if truth]
    if kept:
        listed: exp.Expression = exp.In(this=reference.copy(), expressions=kept)
    else:  # FALSE, and NULL for NULL: as every term on NULL but IS NULL
        listed = exp.NEQ(this=reference.copy(), expression=reference.copy())
    if on_null is True:
        return exp.Paren(this=exp.Or(this=listed, expression=exp.Is(
            this=reference.copy(), expression=exp.Null())))
    if on_null is False:
        return exp.Paren(this=exp.And(this=listed, expression=exp.Not(this=exp.Is(
            this=reference.copy(), expression=exp.Null()))))
    return listed


def _truth(node: exp.Expression, row: dict[str, Any], table: Table, resolve) -> bool | None:
    """SQL's three-valued truth of the term on a row holding ``row``."""
    node = node.unnest()
    if isinstance(node, exp.Not):
        inner = _truth(node.this, row, table, resolve)
        return None if inner is None else not inner
    if isinstance(node, (exp.And, exp.Or)):
        sides = [_truth(side, row, table, resolve) for side in node.flatten()]
        decisive = isinstance(node, exp.Or)
        return decisive if decisive in sides else None if None in sides else not decisive
    if isinstance(node, _REGEX):
        return _regex_truth(node, row, table, resolve)
    if isinstance(node, exp.SimilarTo) or (isinstance(node, exp.Escape)
                                           and isinstance(node.this, exp.SimilarTo)):
        return _similar_truth(node, row, table, resolve)
    if isinstance(node, (*PATTERNS, exp.Escape)):
        return _like_truth(node, row, table, resolve)
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise _Undecided
        return (_value(node.this, row, table, resolve) is None) != bool(node.args.get("negate"))
    if node.args.get("negate"):
        raise _Undecided
    if isinstance(node, exp.Between):
        if node.args.get("symmetric"):
            raise _Undecided
        return _truth(between_as_range(node), row, table, resolve)
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise _Undecided
        truths = [_compare(exp.EQ, node.this, item, row, table, resolve)
                  for item in node.expressions]
        return True if True in truths else None if None in truths else False
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return _compare(type(node), node.this, node.expression, row, table, resolve)
    raise _Undecided


def _value(node: exp.Expression, row: dict[str, Any], table: Table, resolve) -> Any:
    return derived_keys.term_value(node, row, table, resolve)


def _compare(operator: type, left: exp.Expression, right: exp.Expression,
             row: dict[str, Any], table: Table, resolve) -> bool | None:
    first, second = derived_keys.compared(left, _value(left, row, table, resolve), right,
                                           _value(right, row, table, resolve))
    if first is None or second is None:
        return None
    if isinstance(first, bool) != isinstance(second, bool) or \
            isinstance(first, str) != isinstance(second, str):
        raise _Undecided  # no such operator in PostgreSQL: refused as before
    if operator in (exp.EQ, exp.NEQ):
        return (first == second) == (operator is exp.EQ)
    if isinstance(first, (str, bool)):
        raise _Undecided  # text is ordered by the backend's collation
    return {exp.GT: first > second, exp.GTE: first >= second, exp.LT: first < second,
            exp.LTE: first <= second}[operator]


def _text_subject(node: exp.Expression, row: dict[str, Any], table: Table, resolve
                  ) -> str | None:
    value = _value(node, row, table, resolve)
    if value is not None and not isinstance(value, str):
        raise NotSupported(f"{_shown(node)} is not text: a pattern matches text "
                           "(PostgreSQL has no such operator)", "42883")
    return value


def _constant_pattern(node: exp.Expression, what: str) -> str:
    pattern = node.unnest()
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise NotSupported(f"{what} takes a constant pattern in quotes on a column with "
                           "declared keys: region ~ '^(n|s)'")
    return pattern.name


# -- ~, ~*, !~, !~*, SIMILAR TO and LIKE: read into a small automaton ---------------------
#
# The pattern is parsed here into literals, any character, bracket lists, anchors,
# concatenation, alternation and bounded repetition, and matched by a Thompson automaton:
# time linear in the key's length times the automaton's size, whatever the pattern (a
# backtracking engine such as Python's ``re`` takes exponential time on ``(a|a)*b`` and
# polynomial of any degree on ``a*a*a*…b``: one statement could hold the proxy).

def _regex_truth(node: exp.Expression, row: dict[str, Any], table: Table, resolve
                 ) -> bool | None:
    folded = isinstance(node, exp.RegexpILike)
    word = "~*" if folded else "~"
    pattern = _constant_pattern(node.expression, f"the operator {word}")
    if folded and not pattern.isascii():
        raise NotSupported(f"{word} (case-insensitive) is decided on ASCII patterns only "
                           "(beyond ASCII the case folding is the server locale's)")
    automaton = _automaton(("are", pattern, folded))
    subject = _text_subject(node.this, row, table, resolve)
    if subject is None:
        return None
    if folded and not subject.isascii():
        raise NotSupported(f"{word} (case-insensitive) is decided on ASCII keys only (beyond "
                           "ASCII the case folding is the server locale's); "
                           "use ~ with both cases: '^[Nn]'")
    return automaton.matches(subject)


_CACHE: dict[tuple, _Automaton] = {}
_KEPT = 32  # automata kept (each up to _STATES states), shared by every session
# the characters a SIMILAR TO pattern's syntax reads besides % and _: as its ESCAPE,
# PostgreSQL escapes them in places this parser reads them as syntax (a fuzzer's
# finding: 'a|.b' ESCAPE '|' kept neither key PostgreSQL keeps)
_SYNTAX = "|*+?{}()[]^$.-"


def _automaton(key: tuple) -> _Automaton:
    """The automaton of a pattern (cached: the same one for every key)."""
    found = _CACHE.get(key)
    if found is None:
        kind, pattern, option = key
        if kind == "are":
            if pattern.startswith("***"):
                raise _unsupported("a director (***= or ***:)")
            found = _Automaton(_Parser(pattern, "\\", similar=False).parse(), option,
                               anchored=False)
        elif kind == "similar":
            found = _Automaton(_Parser(pattern, option, similar=True).parse(), False,
                               anchored=True)
        else:  # like: option is whether it is ILIKE
            found = _Automaton(_like_tree(pattern), option, anchored=True)
        if len(_CACHE) > _KEPT:
            _CACHE.clear()
        _CACHE[key] = found
    return found


def _invalid(why: str) -> Refused:
    return Refused(f"invalid regular expression: {why}", "2201B")


def _unsupported(what: str) -> NotSupported:
    return NotSupported(f"{what} in a pattern is not decided here (PostgreSQL's regular "
                        "expressions differ from others there); use literals, . ^ $ | ( ) "
                        "[…] lists and ranges of letters or digits, * + ? {m,n}")


# the parsed pattern: ("chars", test) one character passing test (a frozenset and
# whether it is negated; None any), ("cat", parts), ("alt", branches),
# ("repeat", part, least, most or None), ("start",), ("end",)
_ANY = ("chars", None)
_EVERYTHING = ("repeat", _ANY, 0, None)  # SIMILAR TO's % (.* in PostgreSQL's translation)


def _one(char: str) -> tuple:
    return ("chars", (frozenset(char), False))


class _Parser:
    """A PostgreSQL ARE of the subset (module doc), or a SIMILAR TO pattern as
    PostgreSQL's ``similar_escape`` turns it into one (``%`` any text, ``_`` any
    character, ``. ^ $`` ordinary, ESCAPE one character or none)."""

    def __init__(self, pattern: str, escape: str, similar: bool) -> None:
        self.pattern, self.escape, self.similar, self.i = pattern, escape, similar, 0

    def parse(self) -> tuple:
        tree = self._alternation(0)
        if self.i < len(self.pattern):  # a ')' with no '(' before it
            self._unbalanced()
        return tree

    def _unbalanced(self):
        """PostgreSQL refuses an ARE's; SIMILAR TO's it wraps in ^(?:…)$ first, which
        may balance them ('a)|(b' compiles): not decided here."""
        if self.similar:
            raise _unsupported("parentheses that are not balanced")
        raise _invalid("parentheses () not balanced")

    def _alternation(self, depth: int) -> tuple:
        branches = [self._sequence(depth)]
        while self.i < len(self.pattern) and self.pattern[self.i] == "|":
            self.i += 1
            branches.append(self._sequence(depth))
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def _sequence(self, depth: int) -> tuple:
        parts: list[tuple] = []
        state = "start"  # start (nothing to repeat), atom, anchor, repeated
        pattern = self.pattern
        while self.i < len(pattern):
            char = pattern[self.i]
            if char == "|":
                break
            if char == ")":
                if depth == 0:
                    self._unbalanced()
                break
            if char in "*+?{" and not (self.escape and char == self.escape):
                least, most = self._quantifier()
                if state == "start":
                    raise _invalid("quantifier operand invalid")
                if state != "atom":
                    raise _unsupported("a quantifier after an anchor or another quantifier")
                if self.i < len(pattern) and pattern[self.i] == "?":  # lazy: the same match
                    self.i += 1
                parts[-1] = ("repeat", parts[-1], least, most)
                state = "repeated"
                continue
            parts.append(self._atom(depth))
            state = "anchor" if parts[-1][0] in ("start", "end") else (
                "repeated" if self.similar and parts[-1] == _EVERYTHING else "atom")
        return ("cat", parts)

    def _atom(self, depth: int) -> tuple:
        pattern, char = self.pattern, self.pattern[self.i]
        if self.escape and char == self.escape:
            if self.i + 1 == len(pattern):
                if self.similar:  # PostgreSQL drops it there
                    raise _unsupported("an escape character at the end")
                raise _invalid("invalid escape \\ sequence (the pattern ends with its "
                               "escape character)")
            following = pattern[self.i + 1]
            if following.isalnum() or not following.isascii() or following == '"':
                raise _unsupported(f"the escape {char}{following}")
            self.i += 2
            return _one(following)
        self.i += 1
        if self.similar and char in "%_":
            return _EVERYTHING if char == "%" else _ANY
        if char == "[":
            return self._bracket()
        if char == "(":
            if pattern.startswith("?", self.i) or pattern.startswith("*", self.i):
                raise _unsupported("(? or (*")
            inner = self._alternation(depth + 1)
            if self.i >= len(pattern):
                self._unbalanced()
            self.i += 1  # the ')'
            return inner
        if not self.similar and char in "^$.":
            return ("start",) if char == "^" else ("end",) if char == "$" else _ANY
        return _one(char)

    def _quantifier(self) -> tuple[int, int | None]:
        char = self.pattern[self.i]
        if char != "{":
            self.i += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        bound = re.match(r"\{([0-9]+)(,([0-9]*))?\}", self.pattern[self.i:])
        if bound is None:
            raise _unsupported("a { that starts no bound {m}, {m,} or {m,n}")
        self.i += len(bound.group(0))
        least = int(bound.group(1)) if len(bound.group(1).lstrip("0")) <= 4 else _DUPMAX + 1
        high = bound.group(3)
        most = least if bound.group(2) is None else None if not high else (
            int(high) if len(high.lstrip("0")) <= 4 else _DUPMAX + 1)
        if least > _DUPMAX or (most is not None and (most > _DUPMAX or most < least)):
            raise _invalid("invalid repetition count(s)")
        return least, most

    def _bracket(self) -> tuple:
        """``[…]`` after its ``[``: characters and ranges within digits, lower-case or
        upper-case ASCII letters, ``^`` first negating it, ``]`` first one of them."""
        pattern, j = self.pattern, self.i
        negated = j < len(pattern) and pattern[j] == "^"
        j += negated
        members: set[str] = set()
        first = True
        while True:
            if j >= len(pattern):
                raise _invalid("brackets [] not balanced")
            char = pattern[j]
            if char == "]" and not first:
                break
            if char in "[\\" or (self.escape and char == self.escape):
                raise _unsupported(f"{char} within […]")
            if char == "-" and not first and j + 1 < len(pattern) and pattern[j + 1] != "]":
                raise _unsupported("a - within […] that is neither first, last nor a "
                                   "range's")  # [a-c-e]: PostgreSQL's invalid range
            if j + 2 < len(pattern) and pattern[j + 1] == "-" and pattern[j + 2] != "]":
                last = pattern[j + 2]
                run = next((run for run in _RUNS if char in run and last in run
                            and run.index(char) <= run.index(last)), None)
                if run is None:
                    raise _unsupported(f"the range {char}-{last}")
                members.update(run[run.index(char):run.index(last) + 1])
                j += 3
            else:
                members.add(char)
                j += 1
            first = False
        self.i = j + 1
        return ("chars", (frozenset(members), negated))


_RUNS = ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _like_tree(pattern: str) -> tuple:
    """A LIKE pattern respelled (``patterns.respelled``: a backslash escapes)."""
    parts, i = [], 0
    while i < len(pattern):
        if pattern[i] == ESCAPE:
            parts.append(_one(pattern[i + 1]))
            i += 2
            continue
        parts.append(("repeat", _ANY, 0, None) if pattern[i] == "%" else
                     _ANY if pattern[i] == "_" else _one(pattern[i]))
        i += 1
    return ("cat", parts)


# the most states one pattern's automaton holds: PostgreSQL refuses a large counted
# repetition as "too complex" ((a?){0,255} seven times: about 5,000 states here)
_STATES = 2_000


class _Automaton:
    """A Thompson automaton of a parsed pattern: ``matches`` in time linear in the
    text. ``anchored``: the whole text must match (SIMILAR TO, LIKE), else a match
    anywhere (``~``). ``folded``: ASCII letters of either case match alike (``~*``,
    ILIKE: both text and pattern ASCII)."""

    def __init__(self, tree: tuple, folded: bool, anchored: bool) -> None:
        # each state: ("chars", test, next), ("split", next, other), ("start", next),
        # ("end", next), ("match",)
        self.states: list[Any] = []
        self.folded, self.anchored = folded, anchored
        accept = self._add(("match",))
        self.begin = self._build(tree, accept)

    def _add(self, state: Any) -> int:
        if len(self.states) >= _STATES:
            raise NotSupported(f"the pattern is too large to decide per key (over {_STATES:,} "
                               "states, its repetitions expanded); write a shorter one")
        self.states.append(state)
        return len(self.states) - 1

    def _build(self, tree: tuple, after: int) -> int:
        kind = tree[0]
        if kind == "chars":
            return self._add(("chars", tree[1], after))
        if kind in ("start", "end"):
            return self._add((kind, after))
        if kind == "cat":
            for part in reversed(tree[1]):
                after = self._build(part, after)
            return after
        if kind == "alt":
            entries = [self._build(branch, after) for branch in tree[1]]
            entry = entries[-1]
            for other in reversed(entries[:-1]):
                entry = self._add(("split", other, entry))
            return entry
        _, part, least, most = tree
        if most is None:  # part{least,}: least copies, then a loop
            loop = self._add(("split", None, after))
            body = self._build(part, loop)
            self.states[loop] = ("split", body, after)
            entry = loop
        else:
            entry = after
            for _ in range(most - least):  # optional copies: each skips to what follows
                entry = self._add(("split", self._build(part, entry), after))
        for _ in range(least):
            entry = self._build(part, entry)
        return entry

    def _passes(self, test: Any, char: str) -> bool:
        if test is None:
            return True
        members, negated = test
        inside = char in members or (self.folded and char.swapcase() in members)
        return inside != negated

    def _closure(self, entries: list[int], position: int, length: int) -> set[int]:
        seen: set[int] = set()
        pending = list(entries)
        while pending:
            index = pending.pop()
            if index in seen:
                continue
            seen.add(index)
            state = self.states[index]
            if state[0] == "split":
                pending += [state[1], state[2]]
            elif state[0] == "start" and position == 0:
                pending.append(state[1])
            elif state[0] == "end" and position == length:
                pending.append(state[1])
        return seen

    def matches(self, text: str) -> bool:
        length = len(text)
        _spend((length + 1) * len(self.states))
        current = self._closure([self.begin], 0, length)
        for position, char in enumerate(text):
            if not self.anchored and 0 in current:  # state 0 is the match
                return True
            moved = [state[2] for index in current
                     if (state := self.states[index])[0] == "chars"
                     and self._passes(state[1], char)]
            if not self.anchored:
                moved.append(self.begin)  # a match may start at every position
            current = self._closure(moved, position + 1, length)
        return 0 in current


# -- SIMILAR TO, and LIKE of a function of the column ---------------------------------------

def _similar_truth(node: exp.Expression, row: dict[str, Any], table: Table, resolve
                   ) -> bool | None:
    escape = "\\"
    if isinstance(node, exp.Escape):
        given = node.expression.unnest()
        if not (isinstance(given, exp.Literal) and given.is_string and len(given.name) <= 1):
            raise NotSupported("ESCAPE takes one character in quotes, or none: col SIMILAR "
                               "TO 'a!%' ESCAPE '!'")
        escape, node = given.name, node.this
    if escape and escape in _SYNTAX:  # PostgreSQL escapes it where this reads syntax
        raise _unsupported(f"ESCAPE '{escape}' (a character of the pattern's syntax)")
    pattern = _constant_pattern(node.expression, "SIMILAR TO")
    automaton = _automaton(("similar", pattern, escape))
    subject = _text_subject(node.this, row, table, resolve)
    if subject is None:
        return None
    return automaton.matches(subject)


def _like_truth(node: exp.Expression, row: dict[str, Any], table: Table, resolve
                ) -> bool | None:
    escape = ESCAPE
    if isinstance(node, exp.Escape):
        given = node.expression.unnest()
        if not (isinstance(given, exp.Literal) and given.is_string and len(given.name) <= 1):
            raise _Undecided
        escape, node = given.name, node.this
    if not isinstance(node, PATTERNS):
        raise _Undecided
    folded = isinstance(node, exp.ILike)
    pattern = _constant_pattern(node.expression, "ILIKE" if folded else "LIKE")
    automaton = _automaton(("like", respelled(pattern, escape), folded))
    subject = _text_subject(node.this, row, table, resolve)
    if subject is None:
        return None
    if folded and not (subject.isascii() and pattern.isascii()):
        raise _Undecided
    return automaton.matches(subject) != bool(node.args.get("negate"))


def _shown(node: exp.Expression) -> str:
    text = node.sql(dialect="postgres")
    return text if len(text) <= 60 else text[:57] + "…"
