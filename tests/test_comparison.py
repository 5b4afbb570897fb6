"""The comparison primitive (`gates.compare`) on crafted frames: each rule with a case that
fooled the predicates before it -- a flaky arm winning, contexts pooled, one baseline of
several read, n = 2 against a hard threshold, a summary row taken for n = 1."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from campaign.schema import GateEntry
from campaign.states import Verdict
from gates import compare
from gates.engine import evaluate
from gates.intervals import median_interval, rate_interval


def cell(arm: str, metric: str, values: list[float], *, probe: str = "decode", scenario: str = "decode", context: int = 4096,
         repeat: int = 0, trial: int | None = None, unit: str = "", mode: str = "canonical") -> list[dict[str, Any]]:
    return [
        {"arm_id": arm, "metric": metric, "value": float(v), "probe": probe, "scenario": scenario, "context": context,
         "trial": i if trial is None else trial, "repeat": repeat, "mode": mode, "unit": unit}
        for i, v in enumerate(values)
    ]


def errors(arm: str, requests: int, failed: dict[str, int], **where: Any) -> list[dict[str, Any]]:
    """The per-cell request outcome rows every probe writes (`arms.probes.failures.record_errors`)."""
    total = sum(failed.values())
    out = cell(arm, "requests", [requests], trial=-1, **where) + cell(arm, "requests_failed", [total], trial=-1, **where)
    for kind, n in failed.items():
        out += cell(arm, f"requests_failed_{kind}", [n], trial=-1, **where)
    return out + cell(arm, "error_rate", [total / requests], trial=-1, **where)


def frame(*parts: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([row for part in parts for row in part])


def gate(predicate: str, params: dict, subjects: list[str], baseline: list[str] | None = None) -> GateEntry:
    return GateEntry(id="g", predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


REL = {"metric": "decode_tps", "probe": "decode", "min_gain": 0.10}


def test_intervals_are_exact_and_say_what_they_cover() -> None:
    assert median_interval([1, 2, 3]) == (1.0, 3.0, 0.75)  # n=3: [min, max] covers the median 75% of the time
    lo, hi, cov = median_interval(list(range(100)))
    assert (lo, hi) == (39.0, 60.0) and 0.95 <= cov < 0.97
    assert median_interval([5.0]) == (5.0, 5.0, 0.0)
    lo, hi = rate_interval(2, 3)
    assert round(lo, 3) == 0.094 and round(hi, 3) == 0.992  # Clopper-Pearson, as tabulated
    assert rate_interval(3, 3)[1] == 1.0 and rate_interval(0, 3)[0] == 0.0


def test_reason_carries_the_gain_and_its_interval() -> None:
    rows = frame(cell("C", "decode_tps", [160, 162, 165]), cell("B", "decode_tps", [68, 69, 70]))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.PASS
    assert result.reason == "decode_tps: C 162 (+135% [+129%, +143%]) vs B 69.0; needs +10% or more"
    cells = {(c["arm"], c["role"]): c for c in result.evidence["cells"]}
    assert cells[("C", "subject")]["n"] == 3 and cells[("B", "baseline")]["low"] == 68.0
    assert result.evidence["comparisons"][0]["method"] == compare.UNPAIRED


def test_two_trials_against_a_hard_threshold_are_inconclusive() -> None:
    """The old predicates compared medians of 2 trials with a fixed threshold: pass."""
    rows = frame(cell("C", "decode_tps", [160, 165]), cell("B", "decode_tps", [68, 70]))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "C n=2, B n=2 < 3: too few to decide" in result.reason
    assert evaluate(gate("relative_improvement", {**REL, "min_n": 2}, ["C"], ["B"]), rows).verdict == Verdict.PASS


def test_a_gain_whose_interval_straddles_the_threshold_is_inconclusive() -> None:
    """Median +12% clears +10% (the old verdict: pass), but the interval is [+0%, +24%]."""
    rows = frame(cell("C", "decode_tps", [50, 56, 62]), cell("B", "decode_tps", [50, 50, 50]))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "C 56.0 (+12% [+0%, +24%]) vs B 50.0" in result.reason and "C's interval straddles +10%" in result.reason
    clear_fail = frame(cell("C", "decode_tps", [50, 51, 52]), cell("B", "decode_tps", [50, 50, 50]))
    assert evaluate(gate("relative_improvement", REL, ["C"], ["B"]), clear_fail).verdict == Verdict.FAIL


def test_a_flaky_subject_cannot_pass() -> None:
    """FLAKY answers a third of its requests with HTTP 503; the ones it answers are fast.
    Before, failures simply left the latency samples and FLAKY passed at -96%."""
    where = {"probe": "agent-load", "scenario": "summary", "context": 0}
    fast = cell("FLAKY", "ttft_later_s", [0.03, 0.03, 0.02, 0.04, 0.03, 0.03], **where)
    slow = cell("SLOW", "ttft_later_s", [0.66, 0.70, 0.62, 0.65, 0.68, 0.66], **where)
    g = gate("relative_improvement", {"metric": "ttft_later_s", "probe": "agent-load", "min_gain": 0.5, "higher_is_better": False}, ["FLAKY"], ["SLOW"])
    result = evaluate(g, frame(fast, slow, errors("FLAKY", 9, {"http_503": 3}, **where), errors("SLOW", 9, {}, **where)))
    assert result.verdict == Verdict.FAIL
    assert "FLAKY error rate 0.333 > 0.05 (http_503 3): cannot pass" in result.reason
    flaky = next(c for c in result.evidence["cells"] if c["arm"] == "FLAKY")
    assert flaky["errors_by_kind"] == {"http_503": 3} and flaky["requests"] == 9
    # the same latencies without the failures pass
    healthy = frame(fast, slow, errors("FLAKY", 9, {}, **where), errors("SLOW", 9, {}, **where))
    assert evaluate(g, healthy).verdict == Verdict.PASS


def test_a_flaky_baseline_cannot_make_a_subject_fail() -> None:
    rows = frame(cell("C", "decode_tps", [50, 51, 52]), cell("B", "decode_tps", [50, 50, 50]), errors("B", 10, {"read_timeout": 4}))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "baseline B error rate 0.40 > 0.05 (read_timeout 4): its failures are left out of its numbers" in result.reason


def test_contexts_are_never_pooled() -> None:
    """Seed-004 Gate 6 in small: M measured at 16K only, L at 16K and 32K. Pooling L's two
    contexts made M look 40% faster; at 16K, where both ran, it is 10% faster."""
    g = gate("relative_improvement", {"metric": "ttft_s", "probe": "cache-probe", "scenario": "cold", "min_gain": 0.3, "higher_is_better": False}, ["M"], ["L"])
    where16 = {"probe": "cache-probe", "scenario": "cold", "context": 16384}
    rows = frame(cell("M", "ttft_s", [9, 9, 9], **where16), cell("L", "ttft_s", [10, 10, 10], **where16),
                 cell("L", "ttft_s", [20, 20, 20], probe="cache-probe", scenario="cold", context=32768))
    result = evaluate(g, rows)
    assert result.verdict == Verdict.FAIL
    assert result.reason.startswith("ttft_s: M 9.00 (-10% [-10%, -10%]) vs L 10.0")
    assert [c["context"] for c in result.evidence["comparisons"]] == [16384]


def test_each_context_is_compared_and_all_must_pass() -> None:
    rows = frame(cell("C", "decode_tps", [60, 60, 61], context=8192), cell("B", "decode_tps", [50, 50, 50], context=8192),
                 cell("C", "decode_tps", [51, 51, 51], context=32768), cell("B", "decode_tps", [50, 50, 50], context=32768))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.FAIL
    assert "at 8K: C 60.0 (+20% [+20%, +22%]) vs B 50.0; at 32K: C 51.0 (+2% [+2%, +2%]) vs B 50.0" in result.reason


def test_no_common_cell_is_pending_and_names_what_is_missing() -> None:
    rows = frame(cell("C", "decode_tps", [60, 60, 60], context=8192), cell("B", "decode_tps", [50, 50, 50], context=4096))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.PENDING
    assert result.reason == "no common cell for decode_tps: C has decode/decode@8K; B has decode/decode@4K"


def test_every_baseline_arm_is_used() -> None:
    """Before, only the first baseline was read: C beat B by 50% and passed, though D was
    as fast as C."""
    rows = frame(cell("C", "decode_tps", [75, 75, 75]), cell("B", "decode_tps", [50, 50, 50]), cell("D", "decode_tps", [74, 74, 74]))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B", "D"]), rows)
    assert result.verdict == Verdict.FAIL
    assert "C 75.0 (+50% [+50%, +50%]) vs B 50.0; C 75.0 (+1% [+1%, +1%]) vs D 74.0" in result.reason
    assert result.evidence["how"].startswith("each subject against each baseline (B, D)")


def test_interleaved_repeats_pair_the_gain() -> None:
    """Both arms drift up together over four interleaved repeats; per repeat, C is 12%
    ahead every time. Unpaired, the drift hides it; paired, it is clear."""
    parts = []
    for r, base in enumerate((100, 110, 120, 130)):
        parts += [cell("B", "decode_tps", [base], repeat=r, trial=0), cell("C", "decode_tps", [base * 1.12], repeat=r, trial=0)]
    rows = frame(*parts)
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.PASS
    assert result.evidence["comparisons"][0]["method"].startswith(compare.PAIRED)
    unpaired = rows.assign(repeat=0, trial=range(len(rows)))
    assert evaluate(gate("relative_improvement", REL, ["C"], ["B"]), unpaired).verdict == Verdict.INCONCLUSIVE


def test_a_summary_metric_reads_its_per_request_samples() -> None:
    """agent-load stores ttft_later_median_s once per attempt (n = 1) and each later turn's
    TTFT as ttft_later_s beside it: the gate's n is the requests behind the median."""
    where = {"probe": "agent-load", "scenario": "summary", "context": 0}
    rows = frame(cell("B", "ttft_later_median_s", [0.4], trial=-1, **where), cell("B", "ttft_later_s", [0.38, 0.40, 0.41, 0.42, 0.39], **where),
                 cell("A", "ttft_later_median_s", [1.3], trial=-1, **where), cell("A", "ttft_later_s", [1.2, 1.3, 1.35, 1.4, 1.25], **where))
    g = gate("relative_improvement", {"metric": "ttft_later_median_s", "probe": "agent-load", "scenario": "summary", "min_gain": 0.5, "higher_is_better": False}, ["B"], ["A"])
    result = evaluate(g, rows)
    assert result.verdict == Verdict.PASS
    b = next(c for c in result.evidence["cells"] if c["arm"] == "B")
    assert b["samples"] == "ttft_later_s" and b["n"] == 5 and b["basis"] == "samples"
    only_summaries = rows[rows["trial"] == -1]
    result = evaluate(g, only_summaries)
    assert result.verdict == Verdict.INCONCLUSIVE and "B n=1, A n=1 < 3" in result.reason


