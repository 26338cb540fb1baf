"""The ``idp-proxy`` command line (SPEC §3.1).

Only click and the standard library are imported at start, so ``--help`` answers at
once; a command imports the engine, the backends and sqlglot when it runs."""

from __future__ import annotations

import csv
import datetime
import io
import json
import logging
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from proxy.errors import DatabaseInUse, ProxyError, RulesError, TooComplex
from proxy.loss import parse_epsilon
from proxy.pgtypes import interval_text
from proxy.progress import progress

if TYPE_CHECKING:
    from proxy.backends import Backend
    from proxy.engine import Engine
    from proxy.rules import Rules

# A backend without transactions (Spark, the only one) cannot hold the ledger: --ledger
# puts it in one that can (Capabilities.transactional: DuckDB or PostgreSQL).
SPARK_NEEDS_LEDGER = ("a Spark backend (sc://) cannot hold the ledger: add --ledger "
                      "duckdb:///ledger.duckdb or --ledger postgresql://user@host:port/db")
LEDGER_NOT_SPARK = ("--ledger needs a store with transactions: duckdb:///ledger.duckdb or "
                    "postgresql://user@host:port/db, not sc://")
# A backend with transactions holds its ledger: a second one beside it would hold full
# budgets.
LEDGER_ONLY_SPARK = ("--ledger is for a Spark backend (sc://); with DuckDB or PostgreSQL "
                     "the ledger lives in the backend: drop --ledger")
# Shipped inside the package (proxy/demo.toml links to rules/demo.toml, which the docs
# cite): a wheel or a non-editable install serves the demo as a clone does.
DEMO_RULES = Path(__file__).resolve().parent / "demo.toml"


def _rules(path: str | None) -> Rules:
    from proxy.rules import load_rules

    return load_rules(str(DEMO_RULES) if path is None else path)


def _open(url: str | None, connections: int = 4) -> Backend:
    """The backend of ``--backend`` (None: the demo, created on first use with its
    progress shown)."""
    if url is not None:
        from proxy.backends import open_backend

        opened = open_backend(url, connections)
        try:
            opened.probe()  # the owner's setup errors, said with what to run
        except ProxyError:
            opened.close()
            raise
        return opened
    from proxy.demo import demo_path, needs_upgrade, open_demo

    path = demo_path()
    if not path.exists():
        with progress("creating the demo database (once)", measured=True) as shown:
            return open_demo(shown.step)
    opened = open_demo()
    if not needs_upgrade(opened.read):  # asked of the opened file: opening it
        return opened  # a second time cost every command 60 ms
    opened.close()
    _upgrade_demo(path)
    return open_demo()


def _upgrade_demo(path: Path) -> None:
    """An older demo file gains what the demo rules now declare."""
    import contextlib

    import duckdb

    from proxy.demo import upgrade_demo

    with contextlib.suppress(duckdb.Error, OSError):  # read-only: the schema check at
        upgrade_demo(path)  # start says what is missing


def _ledger_url(backend: str | None) -> str | None:
    """``--ledger`` of the running command (None: the ledger lives in the backend),
    checked against ``--backend``: a Spark backend needs one and cannot be one, and no
    other backend takes one (a run with it and a run without would keep two ledgers of
    one data set, each with full budgets)."""
    from proxy.backends import backend_class

    ledger = click.get_current_context().meta.get(_LEDGER)
    # asked of the URLs' backends, none opened (None: the demo, a DuckDB file)
    holds_ledger = backend is None or backend_class(backend).capabilities.transactional
    if ledger is None and not holds_ledger:
        raise ProxyError(SPARK_NEEDS_LEDGER, "0A000")
    if ledger is not None and not backend_class(ledger).capabilities.transactional:
        raise ProxyError(LEDGER_NOT_SPARK, "22023")
    if ledger is not None and holds_ledger:
        raise ProxyError(LEDGER_ONLY_SPARK, "22023")
    return ledger


def _store(ledger: str | None) -> Backend | None:
    """The backend of ``--ledger`` (``_ledger_url``), opened (None: none given)."""
    from proxy.backends import open_backend

    return None if ledger is None else open_backend(ledger)


