"""`campaign probe URL --probe NAME`: one probe against any OpenAI-compatible server.

No campaign file, no database: the probe writes into memory, a summary is printed, and
`--json` keeps every metric and raw record. Exit codes: 0 when at least one request of
the probe succeeded (failed ones are counted by kind in the summary), 1 when none did or
the server could not be reached, 2 for bad arguments.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from campaign.core import metrics
from campaign.core.states import Mode, ProbeName
from cli.app import UsageError, app, console


def _reachable_model(url: str, model: str | None, adapter_model: str | None = None) -> str:
    """The model to request: `model`, else the name the runtime's adapter always requests
    (`request_model`: mlx-lm serves the model it loaded only as "default_model", and
    loads any other name it is asked for from the Hub), else the first /v1/models lists. A /v1/models that
    answers something other than a JSON model list (mlx-lm answers an empty body when its
    Hugging Face cache folder does not exist) lists nothing; only a server that cannot be
    reached, or says it is unhealthy, is refused."""
    try:
        with httpx.Client(base_url=url, timeout=10.0) as http:
            response = http.get("/v1/models")
            ids: list[str] = []
            if response.status_code == 200:
                ids = _model_ids(response)
            elif http.get("/health").status_code >= 500:
                raise ConnectionError(f"{url} answers but is not healthy (HTTP {response.status_code})")
    except httpx.HTTPError as exc:
        raise ConnectionError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from None
    if model or adapter_model:
        return str(model or adapter_model)
    if not ids:
        raise UsageError(f"{url}/v1/models lists no model; pass --model")
    return ids[0]


def _model_ids(response: httpx.Response) -> list[str]:
    try:
        data = response.json().get("data", [])
    except (ValueError, AttributeError):
        return []
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")] if isinstance(data, list) else []


@app.command()
def probe(
    url: Annotated[str, typer.Argument(help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080")],
    probe_name: Annotated[
        str, typer.Option("--probe", help="cache-probe | decode | tool-loop | agent-load | cache-ceiling | load")
    ],
    model: Annotated[str | None, typer.Option(help="model id to request (default: the first in /v1/models)")] = None,
    runtime: Annotated[str, typer.Option(help="runtime adapter that says where counters live")] = "external",
    mode: Annotated[list[str] | None, typer.Option("--mode", help="canonical and/or greedy (repeatable)")] = None,
    temperature: Annotated[float, typer.Option(help="canonical sampling temperature")] = 1.0,
    top_p: Annotated[float | None, typer.Option(help="canonical top_p")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write every metric and raw record here")] = None,
    conversations: Annotated[
        int | None,
        typer.Option(
            help="agent-load, load (agent workload): concurrent conversations",
            rich_help_panel="agent workload (agent-load, load)",
        ),
    ] = None,
    turns: Annotated[
        int | None,
        typer.Option(
            help="agent-load, load (agent workload): turns per conversation",
            rich_help_panel="agent workload (agent-load, load)",
        ),
    ] = None,
    system_tokens: Annotated[
        int | None,
        typer.Option(
            help="agent-load, load (agent workload): shared system prompt size",
            rich_help_panel="agent workload (agent-load, load)",
        ),
    ] = None,
    task_tokens: Annotated[
        int | None,
        typer.Option(
            help="agent-load, load (agent workload): unique task size",
            rich_help_panel="agent workload (agent-load, load)",
        ),
    ] = None,
    turn_tokens: Annotated[
        int | None,
        typer.Option(
            help="agent-load, load (agent workload): tool output appended per turn",
            rich_help_panel="agent workload (agent-load, load)",
        ),
    ] = None,
    max_tokens: Annotated[int | None, typer.Option(help="output tokens per request", rich_help_panel="sizes")] = None,
    prompt_tokens: Annotated[
        int | None,
        typer.Option(
            help="cache-probe: primed prompt size; load: prompt size (synthetic workload)", rich_help_panel="sizes"
        ),
    ] = None,
    context: Annotated[
        list[int] | None, typer.Option("--context", help="decode: context sizes (repeatable)", rich_help_panel="decode")
    ] = None,
    repeats: Annotated[int | None, typer.Option(help="decode: repeats per context", rich_help_panel="decode")] = None,
    trials: Annotated[int | None, typer.Option(help="tool-loop: trials", rich_help_panel="tool-loop")] = None,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="agent-load: skip the single-stream run", rich_help_panel="agent-load")
    ] = False,
    warmup: Annotated[
        int | None,
        typer.Option(help="decode: untimed trials before the timed ones (default 1)", rich_help_panel="decode"),
    ] = None,
    read_timeout: Annotated[
        float | None,
        typer.Option(
            "--read-timeout",
            metavar="SECONDS",
            help="a request with no byte for this long has stalled; after 2 stalls in a row the probe stops sending (default 120; agent-load: its turn timeout)",
        ),
    ] = None,
    load_profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help="load: synchronous | concurrent | constant | poisson | trace | sweep (default)",
            rich_help_panel="load",
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="load: requests per second (constant, poisson)", rich_help_panel="load")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="load: clients (concurrent)", rich_help_panel="load")] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS", help="load: seconds per run, each step of a sweep (default 20)", rich_help_panel="load"
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(help="load: requests per run (with --duration: whichever ends first)", rich_help_panel="load"),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            metavar="NAME=SECONDS",
            help="load: a latency target every good request meets: ttft_s, tpot_s or e2e_s (repeatable)",
            rich_help_panel="load",
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="load: synthetic (--prompt-tokens), agent (the agent-load flags; the default when one is given) or dataset (--dataset)",
            rich_help_panel="load",
        ),
    ] = None,
    rates: Annotated[
        int | None,
        typer.Option(
            help="load sweep: rates between synchronous and maximum throughput (default 4)", rich_help_panel="load"
        ),
    ] = None,
    max_concurrency: Annotated[
        int | None,
        typer.Option(help="load sweep: clients of the maximum-throughput run (default 32)", rich_help_panel="load"),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="load: seeds Poisson arrivals", rich_help_panel="load")] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="load --profile trace: a Mooncake-style JSONL trace to replay", rich_help_panel="load"
        ),
    ] = None,
    block_tokens: Annotated[
        int | None, typer.Option(help="load trace: tokens per hash id block (default 512)", rich_help_panel="load")
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(help="load trace: recorded gaps multiplied by this (0.5: twice as fast)", rich_help_panel="load"),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="load: a ShareGPT-style JSON/JSONL file as the prompts (each reply's length as output, capped by --max-tokens)",
            rich_help_panel="load",
        ),
    ] = None,
) -> None:
    """Run one probe against a live server and print a readable summary."""
    from arms.probes import registry as probes
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import catalog as runtimes

    try:
        spec = probes.get(probe_name)
    except KeyError:
        raise UsageError(f"--probe: found {probe_name!r}, expected one of: {', '.join(probes.names())}") from None
    name = spec.name
    try:
        adapter = runtimes.get(runtime)
    except KeyError as exc:
        raise UsageError(f"--runtime: {exc.args[0]}") from None
    given: dict[str, Any] = {
        "conversations": conversations,
        "turns": turns,
        "system_tokens": system_tokens,
        "task_tokens": task_tokens,
        "turn_tokens": turn_tokens,
        "max_tokens": max_tokens,
        "prompt_tokens": prompt_tokens,
        "repeats": repeats,
        "trials": trials,
        "contexts": context,
        "modes": mode,
        "warmup": warmup,
        "profile": load_profile,
        "rate": rate,
        "concurrency": concurrency,
        "duration_s": duration,
        "requests": requests,
        "targets": _targets(target) if target else None,
        "workload": workload,
        "rates": rates,
        "max_concurrency": max_concurrency,
        "seed": seed,
        "trace": str(trace) if trace is not None else None,
        "block_tokens": block_tokens,
        "time_scale": time_scale,
        "dataset": str(dataset) if dataset is not None else None,
    }
    if read_timeout is not None and not read_timeout > 0:
        raise UsageError(f"--read-timeout: found {read_timeout:g}, expected seconds > 0")
    if no_baseline:
        given["baseline"] = False
    params = _params(spec, given)
    speaks = adapter.recognise(url.rstrip("/"))  # a server at a URL: the family its metrics page shows
    try:
        served = _reachable_model(url.rstrip("/"), model, speaks.dialect.request_model)
    except ConnectionError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    if speaks is not adapter:
        console.print(f"its metrics page shows a {speaks.name} server: counters read as {speaks.name}'s")
    sampling = {"temperature": temperature, "top_p": top_p}
    target = ProbeTarget(
        base_url=url.rstrip("/"),
        model=served,
        telemetry=speaks.telemetry,
        dialect=speaks.dialect,
        sampling={k: v for k, v in sampling.items() if v is not None},
        read_timeout=read_timeout,
    )
    sink = MemorySink()
    with console.status(f"{name} against {url} ({served})..."):
        asyncio.run(spec.run(target, sink, params))
    succeeded = _print_summary(name, sink)
    for warning in sink.warnings:
        console.print(f"[yellow]warning: {escape(warning)}[/yellow]")
    if json_out is not None:
        _write_json(json_out, spec, url, served, params, sink)
    if not succeeded:
        console.print(f"[red]error:[/red] no request of {name} succeeded")
        raise typer.Exit(1)


def _params(spec: Any, given: dict[str, Any]) -> Any:
    """The probe's parameters from the flags given (None: not given), over its command-line
    defaults; a flag the probe does not read, or a value its model refuses, is a usage
    error naming the flag."""
    unknown = [k for k, v in given.items() if v is not None and k not in spec.keys]
    if unknown:
        flags = ", ".join(_flag(k) for k in unknown)
        raise UsageError(f"{flags} do(es) not apply to --probe {spec.name}")
    values = {**spec.cli_defaults, **{k: v for k, v in given.items() if v is not None}}
    try:
        return spec.params.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = (
            f"{_flag(str(first['loc'][0]))}: " if first["loc"] else ""
        )  # a rule between fields names its fields itself
        raise UsageError(where + str(first["msg"]).removeprefix("Value error, ")) from None


def _write_json(path: Path, spec: Any, url: str, served: str, params: Any, sink: Any) -> None:
    """Everything the probe measured, with its parameters and the probe's own extras."""
    doc: dict[str, Any] = {
        "probe": spec.name,
        "url": url,
        "model": served,
        "params": params.model_dump(mode="json", by_alias=True),
        "measurements": sink.measurements,
        "samples": sink.samples,
        "requests": sink.requests,
    }
    if spec.extras is not None:
        doc.update(spec.extras(sink.measurements, sink.requests))
    path.write_text(json.dumps(doc, indent=1, default=str))
    console.print(f"wrote {path}")


