"""Where each statement a client sends goes: answered by the connection itself
(transactions, ordinary settings), by the engine (anything naming a table of the rules,
and ``idp.*`` settings), or by the shadow catalog (catalog and constant queries).

Decided from the text alone, before anything runs, so that a message is refused whole.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from proxy.analyze import POSTGRES, parse_tokens
from proxy.errors import NotSupported, ProxyError, Refused, SyntaxProblem
from proxy.interrupts import checkpoint
from proxy.rules import Rules
from proxy.wire.copy_out import CopyOptions, read_copy
from proxy.wire.cursors import Declared, read_declare

# sqlglot reads SQL by recursion and hits Python's stack between 40 and 50 nested
# brackets (measured): deeper statements are refused before they are parsed.
MAX_NESTING = 32
_NESTS = {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1, TokenType.CASE: 1, TokenType.END: -1}
_PREFIX = {TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE}


class Route(enum.Enum):
    LOCAL = "local"
    ENGINE = "engine"
    SHADOW = "shadow"


LOCAL_WORDS = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE",
               "DEALLOCATE", "DISCARD", "CLOSE", "UNLISTEN", "LISTEN", "SET", "RESET", "SHOW",
               "FETCH", "MOVE"}
_QUERY_WORDS = {"SELECT", "WITH", "VALUES", "TABLE", "("}

# Catalog objects and functions that carry data statistics, other sessions' activity,
# files or other databases (docs/wire.md): refused even against the empty shadow, so
# that tools learn they are not available rather than read misleading empties.
_BLOCKED = {
    "pg_stats", "pg_stats_ext", "pg_stats_ext_exprs", "pg_statistic",
    "pg_statistic_ext_data", "reltuples", "relpages", "relallvisible", "pg_relation_size",
    "pg_table_size", "pg_total_relation_size", "pg_indexes_size", "pg_database_size",
    "pg_read_file", "pg_read_binary_file", "pg_stat_file", "lo_import", "lo_export", "lo_get",
    "pg_largeobject", "query_to_xml", "table_to_xml", "cursor_to_xml", "database_to_xml",
    "schema_to_xml", "pg_locks", "pg_prepared_statements", "txid_current",
    "pg_current_xact_id", "inet_server_addr", "set_config", "pg_sleep", "pg_sleep_for",
    "pg_sleep_until", "summarize",
}
# pg_cursors is answered by the catalog's own session (no cursor there): psycopg2 asks it
# before closing a named cursor it never executed (SQLAlchemy's stream_results).
# Answered with the session's own process id, the one BackendKeyData gave the client
# (Superset's SQL Lab asks for it before each statement, to cancel it later): it
# reveals nothing about data, and the shadow's own would mean nothing to the client.
BACKEND_PID = "pg_backend_pid"
_BLOCKED_PREFIXES = ("pg_stat_", "pg_statio_", "pg_ls_", "dblink", "duckdb_", "pragma_",
                     "read_csv", "read_parquet", "read_json", "read_text", "read_blob")


@dataclass(frozen=True)
class Statement:
    text: str
    route: Route
    word: str  # the leading keyword, upper case ("" for an empty statement)
    tokens: tuple[Token, ...] = ()  # of ``text``, at its offsets
    copy: CopyOptions | None = None  # COPY (this statement) TO STDOUT with these options
    backend_pid: bool = False  # names pg_backend_pid: see with_backend_pid
    tree: exp.Expression | None = None  # an engine statement parsed here, if it was
    cursor: Declared | None = None  # DECLARE this cursor FOR this statement


def read_message(sql: str, rules: Rules,
                 known: Callable[[Sequence[Token]], bool] | None = None) -> list[Statement]:
    """The routed statements of a query message, after the limits that keep one message
    from holding a worker for long: its length (``[server] max_statement_length``,
    checked before any reading) and its nesting (checked on the tokens, before parsing).
    ``known``: whether tokens are those of a statement the engine has analysed (with
    other literals, maybe); such a one goes to the engine without being parsed here."""
    limit = rules.server.max_statement_length
    if len(sql) > limit:
        raise ProxyError(f"statement too long: {len(sql)} characters, at most {limit} "
                         "([server] max_statement_length); split it into smaller "
                         "statements", "54000")
    statements = []
    for text, tokens in split(sql):
        checkpoint()  # each statement is read (tokenised, parsed) in up to a second
        statements.append(classify(text, rules, tokens, known))
    return statements


def split(sql: str) -> list[tuple[str, list[Token] | None]]:
    """The statements of a message, as the client wrote them (comments kept), and for
    the one at the start of the message its tokens (at the same offsets in the message
    as in its text; the others' would not be)."""
    tokens = _tokens(sql)
    _check_nesting(tokens)
    pieces, start, first = [], 0, []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            pieces.append((sql[start:token.start], None if start else first))
            start = token.end + 1
        elif not start:
            first.append(token)
    pieces.append((sql[start:], None if start else first))
    return [piece for piece in pieces if piece[0].strip()] or [("", [])]


def classify(text: str, rules: Rules, tokens: Sequence[Token] | None = None,
             known: Callable[[Sequence[Token]], bool] | None = None) -> Statement:
    """Route one statement (``tokens``: its own, if read already; ``known``: see
    read_message)."""
    tokens = tuple(_tokens(text) if tokens is None else tokens)
    if not tokens:
        return Statement(text, Route.LOCAL, "")
    word = tokens[0].text.upper()
    if word in ("SET", "RESET", "SHOW"):
        words, _ = setting_words(tokens)
        words = [w for w in words if w not in ("session", "local")]
        route = Route.ENGINE if words and words[0].startswith("idp.") else Route.LOCAL
        return Statement(text, route, word, tokens)
    if word in LOCAL_WORDS:
        return Statement(text, Route.LOCAL, word, tokens)
    if word == "DECLARE":  # a cursor over an aggregate query: proxy.wire.cursors
        declared, query = read_declare(text)
        inner = classify(query, rules, known=known)
        if inner.route is not Route.ENGINE or inner.copy is not None:
            raise NotSupported("DECLARE … CURSOR FOR takes a query of the rules' tables; ask "
                               "the catalog, or a constant, without a cursor")
        return replace(inner, cursor=declared)
    if word == "COPY":
        query, options = read_copy(tokens, text)
        inner = classify(query, rules, known=known)
        if inner.route is Route.LOCAL:
            raise SyntaxProblem("COPY (…) TO STDOUT takes a query, e.g. COPY (SELECT COUNT(*) "
                                "FROM people) TO STDOUT")
        return replace(inner, copy=options)
    if word not in _QUERY_WORDS or (known is not None and known(tokens)):
        return Statement(text, Route.ENGINE, word, tokens)
    tree = _tree(text, tokens)
    if _names_a_rules_table(tree, tokens, rules):
        return Statement(text, Route.ENGINE, word, tokens, tree=tree)
    backend_pid = False
    for index, token in enumerate(tokens):
        name = token.text.lower()
        if token.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            continue
        if name == "set_config" and _sets_jit(tokens[index + 1:index + 4]):
            continue
        if name in _BLOCKED or name.startswith(_BLOCKED_PREFIXES):
            raise Refused(f"{name} is not available through the proxy: it would show data "
                          "statistics, other sessions or files; ask aggregate questions "
                          "instead", "42501")
        backend_pid = backend_pid or name == BACKEND_PID
    return Statement(text, Route.SHADOW, word, backend_pid=backend_pid)


def _sets_jit(following: Sequence[Token]) -> bool:
    """``set_config('jit', …)``: asyncpg turns the shadow's JIT off around its type
    introspection (of a list parameter's array type, say); a setting of the catalog's
    own session, which holds no data. Its name the one string, as PostgreSQL joins
    strings on separate lines into one."""
    return (len(following) == 3 and following[0].token_type == TokenType.L_PAREN
            and following[1].token_type == TokenType.STRING
            and following[1].text.lower() == "jit"
            and following[2].token_type == TokenType.COMMA)  # not 'jit' '_above_cost'


def with_backend_pid(text: str, pid: int) -> str:
    """The catalog statement with each ``pg_backend_pid()`` call replaced by the
    session's own process id (an int4 named like the function, as PostgreSQL names
    it), so that the shadow answers it with the id the client was given."""
    try:
        statements = sqlglot.parse(text, read="postgres")
    except SqlglotError:
        return text  # the shadow reports its syntax error, as for any catalog statement

    def replace_call(node: exp.Expression) -> exp.Expression:
        call = node.expression if isinstance(node, exp.Dot) else node
        if not (isinstance(call, exp.Anonymous) and call.name.lower() == BACKEND_PID
                and not call.expressions):
            return node
        value = exp.cast(exp.Literal.number(pid), exp.DataType.build("int4"))
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            return exp.alias_(value, BACKEND_PID)
        return value

    return ";\n".join(statement.transform(replace_call).sql(dialect="postgres")
                       for statement in statements if statement is not None)


def _check_nesting(tokens: list[Token]) -> None:
    """Refuse (54001) brackets, CASEs and runs of prefix operators (NOT NOT ..., - - ...)
    nested deeper than MAX_NESTING: the parser would exhaust its stack on them."""
    depth = run = 0
    for token in tokens:
        depth = max(0, depth + _NESTS.get(token.token_type, 0))
        run = run + 1 if token.token_type in _PREFIX else 0
        if depth + run > MAX_NESTING:
            raise ProxyError(f"statement too complex: brackets, CASEs or NOTs nested more "
                             f"than {MAX_NESTING} deep; write it with less nesting", "54001")


def _tokens(text: str) -> list[Token]:
    try:
        return POSTGRES.tokenize(text)
    except SqlglotError:
        raise SyntaxProblem("the statement could not be read (unbalanced quotes or "
                            "brackets?)") from None


def setting_words(tokens: tuple[Token, ...]) -> tuple[list[str], str]:
    """The name of a SET/RESET/SHOW (its words, lower case) and, for SET, the value's
    text: ``SET search_path TO a, b`` gives (["search_path"], "a, b"); a quoted name
    keeps its quotes (``"$user"``), as PostgreSQL shows it."""
    words: list[str] = []
    for index, token in enumerate(tokens[1:], start=1):
        zone = [t.text.upper() for t in tokens[index:index + 2]] == ["TIME", "ZONE"]
        if token.token_type == TokenType.EQ or token.text.upper() == "TO" or zone:
            if zone:  # SET TIME ZONE value (a number may be signed: two tokens)
                words, index = [*words, "time", "zone"], index + 1
            values: list[str] = [""]  # the tokens between commas as one: ``-4``
            for value in tokens[index + 1:]:
                if value.token_type == TokenType.COMMA:
                    values.append("")
                else:
                    values[-1] += (f'"{value.text}"' if value.token_type
                                   == TokenType.IDENTIFIER else value.text)
            return words, ", ".join(values)
        if token.token_type == TokenType.DOT and words:
            words[-1] += "."
        elif words and words[-1].endswith("."):
            words[-1] += token.text.lower()
        else:
            words.append(token.text.lower())
    if tokens[0].text.upper() == "SET" and len(words) > 1:  # SET SESSION AUTHORIZATION x
        return words[:-1], tokens[-1].text
    return words, ""


def _tree(text: str, tokens: tuple[Token, ...]) -> exp.Expression | None:
    """The statement's tree, parsed from its tokens; None when it does not parse."""
    try:
        return parse_tokens(list(tokens), text)
    except (SyntaxProblem, SqlglotError):
        return None


def _names_a_rules_table(tree: exp.Expression | None, tokens: tuple[Token, ...],
                         rules: Rules) -> bool:
    """True when the statement reads a table the rules declare. When the text does not
    parse, any identifier spelled like such a table counts, so doubt goes to the
    engine, which refuses what it cannot analyse."""
    if tree is not None:
        names = {table.name.lower() for table in tree.find_all(exp.Table)}
    else:
        names = {t.text.lower() for t in tokens
                 if t.token_type in (TokenType.VAR, TokenType.IDENTIFIER)}
    return any(rules.table(name) is not None for name in names)
