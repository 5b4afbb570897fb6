"""What a predicate returns: a verdict, a one-line reason quoting the numbers, evidence."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from campaign.core.states import Verdict


class GateResult(BaseModel):
    verdict: Verdict
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)


def pending(reason: str, **evidence: Any) -> GateResult:
    return GateResult(verdict=Verdict.PENDING, reason=reason, evidence=evidence)