def test_threshold_per_cell_with_intervals() -> None:
    g = gate("threshold", {"metric": "reuse", "value": 0.9, "scenarios": ["identical"]}, ["L"])
    where = {"probe": "cache-probe", "scenario": "identical"}
    one = frame(cell("L", "reuse", [1.0], **where))
    assert evaluate(g, one).verdict == Verdict.INCONCLUSIVE  # one observation carries no interval
    three = frame(cell("L", "reuse", [1.0, 1.0, 1.0], **where))
    assert evaluate(g, three).verdict == Verdict.PASS
    straddle = frame(cell("L", "reuse", [0.85, 0.95, 0.97], **where))
    assert evaluate(g, straddle).verdict == Verdict.INCONCLUSIVE
    # pooled over contexts the median was 1.00 and passed; at 32K it is 0.50
    pooled = frame(cell("L", "reuse", [1.0] * 5, context=16384, **where), cell("L", "reuse", [0.5] * 3, context=32768, **where))
    result = evaluate(g, pooled)
    assert result.verdict == Verdict.FAIL and "L identical at 32K 0.50" in result.reason


def test_majority_reports_the_interval_and_three_trials_cannot_decide() -> None:
    g = gate("majority", {}, ["R", "S"])
    trials = lambda arm, outcomes: cell(arm, "tool_loop_pass", outcomes, probe="tool-loop", scenario="user:u1", context=0)  # noqa: E731
    result = evaluate(g, frame(trials("R", [1, 0, 1]), trials("S", [1, 1, 1])))
    assert result.verdict == Verdict.INCONCLUSIVE  # before: pass, "tool loop R 2/3, S 3/3"
    assert result.reason.startswith("tool loop R 2/3 [0.0943, 0.992], S 3/3 [0.292, 1.00]")
    assert "3 trials cannot tell R's rate from 50%" in result.reason
    assert "intervals overlap (R/S): these trials cannot tell the arms apart" in result.reason
    many = evaluate(gate("majority", {}, ["R"]), frame(trials("R", [1] * 18 + [0] * 2)))
    assert many.verdict == Verdict.PASS
    assert evaluate(gate("majority", {}, ["R"]), frame(trials("R", [0] * 10))).verdict == Verdict.FAIL


