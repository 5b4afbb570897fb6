"""The embedded serving simulator: an OpenAI-compatible HTTP server over a model of a
serving engine (slots with affinity, prefix cache, chunked prefill, batched decode,
speculative decoding, a request queue, fault knobs).

Modules: `profile` (the pydantic configuration), `tokens` (toy tokenizer and chat
template), `cache` (prefix matching, prefix cache), `clock`, `reply` (reply-policy seam),
`engine` (the scheduler, no HTTP), `responses` and `prometheus` (wire formats), `app`
(aiohttp application), `main` (process entry point). It imports nothing from the rest of
the project, so any part may use it.
"""

from arms.simulator.profile import FaultKnobs, SimProfile

__all__ = ["FaultKnobs", "SimProfile"]
