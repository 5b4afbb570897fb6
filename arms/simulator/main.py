"""Run the simulator as a process: `python -m arms.simulator --port 8123 --slots 2 ...`.

Every simple profile field has a flag (`--ctx-size`, `--prefill-chunk`, ...), every fault
knob a `--fault-*` flag, and `--profile-json` sets any field at once; explicit flags win
over the JSON. The process prints one `simulator listening on http://HOST:PORT` line when
it accepts connections (orchestrators wait for it or poll /health), and exits 0 on
SIGTERM/SIGINT, 2 on an invalid profile, 3 when the refuse_start fault is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from arms.simulator.app import make_app
from arms.simulator.profile import FaultKnobs, SimProfile
from arms.simulator.reply import ReplyPolicy

EXIT_INVALID_PROFILE = 2
EXIT_REFUSED = 3


def serve(
    profile: SimProfile, host: str = "127.0.0.1", port: int = 8000, *, reply_policy: ReplyPolicy | None = None
) -> None:
    """Serve until SIGTERM/SIGINT, then shut down cleanly (blocking).

    With the refuse_start fault set, print its message to stderr and raise
    SystemExit(3) before listening — a runtime that will not start, as the orchestrator
    must learn to report it.
    """
    if profile.faults.refuse_start:
        print(profile.faults.refuse_start, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_REFUSED)
    asyncio.run(_serve(profile, host, port, reply_policy))


async def _serve(profile: SimProfile, host: str, port: int, reply_policy: ReplyPolicy | None) -> None:
    app = make_app(profile, reply_policy=reply_policy)
    # handler_cancellation: a client that disconnects cancels its handler, which frees
    # the slot the way a real server aborts the request.
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        bound_port = port
        for address in runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                bound_port = address[1]
                break
        print(f"simulator listening on http://{host}:{bound_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass  # not the main thread, or no signal support: run until cancelled
        await stop.wait()
    finally:
        await runner.cleanup()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _optional_int(text: str) -> int | None:
    return None if text.lower() in ("none", "null", "") else int(text)


def _add_field_options(parser: argparse.ArgumentParser, model: type[Any], prefix: str, dest_prefix: str) -> None:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, FaultKnobs):
            continue
        kwargs: dict[str, Any] = {"dest": dest_prefix + name, "default": argparse.SUPPRESS, "help": info.description}
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif origin is typing.Literal:
            kwargs["choices"] = list(args)
        elif origin in (typing.Union, types.UnionType) and type(None) in args:
            kwargs["type"] = _optional_int
            kwargs["metavar"] = "INT|none"
        elif annotation in (int, float, str):
            kwargs["type"] = annotation
            kwargs["metavar"] = {int: "INT", float: "FLOAT", str: "TEXT"}[annotation]
        else:
            continue
        parser.add_argument(prefix + _flag(name)[2:], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The command line: host/port, one flag per profile field and fault knob, --profile-json."""
    parser = argparse.ArgumentParser(
        prog="python -m arms.simulator",
        description="Serve an OpenAI-compatible API from a simulated LLM serving engine.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind (default 127.0.0.1).")
    parser.add_argument("--port", type=int, required=True, help="Port to bind (0 = any free port).")
    parser.add_argument(
        "--profile-json",
        default=None,
        metavar="JSON",
        help="A SimProfile as JSON (or @file); explicit flags override it.",
    )
    _add_field_options(parser, SimProfile, "--", "p_")
    _add_field_options(parser, FaultKnobs, "--fault-", "f_")
    return parser


def profile_from_args(args: argparse.Namespace) -> SimProfile:
    """Merge --profile-json with explicit flags and validate (raises ValueError)."""
    data: dict[str, Any] = {}
    if args.profile_json:
        text = args.profile_json
        if text.startswith("@"):
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError("--profile-json must be a JSON object")
        data.update(loaded)
    faults = dict(data.get("faults") or {})
    for key, value in vars(args).items():
        if key.startswith("p_"):
            data[key[2:]] = value
        elif key.startswith("f_"):
            faults[key[2:]] = value
    if faults:
        data["faults"] = faults
    return SimProfile.model_validate(data)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        profile = profile_from_args(args)
    except (ValueError, OSError) as exc:
        print(f"invalid simulator profile: {exc}", file=sys.stderr, flush=True)
        return EXIT_INVALID_PROFILE
    try:
        serve(profile, args.host, args.port)
    except OSError as exc:
        print(f"simulator cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
