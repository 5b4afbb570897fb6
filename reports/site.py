"""Write the static site: an index, one page per gate, one page per arm (with its raw
records beside it). Data is loaded and aggregated once (`reports.data.load`); each page
module only slices it.

A folder holds one campaign's report (the command line's default is
reports/site/<campaign>/): the pages a previous report wrote there are removed first, so
a report never shows a gate or an arm of another campaign, or of an older run of this one
whose gates or arms have since been renamed. Only files the report itself writes are
removed (`PAGE_PATTERNS`); anything else in the folder is left alone.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader

from campaign.core.units import num
from campaign.store.store import Store
from campaign.store.study import summary as search_summary
from reports import (
    agent_load,
    arm_page,
    coverage,
    energy,
    gate_page,
    history_page,
    index_page,
    mechanisms,
    raw,
    search_page,
)
from reports.answer import question
from reports.data import ReportData, load


def when(value: Any) -> str:
    """A stored time as a person reads it: to the second, in UTC, said so. The store keeps
    UTC (naive on SQLite, aware on Postgres); microseconds say nothing on a page."""
    if value is None or value == "":
        return ""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def _env() -> Environment:
    # autoescape for every template, whatever its extension: nothing from the store or a
    # model's output reaches a page unescaped. Charts arrive as Markup from reports.charts.
    env = Environment(
        loader=PackageLoader("reports", "templates"), autoescape=True, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["num"] = num
    env.filters["when"] = when
    return env


PAGE_PATTERNS = (
    "index.html",
    "search.html",
    "gates/*.html",
    "arms/*.html",
    "arms/*.requests.jsonl",
    "history/*.html",
)


def default_folder(root: Path | str, campaign_name: str) -> Path:
    """reports/site/<campaign>: one folder per campaign, named safely for any file system."""
    from campaign.core.schema import slugify

    return Path(root) / slugify(campaign_name)


def clean(out: Path) -> int:
    """Remove the pages an earlier report wrote into `out`; returns how many."""
    removed = 0
    for pattern in PAGE_PATTERNS:
        for path in out.glob(pattern):
            if path.is_file():
                path.unlink()
                removed += 1
    return removed


def write_site(store: Store, name: str | None, out: Path | str, timings: dict[str, float] | None = None) -> Path:
    """Render every page into `out` (after removing the pages of an earlier report there)
    and return the index path. `timings`, if given, is filled with seconds per phase (the
    benchmark prints them)."""
    clock = _Clock(timings)
    out = Path(out)
    data = load(store, name)  # before cleaning: a report that cannot load leaves the old one
    clean(out)
    (out / "gates").mkdir(parents=True, exist_ok=True)
    (out / "arms").mkdir(parents=True, exist_ok=True)
    clock.lap("load")
    env = _env()
    common = {
        "s": data.summary,
        "simulated": bool(data.summary.simulated_arms),
        "arm_pages": data.arm_pages,
        "gate_pages": data.gate_pages,
    }

    raws = raw.write(store, data.campaign_id, out / "arms", data.arm_pages)
    clock.lap("raw records")
    found = search_summary(store, data.summary.spec)
    search = search_page.build(data, found) if found is not None else None
    if search is not None:
        _write(out / "search.html", env.get_template("search.html").render(**common, root="", p=search))
    index = out / "index.html"
    _write(index, env.get_template("index.html").render(**common, root="", search=search, **_index_context(data)))
    clock.lap("index")
    template = env.get_template("gate.html")
    for gate in data.summary.gates:
        page = gate_page.build(data, gate)
        _write(out / "gates" / f"{data.gate_pages[gate.id]}.html", template.render(**common, root="../", p=page))
    clock.lap("gates")
    template = env.get_template("arm.html")
    for arm in data.arms:
        page = arm_page.build(store, data, arm, raws)
        _write(out / "arms" / f"{data.arm_pages[arm.arm_id]}.html", template.render(**common, root="../", p=page))
    clock.lap("arms")
    (out / "history").mkdir(exist_ok=True)
    template = env.get_template("history.html")
    for arm in data.arms:
        history = history_page.build(store, data, arm.arm_id)
        _write(out / "history" / f"{data.arm_pages[arm.arm_id]}.html", template.render(**common, root="../", p=history))
    clock.lap("history")
    return index.resolve()


def _index_context(data: ReportData) -> dict[str, Any]:
    return {
        "arms": data.arms,
        "answer": index_page.answer(data),
        "question": question(data.summary) or data.summary.spec.campaign.description or "What the campaign found",
        "coverage": coverage.build(data),
        "mechanisms": mechanisms.build(data),
        "agent_turns": agent_load.turns(data),
        "first_and_later": agent_load.first_and_later(data),
        "decode_context": index_page.decode_per_context(data),
        "decode_runtime": index_page.decode_per_runtime(data),
        "decode_quant": index_page.decode_per_quant(data),
        "reuse_chart": index_page.reuse_by_scenario(data),
        "energy": energy.build(data),
        "runtimes": index_page.runtime_offerings(data),
        "quants": index_page.quant_offerings(data),
        "identity": index_page.identity_rows(data),
        "gate_sim": {g.id: index_page.gate_is_simulated(data, [*g.subjects, *g.baseline]) for g in data.summary.gates},
    }


def _write(path: Path, html: str) -> None:
    path.write_text(html, encoding="utf-8")


class _Clock:
    def __init__(self, sink: dict[str, float] | None):
        self.sink = sink
        self.t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        if self.sink is not None:
            self.sink[name] = now - self.t
        self.t = now
