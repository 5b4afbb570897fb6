"""End to end through Prefect: a small campaign on the simulator, verdicts checked against
the stored numbers, a blocked arm, and no server left running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.core.processes import group_alive
from campaign.core.states import AttemptState, ItemState, Verdict
from campaign.store.store import Store
from tests.campaigns import arm, campaign_file, gate, item, model, sim

pytestmark = pytest.mark.integration

ARMS = [
    arm("B", context=4096, recipe={"slots": 2, "prefix_cache": "1G"}),
    arm("C", context=4096, recipe={"slots": 2, "prefix_cache": "1G", "speculative": True, "draft_k": 4}),
    arm("O", runtime="ane", context=4096),
]
RUNTIMES = [
    sim(decode_tps=100.0),
    {
        "name": "ane",
        "adapter": "simulator",
        "options": {"profile": {"faults": {"refuse_start": "Private ANE procedure-bank compiler is unavailable"}}},
    },
]
ANE_GATE = gate("ane", "relative_improvement", {"metric": "decode_tps", "min_gain": 0.0}, ["O"], ["B"])
ANE_ITEMS = [
    item("ane", ["O"], ["decode"], title="ANE", gate="ane"),
    item("after-ane", ["B"], ["decode"], title="needs ANE", depends_on=["ane"]),
]


def e2e_campaign(name: str = "e2e", full: bool = True) -> str:
    """B, C (B with speculation) and O (on a runtime whose start is refused): in full, a
    speculation gate over cache-probe and decode, a cache gate, and the ANE gate with an
    item behind it; otherwise the ANE part alone."""
    gates = [
        gate(
            "spec", "relative_improvement", {"metric": "decode_tps", "probe": "decode", "min_gain": 0.10}, ["C"], ["B"]
        ),
        gate("cache", "threshold", {"metric": "reuse", "op": ">=", "value": 0.95, "scenarios": ["identical"]}, ["B"]),
    ]
    queue = [
        item(
            "probe",
            ["B", "C"],
            ["cache-probe", "decode"],
            title="cache-probe + decode B/C",
            contexts=[1024],
            modes=["canonical", "greedy"],
            gate="spec",
            repeats=3,
            overrides={"repeats": 3},
        ),
        item(
            "cache",
            ["B"],
            ["cache-probe"],
            title="cache gate",
            gate="cache",
            depends_on=["probe"],
            repeats=3,
            overrides={"prompt_tokens": 256, "repeats": 3},
        ),
    ]
    return campaign_file(
        name,
        default_max_tokens=24,
        models=[model(served_id="m-q4")],
        runtimes=RUNTIMES,
        arms=ARMS,
        gates=(gates if full else []) + [ANE_GATE],
        queue=(queue if full else []) + ANE_ITEMS,
    )


CAMPAIGN = e2e_campaign()


def test_campaign_end_to_end(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow
    from gates.cells import Selector
    from gates.compare import compare
    from gates.rigor import Rigor

    path = tmp_path / "e2e.toml"
    path.write_text(CAMPAIGN)
    store = Store(f"sqlite:///{tmp_path / 'e2e.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "work"))

    assert result["items"] == {"probe": "done", "cache": "done", "ane": "blocked", "after-ane": "pending"}
    camp = store.campaign("e2e")
    items = {i.key: i for i in store.items(camp.id)}
    assert items["ane"].reason == "O: Private ANE procedure-bank compiler is unavailable"
    assert items["after-ane"].reason == "waiting on 'ane' (blocked)"

    verdicts = store.latest_verdicts(camp.id)
    assert verdicts["ane"].verdict == Verdict.BLOCKED
    assert "Private ANE procedure-bank compiler is unavailable" in verdicts["ane"].reason

    # the spec verdict is what the stored canonical numbers say, not something written in
    frame = store.measurements_frame(camp.id)
    canonical = frame[frame["mode"] == "canonical"]
    outcome = compare(
        canonical,
        ["C"],
        ["B"],
        Selector(metric="decode_tps", probe="decode"),
        higher_is_better=True,
        threshold=0.10,
        rigor=Rigor(),
    )
    (cmp,) = outcome.comparisons  # one cell: decode at 1024, 3 trials a side
    assert cmp.subject.n == cmp.baseline.n == 3
    expected = Verdict.PASS if cmp.low >= 0.10 else (Verdict.FAIL if cmp.high < 0.10 else Verdict.INCONCLUSIVE)
    assert verdicts["spec"].verdict == expected == Verdict.PASS  # speculation at 0.8 acceptance wins, interval and all
    # the campaign's two claims (this gain and a bound) are one Holm family, and the reason says so
    assert verdicts["spec"].reason == f"{outcome.text()}; family of 2 gates, Holm"

    # greedy rows were measured and stored, but the verdict used canonical only
    assert set(frame["mode"]) == {"canonical", "greedy"}
    reuse = frame[(frame["metric"] == "reuse") & (frame["scenario"] == "identical")]
    assert (reuse["value"] > 0.95).all()
    assert verdicts["cache"].verdict == Verdict.PASS
    cold = frame[(frame["metric"] == "reuse") & (frame["scenario"] == "cold")]
    assert (cold["value"] < 0.1).all()
    sources = set(frame[frame["metric"] == "cached_tokens"]["source"])
    assert sources == {"usage.prompt_tokens_details.cached_tokens"}
    assert frame["simulated"].all()

    # identity recorded, servers gone
    attempts = store.attempts(camp.id)
    done = [a for a in attempts if a.state == AttemptState.DONE]
    assert done and all(a.served_model == "m-q4" and len(a.fingerprint) == 16 for a in done)
    assert len({a.fingerprint for a in done}) == 1
    for att in attempts:
        if att.server_pgid:
            assert not group_alive(att.server_pgid), f"server of attempt {att.id} still running"

    # running again is a no-op for finished items: no new attempts, no duplicate rows
    before = len(store.measurements_frame(camp.id, latest_only=False))
    campaign_flow(str(path), store.url, str(tmp_path / "work"))
    assert len(store.measurements_frame(camp.id, latest_only=False)) == before
    assert [i.state for i in store.items(camp.id)] == [
        ItemState.DONE,
        ItemState.DONE,
        ItemState.BLOCKED,
        ItemState.PENDING,
    ]

    # the report lists every gate and every queue item
    from reports.site import write_site

    index = write_site(store, "e2e", tmp_path / "site")
    html = index.read_text()
    for gate_id in ("spec", "cache", "ane"):
        assert f"gates/{gate_id}.html" in html
    for title in ("cache-probe + decode B/C", "cache gate", "ANE", "needs ANE"):
        assert title in html


def test_the_prefect_ui_holds_the_queue_and_the_campaign_log(tmp_path: Path, prefect_harness: None) -> None:
    """What the README sends a user to in the Prefect UI: the campaign's flow run, its log
    (items started and finished, verdicts) and the queue as a table artifact that lists
    every item, the ones not yet started (waiting on a blocked one) too."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    from flows.artifacts import artifact_key
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "ui.toml"
    path.write_text(e2e_campaign("ui-view", full=False))
    store = Store(f"sqlite:///{tmp_path / 'ui.db'}")
    with temporary_settings(updates={PREFECT_LOGGING_TO_API_ENABLED: True}):
        campaign_flow(str(path), store.url, str(tmp_path / "work"))
        APILogHandler().flush()

    async def read() -> tuple[list, list]:
        async with get_client() as client:
            versions = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key("ui-view", "queue")]))
            )
            assert (
                versions and len({v.flow_run_id for v in versions}) == 1
            )  # each update linked from the campaign's flow run
            artifact = max(versions, key=lambda v: v.created)
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[artifact.flow_run_id]))
            )
            run = await client.read_flow_run(artifact.flow_run_id)
            assert run.name == "ui-view"  # named after the campaign, not its file
            return artifact.data, [log.message for log in logs]

    table, messages = asyncio.run(read())
    rows = table if isinstance(table, list) else json.loads(table)
    assert [(r["item"], r["state"]) for r in rows] == [("ANE", "blocked"), ("needs ANE", "pending")]
    assert any(m.startswith("campaign ui-view: 2 queue items") for m in messages), messages
    assert any(m.startswith("item ane blocked") for m in messages), messages
    assert any(m.startswith("gate ane: blocked") for m in messages), messages
