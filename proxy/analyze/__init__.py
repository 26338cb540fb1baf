"""SQL text → validated QueryPlan: a short, named sequence of checks over the sqlglot tree.

Whether a query is refused depends only on its text, the rules and the session settings
(SPEC §3.4); nothing here touches the backend.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from proxy.analyze.aggregate_forms import (
    WRITTEN,
    percentiles_of_an_array,
    regressions_as_moments,
)
from proxy.analyze.aggregates import SUPPORTED, is_aggregate, narrowed_units, recognise
from proxy.analyze.canonical import canonical_sql
from proxy.analyze.expressions import with_expressions
from proxy.analyze.group_keys import (
    check_group_count,
    default_name,
    group_terms,
    integer_domain_keys,
    matching_group,
    narrow_window,
    selection_refusal,
    terms_kept,
)
from proxy.analyze.grouping_sets import grouping_sets_plan
from proxy.analyze.having import having_plan
from proxy.analyze.joins import joined_table, resolver, split_joins
from proxy.analyze.key_listing import key_listing
from proxy.analyze.key_restriction import narrowed_domains
from proxy.analyze.keyed_terms import keyed_terms
from proxy.analyze.merge_steps import merge_steps, steps
from proxy.analyze.ordering import limit_of, offset_of, order_by
from proxy.analyze.outer import outer_plan, over_scalars, union_plan, windowed
from proxy.analyze.per_unit import per_unit_plan
from proxy.analyze.predicate import check_predicate
from proxy.analyze.quantified import quantified_as_in
from proxy.analyze.scoped_parts import scoped_parts
from proxy.analyze.semi_joins import (
    exists_out,
    in_as_exists,
    public_semi_joins,
    refuse_subqueries,
    semi_joins,
)
from proxy.analyze.staged import scalar_releases, staged_plan, top_choice_plan
from proxy.backends.base import Capabilities
from proxy.errors import (
    NotSupported,
    ProxyError,
    RawRowAccess,
    ReadOnly,
    Refused,
    SyntaxProblem,
    UnknownColumn,
    UnknownTable,
)
from proxy.interrupts import checkpoint
from proxy.rules import Rules, Table
from proxy.settings import Settings
from proxy.vocabulary import (
    AVG,
    DISTINCT,
    EXPONENTIAL,
    GLOBAL,
    LOCAL,
    MAX,
    MIN,
    PERCENTILE,
    PIECEWISE,
    PUBLIC,
    SELECTED,
    SMOOTH,
    SPREADS,
    SUM,
    VALUE,
    Aggregate,
    CombinedPlan,
    DerivedColumn,
    GroupingSetsPlan,
    GroupKey,
    Join,
    Kind,
    Mechanism,
    OutputColumn,
    PassthroughPlan,
    QueryPlan,
    StagedPlan,
    multiplicity,
)
from proxy.zones import reading_in

logging.getLogger("sqlglot").setLevel(logging.ERROR)

POSTGRES = sqlglot.Dialect.get_or_raise("postgres")


def command_tokens(text: str) -> list[Token]:
    """The tokens of ``text``; where it starts with a command whose rest sqlglot keeps
    as one string (EXPLAIN, DECLARE, FETCH), that rest's own tokens, at their offsets in
    ``text``, so that its parameters and names are found as in any statement."""
    tokens = POSTGRES.tokenize(text)
    if len(tokens) < 2 or tokens[0].token_type not in (TokenType.COMMAND, TokenType.FETCH):
        return tokens
    first = tokens[0]
    rest = POSTGRES.tokenize(text[first.end + 1:])
    for token in rest:
        token.start += first.end + 1
        token.end += first.end + 1
    return [first, *rest]


# The most tokens one statement may have (a 10,000-value IN list is about 20,000): its
# analysis is linear, and this bounds its time to a few seconds on a small machine. Its
# parse, which no cancel reaches (sqlglot's compiled parser takes no Python override),
# is at most some 40 ms of CPU here.
MAX_TOKENS = 20_000
# The most columns an answer may have: PostgreSQL's own limit on a target list (54011).
# DuckDB, which runs an outer query's post-processing, plans 1,664 computed columns in
# 2 s and 5,000 in 15 s (2 cores), in steps a cancel does not reach.
MAX_COLUMNS = 1_664
# The most values (rows × columns) one answer may hold. Each is a released value, a
# row cell, an entry of the cached JSON and an encoded cell, about 170 bytes in all
# (measured: an outer query's 2.9 million cells grew the server by 370 MB), so this
# keeps an answer within some 40 MB (docs/clients.md, limits).
MAX_ANSWER_VALUES = 250_000

_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Copy,
           exp.Merge, exp.TruncateTable, exp.Grant, exp.Command, exp.Use, exp.Attach,
           exp.Detach, exp.Pragma)
_COMPOUND = (exp.Join, exp.Subquery, exp.With, exp.Union, exp.Intersect, exp.Except,
             exp.Window, exp.Lateral, exp.Unnest)


def parse_statements(sql: str) -> list[exp.Expression]:
    """Split and parse a message or script (PostgreSQL syntax, DuckDB spellings accepted)."""
    statements = statement_tokens(sql)
    if not statements:
        raise SyntaxProblem("empty query; send one SELECT with aggregates")
    return [parse_tokens(tokens, sql) for tokens in statements]


def statement_tokens(sql: str) -> list[list[Token]]:
    """The tokens of each statement of a message or script, split at semicolons as
    sqlglot's parser splits them (a statement that is only a comment has none, and is
    left out)."""
    statements: list[list[Token]] = [[]]
    try:
        tokens = POSTGRES.tokenize(sql)
    except TokenError as exc:  # an unclosed quote or comment: as PostgreSQL, 42601
        start = getattr(exc, "start", None)
        raise SyntaxProblem("syntax error: a quoted string, quoted name or comment is not "
                            "closed; check the statement's quotes",
                            start + 1 if isinstance(start, int) else None) from None
    carried: list[str] = []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            statements.append([])
            # a comment after a semicolon on its line opens the next statement (its
            # /*+ epsilon=… */ hint): the tokenizer gives it to the semicolon, and it was
            # dropped with it, so the statement was charged the default ε
            carried = list(token.comments or ())
        else:
            if carried and not statements[-1]:
                token.comments = carried + list(token.comments or ())
            carried = []
            statements[-1].append(token)
    return [tokens for tokens in statements if tokens]


def check_size(tokens: Sequence[Token]) -> None:
    """Refuse (54001, before any analysis or charge) a statement of more than
    MAX_TOKENS tokens."""
    if len(tokens) > MAX_TOKENS:
        raise ProxyError(f"statement too complex: more than {MAX_TOKENS:,} words, numbers and "
                         "signs in one statement (e.g. an IN list of over 10,000 values); "
                         "filter on a range, or split the list over several queries", "54001")


_QUANTIFIERS = {TokenType.ANY, TokenType.SOME, TokenType.ALL}
_COMPARING = {TokenType.EQ, TokenType.NEQ, TokenType.GT, TokenType.GTE, TokenType.LT,
              TokenType.LTE}
_COMPARED = (*_COMPARING, TokenType.BETWEEN, TokenType.IN, TokenType.LIKE, TokenType.ILIKE)
_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<",
                exp.LTE: "<="}


def parse_tokens(tokens: list[Token], sql: str) -> exp.Expression:
    """One statement's tree from its tokens (of ``sql``, which error positions refer to)."""
    try:
        tree = POSTGRES.parser().parse(tokens, sql)[0]
    except ParseError as exc:
        raise _syntax_problem(sql, exc, tokens[0]) from None
    if any(token.token_type == TokenType.STRING and "%" in token.text for token in tokens):
        _refuse_percent_in_to_char(tokens)
    if any(token.token_type == TokenType.FETCH for token in tokens):
        _fetch_as_limit(tree)
    if any(token.text.lower() == "date" for token in tokens):
        _date_as_cast(tree)
    if any(token.token_type in _QUANTIFIERS for token in tokens):
        quantified_as_in(tree)
    if sum(t.token_type in _COMPARED for t in tokens) > 1:
        _comparisons_of_comparisons(tree)
    if any(token.token_type == TokenType.STAR for token in tokens):
        _star_as_condition(tree)
    if any(token.text.lower() == "timezone" for token in tokens):
        _timezone_as_at(tree)
    if any(token.token_type == TokenType.FOR for token in tokens):
        _refuse_locks(tree)
    if any(token.token_type in (TokenType.ARRAY, TokenType.L_BRACKET) for token in tokens):
        percentiles_of_an_array(tree)
    if any(token.text.lower().startswith("regr_") for token in tokens):
        regressions_as_moments(tree)
    return tree


