"""`campaign probe URL --probe NAME`: one probe against any OpenAI-compatible server.

No campaign file, no database: the probe writes into memory, a summary is printed, and
`--json` keeps every metric and raw record. Exit codes: 0 when the probe ran (failed
requests are counted in the summary, not fatal), 2 for bad arguments, 1 when the server
could not be reached.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError
from rich.table import Table

from campaign.cli import UsageError, app, console
from campaign.states import Mode, ProbeName


def _reachable_model(url: str, model: str | None) -> str:
    try:
        with httpx.Client(base_url=url, timeout=10.0) as http:
            response = http.get("/v1/models")
            ids = []
            if response.status_code == 200:
                ids = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
            elif http.get("/health").status_code >= 500:
                raise ConnectionError(f"{url} answers but is not healthy (HTTP {response.status_code})")
    except (httpx.HTTPError, ValueError) as exc:
        raise ConnectionError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from None
    if model:
        return model
    if not ids:
        raise UsageError(f"{url}/v1/models lists no model; pass --model")
    return ids[0]


@app.command()
def probe(
    url: Annotated[str, typer.Argument(help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080")],
    probe_name: Annotated[str, typer.Option("--probe", help="cache-probe | decode | tool-loop | agent-load | cache-ceiling")],
    model: Annotated[str | None, typer.Option(help="model id to request (default: the first in /v1/models)")] = None,
    runtime: Annotated[str, typer.Option(help="runtime adapter that says where counters live")] = "external",
    mode: Annotated[list[str] | None, typer.Option("--mode", help="canonical and/or greedy (repeatable)")] = None,
    temperature: Annotated[float, typer.Option(help="canonical sampling temperature")] = 1.0,
    top_p: Annotated[float | None, typer.Option(help="canonical top_p")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write every metric and raw record here")] = None,
    conversations: Annotated[int | None, typer.Option(help="agent-load: concurrent conversations")] = None,
    turns: Annotated[int | None, typer.Option(help="agent-load: turns per conversation")] = None,
    system_tokens: Annotated[int | None, typer.Option(help="agent-load: shared system prompt size")] = None,
    task_tokens: Annotated[int | None, typer.Option(help="agent-load: unique task size")] = None,
    turn_tokens: Annotated[int | None, typer.Option(help="agent-load: tool output appended per turn")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="output tokens per request")] = None,
    prompt_tokens: Annotated[int | None, typer.Option(help="cache-probe: primed prompt size")] = None,
    context: Annotated[list[int] | None, typer.Option("--context", help="decode: context sizes (repeatable)")] = None,
    repeats: Annotated[int | None, typer.Option(help="decode: repeats per context")] = None,
    trials: Annotated[int | None, typer.Option(help="tool-loop: trials")] = None,
    no_baseline: Annotated[bool, typer.Option("--no-baseline", help="agent-load: skip the single-stream run")] = False,
) -> None:
    """Run one probe against a live server and print a readable summary."""
    from arms.probes import registry as probes
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import registry as runtimes

    try:
        name = ProbeName(probe_name)
        spec = probes.get(name)
    except (ValueError, KeyError):
        raise UsageError(f"--probe: found {probe_name!r}, expected one of: {', '.join(p.value for p in ProbeName)}") from None
    try:
        adapter = runtimes.get(runtime)
    except KeyError as exc:
        raise UsageError(f"--runtime: {exc.args[0]}") from None
    given: dict[str, Any] = {
        "conversations": conversations, "turns": turns, "system_tokens": system_tokens, "task_tokens": task_tokens,
        "turn_tokens": turn_tokens, "max_tokens": max_tokens, "prompt_tokens": prompt_tokens, "repeats": repeats,
        "trials": trials, "contexts": context, "modes": mode,
    }
    if no_baseline:
        given["baseline"] = False
    fields = spec.params.model_fields
    unknown = [k for k, v in given.items() if v is not None and k not in fields]
    if unknown:
        flags = ", ".join("--" + k.rstrip("s").replace("_", "-") if k in ("contexts", "modes") else "--" + k.replace("_", "-") for k in unknown)
        raise UsageError(f"{flags} do(es) not apply to --probe {name.value}")
    values = {k: v for k, v in given.items() if v is not None}
    if name == ProbeName.DECODE and "contexts" not in values:
        values["contexts"] = [2048]
    try:
        params = spec.params.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"--{'-'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    try:
        served = _reachable_model(url.rstrip("/"), model)
    except ConnectionError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    sampling = {"temperature": temperature, "top_p": top_p}
    target = ProbeTarget(base_url=url.rstrip("/"), model=served, adapter=adapter, sampling={k: v for k, v in sampling.items() if v is not None})
    sink = MemorySink()
    with console.status(f"{name.value} against {url} ({served})..."):
        asyncio.run(spec.run(target, sink, params))
    _print_summary(name, sink)
    if json_out is not None:
        doc: dict[str, Any] = {
            "probe": name.value, "url": url, "model": served, "params": params.model_dump(mode="json"),
            "measurements": sink.measurements, "samples": sink.samples, "requests": sink.requests,
        }
        if name == ProbeName.AGENT_LOAD:
            from arms.probes.agent_load import turn_records

            doc["turns"] = turn_records(sink.requests)
        json_out.write_text(json.dumps(doc, indent=1, default=str))
        console.print(f"wrote {json_out}")


def _print_summary(name: ProbeName, sink: Any) -> None:
    ok = sum(1 for r in sink.requests if r.get("error") is None)
    failed = len(sink.requests) - ok
    console.print(f"[bold]{name.value}[/bold]: {len(sink.requests)} requests, {ok} ok, {failed} failed")
    errors: dict[str, int] = defaultdict(int)
    for r in sink.requests:
        if r.get("error"):
            errors[r["error"][:100]] += 1
    for message, count in errors.items():
        console.print(f"  [red]{count} x[/red] {message}")
    if name == ProbeName.AGENT_LOAD:
        _print_turns(sink)
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    for m in sink.measurements:
        scenario = m["scenario"]
        if name == ProbeName.AGENT_LOAD and scenario.startswith(("c", "baseline-t")) and scenario not in ("summary",):
            continue
        groups[(m["metric"], scenario, m["mode"])].append(m["value"])
        units[m["metric"]] = m["unit"]
    table = Table(title="metrics (median over samples)", title_justify="left")
    for col in ("metric", "scenario", "mode", "median", "n", "unit"):
        table.add_column(col)
    for (metric, scenario, mode_), values in sorted(groups.items()):
        style = "dim" if mode_ == Mode.GREEDY.value else ""
        table.add_row(metric, scenario, mode_, f"{statistics.median(values):.4g}", str(len(values)), units[metric], style=style)
    console.print(table)


def _print_turns(sink: Any) -> None:
    from arms.probes.agent_load import turn_records

    rows = turn_records(sink.requests)
    load = [r for r in rows if r["phase"] == "load"]
    if not load:
        return
    convs = sorted({r["conversation"] for r in load})
    turns = sorted({r["turn"] for r in load})
    table = Table(title="TTFT per turn (s), concurrent load", title_justify="left")
    table.add_column("turn")
    for c in convs:
        table.add_column(f"conv {c}")
    base = {r["turn"]: r for r in rows if r["phase"] == "baseline"}
    if base:
        table.add_column("single stream")
    cell = {(r["conversation"], r["turn"]): r for r in load}
    for t in turns:
        row = [str(t + 1)]
        for c in convs:
            r = cell.get((c, t))
            row.append("-" if r is None else ("error" if r["error"] else f"{r['ttft_s']:.3f}"))
        if base:
            b = base.get(t)
            row.append("-" if b is None or b["ttft_s"] is None else f"{b['ttft_s']:.3f}")
        table.add_row(*row)
    console.print(table)