def _target(rules_path: str | None, backend: str | None, target: str) -> Any:
    """The ledger, the logins or the analyst's engine (``target``: proxy.admin.CALLS), or
    those of the server that holds this DuckDB file (proxy.admin.Remote). With
    ``--ledger``, the ledger and the logins are there, and only an analyst's engine
    opens the backend."""
    rules = _rules(rules_path)
    try:
        store = _store(_ledger_url(backend))
        opened = _open(backend) if target == "analyst" or store is None else None
    except DatabaseInUse as exc:
        from proxy.admin import reach_server

        return reach_server(exc, target)
    if target == "analyst":
        from proxy.admin import Analyst
        from proxy.engine import Engine

        return Analyst(Engine(rules, opened, store=store))
    from proxy.ledger import Ledger

    ledger = Ledger(store or opened.ledger_store(), rules)
    if target == "ledger":
        return ledger
    from proxy.users import Users

    return Users(ledger)


def _epsilon(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_epsilon(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


rules_option = click.option("--rules", "rules_path", metavar="FILE",
                            help="Rules file (TOML). Default: rules/demo.toml.")
_LEDGER = "idp_proxy.ledger"  # click context meta: the --ledger URL
_SOURCE = "idp_proxy.source"  # click context meta: --backend's data files, as given


def _remember_ledger(ctx, param, value):
    if value is not None:
        ctx.meta[_LEDGER] = value


def _backend_url(ctx, param, value):
    """``--backend data.csv``, ``file.parquet`` or a folder of them: their copy in an
    embedded DuckDB file beside them (proxy/backends/files.py), made or refreshed now."""
    if value is None:
        return None
    from proxy.backends.files import import_files, is_file_backend

    if not is_file_backend(value):
        return value
    ctx.meta[_SOURCE] = value  # as the owner typed it (rules draft's header)
    try:
        return import_files(value)
    except ProxyError as exc:
        raise click.BadParameter(exc.message) from None


def backend_option(command):
    """``--backend URL`` (a parameter of the command) and ``--ledger URL`` (read by
    ``_ledger_url``: every command that opens a backend takes it)."""
    command = click.option(
        "--ledger", metavar="URL", expose_value=False, callback=_remember_ledger,
        help="Keep the ledger, logins and answer cache here (duckdb:///ledger.duckdb or "
             "postgresql://...) instead of in the backend; needed with sc://.")(command)
    return click.option(
        "--backend", metavar="URL", callback=_backend_url,
        help="duckdb:///file.duckdb, duckdb:///:memory:, postgresql://user@host:port/db, "
             "sc://host:port (Spark Connect, with --ledger), or data files: data.csv, "
             "file.parquet or a folder of them (copied into FILE.idp-proxy.duckdb beside "
             "them). Default: the embedded demo DuckDB (created on first use).")(command)
format_option = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]),
                             default="table", show_default=True)


