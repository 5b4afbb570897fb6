"""Synthetic prompts with known shape: sizes in words, shared prefixes by construction.

Words are common English words so that real tokenizers split them about one token each;
the simulator counts one token per word. Each prompt is seeded by a salt, so a probe can
build "never seen" and "seen before" prompts at will.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

_VOCAB = (
    "the of and to in is was for on are as with his they at be this from have or by one had not but what all "
    "were when we there can an your which their said if do will each about how up out them then she many some "
    "so these would other into has more her two like him see time could no make than first been its who now "
    "people my made over did down only way find use may water long little very after words called just where "
    "most know get through back much before go good new write our used me man too any day same right look "
    "think also around another came come work three word must because does part even place well such here take "
    "why things help put years different away again off went old number great tell men say small every found "
    "still between name should home big give air line set own under read last never us left end along while "
    "might next sound below saw something thought both few those always looked show large often together asked "
    "house world going want school important until form food keep children feet land side without boy once "
    "animals life enough took sometimes four head above kind began almost live page got earth need far hand "
    "high year mother light parts country father let night following picture being study second eyes soon"
).split()


def words(n: int, salt: str) -> str:
    rng = random.Random(salt)
    return " ".join(rng.choice(_VOCAB) for _ in range(max(0, n)))


def conversation(system_tokens: int, user_tokens: int, salt: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": words(system_tokens, f"{salt}/system")},
        {"role": "user", "content": words(user_tokens, f"{salt}/user")},
    ]


def mutate_middle(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """Change one word in the middle of the prompt; returns the prompt and the share of
    words before the change (the reuse a prefix cache can still give)."""
    texts = [m["content"].split() for m in messages]
    total = sum(len(t) for t in texts)
    target = total // 2
    seen = 0
    out = []
    for message, toks in zip(messages, texts):
        toks = list(toks)
        if seen <= target < seen + len(toks):
            i = target - seen
            toks[i] = "zebra" if toks[i] != "zebra" else "quartz"
        seen += len(toks)
        out.append({**message, "content": " ".join(toks)})
    return out, target / total if total else 0.0


async def server_token_count(http: httpx.AsyncClient, messages: list[dict[str, Any]]) -> list[str] | None:
    """Rendered prompt tokens from the server's tokenizer endpoint, where it has one."""
    try:
        response = await http.post("/tokenize", json={"messages": messages}, timeout=10.0)
        if response.status_code != 200:
            return None
        tokens = response.json().get("tokens")
        return [str(t) for t in tokens] if isinstance(tokens, list) else None
    except (httpx.HTTPError, ValueError):
        return None


def common_prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def client_tokens(messages: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for m in messages:
        out.append(f"<{m['role']}>")
        content = m.get("content") or ""
        out.extend(content.split() if isinstance(content, str) else [])
        for call in m.get("tool_calls") or []:
            out.append(str(call.get("function", {})))
    return out


async def expected_reuse(
    http: httpx.AsyncClient, primed: list[dict[str, Any]], probe: list[dict[str, Any]]
) -> tuple[float, str]:
    """The share of the probe prompt that a perfect prefix cache could reuse."""
    a = await server_token_count(http, primed)
    b = await server_token_count(http, probe) if a is not None else None
    source = "server-tokenizer"
    if a is None or b is None:
        a, b, source = client_tokens(primed), client_tokens(probe), "client-words"
    return (common_prefix(a, b) / len(b) if b else 0.0), source
