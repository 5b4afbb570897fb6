"""The metric catalogue (`campaign.core.metrics`) is what the probes store, and the loader holds
gates to it: an unknown or misspelled metric, a metric the gate's items never produce, or
one its named probe does not store is refused before anything runs; a gate takes its
direction from the metric unless it sets one, and a direction set against it is warned of."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from campaign.core import metrics
from campaign.core.schema import CampaignFileError
from tests.campaigns import arm, campaign_file, gate, inline, item, table
from tests.paths import DOCS

# -- every probe on the simulator stores only catalogued metrics, in their units ----------------


async def _everything_probes_store() -> dict[str, dict[str, str]]:
    """probe -> {metric: unit} from one short run of every probe against an in-process simulator."""
    from aiohttp import web

    from arms.probes import agent_load, cache_ceiling, cache_probe, decode, load, tool_loop
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import catalog as runtimes
    from arms.simulator.app import make_app
    from arms.simulator.profile import SimProfile

    profile = SimProfile(prefill_tps=50000.0, decode_tps=2000.0, time_scale=20.0, slots=4, prefix_cache_tokens=200000)
    runner = web.AppRunner(make_app(profile))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target = ProbeTarget.speaking(
        runtimes.get("simulator"),
        base_url=f"http://127.0.0.1:{port}",
        model="sim-model",
        sampling={"temperature": 1.0},
        simulated=True,
    )
    jobs = {
        "cache-probe": (cache_probe.run, cache_probe.CacheProbeParams(prompt_tokens=400)),
        "decode": (decode.run, decode.DecodeParams(contexts=[1024], max_tokens=16)),
        "tool-loop": (tool_loop.run, tool_loop.ToolLoopParams(trials=2)),
        "agent-load": (agent_load.run, agent_load.AgentLoadParams(conversations=2, turns=3)),
        "cache-ceiling": (cache_ceiling.run, cache_ceiling.CacheCeilingParams()),
        "load": (
            load.run,
            load.LoadParams(
                profile="sweep",
                duration_s=1.0,
                rates=2,
                max_concurrency=4,
                targets={"ttft_s": 1.0, "tpot_s": 0.1},
                conversations=2,
                turns=3,
            ),
        ),
    }
    stored: dict[str, dict[str, str]] = {}
    try:
        for name, (run, params) in jobs.items():
            sink = MemorySink()
            await run(target, sink, params)
            stored[name] = {m["metric"]: m.get("unit", "") for m in sink.measurements}
    finally:
        await runner.cleanup()
    return stored


def test_directions_follow_the_units_and_the_meaning() -> None:
    for m in metrics.METRICS.values():
        if m.unit == "s" and m.name not in (
            "window_s",
            "span_s",
            "sweep_time_saved_s",
            "steady_window_s",
        ):  # bookkeeping
            assert m.higher_is_better is False, m  # seconds: lower is better
        if m.unit in ("tok/s", "req/s") and m.name not in ("offered_rps", "rate_rps", "decode_tps_spread"):
            assert m.higher_is_better is True, m
        assert m.probes and set(m.probes) <= set(metrics.ALL_PROBES), m
        assert m.meaning and m.meaning == m.meaning.strip(), m
    assert metrics.direction("reuse") is True and metrics.direction("error_rate") is False
    assert metrics.direction("ttft_growth_ratio") is False and metrics.direction("warm_speedup") is True
    assert metrics.direction("requests") is None and metrics.direction("no_such_metric") is None
    assert metrics.suggest("tfft_s") == " (did you mean ttft_s?)" or "ttft_s" in metrics.suggest("tfft_s")
    assert metrics.suggest("zzzz") == ""


# -- the loader holds gates to it ------------------------------------------------------------------


def head(context: int = 32768, **item_fields: object) -> str:
    """Two arms under agent-load, in an item feeding gate "g" (which `gate_toml` writes)."""
    return campaign_file(
        "m",
        runtimes=[{"name": "sim", "adapter": "simulator"}],
        arms=[arm("A", context=context), arm("B", context=context)],
        queue=[item("agent", ["A", "B"], ["agent-load"], gate="g", **item_fields)],
    )


HEAD = head()


def _load(tmp_path: Path, gate: str):  # type: ignore[no-untyped-def]
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(HEAD + textwrap.dedent(gate))
    return load_campaign(path)


def _problems(tmp_path: Path, gate: str) -> list[str]:
    with pytest.raises(CampaignFileError) as info:
        _load(tmp_path, gate)
    return info.value.problems


def gate_toml(params: str) -> str:
    """Gate "g": B against A by relative_improvement, with `params` as written."""
    return table("gates", gate("g", "relative_improvement", inline(params), ["B"], ["A"]))


def test_a_misspelled_metric_is_refused_with_the_name_it_meant(tmp_path: Path) -> None:
    (msg,) = _problems(tmp_path, gate_toml('metric = "tfft_s", min_gain = 0.3'))
    assert msg.startswith(
        "gates[0] (id 'g').params.metric: found 'tfft_s', a metric no probe stores (did you mean ttft_s"
    )


def test_a_metric_no_item_of_the_gate_produces_is_refused_naming_its_probes(tmp_path: Path) -> None:
    (msg,) = _problems(tmp_path, gate_toml('metric = "reuse", min_gain = 0.3'))
    assert msg == (
        "gates[0] (id 'g').params.metric: 'reuse' comes from cache-probe, cache-ceiling, and no queue item this gate "
        "reads runs one (they run agent-load); add the probe to an item that feeds 'g'"
    )


def test_a_probe_that_does_not_store_the_metric_is_refused(tmp_path: Path) -> None:
    (msg,) = _problems(tmp_path, gate_toml('metric = "ttft_s", probe = "cache-ceiling", min_gain = 0.3'))
    assert msg.startswith(
        "gates[0] (id 'g').params.metric: probe 'cache-ceiling' does not store 'ttft_s'; it comes from "
    )


def test_an_also_metric_is_checked_too(tmp_path: Path) -> None:
    (msg,) = _problems(tmp_path, gate_toml('metric = "ttft_s", min_gain = 0.3, also_metric = "e2e_sec"'))
    assert msg.startswith("gates[0] (id 'g').params.also_metric: found 'e2e_sec'")


def test_a_gate_on_seconds_reads_lower_as_better_unless_it_says_otherwise(tmp_path: Path) -> None:
    from flows.design_warnings import direction_warnings
    from gates.engine import params_for

    spec = _load(tmp_path, gate_toml('metric = "ttft_s", min_gain = 0.3'))
    assert params_for(spec.gate("g"))["higher_is_better"] is False
    assert direction_warnings(spec) == []
    contrary = _load(tmp_path, gate_toml('metric = "ttft_s", min_gain = 0.3, higher_is_better = true'))
    assert params_for(contrary.gate("g"))["higher_is_better"] is True  # what the file says, warned of
    (warning,) = direction_warnings(contrary)
    assert re.match(
        r"gates\[0\] \(id 'g'\)\.params\.higher_is_better: set to true for 'ttft_s' \(s\), whose catalogue "
        r"direction is lower is better",
        warning,
    ), warning


def test_a_ttft_gate_without_a_direction_decides_the_right_way() -> None:
    """The bug the catalogue closes: TTFT 96% lower read as "needs +30% or more"."""
    import pandas as pd

    from campaign.core.schema import GateEntry
    from gates.engine import evaluate

    rows = []
    for block in range(4):
        for arm_id, ttft in (("A", 2.0), ("B", 0.08)):
            for trial in range(3):
                rows.append(
                    dict(
                        arm_id=arm_id,
                        probe="agent-load",
                        scenario="c0-t1",
                        mode="canonical",
                        context=8192,
                        trial=trial,
                        metric="ttft_s",
                        value=ttft * (1 + 0.01 * block + 0.001 * trial),
                        unit="s",
                        repeat=block,
                        block_id=f"agent/b{block}/x",
                        item_key="agent",
                        attempt_id=10 * block + (arm_id == "B"),
                    )
                )
    gate = GateEntry(
        id="g",
        predicate="relative_improvement",
        subjects=["B"],
        baseline=["A"],
        params={"metric": "ttft_s", "min_gain": 0.3},
    )
    result = evaluate(gate, pd.DataFrame(rows))
    assert result.verdict == "pass", result.reason
    assert "needs -30% or lower" in result.reason, result.reason


# -- `campaign check`: the same checks as `run`, nothing started -------------------------------------


def test_check_prints_the_plan_and_refuses_what_run_would(
    tmp_path: Path, examples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.plan import check

    check(examples / "demo.toml", db=str(tmp_path / "none.db"))
    out = capsys.readouterr().out
    assert (
        "spec-decode: B/C x decode at 4K; 3 to 8 blocks (until spec is settled), 6-16 server starts; feeds spec" in out
    )
    assert "smoke: A/B x cache-probe at each arm's own; 3 blocks, 6 server starts; feeds cache" in out
    assert "time: no estimate yet for the 39 server starts left" in out  # an adaptive item counted at its budget
    assert out.rstrip().endswith("examples/demo.toml: ok") and "19 to 39 server starts in all" in out
    assert not list(tmp_path.iterdir())  # and it created nothing

    bad = tmp_path / "bad.toml"
    bad.write_text(HEAD + (gate_toml('metric = "tfft_s", min_gain = 0.3')))
    with pytest.raises(CampaignFileError) as info:
        check(bad, db=str(tmp_path / "none.db"))
    assert "did you mean ttft_s" in info.value.render()
    contrary = tmp_path / "contrary.toml"
    contrary.write_text(HEAD + (gate_toml('metric = "ttft_s", min_gain = 0.3, higher_is_better = true')))
    check(contrary, db=str(tmp_path / "none.db"))
    captured = capsys.readouterr()
    assert "warning: gates[0] (id 'g').params.higher_is_better: set to true for 'ttft_s'" in captured.err


def test_the_time_estimate_comes_from_earlier_blocks_and_never_guesses(examples: Path) -> None:
    """Blocks left are timed by the median of the same (item, arm)'s done blocks; blocks
    of an (item, arm) that never ran are counted apart, not guessed."""
    from campaign.store.summary import BlockHistory
    from cli.plan import time_estimate
    from flows.resolve import load_campaign

    spec = load_campaign(examples / "demo.toml")
    item = spec.item("spec-decode")  # B/C, 3 to 8 blocks: counted at its budget
    most = spec.blocks(item).most
    history = {
        ("spec-decode", "B"): BlockHistory(frozenset({0, 1}), (40.0, 60.0, 1000.0)),
        ("spec-decode", "C"): BlockHistory(frozenset(range(most)), (10.0,)),
    }
    line = time_estimate(spec, history)
    left = 39 - 2 - most
    assert (
        line
        == f"time: about 6 min for 6 of the {left} server starts left (median of the same blocks' earlier runs); {left - 6} never ran, not counted"
    )
    settled = {**history, ("spec-decode", "B"): BlockHistory(frozenset({0, 1, 2, 3}), (60.0,), settled=True)}
    assert time_estimate(spec, settled).startswith(
        f"time: no estimate yet for the {left - 6} server starts left"
    )  # a settled item: none left
    everything = {
        (q.key, arm): BlockHistory(frozenset(range(spec.blocks(q).most)), (1.0,)) for q in spec.queue for arm in q.arms
    }
    assert time_estimate(spec, everything) == "time: nothing left to run (every block of every item is done)"


def test_docs_metrics_md_is_the_catalogue() -> None:
    path = DOCS / "metrics.md"
    assert path.read_text() == metrics.markdown(), (
        "docs/metrics.md is stale: python -m campaign.core.metrics > docs/metrics.md"
    )


# -- every request fits its arm's context -------------------------------------------------------------


def test_a_probe_whose_requests_outgrow_the_arms_context_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """agent-load's default conversation on a 4096-token arm: every request would be an HTTP 400."""
    from flows.overrides import check_campaign

    small = head(context=4096) + (gate_toml('metric = "ttft_s", min_gain = 0.3'))
    path = tmp_path / "c.toml"
    path.write_text(small)
    from flows.resolve import load_campaign

    problems = check_campaign(load_campaign(path))
    assert problems == [
        f"queue[0] (id 'agent'): probe agent-load sends requests of up to {n} tokens (prompt and reply, by its sizes), "
        f"but arm {arm!r} has a context of 4096; shrink the probe's sizes in the item's overrides or give the arm a larger context"
        for n, arm in ((2000 + 4000 + 9 * 1800 + 200 + 8 * 20, "A"), (2000 + 4000 + 9 * 1800 + 200 + 8 * 20, "B"))
    ]
    fitted = small.replace(
        'gate = "g"\n',
        'gate = "g"\noverrides = { system_tokens = 500, task_tokens = 800, turn_tokens = 200, max_tokens = 32 }\n',
        1,
    )
    path.write_text(fitted)
    assert check_campaign(load_campaign(path)) == []


