"""The answer line of a gate: read from the verdict's evidence, the effect with its
interval, a credit's deciding ablation and the mechanism's counters, at most two lines at
80 columns -- and the same number the gate decided on, never another estimate."""

from __future__ import annotations

import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import pct
from campaign.store.summary import GateView
from gates.engine import evaluate
from reports.answer import answer_of
from tests.unit.test_attribution_checks import campaign, spec_gate


def view(gate: GateEntry, title: str = "") -> GateView:
    frame = campaign(11)
    result = evaluate(gate, frame)
    return GateView(
        gate.id,
        title or gate.id,
        str(result.verdict),
        result.reason,
        list(gate.subjects),
        list(gate.baseline),
        gate.predicate,
        result.evidence,
    )


def test_a_comparison_answers_with_its_change_and_interval() -> None:
    gate = GateEntry(
        id="faster",
        predicate="relative_improvement",
        subjects=["B"],
        baseline=["A"],
        params={"metric": "decode_tps", "probe": "decode", "min_gain": 0.5},
    )
    g = view(gate)
    assert g.verdict == Verdict.PASS
    (c,) = g.evidence["comparisons"]
    a = answer_of(g)
    # the very numbers the gate decided on, formatted once
    assert a.found == (
        f"B vs A: decode_tps {pct(c['change'])} [{pct(c['change_low'])}, {pct(c['change_high'])}] 95% CI over 5 blocks, needs >= +50%"
    )
    assert f"{pct(c['change'])} [{pct(c['change_low'])}, {pct(c['change_high'])}]" in g.reason  # the reason's numbers
    lines = a.lines(80)
    assert lines[0].startswith("PASS    faster: B vs A: decode_tps +")
    assert all(len(line) <= 80 for line in lines) and len(lines) <= 2


def test_a_credit_answers_with_its_ablation_and_counters_not_the_win() -> None:
    g = view(spec_gate(), "Credit the win to speculation")
    assert g.verdict == Verdict.PASS
    a = answer_of(g)
    assert a.found.startswith("the win was the speculation; B vs B-nospec +")
    assert a.found.endswith("; drafts accepted 1,512 of 1,860 on B")
    assert "B vs A" not in a.found  # the win is the other gate's answer, not repeated here
    assert "95% CI" not in answer_of(g, usual="95% CI").found  # the heading states the usual level once
    assert len(a.lines(80)) <= 2


def test_an_undecided_credit_says_so_and_a_long_answer_is_cut_at_two_lines() -> None:
    g = view(spec_gate())
    undecided = GateView(g.id, g.title, "inconclusive", g.reason, g.subjects, g.baseline, g.predicate, g.evidence)
    assert answer_of(undecided).found.startswith("not settled; B vs B-nospec ")
    long = answer_of(GateView("g", "t", "fail", "word " * 80, ["B"], [], "custom", {}))
    lines = long.lines(80)
    assert len(lines) == 2 and lines[-1].endswith("…") and all(len(line) <= 80 for line in lines)


@pytest.mark.parametrize("verdict", ["pending", "blocked"])
def test_a_gate_without_a_verdict_answers_with_its_reasons_first_clause(verdict: str) -> None:
    g = GateView(
        "g", "t", verdict, "arm B blocked: llama-server not found; more here", ["B"], [], "relative_improvement", {}
    )
    assert answer_of(g).found == "arm B blocked: llama-server not found"
