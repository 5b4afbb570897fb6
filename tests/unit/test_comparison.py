"""The comparison primitive (`gates.compare`) on crafted frames: each rule with a case that
fooled the predicates before it -- a flaky arm winning, contexts pooled, one baseline of
several read, two runs against a hard threshold, the requests of one server run taken for
independent evidence, a summary row taken for the samples behind it.

The server run (a block: one server start per arm) is the unit every verdict is decided
over; `cell()` makes each value its own run, `runs()` gives each run several requests."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
from pydantic import ValidationError
from scipy import stats as st

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates import blockstats
from gates.arm_cells import cell_stats
from gates.catalog import params_model
from gates.cells import Selector
from gates.counters import arm_errors
from gates.engine import evaluate
from gates.intervals import median_interval, rate_interval


def cell(
    arm: str,
    metric: str,
    values: list[float],
    *,
    probe: str = "decode",
    scenario: str = "decode",
    context: int = 4096,
    repeat: int | None = None,
    trial: int | None = None,
    kind: str = "sample",
    unit: str = "",
    mode: str = "canonical",
    item: str = "item",
) -> list[dict[str, Any]]:
    """Without `repeat`, each value is one server run's median (blocks 0, 1, ...): the run
    is the unit. With it, every value is a request of that one run."""
    return [
        {
            "arm_id": arm,
            "metric": metric,
            "value": float(v),
            "probe": probe,
            "scenario": scenario,
            "context": context,
            "kind": kind,
            "trial": i if trial is None else trial,
            "repeat": i if repeat is None else repeat,
            "mode": mode,
            "unit": unit,
            "item_key": item,
        }
        for i, v in enumerate(values)
    ]


def runs(arm: str, metric: str, per_run: list[list[float]], **where: Any) -> list[dict[str, Any]]:
    """Several requests per server run: `per_run[r]` are the requests of block r."""
    return [row for r, values in enumerate(per_run) for row in cell(arm, metric, values, repeat=r, **where)]


def errors(arm: str, requests: int, failed: dict[str, int], **where: Any) -> list[dict[str, Any]]:
    """The per-cell request outcome rows every probe writes (`arms.probes.failures.record_errors`)."""
    total = sum(failed.values())
    out = cell(arm, "requests", [requests], kind="summary", **where) + cell(
        arm, "requests_failed", [total], kind="summary", **where
    )
    for kind, n in failed.items():
        out += cell(arm, f"requests_failed_{kind}", [n], kind="summary", **where)
    return out + cell(arm, "error_rate", [total / requests], kind="summary", **where)


def frame(*parts: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([row for part in parts for row in part])


def gate(predicate: str, params: dict, subjects: list[str], baseline: list[str] | None = None) -> GateEntry:
    return GateEntry(id="g", predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


def scaled(base: list[float], ratios: list[float]) -> list[float]:
    return [round(b * r, 3) for b, r in zip(base, ratios, strict=True)]


REL = {"metric": "decode_tps", "probe": "decode", "min_gain": 0.10}
TOO_FEW = "needs 3 (blocks, each its own server start): too few to decide"


def test_intervals_are_exact_and_say_what_they_cover() -> None:
    assert median_interval([1, 2, 3]) == (1.0, 3.0, 0.75)  # n=3: [min, max] covers the median 75% of the time
    lo, hi, cov = median_interval(list(range(100)))
    assert (lo, hi) == (39.0, 60.0) and 0.95 <= cov < 0.97
    assert median_interval([5.0]) == (5.0, 5.0, 0.0)
    lo, hi = rate_interval(2, 3)
    assert round(lo, 3) == 0.094 and round(hi, 3) == 0.992  # Clopper-Pearson, as tabulated
    assert rate_interval(3, 3)[1] == 1.0 and rate_interval(0, 3)[0] == 0.0


def test_reason_carries_the_gain_its_ci_over_runs_and_the_sizes() -> None:
    """Five blocks of four requests each: the gain's CI is the t interval of the five
    per-block log ratios of run medians, checked here against scipy directly."""
    b_runs = [[68, 69, 70, 71], [70, 71, 72, 73], [66, 67, 67, 68], [69, 70, 70, 72], [67, 68, 69, 69]]
    c_runs = [
        [158, 160, 161, 163],
        [166, 167, 168, 170],
        [155, 156, 158, 158],
        [161, 163, 164, 166],
        [157, 158, 160, 161],
    ]
    rows = frame(runs("C", "decode_tps", c_runs), runs("B", "decode_tps", b_runs))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.PASS
    assert result.reason == (
        "decode_tps: C 161 (+133% [+131%, +135%] 95% CI, paired over 5 blocks, 5 runs x 4 requests) vs B 69.3; needs +10% or more"
    )
    med = lambda vs: sorted(vs)[1] / 2 + sorted(vs)[2] / 2  # noqa: E731  (the median of four)
    logs = [math.log(med(c) / med(b)) for c, b in zip(c_runs, b_runs)]
    mean, se = sum(logs) / 5, st.sem(logs)
    half = st.t.ppf(0.975, 4) * se
    cmp = result.evidence["comparisons"][0]
    assert cmp["change_low"] == pytest.approx(math.exp(mean - half) - 1) and cmp["change_high"] == pytest.approx(
        math.exp(mean + half) - 1
    )
    assert cmp["method"] == f"{blockstats.PAIRED_METHOD} (5 blocks)" and cmp["pairs"] == 5
    cells = {(c["arm"], c["role"]): c for c in result.evidence["cells"]}
    c, b = cells[("C", "subject")], cells[("B", "baseline")]
    assert c["n"] == c["runs"] == 5 and c["requests_per_run"] == [4] * 5 and c["size"] == "5 runs x 4 requests"
    assert b["run_values"] == [med(r) for r in b_runs]
    assert b["median"] == pytest.approx(
        math.exp(sum(math.log(med(r)) for r in b_runs) / 5)
    )  # geometric mean of run medians
    assert b["low"] < b["median"] < b["high"] and b["request_low"] <= b["median"] <= b["request_high"]


def test_thirty_requests_of_one_run_per_arm_are_inconclusive() -> None:
    """Request-level evidence only: 30 requests in ONE server run per arm, C clearly above
    B. The requests share their run's draw, so this is one run per arm, not 30 replicates."""
    c_reqs = [160 + (i % 7) - 3 for i in range(30)]
    b_reqs = [69 + (i % 5) - 2 for i in range(30)]
    rows = frame(cell("C", "decode_tps", c_reqs, repeat=0), cell("B", "decode_tps", b_reqs, repeat=0))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert f"C has 1 run, B has 1 run; {TOO_FEW}" in result.reason
    assert "1 run x 30 requests" in result.reason
    cells = {c["arm"]: c for c in result.evidence["cells"]}
    assert cells["C"]["n"] == 1 and cells["C"]["requests_per_run"] == [30]
    assert cells["B"]["request_high"] < cells["C"]["request_low"]  # shown, however far apart: never decides
    assert result.evidence["comparisons"][0]["statistical"] is False