COUNTED_ELSEWHERE = (metrics.ERRORS.name, metrics.NOT_RUN.name)  # failures: in the table by kind, not as medians of 1
FLAGS = {
    "contexts": "--context",
    "modes": "--mode",
    "duration_s": "--duration",
    "targets": "--target",
    "profile": "--profile",
}


def _flag(field: str) -> str:
    """The command-line flag that sets a probe parameter."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def _targets(values: list[str]) -> dict[str, float]:
    """--target NAME=SECONDS (repeatable) as the load probe's targets."""
    out: dict[str, float] = {}
    for text in values:
        name, _, number = text.partition("=")
        try:
            out[name.strip()] = float(number)
        except ValueError:
            raise UsageError(f"--target: found {text!r}, expected NAME=SECONDS, e.g. ttft_s=2.0") from None
    return out


def _print_summary(name: str, sink: Any) -> int:
    """Print requests (failures counted by kind), then the metrics; returns how many
    requests succeeded."""
    from arms.probes.failures import NOT_RUN, error_kind

    failures = [(error_kind(r["error"]), r["error"]) for r in sink.requests if r.get("error")]
    kinds = Counter(kind for kind, _ in failures if kind != NOT_RUN)
    not_run = [message for kind, message in failures if kind == NOT_RUN]
    ok = len(sink.requests) - len(failures)
    line = f"[bold]{name}[/bold]: {len(sink.requests)} requests, {ok} ok, {sum(kinds.values())} failed"
    console.print(line + (f", {len(not_run)} not run" if not_run else ""))
    if not_run:
        reason = not_run[0].split(": ", 1)[-1]
        console.print(
            f"  [yellow]{reason}: the probe sent nothing more; {len(not_run)} request(s) recorded as not run[/yellow]"
        )
    if kinds:
        table = Table(title="failed requests by kind", title_justify="left")
        for col in ("error", "count", "first message"):
            table.add_column(col, justify="right" if col == "count" else "left")
        for kind, count in kinds.most_common():
            first = next(message for k, message in failures if k == kind)
            table.add_row(kind, str(count), first[:120])
        console.print(table)
    for m in sink.measurements:
        if m["metric"] == metrics.CEILING_SEARCH_ERROR_AT.name:
            kind = m["source"].split("; ", 1)[0]
            console.print(
                f"  [yellow]{m['mode']}: the ceiling search stopped on an error ({kind}) at {m['value']:.0f} tokens, not where reuse died[/yellow]"
            )
    view = VIEWS.get(name, View())
    view.show(sink)
    if not view.metrics_table:
        return ok
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    for m in sink.measurements:
        scenario = m["scenario"]
        if view.shown(scenario):
            continue
        if m["metric"] in COUNTED_ELSEWHERE:
            continue
        groups[(m["metric"], scenario, m["mode"])].append(m["value"])
        units[m["metric"]] = m["unit"]
    table = Table(title="metrics (median over samples)", title_justify="left")
    for col in ("metric", "scenario", "mode", "median", "n", "unit"):
        table.add_column(col)
    for (metric, scenario, mode_), values in sorted(groups.items()):
        style = "dim" if mode_ == Mode.GREEDY.value else ""
        table.add_row(
            metric, scenario, mode_, f"{statistics.median(values):.4g}", str(len(values)), units[metric], style=style
        )
    console.print(table)
    return ok


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