class _Group(click.Group):
    """Turns every expected failure into one line on stderr and a non-zero exit."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (ProxyError, RecursionError) as exc:
            exc = TooComplex() if isinstance(exc, RecursionError) else exc
            click.echo(f"ERROR [{exc.sqlstate}]: {exc.message}", err=True)
            ctx.exit(1)
        except RulesError as exc:
            click.echo(f"ERROR: {exc}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # a bug: one line unless --debug asks for the traceback
            if ctx.params.get("debug"):
                raise
            click.echo(f"ERROR: internal error ({type(exc).__name__}: {exc}); "
                       "run with --debug for the traceback", err=True)
            ctx.exit(1)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Log backend errors and show tracebacks.")
@click.version_option(package_name="idp-proxy")
def main(debug: bool) -> None:
    """A privacy proxy for SQL databases: aggregates answered under individual
    differential privacy, with a per-analyst budget.

    \b
    Try it on the embedded demo:
      idp-proxy query --user alice "SELECT MEDIAN(income) FROM people"
    """
    logging.basicConfig(level=logging.DEBUG if debug else logging.CRITICAL,
                        format="%(levelname)s %(name)s: %(message)s")


@main.command()
@rules_option
@backend_option
@click.option("--user", required=True, help="The analyst whose budget pays.")
@click.option("--epsilon", callback=_epsilon, help="epsilon per aggregate (default: the rules').")
@click.option("--model", type=click.Choice(["idp", "dp"]), help="Privacy model for this run.")
@click.option("--prior", help="Answer by knowledge refinement of this prior: 'uniform(a, b)', "
              "'normal(mu, sigma)' or a JSON table '{\"0\": 0.99, \"1\": 0.01}' "
              "(as SET idp.prior).")
@format_option
@click.option("-f", "--file", "script", type=click.File("r", encoding="utf-8"),
              help="Run every statement of a .sql file.")
@click.argument("sql", required=False)
def query(rules_path, backend, user, epsilon, model, prior, fmt, script, sql):
    """Answer SQL (one statement or a .sql file) through the privacy engine.

    \b
    Examples:
      idp-proxy query --user alice "SELECT MEDIAN(income) FROM people"
      idp-proxy query --user alice --format json \\
          "SELECT region, COUNT(*) FROM people WHERE age > 40 GROUP BY region"
      idp-proxy query --user bob -f examples/demo.sql
      idp-proxy query --user alice --prior 'uniform(0, 200000)' \\
          "SELECT MEDIAN(income) FROM people"
    """
    if (sql is None) == (script is None):
        raise click.UsageError("give either SQL or -f FILE")
    text = script.read() if script else sql
    answers = []
    headers: list[list[str]] = []  # CSV: a header only where the columns change
    try:
        with progress("answering") as shown:
            def show(answer: dict[str, Any]) -> None:
                answers.append(answer)
                if fmt != "json":
                    with shown.hidden():
                        _print_answer(answer, fmt, answer["columns"] not in headers[-1:])
                if answer["columns"]:
                    headers.append(answer["columns"])

            _target(rules_path, backend, "analyst").query(user, text, epsilon, model, prior,
                                                          emit=show)
    finally:
        if fmt == "json":
            click.echo(_json([{key: a[key] for key in ("command", "columns", "rows", "privacy")}
                              for a in answers]))


def _print_answer(answer: dict[str, Any], fmt: str, header: bool = True) -> None:
    """One answer of proxy.admin.Analyst.query as a table or CSV, its notice after it.
    CSV is data alone: no command tag (``SET``), and ``header`` False continues the
    previous statement's rows under its header."""
    if not answer["columns"]:
        if fmt != "csv":
            click.echo(answer["command"])
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        if header:
            writer.writerow(answer["columns"])
        writer.writerows([[_cell(v) if isinstance(v, (list, datetime.timedelta)) else v
                            for v in row] for row in answer["rows"]])
        click.echo(buffer.getvalue(), nl=False)
    else:
        click.echo(_table(answer["columns"], answer["rows"]))
    if answer["notice"]:
        click.echo(f"NOTICE: {answer['notice']}", err=fmt == "csv")


