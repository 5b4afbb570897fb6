"""Attribution: which mechanism earned a win, decided by ablation (seed 000: "the win was
four slots, not the prefix cache": the cache had zero hits).

Why a module of its own: it is the one predicate that reads two kinds of evidence, the
comparisons of `gates.compare` (the win, the ablation's own win, what switching the
mechanism off costs) and the server's counters (cache hits, with their unit), and it
must never credit a mechanism the counters say did no work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import Field

from campaign import metrics
from campaign.schema import GateEntry
from campaign.states import Verdict
from campaign.units import pct
from gates import compare
from gates.cells import Selector
from gates.compare import Rigor
from gates.registry import register
from gates.result import GateResult, pending

# -- attribution: which mechanism earned the win, by ablation ----------------------------------------


class AttributionParams(Rigor):
    claim: str = Field(description="the mechanism credited with the win, e.g. 'cache' or 'slots'")
    ablation: str | None = Field(
        default=None,
        description="an arm listed in baseline: the subject's recipe with the claimed mechanism switched off",
    )
    metric: str = metrics.TTFT_LATER_MEDIAN_S.name
    probe: str = "agent-load"
    scenario: str | None = "summary"
    context: int | None = None
    lower_is_better: bool = True
    min_gain: float = Field(default=0.2, description="the win must be at least this large to credit anything")
    counter_scenario: str = "load"
    min_hits: int = Field(default=1, ge=1)


def _counter(rows: pd.DataFrame, arm: str, metric: str, probe: str, scenario: str) -> tuple[float, str] | None:
    """A counter delta summed over the arm's attempts, with the unit it was stored in."""
    if rows.empty:
        return None
    mask = (rows["arm_id"] == arm) & (rows["metric"] == metric) & (rows["probe"] == probe) & (rows["scenario"] == scenario)
    part = rows.loc[mask]
    if part.empty:
        return None
    units = sorted({str(u) for u in part["unit"]}) if "unit" in part else [""]
    if len(units) > 1:
        return None  # never add requests to tokens
    return float(part["value"].sum()), units[0]


def _counters(rows: pd.DataFrame, arm: str, p: AttributionParams) -> dict[str, Any] | None:
    hits = _counter(rows, arm, metrics.CACHE_HITS.name, p.probe, p.counter_scenario)
    lookups = _counter(rows, arm, metrics.CACHE_LOOKUPS.name, p.probe, p.counter_scenario)
    if hits is None or lookups is None or hits[1] != lookups[1]:
        return None
    return {"hits": hits[0], "lookups": lookups[0], "unit": hits[1] or "count"}


def _counter_text(arm: str, c: dict[str, Any] | None) -> str:
    if c is None:
        return f"{arm} reports no cache counters"
    return f"cache {int(c['hits'])} hits in {int(c['lookups'])} lookups ({c['unit']}) on {arm}"


def _counters_compared(counters: dict[str, dict[str, Any] | None]) -> str:
    """Hits side by side, but only between arms that count in the same unit."""
    by_unit: dict[str, list[str]] = {}
    for arm, c in counters.items():
        if c is not None:
            by_unit.setdefault(c["unit"], []).append(f"{arm} {int(c['hits'])}")
    parts = [f"hits ({unit}): {', '.join(v)}" for unit, v in by_unit.items() if len(v) > 1]
    if len(by_unit) > 1:
        parts.append(f"not compared across units ({', '.join(sorted(by_unit))})")
    return "; ".join(parts)


