"""Searches on generated data: how fast a sampler finds the optimum, and how often a
confirmed winner is right or false.

Why this exists: a search's answer is a verdict, and its error rate must be measured,
not assumed. `benchmarks/search.py` and the calibration test run many searches through
the real search code (`flows.search_loop.SearchLoop` with Optuna's samplers, the
nomination in `gates.search_pick`, the confirmation gates of
`campaign.core.search.SearchPlan` decided by `gates.engine.evaluate_family` with Holm)
on a response surface whose optimum is known, measured with the server variation model
of `gates.calibration` (a random effect per server start, drift, request noise).

The surface is a fixture: it mirrors the simulator's mechanisms for an agent load of
`CONVERSATIONS` conversations (fewer slots than conversations evict each other's state;
more add batch cost; a prefill chunk has a sweet spot between step overhead and decode
stalls; a prefix cache helps up to the sessions' size), with its numbers chosen so that
the optimum is unique and known. It is not measured from the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from campaign.core import metrics
from campaign.core.schema import CampaignSpec, GateEntry
from campaign.core.search import BEATS_BASE, SearchPlan, TrialArm
from flows.search_loop import SearchLoop, TrialOutcome, maximizing, open_study
from gates.calibration import Design, VariationModel, block_frame
from gates.engine import evaluate_family
from gates.search_pick import pick, search_gain

CONVERSATIONS = 4
CACHE_GAIN = {"off": 0.80, "256M": 0.90, "1G": 1.00, "4G": 0.97}
CHUNKS = [256, 512, 1024, 2048, 4096]
BASE = 50.0


def surface(params: Mapping[str, Any]) -> float:
    """The true goodput-like value (higher is better) of a recipe: unique optimum at
    slots = CONVERSATIONS, prefill_chunk = 1024, prefix_cache = 1G."""
    slots = int(params.get("slots", 2))
    chunk = int(params.get("prefill_chunk", 512))
    cache = str(params.get("prefix_cache", "off"))
    s = (min(slots, CONVERSATIONS) / CONVERSATIONS) ** 0.8 * (1 - 0.04 * max(0, slots - CONVERSATIONS))
    c = 0.7 + 0.3 * math.exp(-0.5 * (math.log2(chunk / 1024) / 1.2) ** 2)
    return BASE * s * c * CACHE_GAIN.get(cache, 0.8)


def flat(params: Mapping[str, Any]) -> float:
    """Every recipe the same: the null space, where any confirmed winner is false."""
    return BASE


def campaign(sampler: str, starts: int, seed: int, blocks: int = 5, min_gain: float = 0.0) -> CampaignSpec:
    """A campaign with a search over slots, chunk and cache from a 2-slot base."""
    return CampaignSpec.model_validate(
        {
            "campaign": {"name": "calibration", "seed": seed},
            "models": [{"name": "m", "quant": "q4", "bits_per_weight": 4.5}],
            "runtimes": [{"name": "sim", "adapter": "simulator"}],
            "arms": [
                {
                    "id": "A",
                    "model": "m",
                    "runtime": "sim",
                    "context": 8192,
                    "recipe": {"slots": 2, "prefill_chunk": 512},
                }
            ],
            "search": {
                "base": "A",
                "sampler": sampler,
                "seed": seed,
                "budget": {"starts": starts},
                "objective": {"metric": metrics.DECODE_TPS.name, "probe": "decode"},
                "confirm": {"top": 2, "max_candidates": 3, "blocks": blocks, "min_gain": min_gain},
                "space": {
                    "slots": {"low": 1, "high": 8},
                    "prefill_chunk": {"choices": CHUNKS},
                    "prefix_cache": {"choices": list(CACHE_GAIN)},
                },
            },
        }
    )


@dataclass(frozen=True)
class SearchRun:
    """One search's result: the true values of the arms it measured in order, what it
    confirmed, and the beats-base verdict."""

    measured_truth: tuple[float, ...]  # the true value of each new arm, in the order measured
    winner: str | None
    winner_truth: float
    verdict: str  # of the winner against the base on fresh blocks
    optimum: float
    claimed: float = math.nan  # what the search's own runs said the winner gains over the base


def run_one(
    sampler: str,
    truth: Callable[[Mapping[str, Any]], float],
    starts: int,
    seed: int,
    model: VariationModel | None = None,
    blocks: int = 5,
) -> SearchRun:
    """A whole search: the loop on an in-memory study, one run per trial arm (the base
    two) drawn from the variation model, then the nomination and the confirmation gates
    on fresh generated blocks."""
    import optuna

    model = model or VariationModel()
    rng = np.random.default_rng(seed)
    spec = campaign(sampler, starts, seed, blocks)
    plan = SearchPlan(spec)
    study = open_study(optuna.storages.InMemoryStorage(), "calibration", plan.search)
    truths: dict[str, float] = {}
    order: list[float] = []

    def measure(arm: TrialArm) -> TrialOutcome:
        value = truth(arm.params)
        truths[arm.arm_id] = value
        order.append(value)
        n = 2 if arm.arm_id == plan.base.id else 1
        runs = tuple(
            (value * math.exp(rng.normal(0, model.run_sd) + rng.normal(0, model.request_sd)),) for _ in range(n)
        )
        return TrialOutcome(runs, seconds=1.0)

    loop = SearchLoop(plan, study, measure)
    loop.run()
    chosen = pick(
        loop.measured(),
        maximizing(plan.search),
        plan.base.id,
        plan.search.confirm.top,
        plan.search.confirm.max_candidates,
    )
    optimum = _optimum(truth)
    if chosen.winner is None:
        return SearchRun(tuple(order[1:]), None, math.nan, "inconclusive", optimum)
    gates = [GateEntry.model_validate(g) for g in plan.confirm_gates(chosen.candidates)]
    arms = (plan.base.id, *[a for a in chosen.candidates if a != plan.base.id])
    base_truth = truths[plan.base.id]
    design = Design(
        arms=arms,
        gains={a: truths[a] / base_truth for a in arms},
        blocks=blocks,
        base=base_truth,
        metric=metrics.DECODE_TPS.name,
        probe="decode",
    )
    frame = block_frame(design, model, rng, item="search-confirm")
    results = evaluate_family(gates, {g.id: frame for g in gates}, confidence=spec.campaign.confidence)
    claimed = search_gain(loop.measured(), chosen.winner, plan.base.id)
    return SearchRun(
        tuple(order[1:]),
        chosen.winner,
        truths[chosen.winner],
        str(results[BEATS_BASE].verdict),
        optimum,
        math.nan if claimed is None else claimed,
    )


def _optimum(truth: Callable[[Mapping[str, Any]], float]) -> float:
    return max(
        truth({"slots": s, "prefill_chunk": c, "prefix_cache": k})
        for s in range(1, 9)
        for c in CHUNKS
        for k in CACHE_GAIN
    )


def grid_size() -> int:
    return 8 * len(CHUNKS) * len(CACHE_GAIN)


def starts_to_reach(run: SearchRun, within: float = 0.05) -> int | None:
    """Server starts until an arm within `within` of the optimum was measured (the base's
    two first), or None if none was."""
    for i, value in enumerate(run.measured_truth):
        if value >= run.optimum * (1 - within):
            return 2 + i + 1
    return None