def _short(value: float) -> str:
    """At most three significant digits, no exponent: 0.0421, 3.14, 42.1, 1234."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _print_load(sink: Any) -> None:
    """The load curve (one row per run, by offered rate), the sweep's answer, and what the
    client could not keep to: schedule lag, sends that waited for the in-flight cap. Output
    tokens/s and the other percentiles are in --json."""
    from rich import box

    from arms.probes.load import curve_rows, sweep_result

    columns = (  # (heading, a curve row's key, scale: 0 is a share)
        ("run", "scenario", 1),
        ("offered", metrics.OFFERED_RPS.name, 1),
        ("thru", metrics.REQUEST_THROUGHPUT_RPS.name, 1),
        ("goodput", metrics.GOODPUT_RPS.name, 1),
        ("met", metrics.TARGET_ATTAINMENT.name, 0),
        ("TTFT\np50", metrics.TTFT_P50_S.name, 1000),
        ("TTFT\np99", metrics.TTFT_P99_S.name, 1000),
        ("TPOT\np99", metrics.TPOT_P99_S.name, 1000),
        ("err", metrics.ERROR_RATE.name, 0),
        ("queue", metrics.QUEUE_DEPTH_MAX.name, 1),
        ("lag\np99", metrics.SCHEDULE_LAG_P99_S.name, 1000),
    )
    rows = curve_rows(sink.measurements)
    widest = max((len(r["scenario"]) for r in rows), default=3)
    for mode_ in dict.fromkeys(r["mode"] for r in rows):
        title = (
            f"load, {mode_}: offered, thru(ughput) and goodput in req/s over each run's window (drain "
            "apart, in --json), latencies and schedule lag in ms, queue: most waiting"
        )
        table = Table(
            title=title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1, 0, 0),
        )
        for name, _, _ in columns:  # fits 80 columns; the run's name is never cut
            table.add_column(
                name,
                justify="left" if name == "run" else "right",
                no_wrap=True,
                min_width=widest if name == "run" else None,
            )
        for r in (r for r in rows if r["mode"] == mode_):
            cells = [r["scenario"]]
            for _, key, scale in columns[1:]:
                value = r.get(key)
                cells.append("-" if value is None else f"{value:.0%}" if scale == 0 else _short(value * scale))
            table.add_row(*cells, style="dim" if mode_ == Mode.GREEDY.value else "")
        console.print(table)
        waits = metrics.IN_FLIGHT_CAP_WAITS.name
        for r in rows:
            if r["mode"] == mode_ and r.get(waits):
                console.print(
                    f"  [yellow]{r['scenario']}: {r[waits]:.0f} send(s) waited for the in-flight cap; their lag includes the wait[/yellow]"
                )
    reported, implies = metrics.TRACE_REUSE.name, metrics.TRACE_IMPLIED_REUSE.name
    reuse = {
        (m["mode"], m["scenario"], m["metric"]): float(m["value"])
        for m in sink.measurements
        if m["metric"] in (reported, implies)
    }
    for (mode_, scenario, metric), value in reuse.items():
        if metric == reported:
            implied = reuse.get((mode_, scenario, implies))
            console.print(
                f"{scenario} ({mode_}): prefix reuse {value:.0%} as the server reported it; "
                f"the trace implies {implied:.0%} (an unbounded cache)"
                if implied is not None
                else "",
                highlight=False,
            )
    for (mode_, _ctx), cell in sweep_result(sink.measurements).items():
        console.print(
            f"[bold]sweep ({mode_})[/bold]: max goodput {cell.get(metrics.MAX_GOODPUT_RPS.name, 0):.3g} req/s "
            f"({cell.get(f'{metrics.MAX_GOODPUT_OFFERED_RPS.name}_source', '')}); {cell.get(f'{metrics.SWEEP_FRACTION.name}_source', '')}"
        )
        if cell.get(metrics.SWEEP_RATES_SKIPPED.name):
            saved = cell.get(metrics.SWEEP_TIME_SAVED_S.name)
            console.print(
                f"  {cell.get(f'{metrics.SWEEP_RATES_SKIPPED.name}_source', '')}"
                + (f" ({saved:.0f} s of device time saved)" if saved else ""),
                highlight=False,
            )


@dataclass(frozen=True)
class View:
    """How `campaign probe` prints a probe's run beside the request counts: a table of its
    own, and whether the generic metrics table follows (without the scenarios the own
    table showed). A probe without one, a plugin's among them, gets the generic table."""

    show: Callable[[Any], None] = lambda sink: None
    metrics_table: bool = True
    shown: Callable[[str], bool] = lambda scenario: False


VIEWS = {
    ProbeName.AGENT_LOAD.value: View(
        _print_turns, shown=lambda s: s.startswith(("c", "baseline-t")) and s != "summary"
    ),
    ProbeName.LOAD.value: View(_print_load, metrics_table=False),
}