def test_two_runs_against_a_hard_threshold_are_inconclusive() -> None:
    """The old predicates compared medians of 2 trials with a fixed threshold: pass."""
    rows = frame(cell("C", "decode_tps", [160, 165]), cell("B", "decode_tps", [68, 70]))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert f"C has 2 runs, B has 2 runs; {TOO_FEW}" in result.reason
    # the rule, not the data, stood in the way: at min_runs = 2 the same runs pass, and so does a third run at the default
    assert evaluate(gate("relative_improvement", {**REL, "min_runs": 2}, ["C"], ["B"]), rows).verdict == Verdict.PASS
    three = frame(cell("C", "decode_tps", [160, 165, 162]), cell("B", "decode_tps", [68, 70, 69]))
    assert evaluate(gate("relative_improvement", REL, ["C"], ["B"]), three).verdict == Verdict.PASS


def test_min_runs_below_two_is_refused_and_min_n_is_gone() -> None:
    model = params_model("relative_improvement")
    with pytest.raises(ValidationError, match="min_runs"):
        model.model_validate({**REL, "min_runs": 1})
    with pytest.raises(ValidationError, match="min_n"):
        model.model_validate({**REL, "min_n": 3})  # the old request-count knob is not silently ignored
    assert model.model_validate({**REL, "min_runs": 2}).min_runs == 2
    with pytest.raises(ValidationError):
        evaluate(
            gate("relative_improvement", {**REL, "min_runs": 1}, ["C"], ["B"]), frame(cell("C", "decode_tps", [1.0]))
        )


def test_a_gain_whose_ci_straddles_the_threshold_is_inconclusive() -> None:
    """The mean gain +12% clears +10% (the old verdict: pass), but over five blocks the
    per-block gains run from +2% to +20%: the CI reaches below the threshold."""
    base = [100, 104, 98, 102, 100]
    rows = frame(cell("C", "decode_tps", scaled(base, [1.02, 1.20, 1.08, 1.16, 1.14])), cell("B", "decode_tps", base))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "C 113 (+12% [+3%, +21%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs B 101" in result.reason
    assert "C's CI straddles +10%" in result.reason
    assert result.evidence["comparisons"][0]["statistical"] is True  # decided by the test, not by a rule
    clear_fail = frame(
        cell("C", "decode_tps", scaled(base, [1.01, 1.03, 1.02, 1.00, 1.02])), cell("B", "decode_tps", base)
    )
    assert evaluate(gate("relative_improvement", REL, ["C"], ["B"]), clear_fail).verdict == Verdict.FAIL
    clear_pass = frame(
        cell("C", "decode_tps", scaled(base, [1.19, 1.22, 1.20, 1.21, 1.18])), cell("B", "decode_tps", base)
    )
    assert evaluate(gate("relative_improvement", REL, ["C"], ["B"]), clear_pass).verdict == Verdict.PASS


AGENT = {"probe": "agent-load", "scenario": "summary", "context": 0}
FLAKY_GATE = gate(
    "relative_improvement",
    {"metric": "ttft_later_s", "probe": "agent-load", "min_gain": 0.5, "higher_is_better": False},
    ["FLAKY"],
    ["SLOW"],
)


