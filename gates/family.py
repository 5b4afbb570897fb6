"""The campaign's claims as one family: Holm's method over the gates' p-values.

Why: each gate decides at (1 - confidence) / 2 per claim, so a campaign of ten gates on
identical arms would pass one of them far more often than that. Every gate whose result
carries `p_pass` and `p_fail` (`GateResult.comparative`, from `gates.claims.gate_p`: the
comparative gates, and the bounds on one arm, each with the p-values of its own tests)
is a member of one family unless it is marked `exploratory`; the pass claims and the
fail claims are each adjusted by Holm's step-down method (`gates.holm`), which controls
the family-wise error at alpha without assuming the gates independent. A gate's p-values are those of the
claims that decide it (a guard's fail is the guard's test, not the gain's), so what
fails alone for a reason the family can see still fails over it. A verdict that does not
survive becomes inconclusive; adjustment never turns an inconclusive verdict into a
decision. Every member's reason says how large the family is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.holm import holm
from gates.result import GateResult
from gates.rigor import alpha_of


def planned_members(gates: Sequence[GateEntry]) -> list[GateEntry]:
    """The gates that can join the family: every one not exploratory, less a `control`
    gate that only characterises. An upper bound on its size before anything ran (Holm
    adjusts only over the members measured so far, those whose results carry p-values),
    so that an item stopping at alpha / (this size) is never undone; counting a gate that
    turns out to carry none (a plugin's without p-values) only makes that stop stricter."""
    return [
        g for g in gates if not g.exploratory and not (g.predicate == "control" and g.params.get("role") == "control")
    ]


def adjust(results: Mapping[str, GateResult], gates: Sequence[GateEntry], confidence: float) -> dict[str, GateResult]:
    """`results` by gate id, with the family's verdicts Holm-adjusted (see the module doc)."""
    alpha = alpha_of(confidence)
    by_id = {g.id: g for g in gates}
    members = [
        gid
        for gid, r in results.items()
        if r.comparative
        and gid in by_id
        and not by_id[gid].exploratory
        and r.verdict in (Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE)
    ]
    out = dict(results)
    for gid, r in results.items():
        if r.comparative and gid in by_id and by_id[gid].exploratory:
            out[gid] = r.model_copy(
                update={"reason": f"{r.reason}; exploratory: outside the family, no multiplicity control"}
            )
    m = len(members)
    if not m:
        return out
    passes = holm([results[g].p_values[0] for g in members], alpha)
    fails = holm([results[g].p_values[1] for g in members], alpha)
    for gid, (pass_ok, p_pass_adj), (fail_ok, p_fail_adj) in zip(members, passes, fails):
        r = results[gid]
        verdict, reason = r.verdict, r.reason
        family = f"family of {m} gate{'s' if m != 1 else ''}, Holm"
        if verdict == Verdict.PASS and not pass_ok:
            verdict, reason = (
                Verdict.INCONCLUSIVE,
                f"{reason}; passes alone, but not over the {family} (adjusted p {p_pass_adj:.3f} > {alpha:.3f})",
            )
        elif verdict == Verdict.FAIL and r.statistical_fail and not fail_ok:
            verdict, reason = (
                Verdict.INCONCLUSIVE,
                f"{reason}; fails alone, but not over the {family} (adjusted p {p_fail_adj:.3f} > {alpha:.3f})",
            )
        elif m > 1:
            reason = f"{reason}; {family}"
        evidence = {**r.evidence, "family_size": m, "p_pass_adjusted": p_pass_adj, "p_fail_adjusted": p_fail_adj}
        out[gid] = r.model_copy(update={"verdict": verdict, "reason": reason, "evidence": evidence})
    return out


@dataclass(frozen=True)
class HolmLevel:
    """The family's planned size and the least Holm level of one of its claims."""

    members: int
    level: float

    def admits(self, p: float) -> bool:
        """Whether a claim's deciding p is within the level: no Holm adjustment can undo it."""
        return p <= self.level


def least_holm_level(gates: Sequence[GateEntry], gate: GateEntry, confidence: float) -> HolmLevel:
    """`gate`'s alpha (its own `confidence`, else the campaign's) over the size of the
    family the campaign's gates can form (`planned_members`, at least 1)."""
    members = max(1, len(planned_members(gates)))
    return HolmLevel(members, alpha_of(float(gate.params.get("confidence", confidence))) / members)
