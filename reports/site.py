"""Write the static site: an index, one page per gate, one page per arm."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

from campaign.states import Mode
from campaign.store import Store
from campaign.summary import summarize
from reports import charts


def _env() -> Environment:
    env = Environment(loader=PackageLoader("reports", "templates"), autoescape=select_autoescape(["html"]))
    env.filters["num"] = _num
    env.filters["slug"] = slug
    return env


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _num(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _metric_table(frame: pd.DataFrame) -> list[dict[str, Any]]:
    if frame.empty:
        return []
    grouped = (
        frame[frame["trial"] >= 0]
        .groupby(["arm_id", "probe", "scenario", "mode", "context", "metric", "unit", "source"], dropna=False)["value"]
        .agg(["median", "min", "max", "count"])
        .reset_index()
    )
    return grouped.to_dict("records")


def write_site(store: Store, name: str | None, out: Path | str) -> Path:
    out = Path(out)
    (out / "gates").mkdir(parents=True, exist_ok=True)
    (out / "arms").mkdir(parents=True, exist_ok=True)
    s = summarize(store, name)
    env = _env()
    frame = store.measurements_frame(s.campaign_id)
    canonical = frame[frame["mode"] == Mode.CANONICAL.value] if not frame.empty else frame
    arms = store.arms(s.campaign_id)
    attempts = store.attempts(s.campaign_id)

    decode_chart = charts.bar_chart(
        charts.median_by(frame, "decode_tps", "arm_id"), title="Decode per arm", unit="tok/s"
    )
    reuse_chart = charts.grouped_bars(
        charts.median_by2(frame, "reuse", "scenario", "arm_id"), title="Cache-probe reuse by scenario", unit="ratio"
    )
    common = {"s": s, "simulated": bool(s.simulated_arms)}
    index = out / "index.html"
    index.write_text(
        env.get_template("index.html").render(
            **common, arms=arms, decode_chart=decode_chart, reuse_chart=reuse_chart, root="",
        ),
        encoding="utf-8",
    )
    for gate in s.gates:
        ids = [*gate.subjects, *gate.baseline]
        rows = _metric_table(canonical[canonical["arm_id"].isin(ids)] if not canonical.empty else canonical)
        history = store.verdict_history(s.campaign_id, gate.id)
        (out / "gates" / f"{slug(gate.id)}.html").write_text(
            env.get_template("gate.html").render(
                **common, gate=gate, rows=rows, history=history, root="../",
                evidence=json.dumps(gate.evidence, indent=2, default=str),
            ),
            encoding="utf-8",
        )
    for arm in arms:
        arm_frame = frame[frame["arm_id"] == arm.arm_id] if not frame.empty else frame
        arm_attempts = [a for a in attempts if a.arm_id == arm.arm_id]
        (out / "arms" / f"{slug(arm.arm_id)}.html").write_text(
            env.get_template("arm.html").render(
                **common, arm=arm, recipe=json.loads(arm.recipe_json), rows=_metric_table(arm_frame),
                attempts=arm_attempts, root="../",
            ),
            encoding="utf-8",
        )
    return index.resolve()