def test_a_flaky_subject_cannot_pass() -> None:
    """FLAKY answers a third of its requests with HTTP 503; the ones it answers are fast.
    Before, failures simply left the latency samples and FLAKY passed at -96%."""
    fast = cell("FLAKY", "ttft_later_s", [0.03, 0.03, 0.02, 0.04, 0.03, 0.03], **AGENT)
    slow = cell("SLOW", "ttft_later_s", [0.66, 0.70, 0.62, 0.65, 0.68, 0.66], **AGENT)
    result = evaluate(
        FLAKY_GATE, frame(fast, slow, errors("FLAKY", 9, {"http_503": 3}, **AGENT), errors("SLOW", 9, {}, **AGENT))
    )
    assert result.verdict == Verdict.FAIL
    assert "FLAKY failed 3/9 requests (0.333 [0.0749, 0.701] 95% CI): http_503 3 > 0.05: cannot pass" in result.reason
    flaky = next(c for c in result.evidence["cells"] if c["arm"] == "FLAKY")
    assert flaky["errors_by_kind"] == {"http_503": 3} and flaky["requests"] == 9 and flaky["arm_failed"] == 3
    assert result.evidence["statistical_fail"] is False  # a rule's fail: no p-value for the family to adjust
    # the same latencies without the failures pass
    healthy = frame(fast, slow, errors("FLAKY", 9, {}, **AGENT), errors("SLOW", 9, {}, **AGENT))
    assert evaluate(FLAKY_GATE, healthy).verdict == Verdict.PASS


def test_errors_count_per_arm_over_every_cell_it_ran() -> None:
    """FLAKY's agent-load cell is clean; its failures were in another probe's cell. The
    error rate is the arm's, over every request counter in the rows: it still cannot pass."""
    fast = cell("FLAKY", "ttft_later_s", [0.03, 0.03, 0.02, 0.04, 0.03, 0.03], **AGENT)
    slow = cell("SLOW", "ttft_later_s", [0.66, 0.70, 0.62, 0.65, 0.68, 0.66], **AGENT)
    elsewhere = {"probe": "decode", "scenario": "decode", "context": 4096}
    rows = frame(
        fast,
        slow,
        errors("FLAKY", 9, {}, **AGENT),
        errors("FLAKY", 11, {"http_503": 5}, **elsewhere),
        errors("SLOW", 20, {}, **AGENT),
    )
    result = evaluate(FLAKY_GATE, rows)
    assert result.verdict == Verdict.FAIL
    assert "FLAKY failed 5/20 requests (0.25 [0.0866, 0.491] 95% CI): http_503 5 > 0.05: cannot pass" in result.reason
    errs = arm_errors(rows, "FLAKY")
    assert (errs.requests, errs.failed, errs.kinds) == (20, 5, {"http_503": 5})
    assert arm_errors(rows, "SLOW").failed == 0


def test_a_cell_where_the_arm_failed_every_request_counts_against_it() -> None:
    """At 32K C answered nothing: no latency there, but not an absent cell either."""
    at32 = {"probe": "decode", "scenario": "decode", "context": 32768}
    base = [50, 51, 49, 50, 52]
    rows = frame(
        cell("C", "decode_tps", scaled(base, [1.3] * 5)),
        cell("B", "decode_tps", base),
        cell("B", "decode_tps", base, **at32),
        errors("C", 5, {"http_503": 5}, **at32),
        errors("B", 5, {}, **at32),
        errors("C", 100, {}),
        errors("B", 100, {}),
    )
    stats = cell_stats(rows, Selector(metric="decode_tps"), "C")
    dead = next(s for c, s in stats.items() if c.context == 32768)
    assert dead.all_failed and dead.n == 0 and dead.size() == "0 runs (5/5 requests failed)"
    result = evaluate(
        gate("relative_improvement", {**REL, "max_error_rate": 0.2}, ["C"], ["B"]), rows
    )  # 5/105: under the arm's limit
    assert result.verdict == Verdict.FAIL
    assert "C failed every request at decode/decode@32K (5/5): cannot pass" in result.reason


def test_a_flaky_baseline_cannot_make_a_subject_fail() -> None:
    base = [50, 50, 51, 49, 50]
    c = cell("C", "decode_tps", scaled(base, [1.00, 1.02, 1.04, 1.01, 1.03]))
    rows = frame(c, cell("B", "decode_tps", base), errors("B", 10, {"read_timeout": 4}))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert (
        "baseline B failed 4/10 requests (0.40 [0.122, 0.738] 95% CI): read_timeout 4 > 0.05: its numbers cannot decide"
        in result.reason
    )
    # the same numbers from a healthy baseline: C surely falls short, a fail
    assert (
        evaluate(
            gate("relative_improvement", REL, ["C"], ["B"]),
            frame(c, cell("B", "decode_tps", base), errors("B", 10, {})),
        ).verdict
        == Verdict.FAIL
    )


def test_contexts_are_never_pooled() -> None:
    """Seed-004 Gate 6 in small: M measured at 16K only, L at 16K and 32K. Pooling L's two
    contexts made M look 40% faster; at 16K, where both ran, it is 10% faster."""
    g = gate(
        "relative_improvement",
        {"metric": "ttft_s", "probe": "cache-probe", "scenario": "cold", "min_gain": 0.3, "higher_is_better": False},
        ["M"],
        ["L"],
    )
    where16 = {"probe": "cache-probe", "scenario": "cold", "context": 16384}
    l16 = [10.0, 10.2, 9.9, 10.1, 10.0]
    rows = frame(
        cell("M", "ttft_s", scaled(l16, [0.90, 0.91, 0.89, 0.90, 0.91]), **where16),
        cell("L", "ttft_s", l16, **where16),
        cell("L", "ttft_s", [20.0, 20.4, 19.8, 20.2, 20.0], probe="cache-probe", scenario="cold", context=32768),
    )
    result = evaluate(g, rows)
    assert result.verdict == Verdict.FAIL
    assert result.reason.startswith(
        "ttft_s: M 9.06 (-10% [-11%, -9%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs L 10.0"
    )
    assert [c["context"] for c in result.evidence["comparisons"]] == [16384]