def test_goodput_counts_failures_as_misses() -> None:
    where = {"probe": "agent-load", "context": 0}

    def turns(arm: str, ok: int, failed: int) -> list[dict[str, Any]]:
        rows = []
        for i in range(ok):
            rows += cell(arm, "ttft_s", [0.5], scenario=f"c{i}-t1", trial=1, **where)
        for i in range(failed):
            rows += cell(arm, "errors", [1], scenario=f"c{ok + i}-t1", trial=1, **where)
        return rows

    g = gate("goodput", {"metric": "ttft_s", "probe": "agent-load", "scenario_pattern": r"c\d+-t[1-9]\d*", "target": 2.0, "min_share": 0.8}, ["B"])
    assert evaluate(g, frame(turns("B", 20, 0))).verdict == Verdict.PASS
    result = evaluate(g, frame(turns("B", 40, 20)))  # every answered request is fast; a third failed
    assert result.verdict == Verdict.FAIL
    assert result.reason.startswith("ttft_s <= 2.00 for B 67% [53%, 78%] of 60 requests (20 failed); needs 80%")


def test_control_best_of_and_ceiling_use_intervals() -> None:
    ctl = gate("control", {"metric": "decode_tps", "max_advantage": 0.05}, ["T"], ["U"])
    close = frame(cell("T", "decode_tps", [30, 30, 30]), cell("U", "decode_tps", [29.5, 30.5, 32]))
    result = evaluate(ctl, close)
    assert result.verdict == Verdict.INCONCLUSIVE and "U's advantage interval straddles +5%" in result.reason
    ok = frame(cell("T", "decode_tps", [30, 30, 30]), cell("U", "decode_tps", [29.5, 29.8, 30.2]))
    assert evaluate(ctl, ok).verdict == Verdict.PASS

    best = gate("best_of", {"metric": "decode_tps", "label": "decode"}, ["V"], ["S"])
    overlapping = frame(cell("V", "decode_tps", [38, 40, 44]), cell("S", "decode_tps", [37, 39, 41]))
    result = evaluate(best, overlapping)
    assert result.verdict == Verdict.INCONCLUSIVE and "V vs S: the intervals overlap" in result.reason
    clear = frame(cell("V", "decode_tps", [44, 44.5, 45]), cell("S", "decode_tps", [37, 38, 39]))
    assert evaluate(best, clear).reason == "V best decode: 44.5 [44.0, 45.0]; next S 38.0 [37.0, 39.0] (V +17% [+13%, +22%])"

    ceil = gate("holds_at_ceiling", {"context": 262144, "min_value": 12}, ["L"], ["V"])
    two = frame(cell("L", "decode_tps", [15, 16], context=262144), cell("V", "decode_tps", [6, 6.1], context=262144))
    assert evaluate(ceil, two).verdict == Verdict.INCONCLUSIVE  # n = 2 at the ceiling decides nothing
    three = frame(cell("L", "decode_tps", [15, 16, 15.5], context=262144), cell("V", "decode_tps", [6, 6.1, 6.2], context=262144))
    result = evaluate(ceil, three)
    assert result.verdict == Verdict.PASS and result.reason == "at 256K: L 15.5 [15.0, 16.0] hold >= 12.0; V 6.10 [6.00, 6.20] collapse"