def _refuse_locks(tree: exp.Expression) -> None:
    """``FOR UPDATE`` / ``FOR SHARE`` (PostgreSQL refuses them beside aggregates): they
    were answered as if not written, or sent to lock a public table's rows."""
    lock = tree.find(exp.Lock)
    if lock is not None:
        kind = "UPDATE" if lock.args.get("update") else "SHARE"
        raise NotSupported(f"FOR {kind} is not allowed: the proxy only reads, and locks no "
                           "row; ask without it")


def _timezone_as_at(tree: exp.Expression) -> None:
    """PostgreSQL's ``timezone(zone, t)`` is ``t AT TIME ZONE zone`` (the operator is
    that function): read as the operator, whose every use the analysis knows."""
    for call in list(tree.find_all(exp.Anonymous)):
        if call.name.lower() == "timezone" and len(call.expressions) == 2:
            zone, moment = call.expressions
            call.replace(exp.AtTimeZone(this=moment, zone=zone))


def _star_as_condition(tree: exp.Expression) -> None:
    """``HAVING *``: PostgreSQL's grammar has no ``*`` condition (a syntax error), but
    the parser took it for one, which sqlglot's own conjunctions then refuse to join."""
    for clause in tree.find_all(exp.Where, exp.Having, exp.Join):
        if isinstance(clause.args.get("on" if isinstance(clause, exp.Join) else "this"),
                      exp.Star):
            raise SyntaxProblem('syntax error at or near "*": a condition is a comparison '
                                "or another boolean expression")


def _comparisons_of_comparisons(tree: exp.Expression) -> None:
    """``age > 30 = TRUE``: PostgreSQL's comparisons do not chain (a syntax error), but
    the parser read it as ``(age > 30) = TRUE`` and the SQL sent had no brackets, which
    the backend refused after the debit: refused here, as PostgreSQL refuses it. A
    BETWEEN, IN or LIKE compared (``x IN (1, 2) = TRUE``: PostgreSQL binds them first)
    is bracketed, so every backend reads it so."""
    for node in list(tree.find_all(*_COMPARISONS)):
        for side in (node.this, node.expression):
            if type(side) in _COMPARISONS:
                raise _chained(_COMPARISONS[type(node)])
            if isinstance(side, _RANGES):
                side.replace(exp.Paren(this=side.copy()))
    for node in list(tree.find_all(*_RANGES)):  # x BETWEEN 1 AND 2 IN (TRUE): as above
        operand = node.this.this if isinstance(node.this, exp.Not) else node.this
        if isinstance(operand, _RANGES) or type(operand) in _COMPARISONS:
            raise _chained(node.key.upper())


_RANGES = (exp.Between, exp.In, exp.Like, exp.ILike)


def _chained(word: str) -> SyntaxProblem:
    return SyntaxProblem(f'syntax error at or near "{word}": comparisons, BETWEEN, IN and '
                         "LIKE do not chain; bracket one of them, e.g. (age > 30) = TRUE")


def _refuse_percent_in_to_char(tokens: list[Token]) -> None:
    """A to_char format holding ``%``: the parser turns PostgreSQL's fields into
    strftime's (``YYYY`` is ``%Y``), so ``'%Y'`` and ``'YYYY'`` reach the analysis alike
    and the proxy would format the first as the year where PostgreSQL writes ``%4``;
    read from the tokens, before that."""
    calls: list[str] = []
    for previous, token in zip([None, *tokens], tokens):
        if token.token_type == TokenType.L_PAREN:
            calls.append(previous.text.lower() if previous is not None else "")
        elif token.token_type == TokenType.R_PAREN and calls:
            calls.pop()
        elif token.token_type == TokenType.STRING and "%" in token.text and calls \
                and calls[-1] == "to_char":
            raise NotSupported("a to_char format holding % is not supported (the proxy "
                               "cannot read it as PostgreSQL does); leave the % out")


def _date_as_cast(tree: exp.Expression) -> None:
    """``DATE(x)`` (Looker's day, PostgreSQL's function-style cast) is ``CAST(x AS DATE)``,
    the form the buckets, the filters and the keys read."""
    for node in list(tree.find_all(exp.Date)):
        if not node.expressions and node.args.get("zone") is None:
            node.replace(exp.cast(node.this, exp.DataType.Type.DATE))


def _fetch_as_limit(tree: exp.Expression) -> None:
    """``FETCH FIRST|NEXT [n] ROW[S] ONLY`` (standard SQL, which Looker and DBeaver
    write) is ``LIMIT n``, n 1 when left out, as PostgreSQL reads it; ``WITH TIES`` and
    ``PERCENT`` are refused."""
    for fetch in list(tree.find_all(exp.Fetch)):
        options = fetch.args.get("limit_options")
        if options is not None and (options.args.get("with_ties") or options.args.get("percent")):
            raise NotSupported("FETCH ... WITH TIES or PERCENT is not supported; write "
                               "FETCH FIRST n ROWS ONLY or LIMIT n")
        fetch.replace(exp.Limit(expression=fetch.args.get("count") or exp.Literal.number(1)))


