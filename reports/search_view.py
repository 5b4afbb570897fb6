"""A search's answer in words: the confirmed winner with its interval over fresh runs,
against the base and each runner-up, beside what the search itself claimed.

Why both numbers: the search's estimate of its best arm comes from one run of each of
many arms, and the best of many noisy runs looks better than it is (the winner's curse).
The confirmed number comes from fresh server runs only, decided by the ordinary gates;
printing them side by side shows the user how much of the search's claim survived.
Read by `campaign status` and the report's search page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from campaign.core.search import BEATS_BASE, describe
from campaign.core.units import num, pct
from campaign.store.study import SearchSummary, TrialView
from campaign.store.summary import GateView, Summary


@dataclass(frozen=True)
class SearchAnswer:
    verdict: str  # the beats-base gate's verdict ('pending' before the confirmation decided)
    headline: str  # the winner and its confirmed gain, the runner-ups after it
    claimed: str  # what the search's own runs said
    progress: str  # trials, starts and budget, why it stopped


def _comparison(gate: GateView) -> dict[str, Any]:
    comps = [c for c in gate.evidence.get("comparisons") or [] if isinstance(c, dict)]
    return comps[0] if comps else {}


def _interval(c: dict[str, Any]) -> str:
    change, lo, hi = c.get("change"), c.get("change_low"), c.get("change_high")
    if not isinstance(change, (int, float)) or not math.isfinite(change):
        return "no estimate yet"
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and math.isfinite(lo) and math.isfinite(hi):
        return f"{pct(change)} [{pct(lo)}, {pct(hi)}]"
    return f"{pct(change)} (no interval yet)"


def label(search: SearchSummary, arm_id: str) -> str:
    """'S-0fd95e (prefill_chunk 256, slots 5)': an arm with the fields that made it."""
    params = next((t.params for t in search.trials if t.arm_id == arm_id and t.params), None)
    return f"{arm_id} ({describe(params)})" if params else arm_id


def search_answer(summary: Summary, search: SearchSummary) -> SearchAnswer:
    gates = {g.id: g for g in summary.gates}
    progress = _progress(search)
    claimed = _claimed(search)
    metric = search.objectives[0]
    if not search.finished:
        best = search.best()
        head = (
            f"searching: best so far {label(search, best.arm_id)} {metric} {num(best.values[0])} (one run)"
            if best
            else "searching: no trial arm measured yet"
        )
        return SearchAnswer("pending", head, claimed, progress)
    if not search.confirmed:
        return SearchAnswer(
            "inconclusive", "no trial arm but the base met the constraints: nothing to confirm", claimed, progress
        )
    winner = search.confirmed[0]
    main = gates.get(BEATS_BASE)
    if main is None:
        return SearchAnswer("pending", f"confirming {label(search, winner)}", claimed, progress)
    c = _comparison(main)
    runs = (
        f" {'95% CI ' if c.get('change_low') is not None else ''}over {c.get('pairs')} fresh runs"
        if c.get("pairs")
        else ""
    )
    parts = [f"{label(search, winner)} {metric} {_interval(c)}{runs} vs base {search.base_id}: {main.verdict}"]
    for gate_id, gate in gates.items():
        if gate_id.startswith("search-vs-") and gate.subjects == [winner] and gate.evidence.get("metric") == metric:
            other = gate.baseline[0] if gate.baseline else "?"
            parts.append(f"vs {other}: {gate.verdict} ({_interval(_comparison(gate))})")
    return SearchAnswer(str(main.verdict), "; ".join(parts), claimed, progress)


def _claimed(search: SearchSummary) -> str:
    gain = search.pick.get("search_gain")
    if not search.confirmed or not isinstance(gain, (int, float)):
        return ""
    return (
        f"the search's own runs said {pct(gain)} for {search.confirmed[0]} (one run each, the base two; "
        f"the best of many noisy runs looks better than it is: the confirmed number above is the one to use)"
    )


def _progress(search: SearchSummary) -> str:
    arms = {t.arm_id for t in search.trials if t.state in ("complete", "failed")}
    failed = len(search.failed)
    head = f"{len(search.trials)} trials ({len(arms)} arms" + (f", {failed} failed" if failed else "") + ")"
    if search.stopped:
        head += f"; stopped: {search.stopped}"
    else:
        head += f"; {search.starts} server starts spent of {search.budget}"
    if search.pick.get("why"):
        head += f"; confirming {search.pick['why']}"
    return head


def trial_rows(search: SearchSummary) -> list[TrialView]:
    """The trials in the order they were proposed."""
    return sorted(search.trials, key=lambda t: t.number)
