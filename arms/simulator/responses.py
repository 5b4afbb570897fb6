"""OpenAI-shaped response bodies, built from finished or in-flight engine requests.

Separate from the handlers so the placement of cached tokens per runtime style (the
thing probes must learn to read) is defined in one place.
"""

from __future__ import annotations

import json
from typing import Any

from arms.simulator.reply import ReplyPlan
from arms.simulator.request import SimRequest
from arms.simulator.tokens import CALL_PREFIX


def error_body(
    message: str, *, type_: str = "invalid_request_error", code: Any = None, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def usage(req: SimRequest, style: str) -> dict[str, Any]:
    """The `usage` object; the cached count goes where the emulated runtime puts it."""
    out: dict[str, Any] = {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
    }
    if style in ("openai", "llamacpp"):
        out["prompt_tokens_details"] = {"cached_tokens": req.cached_tokens}
    elif style == "omlx":
        out["cached_tokens"] = req.cached_tokens
    return out


def timings(req: SimRequest) -> dict[str, Any]:
    """llama-server's `timings` block, in model milliseconds."""
    admitted = req.admitted_at or 0.0
    first = req.first_token_at if req.first_token_at is not None else admitted
    finished = req.finished_at if req.finished_at is not None else first
    prompt_ms = max(0.0, (first - admitted) * 1000.0)
    predicted_ms = max(0.0, (finished - first) * 1000.0)
    prompt_n = req.prompt_tokens - req.cached_tokens
    return {
        "prompt_n": prompt_n,
        "cache_n": req.cached_tokens,
        "predicted_n": req.completion_tokens,
        "prompt_ms": prompt_ms,
        "prompt_per_second": prompt_n / (prompt_ms / 1000.0) if prompt_ms > 0 else None,
        "predicted_ms": predicted_ms,
        "predicted_per_second": (req.completion_tokens / (predicted_ms / 1000.0) if predicted_ms > 0 else None),
    }


def final_extras(req: SimRequest, style: str) -> dict[str, Any]:
    """Top-level fields some runtimes add to the last chunk or the completion object."""
    if style == "llamacpp":
        return {"timings": timings(req)}
    if style == "dspark":
        # mlx-dspark 0.20.3's per-response block (tests/fixtures/runtimes), in the fields a
        # real server sends: no drafted/accepted counts, one forward per token it did not
        # accept from a draft
        forwards = max(1, req.completion_tokens - req.accepted_tokens)
        return {
            "x_mlx_dspark": {
                "mode": "dspark" if req.draft_tokens else "baseline",
                "accept_len": round(req.completion_tokens / forwards, 3),
                "target_forwards": forwards,
                "prompt_tokens": req.prompt_tokens,
                "cached_tokens": req.cached_tokens,
                "completion_tokens": req.completion_tokens,
            }
        }
    return {}


class DeltaRenderer:
    """Turns emitted tokens into chat deltas: words become content, call tokens tool calls.

    Stateful because tool-call indexes run across the whole reply.
    """

    def __init__(self, plan: ReplyPlan) -> None:
        self.plan = plan
        self._calls_seen = 0

    def delta(self, tokens: list[str]) -> dict[str, Any]:
        """The `delta` object for one emission (content words each preceded by a space)."""
        words: list[str] = []
        calls: list[dict[str, Any]] = []
        for token in tokens:
            call = self._call_for(token)
            if call is None:
                words.append(token)
            else:
                calls.append(call)
        out: dict[str, Any] = {}
        if words:
            out["content"] = "".join(" " + w for w in words)
        if calls:
            out["tool_calls"] = calls
        return out

    def message(self, tokens: list[str]) -> dict[str, Any]:
        """The assistant `message` of a non-streaming completion."""
        d = self.delta(tokens)
        msg: dict[str, Any] = {"role": "assistant", "content": d.get("content", "")}
        if "tool_calls" in d:
            msg["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in d["tool_calls"]]
            if not msg["content"]:
                msg["content"] = None
        return msg

    def _call_for(self, token: str) -> dict[str, Any] | None:
        if not token.startswith(CALL_PREFIX) or self._calls_seen >= len(self.plan.tool_calls):
            return None
        spec = self.plan.tool_calls[self._calls_seen]
        index = self._calls_seen
        self._calls_seen += 1
        return {
            "index": index,
            "id": spec.id,
            "type": "function",
            "function": {"name": spec.name, "arguments": json.dumps(dict(spec.arguments), sort_keys=True)},
        }