def _syntax_problem(sql: str, error: ParseError, start: Token) -> SyntaxProblem:
    """PostgreSQL's wording and position, not the parser's: sqlglot gives the line, the
    column where the offending token ends, and the token. A statement that starts with a
    name (``SELEC COUNT(*)``) is wrong at its first word, as PostgreSQL says, though
    sqlglot reads on to a later token."""
    if start.token_type == TokenType.VAR:
        token, line, column = start.text, start.line, start.col
        first = {}
    elif not error.errors:
        return SyntaxProblem("syntax error; check the statement's SQL")
    else:
        first = error.errors[0]
        token, line, column = (first.get("highlight") or "", first.get("line"),
                               first.get("col"))
    if not token or not line or not column:
        return SyntaxProblem("syntax error; check the statement's SQL")
    lines = sql.split("\n")
    position = sum(len(text) + 1 for text in lines[:line - 1]) + column - len(token) + 1
    position = max(1, min(position, len(sql)))
    missing = "; a closing bracket is missing" if first.get("description") == "Expecting )" \
        else ""
    return SyntaxProblem(f'syntax error at or near "{token}" (line {line}, column '
                         f'{column - len(token) + 1}){missing}', position)


def analyze(
    statement: exp.Expression, rules: Rules, settings: Settings, hint: Decimal | None = None,
    shown: bool = True, *, owned: bool = False,
) -> QueryPlan | PassthroughPlan | GroupingSetsPlan | CombinedPlan | StagedPlan:
    """Check one statement and describe what to compute; raise Refused otherwise.
    ``shown``: False for a release the proxy reads itself (a stage of a ``StagedPlan``),
    whose rows are bounded by max_groups alone, not by the answer's size. Its times are
    read in the session's TimeZone. ``owned``: the caller hands ``statement`` over (it
    neither reads nor changes it after), so a statement over public tables is kept as
    the plan's without a copy (a staged statement with its releases in their places:
    TPC-H Q20's ``VALUES`` of 8,508 rows)."""
    # a prepared statement's values are bound into its text before it is analysed
    # (proxy.wire.params): a $n left is one no Bind gave, as PostgreSQL says (42P02)
    unbound = next((p for p in statement.find_all(exp.Parameter) if p.name.isdigit()), None)
    if unbound is not None:
        raise Refused(f"there is no parameter ${unbound.name}: write the value, or prepare "
                      "the statement and bind it", "42P02")
    with reading_in(settings.time_zone), terms_kept():
        return _analyzed(statement, rules, settings, hint, shown, owned)


def _analyzed(statement: exp.Expression, rules: Rules, settings: Settings,
              hint: Decimal | None, shown: bool, owned: bool = False
              ) -> QueryPlan | PassthroughPlan | GroupingSetsPlan | CombinedPlan | StagedPlan:
    checkpoint()
    if isinstance(statement, exp.Union):  # of aggregate queries: a release each
        return union_plan(statement, lambda branch: analyze(branch, rules, settings, hint,
                                                            shown), canonical_sql)
    select = _distinct_unwrapped(_only_select(statement))
    if _public_only(select, rules):
        return PassthroughPlan(select if owned else select.copy())
    if select.find(exp.TableSample):  # it was dropped: the answer covered every row
        raise NotSupported("TABLESAMPLE is not supported over protected tables (an answer "
                           "covers every row in scope); filter with WHERE instead")
    sets = grouping_sets_plan(select, lambda part: analyze(part, rules, settings, hint),
                              canonical_sql)
    if sets is not None:
        return sets
    select = merge_steps(select, rules, owned)
    checkpoint()  # between the whole-tree passes, each tenths of a second near the token limit
    if _public_only(select, rules):  # CTEs over public tables, merged away
        return PassthroughPlan(select.copy())
    _refuse_unmerged_public(select, rules)
    _left_units_counted(select, rules)
    # aggregates of several scopes (COUNTD(IF …) beside others): a release per scope
    parts = scoped_parts(select, rules)
    if parts is not None:
        return analyze(parts, rules, settings, hint, shown)
    # an aggregate over per-unit aggregates: over the relation of one row per unit
    nested = per_unit_plan(
        select, rules, lambda rows: analyze(rows, rules, replace(settings, prior=None), hint),
        lambda units, relation: analyze(units, relation, settings, hint))
    if nested is not None:
        return nested
    # a step's largest group, kept by comparing with its MAX (TPC-H Q15): a release first
    top = top_choice_plan(select, rules, lambda tree: analyze(tree, rules, settings, hint),
                          canonical_sql)
    if top is not None:
        return top
    outer = outer_plan(select, lambda inner: analyze(inner, rules, settings, hint, shown),
                       canonical_sql)
    if isinstance(outer, QueryPlan):
        _check_answer_size(outer.group_by, _columns(select, outer), rules, shown)
    if outer is not None:
        return outer
    place = _conditions_place(select)
    # a scalar subquery over a protected table compared in the WHERE: a release first
    staged = staged_plan(select, rules,
                         lambda tree, shown: analyze(tree, rules, settings, hint, shown),
                         canonical_sql)
    if staged is not None:
        return staged
    # a scalar subquery over a protected table in the select list: a release beside it
    select, scalar_bodies = scalar_releases(select, rules)
    scalars = [(canonical_sql(body), _scalar_release(analyze(body, rules, settings, hint)))
               for body in scalar_bodies]
    if scalars and not select.args.get("from_"):  # their values side by side
        return over_scalars(select, scalars)
    select = public_semi_joins(select, rules)  # x IN (SELECT k FROM public p …): a join
    select = in_as_exists(select, rules)  # x IN (SELECT unit FROM t …): an EXISTS
    refuse_subqueries(select, rules)
    # public tables joined many-to-one, a second protected table on the privacy unit
    alone, joins = split_joins(select, rules)
    alone, exists = exists_out(alone)  # EXISTS over the unit's tables: proxy.analyze.semi_joins
    if not joins and not exists:  # a filter's values: the declared keys (key_listing)
        try:
            listed = _the_protected_table(alone, rules)
        except Refused:  # refused below, in the order the other forms' messages expect
            listed = None
        listing = listed and key_listing(alone, listed, _column_resolver(listed, alone),
                                         rules.defaults.max_groups)
        if listing:
            return listing
    _refuse_compound(alone, rules)
    table = joined_table(_the_protected_table(alone, rules), joins)
    limit_of(select)
    _extremes_of_days(select, table, _column_resolver(table, alone, joins))
    post_processed = having_plan(select, table, lambda inner: analyze(  # its own copy
        inner, rules, settings, hint, shown, owned=True), canonical_sql, scalars)
    if post_processed is not None:
        main = post_processed.parts[0][1] if scalars else post_processed
        _check_answer_size(main.group_by, _columns(select, main), rules, shown)
        return post_processed
    if scalars:
        raise NotSupported("a scalar subquery stands beside an aggregate of the query "
                           "(COUNT(*) * 100.0 / (SELECT COUNT(*) FROM t)); this query has "
                           "none: ask the subquery alone")
    select = alone
    declared = _column_resolver(table, select, joins)  # WHERE and GROUP BY see declared columns
    where = select.args.get("where")
    if where is not None:  # terms decided per declared key, as IN lists the key
        # restriction of the GROUP BY reads too (proxy.analyze.keyed_terms)
        where.set("this", keyed_terms(where.this, table, declared))
    owners = {select.args["from_"].this.alias_or_name.lower(): _the_protected_table(alone, rules),
              **{j.alias: j.table for j in joins}}
    table, semi = semi_joins(exists, table, owners, declared, rules)
    if semi:
        declared = _column_resolver(table, select, joins)  # and the EXISTS's columns
    narrowing = narrowed_units(select, *unit_test(
        table, joins, select.args["from_"].this.alias_or_name.lower()))
    checkpoint()
    # aggregates over expressions (of the joined row's columns, docs/privacy.md §3.9)
    select, table = with_expressions(select, table, declared)
    resolve = _column_resolver(table, select, joins)  # and the aggregates their derived ones
    checkpoint()
    epsilon = settings.resolve_epsilon(rules, hint)
    individual = None if joins else _individual_query(select, table, settings, declared,
                                                      epsilon)
    if individual is not None:
        return _with_prior(individual, settings)
    where = select.args.get("where")
    group_by = tuple(integer_domain_keys(term, table, rules.defaults.delta,
                                         where and where.this, declared)
                     for term in group_terms(select, table, declared, rules.defaults.max_groups))
    check_group_count(group_by, rules.defaults.max_groups)
    selects = [term for term in group_by if term.kind == SELECTED]  # keys from the data
    for term in selects:
        refusal = selection_refusal(term, table, rules.defaults.delta)
        if refusal is not None:
            raise refusal
        if multiplicity(joins) > 1 and not table.privacy_unit:
            # a row's count would reach m on one key: docs/privacy.md §3.9
            raise NotSupported(f"GROUP BY {term.column} without declared keys is not answered "
                               f"over a join on a key with several rows per value "
                               f"(max_rows_per_key) when {table.name} has no privacy_unit; "
                               "group by declared keys or a public table's column, or join "
                               "on a unique key")
    aggregates, outputs = _select_list(select, table, group_by, resolve, joins)
    _check_answer_size(group_by, len(outputs) + 2 * settings.intervals * sum(
        output.aggregate is not None for output in outputs), rules, shown)
    model = settings.resolve_model(rules)
    for join in joins:  # the joined bound is the product of both tables' bounds
        if model == "dp" and join.protected and join.table.max_rows_per_unit is None:
            raise NotSupported(f"the DP model on {join.table.name} needs max_rows_per_unit in "
                               "the rules (a contribution bound per privacy unit); use "
                               "idp.model = 'idp'")
    _check_domains(table, aggregates, model, settings.resolve_sensitivity(rules) == "local")
    where = select.args.get("where")
    checkpoint()
    table = narrowed_domains(table, aggregates, group_by, where and where.this, bool(joins))
    plan = QueryPlan(
        table=table,
        where=_narrowed(check_predicate(where.this, table, declared, place) if where else None,
                        narrowing, table, declared),
        group_by=group_by,
        aggregates=aggregates,
        outputs=outputs,
        order_by=order_by(select, [output.name for output in outputs]),
        limit=limit_of(select),
        epsilon=epsilon,
        mechanism=_mechanism(settings, rules, model, aggregates),
        joins=joins,
        delta=rules.defaults.delta if selects else None,
        semi_joins=semi,
        time_zone=settings.time_zone,
        window=narrow_window(table, where.this if where else None, declared),
    )
    _check_distinct_values(plan)
    if settings.prior is not None:
        return _with_prior(plan, settings)
    if plan.mechanism.scale == SMOOTH and group_by:
        raise NotSupported("the smooth sensitivity is computed for queries without GROUP BY; "
                           "ask per key with WHERE, or use idp.sensitivity = 'global'")
    return plan


