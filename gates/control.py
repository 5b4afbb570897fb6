"""The control predicate: subjects against control arms, no control ahead by more than
`max_advantage` ("T promoted; U just control, no advantage > 5%"), or, with role
`control`, only characterised.

It builds its comparisons itself (each control against each subject, per common cell)
through the comparison primitive (`gates.compare`), and writes its reason in the seed's
style, numbers first.
"""

from __future__ import annotations

from typing import Literal

import pandas as pd
from pydantic import Field

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import pct
from gates import compare, shared_cells
from gates.cells import Cell, CellStat, Selector
from gates.claims import Claim, gate_p, holm_fails, worst
from gates.error_limit import subject_errors
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import Rigor


class ControlParams(Selector, Rigor):
    max_advantage: float = Field(default=0.05, ge=0, description="a control may not beat the subject by more")
    higher_is_better: bool = True
    role: Literal["promote", "control"] = Field(
        default="promote",
        description="promote: pass when no control beats the subjects; control: only characterize (verdict control)",
    )


def _judge_control(cmp: compare.Comparison, subjects: list[CellStat], shaky: list[str], rigor: Rigor) -> None:
    """One subject's verdict on one comparison, alone, set on it: the comparison is the
    control's advantage, the verdict the subject's, so its own p_pass ("the control surely
    beats the subject by more than max_advantage") is the subject's fail and its p_fail
    ("surely not") the subject's pass. `_control_claim` combines a control's comparisons."""
    mine: list[str] = []
    cmp.p_pass, cmp.p_fail = cmp.p_fail, cmp.p_pass
    dead = [f"{s.arm} failed every request at {s.cell.key()}: cannot be promoted" for s in subjects if s.all_failed]
    ruled = [
        r for s in subjects if not s.all_failed and (r := subject_errors(s, rigor, "cannot be promoted")) is not None
    ]
    if dead or any(v == Verdict.FAIL for v, _ in ruled):
        v = Verdict.FAIL
        mine = dead + [note for verdict, note in ruled if verdict == Verdict.FAIL]
        cmp.statistical, cmp.p_fail, cmp.p_pass = False, 0.0, 1.0
    elif ruled:
        v, mine = Verdict.INCONCLUSIVE, [note for _, note in ruled]
        cmp.statistical = False
    elif shaky:
        v, mine = Verdict.INCONCLUSIVE, [f"control {n}: its numbers cannot decide" for n in shaky]
        cmp.statistical = False
    elif not cmp.n_ok or not cmp.statistical:
        v, mine = Verdict.INCONCLUSIVE, cmp.notes
        cmp.statistical = False
    elif cmp.p_pass <= rigor.alpha:
        v = Verdict.PASS
    elif cmp.p_fail <= rigor.alpha:
        v = Verdict.FAIL
    else:
        v = Verdict.INCONCLUSIVE
    cmp.verdict, cmp.notes = v, mine


def _control_claim(
    control_arm: str, where: str, cmps: list[compare.Comparison], max_advantage: float, rigor: Rigor
) -> tuple[Claim, compare.Comparison]:
    """One control in one cell against every subject (`cmps`, one each), as one claim,
    and the comparison its verdict rests on (the one the reason shows).

    Pass, "no control beats the best subject by more than max_advantage", holds when it
    holds for ANY subject: a union of the per-subject claims, so each is tested and the
    smallest p is Bonferroni-adjusted over the subjects (which subject is best is not
    chosen from the data). Fail, "the control beats every subject by more", needs each
    subject's fail at alpha (intersection-union: the largest p, no adjustment)."""
    what = f"control {control_arm}{' ' + where.rstrip(':') if where else ''}"
    ruled = [c for c in cmps if not c.statistical]
    if ruled:
        deciding = next((c for c in ruled if c.verdict == Verdict.FAIL), ruled[0])
        return Claim(what, deciding.verdict, deciding.p_pass, deciding.p_fail, False, list(deciding.notes)), deciding
    k = len(cmps)
    strongest = min(cmps, key=lambda c: c.p_pass)  # the subject the pass claim rests on
    closest = max(cmps, key=lambda c: c.p_fail)  # the subject the fail claim rests on
    p_pass, p_fail = min(1.0, strongest.p_pass * k), closest.p_fail
    if p_pass <= rigor.alpha:
        return Claim(what, Verdict.PASS, p_pass, p_fail), strongest
    if p_fail <= rigor.alpha:
        return Claim(what, Verdict.FAIL, p_pass, p_fail), closest
    subject = strongest.baseline.arm
    if strongest.estimate is not None and strongest.estimate.on_bound(strongest.bound):
        note = compare.tie_note(strongest, "advantage")
    elif strongest.p_pass <= rigor.alpha:
        note = (
            f"{control_arm}'s advantage over {subject} is within {pct(max_advantage)} alone, but not over the {k} "
            f"subjects (Bonferroni: which is best is not known before the runs)"
        )
    else:
        note = f"{control_arm}'s advantage CI straddles {pct(max_advantage)}"
    return Claim(what, Verdict.INCONCLUSIVE, p_pass, p_fail, notes=[note]), strongest


