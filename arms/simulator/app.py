"""The HTTP front end: an OpenAI-compatible aiohttp application over the engine.

Routes: GET /health, GET /v1/models, POST /v1/chat/completions (streaming and not),
GET /metrics (Prometheus), GET /device (the simulated accelerator), GET /slots, POST /tokenize, POST /flush_cache. Fault knobs that concern the wire
(HTTP 503, malformed SSE, stalls, crashing after N requests) are applied here; the
engine stays a clean model of serving.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from arms.simulator.clock import Clock
from arms.simulator.engine import Engine
from arms.simulator.profile import SimProfile
from arms.simulator.prometheus import render_prometheus
from arms.simulator.reply import ReplyPolicy
from arms.simulator.request import ContextLimitError, SimRequest
from arms.simulator.responses import DeltaRenderer, error_body, final_extras, usage
from arms.simulator.tokens import content_text, render_prompt

MALFORMED_EVENT = b"data: {not json\n\n"


@dataclass
class SimState:
    """Per-application state: the engine plus the request counters the faults key on."""

    profile: SimProfile
    engine: Engine
    crash: Callable[[int], Any]
    started_at: float = 0.0
    chat_requests: int = 0
    streamed_requests: int = 0
    completed_requests: int = 0

    def loading(self) -> bool:
        """True during the simulated model load (startup_delay_s, in model time)."""
        delay = self.profile.startup_delay_s / self.profile.time_scale
        return time.monotonic() - self.started_at < delay

    def complete_one(self) -> bool:
        """Count a fully answered chat request; True if the crash fault is now due."""
        self.completed_requests += 1
        limit = self.profile.faults.crash_after_requests
        return limit > 0 and self.completed_requests >= limit


STATE_KEY = web.AppKey("simulator_state", SimState)


def make_app(
    profile: SimProfile,
    *,
    reply_policy: ReplyPolicy | None = None,
    clock: Clock | None = None,
    crash: Callable[[int], Any] = os._exit,
) -> web.Application:
    """Build the simulator application for one profile.

    `reply_policy` chooses the reply text (default: filler words); `clock` replaces the
    scaled wall clock (tests); `crash` is what the crash fault calls (default `os._exit`,
    so the process dies without cleanup, the way a crashing server does).
    """
    app = web.Application(client_max_size=256 * 1024 * 1024)
    state = SimState(profile=profile, engine=Engine(profile, reply_policy=reply_policy, clock=clock), crash=crash)
    app[STATE_KEY] = state

    async def on_startup(app: web.Application) -> None:
        state.started_at = time.monotonic()
        state.engine.start()

    async def on_cleanup(app: web.Application) -> None:
        await state.engine.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/device", device)
    app.router.add_get("/slots", slots)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/flush_cache", flush_cache)
    return app


async def flush_cache(request: web.Request) -> web.Response:
    """Empty the prefix cache and idle slots (SGLang's endpoint of the same name)."""
    return web.json_response({"status": "ok", "dropped": request.app[STATE_KEY].engine.flush_cache()})


def _bad_request(message: str, *, param: str | None = None, code: Any = None) -> web.Response:
    return web.json_response(error_body(message, param=param, code=code), status=400)


async def health(request: web.Request) -> web.Response:
    """200 ok when serving, 503 loading during the startup delay (like llama-server)."""
    if request.app[STATE_KEY].loading():
        return web.json_response({"status": "loading"}, status=503)
    return web.json_response({"status": "ok"})


async def models(request: web.Request) -> web.Response:
    """The served model id, with metadata that marks the server as simulated."""
    p = request.app[STATE_KEY].profile
    entry = {
        "id": p.model,
        "object": "model",
        "owned_by": "simulator",
        "meta": {
            "simulated": True,
            "build": p.build,
            "slots": p.slots,
            "ctx_size": p.ctx_size,
            "time_scale": p.time_scale,
        },
    }
    return web.json_response({"object": "list", "data": [entry]})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of counters and gauges."""
    engine = request.app[STATE_KEY].engine
    text = render_prometheus(engine.counters.as_dict(), engine.gauges())
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Prometheus-Format": "0.0.4"})


async def device(request: web.Request) -> web.Response:
    """The simulated accelerator's reading (`arms.simulator.power`): what NVML would say."""
    engine = request.app[STATE_KEY].engine
    return web.json_response(engine.power.reading(engine.clock.now(), engine.gauges()["memory_bytes"]))


async def slots(request: web.Request) -> web.Response:
    """Per-slot state, so probes can see affinity and occupancy."""
    return web.json_response(request.app[STATE_KEY].engine.slot_states())


async def tokenize(request: web.Request) -> web.Response:
    """The tokens of a chat (`messages`, optional `tools`) or of plain `content`."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _bad_request("invalid JSON body")
    if not isinstance(body, dict):
        return _bad_request("the body must be a JSON object")
    try:
        if "messages" in body:
            tokens = render_prompt(body["messages"], body.get("tools"))
        elif "content" in body:
            tokens = content_text(body["content"]).split()
        else:
            return _bad_request("give 'messages' or 'content'")
    except ValueError as exc:
        return _bad_request(str(exc))
    return web.json_response({"tokens": tokens, "count": len(tokens)})


def _parse_max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"'{key}' must be an integer")
            return value
    return None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """OpenAI chat completions, streamed as SSE or answered as one object."""
    received_ns = time.perf_counter_ns()  # the handler's start: the headers were read
    state = request.app[STATE_KEY]
    engine = state.engine
    if state.loading():
        engine.record_error()
        return web.json_response(error_body("Loading model", type_="unavailable_error", code=503), status=503)
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        engine.record_error()
        return _bad_request("invalid JSON body")
    if not isinstance(body, dict):
        engine.record_error()
        return _bad_request("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        engine.record_error()
        return _bad_request("'messages' must be a non-empty list", param="messages")

    state.chat_requests += 1
    every = state.profile.faults.error_5xx_every
    if every and state.chat_requests % every == 0:
        engine.record_error()
        return web.json_response(
            error_body("simulated server error (fault error_5xx_every)", type_="server_error", code=503), status=503
        )

    tools = body.get("tools") or None
    try:
        if tools is not None and not isinstance(tools, list):
            raise ValueError("'tools' must be a list")
        prompt = render_prompt(messages, tools)
        max_tokens = _parse_max_tokens(body)
        temperature = body.get("temperature")
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
            raise ValueError("'temperature' must be a number")
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise ValueError("'ignore_eos' must be a boolean")
        min_tokens = body.get("min_tokens") or 0
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
            raise ValueError("'min_tokens' must be an integer >= 0")
        req = engine.submit(
            prompt,
            max_tokens=max_tokens,
            temperature=None if temperature is None else float(temperature),
            messages=messages,
            tools=tools,
            ignore_eos=ignore_eos,
            min_tokens=min_tokens,
        )
    except ContextLimitError as exc:
        engine.record_error()
        return _bad_request(str(exc), param="messages", code="context_length_exceeded")
    except ValueError as exc:
        engine.record_error()
        return _bad_request(str(exc))

    try:
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
            return await _stream(request, state, req, include_usage, received_ns)
        return await _complete(request, state, req)
    finally:
        if not req.done:
            engine.cancel(req)


def _base(state: SimState, req: SimRequest, obj: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-sim-{req.id}", "object": obj, "created": _unix_now(), "model": state.profile.model}


async def _complete(request: web.Request, state: SimState, req: SimRequest) -> web.StreamResponse:
    await req.collect()
    if req.finish_reason == "cancelled":
        state.engine.record_error()
        return web.json_response(error_body("request cancelled", type_="server_error", code=503), status=503)
    style = state.profile.cached_tokens_style
    body = _base(state, req, "chat.completion")
    body["choices"] = [
        {"index": 0, "message": DeltaRenderer(req.plan).message(req.generated), "finish_reason": req.finish_reason}
    ]
    body["usage"] = usage(req, style)
    body.update(final_extras(req, style))
    resp = web.json_response(body)
    if state.complete_one():
        await resp.prepare(request)
        await resp.write_eof()
        state.crash(1)
    return resp


async def _hold_until_gone(request: web.Request) -> None:
    """Keep a stalled stream open, sending nothing, until the client disconnects."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.05)


async def _stream(
    request: web.Request, state: SimState, req: SimRequest, include_usage: bool, received_ns: int = 0
) -> web.StreamResponse:
    faults = state.profile.faults
    state.streamed_requests += 1
    n = state.streamed_requests
    malformed = bool(faults.malformed_every and n % faults.malformed_every == 0)
    stall_at = faults.stall_after_tokens if faults.stall_every and n % faults.stall_every == 0 else None

    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await resp.prepare(request)
    try:
        await _write_stream(request, state, req, resp, include_usage, malformed, stall_at, received_ns)
    except ConnectionError:
        pass  # the client went away; the caller cancels the engine request
    return resp


async def _write_stream(
    request: web.Request,
    state: SimState,
    req: SimRequest,
    resp: web.StreamResponse,
    include_usage: bool,
    malformed: bool,
    stall_at: int | None,
    received_ns: int = 0,
) -> None:
    """Write the SSE events of one request as the engine emits them, faults included.
    With `write_stamps`, the last chunk says when the request was received and when the
    first token chunk was handed to the transport (`time.perf_counter_ns`: CLOCK_MONOTONIC,
    one clock for every process of the machine, so a client's stamps compare with it)."""
    style = state.profile.cached_tokens_style
    base = _base(state, req, "chat.completion.chunk")

    async def send(obj: dict[str, Any]) -> None:
        await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    await send(chunk({"role": "assistant", "content": ""}, None))
    renderer = DeltaRenderer(req.plan)
    sent = 0
    first_write_ns = 0
    if stall_at == 0:
        await _hold_until_gone(request)
        return
    async for emission in req.events():
        if emission.finish_reason == "cancelled":
            return  # the engine shut down under us
        tokens = emission.tokens if stall_at is None else emission.tokens[: stall_at - sent]
        if tokens:
            await send(chunk(renderer.delta(tokens), None))
            first_write_ns = first_write_ns or time.perf_counter_ns()  # written: in the transport's hands
            sent += len(tokens)
            if malformed:
                await resp.write(MALFORMED_EVENT)
                malformed = False
        if stall_at is not None and sent >= stall_at:
            await _hold_until_gone(request)
            return
    final = chunk({}, req.finish_reason)
    final.update(final_extras(req, style))
    if state.profile.write_stamps:
        final["x_sim"] = {"received_ns": received_ns, "first_write_ns": first_write_ns, "clock": "CLOCK_MONOTONIC"}
    await send(final)
    if include_usage:
        tail = {**base, "choices": [], "usage": usage(req, style)}
        tail.update(final_extras(req, style))
        await send(tail)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    if state.complete_one():
        state.crash(1)


def _unix_now() -> int:
    """The OpenAI `created` field: a calendar timestamp, not an interval (intervals in
    this project come from the monotonic clock)."""
    return int(datetime.now(UTC).timestamp())
