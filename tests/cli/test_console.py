"""The owner console (issue 36 item 7) in a real headless Chromium (Debian's
``chromium``, one for the module, a fresh tab per page: tests/browser.py): the page loads, the chart
renders, the filters work (from the URL, as the page keeps them), an analyst's spend
appears after a query, the start-up check's warnings show without the data's values,
and a token guards it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests import forked_cli, watchdog
from tests.browser import CHROMIUM, Browser

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
_READY = re.compile(r"console on http://127\.0\.0\.1:(\d+)/")


def cli(home: Path, *args: str, stdin: str | None = None):
    return forked_cli.run(list(args), env={**os.environ, "IDP_PROXY_HOME": str(home)},
                          input=stdin)


@contextmanager
def console(home: Path, *args: str):
    process = forked_cli.start(["console", *args, "--port", "0"],
                               env={**os.environ, "IDP_PROXY_HOME": str(home)},
                               stderr=subprocess.PIPE)
    watchdog.watch_server(process.pid)
    try:
        seen = []
        for line in process.stderr:
            seen.append(line)
            if match := _READY.search(line):
                break
        else:
            raise RuntimeError("the console did not start:\n" + "".join(seen))
        yield f"http://127.0.0.1:{match.group(1)}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
        watchdog.unwatch_server(process.pid)


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module's pages (tests/browser.py: a fresh tab per page)."""
    with Browser() as opened:
        yield opened


def dom(browser: Browser, url: str) -> str:
    """The page's DOM once its scripts have run, as headless Chromium sees it."""
    return browser.dom(url, '[data-loaded="yes"]')


def ledger_rows(page: str) -> list[str]:
    body = page.split('id="ledger"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr class="[^"]*" data-analyst="([^"]*)"', body)


@pytest.fixture
def owner(tmp_path):
    """A CSV served with drafted rules, one domain narrowed, alice and bob listed."""
    path = tmp_path / "emp.csv"
    path.write_text("emp_id,age,salary\n" + "".join(
        f"{i},{20 + i % 50},{30000 + 97 * i}\n" for i in range(400)), encoding="utf-8")
    out = cli(tmp_path, "rules", "draft", "--backend", str(path))
    assert out.returncode == 0, out.stderr
    text = out.stdout.replace("domain = [20, 70]", "domain = [20, 60]")
    text = text.replace("[defaults]", "[analysts.alice]\n[analysts.bob]\n\n[defaults]")
    (tmp_path / "rules.toml").write_text(text, encoding="utf-8")
    return ("--rules", str(tmp_path / "rules.toml"), "--backend", str(path))


def ask(home: Path, common, user: str, sql: str) -> None:
    out = cli(home, "query", *common, "--user", user, sql)
    assert out.returncode == 0, out.stderr


def test_console_shows_budgets_chart_ledger_filters_and_warnings(tmp_path, owner, browser):
    ask(tmp_path, owner, "alice", "SELECT AVG(age) FROM emp")
    ask(tmp_path, owner, "alice", "SELECT COUNT(*) FROM emp WHERE age > 30")
    with console(tmp_path, *owner) as url:
        page = dom(browser, url + "/")
        assert ledger_rows(page) == ["alice", "alice"]
        (points,) = re.findall(r'<polyline points="([^"]+)"[^>]*data-analyst="alice"', page)
        assert "NaN" not in points and len(points.split()) == 3  # 0, then two answers
        assert "outside the declared domain [20, 60]" in page
        assert "a domain holding them" not in page  # counts only, no value of the data
        assert re.search(r"<td>alice</td><td>1(\.0)?</td><td>0\.2", page)

        ask(tmp_path, owner, "bob", "SELECT MEDIAN(salary) FROM emp")  # while it runs
        page = dom(browser, url + "/")
        assert ledger_rows(page) == ["alice", "alice", "bob"]
        assert 'data-analyst="bob"' in page.split('id="chart"', 1)[1]
        page = dom(browser, url + "/?analyst=bob")
        assert ledger_rows(page) == ["bob"]
        assert 'polyline' in page and 'stroke-width="2" data-analyst="alice"' not in page
        assert ledger_rows(dom(browser, url + "/?status=refused")) == []
        assert len(ledger_rows(dom(browser, url + "/?mechanism=idp%3A%20count"))) == 1


def test_console_with_a_token_refuses_requests_without_it(tmp_path, owner, browser):
    with console(tmp_path, *owner, "--token", "s3cret") as url:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/api/budgets", timeout=30)
        assert refused.value.code == 403
        with urllib.request.urlopen(url + "/api/budgets?token=s3cret", timeout=30) as answer:
            assert answer.status == 200 and b'"analyst"' in answer.read()
        assert ledger_rows(dom(browser, url + "/?token=s3cret")) == []


def _get(url: str, host: str) -> int:
    """The status of a GET of ``url`` sent with the Host header ``host``."""
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_console_without_a_token_answers_only_loopback_host_names(tmp_path, owner):
    """On loopback without a token, a page whose own DNS name the attacker pointed at
    127.0.0.1 (DNS rebinding) must not read the ledger from the owner's browser: a
    request naming another host is refused; 127.0.0.1, localhost and [::1] are read."""
    with console(tmp_path, *owner) as url:
        port = url.rsplit(":", 1)[1]
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.nip.io:{port}"):
            assert _get(url + "/api/ledger", host) == 403, host
            assert _get(url + "/", host) == 403, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}",
                     f"[::1]:{port}"):
            assert _get(url + "/api/budgets", host) == 200, host
