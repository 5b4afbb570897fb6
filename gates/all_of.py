"""The all-of predicate: several checks, each another predicate, that must all pass ("L
beats K on total time; MTP acceptance ~0.8; tool loop 2/3"), judged as one claim of the
campaign's family.

It finds its checks' predicates in the registry (`gates.registry`), so it holds no list
of them and imports none.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import Field, model_validator

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.intervals import CONFIDENCE
from gates.registry import Params, PredicateSpec, get, params_model, register
from gates.result import GateResult
from gates.rigor import alpha_of


class Check(Params):
    predicate: str
    params: dict[str, Any] = Field(default_factory=dict)
    subjects: list[str] | None = None
    baseline: list[str] | None = None
    report_only: bool = Field(default=False, description="shown in the reason, does not decide the verdict")

    @model_validator(mode="after")
    def _known(self) -> Check:
        if self.predicate == "all_of":
            raise ValueError("all_of cannot nest all_of")
        try:
            model = params_model(self.predicate)
        except KeyError:
            raise ValueError(f"unknown predicate {self.predicate!r}") from None
        model.model_validate(self.params)
        return self


class AllOfParams(Params):
    checks: list[Check] = Field(min_length=1)
    confidence: float = Field(
        default=CONFIDENCE,
        gt=0.5,
        lt=1,
        description="the level at which a check's fail fails the whole, over its deciding checks (set campaign-wide by campaign.confidence)",
    )


def all_of(rows: pd.DataFrame, gate: GateEntry, p: AllOfParams) -> GateResult:
    """Several predicates that must all pass ("L beats K on total time; MTP acceptance ~0.8;
    tool loop 2/3"); the reason joins theirs.

    The whole is one claim of the campaign's family: it passes when every deciding check
    does (the largest p_pass), and fails when any does, so a check's statistical fail
    fails the whole only where it survives Bonferroni over the deciding checks that carry
    p-values (the smallest p_fail times their number); one that does not leaves the
    whole inconclusive, saying so. A check that fails by a rule, or carries no p-value,
    fails the whole outright."""
    parts, evidence, verdicts = [], {}, []
    claims: list[tuple[str, GateResult]] = []
    ruled = False
    for i, check in enumerate(p.checks):
        deciding = not check.report_only
        sub = gate.model_copy(
            update={
                "subjects": check.subjects or gate.subjects,
                "baseline": gate.baseline if check.baseline is None else check.baseline,
                "predicate": check.predicate,
                "params": check.params,
            }
        )
        result = get(check.predicate)(rows, sub, params_model(check.predicate).model_validate(check.params))
        if deciding:
            verdicts.append(result.verdict)
            if result.comparative:
                claims.append((check.predicate, result))
            elif result.verdict == Verdict.FAIL:
                ruled = True
        parts.append(result.reason)
        evidence[f"{i}:{check.predicate}"] = {"verdict": result.verdict, **result.evidence}
    notes: list[str] = []
    p_pass: float | None = None
    p_fail: float | None = None
    if claims:
        k = len(claims)
        p_pass = max(r.p_values[0] for _, r in claims)
        p_fail = min(1.0, min(r.p_values[1] for _, r in claims) * k)
        ruled = ruled or not all(r.statistical_fail for _, r in claims if r.verdict == Verdict.FAIL)
        if ruled:
            p_fail = 0.0
        elif Verdict.FAIL in verdicts and p_fail > alpha_of(p.confidence):
            failing = [name for name, r in claims if r.verdict == Verdict.FAIL]
            notes.append(
                f"{'/'.join(failing)} fails alone, but not over the {k} deciding checks (Bonferroni, p {p_fail:.3f})"
            )
            verdicts = [Verdict.INCONCLUSIVE if v == Verdict.FAIL else v for v in verdicts]
    reason = "; ".join([*parts, *notes])
    verdict = next(
        (v for v in (Verdict.PENDING, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.CONTROL) if v in verdicts),
        Verdict.PASS,
    )
    return GateResult(
        verdict=verdict, reason=reason, evidence=evidence, p_pass=p_pass, p_fail=p_fail, statistical_fail=not ruled
    )


register(PredicateSpec("all_of", all_of, AllOfParams))