# -- attribution by ablation ------------------------------------------------------------------------


def _load(arm: str, values: list[float], hits: float | None = None, lookups: float | None = None, unit: str = "requests") -> list[dict[str, Any]]:
    where = {"probe": "agent-load", "context": 0}
    rows = cell(arm, "ttft_later_s", values, scenario="summary", **where)
    if hits is not None:
        rows += cell(arm, "cache_hits", [hits], scenario="load", trial=0, unit=unit, **where)
        rows += cell(arm, "cache_lookups", [lookups], scenario="load", trial=0, unit=unit, **where)
    return rows


SLOW = [1.30, 1.35, 1.40, 1.32, 1.38]
FAST = [0.40, 0.41, 0.42, 0.39, 0.43]


def attribution(claim: str, ablation: str | None, baseline: list[str]) -> GateEntry:
    params = {"claim": claim, "metric": "ttft_later_s", "min_gain": 0.5}
    if ablation:
        params["ablation"] = ablation
    return gate("attribution", params, ["B"], baseline)


def test_attribution_without_an_ablation_is_never_a_pass() -> None:
    """Before: 0 cache hits made `credit-slots` pass and `credit-cache` fail, by elimination."""
    rows = frame(_load("B", FAST, hits=0, lookups=18), _load("A", SLOW, hits=12, lookups=18))
    slots = evaluate(attribution("slots", None, ["A"]), rows)
    cache = evaluate(attribution("cache", None, ["A"]), rows)
    assert slots.verdict == cache.verdict == Verdict.INCONCLUSIVE
    assert "by elimination only (no ablation arm): the cache made 0 hits, which leaves the slots" in slots.reason
    assert "cache 0 hits in 18 lookups (requests) on B (hits (requests): B 0, A 12)" in slots.reason