def control(rows: pd.DataFrame, gate: GateEntry, p: ControlParams) -> GateResult:
    """Subjects against control arms ("T promoted; U just control, no advantage > 5%"), per
    common cell: each control is compared with every subject, and the subjects are
    promoted (pass) when no control's advantage over the best of them can exceed
    `max_advantage` (`_control_claim`: Bonferroni over the subjects); a control surely
    ahead of every subject by more fails them; otherwise, or with fewer than `min_runs`
    runs, the gate is inconclusive. The controls' fails are Holm-adjusted over controls
    and cells."""
    if not gate.baseline:
        return pending("control needs control arms in baseline")
    rigor = p.of()
    sel = p.selector()
    stats, missing = shared_cells.arm_stats(
        rows, sel, [*gate.subjects, *gate.baseline], rigor.confidence, rigor.sequential
    )
    if missing:
        return missing
    cells = shared_cells.shared_by_all(stats)
    shaky = shared_cells.unreliable(stats, [a for a in gate.baseline if a not in gate.subjects], rigor)
    label = compare.cell_labeller(cells)
    subjects = list(dict.fromkeys(gate.subjects))
    comparisons: list[compare.Comparison] = []
    claims: list[tuple[str, Cell, Claim, compare.Comparison]] = []
    parts: list[str] = []
    for cell in cells:
        subj = [stats[a][cell] for a in subjects]
        shown = []
        for c in gate.baseline:
            cmps = [compare.compare_cells(stats[c][cell], s, p.higher_is_better, p.max_advantage, rigor) for s in subj]
            for cmp in cmps:
                _judge_control(cmp, subj, shaky, rigor)
            comparisons += cmps
            claim, deciding = _control_claim(c, label(cell), cmps, p.max_advantage, rigor)
            claims.append((c, cell, claim, deciding))
            change, lo, hi = deciding.change
            shown.append(
                f"{c} {pct(change)} [{pct(lo)}, {pct(hi)}] over {deciding.baseline.arm} {compare.fmt_stat(deciding.baseline)}"
            )
        where = label(cell)
        parts.append((where + " " if where else "") + ", ".join(shown))
    holm_fails([claim for _, _, claim, _ in claims], rigor, "controls and cells")
    verdicts = [claim.verdict for _, _, claim, _ in claims]
    notes = list(dict.fromkeys(n for _, _, claim, _ in claims for n in claim.notes))
    if len(subjects) > 1 and p.role == "promote":
        notes.append(
            f"each control tested against each of the {len(subjects)} subjects (a pass needs one, Bonferroni; a fail all)"
        )
    evidence = shared_cells.comparisons_evidence(
        comparisons,
        rigor,
        p.metric,
        {
            "max_advantage": p.max_advantage,
            "role": p.role,
            "claims": [
                {"control": c, "cell": cell.key(), "subject": d.baseline.arm, **claim.evidence()}
                for c, cell, claim, d in claims
            ],
            **gate_p([claim for _, _, claim, _ in claims]),
        },
    )
    if p.role == "control":
        for key in ("p_pass", "p_fail", "statistical_fail"):
            evidence.pop(key, None)  # characterises only: not a claim of the family
    numbers = f"{p.metric} " + "; ".join(parts)
    tail = ("; " + "; ".join(dict.fromkeys(notes))) if notes else ""
    if p.role == "control":
        subj_txt = ", ".join(f"{a} {compare.fmt_stat(stats[a][c])}" for c in cells for a in gate.subjects)
        ctrl_txt = ", ".join(f"{a} {compare.fmt_stat(stats[a][c])}" for c in cells for a in gate.baseline)
        reason = f"{p.metric} {subj_txt} vs {ctrl_txt}: " + "; ".join(parts) + tail
        return GateResult(verdict=Verdict.CONTROL, reason=reason, evidence=evidence)
    verdict = worst(verdicts)
    if verdict == Verdict.FAIL and not any("cannot be promoted" in n for n in notes):
        beating = sorted({c for c, _, claim, _ in claims if claim.verdict == Verdict.FAIL})
        return GateResult(
            verdict=Verdict.FAIL,
            reason=f"control {'/'.join(beating)} beats {'/'.join(gate.subjects)} by more than {pct(p.max_advantage)} ({numbers}){tail}",
            evidence=evidence,
        )
    if verdict == Verdict.PASS:
        reason = f"{'/'.join(gate.subjects)} promoted; {'/'.join(gate.baseline)} just control, no advantage > {p.max_advantage * 100:.0f}% ({numbers}){tail}"
    else:
        reason = f"{'/'.join(gate.subjects)} vs control {'/'.join(gate.baseline)}: {numbers}{tail}"
    return GateResult(verdict=verdict, reason=reason, evidence=evidence)


register(PredicateSpec("control", control, ControlParams))
