"""`campaign ui` and `campaign report` as processes: a server found or started in the
background, recorded for the folder, stopped; a report folder holding one campaign."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from campaign.store.store import Store
from cli import ui_server as prefect_ui
from reports.site import write_site
from tests import synthetic
from tests.paths import ROOT
from tests.unit.test_report import health_server  # noqa: F401 - a fixture (pyproject: F811)


def test_ui_starts_a_server_in_the_background_and_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "fake_server.py"
    script.write_text(
        "import sys\nfrom http.server import BaseHTTPRequestHandler, HTTPServer\n"
        "class H(BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n        self.send_response(200); self.end_headers(); self.wfile.write(b'true')\n"
        "    def log_message(self, *a): pass\n"
        "print('fake prefect server up', flush=True)\n"
        f"HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    monkeypatch.setattr(prefect_ui, "configured_api", lambda: None)
    api = f"http://127.0.0.1:{port}/api"
    record = tmp_path / "work" / "prefect-ui.json"
    result = prefect_ui.ensure_ui(tmp_path / "work", command=[sys.executable, str(script)], api_url=api, record=record)
    try:
        assert result.started and result.pid and prefect_ui.healthy(api)
        assert json.loads(record.read_text()) == {"api_url": api, "pid": result.pid}
        assert "fake prefect server up" in (tmp_path / "work" / "prefect-server.log").read_text()
        again = prefect_ui.ensure_ui(tmp_path / "work", command=["false"], api_url=api, record=record)
        assert not again.started and again.pid == result.pid  # found, not started twice; its pid kept
    finally:
        assert prefect_ui.stop_server(tmp_path / "work")
    assert not prefect_ui.healthy(api)
    assert prefect_ui.server_command(port=4300)[-4:] == ["--host", "127.0.0.1", "--port", "4300"]
    assert "--analytics-off" in prefect_ui.server_command()


def test_ui_records_its_server_for_this_folder_and_leaves_the_profile_alone(health_server: str, tmp_path: Path) -> None:
    """`campaign ui` records the server in .campaign/prefect-ui.json of the folder it runs
    in; the user's Prefect profile gets nothing (it belongs to their other projects)."""
    import os
    import subprocess

    port = health_server.split(":")[2].split("/")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "ui", "--port", port],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "already answers" in out.stdout and f"http://127.0.0.1:{port}/" in out.stdout
    assert "profile is unchanged" in out.stdout
    record = json.loads((tmp_path / ".campaign" / "prefect-ui.json").read_text())
    assert record == {"api_url": health_server, "pid": None}
    profiles = tmp_path / "prefect-home" / "profiles.toml"
    assert not profiles.exists() or "PREFECT_API_URL" not in profiles.read_text()


def test_a_run_reports_to_the_recorded_server_while_it_lives(
    health_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `campaign run` does with the record: its server is used (and put into the
    environment, for what the run starts); a record whose started server died, or whose
    server no longer answers, gives a temporary server instead of an error."""
    import subprocess

    from cli import prefect_server
    from flows import prefect_api

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(prefect_api, "_profile_url", lambda: None)  # whatever the machine's Prefect profile holds
    assert prefect_server.check_configured() is None  # no record: a temporary server
    prefect_api.write_ui_record(health_server, None)
    assert prefect_server.check_configured() == health_server
    assert os.environ.pop("PREFECT_API_URL") == health_server
    gone = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    gone.wait()
    prefect_api.write_ui_record(health_server, gone.pid)
    assert prefect_api.ui_record_url() is None  # its server's process group is gone
    prefect_api.write_ui_record("http://127.0.0.1:9/api", None)
    assert prefect_server.check_configured() is None and "PREFECT_API_URL" not in os.environ


def test_ui_stop_gives_the_prefect_profile_back(health_server: str, tmp_path: Path) -> None:
    """`campaign ui --write-profile` wrote PREFECT_API_URL into the profile; `--stop`
    removes it again, so the next `campaign run` does not die on a server that is gone."""
    import os
    import subprocess

    port = health_server.split(":")[2].split("/")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PYTHONPATH"] = str(ROOT)
    profiles = tmp_path / "prefect-home" / "profiles.toml"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )

    assert cli("ui", "--port", port, "--write-profile", "--workdir", str(tmp_path)).returncode == 0
    assert f'PREFECT_API_URL = "{health_server}"' in profiles.read_text()
    out = cli("ui", "--stop", "--workdir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "PREFECT_API_URL removed from Prefect profile" in out.stdout
    assert "PREFECT_API_URL" not in profiles.read_text()
    assert not (tmp_path / prefect_ui.PROFILE_RECORD).exists()
    again = cli("ui", "--stop", "--workdir", str(tmp_path))  # nothing left to undo: says so, changes nothing
    assert again.returncode == 0 and "removed" not in again.stdout


def test_a_report_folder_holds_one_campaign_and_no_older_pages(tmp_path: Path) -> None:
    import os
    import subprocess

    from reports.site import default_folder

    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    synthetic.build(store, synthetic.Options())
    name = store.campaign().name
    out = default_folder(tmp_path / "reports" / "site", name)
    assert out.parent == tmp_path / "reports" / "site" and out.name
    write_site(store, name, out)
    stale = [
        out / "gates" / "renamed-gate.html",
        out / "arms" / "old-arm.html",
        out / "arms" / "old-arm.requests.jsonl",
    ]
    for path in stale:
        path.write_text("from an older run")
    (out / "notes.txt").write_text("mine")
    write_site(store, name, out)
    assert not any(path.exists() for path in stale)
    assert (out / "notes.txt").read_text() == "mine"  # only the report's own files are replaced

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "ph"))
    done = subprocess.run(
        [sys.executable, "-m", "cli", "report", "--db", str(tmp_path / "c.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "index.html").exists() and str(out / "index.html") in done.stdout.replace("\n", "")
