"""The llm-d Benchmark Report export on a small store faked in memory: what was stored maps
where docs/benchmark-report.md says, nothing that was not stored is written (no zeros for
the unmeasured), and the schema check bites: a report missing a required field, or with a
field the schema does not have, is refused, and a refused report stops the export."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from arms.measures import RequestRecord
from campaign.store.tables import ArmRow, AttemptRow, CampaignRow, RequestRow, VerdictRow
from reports import benchmark_report as br

MS = 1_000_000  # ns
# the vendored file, byte for byte as upstream has it at commit 8bc9f1dd (reports/schemas/NOTICE.md)
SCHEMA_SHA256 = "a25aa28358485572fd0e91e10bec34e19d657ea1bf8b5a97a3aeae9a95e8984e"
BLOCK = "four/b0/abc"


def _record(ttft_ms: int, gaps_ms: list[int], prompt: int = 10) -> str:
    """A streamed request: a role chunk, then a token per event `gaps_ms` apart."""
    times = [ttft_ms * MS // 2, ttft_ms * MS]
    for gap in gaps_ms:
        times.append(times[-1] + gap * MS)
    record = RequestRecord(
        send_ns=0,
        end_ns=times[-1] + MS,
        status=200,
        event_ns=times,
        event_kind=["role"] + ["content"] * (len(times) - 1),
        event_tokens=[0] + [1] * (len(times) - 1),
        usage={"prompt_tokens": prompt, "completion_tokens": len(times) - 1},
    )
    return json.dumps(record.to_dict())


def _row(metric: str, value: float, unit: str, kind: str = "summary", scenario: str = "concurrency=2") -> dict:
    return {
        "arm_id": "A",
        "block_id": BLOCK,
        "item_key": "four",
        "repeat": 0,
        "attempt_id": 1,
        "probe_run_id": 11,
        "probe": "load",
        "scenario": scenario,
        "mode": "canonical",
        "context": 4096,
        "kind": kind,
        "metric": metric,
        "value": value,
        "unit": unit,
        "source": "",
        "settings_hash": "s1",
        "simulated": True,
    }


class FakeStore:
    """The five reads the export makes, from rows held in memory."""

    def __init__(self, rows: list[dict], requests: list[RequestRow]) -> None:
        self.rows, self.request_rows = rows, requests
        spec = {"gates": [{"id": "speed", "subjects": ["B"], "baseline": ["A"]}]}
        self.campaign = CampaignRow(id=1, name="demo", title="A demo", spec_json=json.dumps(spec))

    def campaigns(self) -> list[CampaignRow]:
        return [self.campaign]

    def measurements_frame(self, campaign_id: int) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def attempts(self, campaign_id: int) -> list[AttemptRow]:
        ident = {"served_models": ["m-q4"], "fingerprint": "f00d", "runtime_version": "sim build 7"}
        return [
            AttemptRow(
                id=1,
                campaign_id=1,
                item_key="four",
                arm_id="A",
                number=1,
                state="done",
                started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                ended_at=datetime(2026, 1, 2, 3, 4, 15, tzinfo=UTC),
                identity_json=json.dumps(ident),
                overrides_json=json.dumps({"concurrency": 2, "workload": "synthetic"}),
                block_id=BLOCK,
                recipe_hash="r1",
                host="box",
            )
        ]

    def arms(self, campaign_id: int) -> list[ArmRow]:
        return [
            ArmRow(
                id=1,
                campaign_id=1,
                arm_id="A",
                model="m",
                quant="q4",
                bits_per_weight=4.5,
                runtime="sim",
                adapter="simulator",
                context=4096,
                klass="default",
                group="g",
                recipe_json='{"slots": 1}',
                simulated=True,
            )
        ]

    def requests(self, probe_run_ids: Iterable[int]) -> list[RequestRow]:
        wanted = set(probe_run_ids)
        return [r for r in self.request_rows if r.probe_run_id in wanted]

    def latest_verdicts(self, campaign_id: int) -> dict[str, VerdictRow]:
        evidence = {"cells": [{"arm": "A", "role": "baseline", "metric": "ttft_s", "median": 0.2, "low": 0.1}]}
        return {
            "speed": VerdictRow(
                campaign_id=1, gate_id="speed", verdict="fail", reason="B no faster", evidence_json=json.dumps(evidence)
            )
        }


def _requests() -> list[RequestRow]:
    def row(raw: str, ok: bool = True) -> RequestRow:
        return RequestRow(probe_run_id=11, scenario="concurrency=2", mode="canonical", ok=ok, raw_json=raw)

    return [
        row(_record(100, [10, 10], prompt=10)),
        row(_record(200, [20, 20, 20], prompt=12)),
        row(_record(400, [30], prompt=14)),
        row(json.dumps(RequestRecord(send_ns=0, error="HTTP 500").to_dict()), ok=False),
    ]


def _stored() -> FakeStore:
    rows = [
        _row("requests", 4, "requests"),
        _row("requests_failed", 1, "requests"),
        _row("output_tps", 42.0, "tok/s"),
        _row("concurrency", 2, "clients"),
        _row("accel_power_limit_w", 400, "W", scenario="telemetry")
        | {"source": "Fake GPU (simulated, 200 W limit); Fake GPU (simulated, 200 W limit)"},
    ]
    return FakeStore(rows, _requests())


def test_the_vendored_schema_is_the_upstream_file_unchanged() -> None:
    assert hashlib.sha256(br.SCHEMA_PATH.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert (br.SCHEMA_PATH.parent / "NOTICE.md").is_file()


def test_a_run_maps_to_one_valid_report_with_what_was_stored() -> None:
    [(stem, report)] = br.reports(_stored(), 1)
    assert stem == "A__four_b0_abc"
    br.validate(report)
    assert report["run"]["uid"] == f"demo/A/{BLOCK}" and report["run"]["eid"] == "demo"
    assert report["run"]["time"]["duration"] == "PT10.000S"
    [engine] = report["scenario"]["stack"]
    std = engine["standardized"]
    assert (std["kind"], std["tool"], std["tool_version"], std["model"]) == (
        "inference_engine",
        "simulator",
        "sim build 7",
        {"name": "m"},
    )
    assert std["accelerator"]["model"] == "Fake GPU" and std["accelerator"]["count"] == 2
    assert engine["native"]["args"] == {"slots": 1} and engine["native"]["config"]["served_models"] == ["m-q4"]
    load = report["scenario"]["load"]["standardized"]
    assert load["source"] == "random" and load["concurrency"] == 2
    assert load["input_seq_len"]["distribution"] == "other" and load["input_seq_len"]["value"] == 12
    agg = report["results"]["request_performance"]["aggregate"]
    assert agg["requests"]["total"] == 4 and agg["requests"]["failures"] == 1
    ttft = agg["latency"]["time_to_first_token"]
    assert ttft["units"] == "s" and ttft["mean"] == pytest.approx(0.7 / 3)
    assert (ttft["min"], ttft["p50"], ttft["max"]) == pytest.approx((0.1, 0.2, 0.4))
    assert ttft["p90"] == pytest.approx(0.36)  # linear between 0.2 and 0.4
    assert agg["latency"]["inter_token_latency"]["max"] == pytest.approx(0.03)
    assert agg["throughput"] == {"output_token_rate": {"units": "tokens/s", "mean": 42.0}}  # no request rate stored
    ours = report["results"]["observability"][br.METADATA_KEY]
    assert (ours["campaign"], ours["arm"], ours["block"], ours["attempts"]) == ("demo", "A", BLOCK, [1])
    [verdict] = ours["verdicts"]
    assert (verdict["gate"], verdict["verdict"], verdict["role"]) == ("speed", "fail", "baseline")
    assert verdict["intervals"] == [{"metric": "ttft_s", "median": 0.2, "low": 0.1}]


def test_what_was_not_stored_is_left_out_never_zero() -> None:
    """No request records: the tally and the per-request sample rows stand in; ITL (only in
    the records) and throughput (not stored) are absent, not 0; no telemetry: the server is
    a generic component that says its accelerator was not measured (an inference engine
    would need a model and a count nobody read)."""
    rows = [
        _row("requests", 3, "requests"),
        _row("requests_failed", 0, "requests"),
        *(_row("ttft_s", v, "s", kind="sample") for v in (0.1, 0.3, 0.2)),
    ]
    [(_, report)] = br.reports(FakeStore(rows, []), 1)
    agg = report["results"]["request_performance"]["aggregate"]
    assert agg["requests"] == {"total": 3, "failures": 0}
    assert set(agg["latency"]) == {"time_to_first_token"}
    assert agg["latency"]["time_to_first_token"]["p50"] == pytest.approx(0.2)
    assert "throughput" not in agg
    assert "load" not in report["scenario"]  # its input length is required and was not reported
    engine = report["scenario"]["stack"][0]["standardized"]
    assert engine["kind"] == "generic" and engine["accelerator"] == "not measured on this machine"
    assert br.stats([], "s") is None and br.stats([None, float("nan")], "s") is None
    assert "stddev" not in (br.stats([0.5], "s") or {})


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda r: r["run"].pop("uid"), "run"),
        (lambda r: r.pop("results") and None, "(the report)"),
        (lambda r: r["scenario"]["stack"][0]["standardized"].pop("accelerator"), "scenario/stack/0"),
        (lambda r: r["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"].pop("mean"), ""),
        (lambda r: r["results"]["request_performance"]["aggregate"]["requests"].update(total=-1), ""),
        (lambda r: r["run"].update(note="free text"), "run"),  # additionalProperties: false
        (
            lambda r: r["results"]["request_performance"]["aggregate"]["throughput"]["output_token_rate"].update(
                units="tok/s"
            ),
            "",
        ),
    ],
    ids=[
        "no run uid",
        "no results",
        "no accelerator",
        "statistics without mean",
        "negative total",
        "extra field",
        "unit not in the enum",
    ],
)
def test_a_report_the_schema_refuses_raises(change: Any, where: str) -> None:
    [(_, report)] = br.reports(_stored(), 1)
    broken = copy.deepcopy(report)
    change(broken)
    with pytest.raises(br.ReportInvalid, match="fails its schema at") as raised:
        br.validate(broken)
    assert where in str(raised.value)


def test_an_invalid_report_stops_the_export_before_any_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    build = br.build

    def missing_run(*args: Any) -> dict[str, Any]:
        report = build(*args)
        del report["run"]
        return report

    monkeypatch.setattr(br, "build", missing_run)
    with pytest.raises(br.ReportInvalid, match="'run' is a required property"):
        br.write_reports(_stored(), 1, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_write_reports_writes_one_json_file_per_run(tmp_path: Path) -> None:
    [path] = br.write_reports(_stored(), 1, tmp_path)
    assert path == tmp_path / "A__four_b0_abc.json"
    br.validate(json.loads(path.read_text(encoding="utf-8")))
