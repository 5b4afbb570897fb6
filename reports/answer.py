"""A gate's answer in one line: what it found, with the numbers that decided it.

Why apart from the reason: a gate's reason gives every check it made, and a credit's
reason repeats the win it credits, so the answer sat in the middle of twenty lines. The
answer says the effect with its interval (or the bound read), and for a credit the
comparison that decided it (the mechanism switched off) and the mechanism's own
counters -- never the win another gate already states. `campaign status` and the
report's front page open with these lines; the reasons fold below them.

Everything here is read from the verdict's stored evidence, the numbers the gate
decided on, so the answer cannot say another number than the gate did.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

from campaign.core.units import num, pct
from campaign.store.summary import GateView, Summary
from gates.rigor import ci_label

VERDICT_WORD = {
    "pass": "PASS",
    "fail": "FAIL",
    "inconclusive": "UNSURE",
    "control": "CONTROL",
    "blocked": "BLOCKED",
    "pending": "PENDING",
}


@dataclass(frozen=True)
class Answer:
    """One gate's answer: its verdict, what it asks (the title) and what it found."""

    gate: str
    title: str
    verdict: str
    found: str

    @property
    def word(self) -> str:
        return VERDICT_WORD.get(self.verdict, self.verdict.upper())

    def lines(self, width: int, max_lines: int = 2) -> list[str]:
        """The answer wrapped to `width`, at most `max_lines` lines (the last cut with '…'
        where more would follow): the verdict word, the gate, then what it found."""
        head = f"{self.word:<7} {self.gate}: "
        body = self.found or self.title
        wrapped = textwrap.wrap(head + body, width=max(width, 30), subsequent_indent=" " * 8, break_on_hyphens=False)
        if len(wrapped) > max_lines:
            wrapped = wrapped[:max_lines]
            last = wrapped[-1]
            wrapped[-1] = (last[: max(width, 30) - 1].rstrip() + "…") if len(last) >= max(width, 30) else last + "…"
        return wrapped


def _level(evidence: dict[str, Any], arm: str | None = None) -> str:
    """'95% CI' as the gate's interval was: the level of `arm`'s cell where the evidence
    has it (an adaptive item's planned looks sharpen it, '99.2% CI'), else the gate's."""
    cells = [
        c
        for c in evidence.get("cells") or []
        if isinstance(c, dict) and c.get("arm") == arm and _finite(c.get("confidence"))
    ]
    confidence = cells[0]["confidence"] if cells else evidence.get("confidence")
    if not _finite(confidence):
        return ""
    return ci_label(float(confidence), bool(evidence.get("sequential")))