def test_each_context_is_compared_and_all_must_pass() -> None:
    base = [50, 51, 49, 50, 52]
    rows = frame(
        cell("C", "decode_tps", scaled(base, [1.20, 1.21, 1.19, 1.22, 1.20]), context=8192),
        cell("B", "decode_tps", base, context=8192),
        cell("C", "decode_tps", scaled(base, [1.02, 1.01, 1.03, 1.02, 1.02]), context=32768),
        cell("B", "decode_tps", base, context=32768),
    )
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.FAIL
    assert (
        "at 8K: C 60.7 (+20% [+19%, +22%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs B 50.4; "
        in result.reason
    )
    assert (
        "at 32K: C 51.4 (+2% [+1%, +3%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs B 50.4" in result.reason
    )
    assert [c["verdict"] for c in result.evidence["comparisons"]] == [
        "pass",
        "fail",
    ]  # the 32K fail survives Holm over the 2 cells


def test_no_common_cell_is_pending_and_names_what_is_missing() -> None:
    rows = frame(
        cell("C", "decode_tps", [60, 61, 59], context=8192), cell("B", "decode_tps", [50, 51, 49], context=4096)
    )
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.PENDING
    assert result.reason == "no common cell for decode_tps: C has decode/decode@8K; B has decode/decode@4K"


def test_every_baseline_arm_is_used() -> None:
    """Before, only the first baseline was read: C beat B by 50% and passed, though D was
    as fast as C."""
    base = [50, 51, 49, 50, 52]
    c = scaled(base, [1.50, 1.49, 1.51, 1.50, 1.50])
    rows = frame(
        cell("C", "decode_tps", c),
        cell("B", "decode_tps", base),
        cell("D", "decode_tps", scaled(c, [0.99, 0.98, 0.99, 0.99, 0.985])),
    )
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B", "D"]), rows)
    assert result.verdict == Verdict.FAIL
    assert "C 75.6 (+50% [+49%, +51%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs B 50.4; " in result.reason
    assert "C 75.6 (+1% [+1%, +2%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs D 74.6" in result.reason
    assert [(c["baseline"], c["verdict"]) for c in result.evidence["comparisons"]] == [("B", "pass"), ("D", "fail")]
    assert result.evidence["how"].startswith("each subject against each baseline (B, D)")


def test_shared_blocks_pair_the_gain() -> None:
    """Both arms drift up together over five blocks (each one server start per arm); per
    block, C is 12% ahead every time. Paired within the blocks the drift cancels and the
    gain is clear; the same numbers from different items (no block shared) are compared
    unpaired (Welch), where the drift hides it."""
    base = [100, 110, 120, 130, 140]
    c = scaled(base, [1.12, 1.13, 1.12, 1.11, 1.12])
    paired = frame(cell("B", "decode_tps", base), cell("C", "decode_tps", c))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), paired)
    assert result.verdict == Verdict.PASS
    cmp = result.evidence["comparisons"][0]
    assert (
        cmp["method"] == f"{blockstats.PAIRED_METHOD} (5 blocks)"
        and cmp["pairs"] == 5
        and "paired over 5 blocks" in result.reason
    )
    apart = frame(cell("B", "decode_tps", base, item="load-b"), cell("C", "decode_tps", c, item="load-c"))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), apart)
    assert result.verdict == Verdict.INCONCLUSIVE and "C's CI straddles +10%" in result.reason
    cmp = result.evidence["comparisons"][0]
    assert cmp["method"] == blockstats.UNPAIRED_METHOD and cmp["pairs"] == 0 and ", unpaired, " in result.reason


def test_arms_measured_in_different_items_are_compared_unpaired_and_say_so() -> None:
    """No block in common: Welch over the two arms' runs, which can still decide a clear
    gain. Two shared blocks are too few to pair (min_runs 3), and the method says that too."""
    b = [50.0, 51.0, 49.5, 50.5, 50.0]
    c = [75.0, 76.0, 74.0, 75.5, 75.0]
    rows = frame(cell("B", "decode_tps", b, item="baseline-item"), cell("C", "decode_tps", c, item="subject-item"))
    result = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), rows)
    assert result.verdict == Verdict.PASS
    cmp = result.evidence["comparisons"][0]
    assert cmp["method"] == blockstats.UNPAIRED_METHOD and "shared no block" in cmp["method"] and cmp["pairs"] == 0
    assert "C 75.1 (+50% [+47%, +52%] 95% CI, unpaired, 5 runs x 1 requests) vs B 50.2" in result.reason
    cells = {x["arm"]: x for x in result.evidence["cells"]}
    assert cells["B"]["items"] == ["baseline-item"] and cells["C"]["items"] == ["subject-item"]
    assert not set(cells["B"]["blocks"]) & set(cells["C"]["blocks"])
    two_shared = frame(
        cell("B", "decode_tps", b), cell("C", "decode_tps", c[:2]), cell("C", "decode_tps", c[2:], item="other")
    )
    cmp = evaluate(gate("relative_improvement", REL, ["C"], ["B"]), two_shared).evidence["comparisons"][0]
    assert cmp["method"] == f"{blockstats.UNPAIRED_METHOD}; 2 shared blocks are too few to pair" and cmp["pairs"] == 0


