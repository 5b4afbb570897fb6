"""The mechanisms a gate may credit with a win, and the recipe fields that switch each one.

Why a table: the `attribution` predicate credits a win to a mechanism (its `claim`) by an
ablation arm, the subject's recipe with that mechanism switched off. The credit is only
worth something if the ablation changes that mechanism and nothing else: an ablation that
also drops two slots, or runs another quant, measures the sum of both changes, and the
credit goes to a confound (seed 000: "the win was four slots, not the prefix cache",
where the two recipes also differed in their prefill chunks). Which recipe fields make
up a mechanism is a fact about `campaign.core.serving.Recipe`, named once here, so the load
check (`flows.resolve`) can hold every other field equal and a reader can see what
"switched off" may touch.

A leaf: it imports nothing of the project (a test checks every field is a Recipe field).
Fields not listed under any mechanism (`prefill_chunk`, `interleave_chunk`,
`extra_args`) belong to none, so an ablation may never change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

MECHANISMS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # the prefix (prompt) cache and its per-session cap: absent = off
        "cache": ("prefix_cache", "session_cache_cap"),
        # parallel sequences the server runs at once
        "slots": ("slots",),
        # speculative decoding: on/off, the draft model or method, tokens drafted per step
        "speculation": ("speculative", "draft", "draft_k"),
        # work moved off the main path (prefill offloads such as specprefill, ane-prefill)
        "offloads": ("offloads",),
    }
)
