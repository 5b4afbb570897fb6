"""`external`: any OpenAI-compatible server at a URL, measured but never launched.

It reads /metrics when there is one and recognises the counter families of the runtimes
it knows (llama.cpp, vLLM, SGLang, the simulator). What it recognises comes back as a
value, the adapter bound to that family (`recognise`); the adapter itself never changes,
the caller keeps what it got back. The families are imported here, by name, so the
registry needs no lookup at run time and the modules import in one direction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from arms.runtimes import prometheus
from arms.runtimes.base import RuntimeAdapter
from arms.runtimes.llamacpp import LlamaCppAdapter
from arms.runtimes.openai_compat import OpenAICompatAdapter
from arms.runtimes.registry import register
from arms.runtimes.sglang import SglangAdapter
from arms.runtimes.simulator import SimulatorAdapter
from arms.runtimes.vllm import VllmAdapter

# -- the external adapter ------------------------------------------------------------------

# Adapters whose /metrics families the external adapter recognises on a server it did not start.
FAMILIES: tuple[type[RuntimeAdapter], ...] = (LlamaCppAdapter, VllmAdapter, SglangAdapter, SimulatorAdapter)
# a placeholder until a /metrics page shows the family (non-empty, so probes ask)
_UNKNOWN_FAMILY_METRICS: Mapping[str, str] = {"queue_depth": "num_requests_waiting"}
# what an unknown OpenAI-compatible server is not sent: the length controls of llama.cpp,
# vLLM and SGLang, which other servers refuse (transformers serve: HTTP 422)
NON_STANDARD_FIELDS = frozenset({"ignore_eos", "min_tokens"})


def detect_family(raw: Mapping[str, float]) -> RuntimeAdapter | None:
    """The known runtime whose metric names match most of what a /metrics page shows."""
    best, best_hits = None, 0
    for family in FAMILIES:
        adapter = family()
        hits = sum(1 for name in adapter.metric_names.values() if name in raw)
        if hits > best_hits:
            best, best_hits = adapter, hits
    return best


@register
@dataclass(frozen=True)
class ExternalAdapter(OpenAICompatAdapter):
    """A server started outside the campaign: measured at `runtime.url`, never launched.

    A /metrics page decides which known runtime it is: `recognise(page)` returns this
    adapter bound to that `family`, whose counters, their sources and the preferred
    cached-tokens field it then uses. Unbound, each page read is matched afresh.
    """

    name: ClassVar[str] = "external"
    description: ClassVar[str] = "any OpenAI-compatible server at a URL (nothing is launched)"
    launches: ClassVar[bool] = False
    family: RuntimeAdapter | None = None

    @property  # type: ignore[misc]
    def metric_names(self) -> Mapping[str, str]:  # type: ignore[override]
        return self.family.metric_names if self.family else _UNKNOWN_FAMILY_METRICS

    @property  # type: ignore[misc]
    def refused_fields(self) -> frozenset[str]:  # type: ignore[override]
        return self.family.refused_fields if self.family else NON_STANDARD_FIELDS

    def recognise(self, metrics_text: str) -> RuntimeAdapter:
        if self.family is not None:
            return self
        family = detect_family(prometheus.parse(metrics_text))
        if family is None:
            return self
        return replace(self, family=family, cached_tokens_field=family.cached_tokens_field)

    def read_metrics(self, text: str) -> dict[str, float]:
        family = self.family or detect_family(prometheus.parse(text))
        return family.read_metrics(text) if family else {}

    def counter_sources(self) -> dict[str, str]:
        return self.family.counter_sources() if self.family else super().counter_sources()

    def counter_unit(self, name: str) -> str:
        return self.family.counter_unit(name) if self.family else super().counter_unit(name)