def _check_distinct_values(plan: QueryPlan) -> None:
    """COUNT(DISTINCT col) of a column other than the unit is calibrated as a COUNT of
    rows whose noise is of the most rows one unit owns (docs/privacy.md §3.7): over one
    table, or public tables joined to it. Over a chain or a protected join a COUNT is
    clipped per unit instead, which a set of values cannot be: refused there."""
    if any(agg.kind == DISTINCT for agg in plan.aggregates) and (
            plan.table.link is not None or any(join.protected for join in plan.joins)):
        raise NotSupported("COUNT(DISTINCT col) of a column other than the privacy unit is "
                           "answered over one protected table (and public tables joined to "
                           "it), not over a join of protected tables or a unit_via chain; "
                           "ask COUNT(DISTINCT unit), or COUNT(*) … GROUP BY the column's "
                           "declared keys")


def _narrowed(where: exp.Expression | None, narrowing: exp.Expression | None, table: Table,
              resolve) -> exp.Expression | None:
    """The scope's condition and the one of COUNT(DISTINCT CASE WHEN c THEN unit END)
    (``aggregates.narrowed_units``), checked as a CASE condition. A public table's
    column is refused in it: its conditions in the WHERE choose the keys read from that
    table (``engine._conditions_on``), and c must leave the keys as written."""
    if narrowing is None:
        return where
    condition = check_predicate(narrowing, table, resolve, "a CASE condition")
    for column in condition.find_all(exp.Column):
        declared = table.columns.get(column.name)
        if getattr(declared, "join", None) and not getattr(declared, "protected", True):
            raise NotSupported(f"the condition of COUNT(DISTINCT CASE WHEN … THEN unit END) "
                               f"names {column.name} of a public table; put that condition in "
                               "WHERE")
    return condition if where is None else exp.and_(where, condition)


def _scalar_release(plan: object) -> QueryPlan:
    """The plan of a scalar subquery of the select list: one aggregate query without
    GROUP BY (one row), else refused."""
    if not isinstance(plan, QueryPlan) or plan.group_by or len(plan.outputs) != 1:
        raise NotSupported("a scalar subquery in the select list is answered as a release "
                           "of its own when it asks one aggregate without GROUP BY, e.g. "
                           "(SELECT COUNT(*) FROM t WHERE …)")
    return plan


def _columns(select: exp.Select, plan: QueryPlan) -> int:
    """The columns of an outer query's answer (``*`` stands for the inner ones)."""
    return sum(len(plan.outputs) if isinstance(item, exp.Star) else 1
               for item in select.expressions)


