"""The energy example end to end on the simulator: telemetry read around every probe run
through the simulator's device, the gate decided over blocks, and the pages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.integration
@pytest.mark.cpu_bound
def test_energy_example_decides_on_energy_per_token_and_shows_it(
    tmp_path: Path, examples: Path, prefect_harness: None
) -> None:
    """examples/energy.toml: 4 slots under 4 clients spend less energy per output token than
    1 slot (the simulator's power model shares each step's fixed draw over the batch), and
    the gate says so with an interval over 3 blocks; every probe run stored its energy,
    idle power, memory and power series; the front page has the energy table and both
    charts, the arm page the power over each run. About 40 s."""
    from campaign.store.store import Store
    from flows.campaign_flow import campaign_flow
    from reports.site import write_site

    store = Store(f"sqlite:///{tmp_path / 'energy.db'}")
    result = campaign_flow(str(examples / "energy.toml"), store.url, str(tmp_path / "work"))
    assert set(result["items"].values()) == {"done"}
    frame = store.measurements_frame(1)
    tel = frame[frame["scenario"] == "telemetry"]
    per_run = tel.groupby(["arm_id", "metric"])["value"].count()
    for arm in ("A", "B"):
        for metric in ("energy_j", "energy_per_output_token_j", "energy_per_output_token_net_j", "power_idle_w"):
            assert per_run[(arm, metric)] == 3, per_run  # one per block
    # telemetry rows sit at the probe's own context, beside its other rows
    assert set(tel["context"]) == set(frame.loc[frame["scenario"] != "telemetry", "context"])
    idle = tel[tel["metric"] == "power_idle_w"]["value"]
    assert ((idle > 55) & (idle < 65)).all(), idle  # the fixture's 60 W, read through the counter
    verdict = store.latest_verdicts(1)["energy"]
    assert verdict.verdict == "pass", verdict.reason
    assert "energy_per_output_token_j: B" in verdict.reason and "paired over 3 blocks" in verdict.reason
    samples = store.samples(sorted({int(r) for r in tel["probe_run_id"]}))
    assert {s.series for s in samples} >= {"power_w", "accel_mem_bytes"}
    index = write_site(store, "energy", tmp_path / "site").read_text()
    assert 'id="energy"' in index and "energy-per-token" in index and "energy-front" in index
    assert "B · load (front)" in index  # 4 slots: less energy per token and more throughput
    arm = (tmp_path / "site" / "arms" / "b.html").read_text()
    assert "Power during each probe run" in arm and 'id="telemetry-none"' not in arm
