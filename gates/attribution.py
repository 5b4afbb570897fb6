"""Attribution: which mechanism earned a win, decided by ablation (seed 000: "the win was
four slots, not the prefix cache": the cache had zero hits).

Why a module of its own: it is the one predicate that reads three kinds of evidence, the
comparisons of `gates.compare` (the win, the ablation's own win, what switching the
mechanism off costs), the server's counters (cache hits, with their unit; drafted and
accepted tokens) and where each attempt ran and what it served. It must never credit a
mechanism the counters say did no work, and never an ablation that differs from its
subject in more than the mechanism: a slower host or another model loses a win by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import pct
from gates import compare
from gates.cells import Selector
from gates.error_limit import error_note, flaky
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import Rigor
from gates.runs import block_of

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
    counter_scenario: str = "load"  # cache_hits / cache_lookups, and draft_tokens / accepted_tokens for speculation
    min_hits: int = Field(default=1, ge=1)


# What an ablation must share with its subject, as frame columns (the attempt's, joined by
# `Store.measurements_frame`): where it ran and what it served. Each with how a reason says
# it for the subject and for the ablation, and which rule a difference breaks.
PLACEMENT = "an ablation must share the subject's placement"
MODEL = "an ablation must serve the subject's model"
SHARED: tuple[tuple[str, str, str, str], ...] = (
    ("host", "ran on", "on", PLACEMENT),
    ("machine", "ran on machine", "on machine", PLACEMENT),
    ("device_lease", "held device", "device", PLACEMENT),
    ("served_model", "served", "", MODEL),
    ("fingerprint", "answered with fingerprint", "with", MODEL),
)


def _device(lease: str) -> str:
    """The device a lease was held on: a lease is `<device limit>/<lease id>`
    (`flows.devices.DeviceLock.token`), the id new for every lease, the limit one per device."""
    return lease.rpartition("/")[0] or lease


def _counter(rows: pd.DataFrame, arm: str, metric: str, probe: str, scenario: str) -> tuple[float, str] | None:
    """A counter delta summed over the arm's attempts, with the unit it was stored in."""
    if rows.empty:
        return None
    mask = (
        (rows["arm_id"] == arm) & (rows["metric"] == metric) & (rows["probe"] == probe) & (rows["scenario"] == scenario)
    )
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


def _drafts(rows: pd.DataFrame, arm: str, p: AttributionParams) -> dict[str, float] | None:
    """Speculation's own counters on an arm: tokens drafted and accepted, summed over its attempts."""
    drafted = _counter(rows, arm, metrics.DRAFT_TOKENS.name, p.probe, p.counter_scenario)
    accepted = _counter(rows, arm, metrics.ACCEPTED_TOKENS.name, p.probe, p.counter_scenario)
    if drafted is None or accepted is None:
        return None
    return {"drafted": drafted[0], "accepted": accepted[0]}


def _draft_text(subject: str, drafts: dict[str, dict[str, float] | None], p: AttributionParams) -> str:
    counted = ", ".join(
        f"{arm} {int(d['accepted']):,} of {int(d['drafted']):,}" for arm, d in drafts.items() if d is not None
    )
    if drafts[subject] is None:
        missing = f"{subject} reports no draft counters ({p.probe}/{p.counter_scenario})"
        return f"{missing} (draft tokens accepted: {counted})" if counted else missing
    return f"draft tokens accepted: {counted}"


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


def _values(part: pd.DataFrame, column: str) -> pd.Series:
    """A placement column as text, '' where it is missing (a frame joined from rows without it)."""
    raw = part[column]
    values = raw.astype(object).where(raw.notna(), "").astype(str)
    return values.map(_device) if column == "device_lease" else values


