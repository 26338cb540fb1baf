"""Cursors declared in SQL: ``DECLARE name CURSOR FOR query``, then ``FETCH``, ``MOVE``
and ``CLOSE``. psycopg's named cursors (Ibis's ``to_pyarrow``), psycopg2's (SQLAlchemy's
``stream_results``, pandas' ``read_sql(chunksize=…)``) read a result a batch at a time
this way.

The query is answered when the cursor is declared — one release, charged once, as if
sent alone — and the cursor holds the answer's rows for FETCH to hand out forward:
nothing more is read from the data, so a cursor shows no more than its query's
answer. As in PostgreSQL, a cursor WITHOUT HOLD (the default) is declared in a
transaction block and closed when it ends; WITH HOLD lives until CLOSE or the session's
end. FETCH and MOVE go in every direction PostgreSQL's do (the rows are held: a cursor
scrolls unless declared NO SCROLL). What is not supported is refused in one line before
anything runs: BINARY (ask binary results with the protocol's result formats instead)
and a cursor over the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot.tokens import Token, TokenType

from proxy.analyze import command_tokens
from proxy.errors import NotSupported, ProxyError, SyntaxProblem

MAX_CURSORS = 100  # open at once in one session: each holds an answer's rows
# rows a session's cursors may hold: a DECLARE past it is refused before it runs; one
# over public tables alone (free) also where its own rows would pass it
MAX_HELD_ROWS = 100_000

_NAMES = (TokenType.VAR, TokenType.IDENTIFIER)
_DIRECTIONS = ("FETCH and MOVE take NEXT, PRIOR, FIRST, LAST, ABSOLUTE n, RELATIVE n, n, "
               "ALL, FORWARD [n | ALL] or BACKWARD [n | ALL]")


@dataclass(frozen=True)
class Declared:
    """A DECLARE's cursor: its name, whether it outlives its transaction, and whether it
    may go backward (not NO SCROLL)."""

    name: str
    hold: bool
    scroll: bool = True


@dataclass(frozen=True)
class Fetch:
    """A FETCH or MOVE: the cursor's name and where it goes: ``count`` rows on from the
    current one (negative: backward; None: all that are left, ``backward`` all before
    it), or the one row numbered ``absolute`` (negative: from the end) or ``relative``
    to the current one (0: the current row again, as ``FETCH 0`` is)."""

    name: str
    move: bool
    count: int | None = 1
    backward: bool = False
    absolute: int | None = None
    relative: int | None = None

    def rows(self, position: int, total: int) -> tuple[list[int], int]:
        """The rows (0-based, in the order sent) and the position after them, from
        ``position`` among ``total`` rows (0: before the first, total + 1: after the
        last), as PostgreSQL moves a cursor."""
        at = self._row(position, total)
        if at is not None:
            return ([at - 1], at) if 1 <= at <= total else ([], 0 if at < 1 else total + 1)
        if not self.backward and (self.count is None or self.count > 0):
            if position > total:
                return [], total + 1
            end = total + 1 if self.count is None else position + self.count
            return list(range(position, min(end, total))), min(end, total + 1)
        if position < 1:
            return [], 0
        end = 0 if self.count is None else position + self.count
        return list(range(position - 2, max(end, 1) - 2, -1)), max(end, 0)

    def goes_back(self, position: int, total: int) -> bool:
        """Whether it moves backward (what a NO SCROLL cursor refuses)."""
        at = self._row(position, total)
        if at is not None:
            return at <= position
        return self.backward or self.count is not None and self.count < 0

    def _row(self, position: int, total: int) -> int | None:
        """The number of the one row it goes to (ABSOLUTE, RELATIVE), else None."""
        if self.absolute is not None:
            return self.absolute if self.absolute >= 0 else total + 1 + self.absolute
        return None if self.relative is None else position + self.relative


def read_declare(text: str) -> tuple[Declared, str]:
    """The cursor of ``DECLARE name [ASENSITIVE | INSENSITIVE] [NO SCROLL | SCROLL] CURSOR
    [WITH HOLD | WITHOUT HOLD] FOR query`` and the query's text."""
    tokens = command_tokens(text)
    if len(tokens) < 2 or tokens[1].token_type not in _NAMES:
        raise SyntaxProblem("DECLARE takes a cursor's name: DECLARE c CURSOR FOR SELECT …")
    name = _name(tokens[1])
    words = []
    for index, token in enumerate(tokens[2:], start=2):
        word = token.text.upper()
        if word == "FOR":
            if "CURSOR" not in words or index + 1 == len(tokens):
                break
            if "BINARY" in words:
                raise NotSupported("DECLARE … BINARY CURSOR is not supported; ask binary "
                                   "results with the protocol's result formats instead")
            hold = words[-2:] == ["WITH", "HOLD"]
            scroll = not any(words[i:i + 2] == ["NO", "SCROLL"] for i in range(len(words)))
            return Declared(name, hold, scroll), text[tokens[index + 1].start:]
        words.append(word)
    raise SyntaxProblem("DECLARE reads DECLARE name CURSOR [WITH HOLD] FOR query")


