"""`campaign probe URL`: summary, JSON records per conversation turn, and exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from arms.server import free_port
from tests.simproc import simulator

pytestmark = pytest.mark.integration


def campaign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=300)


def test_agent_load_json_and_exit_0(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    with simulator(tmp_path, slots=2, prefill_tps=20000.0, decode_tps=300.0, faults={"error_5xx_every": 7}) as url:
        proc = campaign(
            "probe",
            url,
            "--probe",
            "agent-load",
            "--conversations",
            "3",
            "--turns",
            "4",
            "--system-tokens",
            "50",
            "--task-tokens",
            "80",
            "--turn-tokens",
            "40",
            "--max-tokens",
            "8",
            "--runtime",
            "simulator",
            "--json",
            str(out),
        )
    assert proc.returncode == 0, proc.stderr  # some requests succeeded
    assert "TTFT per turn" in proc.stdout
    assert "failed requests by kind" in proc.stdout and "HTTP 503" in proc.stdout  # counted by kind
    doc = json.loads(out.read_text())
    load = [t for t in doc["turns"] if t["phase"] == "load"]
    assert {"conversation", "turn", "ttft_s"} <= set(load[0])
    assert len({t["conversation"] for t in load}) == 3
    assert doc["requests"] and doc["measurements"]


def test_bad_arguments_exit_2_and_unreachable_exit_1(tmp_path: Path) -> None:
    proc = campaign("probe", "http://127.0.0.1:9", "--probe", "warp-drive")
    assert proc.returncode == 2 and "expected one of" in proc.stderr
    proc = campaign("probe", "http://127.0.0.1:9", "--probe", "decode", "--conversations", "3")
    assert proc.returncode == 2 and "--conversations" in proc.stderr
    proc = campaign("probe", "http://127.0.0.1:9", "--probe", "decode", "--read-timeout", "0")
    assert proc.returncode == 2 and "--read-timeout" in proc.stderr
    proc = campaign("probe", f"http://127.0.0.1:{free_port()}", "--probe", "decode")
    assert proc.returncode == 1 and "cannot reach" in proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout


DECODE = ("--probe", "decode", "--context", "512", "--max-tokens", "8", "--runtime", "simulator")


def test_no_request_succeeded_is_exit_1_with_errors_counted_by_kind(tmp_path: Path) -> None:
    with simulator(tmp_path, prefill_tps=20000.0, decode_tps=300.0, faults={"error_5xx_every": 1}) as url:
        proc = campaign("probe", url, *DECODE, "--repeats", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 requests, 0 ok, 3 failed" in proc.stdout  # a warm-up and two timed trials
    assert re.search(r"HTTP 503\W+3\W", proc.stdout)  # one row for the kind, with its count
    assert "no request of decode succeeded" in proc.stdout
    assert " errors " not in proc.stdout  # no "errors ... median 1" among the metrics


def test_stalling_server_stops_the_probe_after_two_stalls(tmp_path: Path) -> None:
    out = tmp_path / "stall.json"
    with simulator(
        tmp_path, prefill_tps=20000.0, decode_tps=300.0, faults={"stall_every": 1, "stall_after_tokens": 2}
    ) as url:
        proc = campaign("probe", url, *DECODE, "--repeats", "3", "--read-timeout", "1", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "4 requests, 0 ok, 2 failed, 2 not run" in proc.stdout
    assert "stopped after 2 consecutive stalls" in proc.stdout and "read timeout" in proc.stdout
    # two requests stalled and two were never sent: the stop, not the wall time (a busy
    # machine stretches any wall time), is what shows the probe did not wait on every stall
    doc = json.loads(out.read_text())
    assert [r["error"].split(":")[0] for r in doc["requests"]] == ["timeout", "timeout", "not run", "not run"]


LOAD = ("--probe", "load", "--runtime", "simulator", "--prompt-tokens", "50", "--max-tokens", "8")


def test_load_profiles_write_the_curve_and_goodput(tmp_path: Path) -> None:
    """`--profile constant`, `--profile concurrent` and `--profile sweep` against the
    simulator: the JSON carries the metrics the issue names, the sweep its maximum goodput."""
    out = {name: tmp_path / f"{name}.json" for name in ("constant", "concurrent", "sweep")}
    with simulator(tmp_path, slots=2, prefill_tps=20000.0, decode_tps=200.0) as url:
        constant = campaign(
            "probe",
            url,
            *LOAD,
            "--profile",
            "constant",
            "--rate",
            "4",
            "--duration",
            "2",
            "--target",
            "ttft_s=2.0",
            "--target",
            "tpot_s=0.2",
            "--json",
            str(out["constant"]),
        )
        concurrent = campaign(
            "probe",
            url,
            *LOAD,
            "--profile",
            "concurrent",
            "--concurrency",
            "3",
            "--requests",
            "9",
            "--json",
            str(out["concurrent"]),
        )
        sweep = campaign(
            "probe",
            url,
            *LOAD,
            "--profile",
            "sweep",
            "--duration",
            "1.5",
            "--rates",
            "2",
            "--max-concurrency",
            "4",
            "--target",
            "ttft_s=2.0",
            "--target",
            "tpot_s=0.2",
            "--json",
            str(out["sweep"]),
        )
    for proc in (constant, concurrent, sweep):
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rate=4" in constant.stdout and "goodput" in constant.stdout
    doc = json.loads(out["constant"].read_text())
    metrics = {m["metric"] for m in doc["measurements"]}
    assert {"goodput_rps", "request_throughput_rps", "output_tps", "ttft_p99_s", "tpot_p99_s", "error_rate"} <= metrics
    assert {"schedule_lag_p99_s", "schedule_lag_s", "ttft_s", "tpot_s", "e2e_s"} <= metrics
    assert doc["curve"][0]["scenario"] == "rate=4" and doc["curve"][0]["offered_rps"] == pytest.approx(4.0)
    assert all(r["scheduled_ns"] for r in doc["requests"])
    assert len(json.loads(out["concurrent"].read_text())["requests"]) == 9
    swept = json.loads(out["sweep"].read_text())
    assert "max_goodput_rps" in {m["metric"] for m in swept["measurements"]}
    assert swept["sweep"][0]["max_goodput_rps"] > 0 and "max goodput" in sweep.stdout
    skipped = next(m["value"] for m in swept["measurements"] if m["metric"] == "sweep_rates_skipped")
    assert [r["scenario"] for r in swept["curve"]][0] == "synchronous" and len(
        swept["curve"]
    ) + skipped == 4  # stopped at saturation, or not


def test_bad_load_parameters_exit_2_with_the_reason() -> None:
    url = "http://127.0.0.1:9"  # never reached: arguments are checked first
    cases = {
        ("--profile", "constant", "--rate", "-2"): "--rate",
        ("--profile", "sweep"): "a sweep needs latency targets",
        ("--profile", "sweep", "--target", "tpot_s=0.2"): "ttft_s or e2e_s",
        ("--profile", "constant"): "needs a rate",
        ("--target", "ttft_s"): "expected NAME=SECONDS",
        ("--target", "latency=2"): "--target",
    }
    for args, needle in cases.items():
        proc = campaign("probe", url, "--probe", "load", *args)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
    proc = campaign("probe", url, "--probe", "decode", "--rate", "2")
    assert proc.returncode == 2 and "--rate" in proc.stderr  # load flags do not apply to other probes