def _placement(
    rows: pd.DataFrame, subject: str, ablation: str, p: AttributionParams
) -> tuple[list[str], dict[str, Any]]:
    """How the ablation's attempts differ from the subject's in where they ran and what they
    served (`SHARED`), in the gate's probe: the reasons, and each column's values per arm.

    Empty values say nothing (rows from before they were recorded, a runtime that reports
    no model) and are left out. Arms that each ran in one place must have run in the same
    one; arms spread over several must hold the same places and, in every block both ran,
    the same one: a paired ratio across two hosts is partly the hosts' ratio."""
    if rows.empty or "arm_id" not in rows:
        return [], {}
    mask = rows["arm_id"].isin([subject, ablation])
    if "probe" in rows:
        mask &= rows["probe"] == p.probe
    part = rows.loc[mask]
    arm, blocks = part["arm_id"].astype(str), block_of(part)
    said: dict[str, list[str]] = {}
    found: dict[str, Any] = {}
    for column, verb, short, rule in SHARED:
        if column not in part:
            continue
        values = _values(part, column)
        known = values != ""
        held = {a: sorted(set(values[known & (arm == a)])) for a in (subject, ablation)}
        if not held[subject] or not held[ablation]:
            continue
        found[column] = held

        def say(mine: list[str], its: list[str], verb: str = verb, short: str = short) -> str:
            return f"{subject} {verb} {' and '.join(mine)}, its ablation {ablation} {short + ' ' if short else ''}{' and '.join(its)}"

        if held[subject] != held[ablation]:
            said.setdefault(rule, []).append(say(held[subject], held[ablation]))
            continue
        if len(held[subject]) == 1:
            continue
        for block in sorted(set(blocks[known])):
            here = known & (blocks == block)
            mine, its = sorted(set(values[here & (arm == subject)])), sorted(set(values[here & (arm == ablation)]))
            if mine and its and mine != its:
                said.setdefault(rule, []).append(f"in block {block} {say(mine, its)}")
                break
    return [f"{'; '.join(texts)}: {rule}" for rule, texts in said.items()], found


def _engagement(
    p: AttributionParams, arm: str, counters: dict[str, Any] | None, drafts: dict[str, float] | None
) -> tuple[str, str]:
    """What the claimed mechanism's own counters say it did on `arm`, when they say it did no
    work (fewer than `min_hits` cache hits, no drafted token accepted, or no counters to show
    otherwise), and the words that lead the conclusion; ('', '') when they show it working,
    or when the mechanism has no counter (slots)."""
    if p.claim == "cache" and (counters is None or counters["hits"] < p.min_hits):
        return ("reports no cache counters" if counters is None else f"made {int(counters['hits'])} cache hits"), ""
    if p.claim == "speculation":
        if drafts is None:
            return (
                f"reports no draft counters ({p.probe}/{p.counter_scenario})",
                "nothing shows speculation engaged, so ",
            )
        if drafts["accepted"] < 1:
            return (
                f"accepted {int(drafts['accepted']):,} of {int(drafts['drafted']):,} drafted tokens",
                "speculation never engaged, so ",
            )
    return "", ""