def read_fetch(text: str) -> Fetch:
    """``FETCH|MOVE [direction] [FROM | IN] name``, every direction PostgreSQL reads."""
    tokens = command_tokens(text)
    command = tokens[0].text.upper()
    words = list(tokens[1:])
    if not words or words[-1].token_type not in _NAMES:
        raise SyntaxProblem(f"{command} takes a cursor's name: FETCH FORWARD 100 FROM c")
    name = _name(words.pop())
    if words and words[-1].text.upper() in ("FROM", "IN"):
        words.pop()
    said = [word.text.upper() for word in words]
    fetch = Fetch(name, command == "MOVE")
    number = _number("".join(said[1:]))
    if not said or said in (["NEXT"], ["FORWARD"]):
        return fetch
    if said == ["PRIOR"] or said == ["BACKWARD"]:
        return replace(fetch, count=-1)
    if said == ["FIRST"] or said == ["LAST"]:
        return replace(fetch, count=None, absolute=1 if said == ["FIRST"] else -1)
    if said[0] == "ABSOLUTE" and number is not None:
        return replace(fetch, count=None, absolute=number)
    if said[0] == "RELATIVE" and number is not None:
        return replace(fetch, count=None, relative=number)
    if said in (["ALL"], ["FORWARD", "ALL"], ["BACKWARD", "ALL"]):
        return replace(fetch, count=None, backward=said[0] == "BACKWARD")
    if said[0] in ("FORWARD", "BACKWARD") and number is not None:
        return _counted(fetch, number if said[0] == "FORWARD" else -number)
    if _number("".join(said)) is not None:
        return _counted(fetch, _number("".join(said)))
    raise SyntaxProblem(f"{command} {' '.join(said)} is not a direction: {_DIRECTIONS}")


def _counted(fetch: Fetch, count: int) -> Fetch:
    """``count`` rows on; none (FORWARD 0, BACKWARD 0, 0): the current row again."""
    return replace(fetch, count=None, relative=0) if count == 0 else replace(fetch, count=count)


def _number(text: str) -> int | None:
    """A signed whole number's value (``-`` and its digits are two tokens)."""
    digits = text[1:] if text[:1] in "+-" else text
    return int(text) if digits.isdigit() else None


def read_close(text: str) -> str | None:
    """The cursor ``CLOSE name`` names; None for ``CLOSE ALL``."""
    tokens = command_tokens(text)
    if len(tokens) == 2 and tokens[1].token_type != TokenType.IDENTIFIER \
            and tokens[1].text.upper() == "ALL":  # CLOSE "ALL" is a cursor's name
        return None
    if len(tokens) != 2 or tokens[1].token_type not in _NAMES:
        raise SyntaxProblem("CLOSE takes a cursor's name, or ALL")
    return _name(tokens[1])


def missing(name: str) -> ProxyError:
    return ProxyError(f'cursor "{name}" does not exist', "34000")


def _name(token: Token) -> str:
    """A quoted name as written, an unquoted one in lower case, as PostgreSQL reads it."""
    return token.text if token.token_type == TokenType.IDENTIFIER else token.text.lower()