def test_a_comparison_between_arms_at_different_contexts_is_refused_and_context_change_named(tmp_path: Path) -> None:
    """A user compared decode "at 4K vs 8K" as two arms of 4096 and 8192 (each decode at its
    own context): the gate stayed pending, "no common cell", and `campaign check` said ok.
    Now it is refused before anything runs; one arm at both contexts is accepted."""
    from flows.overrides import check_campaign
    from flows.resolve import load_campaign

    two = campaign_file(
        "m",
        runtimes=[{"name": "sim", "adapter": "simulator"}],
        arms=[arm("A", context=4096), arm("B", context=8192)],
        queue=[item("decode", ["A", "B"], ["decode"], gate="g")],
    )
    path = tmp_path / "c.toml"
    path.write_text(two + gate_toml('metric = "decode_tps", probe = "decode", min_gain = -0.1'))
    (msg,) = check_campaign(load_campaign(path))
    assert msg == (
        "gates[0] (id 'g'): B is measured at context 8192 and A at 4096: they share no cell, so the gate would stay "
        "pending; to compare one arm across contexts, run it at both (the item's `contexts`) and use predicate context_change"
    )
    path.write_text(
        two.replace('gate = "g"\n', 'gate = "g"\ncontexts = [4096]\n', 1)
        + gate_toml('metric = "decode_tps", probe = "decode", min_gain = -0.1')
    )
    assert check_campaign(load_campaign(path)) == []  # both at 4K: a common cell
