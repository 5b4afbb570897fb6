"""What `campaign probe` prints of a probe's run: the requests (failures counted by kind),
then a probe's own table where it has a view (agent-load's turns, load's curve), else the
metrics table. `--json` keeps the rest.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from campaign.core import metrics
from campaign.core.states import Mode, ProbeName
from cli.app import console

COUNTED_ELSEWHERE = (metrics.ERRORS.name, metrics.NOT_RUN.name)  # failures: in the table by kind, not as medians of 1


def print_summary(name: str, sink: Any) -> int:
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

    from arms.probes.load_curve import curve_rows, sweep_result

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
