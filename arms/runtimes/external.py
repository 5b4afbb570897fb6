"""`external`: any OpenAI-compatible server at a URL, measured but never launched.

Whether it is llama.cpp, vLLM, SGLang or the simulator is read from its /metrics page
when the flow attaches to it (`recognise`): the page's counter names say which family
it is, and the probe target is built with that family's telemetry and request dialect,
once, before any probe runs, so nothing is swapped under a running probe. A server
without a recognisable page is measured through its responses alone and is not sent
the length controls other servers refuse. The families are imported here, by name, so
the registry needs no lookup at run time and the modules import in one direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import httpx

from arms.runtimes import prometheus
from arms.runtimes.base import RuntimeAdapter
from arms.runtimes.dialect import Dialect
from arms.runtimes.llamacpp import LlamaCppAdapter
from arms.runtimes.openai_compat import OpenAICompatAdapter
from arms.runtimes.registry import register
from arms.runtimes.sglang import SglangAdapter
from arms.runtimes.simulator import SimulatorAdapter
from arms.runtimes.telemetry import Telemetry
from arms.runtimes.vllm import VllmAdapter

# Adapters whose /metrics families the external adapter recognises on a server it did not start.
FAMILIES: tuple[type[RuntimeAdapter], ...] = (LlamaCppAdapter, VllmAdapter, SglangAdapter, SimulatorAdapter)
# what an unknown OpenAI-compatible server is not sent: the length controls of llama.cpp,
# vLLM and SGLang, which other servers refuse (transformers serve: HTTP 422)
NON_STANDARD_FIELDS = frozenset({"ignore_eos", "min_tokens"})
METRICS_PATH = "/metrics"


def family_of(page: str) -> RuntimeAdapter | None:
    """The known runtime whose metric names match most of what a /metrics page shows."""
    raw = prometheus.parse(page)
    best, best_hits = None, 0
    for family in FAMILIES:
        adapter = family()
        hits = sum(1 for name in adapter.telemetry.metric_names.values() if name in raw)
        if hits > best_hits:
            best, best_hits = adapter, hits
    return best


@register
@dataclass(frozen=True)
class ExternalAdapter(OpenAICompatAdapter):
    """A server started outside the campaign: measured at `runtime.url`, never launched.

    Unrecognised, it reads no counters (their names and units are the family's) and
    sends only OpenAI's request fields.
    """

    name: ClassVar[str] = "external"
    description: ClassVar[str] = "any OpenAI-compatible server at a URL (nothing is launched)"
    launches: ClassVar[bool] = False
    search_fields: ClassVar[frozenset[str]] = frozenset()
    telemetry: ClassVar[Telemetry] = Telemetry(metrics_path=None)
    dialect: ClassVar[Dialect] = Dialect(refused_fields=NON_STANDARD_FIELDS)

    def recognise(self, base_url: str, timeout: float = 5.0) -> RuntimeAdapter:
        """The family adapter the server's /metrics page shows; this adapter when there is
        no page or no family matches it."""
        try:
            response = httpx.get(base_url.rstrip("/") + METRICS_PATH, timeout=timeout)
        except httpx.HTTPError:
            return self
        if response.status_code != 200:
            return self
        return family_of(response.text) or self
