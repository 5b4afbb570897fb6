"""`campaign simulate`: the embedded serving simulator as a standalone server, to probe or
to point a campaign's external runtime at."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.app import app


@app.command()
def simulate(
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    slots: Annotated[int, typer.Option(help="serving slots")] = 4,
    ctx_size: Annotated[int, typer.Option(help="context limit per request, tokens")] = 32768,
    prefill_chunk: Annotated[int, typer.Option(help="prefill chunk, tokens")] = 512,
    prefix_cache_tokens: Annotated[int, typer.Option(help="prefix cache size in tokens (0 = off)")] = 0,
    time_scale: Annotated[float, typer.Option(help="model seconds per wall second")] = 1.0,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    model: Annotated[str, typer.Option(help="served model id")] = "sim-model",
    profile_json: Annotated[str | None, typer.Option(help="any other profile field, as JSON")] = None,
) -> None:
    """Run the embedded serving simulator standalone (OpenAI-compatible, with /metrics)."""
    from arms.simulator.main import main as sim_main

    argv = [
        "--host",
        host,
        "--port",
        str(port),
        "--slots",
        str(slots),
        "--ctx-size",
        str(ctx_size),
        "--prefill-chunk",
        str(prefill_chunk),
        "--prefix-cache-tokens",
        str(prefix_cache_tokens),
        "--time-scale",
        str(time_scale),
        "--seed",
        str(seed),
        "--model",
        model,
    ]
    if profile_json:
        argv += ["--profile-json", profile_json]
    code = sim_main(argv)
    raise typer.Exit(code or 0)
