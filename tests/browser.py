"""One headless Chromium (Debian's ``chromium``) kept open for several pages, driven over
the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ending in a
NUL byte, the browser reading fd 3 and writing fd 4 — no websocket library needed).

A browser's start costs 1–7 s of both cores; ``--dump-dom`` starts one per page. Here a
test module starts one and loads each page in a fresh tab, so every page still starts
from nothing (no cookies, storage or script state carried over)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """``with Browser() as browser: browser.dom(url, ready)``."""

    def __enter__(self) -> Browser:
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()

        def onto_3_and_4():  # in the child: dup first, so neither end is overwritten
            read, write = os.dup(to_browser), os.dup(from_browser)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "about:blank"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=onto_3_and_4)
        os.close(to_browser)
        os.close(from_browser)
        self._pending = b""
        self._last = 0
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._call("Browser.close")
        except OSError:
            pass
        finally:
            os.close(self._commands)
            os.close(self._replies)
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def dom(self, url: str, ready: str, timeout: float = 60) -> str:
        """The page's DOM once an element matching the CSS selector ``ready`` exists (its
        scripts have run), read in a tab of its own."""
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            self._call("Page.navigate", {"url": url}, session)
            expression = (f"document.querySelector({json.dumps(ready)}) ? "
                          "document.documentElement.outerHTML : ''")
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                answer = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                    session)
                if page := answer["result"].get("value"):
                    return page
                time.sleep(0.05)
            raise TimeoutError(f"{url}: no {ready} within {timeout} s")
        finally:
            self._call("Target.closeTarget", {"targetId": target})

    def _call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and wait for its reply (events in between are dropped)."""
        self._last += 1
        message = {"id": self._last, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._pending:
                chunk = os.read(self._replies, 1 << 16)
                if not chunk:
                    raise EOFError(f"chromium closed its pipe (exit status {self._process.poll()})")
                self._pending += chunk
            reply, _, self._pending = self._pending.partition(b"\0")
            reply = json.loads(reply)
            if reply.get("id") == self._last:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
