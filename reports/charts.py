"""Small inline-SVG charts (no scripts, no network), escaped like every other value."""

from __future__ import annotations

from html import escape

import pandas as pd

from campaign.states import Mode

PALETTE = ["#2f6fb0", "#d9822b", "#3a9a5b", "#b04a4a", "#7b5ea7", "#5b8a8a", "#a0892c", "#c2577f"]


def median_by(frame: pd.DataFrame, metric: str, key: str) -> dict[str, dict[str, float]]:
    """{label: {mode: median}} for one metric."""
    if frame.empty:
        return {}
    rows = frame[(frame["metric"] == metric) & (frame["trial"] >= 0)]
    out: dict[str, dict[str, float]] = {}
    for (label, mode), values in rows.groupby([key, "mode"])["value"]:
        out.setdefault(str(label), {})[str(mode)] = float(values.median())
    return out


def median_by2(frame: pd.DataFrame, metric: str, group: str, series: str) -> dict[str, dict[str, float]]:
    """{group: {series: median}} over canonical rows."""
    if frame.empty:
        return {}
    rows = frame[(frame["metric"] == metric) & (frame["mode"] == Mode.CANONICAL.value)]
    out: dict[str, dict[str, float]] = {}
    for (g, s), values in rows.groupby([group, series])["value"]:
        out.setdefault(str(g), {})[str(s)] = float(values.median())
    return out


def bar_chart(data: dict[str, dict[str, float]], *, title: str, unit: str) -> str:
    """Horizontal bars per label; canonical solid, greedy dimmed beside it."""
    if not data:
        return f'<p class="empty">{escape(title)}: no measurements yet.</p>'
    rows = [(label, mode, v) for label, modes in sorted(data.items()) for mode, v in sorted(modes.items())]
    vmax = max(v for _, _, v in rows) or 1.0
    h, left, width = 22, 150, 360
    height = len(rows) * h + 40
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {left + width + 80} {height}" aria-label="{escape(title)}">']
    parts.append(f'<text x="0" y="14" class="ct">{escape(title)} ({escape(unit)})</text>')
    for i, (label, mode, v) in enumerate(rows):
        y = 24 + i * h
        w = max(1.0, width * v / vmax)
        opacity = "1" if mode == Mode.CANONICAL.value else "0.35"
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{escape(label)} · {escape(mode)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{h - 6}" fill="{PALETTE[0]}" fill-opacity="{opacity}"/>')
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 14}">{v:.3g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def grouped_bars(data: dict[str, dict[str, float]], *, title: str, unit: str) -> str:
    if not data:
        return f'<p class="empty">{escape(title)}: no measurements yet.</p>'
    series = sorted({s for vals in data.values() for s in vals})
    groups = list(data)
    vmax = max(v for vals in data.values() for v in vals.values()) or 1.0
    bw, gap, chart_h, top = 14, 18, 160, 24
    width = len(groups) * (len(series) * bw + gap) + 60
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {chart_h + top + 60}" aria-label="{escape(title)}">']
    parts.append(f'<text x="0" y="14" class="ct">{escape(title)} ({escape(unit)})</text>')
    x = 40
    for g in groups:
        for j, s in enumerate(series):
            v = data[g].get(s)
            if v is None:
                continue
            bh = chart_h * v / vmax
            parts.append(
                f'<rect x="{x + j * bw}" y="{top + chart_h - bh:.1f}" width="{bw - 2}" height="{bh:.1f}" fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(s)} {escape(g)}: {v:.3g}</title></rect>'
            )
        parts.append(f'<text x="{x}" y="{top + chart_h + 14}">{escape(g)}</text>')
        x += len(series) * bw + gap
    for j, s in enumerate(series):
        parts.append(f'<rect x="{40 + j * 70}" y="{top + chart_h + 28}" width="10" height="10" fill="{PALETTE[j % len(PALETTE)]}"/>')
        parts.append(f'<text x="{54 + j * 70}" y="{top + chart_h + 37}">{escape(s)}</text>')
    parts.append("</svg>")
    return "".join(parts)