def _table(columns: list[str], rows: list[tuple]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda values: " | ".join(v.ljust(w) for v, w in zip(values, widths))
    out = [line(columns), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, list):  # an array, as psql shows one
        return "{" + ",".join(_cell(v) for v in value) + "}"
    if isinstance(value, datetime.timedelta):  # an interval, as psql shows one
        return interval_text(value)
    return str(value)


def _json(value: Any, depth: int = 0) -> str:
    """``json.dumps(value, indent=2)``, but a Decimal (an ε, a budget) is written as the
    exact number it is, and a value JSON has no form for (a date) as its text."""
    if isinstance(value, Decimal) and value.is_finite():
        return format(value, "f")
    if isinstance(value, dict):
        items, brackets = [f"{json.dumps(str(k))}: {_json(v, depth + 1)}"
                           for k, v in value.items()], "{}"
    elif isinstance(value, (list, tuple)):
        items, brackets = [_json(v, depth + 1) for v in value], "[]"
    else:
        plain = isinstance(value, (str, int, float, bool, type(None)))
        return json.dumps(value if plain else interval_text(value)
                          if isinstance(value, datetime.timedelta) else str(value))
    if not items:
        return brackets
    inner, outer = "\n" + "  " * (depth + 1), "\n" + "  " * depth
    return brackets[0] + inner + ("," + inner).join(items) + outer + brackets[1]


@main.group()
def budget() -> None:
    """Show, grant or reset privacy budgets."""


def _account(user: str | None, whole: bool, words: list[str], more: int = 0
             ) -> tuple[str, str, list[str]]:
    """(ledger account, how to name it, the words after the name) for NAME, --user NAME
    or --global; ``more``: how many words may follow (grant's AMOUNT)."""
    from proxy.ledger import GLOBAL

    if user is None and not whole and words:
        user, words = words[0], words[1:]
    if (user is None) == (not whole) or len(words) > more:
        raise click.UsageError("name one budget: NAME (or --user NAME), or --global")
    return (GLOBAL, "the global budget", words) if whole else (user, user, words)


user_option = click.option("--user", help="The analyst (or give NAME).")
global_option = click.option("--global", "whole", is_flag=True,
                             help="The global budget of all analysts ([defaults] global_budget).")
name_argument = click.argument("name", required=False)


@budget.command("show")
@rules_option
@backend_option
@user_option
@global_option
@format_option
@name_argument
def budget_show(rules_path, backend, user, whole, fmt, name):
    """Budget, spent and remaining epsilon of the analyst NAME, or of all (the global
    budget is listed as "(global)"; --global shows it alone). Under the zcdp accountant
    budget and spent are epsilon at the rules' delta, remaining the largest epsilon of
    one more answer, with delta, rho_budget and rho_spent beside them."""
    words = [name] if name else []
    account = _account(user, whole, words)[0] if user or whole or words else None
    from proxy.ledger import BUDGET_FIELDS

    with progress("reading the budgets"):
        rows = _target(rules_path, backend, "ledger").budgets(account)
    # under the zcdp accountant each row also has the δ and the ρ behind its ε
    _print_rows(list(BUDGET_FIELDS[:len(rows[0]) if rows else 4]), rows, fmt)


@budget.command("grant")
@rules_option
@backend_option
@user_option
@global_option
@click.option("--epsilon", callback=_epsilon, help="epsilon to add (or give AMOUNT).")
@name_argument
@click.argument("amount", required=False)
def budget_grant(rules_path, backend, user, whole, epsilon, name, amount):
    """Add AMOUNT of epsilon to the budget of the analyst NAME, or to the global one.

    \b
    Examples:
      idp-proxy budget grant alice 5
      idp-proxy budget grant --global 50
    """
    account, label, words = _account(user, whole, [w for w in (name, amount) if w], more=1)
    if (epsilon is None) == (not words):
        raise click.UsageError("give the epsilon to add once: budget grant NAME AMOUNT, "
                               "e.g. budget grant alice 5")
    if epsilon is None:
        try:
            epsilon = parse_epsilon(words[0])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="AMOUNT") from None
    with progress("granting"):
        ledger = _target(rules_path, backend, "ledger")
        ledger.grant(account, epsilon)
        remaining = ledger.remaining(account)
    click.echo(f"granted {epsilon} to {label}; remaining {remaining}")


@budget.command("reset")
@rules_option
@backend_option
@user_option
@global_option
@name_argument
def budget_reset(rules_path, backend, user, whole, name):
    """Set the spent epsilon of the analyst NAME, or of the global budget, back to zero
    (the ledger keeps its history)."""
    account, label, _ = _account(user, whole, [name] if name else [])
    with progress("resetting"):
        ledger = _target(rules_path, backend, "ledger")
        ledger.reset(account)
        remaining = ledger.remaining(account)
    click.echo(f"reset {label}; remaining {remaining}")


@main.command("ledger")
@rules_option
@backend_option
@click.option("--user", help="Only this analyst's entries.")
@click.option("--since", type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S",
                                              "%Y-%m-%d %H:%M:%S"]),
              help="Only entries from this moment on (UTC unless the value says otherwise).")
@format_option
def ledger_command(rules_path, backend, user, since, fmt):
    """Every debit, budget refusal and refund, oldest first."""
    from proxy.ledger import LEDGER_FIELDS

    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=datetime.UTC)
    with progress("reading the ledger"):
        entries = _target(rules_path, backend, "ledger").entries(user, since)
    _print_rows(list(LEDGER_FIELDS), entries, fmt)


def _print_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    if fmt == "json":
        click.echo(_json([dict(zip(columns, row)) for row in rows]))
    else:
        _print_answer({"command": "SELECT", "columns": columns, "rows": rows, "notice": None},
                      fmt)


@main.command()
@rules_option
@backend_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=5433, show_default=True, type=int,
              help="TCP port (0: any free port).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key.")
