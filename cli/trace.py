"""`campaign trace`: make a request trace of a chosen shape, or describe one.

A trace is the Mooncake-style JSONL the load probe's `trace` profile replays
(`arms.workloads.traces`); `make` writes one the project generated, so examples and tests replay
a real file, and `show` says what a trace holds before a campaign spends a server on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.app import UsageError, console

trace_app = typer.Typer(
    help="Request traces (Mooncake-style JSONL) for the load probe's trace profile.", no_args_is_help=True
)


@trace_app.command("make")
def make(
    out: Annotated[Path, typer.Argument(help="the trace file to write (.jsonl)")],
    sessions: Annotated[int, typer.Option(help="agent sessions")] = 8,
    turns: Annotated[int, typer.Option(help="turns per session, each one request")] = 4,
    system_blocks: Annotated[int, typer.Option(help="blocks of system prompt every session shares")] = 2,
    task_blocks: Annotated[int, typer.Option(help="blocks of a session's own task")] = 1,
    turn_blocks: Annotated[int, typer.Option(help="blocks of history each later turn adds")] = 1,
    session_rate: Annotated[float, typer.Option(help="sessions arriving per second (a Poisson process)")] = 1.0,
    think_s: Annotated[float, typer.Option(help="seconds between a session's turns")] = 2.0,
    output_min: Annotated[int, typer.Option(help="shortest output, tokens")] = 16,
    output_max: Annotated[int, typer.Option(help="longest output, tokens")] = 64,
    block_tokens: Annotated[int, typer.Option(help="tokens per hash id block (Mooncake: 512)")] = 512,
    seed: Annotated[int, typer.Option(help="seeds the arrivals and lengths: the same seed writes the same file")] = 0,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write a trace of agent sessions sharing a system prompt, their history growing each turn."""
    from arms.workloads.traces import TraceShape, make_trace, write_trace

    if out.exists() and not force:
        raise UsageError(f"{out} exists; pass --force to overwrite it")
    try:
        shape = TraceShape(
            sessions=sessions,
            turns=turns,
            system_blocks=system_blocks,
            task_blocks=task_blocks,
            turn_blocks=turn_blocks,
            session_rate=session_rate,
            think_s=think_s,
            output_min=output_min,
            output_max=output_max,
            block_tokens=block_tokens,
            seed=seed,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    out.parent.mkdir(parents=True, exist_ok=True)
    count = write_trace(out, make_trace(shape))
    console.print(f"written: {out} ({count} requests, block_tokens {block_tokens})", highlight=False)
    _describe(out, block_tokens)


@trace_app.command("show")
def show(
    file: Annotated[Path, typer.Argument(help="a trace file (.jsonl)")],
    block_tokens: Annotated[int, typer.Option(help="tokens per hash id block (Mooncake: 512)")] = 512,
) -> None:
    """What a trace holds: requests, span, mean rate, lengths and the reuse it implies."""
    _describe(file, block_tokens)


def _describe(file: Path, block_tokens: int) -> None:
    from arms.workloads.trace_formats import read_requests as read_trace
    from arms.workloads.traces import TraceError, implied_cached_tokens

    try:
        requests = read_trace(file, block_tokens)
    except TraceError as exc:
        raise UsageError(str(exc)) from exc
    span = (requests[-1].timestamp_ms - requests[0].timestamp_ms) / 1000.0
    inputs = sorted(r.input_length for r in requests)
    outputs = sorted(r.output_length for r in requests)
    implied = sum(implied_cached_tokens(requests, block_tokens)) / sum(inputs)
    rate = f"{len(requests) / span:.3g} req/s" if span > 0 else "all at once"
    console.print(
        f"{len(requests)} requests over {span:.1f} s ({rate}); input tokens {inputs[0]}-{inputs[-1]} "
        f"(median {inputs[len(inputs) // 2]}), output {outputs[0]}-{outputs[-1]}; "
        f"implied prefix reuse {implied:.0%} (an unbounded cache, from hash_ids)",
        highlight=False,
        soft_wrap=True,
    )
