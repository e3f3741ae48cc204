"""A minimal headless Chromium driver over the DevTools protocol, for the report's browser test.

It starts the system's Chromium (never a downloaded one) with networking features off, talks
CDP over one WebSocket (`websockets`' synchronous client) in flattened-session mode, and
records what a page does while it loads: console errors, uncaught exceptions, log errors
(CSP violations land there), failed requests and every request that is not `file:`/`data:`.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

#: The flags every launch uses: headless, no sandbox (containers run as root), and nothing
#: that reaches for the network on its own.
LAUNCH_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
)
_START_SECONDS = 30


def find_chromium() -> str | None:
    """The system Chromium binary (Debian's `chromium` package), or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


class PageLoad:
    """What loading one page produced."""

    def __init__(self) -> None:
        self.console_errors: list[str] = []
        self.failed_requests: list[str] = []
        self.requested_urls: list[str] = []


class Chromium:
    """One headless Chromium process with one page; use as a context manager."""

    def __init__(self, binary: str, width: int = 1200, height: int = 900):
        self._binary = binary
        self._size = (width, height)
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="report-chromium-")
        self._process = subprocess.Popen(
            [self._binary, *LAUNCH_FLAGS, f"--user-data-dir={self._profile}",
             "--remote-debugging-port=0", f"--window-size={self._size[0]},{self._size[1]}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._socket = connect(self._browser_url(), max_size=None, open_timeout=_START_SECONDS)
            target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.send("Target.attachToTarget",
                                      {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable", session=True)
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": self._size[0], "height": self._size[1], "deviceScaleFactor": 1,
                       "mobile": False}, session=True)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop()

    def _browser_url(self) -> str:
        """The browser's WebSocket URL, from the DevToolsActivePort file Chromium writes."""
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._process.returncode} at start")
            lines = port_file.read_text().split() if port_file.exists() else []
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port")

    def _stop(self) -> None:
        socket = getattr(self, "_socket", None)
        if socket is not None:
            try:
                socket.send('{"id": 0, "method": "Browser.close"}')
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            socket.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()  # only the process this driver started
            self._process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = False,
             timeout: float = 30) -> dict[str, Any]:
        """Sends one command and returns its result; events meanwhile are kept."""
        message_id = next(self._ids)
        message = {"id": message_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        self._socket.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._socket.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def _wait_for(self, event: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self._events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {event} within {timeout}s")
            reply = json.loads(self._socket.recv(timeout=remaining))
            if "method" in reply:
                self._events.append(reply)

    def load(self, url: str, timeout: float = 60) -> PageLoad:
        """Navigates to `url`, waits for its load event, and reports what happened."""
        self._events.clear()
        self.send("Page.navigate", {"url": url}, session=True)
        self._wait_for("Page.loadEventFired", timeout)
        self.evaluate("1")  # a round trip: events queued before it have arrived
        return self._page_load()

    def _page_load(self) -> PageLoad:
        load = PageLoad()
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                load.console_errors.append(str(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                load.console_errors.append(str(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                load.console_errors.append(params["entry"].get("text", ""))
            elif method == "Network.loadingFailed":
                load.failed_requests.append(f"{params.get('errorText')} {params.get('blockedReason')}")
            elif method == "Network.requestWillBeSent":
                load.requested_urls.append(params.get("request", {}).get("url", ""))
        return load

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (DevTools evaluation, which the
        page's Content-Security-Policy does not govern)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                           session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, full_page: bool = False) -> bytes:
        """A PNG of the viewport (or of the whole page)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            width, height = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        return base64.b64decode(self.send("Page.captureScreenshot", params, session=True)["data"])