def test_a_summary_metric_reads_its_per_request_samples() -> None:
    """agent-load stores ttft_later_median_s once per attempt and each later turn's TTFT as
    ttft_later_s beside it: each run's value is the median of those requests, and the
    reason says how many there were per run."""
    a_runs = [
        [1.20, 1.30, 1.35, 1.40, 1.25],
        [1.28, 1.33, 1.38, 1.42, 1.30],
        [1.18, 1.26, 1.31, 1.37, 1.22],
        [1.25, 1.29, 1.36, 1.41, 1.27],
    ]
    b_runs = [
        [0.38, 0.40, 0.41, 0.42, 0.39],
        [0.40, 0.41, 0.43, 0.44, 0.40],
        [0.37, 0.39, 0.40, 0.41, 0.38],
        [0.39, 0.40, 0.42, 0.43, 0.41],
    ]
    summaries = [
        row
        for arm, per_run in (("A", a_runs), ("B", b_runs))
        for r, reqs in enumerate(per_run)
        for row in cell(arm, "ttft_later_median_s", [sorted(reqs)[2]], repeat=r, kind="summary", **AGENT)
    ]
    rows = frame(
        *[runs(arm, "ttft_later_s", per_run, **AGENT) for arm, per_run in (("A", a_runs), ("B", b_runs))], summaries
    )
    g = gate(
        "relative_improvement",
        {
            "metric": "ttft_later_median_s",
            "probe": "agent-load",
            "scenario": "summary",
            "min_gain": 0.5,
            "higher_is_better": False,
        },
        ["B"],
        ["A"],
    )
    result = evaluate(g, rows)
    assert result.verdict == Verdict.PASS
    assert "4 runs x 5 requests" in result.reason
    b = next(c for c in result.evidence["cells"] if c["arm"] == "B")
    assert b["samples"] == "ttft_later_s" and b["basis"] == "samples"
    assert b["n"] == 4 and b["requests_per_run"] == [5] * 4 and b["run_values"] == [sorted(r)[2] for r in b_runs]
    # the summary rows alone: one value per attempt, so one per run -- they can decide, and say they are summaries
    only_summaries = rows[rows["kind"] == "summary"]
    result = evaluate(g, only_summaries)
    assert result.verdict == Verdict.PASS and "4 runs, a summary each" in result.reason
    assert next(c for c in result.evidence["cells"] if c["arm"] == "B")["basis"] == "summary rows (one per attempt)"
    # one attempt per arm is one run, however many requests stood behind it
    first = rows[rows["repeat"] == 0]
    result = evaluate(g, first)
    assert result.verdict == Verdict.INCONCLUSIVE and f"B has 1 run, A has 1 run; {TOO_FEW}" in result.reason
    assert "1 run x 5 requests" in result.reason


def test_threshold_per_cell_with_intervals() -> None:
    g = gate("threshold", {"metric": "reuse", "value": 0.9, "scenarios": ["identical"]}, ["L"])
    where = {"probe": "cache-probe", "scenario": "identical"}
    one = evaluate(g, frame(cell("L", "reuse", [1.0], **where)))
    assert one.verdict == Verdict.INCONCLUSIVE  # one run carries no interval
    assert f"L has 1 run; {TOO_FEW}" in one.reason
    three = frame(cell("L", "reuse", [1.0, 0.99, 1.0], **where))
    assert evaluate(g, three).verdict == Verdict.PASS
    straddle = evaluate(g, frame(cell("L", "reuse", [0.85, 0.95, 0.97], **where)))
    assert (
        straddle.verdict == Verdict.INCONCLUSIVE and "L's 95% CI [0.773, 1.10] straddles the bound" in straddle.reason
    )
    clear_miss = frame(cell("L", "reuse", [0.50, 0.52, 0.49], **where))
    assert evaluate(g, clear_miss).verdict == Verdict.FAIL
    # pooled over contexts the median was 1.00 and passed; at 32K it is 0.50
    pooled = frame(
        cell("L", "reuse", [1.0] * 5, context=16384, **where),
        cell("L", "reuse", [0.5, 0.51, 0.49], context=32768, **where),
    )
    result = evaluate(g, pooled)
    assert result.verdict == Verdict.FAIL and "L identical at 32K 0.50" in result.reason