def refuse_beyond_backend(work: QueryPlan | PassthroughPlan, capabilities: Capabilities
                          ) -> None:
    """Refuse (54001, before any debit) a statement whose conditions hold more ANDs and
    ORs than its backend's ``max_connectors``: the WHERE as sent (after merging), each
    aggregate's FILTER and CASE conditions, each EXISTS's, a per-unit source's, a public
    query's. An EXISTS on a backend that cannot compute it (``exists_in_select``) is
    refused too (0A000)."""
    if isinstance(work, QueryPlan) and work.semi_joins and not capabilities.exists_in_select:
        raise NotSupported("EXISTS over protected tables is answered on DuckDB and "
                           "PostgreSQL, not on this backend; ask without it")
    limit = capabilities.max_connectors
    if limit is None:
        return
    if isinstance(work, PassthroughPlan):
        trees = [work.sql]
    else:
        trees = [work.where] if work.where is not None else []
        trees += [column.expression for column in work.table.columns.values()
                  if isinstance(column, DerivedColumn) and column.expression is not None]
        trees += [semi.condition for semi in work.semi_joins if semi.condition is not None]
    connectors = sum(1 for tree in trees for _ in tree.find_all(exp.And, exp.Or))
    if connectors > limit:
        raise Refused("statement too complex for this backend: its "
                         f"conditions hold {connectors:,} ANDs and ORs, more than "
                         f"{limit:,}; ask with fewer terms (an IN list counts as none)",
                         "54001")
    if isinstance(work, QueryPlan) and work.per_unit is not None:
        refuse_beyond_backend(work.per_unit.source, capabilities)


def _check_answer_size(group_by: tuple[GroupKey, ...], columns: int, rules: Rules,
                       shown: bool = True) -> None:
    """Refuse an answer of more than MAX_COLUMNS columns (54011, as PostgreSQL) or
    more than MAX_ANSWER_VALUES values (54000). Its rows are its groups; a term whose
    keys are read later (a public table's column, keys from the data) counts as
    ``max_groups`` of them, and all terms together as at most ``max_groups``: the engine
    keeps to that once the keys are read (``Engine._with_public_keys``, ``_selected``),
    as ``group_terms`` does for declared keys. Not ``shown`` (a stage's release, read by
    the proxy): the values are not counted."""
    if columns > MAX_COLUMNS:
        raise ProxyError(f"target lists can have at most {MAX_COLUMNS:,} entries; this one "
                         f"has {columns:,}: ask fewer columns per statement", "54011")
    rows = min(rules.defaults.max_groups, math.prod(
        rules.defaults.max_groups if term.kind in (PUBLIC, SELECTED) else len(term.keys)
        for term in group_by))
    if shown and rows * columns > MAX_ANSWER_VALUES:
        raise ProxyError(f"the answer would hold up to {rows:,} rows of {columns:,} columns, "
                         f"more than {MAX_ANSWER_VALUES:,} values; ask fewer groups or fewer "
                         "columns per statement", "54000")


def _individual_query(select: exp.Select, table: Table, settings: Settings, resolve,
                      epsilon: Decimal) -> QueryPlan | None:
    """``SELECT col FROM t WHERE unit = k`` on a table whose rules allow individual
    queries: the plan of one unit's value (its prior is checked by the caller); None
    for any other shape. Without a prior it is refused here, spending nothing."""
    items = select.expressions
    where = select.args.get("where")
    node = items[0].unalias() if len(items) == 1 else None
    if not (table.privacy_unit and isinstance(node, exp.Column) and where is not None
            and isinstance(where.this, exp.EQ) and not select.args.get("group")):
        return None
    sides = (where.this.this, where.this.expression)
    unit = [s for s in sides if isinstance(s, exp.Column)
            and s.name.lower() == table.privacy_unit]
    key = [s for s in sides if isinstance(s, exp.Literal)
           or (isinstance(s, exp.Neg) and isinstance(s.this, exp.Literal))]
    if len(unit) != 1 or len(key) != 1:
        return None
    column = resolve(node)
    if not table.individual_queries:
        raise RawRowAccess(f"column {column} of one {table.privacy_unit} would return a row of "
                           f"{table.name}, and the rules do not enable individual queries on it; "
                           "use it in an aggregate")
    if settings.prior is None:
        raise RawRowAccess(f"{column} of one {table.privacy_unit} is an individual query: it "
                           "needs a prior first, e.g. SET idp.prior = 'uniform(0, 100000)'")
    condition = exp.EQ(this=unit[0].copy(), expression=key[0].copy())
    if table.privacy_unit in table.columns:
        condition = check_predicate(condition, table, resolve)
    else:  # an undeclared unit column's type is unknown: compare as text, never fail
        condition = exp.EQ(this=exp.cast(exp.column(table.privacy_unit, quoted=True), "text"),
                           expression=exp.Literal.string(_literal_text(key[0])))
    return QueryPlan(table=table, where=condition, group_by=(),
                     aggregates=(Aggregate(VALUE, column, column),),
                     outputs=(OutputColumn(items[0].alias_or_name, aggregate=0),),
                     order_by=(), limit=None, epsilon=epsilon,
                     mechanism=Mechanism("refinement", individual=True))


def _mechanism(settings: Settings, rules: Rules, model: str,
               aggregates: tuple[Aggregate, ...]) -> Mechanism:
    """The model's mechanism as the settings and the rules choose it; percentiles, MAX
    and MIN drawn by the exponential mechanism only where the plan has one of them
    (docs/privacy.md §5.3)."""
    sensitivity = settings.resolve_sensitivity(rules)
    gamma, noise = settings.smooth_gamma(rules), settings.resolve_noise(rules, model)
    if gamma is not None:
        return Mechanism(model, SMOOTH, gamma, noise=noise)
    if settings.instance_mechanism(rules) and any(a.kind.row.ranked for a in aggregates):
        return Mechanism(model, PIECEWISE if sensitivity == "piecewise" else EXPONENTIAL,
                         noise=noise)
    return Mechanism(model, LOCAL if sensitivity == "local" else GLOBAL, noise=noise)


def _literal_text(literal: exp.Expression) -> str:
    return literal.name if isinstance(literal, exp.Literal) else f"-{literal.this.name}"


def _with_prior(plan: QueryPlan, settings: Settings) -> QueryPlan:
    """The plan answered by knowledge refinement of the session's prior: one answer,
    whose range the prior must describe."""
    if len(plan.aggregates) != 1 or plan.group_by:
        raise NotSupported("with idp.prior set, ask one aggregate without GROUP BY (the prior "
                           "describes one answer); or RESET idp.prior")
    column = plan.table.columns.get(plan.aggregates[0].column or "")
    if getattr(column, "moment", None) is not None:
        raise NotSupported("idp.prior describes a number; a MAX or MIN of a date or "
                           "timestamp is drawn without one: RESET idp.prior")
    return replace(plan, mechanism=Mechanism("refinement", prior=settings.prior,
                                             individual=plan.mechanism.individual))


