"""What a predicate returns: a verdict, a one-line reason quoting the numbers, evidence,
and, for a gate that is a claim of the campaign's family, its p-values as typed fields.

The family (`gates.family`), planned looks (`gates.engine`), all_of and an adaptive
item's stop decide on `p_pass`, `p_fail` and `statistical_fail`, never on the evidence
dict: the evidence is what is stored and shown. Both say the same: a result made with
typed p-values writes them into its evidence under the same keys (stored verdicts and
pages read those), and a result whose evidence alone carries them (`gates.claims.gate_p`
spread into it, as the built-in predicates and a plugin's may do) gets its typed fields
from there when it is made.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from campaign.core.states import Verdict


class GateResult(BaseModel):
    verdict: Verdict
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    # the one-sided p-value of the gate's pass claim and of its fail claim (Holm-adjusted
    # within the gate); None: the gate is no claim of the campaign's family
    p_pass: float | None = None
    p_fail: float | None = None
    # False when a rule (errors, too few runs), not a test, failed it: the family does not adjust it
    statistical_fail: bool = True
    method: str = ""  # how the numbers were judged (the interval method), where the predicate says

    @property
    def comparative(self) -> bool:
        """Whether the gate is a claim of the campaign's family: it carries p-values."""
        return self.p_pass is not None

    @property
    def p_values(self) -> tuple[float, float]:
        """(p_pass, p_fail); 1.0 (no evidence either way) for a value a gate does not carry."""
        return (
            1.0 if self.p_pass is None else self.p_pass,
            1.0 if self.p_fail is None else self.p_fail,
        )

    @model_validator(mode="after")
    def _in_step(self) -> GateResult:
        """Typed fields and evidence keys agree (the module doc)."""
        ev = self.evidence
        if self.p_pass is None and "p_pass" in ev:
            self.p_pass = float(ev["p_pass"])
            self.p_fail = float(ev.get("p_fail", 1.0))
            self.statistical_fail = bool(ev.get("statistical_fail", True))
        elif self.p_pass is not None:
            ev.update(p_pass=self.p_pass, p_fail=1.0 if self.p_fail is None else self.p_fail)
            ev["statistical_fail"] = self.statistical_fail
        if self.p_pass is not None and self.p_fail is None:
            self.p_fail = 1.0
        if not self.method and isinstance(ev.get("interval_method"), str):
            self.method = ev["interval_method"]
        return self

    def with_p(self, p_pass: float, p_fail: float, **evidence: Any) -> GateResult:
        """This result with other p-values (and more evidence), both kept in step."""
        return GateResult(
            verdict=self.verdict,
            reason=self.reason,
            evidence={**self.evidence, **evidence},
            p_pass=p_pass,
            p_fail=p_fail,
            statistical_fail=self.statistical_fail,
            method=self.method,
        )


def pending(reason: str, **evidence: Any) -> GateResult:
    return GateResult(verdict=Verdict.PENDING, reason=reason, evidence=evidence)