def attribution(rows: pd.DataFrame, gate: GateEntry, p: AttributionParams) -> GateResult:
    """Which mechanism earned a win, decided by ablation (seed 000: "the win was four slots,
    not the prefix cache").

    The win is the subject against the baseline arms other than the ablation (intervals,
    error rates and n as in `gates.compare`). With an ablation arm (the subject's recipe
    with the claimed mechanism off) the mechanism is credited (`pass`) only when switching
    it off costs the win: the subject beats its ablation by at least `min_gain` (the gain's
    whole interval), the ablation does not itself keep the win, and the mechanism's own
    counters do not say it never engaged on the subject -- the cache with fewer than
    `min_hits` hits, speculation with no drafted token accepted (`counter_scenario`'s
    counters), either with no counters at all: then the difference came from elsewhere,
    such as load drifting between runs, and the verdict is inconclusive. When the ablation
    keeps the win (its own gain over the baseline clears `min_gain`) and switching off
    costs less than that, the claim fails. Anything between -- the mechanism worth part of
    the win -- is inconclusive.

    An ablation measures the mechanism only when nothing else differs, so before any of
    that the ablation's attempts must have run where the subject's did (host, machine,
    device) and served the same model (served name, greedy fingerprint), and a speculation
    ablation must have accepted no drafts; otherwise the verdict is inconclusive, naming
    what differs. Empty values (rows from before they were recorded) are no difference.

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
        **win.evidence(),
        "claim": p.claim,
        "subject": subject,
        "reference": reference,
        "ablation": p.ablation,
        "counters": counters,
    }
    drafts = {a: _drafts(rows, a, p) for a in arms} if p.claim == "speculation" else {}
    if drafts:
        evidence["drafts"] = drafts
        counter_txt = _draft_text(subject, drafts, p)
    else:
        counter_txt = _counter_text(subject, counters[subject])
        compared = _counters_compared(counters)
        if compared:
            counter_txt += f" ({compared})"
    head = win.text()
    evidence["win_text"] = (
        head  # the family names the gate that states this win, if one does (`engine.name_stated_wins`)
    )
    if win.verdict == Verdict.FAIL:
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}: no win to credit to anything", evidence=evidence)
    if win.verdict != Verdict.PASS:
        return GateResult(
            verdict=Verdict.INCONCLUSIVE, reason=f"{head}: the win itself is not established", evidence=evidence
        )
    if p.ablation is None:
        elimination = _elimination(p, subject, counters[subject], drafts.get(subject))
        return GateResult(
            verdict=Verdict.INCONCLUSIVE, reason=f"{head}; {elimination}; {counter_txt}", evidence=evidence
        )
    differs, evidence["placement"] = _placement(rows, subject, p.ablation, p)
    still = drafts.get(p.ablation)
    if still is not None and still["accepted"] >= 1:
        differs.append(
            f"{p.ablation} accepted {int(still['accepted']):,} of {int(still['drafted']):,} drafted tokens: "
            f"speculation was not off in the ablation"
        )
    idle, never = _engagement(p, subject, counters[subject], drafts.get(subject))
    claim = _Claim(
        p, subject, p.ablation, reference, sel, rigor, win, evidence, head, counter_txt, "; ".join(differs), idle, never
    )
    return _credit_sole(claim) if sole else _credit_by_ablation(rows, claim)


@dataclass(frozen=True)
class _Claim:
    """What deciding a credit by ablation reads: the gate's parameters, the arms, the
    established win (`head` its words), the evidence so far, how the ablation differs
    from the subject in more than the mechanism (`differs`, '' when it does not) and what
    the mechanism's own counters say of the subject (`idle`: how they show it did no work,
    '' when they do not; `never`: the words that lead the conclusion)."""

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
    differs: str
    idle: str
    never: str

    def result(self, verdict: Verdict, reason: str) -> GateResult:
        return GateResult(verdict=verdict, reason=f"{reason}; {self.counter_txt}", evidence=self.evidence)


def _credit_sole(c: _Claim) -> GateResult:
    """The ablation is the only baseline: the subject differs from it by the mechanism
    alone, so switching it off costs the whole win, unless the mechanism never engaged
    (the difference came from elsewhere) or the ablation differs in more than it."""
    if c.differs:
        return c.result(Verdict.INCONCLUSIVE, f"{c.head}; but {c.differs}")
    if c.idle:
        return c.result(
            Verdict.INCONCLUSIVE,
            f"{c.head}; but {c.subject} {c.idle}: {c.never}the {c.p.claim} cannot be credited (drift between runs?)",
        )
    return c.result(
        Verdict.PASS,
        f"{c.head}; {c.ablation} is {c.subject} with {c.p.claim} off, so switching it off costs "
        f"the whole win: the win was the {c.p.claim}",
    )


def _credit_by_ablation(rows: pd.DataFrame, c: _Claim) -> GateResult:
    """The ablation beside other baselines: credited when switching the mechanism off
    costs the win (subject vs ablation) and the ablation does not keep it (ablation vs
    the reference); failed when the ablation keeps it and costs less; else inconclusive."""
    p, subject, ablation, evidence = c.p, c.subject, c.ablation, c.evidence
    hib = not p.lower_is_better
    kept = compare.compare(
        rows, [ablation], c.reference, c.sel, higher_is_better=hib, threshold=p.min_gain, rigor=c.rigor
    )
    cost = compare.compare(
        rows, [subject], [ablation], c.sel, higher_is_better=hib, threshold=p.min_gain, rigor=c.rigor
    )
    if kept.missing or cost.missing:
        return pending(kept.missing or cost.missing, **evidence)
    evidence["ablation_vs_reference"] = kept.evidence()
    evidence["subject_vs_ablation"] = cost.evidence()
    off = f"{ablation} ({p.claim} off)"

    def numbers_with(cost_notes: bool = True) -> str:
        # a conclusion that does not rest on what switching off costs leaves out why that
        # cost is undecided ("would decide it"), which would read as undecided
        return (
            f"{c.head}; {off}: {kept.text(need=False).split(': ', 1)[1]}; "
            f"{subject} vs {ablation}: {cost.text(need=False, notes=cost_notes).split(': ', 1)[1]}"
        )

    numbers = numbers_with()
    if c.differs:  # whatever the numbers say, they are not the mechanism's alone
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; but {c.differs}")
    ablation_stats = [s for s in kept.used_cells() if s.arm == ablation]
    if any(flaky(s, c.rigor) for s in ablation_stats):
        note = "; ".join(error_note(s, c.rigor) for s in ablation_stats if flaky(s, c.rigor))
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; ablation {note}: its numbers leave its failures out")
    if kept.verdict == Verdict.PASS:
        if cost.verdict == Verdict.PASS:
            return c.result(
                Verdict.INCONCLUSIVE,
                f"{numbers}; switching the {p.claim} off costs {subject} some of it, "
                f"but {ablation} still wins: the {p.claim} is only part of the win",
            )
        # the claim fails on the ablation's own win: that comparison's p is the fail's
        evidence.update(p_fail=kept.evidence().get("p_pass", 1.0), statistical_fail=True)
        return c.result(
            Verdict.FAIL,
            f"{numbers_with(cost_notes=False)}; switching the {p.claim} off keeps the win: the win was not the {p.claim}",
        )
    if cost.verdict == Verdict.PASS and kept.verdict != Verdict.FAIL:
        return c.result(
            Verdict.INCONCLUSIVE,
            f"{numbers}; switching the {p.claim} off costs the win, but whether {ablation} "
            f"keeps it is undecided: the credit waits on the ablation's own result",
        )
    if cost.verdict == Verdict.PASS and c.idle:
        # the counters contradict the ablation: a mechanism that never engaged did no work
        return c.result(
            Verdict.INCONCLUSIVE,
            f"{numbers}; switching the {p.claim} off costs the win, but {subject} {c.idle}: "
            f"{c.never}the difference is not the {p.claim}'s doing (drift between runs?)",
        )
    if cost.verdict == Verdict.PASS:
        evidence["p_pass"] = max(c.win.evidence()["p_pass"], cost.evidence()["p_pass"], kept.evidence()["p_fail"])
        return c.result(
            Verdict.PASS, f"{numbers}; switching the {p.claim} off costs the win: the win was the {p.claim}"
        )
    notes = list(dict.fromkeys(n for comparison in (*kept.comparisons, *cost.comparisons) for n in comparison.notes))
    tail = f"; {'; '.join(notes)}" if notes else ""
    return c.result(
        Verdict.INCONCLUSIVE,
        f"{numbers}; the ablation does not decide it: switching the {p.claim} off costs "
        f"neither surely the {need(p)} win nor surely less while {ablation} keeps it{tail}",
    )


def need(p: AttributionParams) -> str:
    return pct(-p.min_gain if p.lower_is_better else p.min_gain)


def _elimination(p: AttributionParams, subject: str, c: dict[str, Any] | None, drafts: dict[str, float] | None) -> str:
    """The argument from counters alone, labelled: it can rule a mechanism out, never credit."""
    label = "by elimination only (no ablation arm)"
    if p.claim == "speculation":
        if drafts is None:
            return f"{label}: {subject} reports no draft counters, so not even that can be argued"
        if drafts["accepted"] < 1:
            return (
                f"{label}: speculation accepted {int(drafts['accepted']):,} of {int(drafts['drafted']):,} drafted tokens, "
                f"so it did no work on {subject}; an ablation arm would decide it"
            )
        return f"{label}: drafts were accepted, but only an ablation arm can say whether they earned the win"
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


register(PredicateSpec("attribution", attribution, AttributionParams))
