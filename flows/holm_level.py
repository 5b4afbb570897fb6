"""The least level Holm's method can leave one claim of the campaign's family: alpha / (its planned size).

`gates.family` owns the family and Holm's rule; an item that adds blocks until its gate is
decided stops only on a p-value within this level, so that no gate that joins the family
later can undo the stop. This answers that question from `gates.family.planned_members`
and `gates.rigor.alpha_of` alone, so the rule is not spelt out again by its readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from campaign.core.schema import GateEntry
from gates.family import planned_members
from gates.rigor import alpha_of


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
