"""An adaptive item stops only on a p-value within alpha / (the family's planned size)
(`gates.family`), the one rule `flows.verdicts.settled` and `design_of` read."""

from __future__ import annotations

from campaign.core.schema import GateEntry
from gates.family import least_holm_level, planned_members
from gates.rigor import alpha_of


def _gate(gate_id: str, **fields: object) -> GateEntry:
    values: dict[str, object] = {
        "id": gate_id,
        "predicate": "faster_decode",
        "subjects": ["B"],
        "baseline": ["A"],
        **fields,
    }
    return GateEntry.model_validate(values)


def test_the_level_is_alpha_over_the_planned_family() -> None:
    gates = [_gate("g1"), _gate("g2"), _gate("g3", exploratory=True)]
    assert len(planned_members(gates)) == 2
    holm = least_holm_level(gates, gates[0], 0.95)
    assert holm.members == 2 and holm.level == alpha_of(0.95) / 2
    assert holm.admits(holm.level) and not holm.admits(holm.level * 1.01)


def test_a_gate_s_own_confidence_sets_its_alpha_and_an_empty_family_counts_one() -> None:
    gate = _gate("g", exploratory=True, params={"confidence": 0.99})
    holm = least_holm_level([gate], gate, 0.9)
    assert (holm.members, holm.level) == (1, alpha_of(0.99))
