"""`campaign ui` on a port other than Prefect's default: the UI it starts talks to its own
API (its /ui-settings say so, and its Runs page in Chromium reaches it), and a port held by
something else is refused, saying by what."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_browser import BROWSER, Browser, _visit
from tests.paths import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )


@pytest.mark.integration
def test_the_ui_on_another_port_reaches_its_own_api(tmp_path: Path) -> None:
    assert BROWSER is not None, "the browser check needs Chromium (Debian: apt-get install -y chromium)"
    port = _free_port()
    started = _cli(tmp_path, "ui", "--port", str(port))
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        settings = httpx.get(f"http://127.0.0.1:{port}/ui-settings", timeout=10).json()
        assert settings["api_url"] == f"http://127.0.0.1:{port}/api", settings
        browser = Browser(BROWSER)
        try:
            deadline = time.monotonic() + 30
            while True:  # the single-page app draws after its first API calls
                seen = _visit(browser, f"http://127.0.0.1:{port}/runs")
                text = seen["probe"]["text"]
                if ("Runs" in text and "Can't connect" not in text) or time.monotonic() > deadline:
                    break
                time.sleep(1)
        finally:
            browser.close()
        assert "Can't connect to Server API" not in text, text[:500]
        assert any(f"127.0.0.1:{port}/api" in url for url in seen["requests"]), seen["requests"][:20]
        assert not any(":4200/" in url for url in seen["requests"]), seen["requests"]
    finally:
        stopped = _cli(tmp_path, "ui", "--stop")
        assert stopped.returncode == 0, stopped.stderr


@pytest.mark.integration
def test_a_port_held_by_something_else_is_refused_naming_it(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        refused = _cli(tmp_path, "ui", "--port", str(port))
    assert refused.returncode != 0
    assert f"port {port} is taken by PID {os.getpid()}" in refused.stdout + refused.stderr, refused.stderr