def serve(rules_path, backend, host, port, tls_cert, tls_key):
    """Serve the PostgreSQL wire protocol: connect psql, drivers and BI tools.

    \b
    With no options it serves the embedded demo on 127.0.0.1:5433:
      idp-proxy serve
      psql "host=127.0.0.1 port=5433 user=alice dbname=demo"
    """
    import asyncio
    import ssl

    from proxy.admin import make_socket_folder, socket_path
    from proxy.engine import Engine
    from proxy.users import Users
    from proxy.wire.server import Server
    from proxy.wire.shadow import ShadowCatalog

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give both --tls-cert and --tls-key, or neither")
    tls = None
    if tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(tls_cert, tls_key)
    if logging.getLogger().level > logging.WARNING:  # an operator sees the server's problems
        logging.getLogger("idp_proxy").setLevel(logging.WARNING)
    with progress("starting the server and its catalog"):
        rules = _rules(rules_path)
        ledger = _ledger_url(backend)
        store = _store(ledger)
        engine = Engine(rules, _open(backend, rules.server.backend_connections), store=store)
        users = Users(engine.ledger)
        database = getattr(store or engine.backend, "path", None)  # a DuckDB file
        admin = socket_path(database) if database not in (None, ":memory:") else None
        if admin is not None:  # refused before the catalog starts
            make_socket_folder(admin)
        workers = min(_workers(rules, where) for where in (engine.backend, store) if where)
        # a session's connection each, and one per worker creating roles at once
        shadow = ShadowCatalog(rules, engine.backend, rules.server.max_connections + workers)
        _check_at_start(engine)

    def ready(bound_host, bound_port):
        auth = "trust (loopback clients)" if rules.server.auth == "trust" else "SCRAM-SHA-256"
        processes = f", {workers} workers" if workers > 1 else ""
        click.echo(f"idp-proxy serving {engine.backend.name} on {bound_host}:{bound_port} "
                   f"(auth: {auth}{', TLS' if tls else ''}{processes}); Ctrl-C stops it",
                   err=True)

    try:
        if workers == 1:
            asyncio.run(Server(engine, users, shadow, tls, admin).serve(host, port, ready))
        else:
            engine.backend.close()  # each worker opens its own connections
            if store is not None:
                store.close()
            if _serve_in_workers(workers, rules, (backend, ledger), shadow, tls, host, port,
                                 ready):
                raise click.ClickException("a worker could not start; see the log above")
    finally:
        shadow.close()
        engine.backend.close()
        if store is not None:
            store.close()


def _check_at_start(engine: Engine) -> None:
    """The rules against the data (proxy.owner.check), then the dry run of every
    aggregate family (proxy.owner.dry_run: nothing charged), one line per problem in
    the owner's log (stderr of ``serve``), never to analysts; a check that fails is
    logged and the server starts. Both together are interrupted after ``[server]
    start_check_seconds`` (a table of billions of rows, or a view over a product, would
    hold the start for minutes): the owner is told to run ``idp-proxy rules check``.
    0 skips it (an owner who runs ``rules check`` on their own schedule)."""
    from proxy.owner import check, dry_run

    seconds = engine.rules.server.start_check_seconds
    if not seconds:
        return
    log = logging.getLogger("idp_proxy.rules_check")
    backend = engine.backend
    owner = threading.get_ident()
    timer = threading.Timer(seconds, backend.interrupt, (owner,))
    timer.daemon = True
    timer.start()
    problems = []
    try:
        problems += check(engine.rules, backend)
        problems += dry_run(engine)
    except Exception as exc:  # the check is advice: it never stops the server
        if backend.stopped(owner):
            log.warning("rules check: the data took more than %d s to check at start; "
                        "run `idp-proxy rules check` to compare the rules with it",
                        seconds)
        else:
            log.warning("rules check: could not compare the rules with the data (%s: %s)",
                        type(exc).__name__, exc)
    finally:
        timer.cancel()
        timer.join()  # an interrupt firing just now lands before it is forgotten
        backend.forget_interrupt(owner)
    for problem in problems:
        log.warning("%s", problem)


def _workers(rules: Rules, backend: Backend) -> int:
    """``[server] workers`` (default: one per core), or 1 where one process serves the
    backend (DuckDB's file; Spark Connect, whose gRPC client does not survive a fork)."""
    import os

    wanted = rules.server.workers or os.cpu_count() or 1
    if backend.capabilities.one_process:
        if wanted > 1:
            logging.getLogger("idp_proxy.workers").log(
                logging.WARNING if rules.server.workers else logging.INFO,
                "one worker process: a DuckDB file is held by one process, and Spark "
                "Connect's client does not survive a fork ([server] workers = %d applies "
                "to PostgreSQL)", wanted)
        return 1
    return wanted


