"""The command line behaves like the tools people know (uv, pytest, hyperfine): -h and
--version, help that shows kinds (FILE, INT) rather than Python types, probe options
grouped by probe, and read-only commands that create nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def test_version_and_short_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"campaign \d+\.\d+\.\d+\S*\n", result.output), result.output
    short, long = runner.invoke(app, ["run", "-h"]), runner.invoke(app, ["run", "--help"])
    assert short.exit_code == 0 and short.output == long.output


@pytest.mark.parametrize("command", ["run", "check", "rerun", "status", "report", "export", "probe", "simulate"])
def test_help_shows_no_python_types(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    for python in ("<bool>", "<str>", "<int>", "<float>", "<path>", "list[", "{file}", "{url}", "{item}"):
        assert python not in result.output, (command, python, result.output)


def test_command_summaries_wrap_at_the_terminal_not_where_the_docstring_broke() -> None:
    """A docstring's line breaks are the source's, not the reader's: on a wide terminal
    each command's summary is one line."""
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "400"}).output
    rows = [line.strip("│ ") for line in text.splitlines() if line.startswith("│")]
    continuation = [
        row
        for row in rows
        if row
        and row.split()[0]
        not in {
            "run",
            "check",
            "resume",
            "rerun",
            "worker",
            "status",
            "report",
            "simulate",
            "examples",
            "new",
            "probe",
            "export",
            "compare",
            "rejudge",
            "ui",
            "db",
            "trace",
            "--version",
            "--help",
        }
    ]
    assert not continuation, continuation


def test_probe_options_are_grouped_by_probe() -> None:
    text = runner.invoke(app, ["probe", "--help"], env={"COLUMNS": "100"}).output
    for panel in ("decode", "load", "tool-loop", "agent-load", "agent workload (agent-load, load)"):
        assert re.search(rf"─ {re.escape(panel)} ─", text), panel


@pytest.mark.parametrize("command", [["status"], ["report"], ["export"]])
def test_read_only_commands_create_nothing(command: list[str], tmp_path: Path) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = runner.invoke(app, command, env={"CAMPAIGN_DB": ""})
    finally:
        os.chdir(here)
    assert result.exit_code != 0
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())


@pytest.mark.parametrize("runtime", ["simulator", "llamacpp", "vllm", "external"])
def test_new_writes_a_file_that_passes_check(runtime: str, tmp_path: Path) -> None:
    from flows.overrides import check_campaign
    from flows.resolve import load_campaign

    out = tmp_path / f"{runtime}.toml"
    result = runner.invoke(app, ["new", "--runtime", runtime, "--out", str(out)])
    assert result.exit_code == 0 and out.is_file(), result.output
    assert check_campaign(load_campaign(out)) == []
    assert all(len(line) <= 100 for line in out.read_text().splitlines() if str(out) not in line), (
        "a line a terminal would fold"
    )
    again = runner.invoke(app, ["new", "--runtime", runtime, "--out", str(out)])
    assert again.exit_code != 0  # never overwritten without --force


def test_new_takes_llama_threads_from_the_machines_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed `--threads 2` on a busy 2-core machine gives 0.67 tok/s: the llama.cpp
    template's thread count is the cores this process may use (its CPU affinity, else
    the machine's count) less one for the campaign's own process, at least 1, written with
    where it came from and said when the file is written."""
    from flows.resolve import load_campaign

    out = tmp_path / "llama.toml"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    result = runner.invoke(app, ["new", "--runtime", "llamacpp", "--out", str(out)])
    assert result.exit_code == 0, result.output
    runtime = load_campaign(out).runtime("server")
    assert runtime.options["threads"] == 5 and "--threads" not in runtime.argv
    assert (
        "threads = 5                     # --threads: 6 cores here, less 1 for the campaign's own process"
        in out.read_text()
    )
    assert "llama.cpp threads: 5 (6 cores here, less 1 for the campaign's own process)" in result.output
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # no affinity: the machine's count
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    result = runner.invoke(app, ["new", "--runtime", "llamacpp", "--out", str(out), "--force"])
    assert result.exit_code == 0 and load_campaign(out).runtime("server").options["threads"] == 1  # never 0


def test_probe_takes_a_model_list_that_is_not_json_as_no_list() -> None:
    """mlx-lm's server answers /v1/models with an empty body when its Hugging Face cache
    folder does not exist: `campaign probe --model M` must still run, and without
    --model say to pass one, never "cannot reach"."""
    import httpx

    from cli.probe import _model_ids

    assert _model_ids(httpx.Response(200, content=b"")) == []
    assert _model_ids(httpx.Response(200, json={"data": "odd"})) == []
    assert _model_ids(httpx.Response(200, json={"data": [{"id": "m1"}, {"object": "model"}, {"id": "m2"}]})) == [
        "m1",
        "m2",
    ]


def test_probe_requests_the_name_the_runtime_serves_its_model_under(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlx-lm serves the model it loaded as "default_model" and tries to fetch any other
    name from the Hub: with `--runtime mlx-lm` and no --model, `campaign probe` asks for
    that name, not for the first id /v1/models lists (a cached Hub model). --model still
    wins, and a runtime with no such name takes the listed id."""
    import httpx

    import cli.probe as probe_cli
    from arms.runtimes import catalog as runtimes

    listed = httpx.MockTransport(lambda request: httpx.Response(200, json={"data": [{"id": "some/cached-hub-model"}]}))
    real_client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real_client(transport=listed, **kw))
    mlx_lm = runtimes.get("mlx-lm").dialect.request_model
    assert mlx_lm == "default_model"
    assert probe_cli._reachable_model("http://mlx", None, mlx_lm) == "default_model"
    assert probe_cli._reachable_model("http://mlx", "mine", mlx_lm) == "mine"
    assert (
        probe_cli._reachable_model("http://other", None, runtimes.get("llamacpp").dialect.request_model)
        == "some/cached-hub-model"
    )


def test_status_and_report_take_the_campaign_file_a_user_just_ran(tmp_path: Path) -> None:
    """`campaign status FILE` looks up the campaign the file names, as `run FILE` and
    `resume FILE` take it; a file without a name, or one that is not there, says so."""
    from campaign.store.store import Store
    from cli.app import UsageError

    def refused(args: list[str]) -> str:
        """What `main` prints after "error: " and exits 2 with."""
        result = runner.invoke(app, args)
        assert isinstance(result.exception, UsageError), (result.exception, result.output)
        return str(result.exception)

    db = tmp_path / "c.db"
    Store(f"sqlite:///{db}")  # a database with no campaign in it
    named = tmp_path / "mine.toml"
    named.write_text('[campaign]\nname = "mine"\n')
    for command in ("status", "report"):
        assert "no campaign named 'mine'" in refused([command, str(named), "--db", str(db)])
    nameless = tmp_path / "nameless.toml"
    nameless.write_text("[campaign]\n")
    assert "no [campaign] name" in refused(["status", str(nameless), "--db", str(db)])
    assert "absent.toml: cannot read the campaign's name" in refused(
        ["status", str(tmp_path / "absent.toml"), "--db", str(db)]
    )


def test_a_worker_started_with_sigint_ignored_takes_ctrl_c_back() -> None:
    """A background command of a shell without job control starts with SIGINT ignored;
    the worker, whose clean stop is Ctrl-C, restores Python's handler (and leaves a
    handler someone set alone)."""
    import signal

    from cli.worker import heed_ctrl_c

    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        heed_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

        def mine(*_: object) -> None: ...

        signal.signal(signal.SIGINT, mine)
        heed_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)