def test_majority_reports_the_interval_and_three_trials_cannot_decide() -> None:
    g = gate("majority", {}, ["R", "S"])
    tool = {"probe": "tool-loop", "scenario": "user:u1", "context": 0}
    trials = lambda arm, outcomes: cell(arm, "tool_loop_pass", outcomes, **tool)  # noqa: E731
    result = evaluate(g, frame(trials("R", [1, 0, 1]), trials("S", [1, 1, 1])))
    assert result.verdict == Verdict.INCONCLUSIVE  # before: pass, "tool loop R 2/3, S 3/3"
    assert result.reason.startswith("tool loop R 2/3 [0.0943, 0.992] 95% CI, S 3/3 [0.292, 1.00] 95% CI")
    assert "3 trials cannot tell R's rate from 50%" in result.reason
    assert "intervals overlap (R/S): these trials cannot tell the arms apart" in result.reason
    many = evaluate(gate("majority", {}, ["R"]), frame(trials("R", [1] * 18 + [0] * 2)))
    assert many.verdict == Verdict.PASS
    assert evaluate(gate("majority", {}, ["R"]), frame(trials("R", [0] * 10))).verdict == Verdict.FAIL
    # contexts are never pooled: 18/20 at 4K does not carry 1/10 at 32K
    at32 = cell("R", "tool_loop_pass", [1] + [0] * 9, probe="tool-loop", scenario="user:u1", context=32768)
    split = evaluate(gate("majority", {}, ["R"]), frame(trials("R", [1] * 18 + [0] * 2), at32))
    assert split.verdict == Verdict.FAIL and "R at 32K 1/10" in split.reason
    # the arm's errors over every request it made: 18/20 answered right, but 6 of 26 requests failed
    flaky = evaluate(
        gate("majority", {}, ["R"]), frame(trials("R", [1] * 18 + [0] * 2), errors("R", 26, {"http_503": 6}, **tool))
    )
    assert (
        flaky.verdict == Verdict.FAIL
        and "R failed 6/26 requests (0.231 [0.0897, 0.436] 95% CI): http_503 6 > 0.05: cannot pass" in flaky.reason
    )


def test_goodput_counts_failures_as_misses() -> None:
    where = {"probe": "agent-load", "context": 0}

    def turns(arm: str, ok: int, failed: int, runs: int = 4) -> list[dict[str, Any]]:
        """Request i in server run i % runs (the run is the unit: one share each)."""
        rows = []
        for i in range(ok):
            rows += cell(arm, "ttft_s", [0.5], scenario=f"c{i}-t1", trial=1, repeat=i % runs, **where)
        for i in range(failed):
            rows += cell(arm, "errors", [1], scenario=f"c{ok + i}-t1", trial=1, repeat=i % runs, **where)
        return rows

    g = gate(
        "goodput",
        {
            "metric": "ttft_s",
            "probe": "agent-load",
            "scenario_pattern": r"c\d+-t[1-9]\d*",
            "target": 2.0,
            "min_share": 0.8,
        },
        ["B"],
    )
    assert evaluate(g, frame(turns("B", 20, 0))).verdict == Verdict.PASS
    result = evaluate(g, frame(turns("B", 40, 20)))  # every answered request is fast; a third failed
    assert result.verdict == Verdict.FAIL
    assert result.reason.startswith(
        "ttft_s <= 2.00 for B 66% [53%, 78%] 95% CI in a typical run (40/60 requests in 4 runs, 20 failed); needs 80%"
    )
    one_run = evaluate(
        g, frame(turns("B", 40, 20, runs=1))
    )  # the requests of one server start are not independent trials
    assert one_run.verdict == Verdict.INCONCLUSIVE and "has 1 run; needs 3" in one_run.reason


def test_control_best_of_and_ceiling_use_intervals() -> None:
    ctl = gate("control", {"metric": "decode_tps", "max_advantage": 0.05}, ["T"], ["U"])
    t = [30.0, 30.5, 29.5, 30.2, 29.8]
    close = frame(cell("T", "decode_tps", t), cell("U", "decode_tps", scaled(t, [0.99, 1.08, 1.02, 1.10, 0.98])))
    result = evaluate(ctl, close)
    assert result.verdict == Verdict.INCONCLUSIVE and "U's advantage CI straddles +5%" in result.reason
    ok = frame(cell("T", "decode_tps", t), cell("U", "decode_tps", scaled(t, [0.99, 1.00, 1.01, 0.99, 1.00])))
    assert evaluate(ctl, ok).verdict == Verdict.PASS
    beaten = frame(cell("T", "decode_tps", t), cell("U", "decode_tps", scaled(t, [1.12, 1.11, 1.13, 1.12, 1.12])))
    assert evaluate(ctl, beaten).verdict == Verdict.FAIL

    best = gate("best_of", {"metric": "decode_tps", "label": "decode"}, ["V"], ["S"])
    s = [38.0, 39.0, 37.0, 38.5, 37.5]
    overlapping = frame(cell("V", "decode_tps", scaled(s, [1.06, 0.98, 1.08, 0.97, 1.05])), cell("S", "decode_tps", s))
    result = evaluate(best, overlapping)
    assert result.verdict == Verdict.INCONCLUSIVE and "V vs S: the CIs overlap" in result.reason
    clear = frame(cell("V", "decode_tps", scaled(s, [1.17, 1.18, 1.16, 1.17, 1.18])), cell("S", "decode_tps", s))
    result = evaluate(best, clear)
    assert result.verdict == Verdict.PASS
    assert result.reason == (
        "V best decode: 44.5 [43.1, 46.0] 95% CI, 5 runs x 1 requests; "
        "next S 38.0 [37.0, 39.0] 95% CI, 5 runs x 1 requests (V +17% [+16%, +18%] 95% CI)"
    )

    ceil = gate("holds_at_ceiling", {"context": 262144, "min_value": 12}, ["L"], ["V"])
    two = frame(cell("L", "decode_tps", [15, 16], context=262144), cell("V", "decode_tps", [6, 6.1], context=262144))
    result = evaluate(ceil, two)
    assert (
        result.verdict == Verdict.INCONCLUSIVE and f"L has 2 runs; {TOO_FEW}" in result.reason
    )  # two runs at the ceiling decide nothing
    three = frame(
        cell("L", "decode_tps", [15, 16, 15.5], context=262144), cell("V", "decode_tps", [6, 6.1, 6.2], context=262144)
    )
    result = evaluate(ceil, three)
    assert result.verdict == Verdict.PASS
    assert result.reason == (
        "at 256K: L 15.5 [14.3, 16.8] 95% CI, 3 runs x 1 requests hold >= 12.0; V 6.10 [5.86, 6.35] 95% CI, 3 runs x 1 requests collapse"
    )