def _serve_in_workers(workers, rules, urls, shadow, tls, host, port, ready) -> int:
    """Serve PostgreSQL from ``workers`` processes (proxy/wire/workers.py) on one
    listening socket and the one shadow catalog; the exit status. ``urls``: of the
    backend and the ledger (None: in the backend)."""
    import asyncio

    from proxy.backends import open_backend
    from proxy.engine import Engine
    from proxy.users import Users
    from proxy.wire.server import Server
    from proxy.wire.workers import Supervisor, listening_sockets

    sockets = listening_sockets(host, port)
    bound = sockets[0].getsockname()

    backend, ledger = urls

    def work(crew):
        store = None if ledger is None else open_backend(ledger,
                                                         rules.server.backend_connections)
        engine = Engine(rules, open_backend(backend, rules.server.backend_connections),
                        store=store)
        server = Server(engine, Users(engine.ledger), shadow, tls, None, crew)
        try:
            asyncio.run(server.serve(host, port, lambda *_: crew.ready(), sockets=sockets))
        finally:
            engine.backend.close()
            if store is not None:
                store.close()

    try:
        return Supervisor(workers, rules.server, work, lambda: ready(*bound[:2])).run()
    finally:
        for sock in sockets:
            sock.close()


@main.group("rules")
def rules_group() -> None:
    """Draft a rules file from the data, and check rules against it (the owner's side:
    these read the data, and print only here)."""


@rules_group.command("draft")
@backend_option
@click.option("--table", "tables", multiple=True, metavar="NAME",
              help="A table to draft (repeat it; default: every table).")
@click.option("--from-data/--schema-only", default=True, show_default=True,
              help="Suggest domains, keys and max_rows_per_unit from the data (each "
                   "labelled as drawn from it), or write the types and TODOs only.")
@click.option("--out", "-o", type=click.Path(dir_okay=False),
              help="Write the rules here (default: standard output).")
def rules_draft(backend, tables, from_data, out):
    """Draft a commented rules file from the tables' schema (and data).

    \b
    Examples:
      idp-proxy rules draft --backend employees.csv --out rules.toml
      idp-proxy rules draft --backend postgresql://owner@db/hr --table employees
    """
    from proxy.owner import draft

    if backend is None:
        raise click.UsageError("give --backend: the data to draft rules for")
    opened = _open(backend)
    try:
        with progress("drafting the rules"):
            text = draft(opened, list(tables) or None, from_data,
                         source=click.get_current_context().meta.get(_SOURCE, backend))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        opened.close()
    if out is None:
        click.echo(text)
        return
    Path(out).write_text(text, encoding="utf-8")
    click.echo(f"wrote {out}: read every TODO and GUESS, widen each value drawn from the "
               f"data, then: idp-proxy rules check --rules {out} --backend ...", err=True)


@rules_group.command("check")
@rules_option
@backend_option
def rules_check(rules_path, backend):
    """Compare the rules with the data and the backend, one line per problem: the
    privileges the proxy lacks, declared tables and columns the backend lacks or stores
    otherwise, NULL and NaN counts, values outside a domain, values missing from keys,
    units with more rows than max_rows_per_unit, and a dry run of every aggregate family
    on each table (nothing charged). Exit status 1 if the proxy would not start or an
    aggregate fails, else 0 (the rest are warnings)."""
    from proxy.owner import review

    rules = _rules(rules_path)
    opened = _open(backend)
    try:
        with progress("checking the rules against the data"):
            found = review(rules, opened)
    finally:
        opened.close()
    for problem in found:
        click.echo(str(problem))
    errors = sum(problem.error for problem in found)
    click.echo(f"{errors} error{'s' if errors != 1 else ''}, {len(found) - errors} "
               f"warning{'s' if len(found) - errors != 1 else ''}", err=True)
    if errors:
        click.get_current_context().exit(1)


@main.command("console")
@rules_option
@backend_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but loopback needs a token.")
@click.option("--port", default=8433, show_default=True, type=int,
              help="TCP port (0: any free port).")
@click.option("--token", envvar="IDP_PROXY_CONSOLE_TOKEN",
              help="Required in the URL (?token=) once; default: none on loopback, a "
                   "random one printed otherwise.")
def console_command(rules_path, backend, host, port, token):
    """The owner console in the browser: budgets, spend over time, the ledger with
    filters and the start-up check's warnings (read-only; no protected values)."""
    import secrets

    from proxy.console import LOOPBACK, Console

    if host not in LOOPBACK and not token:
        token = secrets.token_urlsafe(24)
    ledger_url = _ledger_url(backend)
    _rules(rules_path)  # a mistake in the rules stops it now
    warnings = _console_warnings(rules_path, backend)
    console = Console(lambda what: _console_read(rules_path, backend, ledger_url, what),
                      warnings, token)

    def ready(bound_host, bound_port):
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        query = f"/?token={token}" if token else "/"
        click.echo(f"idp-proxy console on http://{shown}:{bound_port}{query} (read-only); "
                   "Ctrl-C stops it", err=True)

    try:
        console.serve(host, port, ready)
    except KeyboardInterrupt:
        pass