@register("attribution", AttributionParams)
def attribution(rows: pd.DataFrame, gate: GateEntry, p: AttributionParams) -> GateResult:
    """Which mechanism earned a win, decided by ablation (seed 000: "the win was four slots,
    not the prefix cache").

    The win is the subject against the baseline arms other than the ablation (intervals,
    error rates and n as in `gates.compare`). With an ablation arm (the subject's recipe
    with the claimed mechanism off) the mechanism is credited (`pass`) only when switching
    it off costs the win: the subject beats its ablation by at least `min_gain` (the gain's
    whole interval), the ablation does not itself keep the win, and, for the cache, its
    counters do not say it never hit (then the difference came from elsewhere, such as load
    drifting between runs, and the verdict is inconclusive). When the ablation
    keeps the win (its own gain over the baseline clears `min_gain`) and switching off
    costs less than that, the claim fails. Anything between -- the mechanism worth part of
    the win -- is inconclusive.

    Without an ablation arm the verdict is never `pass`: counters (cache hits, with their
    unit) can only argue by elimination ("0 hits: the cache did no work"), so that argument
    is reported, labelled as such, with the verdict `inconclusive`.
    """
    rigor = p.of()
    subject = gate.subjects[0]
    if p.ablation is not None and p.ablation not in gate.baseline:
        return pending(f"ablation arm {p.ablation} must be listed in the gate's baseline")
    reference = [b for b in gate.baseline if b != p.ablation] or list(gate.baseline)
    if not reference:
        return pending("attribution needs a baseline arm")
    # the ablation may be the baseline itself: the subject differs from it only by the
    # mechanism (llama.cpp S3 vs S1: slots), so the win is what switching it off costs
    sole = p.ablation is not None and reference == [p.ablation]
    sel = Selector(metric=p.metric, probe=p.probe, scenario=p.scenario, context=p.context)
    hib = not p.lower_is_better
    win = compare.compare(rows, [subject], reference, sel, higher_is_better=hib, threshold=p.min_gain, rigor=rigor)
    if win.missing:
        return pending(win.missing)
    arms = [subject, *reference, *([p.ablation] if p.ablation else [])]
    counters = {a: _counters(rows, a, p) for a in arms}
    evidence: dict[str, Any] = {
        **win.evidence(), "claim": p.claim, "subject": subject, "reference": reference, "ablation": p.ablation,
        "counters": counters,
    }
    counter_txt = _counter_text(subject, counters[subject])
    compared = _counters_compared(counters)
    if compared:
        counter_txt += f" ({compared})"
    head = win.text()
    if win.verdict == Verdict.FAIL:
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}: no win to credit to anything", evidence=evidence)
    if win.verdict != Verdict.PASS:
        return GateResult(verdict=Verdict.INCONCLUSIVE, reason=f"{head}: the win itself is not established", evidence=evidence)
    if p.ablation is None:
        return GateResult(verdict=Verdict.INCONCLUSIVE, reason=f"{head}; {_elimination(p, subject, counters[subject])}; {counter_txt}", evidence=evidence)
    no_hits = p.claim == "cache" and (counters[subject] is None or counters[subject]["hits"] < p.min_hits)
    made = ("reports no cache counters" if counters[subject] is None else f"made {int(counters[subject]['hits'])} cache hits") if no_hits else ""
    claim = _Claim(p, subject, p.ablation, reference, sel, rigor, win, evidence, head, counter_txt, no_hits, made)
    return _credit_sole(claim) if sole else _credit_by_ablation(rows, claim)


@dataclass(frozen=True)
class _Claim:
    """What deciding a credit by ablation reads: the gate's parameters, the arms, the
    established win (`head` its words), the evidence so far and the subject's counters
    (`no_hits`: a cache claim whose cache never hit, `made` says so)."""

    p: AttributionParams
    subject: str
    ablation: str
    reference: list[str]
    sel: Selector
    rigor: Rigor
    win: compare.Outcome
    evidence: dict[str, Any]
    head: str
    counter_txt: str
    no_hits: bool
    made: str

    def result(self, verdict: Verdict, reason: str) -> GateResult:
        return GateResult(verdict=verdict, reason=f"{reason}; {self.counter_txt}", evidence=self.evidence)


def _credit_sole(c: _Claim) -> GateResult:
    """The ablation is the only baseline: the subject differs from it by the mechanism
    alone, so switching it off costs the whole win, unless a cache that never hit did no
    work (the difference came from elsewhere)."""
    if c.no_hits:
        return c.result(Verdict.INCONCLUSIVE, f"{c.head}; but {c.subject} {c.made}: the cache cannot be credited (drift between runs?)")
    return c.result(Verdict.PASS, f"{c.head}; {c.ablation} is {c.subject} with {c.p.claim} off, so switching it off costs "
                                  f"the whole win: the win was the {c.p.claim}")