# -- attribution by ablation ------------------------------------------------------------------------


def _load(
    arm: str, values: list[float], hits: float | None = None, lookups: float | None = None, unit: str = "requests"
) -> list[dict[str, Any]]:
    """One later-turn TTFT per run (blocks 0, 1, ...), and the load's cache counters."""
    where = {"probe": "agent-load", "context": 0}
    rows = cell(arm, "ttft_later_s", values, scenario="summary", **where)
    if hits is not None:
        rows += cell(arm, "cache_hits", [hits], scenario="load", trial=0, unit=unit, **where)
        rows += cell(arm, "cache_lookups", [lookups], scenario="load", trial=0, unit=unit, **where)
    return rows


SLOW = [1.30, 1.35, 1.40, 1.32, 1.38]
FAST = [0.40, 0.41, 0.42, 0.39, 0.43]
LOST = [1.25, 1.30, 1.28, 1.33, 1.27]  # an ablation that lost the win


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
    assert (
        "B 0.41 (-70% [-70%, -69%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs A 1.35" in slots.reason
    )  # the win itself is established


def test_attribution_an_ablation_that_keeps_the_win_fails_the_claim() -> None:
    """Switching the cache off (B-nocache) keeps the win: the win was not the cache. B's 0
    hits agree; they are no reason to leave the claim undecided."""
    rows = frame(
        _load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-nocache", [0.41, 0.40, 0.43, 0.42, 0.40], 0, 0)
    )
    result = evaluate(attribution("cache", "B-nocache", ["A", "B-nocache"]), rows)
    assert result.verdict == Verdict.FAIL, result.reason
    assert "switching the cache off keeps the win: the win was not the cache" in result.reason
    assert "B-nocache (cache off): B-nocache 0.412 (-69% [-71%, -68%] 95% CI, paired over 5 blocks" in result.reason
    # and it stays a fail as one of the campaign's family: its p-value is the ablation's own win
    from gates import family

    g = attribution("cache", "B-nocache", ["A", "B-nocache"])
    assert family.adjust({g.id: result}, [g], 0.95)[g.id].verdict == Verdict.FAIL


def test_a_credit_failed_because_the_ablation_keeps_the_win_does_not_read_as_undecided() -> None:
    """The ablation keeps the win (-67% against A), so the cache is not credited; what
    switching the cache off costs B (-9% [-16%, -2%] against a -10% bar) is undecided, but
    the fail does not rest on it. Before, the reason quoted "B's CI straddles -10% ... would
    be needed" beside "the win was not the cache", and read as undecided."""
    g = gate(
        "attribution",
        {"claim": "cache", "metric": "ttft_later_s", "min_gain": 0.1, "ablation": "B-nocache"},
        ["B"],
        ["A", "B-nocache"],
    )
    rows = frame(
        _load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-nocache", [0.455, 0.445, 0.474, 0.454, 0.431], 0, 0)
    )
    result = evaluate(g, rows)
    assert result.verdict == Verdict.FAIL, result.reason
    assert (
        result.evidence["subject_vs_ablation"]["comparisons"][0]["verdict"] == "inconclusive"
    )  # the cost itself is undecided
    assert "the win was not the cache" in result.reason
    assert (
        "straddles" not in result.reason
        and "would be needed" not in result.reason
        and "would decide" not in result.reason
    )


def test_a_credit_names_the_gate_that_states_its_win_instead_of_repeating_it() -> None:
    """A campaign with a win gate and a credit of that win: the credit's reason opened with
    the win's whole comparison, a second copy of the win gate's reason. Evaluated as a
    family, it names that gate; evaluated alone (no gate states the win), it keeps the
    numbers."""
    from gates.engine import evaluate_family

    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-2slots", LOST, 10, 18))
    win = gate("relative_improvement", {"metric": "ttft_later_s", "min_gain": 0.5}, ["B"], ["A"]).model_copy(
        update={"id": "win"}
    )
    credit = attribution("slots", "B-2slots", ["A", "B-2slots"]).model_copy(update={"id": "credit"})
    results = evaluate_family([win, credit], {"win": rows, "credit": rows})
    stated = results["win"].reason.split("; needs ")[0]
    assert stated.startswith("ttft_later_s: B 0.41 (-70%")
    assert results["credit"].verdict == Verdict.PASS
    assert results["credit"].reason.startswith("the win (gate 'win': pass); needs ")
    assert stated not in results["credit"].reason and "the win was the slots" in results["credit"].reason
    alone = evaluate_family([credit], {"credit": rows})["credit"]
    assert alone.reason.startswith(stated)