def _console_warnings(rules_path: str | None, backend: str | None) -> list[str]:
    """The start-up check's warnings without the values they suggest (proxy.owner)."""
    from proxy.owner import check

    rules = _rules(rules_path)
    try:
        opened = _open(backend)
    except DatabaseInUse:
        return ["the running server holds the DuckDB file: its start-up check is in its log"]
    try:
        return [str(w) for w in check(rules, opened, values=False)]
    except Exception as exc:  # advice only
        return [f"the rules could not be compared with the data ({type(exc).__name__})"]
    finally:
        opened.close()


def _console_read(rules_path, backend, ledger_url, what) -> tuple[list[str], list[tuple]]:
    """(columns, rows) of the budgets or the ledger, read afresh and let go (no lock kept
    between requests: a DuckDB file stays free for serve and the command line)."""
    from proxy.ledger import BUDGET_FIELDS, LEDGER_FIELDS, Ledger

    rules = _rules(rules_path)
    store = _store(ledger_url)
    try:
        opened = _open(backend) if store is None else None
    except DatabaseInUse as exc:
        from proxy.admin import reach_server

        target, held = reach_server(exc, "ledger"), None
    else:
        held = store or opened
        target = Ledger(held.ledger_store(), rules)
    try:
        if what == "budgets":
            rows = target.budgets(None)
            return list(BUDGET_FIELDS[:len(rows[0]) if rows else 4]), rows
        return list(LEDGER_FIELDS), target.entries(None, None)
    finally:
        if held is not None:
            held.close()


@main.command("demo")
@click.option("--backend", required=True, metavar="sc://HOST:PORT",
              help="The Spark Connect server to load the demo into.")
@click.option("--location", required=True, metavar="PATH",
              help="Where Spark writes the tables' Parquet folders: a path or URI as the "
                   "Spark server sees it (a relative path is made absolute here).")
@click.option("--rules-out", required=True, type=click.Path(dir_okay=False),
              help="Write the demo rules, each table with its location, to this file.")
def demo_command(backend, location, rules_out):
    """Load the demo tables into Spark as Parquet files, and write rules that serve them.

    \b
    A Sail server keeps no table from one client session to the next, so the Spark
    backend reads each table from its rules' location:
      idp-proxy demo --backend sc://127.0.0.1:50051 --location demo-data \\
          --rules-out demo-spark.toml
      idp-proxy serve --backend sc://127.0.0.1:50051 --ledger duckdb:///ledger.duckdb \\
          --rules demo-spark.toml
    """
    from proxy.backends import backend_class, open_backend
    from proxy.demo import located_rules, write_spark_demo

    if not backend_class(backend).capabilities.located_tables:
        raise ProxyError("idp-proxy demo loads the demo into Spark (--backend sc://host:port); "
                         "the DuckDB demo is created on first use", "22023")
    if "://" not in location:
        location = str(Path(location).resolve())
    spark = open_backend(backend)
    try:
        with progress("loading the demo into Spark", measured=True) as shown:
            folders = write_spark_demo(spark.session, location, shown.step)
    finally:
        spark.close()
    Path(rules_out).write_text(located_rules(DEMO_RULES.read_text(encoding="utf-8"), folders),
                               encoding="utf-8")
    click.echo(f"wrote the demo tables to {location}/ and their rules to {rules_out}; serve "
               f"them with: idp-proxy serve --backend {backend} --ledger "
               f"duckdb:///ledger.duckdb --rules {rules_out}")


@main.group()
def users() -> None:
    """Analyst logins for the server (SCRAM secrets; passwords are never stored)."""


def _secret(password_stdin: bool) -> str:
    """The SCRAM secret of the password typed, made here: only the secret is sent to a
    server holding the file, or stored."""
    from proxy.users import secret_of

    if password_stdin:
        return secret_of(sys.stdin.readline().rstrip("\n"))
    return secret_of(click.prompt("Password", hide_input=True, confirmation_prompt=True))


password_option = click.option("--password-stdin", is_flag=True,
                               help="Read the password from standard input.")


