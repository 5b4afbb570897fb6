"""Every metric a probe stores against a real simulator is in the catalogue, with its unit."""

from __future__ import annotations

import asyncio

import pytest

from campaign.core import metrics
from tests.unit.test_metric_catalogue import _everything_probes_store  # noqa: F401 - helpers and fixtures


@pytest.mark.integration
def test_every_metric_a_probe_stores_is_catalogued_with_its_unit_and_probe() -> None:
    stored = asyncio.run(_everything_probes_store())
    wrong = []
    for probe, found in stored.items():
        assert found, probe
        for name, unit in sorted(found.items()):
            entry = metrics.get(name)
            if entry is None:
                wrong.append(f"{probe} stores {name!r} ({unit}), not in the catalogue")
            elif entry.unit != unit:
                wrong.append(f"{probe} stores {name!r} in {unit!r}, the catalogue says {entry.unit!r}")
            elif probe not in entry.probes:
                wrong.append(f"{probe} stores {name!r}, the catalogue does not list {probe} for it")
    assert not wrong, "\n".join(wrong)