def _check_domains(table: Table, aggregates: tuple[Aggregate, ...], model: str,
                   local: bool) -> None:
    """Model-specific needs for declared bounds: decided by the rules, never by data.
    Raw iDP (``local``) falls back to a bound for tiny scopes only; every other scale,
    and the exponential mechanism's candidates, need the whole domain."""
    for agg in aggregates:
        if agg.column is None:
            continue
        if agg.kind.row.paired:
            _check_pair(table, agg)
            continue
        column = table.columns[agg.column]
        needs_number = agg.kind.row.numeric
        if needs_number and not column.numeric:
            # PostgreSQL has no SUM, AVG, spread or PERCENTILE_CONT of a non-number (its
            # 42883); its MAX, MIN and PERCENTILE_DISC of text are not supported here
            lacks = agg.kind is Kind.SUM or agg.kind.row.output == "float" or agg.continuous
            raise NotSupported(f"{agg.label.upper()}({agg.column}) needs a numeric column; "
                               f"{agg.column} is {column.type}", "42883" if lacks else None)
        both = column.lower is not None and column.upper is not None
        call, value = agg.written or (f"{agg.label.upper()}({agg.column})", agg.column)
        if model == "dp" and needs_number and not both:
            raise NotSupported(f"the DP model needs a declared domain for {value}; "
                               "ask the data owner to add domain = [lower, upper] to the rules")
        if model == "idp" and needs_number and not both and not local:
            raise NotSupported(f"{call} needs a declared domain for {value}: its noise is "
                               "scaled by the domain, or drawn among its points; ask the data "
                               "owner to add domain = [lower, upper] to the rules")
        if model == "idp" and local and agg.kind in (PERCENTILE, SUM, AVG, *SPREADS) \
                and not both:
            raise NotSupported(f"{call} under iDP needs a declared domain for {value} (the "
                               "fallback for tiny scopes); ask the data owner")
        fallback = column.lower if agg.kind == MAX else column.upper
        if model == "idp" and local and agg.kind in (MAX, MIN) and fallback is None:
            bound = "lower" if agg.kind == MAX else "upper"
            raise NotSupported(f"{agg.kind.upper()}({agg.column}) under iDP needs a declared "
                               f"{bound} bound for {agg.column} (the fallback for tiny scopes); "
                               "ask the data owner")
    if model == "dp" and table.privacy_unit and table.max_rows_per_unit is None:
        raise NotSupported(f"the DP model on {table.name} needs max_rows_per_unit in the rules "
                           "(a contribution bound per privacy unit); use idp.model = 'idp'")


def _check_pair(table: Table, agg: Aggregate) -> None:
    """CORR and its kin, under every model: two numeric columns, each with a declared
    domain (their sums are clipped from the domain's lower end, docs/privacy.md
    §3.17)."""
    what = agg.written[0] if agg.written else f"{agg.kind.upper()}({agg.column}, {agg.other})"
    for name in (agg.column, agg.other):
        column = table.columns[name]
        if not column.numeric:
            raise NotSupported(f"{what} needs numeric columns; {name} is {column.type}")
        if column.lower is None or column.upper is None:
            raise NotSupported(f"{what} needs a declared domain for {name} (its sums are "
                               "clipped from the domain's lower end); ask the data owner to "
                               "add domain = [lower, upper] to the rules")


def _conditions_place(select: exp.Select) -> str:
    """Where the statement's row conditions are written, for refusals: an inner join's
    ON conditions other than one equality are checked with the WHERE's."""
    ons = [join.args.get("on") for join in select.args.get("joins") or []]
    conditions = any(on is not None and not isinstance(on.unnest(), exp.EQ) for on in ons)
    if not conditions:
        return "WHERE"
    return "WHERE or ON" if select.args.get("where") is not None else "ON"


def _distinct_unwrapped(select: exp.Select) -> exp.Select:
    """``select`` with the brackets around DISTINCT's values dropped (a copy when there
    are any): Power BI writes ``COUNT(DISTINCT ("t"."person_id"))``, the same value as
    ``COUNT(DISTINCT "t"."person_id")``."""
    if not any(isinstance(value, exp.Paren) for distinct in select.find_all(exp.Distinct)
               for value in distinct.expressions):
        return select
    select = select.copy()
    for distinct in list(select.find_all(exp.Distinct)):
        for value in list(distinct.expressions):
            if isinstance(value, exp.Paren):
                value.replace(value.unnest())
    return select


def _only_select(statement: exp.Expression) -> exp.Select:
    if isinstance(statement, exp.Select):
        return statement
    if isinstance(statement, (exp.Union, exp.Intersect, exp.Except)):
        raise NotSupported("INTERSECT and EXCEPT are not supported; UNION [ALL] of aggregate "
                           "queries is")
    if isinstance(statement, _WRITES):
        word = statement.this.upper() if isinstance(statement, exp.Command) else statement.key.upper()
        raise ReadOnly(f"{word} is not allowed: the proxy is read-only and answers SELECT with "
                       "aggregates only")
    raise NotSupported(f"{statement.key.upper()} statements are not supported; "
                       "send a SELECT with aggregates")


def _public_only(select: exp.Select, rules: Rules) -> bool:
    """Every table the query reads (CTE bodies included; a name no rule declares, a CTE's
    too, is not public) is public, and no risky function is named."""
    tables = list(select.find_all(exp.Table))
    declared = [rules.table(t.name) for t in tables]
    return bool(tables) and all(d is not None and d.public for d in declared) \
        and not _names_functions(select)


def _refuse_unmerged_public(select: exp.Select, rules: Rules) -> None:
    """Steps over public tables that could not be merged (their columns undeclared): a
    message that fits; nothing passes through on this path."""
    steps = {cte.alias_or_name for cte in select.find_all(exp.CTE)}
    read = [rules.table(t.name) for t in select.find_all(exp.Table) if t.name not in steps]
    if steps and read and all(d is not None and d.public for d in read):
        raise NotSupported("CTEs and subqueries over public tables pass through when the rules "
                           "declare the tables' columns; query the public table directly")


def _names_functions(select: exp.Select) -> bool:
    """Public passthrough still never runs functions that could reach beyond the table
    (files, settings, other databases, sleeps): only functions sqlglot knows as plain
    SQL are allowed, and none of the engines' system families."""
    risky = ("read_", "pg_", "current_setting", "set_config", "lo_", "dblink", "query", "glob",
             "getenv", "version", "sleep")
    return any(  # AND and OR are no functions (sqlglot's Func): their operands are walked,
        # and writing each out would take the square of a long chain's length (TPC-H Q20's
        # released values, one disjunct per key); nor EXISTS, ANY and ALL, whose text
        # starts with their keyword: written out, Q20's VALUES of released rows each time
        isinstance(node, exp.Anonymous)
        or (isinstance(node, exp.Func)
            and not isinstance(node, (exp.Connector, exp.SubqueryPredicate))
            and node.sql(dialect="postgres").lower().startswith(risky))
        for node in select.walk()
    )