@users.command("add")
@rules_option
@backend_option
@password_option
@click.argument("name")
def users_add(rules_path, backend, password_stdin, name):
    """Create a login; its budget comes from the rules (else the default budget)."""
    secret = _secret(password_stdin)
    with progress("adding the user"):
        _target(rules_path, backend, "users").add(name, secret)
    click.echo(f"user {name} added")


@users.command("passwd")
@rules_option
@backend_option
@password_option
@click.argument("name")
def users_passwd(rules_path, backend, password_stdin, name):
    """Set a new password (and enable the login again)."""
    secret = _secret(password_stdin)
    with progress("changing the password"):
        _target(rules_path, backend, "users").passwd(name, secret)
    click.echo(f"password of {name} changed")


@users.command("disable")
@rules_option
@backend_option
@click.argument("name")
def users_disable(rules_path, backend, name):
    """Refuse further logins of a user (the ledger keeps its history)."""
    with progress("disabling the user"):
        _target(rules_path, backend, "users").disable(name)
    click.echo(f"user {name} disabled")


@users.command("list")
@rules_option
@backend_option
@format_option
def users_list(rules_path, backend, fmt):
    """Every login and whether it is disabled."""
    with progress("reading the logins"):
        logins = _target(rules_path, backend, "users").list()
    _print_rows(["user", "disabled"], logins, fmt)


@main.command("release")
@rules_option
@backend_option
@click.argument("table")
@click.option("--user", required=True, help="The analyst or owner whose budget pays.")
@click.option("--columns", required=True, metavar="A,B,...",
              help="The numeric columns to mask, e.g. --columns income,age.")
@click.option("--k", "k", required=True, type=int,
              help="Records per cluster (the last absorbs the remainder); idp-cbls needs ≥ 3.")
@click.option("--epsilon", required=True, help="Total epsilon, split across the columns.")
@click.option("--method", required=True, metavar="METHOD",
              help="dp (Laplace per record), dp-um (clusters, global sensitivity), "
                   "idp-ls (clusters, local sensitivity, seed 002 Prop. 2) or idp-cbls "
                   "(clusters, cluster-based local sensitivity, Prop. 3; needs no domain).")
@click.option("--budget-split", "split", default="equal", show_default=True,
              help="'equal', or one weight per column: --budget-split 2,1 gives the first "
                   "column two thirds of epsilon.")
@click.option("--alpha", type=float,
              help="Domain [0, alpha × the column's maximum] (seed 002's evaluation; reads "
                   "the data's maxima, which are not protected).")
@click.option("--domain", "domains", multiple=True, metavar="COL=L:U",
              help="A column's domain, e.g. --domain income=0:500000 (default: the rules').")
@click.option("--key", help="A column declared public = true, copied unchanged so the owner "
                            "can align the release with the original.")
@click.option("--out", required=True,
              help="FILE.parquet, FILE.csv or table:NAME (new; the mean SSE goes to "
                   "FILE.json beside a file).")
def release_command(rules_path, backend, table, user, columns, k, epsilon, method, split,
                    alpha, domains, key, out):
    """Release a protected copy of a table's numeric columns (seed 002): every row
    kept, each masked column replaced by its cluster's noisy centroid.

    \b
    Examples:
      idp-proxy release people --user alice --columns income,age --k 10 \\
          --epsilon 0.5 --method idp-cbls --out people.parquet
      idp-proxy release people --user alice --columns income --k 20 --epsilon 1 \\
          --method idp-ls --domain income=0:1000000 --key person_id --out table:people_masked
    """
    if alpha is not None:
        click.echo("note: --alpha reads the maximum of each column; the domain it gives is "
                   "not protected (docs/release.md)", err=True)
    # a server holding the file writes it, so it gets the path as meant here
    target = out if out.startswith("table:") else str(Path(out).resolve())
    with progress(f"releasing {table}", measured=True) as shown:
        done = _target(rules_path, backend, "analyst").release(
            user, table, columns, k, epsilon, method, split, alpha, list(domains), key, target,
            emit=lambda step: shown.step(*step))
    clusters = ", ".join(f"{c}: {n} clusters" for c, n in zip(done["columns"], done["clusters"]))
    click.echo(f"released {done['rows']} rows of {done['table']} to {out} ({clusters})")
    click.echo(f"mean SSE (docs/release.md): {done['mean_sse']:.6g}")
    click.echo(f"epsilon spent {done['epsilon']}, {done['remaining']} remaining")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