def _credit_by_ablation(rows: pd.DataFrame, c: _Claim) -> GateResult:
    """The ablation beside other baselines: credited when switching the mechanism off
    costs the win (subject vs ablation) and the ablation does not keep it (ablation vs
    the reference); failed when the ablation keeps it and costs less; else inconclusive."""
    p, subject, ablation, evidence = c.p, c.subject, c.ablation, c.evidence
    hib = not p.lower_is_better
    kept = compare.compare(rows, [ablation], c.reference, c.sel, higher_is_better=hib, threshold=p.min_gain, rigor=c.rigor)
    cost = compare.compare(rows, [subject], [ablation], c.sel, higher_is_better=hib, threshold=p.min_gain, rigor=c.rigor)
    if kept.missing or cost.missing:
        return pending(kept.missing or cost.missing, **evidence)
    evidence["ablation_vs_reference"] = kept.evidence()
    evidence["subject_vs_ablation"] = cost.evidence()
    off = f"{ablation} ({p.claim} off)"
    numbers = f"{c.head}; {off}: {kept.text(need=False).split(': ', 1)[1]}; {subject} vs {ablation}: {cost.text(need=False).split(': ', 1)[1]}"
    ablation_stats = [s for s in kept.used_cells() if s.arm == ablation]
    if any(compare.flaky(s, c.rigor) for s in ablation_stats):
        note = "; ".join(compare.error_note(s, c.rigor) for s in ablation_stats if compare.flaky(s, c.rigor))
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; ablation {note}: its numbers leave its failures out")
    if kept.verdict == Verdict.PASS:
        if cost.verdict == Verdict.PASS:
            return c.result(Verdict.INCONCLUSIVE, f"{numbers}; switching the {p.claim} off costs {subject} some of it, "
                                                  f"but {ablation} still wins: the {p.claim} is only part of the win")
        # the claim fails on the ablation's own win: that comparison's p is the fail's
        evidence.update(p_fail=kept.evidence().get("p_pass", 1.0), statistical_fail=True)
        return c.result(Verdict.FAIL, f"{numbers}; switching the {p.claim} off keeps the win: the win was not the {p.claim}")
    if cost.verdict == Verdict.PASS and kept.verdict != Verdict.FAIL:
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; switching the {p.claim} off costs the win, but whether {ablation} "
                                              f"keeps it is undecided: the credit waits on the ablation's own result")
    if cost.verdict == Verdict.PASS and c.no_hits:
        # the counters contradict the ablation: a cache that never hit did no work
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; switching the cache off costs the win, but {subject} {c.made}: "
                                              f"the difference is not the cache's doing (drift between runs?)")
    if cost.verdict == Verdict.PASS:
        evidence["p_pass"] = max(c.win.evidence()["p_pass"], cost.evidence()["p_pass"], kept.evidence()["p_fail"])
        return c.result(Verdict.PASS, f"{numbers}; switching the {p.claim} off costs the win: the win was the {p.claim}")
    notes = list(dict.fromkeys(n for comparison in (*kept.comparisons, *cost.comparisons) for n in comparison.notes))
    tail = f"; {'; '.join(notes)}" if notes else ""
    return c.result(Verdict.INCONCLUSIVE, f"{numbers}; the ablation does not decide it: switching the {p.claim} off costs "
                                          f"neither surely the {need(p)} win nor surely less while {ablation} keeps it{tail}")


def need(p: AttributionParams) -> str:
    return pct(-p.min_gain if p.lower_is_better else p.min_gain)


def _elimination(p: AttributionParams, subject: str, c: dict[str, Any] | None) -> str:
    """The argument from counters alone, labelled: it can rule a cache out, never credit."""
    label = "by elimination only (no ablation arm)"
    if c is None:
        return f"{label}: {subject} reports no cache counters, so not even that can be argued"
    if p.claim == "cache":
        if c["hits"] < p.min_hits:
            return f"{label}: the cache made {int(c['hits'])} hits, so it did no work on {subject}; an ablation arm would decide it"
        return f"{label}: the cache hit, but only an ablation arm can say whether the hits earned the win"
    if p.claim == "slots":
        if c["hits"] < p.min_hits:
            return f"{label}: the cache made {int(c['hits'])} hits, which leaves the slots; an ablation arm would decide it"
        return f"{label}: slots and cache both worked; only an ablation arm can credit one of them"
    return f"{label}: counters cannot credit {p.claim}; name an ablation arm"