def test_attribution_by_ablation_each_branch() -> None:
    # switching the cache off (B-nocache) keeps the win: the win was not the cache
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-nocache", [0.41, 0.40, 0.43, 0.42, 0.40], 0, 0))
    result = evaluate(attribution("cache", "B-nocache", ["A", "B-nocache"]), rows)
    assert result.verdict == Verdict.FAIL
    assert "switching the cache off keeps the win: the win was not the cache" in result.reason
    assert "B-nocache (cache off): B-nocache 0.41 (-70%" in result.reason
    # switching the slots off (B-2slots) costs the win: the win was the slots
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-2slots", [1.25, 1.3, 1.28, 1.33, 1.27], 10, 18))
    result = evaluate(attribution("slots", "B-2slots", ["A", "B-2slots"]), rows)
    assert result.verdict == Verdict.PASS
    assert "switching the slots off costs the win: the win was the slots" in result.reason
    assert {c["arm"] for c in result.evidence["ablation_vs_reference"]["cells"]} == {"A", "B-2slots"}
    assert {c["arm"] for c in result.evidence["subject_vs_ablation"]["cells"]} == {"B", "B-2slots"}
    # the ablation says the cache, its counters say it never hit: not credited
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-nocache", [1.25, 1.3, 1.28, 1.33, 1.27], 0, 0))
    contradicted = evaluate(attribution("cache", "B-nocache", ["A", "B-nocache"]), rows)
    assert contradicted.verdict == Verdict.INCONCLUSIVE and "the difference is not the cache's doing" in contradicted.reason
    rows = frame(_load("B", FAST, 15, 18), _load("A", SLOW, 12, 18), _load("B-nocache", [1.25, 1.3, 1.28, 1.33, 1.27], 0, 0))
    assert evaluate(attribution("cache", "B-nocache", ["A", "B-nocache"]), rows).verdict == Verdict.PASS
    # switching it off costs part of the win: neither credited nor cleared
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-half", [0.74, 0.75, 0.76, 0.73, 0.77], 0, 18))
    partial = evaluate(attribution("slots", "B-half", ["A", "B-half"]), rows)
    assert partial.verdict == Verdict.INCONCLUSIVE and "the ablation does not decide it" in partial.reason
    # the ablation keeps the win and switching off still costs the full win: both matter
    rows = frame(_load("B", [0.20, 0.21, 0.19, 0.20, 0.22], 0, 18), _load("A", SLOW, 12, 18), _load("B-half", [0.60, 0.61, 0.62, 0.59, 0.63], 0, 18))
    both = evaluate(attribution("slots", "B-half", ["A", "B-half"]), rows)
    assert both.verdict == Verdict.INCONCLUSIVE and "only part of the win" in both.reason
    # no win, nothing to credit
    rows = frame(_load("B", SLOW, 0, 18), _load("A", SLOW, 12, 18), _load("B-off", SLOW, 0, 0))
    result = evaluate(attribution("cache", "B-off", ["A", "B-off"]), rows)
    assert result.verdict == Verdict.FAIL and "no win to credit to anything" in result.reason
    # the ablation may be the baseline itself (llama.cpp S3 vs S1 differ only in slots)
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18))
    sole = evaluate(attribution("slots", "A", ["A"]), rows)
    assert sole.verdict == Verdict.PASS and "A is B with slots off, so switching it off costs the whole win" in sole.reason
    rows = frame(_load("B", SLOW, 0, 18), _load("A", SLOW, 12, 18), _load("B-off", SLOW, 0, 0))
    # the ablation must be one of the gate's arms, so its rows reach the predicate
    assert evaluate(attribution("cache", "B-off", ["A"]), rows).verdict == Verdict.PENDING


def test_cache_hits_are_compared_only_within_a_unit() -> None:
    rows = frame(_load("B", FAST, 0, 18, unit="requests"), _load("A", SLOW, 5000, 9000, unit="tokens"))
    result = evaluate(attribution("cache", None, ["A"]), rows)
    assert "not compared across units (requests, tokens)" in result.reason
    assert result.evidence["counters"]["A"]["unit"] == "tokens"


@pytest.mark.parametrize("claim", ["cache", "slots"])
def test_attribution_win_not_established_is_inconclusive(claim: str) -> None:
    rows = frame(_load("B", FAST[:2], 0, 18), _load("A", SLOW[:2], 12, 18))
    result = evaluate(attribution(claim, None, ["A"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE and "the win itself is not established" in result.reason
