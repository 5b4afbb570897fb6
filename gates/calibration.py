"""Block data drawn from a server variation model, and the verdicts gates give on it.

Why this exists: a verdict is a claim with an error rate, and the rate must be measured,
not assumed. `benchmarks/verdict_calibration.py` and the calibration test run many
campaigns of arms whose truth is known (identical, or a set true gain) through the real
gate code and count how often the verdict is wrong.

The model is the simulator's (`arms.simulator.profile`: a per-start random effect and slow
drift), written out here on the measurement frame a gate reads, so that thousands of
campaigns take seconds instead of days:

    value(arm, block, cell, request) = base(cell) * gain(arm)
        * exp(run effect(arm, block) + drift(time of the run) + request noise)

- the run effect is drawn once per server start (shared by every cell of that start),
  N(0, run_sd) on the log scale;
- drift is a random walk over the order in which runs start (the block's arm order is
  randomised, as the queue does), N(0, drift_sd) per run;
- request noise is N(0, request_sd) per request.

A request-level method sees `requests_per_run` values with spread request_sd and calls
that an interval; the true spread of a run's median is dominated by run_sd.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import SampleKind, Verdict
from gates.engine import evaluate
from gates.looks import Look, added_after_look, look_at


@dataclass(frozen=True)
class VariationModel:
    """Server variation on the log scale (sd of log rate)."""

    run_sd: float = 0.03
    drift_sd: float = 0.005
    request_sd: float = 0.01


@dataclass(frozen=True)
class Design:
    arms: tuple[str, ...] = ("A", "B")
    gains: dict[str, float] = field(default_factory=dict)  # arm -> true multiplicative gain (1.15 = +15%)
    blocks: int = 5
    cells: int = 1
    requests_per_run: int = 30
    metric: str = metrics.DECODE_TPS.name
    probe: str = "decode"
    base: float = 50.0


def block_frame(design: Design, model: VariationModel, rng: np.random.Generator, item: str = "item") -> pd.DataFrame:
    """One campaign's canonical rows: every (arm, block, cell) with its requests, plus
    the request counters every probe writes (no failures)."""
    order_rng = random.Random(int(rng.integers(0, 2**31)))
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "arm_id",
            "probe",
            "scenario",
            "context",
            "mode",
            "kind",
            "trial",
            "metric",
            "value",
            "unit",
            "item_key",
            "repeat",
            "block_id",
            "block_order",
            "attempt_id",
            "settings_hash",
            "recipe_hash",
            "source",
        )
    }
    drift = 0.0
    attempt = 0
    contexts = [4096 * (2**i) for i in range(design.cells)]
    for block in range(design.blocks):
        order = list(design.arms)
        order_rng.shuffle(order)
        for pos, arm in enumerate(order):
            attempt += 1
            drift += float(rng.normal(0, model.drift_sd))
            effect = float(rng.normal(0, model.run_sd))
            gain = design.gains.get(arm, 1.0)
            for ctx in contexts:
                noise = rng.normal(0, model.request_sd, design.requests_per_run)
                values = design.base * gain * np.exp(effect + drift + noise)
                rows = [(SampleKind.SAMPLE, t, design.metric, float(v), "tok/s") for t, v in enumerate(values)]
                rows += [
                    (
                        SampleKind.SUMMARY,
                        0,
                        metrics.REQUESTS.name,
                        float(design.requests_per_run),
                        metrics.REQUESTS.unit,
                    ),
                    (SampleKind.SUMMARY, 0, metrics.REQUESTS_FAILED.name, 0.0, metrics.REQUESTS_FAILED.unit),
                ]
                for kind, trial, metric, value, unit in rows:
                    cols["arm_id"].append(arm)
                    cols["probe"].append(design.probe)
                    cols["scenario"].append(design.probe)
                    cols["context"].append(ctx)
                    cols["mode"].append("canonical")
                    cols["kind"].append(kind.value)
                    cols["trial"].append(trial)
                    cols["metric"].append(metric)
                    cols["value"].append(value)
                    cols["unit"].append(unit)
                    cols["item_key"].append(item)
                    cols["repeat"].append(block)
                    cols["block_id"].append(f"{item}/b{block}")
                    cols["block_order"].append(pos)
                    cols["attempt_id"].append(attempt)
                    cols["settings_hash"].append("s0")
                    cols["recipe_hash"].append(f"r-{arm}")
                    cols["source"].append("")
    return pd.DataFrame(cols)


# The predicates calibrated, each as (name, gate for arms A (subject) and B, the true gain of
# A that sits exactly on the gate's boundary, and whether a pass is the claim "A is better").
def gates_for(design: Design) -> dict[str, tuple[GateEntry, float]]:
    """Each comparative predicate as a gate on A vs B, with A's true gain at its boundary
    (where both a pass and a fail are false)."""
    m, probe = design.metric, design.probe
    return {
        "relative_improvement(any gain)": (
            GateEntry(
                id="g",
                predicate="relative_improvement",
                params={"metric": m, "probe": probe, "min_gain": 0.0},
                subjects=["A"],
                baseline=["B"],
            ),
            1.0,
        ),
        "relative_improvement(+10%)": (
            GateEntry(
                id="g",
                predicate="relative_improvement",
                params={"metric": m, "probe": probe, "min_gain": 0.10},
                subjects=["A"],
                baseline=["B"],
            ),
            1.10,
        ),
        "best_of": (
            GateEntry(
                id="g", predicate="best_of", params={"metric": m, "probe": probe}, subjects=["A"], baseline=["B"]
            ),
            1.0,
        ),
        "control(max_advantage 0)": (
            GateEntry(
                id="g",
                predicate="control",
                params={"metric": m, "probe": probe, "max_advantage": 0.0},
                subjects=["A"],
                baseline=["B"],
            ),
            1.0,
        ),
        "equivalence(5%)": (
            GateEntry(
                id="g",
                predicate="equivalence",
                params={"metric": m, "probe": probe, "margin": 0.05},
                subjects=["A"],
                baseline=["B"],
            ),
            1.05,
        ),
    }


@dataclass
class Tally:
    campaigns: int = 0
    passed: int = 0
    failed: int = 0

    def add(self, verdict: Verdict) -> None:
        self.campaigns += 1
        self.passed += verdict == Verdict.PASS
        self.failed += verdict == Verdict.FAIL

    @property
    def pass_rate(self) -> float:
        return self.passed / self.campaigns if self.campaigns else math.nan

    @property
    def fail_rate(self) -> float:
        return self.failed / self.campaigns if self.campaigns else math.nan


def run_many(gate: GateEntry, design: Design, model: VariationModel, campaigns: int, seed: int) -> Tally:
    """`campaigns` independent campaigns of `design` through `gate`."""
    rng = np.random.default_rng(seed)
    tally = Tally()
    for _ in range(campaigns):
        tally.add(evaluate(gate, block_frame(design, model, rng)).verdict)
    return tally


def calibrate(
    predicate: str,
    cells: int,
    model: VariationModel,
    campaigns: int,
    seed: int = 0,
    blocks: int = 5,
    requests_per_run: int = 30,
    truth: Sequence[float] | None = None,
) -> dict[str, Tally]:
    """At the boundary: how often a pass, how often a fail (both false there)."""
    design = Design(blocks=blocks, cells=cells, requests_per_run=requests_per_run)
    gate, boundary = gates_for(design)[predicate]
    out = {}
    for gain in truth or [boundary]:
        d = Design(blocks=blocks, cells=cells, requests_per_run=requests_per_run, gains={"A": gain})
        out[f"{gain:g}"] = run_many(gate, d, model, campaigns, seed)
    return out


# -- adding blocks until the verdict is settled ------------------------------------------------


@dataclass
class StopTally(Tally):
    """`Tally` of adaptive campaigns, with the blocks each ran."""

    blocks: int = 0

    @property
    def mean_blocks(self) -> float:
        return self.blocks / self.campaigns if self.campaigns else math.nan


def run_adaptive(
    gate: GateEntry,
    design: Design,
    model: VariationModel,
    campaigns: int,
    seed: int,
    least: int,
    sequential: bool,
    looks: int = 1,
) -> StopTally:
    """`campaigns` campaigns that add blocks one at a time from `least` to `design.blocks`,
    evaluate `gate` after each and stop at the first pass or fail, as an item with
    `max_blocks` does (`flows.verdicts.settled`). With `sequential` the gate reads
    confidence sequences (what the flow does); without, the fixed-design t interval is
    re-tested after every block (what looking at a fixed design and adding blocks until it
    shows a verdict amounts to). With `looks` each look tests at alpha / looks (Bonferroni
    over the planned looks, what the flow does where that is the sharper test). Each
    campaign's blocks are drawn once, so the ways can be compared on the same draws (the
    same `seed`)."""
    rng = np.random.default_rng(seed)
    tally = StopTally()
    for _ in range(campaigns):
        frame = block_frame(design, model, rng)
        verdict, used = Verdict.INCONCLUSIVE, design.blocks
        for last in range(least - 1, design.blocks):
            verdict = evaluate(gate, frame[frame["repeat"] <= last], sequential=sequential, looks=looks).verdict
            if verdict in (Verdict.PASS, Verdict.FAIL):
                used = last + 1
                break
        tally.add(verdict)
        tally.blocks += used
    return tally


# -- a user's moves: rerunning, adding blocks after a look --------------------------------------


def _look(gate: GateEntry, frame: pd.DataFrame, history: list[Look]) -> Verdict:
    """One complete look at `frame` by the rule the campaign flow applies (`gates.looks`):
    a fixed-design test unless blocks were added after an earlier look at the same question."""
    look = look_at(gate.id, frame, complete=True)
    verdict = evaluate(gate, frame, sequential=added_after_look(look, history) is not None).verdict
    history.append(Look(look.question, look.blocks, True, str(verdict)))
    return verdict


def rerun_until_pass(
    gate: GateEntry,
    design: Design,
    model: VariationModel,
    campaigns: int,
    seed: int,
    tries: int,
    replace: bool = False,
) -> Tally:
    """`campaigns` campaigns in which the user reruns the item (`design.blocks` blocks a try)
    until the gate passes, at most `tries` times. A rerun with unchanged settings adds its
    blocks to the question (what `campaign rerun` does); with `replace` each try is judged
    alone on its own fresh blocks, as if it were the first (for comparison)."""
    rng = np.random.default_rng(seed)
    tally = Tally()
    per_try = design.blocks
    for _ in range(campaigns):
        frame = block_frame(replace_blocks(design, per_try * tries), model, rng)
        history: list[Look] = []
        verdict = Verdict.INCONCLUSIVE
        for attempt in range(tries):
            if replace:
                part = frame[(frame["repeat"] >= attempt * per_try) & (frame["repeat"] < (attempt + 1) * per_try)]
                verdict = evaluate(gate, part).verdict
            else:
                verdict = _look(gate, frame[frame["repeat"] < (attempt + 1) * per_try], history)
            if verdict == Verdict.PASS:
                break
        tally.add(verdict)
    return tally


def blocks_after_look(
    gate: GateEntry, design: Design, model: VariationModel, campaigns: int, seed: int, more: int, rule: bool = True
) -> Tally:
    """`campaigns` campaigns of `design.blocks` blocks; where the gate is inconclusive the
    user raises `repeats` to `more` and looks again. With `rule` the second look follows
    `gates.looks` (a confidence sequence over all blocks); without, it is judged by the
    fixed-design test, as if `more` had been planned from the start."""
    rng = np.random.default_rng(seed)
    tally = Tally()
    for _ in range(campaigns):
        frame = block_frame(replace_blocks(design, more), model, rng)
        history: list[Look] = []
        verdict = _look(gate, frame[frame["repeat"] < design.blocks], history)
        if verdict not in (Verdict.PASS, Verdict.FAIL):
            verdict = _look(gate, frame, history) if rule else evaluate(gate, frame).verdict
        tally.add(verdict)
    return tally


def replace_blocks(design: Design, blocks: int) -> Design:
    return Design(
        design.arms,
        dict(design.gains),
        blocks,
        design.cells,
        design.requests_per_run,
        design.metric,
        design.probe,
        design.base,
    )


def rate_text(k: int, n: int) -> str:
    """'  2.5% [1.2%, 4.5%]': k of n as a rate with its exact (Clopper-Pearson) 95%
    interval, as every calibration benchmark prints a rate."""
    from scipy import stats as st

    r = st.binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"{k / n:6.1%} [{r.low:.1%}, {r.high:.1%}]"
