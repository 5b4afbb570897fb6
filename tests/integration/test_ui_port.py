"""`campaign ui` on a port other than Prefect's default: the UI it starts talks to its own
API (its /ui-settings say so, and its Runs page in Chromium reaches it); a campaign run
beside it shows in Chromium as a user looks for it (arms' runs, items' states, the queue
artifact); and a port held by something else is refused, saying by what."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.campaigns import campaign_file
from tests.integration.test_browser import BROWSER, Browser, open_tab
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


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """`campaign ui --port N` in a folder of its own, N not Prefect's default; the folder
    and the port. Campaigns run from that folder report to it."""
    folder = tmp_path_factory.mktemp("ui")
    port = _free_port()
    started = _cli(folder, "ui", "--port", str(port))
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield folder, port
    finally:
        stopped = _cli(folder, "ui", "--stop")
        assert stopped.returncode == 0, stopped.stderr


def _drawn(browser: Browser, url: str, *wanted: str, timeout: float = 45) -> dict[str, Any]:
    """The page at `url` once its text holds every one of `wanted` (the single-page app
    draws after its API calls), or as it is at the timeout: its text, a screenshot and
    the requests it made."""
    b = browser
    target, session, start = open_tab(b, url)
    deadline = time.monotonic() + timeout
    while True:
        text = b.send(
            "Runtime.evaluate", {"returnByValue": True, "expression": "document.body.innerText"}, session=session
        )["result"]["value"]
        if all(w in text for w in wanted) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    shot = b.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
    requests = [
        e["params"]["request"]["url"]
        for e in b.events[start:]
        if e.get("sessionId") == session and e["method"] == "Network.requestWillBeSent"
    ]
    b.send("Target.closeTarget", {"targetId": target})
    return {"text": text, "png": base64.b64decode(shot), "requests": requests}


@pytest.mark.integration
def test_the_ui_on_another_port_reaches_its_own_api(ui: tuple[Path, int]) -> None:
    assert BROWSER is not None, "the browser check needs Chromium (Debian: apt-get install -y chromium)"
    _, port = ui
    settings = httpx.get(f"http://127.0.0.1:{port}/ui-settings", timeout=10).json()
    assert settings["api_url"] == f"http://127.0.0.1:{port}/api", settings
    browser = Browser(BROWSER)
    try:
        seen = _drawn(browser, f"http://127.0.0.1:{port}/runs", "Runs")
    finally:
        browser.close()
    text = seen["text"]
    assert "Can't connect to Server API" not in text, text[:500]
    assert any(f"127.0.0.1:{port}/api" in url for url in seen["requests"]), seen["requests"][:20]
    assert not any(":4200/" in url for url in seen["requests"]), seen["requests"]


def small_demo(name: str) -> str:
    """The demo's arms and gates, cut to three items that end in the three states a user
    looks for: `smoke` (A/B, one block) done; `quant-decode` blocked (D's runtime refuses
    to start, as a build without 8-bit kernels would); `cache-c` pending (it waits on
    `quant-decode`)."""
    demo = tomllib.loads((ROOT / "examples" / "demo.toml").read_text())
    campaign = {**demo["campaign"], "name": name}
    campaign.pop("max_blocks", None)
    refused = {**demo["runtimes"][0], "name": "sim-q8"}
    refused["options"] = {
        **refused["options"],
        "profile": {**refused["options"]["profile"], "faults": {"refuse_start": "no 8-bit kernels in this build"}},
    }
    arms = [{**a, "runtime": "sim-q8"} if a["id"] == "D" else a for a in demo["arms"]]
    items = {q["id"]: q for q in demo["queue"]}
    queue = [
        {**items["smoke"], "blocks": 1, "overrides": {"prompt_tokens": 512, "repeats": 1}},
        {**items["quant-decode"], "depends_on": [], "overrides": {"repeats": 1}},
        {**items["cache-c"], "depends_on": ["quant-decode"]},
    ]
    fields = {k: v for k, v in campaign.items() if k != "name"}
    return campaign_file(
        name,
        models=demo["models"],
        runtimes=[demo["runtimes"][0], refused],
        arms=arms,
        gates=demo["gates"],
        queue=queue,
        **fields,
    )


@pytest.mark.integration
def test_the_runs_page_and_the_queue_artifact_show_the_demos_arms_and_items(ui: tuple[Path, int]) -> None:
    """A user's look at the demo in the Prefect UI: the Runs page lists the arms' flow runs
    and a run per queue item in the item's state (Completed, Blocked, Pending), and the
    queue artifact's page shows every item with its state."""
    assert BROWSER is not None, "the browser check needs Chromium (Debian: apt-get install -y chromium)"
    folder, port = ui
    (folder / "demo.toml").write_text(small_demo("ui-demo"))
    ran = _cli(folder, "run", "demo.toml")
    assert "blocked" in ran.stdout, ran.stdout + ran.stderr
    base = f"http://127.0.0.1:{port}"
    browser = Browser(BROWSER)
    try:
        runs = _drawn(browser, f"{base}/runs", "item quant-decode", "ui-demo/smoke/A", "Blocked")
        newest = httpx.post(
            f"{base}/api/artifacts/filter",
            json={"artifacts": {"key": {"any_": ["ui-demo-queue"]}}, "sort": "CREATED_DESC", "limit": 1},
            timeout=10,
        ).json()
        assert newest, "no queue artifact"
        artifact = _drawn(browser, f"{base}/artifacts/artifact/{newest[0]['id']}", "quant-decode", "blocked")
    finally:
        browser.close()
    text = runs["text"]
    for name in ("ui-demo/smoke/A", "ui-demo/smoke/B", "item smoke", "item quant-decode", "item cache-c"):
        assert name in text, (name, text[:3000])
    for state in ("Completed", "Blocked", "Pending"):
        assert state in text, (state, text[:3000])
    shown = artifact["text"]
    for item, state in (("smoke", "done"), ("D (q8) vs B", "blocked"), ("speculation keeps the cache", "pending")):
        assert item in shown and state in shown, (item, state, shown[:3000])
    assert "no 8-bit kernels in this build" in shown, shown[:3000]


@pytest.mark.integration
def test_a_port_held_by_something_else_is_refused_naming_it(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        refused = _cli(tmp_path, "ui", "--port", str(port))
    assert refused.returncode != 0
    assert f"port {port} is taken by PID {os.getpid()}" in refused.stdout + refused.stderr, refused.stderr
