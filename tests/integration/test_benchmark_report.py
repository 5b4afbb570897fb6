"""`campaign export --format benchmark-report` on a real campaign (examples/energy.toml on
the simulator): one llm-d Benchmark Report per server run, each valid against the vendored
schema when checked here on its own, carrying the runtime, its version and the model, TTFT
statistics equal to those of the stored request records (and to the probe's own summary
percentiles), and the energy gate's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.paths import ROOT

SCHEMA = ROOT / "reports" / "schemas" / "br_v0_2_1_json_schema.json"
TOKEN_EVENTS = {"content", "reasoning", "tool"}


def _ttft_s(raw: dict) -> float | None:
    """Send to the first event that carries a token, from a request row's raw record."""
    for t, kind in zip(raw["event_ns"], raw["event_kind"]):
        if kind in TOKEN_EVENTS:
            return (t - raw["send_ns"]) / 1e9
    return None


@pytest.mark.integration
def test_energy_campaign_exports_one_valid_report_per_server_run(
    tmp_path: Path, examples: Path, prefect_harness: None
) -> None:
    """About 40 s: the campaign, then the export of its 2 arms x 3 blocks."""
    from campaign.store.store import Store
    from flows.campaign_flow import campaign_flow
    from reports.export import export

    store = Store(f"sqlite:///{tmp_path / 'energy.db'}")
    result = campaign_flow(str(examples / "energy.toml"), store.url, str(tmp_path / "work"))
    assert set(result["items"].values()) == {"done"}
    paths = export(store, 1, tmp_path / "br", "benchmark-report")

    frame = store.measurements_frame(1)
    runs = set(zip(frame["arm_id"], frame["block_id"]))
    assert len(runs) == 6 and len(paths) == 6 and {p.suffix for p in paths} == {".json"}
    assert sorted(p.name for p in (tmp_path / "br").iterdir()) == sorted(p.name for p in paths)

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    seen = set()
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(report)]
        assert errors == [], path.name
        ours = report["results"]["observability"]["llm_campaign"]
        seen.add((ours["arm"], ours["block"]))
        assert report["run"]["uid"] == f"energy/{ours['arm']}/{ours['block']}"

        [engine] = report["scenario"]["stack"]
        std = engine["standardized"]
        assert std["kind"] == "inference_engine" and std["tool"] == "simulator"
        assert std["tool_version"] == "simulator build 1"  # the simulator's /v1/models, as identity recorded it
        assert std["model"]["name"] == "chat-8b" and engine["native"]["config"]["served_models"] == ["chat-8b-q4"]
        assert engine["native"]["args"]["slots"] == {"A": 1, "B": 4}[ours["arm"]]

        rows = store.requests(ours["probe_runs"])
        raws = [json.loads(r.raw_json) for r in rows if r.ok]
        ttfts = np.array([t for t in map(_ttft_s, raws) if t is not None])
        agg = report["results"]["request_performance"]["aggregate"]
        assert agg["requests"]["total"] == len(rows) == 24 and agg["requests"]["failures"] == 0
        ttft = agg["latency"]["time_to_first_token"]
        assert ttft["units"] == "s"
        expected = {
            "mean": ttfts.mean(),
            "min": ttfts.min(),
            "max": ttfts.max(),
            **{f"p{q}": np.percentile(ttfts, q) for q in (50, 90, 99)},
        }
        assert {k: ttft[k] for k in expected} == pytest.approx(expected, rel=1e-9, abs=1e-12)
        run = frame[(frame["arm_id"] == ours["arm"]) & (frame["block_id"] == ours["block"])]
        for q in ("p50", "p90", "p99"):  # the probe's own summary rows say the same
            [summary] = run.loc[run["metric"] == f"ttft_{q}_s", "value"]
            assert ttft[q] == pytest.approx(summary, rel=1e-9)

        [verdict] = [v for v in ours["verdicts"] if v["gate"] == "energy"]
        stored = store.latest_verdicts(1)["energy"]
        assert (verdict["verdict"], verdict["reason"]) == (stored.verdict, stored.reason)
        assert verdict["role"] == {"A": "baseline", "B": "subject"}[ours["arm"]]
        assert verdict["intervals"] and verdict["intervals"][0]["metric"] == "energy_per_output_token_j"
    assert seen == runs
