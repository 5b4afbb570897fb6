"""The report in a real browser: headless Chromium opens every page from disk and, over
the DevTools protocol (on a pipe, so no port is opened), reports console errors, script
exceptions and every request it makes. A page passes when nothing went to the console,
no request left file://, the gate table and the charts are there and drawn. Screenshots
go to screenshots/ for a person to review.

Skipped, with the reason, when no Chromium is installed (Debian: apt-get install chromium).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from campaign.store.store import Store
from reports.site import write_site
from tests import synthetic
from tests.paths import ROOT

SHOTS = ROOT / "screenshots"
HOSTILE = "<script>alert(1)</script>"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


BROWSER = _chromium()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no Chromium found on PATH (Debian/Ubuntu: apt-get install -y chromium); the browser check needs one",
)


class Browser:
    """Chromium driven over --remote-debugging-pipe: commands go in on fd 3, replies and
    events come out on fd 4, each a JSON message ended by a NUL byte."""

    def __init__(self, executable: str):
        self.profile = tempfile.mkdtemp(prefix="report-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def plumbing() -> None:  # in the child, before exec: the pipe ends become fds 3 and 4
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=plumbing,
            close_fds=False,
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next = 0
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        box = self._replies.get(msg["id"])
                    if box:
                        box.put(msg)
                else:
                    self.events.append(msg)

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30
    ) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            ident = self._next
            box: queue.Queue[dict[str, Any]] = queue.Queue()
            self._replies[ident] = box
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        reply = box.get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str, since: int, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events[since:]:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            time.sleep(0.02)
        raise TimeoutError(f"no {method} within {timeout} s")

    def close(self) -> None:
        """Ask the browser to quit, then end its whole process group (renderers, zygote)."""
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - it may already be gone
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=5)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    store = Store(f"sqlite:///{root / 'c.db'}")
    synthetic.build(store, synthetic.Options(hostile=HOSTILE, answer=f"{HOSTILE} answer", served_suffix=HOSTILE))
    return write_site(store, None, root / "site").parent


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert BROWSER is not None
    b = Browser(BROWSER)
    try:
        yield b
    finally:
        b.close()
    assert b.proc.poll() is not None


def open_tab(b: Browser, url: str) -> tuple[str, str, int]:
    """`url` loaded in a fresh 1280x900 tab: its target, its session and the index of its
    first event in `b.events`."""
    target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        b.send(f"{domain}.enable", session=session)
    b.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    start = len(b.events)
    b.send("Page.navigate", {"url": url}, session=session)
    b.wait_event("Page.loadEventFired", session, start)
    return target, session, start


def _visit(b: Browser, url: str) -> dict[str, Any]:
    """Open `url` in a fresh tab; return what the page did and what it contains."""
    target, session, start = open_tab(b, url)
    time.sleep(0.2)  # late console messages
    probe = b.send(
        "Runtime.evaluate",
        {
            "returnByValue": True,
            "expression": """(() => {
        const svgs = [...document.querySelectorAll('svg')];
        return {
          title: document.title,
          gateRows: document.querySelectorAll('table#gates tr').length,
          svgs: svgs.length,
          drawn: svgs.filter(s => { const r = s.getBoundingClientRect(); return r.width > 100 && r.height > 50; }).length,
          bars: document.querySelectorAll('svg .rect.reactive, svg rect.rect').length,
          scripts: document.querySelectorAll('script').length,
          text: document.body.innerText,
        };
    })()""",
        },
        session=session,
    )["result"]["value"]
    metrics = b.send("Page.getLayoutMetrics", session=session)
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    shot = b.send(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": 1280, "height": min(size["height"], 6000), "scale": 1},
        },
        session=session,
    )["data"]
    events = [e for e in b.events[start:] if e.get("sessionId") == session]
    b.send("Target.closeTarget", {"targetId": target})
    errors = [e["params"] for e in events if e["method"] == "Runtime.exceptionThrown"]
    errors += [
        e["params"]
        for e in events
        if e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert")
    ]
    errors += [
        e["params"]["entry"]
        for e in events
        if e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
    ]
    requests = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    dialogs = [e["params"] for e in events if e["method"] == "Page.javascriptDialogOpening"]
    return {"probe": probe, "errors": errors, "requests": requests, "dialogs": dialogs, "png": base64.b64decode(shot)}


def test_every_page_renders_offline_without_errors(site: Path, browser: Browser) -> None:
    SHOTS.mkdir(exist_ok=True)
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 5
    for page in pages:
        seen = _visit(browser, page.as_uri())
        name = page.relative_to(site).as_posix()
        assert seen["errors"] == [], f"{name}: console errors {seen['errors']}"
        outside = [u for u in seen["requests"] if not u.startswith("file://")]
        assert outside == [], f"{name}: requests outside file:// {outside}"
        probe = seen["probe"]
        assert probe["scripts"] == 0 and seen["dialogs"] == [], name
        assert HOSTILE in probe["text"], f"{name}: hostile text should show as text"
        assert probe["svgs"] == probe["drawn"], f"{name}: an SVG chart has no size"
        (SHOTS / (name.replace("/", "_").removesuffix(".html") + ".png")).write_bytes(seen["png"])
        assert seen["png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_index_has_the_gate_table_and_charts(site: Path, browser: Browser) -> None:
    seen = _visit(browser, (site / "index.html").as_uri())
    probe = seen["probe"]
    assert probe["gateRows"] == 1 + 4  # header + the synthetic campaign's four gates
    assert probe["svgs"] >= 3 and probe["drawn"] == probe["svgs"]
    assert probe["bars"] > 0
    for text in (
        "Gate verdicts",
        "Campaign queue",
        "Coverage matrix",
        "Runtime offerings",
        "Quant offerings",
        "Identity flags",
        "Legend",
    ):
        assert text in probe["text"]


def test_arm_page_draws_agent_load(site: Path, browser: Browser) -> None:
    probe = _visit(browser, (site / "arms" / "a0.html").as_uri())["probe"]
    assert "TTFT per turn, per conversation" in probe["text"]
    assert probe["svgs"] >= 2 and probe["drawn"] == probe["svgs"]