def _refuse_public_in(node: exp.Expression, rules: Rules) -> None:
    """``col IN (SELECT key FROM t …)`` over a public table whose key is declared
    unique, left unanswered: the join that is (it said "subqueries over protected
    tables", naming none)."""
    within = node.parent
    query = node.this if isinstance(node, exp.Subquery) else None
    if not (isinstance(within, exp.In) and within.args.get("query") is node
            and isinstance(query, exp.Select) and len(query.expressions) == 1
            and isinstance(query.expressions[0].unnest(), exp.Column)):
        return
    tables = [table.name for table in query.find_all(exp.Table)]
    key = query.expressions[0].unnest().name
    public = rules.table(tables[0]) if len(tables) == 1 else None
    if public is None or not public.public:
        return  # the join would not be answered either: the refusal below stands
    column = within.this.sql(dialect="postgres")
    if (key.lower(),) not in public.unique:
        raise NotSupported(f"{column} IN (SELECT {key} FROM {tables[0]} ...) is answered as "
                           f"the join on {key} where the rules declare it unique in "
                           f"{tables[0]} ([tables.{tables[0]}] unique = [\"{key}\"]); "
                           "they do not")
    source = node.find_ancestor(exp.Select)
    table = source and source.args.get("from_") and rules.table(source.args["from_"].this.name)
    if table is not None and isinstance(within.this, exp.Column) \
            and within.this.name.lower() == table.privacy_unit:
        return  # the unit joined to a public key is no join the rules answer
    raise NotSupported(f"{column} IN (SELECT {key} FROM {tables[0]} ...) is answered as a "
                       "condition the WHERE ANDs with the others (the join on the unique key "
                       "it is), with conditions on that table alone inside; here join it "
                       f"yourself: JOIN {tables[0]} ON {column} = {tables[0]}.{key}, its "
                       "conditions in the WHERE")


def _refuse_compound(select: exp.Select, rules: Rules) -> None:
    """Joins, subqueries and set operations left after the other stages are refused; a
    window is too unless the query aggregates (then it reads the released rows:
    post-processing, ``proxy.analyze.having``)."""
    aggregated = select.args.get("group") is not None or any(
        is_aggregate(node) and not windowed(node) for node in select.walk())
    for node in select.walk():
        if isinstance(node, exp.Window):
            if aggregated:
                continue
            raise NotSupported("window functions over rows of protected tables are not "
                               "supported; a window over an aggregate query's groups is: "
                               "SELECT k, COUNT(*), SUM(COUNT(*)) OVER () FROM t GROUP BY k")
        if isinstance(node, _COMPOUND):
            _refuse_public_in(node, rules)
            kind = {"subquery": "subqueries", "with": "CTEs", "join": "joins",
                    "filter": "FILTER clauses"}.get(node.key, node.key)
            raise NotSupported(f"{kind} over protected tables are not supported; "
                               "query one table with aggregates, WHERE and GROUP BY")
    if select.args.get("distinct"):
        raise NotSupported("SELECT DISTINCT lists the values of rows, answered only for columns "
                           "with declared keys (listed from the rules); for others ask COUNT(*) "
                           "... GROUP BY a column with declared keys")
    if offset_of(select) and not aggregated:  # else paged by proxy.analyze.having
        raise NotSupported("OFFSET over a protected table pages the answers of an aggregate "
                           "query: SELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY n DESC "
                           "LIMIT 10 OFFSET 10")


def _the_protected_table(select: exp.Select, rules: Rules) -> Table:
    tables = list(select.find_all(exp.Table))
    from_ = select.args.get("from_")
    if from_ is None or not any(table is from_.this for table in tables):
        raise NotSupported("a protected table is read in FROM only (not in EXISTS or a "
                           "subquery of the select list); query one table with aggregates, "
                           "WHERE and GROUP BY")
    if len(tables) != 1:
        raise NotSupported("query exactly one table: SELECT aggregates FROM table [WHERE ...]")
    declared = rules.table(tables[0].name)
    if declared is None:
        raise UnknownTable(f"table {tables[0].name} is not available; the rules declare: "
                           f"{', '.join(sorted(rules.tables)) or 'no tables'}")
    if declared.public:
        raise NotSupported(f"this query on the public table {declared.name} calls a function the "
                           "proxy does not pass through; use columns, comparisons and aggregates")
    if tables[0].args.get("db") and tables[0].text("db").lower() not in ("public", "main"):
        raise UnknownTable(f"schema {tables[0].text('db')} is not available; use {declared.name}")
    return declared


def _extremes_of_days(select: exp.Select, table: Table, resolve) -> None:
    """``MIN(CAST(ts AS date))`` (and MAX) of a date or timestamp column is
    ``CAST(MIN(ts) AS date)``: a day is a nondecreasing function of the moment, so the
    least day is the least moment's; the cast is then post-processing of the released
    moment (it was refused: "expressions inside aggregates take int and float
    columns"). In place; PostgreSQL names both columns ``min``."""
    for node in list(select.find_all(exp.Min, exp.Max)):
        argument = node.this
        if isinstance(node.parent, exp.Window) or not (isinstance(argument, exp.Cast) and argument.to.is_type(exp.DataType.Type.DATE)
                and isinstance(argument.this, exp.Column)):
            continue
        try:
            column = table.columns[resolve(argument.this)]
        except Refused:
            continue
        if column.type in ("date", "timestamp"):
            node.replace(exp.cast(type(node)(this=argument.this.copy()),
                                  exp.DataType.Type.DATE))


def _column_resolver(table: Table, select: exp.Select, joins: tuple[Join, ...] = ()):
    alias = select.args["from_"].this.alias_or_name.lower()
    if joins:
        return resolver(table, alias, joins)

    def resolve(column: exp.Column) -> str:
        qualifier = column.table.lower()
        if qualifier and qualifier not in (alias, table.name):
            raise UnknownTable(f'missing FROM-clause entry for table "{qualifier}": column '
                               f"{column.sql()} does not belong to {table.name}")
        name = column.name if column.name in table.columns else column.name.lower()
        if name not in table.columns:
            raise UnknownColumn(f"column {name} is not declared for {table.name}; declared: "
                                f"{', '.join(table.columns)}")
        return name

    return resolve


def _left_units_counted(select: exp.Select, rules: Rules) -> None:
    """Looker's ``COUNT(DISTINCT people.person_id)`` over ``visits LEFT JOIN people ON
    visits.person_id = people.person_id``: the LEFT-joined table's unit is the first
    table's unit where a row of it matched and NULL elsewhere, which COUNT(DISTINCT)
    skips, so it is rewritten (in place) as ``COUNT(DISTINCT visits.person_id) FILTER
    (WHERE people.person_id IS NOT NULL)`` (AND a FILTER it had), the count of units
    narrowed by a condition (``aggregates.narrowed_units``). Only a table joined on the
    unit (no link) to a first table with a unit of its own; done before the scopes are
    told apart (``scoped_parts``: beside ``COUNT(*)``, a release per scope), where the
    joins are what ``split_joins`` reads (a join it refuses is left to be refused)."""
    if not select.args.get("joins") or steps(select) or not any(
            isinstance(count.this, exp.Distinct) for count in select.find_all(exp.Count)):
        return
    try:
        alone, joins = split_joins(select.copy(), rules)
    except Refused:
        return
    base = alone.args["from_"].this
    table = rules.table(base.name) if isinstance(base, exp.Table) else None
    if table is None:
        return
    alias = base.alias_or_name
    own = table.privacy_unit if table.link is None else None
    left = {join.alias: join.table.privacy_unit for join in joins
            if join.protected and join.left and not join.link and join.table.link is None
            and join.table.privacy_unit}
    if not own or not left:
        return
    for count in list(select.find_all(exp.Count)):
        distinct = count.this
        if not isinstance(distinct, exp.Distinct) or len(distinct.expressions) != 1:
            continue
        value = distinct.expressions[0].unnest()
        if not (isinstance(value, exp.Column) and not value.args.get("db")
                and left.get(value.table.lower()) == value.name.lower()):
            continue
        present = exp.Not(this=exp.Is(this=value.copy(), expression=exp.null()))
        counted = exp.Count(this=exp.Distinct(expressions=[
            exp.column(own, table=alias, quoted=True)]))
        wrapper = count.parent
        if isinstance(wrapper, exp.Filter) and isinstance(wrapper.expression, exp.Where):
            wrapper.set("expression", exp.Where(this=exp.and_(
                present, exp.paren(wrapper.expression.this.copy(), copy=False))))
            count.replace(counted)
        else:
            count.replace(exp.Filter(this=counted, expression=exp.Where(this=present)))


