"""Cursors declared in SQL: ``DECLARE name CURSOR FOR query``, then ``FETCH``, ``MOVE``
and ``CLOSE``. psycopg's named cursors (Ibis's ``to_pyarrow``), psycopg2's (SQLAlchemy's
``stream_results``, pandas' ``read_sql(chunksize=…)``) read a result a batch at a time
this way.

The query is answered when the cursor is declared — one release, charged once, as if
sent alone — and the cursor holds the answer's rows for FETCH to hand out forward:
nothing more is read from the data, so a cursor shows no more than its query's
answer. As in PostgreSQL, a cursor WITHOUT HOLD (the default) is declared in a
transaction block and closed when it ends; WITH HOLD lives until CLOSE or the session's
end. What is not supported is refused in one line before anything runs: BINARY (ask
binary results with the protocol's result formats instead), a backward or absolute
FETCH (these cursors read forward), and a cursor over the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.tokens import Token, TokenType

from proxy.analyze import command_tokens
from proxy.errors import NotSupported, ProxyError, SyntaxProblem

MAX_CURSORS = 100  # open at once in one session: each holds an answer's rows
# rows a session's cursors may hold: a DECLARE past it is refused before it runs; one
# over public tables alone (free) also where its own rows would pass it
MAX_HELD_ROWS = 100_000

_NAMES = (TokenType.VAR, TokenType.IDENTIFIER)
_FORWARD = "FETCH and MOVE read forward: NEXT, FORWARD, FORWARD n, FORWARD ALL, n or ALL"


@dataclass(frozen=True)
class Declared:
    """A DECLARE's cursor: its name and whether it outlives its transaction."""

    name: str
    hold: bool


@dataclass(frozen=True)
class Fetch:
    """A FETCH or MOVE: the cursor's name and how many rows (None: all that are left)."""

    name: str
    count: int | None
    move: bool


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
            return Declared(name, hold), text[tokens[index + 1].start:]
        words.append(word)
    raise SyntaxProblem("DECLARE reads DECLARE name CURSOR [WITH HOLD] FOR query")


def read_fetch(text: str) -> Fetch:
    """``FETCH|MOVE [NEXT | FORWARD [n | ALL] | n | ALL] [FROM | IN] name``."""
    tokens = command_tokens(text)
    move = tokens[0].text.upper() == "MOVE"
    words = list(tokens[1:])
    if not words or words[-1].token_type not in _NAMES:
        raise SyntaxProblem(f"{tokens[0].text.upper()} takes a cursor's name: FETCH "
                            "FORWARD 100 FROM c")
    name = _name(words.pop())
    if words and words[-1].text.upper() in ("FROM", "IN"):
        words.pop()
    if words and words[0].text.upper() == "FORWARD":
        words = words[1:] or words[:1]  # FORWARD alone: NEXT
    said = [word.text.upper() for word in words]
    if not said or said in (["NEXT"], ["FORWARD"]):
        return Fetch(name, 1, move)
    if said == ["ALL"]:
        return Fetch(name, None, move)
    if len(words) == 1 and words[0].token_type == TokenType.NUMBER and said[0].isdigit() \
            and int(said[0]) > 0:
        return Fetch(name, int(said[0]), move)
    raise NotSupported(f"{tokens[0].text.upper()} {' '.join(said)} is not supported: "
                       f"{_FORWARD}")


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
