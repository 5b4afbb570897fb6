"""Synthetic prompts with known shape: built in words, sized in the server's tokens, shared
prefixes by construction.

Words are common English words so that real tokenizers split them about one token each;
the simulator counts one token per word. `sized_conversation` corrects the word count with
the server's tokenizer (`PromptTokenizer`) so a prompt size means tokens on every runtime.
Each prompt is seeded by a salt, so a probe can build "never seen" and "seen before"
prompts at will.
"""

from __future__ import annotations

import json
import random
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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


# How a prompt's size or shared prefix was counted (stored as the measurement's `source`).
VIA_TEMPLATE = "server-tokenizer (apply-template)"
VIA_MESSAGES = "server-tokenizer (messages)"
CLIENT_WORDS = "client-words"
WORD_ESTIMATE = "word-estimate (1 word = 1 token)"

# Server answers meaning "this endpoint does not exist here", as opposed to "not this prompt".
_ABSENT = frozenset({404, 405, 501})


class PromptTokenizer:
    """A chat's prompt tokens as the server will see them, where the server can say.

    Why: expected reuse and prompt sizes are claims in the server's tokens, and only the
    server's tokenizer and chat template give those. Two ways, tried in this order, so a
    server that has both is always counted the same way:
      1. `POST /apply-template {messages, tools}` renders the template (llama.cpp), then
         `POST /tokenize {content, add_special}` tokenizes the text with the flags the chat
         path uses, so the count equals the server's `usage.prompt_tokens`.
      2. `POST /tokenize {messages, tools}` (the simulator, vLLM).
    An empty token list is "no tokenizer here" (llama.cpp answers `/tokenize {messages}`
    with `{"tokens": []}`), never a prompt of 0 tokens. A way the server does not have
    (404, or an empty answer) is dropped for the life of the client; a way that fails on
    one prompt only (a template that rejects a tool call) is skipped for that prompt.
    Answers are cached by request, so sizing a prompt twice costs no second round trip.
    """

    def __init__(self, http: httpx.AsyncClient):
        self.http = http
        self.ways: dict[
            str, Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Awaitable[list[str] | None]]
        ] = {
            VIA_TEMPLATE: self._via_template,
            VIA_MESSAGES: self._via_messages,
        }
        self._cache: dict[tuple[str, str], list[str] | None] = {}

    async def tokens(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        way: str | None = None,
        keep: bool = True,
    ) -> tuple[list[str], str] | None:
        """The prompt's tokens and the way they were counted; None when no way answers.
        `keep=False` leaves the answer out of the cache: a caller that counts thousands of
        distinct prompts once each (agent-load's pieces) would only fill memory with it."""
        for name in [way] if way else list(self.ways):
            if name not in self.ways:
                continue
            key = (name, json.dumps([messages, tools], sort_keys=True))
            answer = self._cache[key] if key in self._cache else await self.ways[name](messages, tools)
            if keep:
                self._cache[key] = answer
            if answer is not None:
                return answer, name
        return None

    async def _post(self, path: str, body: dict[str, Any], way: str) -> dict[str, Any] | None:
        """The JSON answer, or None. A connection that breaks (a pooled one the server has
        closed) is tried once more: a transport hiccup must not pass for a missing way."""
        for attempt in range(2):
            try:
                response = await self.http.post(path, json=body, timeout=30.0)
                break
            except httpx.TransportError:
                if attempt:
                    return None
            except httpx.HTTPError:
                return None
        if response.status_code in _ABSENT:
            self.ways.pop(way, None)
            return None
        try:
            answer = response.json() if response.status_code == 200 else None
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def _token_list(self, answer: dict[str, Any] | None, way: str) -> list[str] | None:
        tokens = answer.get("tokens") if answer else None
        if isinstance(tokens, list) and not tokens:
            self.ways.pop(way, None)  # answers, but counts nothing: no tokenizer this way
        if not (isinstance(tokens, list) and tokens):
            return None
        return [str(t.get("id", t)) if isinstance(t, dict) else str(t) for t in tokens]

    async def _via_template(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[str] | None:
        body: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
        rendered = await self._post("/apply-template", body, VIA_TEMPLATE)
        prompt = rendered.get("prompt") if rendered else None
        if not isinstance(prompt, str) or not prompt:
            return None
        return self._token_list(
            await self._post("/tokenize", {"content": prompt, "add_special": True}, VIA_TEMPLATE), VIA_TEMPLATE
        )

    async def _via_messages(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[str] | None:
        body: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
        return self._token_list(await self._post("/tokenize", body, VIA_MESSAGES), VIA_MESSAGES)


_TOKENIZERS: weakref.WeakKeyDictionary[httpx.AsyncClient, PromptTokenizer] = weakref.WeakKeyDictionary()


def tokenizer_for(http: httpx.AsyncClient) -> PromptTokenizer:
    """One PromptTokenizer per client: which ways the server has is learned once per probe run."""
    if http not in _TOKENIZERS:
        _TOKENIZERS[http] = PromptTokenizer(http)
    return _TOKENIZERS[http]


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
    http: httpx.AsyncClient,
    primed: list[dict[str, Any]],
    probe: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
) -> tuple[float, str]:
    """The share of the probe prompt that a perfect prefix cache could reuse, and how the
    prompts were counted. Both prompts are counted the same way (a shared prefix across two
    tokenizers means nothing); the client's word split is the last resort, and says so."""
    tokenizer = tokenizer_for(http)
    for way in list(tokenizer.ways):
        a = await tokenizer.tokens(primed, tools, way=way)
        b = await tokenizer.tokens(probe, tools, way=way) if a else None
        if a and b:
            return common_prefix(a[0], b[0]) / len(b[0]), way
    a_words, b_words = client_tokens(primed), client_tokens(probe)
    return common_prefix(a_words, b_words) / len(b_words), CLIENT_WORDS


@dataclass(frozen=True)
class SizedPrompt:
    """A conversation built to a token count: `tokens` as counted by `source`."""

    messages: list[dict[str, Any]]
    tokens: int
    source: str


SIZING_TRIES = 6


def sizing_tolerance(target: int) -> int:
    """How far below the target a sized prompt may land: 0.2%, at least 2 tokens. Never above:
    a prompt sized to fill a context must not overflow it."""
    return max(2, target // 500)


async def sized_conversation(
    http: httpx.AsyncClient,
    target: int,
    salt: str,
    *,
    system_cap: int | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> SizedPrompt:
    """A system + user conversation whose rendered prompt is `target` tokens on this server.

    Why: "context 32K" must mean 32K of the server's tokens on every runtime, chat template
    included. The word count is found by `sized_words`; without a server tokenizer, words
    stand for tokens one to one and the source says it is an estimate. A quarter of the
    words go to the system message, at most `system_cap`. Sizing requests go before any
    timed request of a probe.
    """

    def build(n: int) -> list[dict[str, Any]]:
        system = min(system_cap, n // 4) if system_cap is not None else n // 4
        return conversation(system, n - system, salt)

    found = await sized_words(http, target, build, tools=tools)
    return SizedPrompt(build(found.words), found.tokens, found.source)


@dataclass(frozen=True)
class SizedWords:
    """How many words a prompt piece needs: `words` words count `tokens` tokens, as counted
    by `source` (WORD_ESTIMATE: no server count, one word taken for one token)."""

    words: int
    tokens: int
    source: str


async def sized_words(
    http: httpx.AsyncClient,
    target: int,
    build: Callable[[int], list[dict[str, Any]]],
    *,
    base: int = 0,
    start: int | None = None,
    way: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    keep: bool = True,
) -> SizedWords:
    """The word count n for which the prompt `build(n)` counts `target` tokens above `base`
    on this server (`base`: the tokens of the prompt without the piece being sized, so a
    piece's own share of a prompt can be sized; 0 sizes the whole prompt).

    Why one search for every sized prompt: each word is about one token and the template
    adds a constant, so the count is corrected until it lands in [target - tolerance,
    target] (proportional first, then secant steps), and the result is never above the
    target (a prompt sized to fill a context must not overflow it). `start` is the first
    word count tried (default: the target), so a caller sizing many pieces of one shape
    starts each at the count the last one needed and mostly lands in one request. `way`
    pins the way of counting (a difference of two counts means something only when both
    were counted the same way). When no way answers, n = target, labelled WORD_ESTIMATE.
    """
    tokenizer = tokenizer_for(http)
    n, counted = max(1, target if start is None else start), {}
    best: SizedWords | None = None
    for _ in range(SIZING_TRIES):
        answer = await tokenizer.tokens(build(n), tools, way=way, keep=keep)
        if answer is None:
            break
        count, source = len(answer[0]) - base, answer[1]
        counted[n] = count
        candidate = SizedWords(n, count, source)
        if best is None or _closer_below(candidate.tokens, best.tokens, target):
            best = candidate
        if 0 <= target - count <= sizing_tolerance(target):
            return candidate
        below = [k for k, c in counted.items() if c <= target]
        above = [k for k, c in counted.items() if c > target]
        if below and above:  # secant between the nearest sizes either side of the target
            lo, hi = max(below), min(above)
        elif len(counted) > 1:  # secant through the two nearest tried sizes
            lo, hi = sorted(sorted(counted, key=lambda k: abs(counted[k] - target))[:2])
        else:  # proportional: tokens per word so far, template included
            lo, hi = 0, n
        slope = (counted[hi] - counted.get(lo, 0)) / (hi - lo)
        if slope <= 0:  # a tokenizer that is not monotone here: fall back to the proportion
            slope = count / n
        aim = target - sizing_tolerance(target) // 2  # the middle of the accepted window
        following = max(1, n + round((aim - count) / max(slope, 1e-6)))
        if following in counted:  # the step rounds onto a tried size: one word toward the target
            following = n + (1 if count < target else -1)
        if following in counted or following < 1:
            break
        n = following
    if best is not None:
        return best
    return SizedWords(max(1, target), max(1, target), WORD_ESTIMATE)


def _closer_below(count: int, best: int, target: int) -> bool:
    """Whether `count` is a better size than `best`: at or under the target beats over it,
    then the nearer one wins."""
    if (count <= target) != (best <= target):
        return count <= target
    return abs(target - count) < abs(target - best)