def unit_test(table: Table, joins: tuple[Join, ...], alias: str):
    """Which column COUNT(DISTINCT …) may name as the privacy unit, and how to name them:
    the table's own unit column (not one derived through a link: no column holds it),
    and the own unit column of a protected table joined without LEFT (on the unit or
    along a link: in every joined row it holds that row's unit, so line items joined to
    their orders count their customers by ``o_custkey``, as orders joined to their line
    items do)."""
    own = table.privacy_unit if table.link is None else None
    tables = {join.alias: join.table for join in joins
              if join.protected and not join.left and join.table.link is None
              and join.table.privacy_unit}
    joined = {name: other.privacy_unit for name, other in tables.items()}

    def unit_of(column: exp.Column) -> Table | None:
        """The table whose unit ``column`` is, if it is one."""
        name, qualifier = column.name.lower(), column.table.lower()
        if qualifier in joined:
            return tables[qualifier] if name == joined[qualifier] else None
        if qualifier and qualifier not in (alias, table.name):
            return None
        if name == own:
            return table
        return next((tables[a] for a, unit in joined.items() if unit == name), None) \
            if not qualifier else None

    def is_unit(column: exp.Expression) -> bool:
        if isinstance(column, exp.Cast):  # Tableau's COUNT(DISTINCT CAST(unit AS BIGINT))
            owner = unit_of(column.this) if isinstance(column.this, exp.Column) else None
            return owner is not None and _one_to_one(
                owner.columns[owner.privacy_unit].type, column.to)
        return unit_of(column) is not None

    names = ([own] if own else []) + [f"{a}.{unit}" for a, unit in sorted(joined.items())]
    return is_unit, names


def _one_to_one(declared: str, to: exp.DataType) -> bool:
    """Whether a cast of a column of the ``declared`` rules type to ``to`` keeps its
    distinct values distinct and cannot fail: a whole number to BIGINT or to text, text
    to text (the count is of the units themselves: the cast is never sent)."""
    if to.is_type(*exp.DataType.TEXT_TYPES):
        return declared in ("int", "text")
    return declared == "int" and to.is_type(exp.DataType.Type.BIGINT)


def _select_list(select: exp.Select, table: Table, group_by, resolve, joins=()):
    aggregates: list[Aggregate] = []
    outputs: list[OutputColumn] = []
    units = unit_test(table, joins, select.args["from_"].this.alias_or_name.lower())
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or isinstance(item, exp.Star):
            raise RawRowAccess(f"SELECT * would return rows of the protected table {table.name}; "
                               f"ask for aggregates instead: {SUPPORTED}")
        group = None if is_aggregate(node) else matching_group(
            node, group_by, table, resolve, select.args.get("where"))
        if group is not None:
            name = item.alias if isinstance(item, exp.Alias) else default_name(node)
            outputs.append(OutputColumn(name, group=group))
            continue
        if isinstance(node, exp.Column):
            name = resolve(node)
            if group_by or any(is_aggregate(e.unalias()) for e in select.expressions):
                # beside aggregates or GROUP BY, PostgreSQL's grouping error (42803)
                raise RawRowAccess(f"column {name} must appear in the GROUP BY clause or be "
                                   "used in an aggregate function (a GROUP BY column needs "
                                   "declared keys)", "42803")
            raise RawRowAccess(f"column {name} would return rows of {table.name}; use it in "
                               "an aggregate or GROUP BY a column with declared keys")
        if not is_aggregate(node):
            term = _of_group_terms(node, group_by, table, resolve, select.args.get("where"))
            if term is not None:
                raise NotSupported(f"{node.sql(dialect='postgres')} is computed from the GROUP "
                                   f"BY term {term} but is not one itself; select {term} and "
                                   "compute the rest from the answer")
            if any(isinstance(n, exp.Column) for n in node.walk()):
                raise RawRowAccess(f"{node.sql(dialect='postgres')} would return rows of "
                                   f"{table.name}; only aggregates ({SUPPORTED}) are allowed")
            raise NotSupported(f"{node.sql(dialect='postgres')} is not supported next to "
                               "aggregates; select only aggregates and GROUP BY keys")
        aggregate = recognise(node, resolve, units)
        if WRITTEN in node.meta:  # a regression's part: refusals name the regression
            aggregate = replace(aggregate, written=node.meta[WRITTEN])
        aggregates.append(aggregate)
        name = item.alias if isinstance(item, exp.Alias) else aggregate.label
        outputs.append(OutputColumn(name, aggregate=len(aggregates) - 1))
    if not aggregates:
        raise RawRowAccess(f"a query on {table.name} must compute at least one aggregate")
    return tuple(aggregates), tuple(outputs)


def _of_group_terms(node: exp.Expression, group_by, table: Table, resolve, where
                    ) -> str | None:
    """A GROUP BY term ``node`` is computed from (its SQL), where every column ``node``
    reads lies inside such a part (``TO_CHAR(DATE_TRUNC('month', at), 'YYYY-MM')`` under
    ``GROUP BY DATE_TRUNC('month', at)``): a function of the groups, not of rows, which
    PostgreSQL answers and the proxy does not (its keys are the terms'); else None."""
    covered: set[int] = set()
    terms: list[str] = []
    for part in node.walk():
        if part is not node and not isinstance(part, exp.Literal) \
                and matching_group(part, group_by, table, resolve, where) is not None:
            covered.update(id(column) for column in part.find_all(exp.Column))
            terms.append(part.sql(dialect="postgres"))
    columns = list(node.find_all(exp.Column))
    return terms[0] if columns and all(id(c) in covered for c in columns) else None


__all__ = ["PassthroughPlan", "QueryPlan", "Refused", "analyze", "check_size",
           "parse_statements", "parse_tokens", "refuse_beyond_backend", "statement_tokens"]
