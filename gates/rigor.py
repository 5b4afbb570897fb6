"""What a gate's claims are held to: the least server runs, the most errors, the
confidence, and how an interval at that confidence is named.

Every comparative predicate's params extend `Rigor`, so the campaign fills in its
confidence (and, for an item that adds blocks, the sequential design) in one place
(`gates.engine.params_for`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gates.cells import CellStat
from gates.intervals import CONFIDENCE

DEFAULT_MIN_RUNS = 3
DEFAULT_MAX_ERROR_RATE = 0.05
EPS = 1e-9


def alpha_of(confidence: float) -> float:
    """The one-sided error of each claim (pass, fail) a `confidence` CI decides."""
    return (1.0 - confidence) / 2


def ci_label(confidence: float, sequential: bool = False) -> str:
    """'95% CI', or '95% CS' for a confidence sequence (an interval valid at every block count)."""
    kind = "CS" if sequential else "CI"
    return f"{confidence:.0%} {kind}" if round(confidence * 100, 6).is_integer() else f"{confidence:.1%} {kind}"


def is_sequential(stat: Any) -> bool:
    """Whether a cell stat's or a comparison's interval is a confidence sequence."""
    est = getattr(stat, "estimate", None)
    return bool(est is not None and est.sequential)


class Rigor(BaseModel):
    """What every comparative predicate takes: the least number of server runs, the most
    errors, the confidence (the campaign's unless the gate sets its own)."""

    model_config = ConfigDict(extra="forbid")

    min_runs: int = Field(
        default=DEFAULT_MIN_RUNS,
        ge=2,
        description="fewer server runs (blocks) than this in a cell is inconclusive; 2 is the least a spread can come from",
    )
    max_error_rate: float = Field(
        default=DEFAULT_MAX_ERROR_RATE,
        ge=0,
        le=1,
        description="an arm failing more of its requests than this cannot pass",
    )
    confidence: float = Field(
        default=CONFIDENCE, gt=0.5, lt=1, description="the CI level (set campaign-wide by campaign.confidence)"
    )
    sequential: bool = Field(
        default=False,
        description="intervals are confidence sequences, valid however often they are looked at (set for a gate fed by an "
        "item with max_blocks; set it yourself when you add blocks until a verdict shows)",
    )

    @property
    def alpha(self) -> float:
        return alpha_of(self.confidence)

    def of(self) -> Rigor:
        """Just the rigor fields of a params model that extends this one."""
        return Rigor(
            min_runs=self.min_runs,
            max_error_rate=self.max_error_rate,
            confidence=self.confidence,
            sequential=self.sequential,
        )


def runs_note(stats: Iterable[CellStat], rigor: Rigor) -> str:
    short = [f"{s.arm} has {s.n} run{'s' if s.n != 1 else ''}" for s in stats if s.n < rigor.min_runs]
    if not short:
        return ""
    return f"{', '.join(dict.fromkeys(short))}; needs {rigor.min_runs} (blocks, each its own server start): too few to decide"
