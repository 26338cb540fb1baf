"""The owner console (issue 36 item 7): a read-only page in the browser with the
budgets, the spend over time as a chart, the ledger with filters, and the start-up
check's warnings.

It shows what ``idp-proxy budget show``, ``idp-proxy ledger`` and ``rules check``
show, nothing more: no value of a protected table (the warnings are given without the
domains they suggest). Served by the standard library's ``http.server`` on loopback by
default, to requests naming a loopback host only (a rebound DNS name is refused); any
other address needs a token (``?token=`` once, then a cookie). Each request
reads the ledger afresh through ``read`` (the command line's: the backend, or the server
holding a DuckDB file through its admin socket), so the console holds no lock between
requests and ``serve`` may start beside it."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from decimal import Decimal
from http import cookies
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

log = logging.getLogger("idp_proxy.console")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    return value


def _loopback_host(host: str) -> bool:
    """Whether a request's Host header names a loopback address (with any port)."""
    name = host.rsplit("]", 1)[0].lstrip("[") if host.startswith("[") \
        else host.rsplit(":", 1)[0]
    return name.lower() in LOOPBACK


class Console:
    """``read(what)``: ``"budgets"`` → rows of BUDGET_FIELDS, ``"ledger"`` → rows of
    LEDGER_FIELDS; ``warnings``: the start-up check's lines."""

    def __init__(self, read: Callable[[str], tuple[list[str], list[tuple]]],
                 warnings: list[str], token: str | None) -> None:
        self.read = read
        self.warnings = warnings
        self.token = token

    def answer(self, what: str) -> Any:
        if what == "warnings":
            return self.warnings
        columns, rows = self.read(what)
        return [{c: _plain(v) for c, v in zip(columns, row)} for row in rows]

    def serve(self, host: str, port: int, ready: Callable[[str, int], None]) -> None:
        console = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 (http.server's name)
                log.info("%s " + format, self.address_string(), *args)

            def _allowed(self, query: dict[str, list[str]]) -> bool:
                if console.token is None:
                    # without a token only a page of a loopback name may read it: a web
                    # page the owner opens could otherwise point a name of its own at
                    # 127.0.0.1 (DNS rebinding) and read the ledger from the browser
                    return _loopback_host(self.headers.get("Host", ""))
                given = query.get("token", [""])[0]
                jar = cookies.SimpleCookie(self.headers.get("Cookie", ""))
                if "idp_console" in jar:
                    given = given or jar["idp_console"].value
                return hmac.compare_digest(given.encode(), console.token.encode())

            def _send(self, status: int, body: bytes, kind: str, extra: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Frame-Options", "DENY")
                self.send_header("Content-Security-Policy",
                                 "default-src 'self'; script-src 'unsafe-inline' 'self'; "
                                 "style-src 'unsafe-inline'")
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802 (http.server's name)
                url = urlparse(self.path)
                query = parse_qs(url.query)
                if not self._allowed(query):
                    self._send(403, b"a token is needed: open the URL the console printed"
                               if console.token else b"open the console at 127.0.0.1 or "
                               b"localhost", "text/plain; charset=utf-8")
                    return
                extra = ({"Set-Cookie": f"idp_console={console.token}; HttpOnly; "
                          "SameSite=Strict; Path=/"} if console.token else None)
                if url.path == "/":
                    self._send(200, PAGE.encode(), "text/html; charset=utf-8", extra)
                elif url.path.startswith("/api/") and url.path[5:] in ("budgets", "ledger",
                                                                       "warnings"):
                    try:
                        body = json.dumps(console.answer(url.path[5:]), default=str)
                    except Exception as exc:  # the owner's page says it, and the log
                        log.warning("console: could not read %s: %s", url.path, exc)
                        self._send(503, json.dumps({"error": str(exc)}).encode(),
                                   "application/json")
                        return
                    self._send(200, body.encode(), "application/json", extra)
                else:
                    self._send(404, b"not found", "text/plain; charset=utf-8")

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        try:
            ready(*server.server_address[:2])
            server.serve_forever()
        finally:
            server.server_close()


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>idp-proxy owner console</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; } td, th { border-bottom: 1px solid #ddd;
  padding: 3px 10px; text-align: left; } th { background: #f4f4f4; }
#warnings li { color: #8a4b00; } .refused { color: #b00; }
svg { border: 1px solid #ddd; background: #fff; } label { margin-right: 1em; }
</style></head>
<body>
<h1>idp-proxy owner console</h1>
<p>Read-only: budgets, the ledger and the start-up check. No value of a protected table
is shown here.</p>
<h2>Start-up check</h2><ul id="warnings"></ul>
<h2>Budgets</h2><table id="budgets"><thead></thead><tbody></tbody></table>
<h2>Spend over time</h2>
<svg id="chart" width="720" height="260" role="img" aria-label="epsilon spent over time"></svg>
<div id="legend"></div>
<h2>Ledger</h2>
<div id="filters">
<label>analyst <select id="analyst"><option value="">all</option></select></label>
<label>mechanism <select id="mechanism"><option value="">all</option></select></label>
<label>status <select id="status"><option value="">all</option>
<option value="charged">charged</option><option value="refused">refusals</option>
<option value="refunded">refunds</option></select></label>
</div>
<table id="ledger"><thead></thead><tbody></tbody></table>
<script>
"use strict";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];
let LEDGER = [];
function el(tag, attrs, text) {
  const node = document.createElementNS(tag === "svg" || attrs.svg ?
    "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs)) if (k !== "svg") node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function fill(id, rows, columns) {
  const table = document.getElementById(id);
  const head = table.tHead, body = table.tBodies[0];
  head.replaceChildren(); body.replaceChildren();
  const tr = el("tr", {});
  for (const c of columns) tr.appendChild(el("th", {}, c));
  head.appendChild(tr);
  for (const row of rows) {
    const line = el("tr", {"class": String(row.status || "").startsWith("refused") ?
      "refused" : "", "data-analyst": row.analyst || ""});
    for (const c of columns) line.appendChild(el("td", {}, row[c] === null ? "" : String(row[c])));
    body.appendChild(line);
  }
}
function selected(id) { return document.getElementById(id).value; }
function kept(row) {
  const a = selected("analyst"), m = selected("mechanism"), s = selected("status");
  return (!a || row.analyst === a) && (!m || row.mechanism === m) &&
    (!s || String(row.status).startsWith(s));
}
function chart(rows) {
  const svg = document.getElementById("chart"), legend = document.getElementById("legend");
  svg.replaceChildren(); legend.replaceChildren();
  const W = 720, H = 260, P = 40;
  const charged = rows.filter(r => !String(r.status).startsWith("refused"));
  if (!charged.length) { svg.appendChild(el("text", {svg: 1, x: P, y: H / 2}, "no spending yet")); return; }
  const times = charged.map(r => Date.parse(r.logged_at.replace(" ", "T")
    .replace(/([+-]\d\d)$/, "$1:00")));
  const t0 = Math.min(...times), t1 = Math.max(...times) || t0 + 1;
  const series = {};
  charged.forEach((r, i) => {
    const s = series[r.analyst] = series[r.analyst] || {total: 0, points: []};
    s.total += Number(r.epsilon);
    s.points.push([times[i], s.total]);
  });
  const top = Math.max(...Object.values(series).map(s => s.total)) || 1;
  const x = t => P + (t1 === t0 ? 0.5 : (t - t0) / (t1 - t0)) * (W - 2 * P);
  const y = v => H - P - v / top * (H - 2 * P);
  svg.appendChild(el("line", {svg: 1, x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: "#999"}));
  svg.appendChild(el("line", {svg: 1, x1: P, y1: P, x2: P, y2: H - P, stroke: "#999"}));
  svg.appendChild(el("text", {svg: 1, x: 4, y: P - 8}, "epsilon " + top.toPrecision(3)));
  Object.entries(series).forEach(([name, s], i) => {
    const color = COLORS[i % COLORS.length];
    const points = [[s.points[0][0], 0], ...s.points].map(([t, v]) => x(t) + "," + y(v)).join(" ");
    svg.appendChild(el("polyline", {svg: 1, points, fill: "none", stroke: color,
      "stroke-width": 2, "data-analyst": name}));
    legend.appendChild(el("span", {style: "color:" + color + ";margin-right:1em"},
      name + ": " + s.total.toPrecision(4)));
  });
}
function render() {
  const rows = LEDGER.filter(kept);
  fill("ledger", rows, ["id", "logged_at", "analyst", "model", "mechanism", "epsilon",
                        "delta", "status", "released"]);
  chart(rows);
  const params = new URLSearchParams(location.search);
  for (const id of ["analyst", "mechanism", "status"]) {
    if (selected(id)) params.set(id, selected(id)); else params.delete(id);
  }
  history.replaceState(null, "", "?" + params.toString());
}
function options(id, values) {
  const select = document.getElementById(id);
  for (const v of [...new Set(values)].sort()) select.appendChild(el("option", {value: v}, v));
}
async function load() {
  const get = async what => { const r = await fetch("/api/" + what); return r.json(); };
  const [budgets, ledger, warnings] = await Promise.all([get("budgets"), get("ledger"), get("warnings")]);
  const list = document.getElementById("warnings");
  if (!warnings.length) list.appendChild(el("li", {style: "color:#060"}, "no warnings"));
  for (const w of warnings) list.appendChild(el("li", {}, w));
  fill("budgets", budgets, Object.keys(budgets[0] || {analyst: 0, budget: 0, spent: 0, remaining: 0}));
  LEDGER = ledger;
  options("analyst", ledger.map(r => r.analyst));
  options("mechanism", ledger.map(r => r.mechanism));
  const params = new URLSearchParams(location.search);
  for (const id of ["analyst", "mechanism", "status"]) {
    const select = document.getElementById(id);
    if (params.get(id)) select.value = params.get(id);
    select.addEventListener("change", render);
  }
  render();
  document.body.setAttribute("data-loaded", "yes");
}
load();
</script>
</body></html>
"""