def test_attribution_by_ablation_each_branch() -> None:
    # the same branch for the slots, whose claim no counter can veto: switching them off keeps the win
    rows = frame(
        _load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-2slots", [0.41, 0.40, 0.43, 0.42, 0.40], 0, 18)
    )
    result = evaluate(attribution("slots", "B-2slots", ["A", "B-2slots"]), rows)
    assert result.verdict == Verdict.FAIL
    assert "switching the slots off keeps the win: the win was not the slots" in result.reason
    assert "B-2slots (slots off): B-2slots 0.412 (-69% [-71%, -68%] 95% CI, paired over 5 blocks" in result.reason
    # switching the slots off (B-2slots) costs the win: the win was the slots
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-2slots", LOST, 10, 18))
    result = evaluate(attribution("slots", "B-2slots", ["A", "B-2slots"]), rows)
    assert result.verdict == Verdict.PASS
    assert "switching the slots off costs the win: the win was the slots" in result.reason
    assert (
        "B vs B-2slots: B 0.41 (-68% [-70%, -66%] 95% CI, paired over 5 blocks, 5 runs x 1 requests) vs B-2slots 1.29"
        in result.reason
    )
    assert {c["arm"] for c in result.evidence["ablation_vs_reference"]["cells"]} == {"A", "B-2slots"}
    assert {c["arm"] for c in result.evidence["subject_vs_ablation"]["cells"]} == {"B", "B-2slots"}
    # the ablation says the cache, its counters say it never hit: not credited
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-nocache", LOST, 0, 0))
    contradicted = evaluate(attribution("cache", "B-nocache", ["A", "B-nocache"]), rows)
    assert contradicted.verdict == Verdict.INCONCLUSIVE
    assert (
        "but B made 0 cache hits: the difference is not the cache's doing (drift between runs?)" in contradicted.reason
    )
    rows = frame(_load("B", FAST, 15, 18), _load("A", SLOW, 12, 18), _load("B-nocache", LOST, 0, 0))
    credited = evaluate(attribution("cache", "B-nocache", ["A", "B-nocache"]), rows)
    assert credited.verdict == Verdict.PASS and "the win was the cache" in credited.reason
    # switching it off surely costs the win, but whether the ablation keeps it is undecided: not yet credited
    rows = frame(
        _load("B", [0.20, 0.21, 0.19, 0.20, 0.22], 0, 18),
        _load("A", SLOW, 12, 18),
        _load("B-wide", [0.55, 0.80, 0.62, 0.75, 0.68], 0, 18),
    )
    waiting = evaluate(attribution("slots", "B-wide", ["A", "B-wide"]), rows)
    assert waiting.verdict == Verdict.INCONCLUSIVE
    assert "switching the slots off costs the win, but whether B-wide keeps it is undecided" in waiting.reason
    # switching it off costs part of the win: neither credited nor cleared
    rows = frame(
        _load("B", FAST, 0, 18), _load("A", SLOW, 12, 18), _load("B-half", [0.74, 0.75, 0.76, 0.73, 0.77], 0, 18)
    )
    partial = evaluate(attribution("slots", "B-half", ["A", "B-half"]), rows)
    assert partial.verdict == Verdict.INCONCLUSIVE and "the ablation does not decide it" in partial.reason
    # the ablation keeps the win and switching off still costs the full win: both matter
    rows = frame(
        _load("B", [0.20, 0.21, 0.19, 0.20, 0.22], 0, 18),
        _load("A", SLOW, 12, 18),
        _load("B-half", [0.60, 0.61, 0.62, 0.59, 0.63], 0, 18),
    )
    both = evaluate(attribution("slots", "B-half", ["A", "B-half"]), rows)
    assert both.verdict == Verdict.INCONCLUSIVE and "only part of the win" in both.reason
    # no win, nothing to credit
    rows = frame(_load("B", SLOW, 0, 18), _load("A", SLOW, 12, 18), _load("B-off", SLOW, 0, 0))
    result = evaluate(attribution("cache", "B-off", ["A", "B-off"]), rows)
    assert result.verdict == Verdict.FAIL and "no win to credit to anything" in result.reason
    # the ablation may be the baseline itself (llama.cpp S3 vs S1 differ only in slots)
    rows = frame(_load("B", FAST, 0, 18), _load("A", SLOW, 12, 18))
    sole = evaluate(attribution("slots", "A", ["A"]), rows)
    assert (
        sole.verdict == Verdict.PASS and "A is B with slots off, so switching it off costs the whole win" in sole.reason
    )
    rows = frame(_load("B", SLOW, 0, 18), _load("A", SLOW, 12, 18), _load("B-off", SLOW, 0, 0))
    # the ablation must be one of the gate's arms, so its rows reach the predicate
    assert evaluate(attribution("cache", "B-off", ["A"]), rows).verdict == Verdict.PENDING


def test_an_ablation_run_in_other_blocks_is_compared_unpaired() -> None:
    """The ablation ran in its own item: no block shared with B, so B vs the ablation is
    Welch over runs, and the evidence says so."""
    rows = frame(
        _load("B", FAST, 0, 18),
        _load("A", SLOW, 12, 18),
        [{**r, "item_key": "ablations"} for r in _load("B-2slots", LOST, 10, 18)],
    )
    result = evaluate(attribution("slots", "B-2slots", ["A", "B-2slots"]), rows)
    assert result.verdict == Verdict.PASS
    cost = result.evidence["subject_vs_ablation"]["comparisons"][0]
    assert cost["method"] == blockstats.UNPAIRED_METHOD and cost["pairs"] == 0
    assert (
        "B vs B-2slots: B 0.41 (-68%" in result.reason
        and ", unpaired, 5 runs x 1 requests) vs B-2slots 1.29" in result.reason
    )


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
    assert f"B has 2 runs, A has 2 runs; {TOO_FEW}" in result.reason