def _finite(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


def _change(c: dict[str, Any], level: str, usual: str) -> str:
    """'-57% [-59%, -55%] over 5 blocks' from one stored comparison, its level named where
    it is not the `usual` one the answer's heading states ('99.2% CI')."""
    level = "" if level == usual else level
    change, lo, hi = c.get("change"), c.get("change_low"), c.get("change_high")
    if not _finite(change):
        return "no estimate"
    blocks = f" over {c['pairs']} blocks" if c.get("pairs") else ""
    if not _finite(lo, hi):
        return f"{pct(change)} (no interval yet{blocks})"
    return f"{pct(change)} [{pct(lo)}, {pct(hi)}]{' ' + level if level else ''}{blocks}"


def _deciding(comparisons: list[dict[str, Any]], verdict: str) -> tuple[dict[str, Any], int]:
    """The comparison a verdict rests on and how many there were: a fail's first failing
    one, a pass's closest to its threshold (all passed), else the first undecided one."""
    if verdict == "fail":
        pick = [c for c in comparisons if c.get("verdict") == "fail"]
    elif verdict == "pass":
        pick = sorted(
            (c for c in comparisons if _finite(c.get("change_low"))),
            key=lambda c: (
                abs(float(c["gain"]) - float(c["threshold"])) if _finite(c.get("gain"), c.get("threshold")) else 0.0
            ),
        )
    else:
        pick = [c for c in comparisons if c.get("verdict") not in ("pass", "fail")]
    return (pick or comparisons)[0], len(comparisons)


def _comparison_text(evidence: dict[str, Any], verdict: str, usual: str) -> str:
    comparisons = [c for c in evidence.get("comparisons") or [] if isinstance(c, dict)]
    if not comparisons:
        return ""
    c, n = _deciding(comparisons, verdict)
    metric = evidence.get("metric") or ""
    more = f" (1 of {n} comparisons)" if n > 1 else ""
    return f"{c.get('subject')} vs {c.get('baseline')}: {metric} {_change(c, _level(evidence, c.get('subject')), usual)}{_needs(c, evidence)}{more}".replace(
        "  ", " "
    )


def _needs(c: dict[str, Any], evidence: dict[str, Any]) -> str:
    """', needs >= +10%': the threshold the change was held to, the way the change reads
    (a lower-is-better metric's gain of 20% is a change of -20% or less)."""
    threshold = c.get("threshold")
    if not _finite(threshold):
        return ""
    t = float(threshold)
    if evidence.get("higher_is_better", True):
        return f", needs >= {pct(t) if t else '0%'}"
    return f", needs <= {pct(-t) if t else '0%'}"


def _counters_text(evidence: dict[str, Any], subject: str) -> str:
    """The mechanism's own counters on the subject, the arms beside it in the same unit."""
    drafts = evidence.get("drafts") or {}
    if evidence.get("claim") == "speculation" or drafts:
        d = drafts.get(subject)
        return (
            f"drafts accepted {int(d['accepted']):,} of {int(d['drafted']):,} on {subject}"
            if d
            else f"no draft counters on {subject}"
        )
    counters = evidence.get("counters") or {}
    own = counters.get(subject)
    if not own:
        return f"no cache counters on {subject}" if counters else ""
    unit = own.get("unit") or "count"
    others = [
        f", {arm} {int(c['hits'])}"
        for arm, c in counters.items()
        if arm != subject and c and c.get("unit") == own.get("unit")
    ]
    return f"cache hits: {subject} {int(own['hits'])} of {int(own['lookups'])}{''.join(others)} ({unit})"


def _credit_text(evidence: dict[str, Any], verdict: str, usual: str) -> str:
    """A credit by ablation: what switching the mechanism off did, and its counters."""
    claim, subject, ablation = (
        evidence.get("claim") or "mechanism",
        evidence.get("subject") or "",
        evidence.get("ablation"),
    )
    counters = _counters_text(evidence, subject)
    cost = evidence.get("subject_vs_ablation")
    conclusion = {"pass": f"the win was the {claim}", "fail": f"not the {claim}"}.get(verdict, "not settled")
    parts = [conclusion]
    if isinstance(cost, dict) and cost.get("comparisons"):
        c, _ = _deciding(list(cost["comparisons"]), "")
        parts.append(f"{subject} vs {ablation} {_change(c, _level(cost, subject) or _level(evidence, subject), usual)}")
    elif not ablation:
        parts.append("no ablation arm, so counters alone")
    if counters:
        parts.append(counters)
    return "; ".join(parts)


def _bound_text(evidence: dict[str, Any], usual: str) -> str:
    """A bound's cells: each arm's value with its interval, against the bound."""
    cells = [
        c for c in evidence.get("cells") or [] if isinstance(c, dict) and c.get("role", "subject") in ("subject", "")
    ]
    if not cells:
        return ""
    level = _level(evidence) or (ci_label(float(cells[0]["confidence"])) if _finite(cells[0].get("confidence")) else "")
    level = "" if level == usual else level
    shown, any_interval = [], False
    several = len({c.get("arm") for c in cells}) < len(cells)  # an arm in several cells: name the cell
    for c in cells[:3]:
        value = num(c["median"]) if _finite(c.get("median")) else "?"
        interval = f" [{num(c['low'])}, {num(c['high'])}]" if _finite(c.get("low"), c.get("high")) else ""
        any_interval = any_interval or bool(interval)
        where = f" {c.get('scenario')}" if several and c.get("scenario") else ""
        shown.append(f"{c.get('arm')}{where} {value}{interval}")
    more = f" and {len(cells) - 3} more" if len(cells) > 3 else ""
    op, bound = evidence.get("op"), evidence.get("threshold", evidence.get("bound"))
    against = f" (needs {op} {num(bound)})" if op and _finite(bound) else ""
    return f"{cells[0].get('metric') or evidence.get('metric', '')} {', '.join(shown)}{more}{' ' + level if level and any_interval else ''}{against}".strip()


def _first_clause(reason: str) -> str:
    return reason.split("; ", 1)[0].strip()


def answer_of(gate: GateView, usual: str = "") -> Answer:
    """The gate's answer; an interval at the `usual` level ('95% CI', what the heading
    says) is not labelled, one at another level is."""
    ev, verdict = gate.evidence or {}, str(gate.verdict)
    if verdict in ("pending", "blocked") or not ev:
        found = _first_clause(gate.reason)
    elif "claim" in ev and "counters" in ev:
        found = _credit_text(ev, verdict, usual)
    else:
        found = _comparison_text(ev, verdict, usual) or _bound_text(ev, usual) or _first_clause(gate.reason)
    return Answer(gate=gate.id, title=gate.title, verdict=verdict, found=found)


def usual_level(summary: Summary) -> str:
    """The campaign's interval level, '95% CI': what the answer's heading states once."""
    return ci_label(summary.spec.campaign.confidence)


def answers(summary: Summary) -> list[Answer]:
    usual = usual_level(summary)
    return [answer_of(g, usual) for g in summary.gates]


def question(summary: Summary) -> str:
    """What the campaign asks, where its file says (`[campaign] question`); '' otherwise,
    and each gate's title says what it asks."""
    return summary.spec.campaign.question
