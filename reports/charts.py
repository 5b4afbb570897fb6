"""Inline-SVG charts drawn by pygal, made safe to paste into a page that opens offline.

Why pygal: it renders finished SVG on the server (no JavaScript needed to draw), builds
the document with ElementTree (so every label and title is XML-escaped), and embeds its
CSS in the SVG. Two things it does by default are removed here: it links a tooltip script
from a CDN (turned off with ``js=[]``) and writes an inline ``<script>`` holding its
config (stripped below, since nothing reads it and a report page runs no script at all).
Its chart ids are random; they are fixed per chart so two renders of one store are equal.

Conventions every chart follows: canonical series solid, greedy series the same hue at
a third of the opacity, both axes titled with their unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pygal
from markupsafe import Markup
from pygal.style import Style

PALETTE = ["#2f6fb0", "#d9822b", "#3a9a5b", "#b04a4a", "#7b5ea7", "#5b8a8a", "#a0892c", "#c2577f", "#3d4f63", "#8c6d46"]
GREEDY_ALPHA = 0.35
_FONT = 'system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif'

_SCRIPT = re.compile(r"<script\b[^>]*?(?:/>|>.*?</script>)", re.DOTALL | re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_EXTERNAL = re.compile(
    r"""(?:\b(?:href|src)\s*=\s*["'](?!#)[^"']*["'])|(?:@import)|(?:url\(\s*["']?(?!#)[^)]*\))|<script\b|<foreignObject\b""",
    re.IGNORECASE,
)


@dataclass
class Series:
    """One line or one set of bars. `mode` greedy draws it dimmed; `labels` are per-value
    notes (e.g. which arm gave a 'best' bar) written into the SVG's value descriptions."""

    name: str
    values: list[float | None]
    mode: str = "canonical"
    color: int = 0
    labels: list[str | None] = field(default_factory=list)
    dashed: bool = False


def color_of(index: int, mode: str = "canonical") -> str:
    hexa = PALETTE[index % len(PALETTE)]
    if mode != "greedy":
        return hexa
    r, g, b = (int(hexa[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{GREEDY_ALPHA})"


def _style(series: list[Series]) -> Style:
    return Style(
        font_family=_FONT,
        background="#ffffff",
        plot_background="#ffffff",
        foreground="rgba(0,0,0,.8)",
        foreground_strong="rgba(0,0,0,.9)",
        foreground_subtle="rgba(0,0,0,.25)",
        opacity="1",
        opacity_hover="1",
        transition="0ms",
        colors=tuple(color_of(s.color, s.mode) for s in series) or (PALETTE[0],),
        title_font_size=15,
        label_font_size=12,
        major_label_font_size=12,
        legend_font_size=12,
        value_font_size=11,
        tooltip_font_size=12,
    )


def _common(chart_id: str, title: str, x_title: str, y_title: str, series: list[Series], **extra: Any) -> dict[str, Any]:
    return dict(
        js=[],
        disable_xml_declaration=True,
        no_prefix=False,
        title=title,
        x_title=x_title,
        y_title=y_title,
        style=_style(series),
        legend_at_bottom=True,
        legend_at_bottom_columns=min(4, max(1, len(series))),
        truncate_legend=-1,
        truncate_label=-1,
        width=extra.pop("width", 820),
        height=extra.pop("height", 380),
        margin=12,
        **extra,
    )


def _fmt(value: float) -> str:
    if value is None:
        return ""
    v = abs(value)
    if v >= 100:
        return f"{value:,.0f}"
    if v >= 10:
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.3g}"


def _values(s: Series) -> list[Any]:
    out: list[Any] = []
    for i, v in enumerate(s.values):
        label = s.labels[i] if i < len(s.labels) else None
        if v is None or label is None:
            out.append(v)
        else:
            out.append({"value": v, "label": label})
    return out


def _add(chart: Any, s: Series) -> None:
    kwargs: dict[str, Any] = {}
    if s.dashed:
        kwargs["stroke_style"] = {"dasharray": "6,4", "width": 2}
    chart.add(s.name, _values(s), **kwargs)


def _finish(chart: Any, chart_id: str) -> Markup:
    chart.uuid = re.sub(r"[^A-Za-z0-9_-]", "-", chart_id)
    return Markup(sanitize(chart.render(is_unicode=True)))


def sanitize(svg: str) -> str:
    """Drop pygal's config script and its comments (which carry a date); the rest is the
    ElementTree-serialized, already escaped SVG."""
    return _COMMENT.sub("", _SCRIPT.sub("", svg))


def external_references(svg_or_html: str) -> list[str]:
    """Anything in the text that would make a browser fetch or run something: scripts,
    href/src other than in-page anchors, CSS imports and url() loads. Empty = safe."""
    return [m.group(0) for m in _EXTERNAL.finditer(svg_or_html)]


def empty(title: str, message: str) -> Markup:
    """What stands where a chart would be when nothing was measured for it."""
    return Markup('<p class="empty"><strong>{}</strong>: {}</p>').format(title, message)


def bar_chart(
    chart_id: str,
    title: str,
    categories: list[str],
    series: list[Series],
    *,
    x_title: str,
    y_title: str,
    horizontal: bool = False,
    print_values: bool | None = None,
) -> Markup:
    """Bars per category, one bar per series (canonical solid, greedy dimmed)."""
    if not categories or not any(v is not None for s in series for v in s.values):
        return empty(title, "no measurements yet")
    bars = len(categories) * len(series)
    if print_values is None:
        print_values = bars <= 24
    cls = pygal.HorizontalBar if horizontal else pygal.Bar
    chart = cls(
        **_common(
            chart_id, title, x_title, y_title, series,
            print_values=print_values,
            print_values_position="top",
            value_formatter=_fmt,
            x_label_rotation=0 if len(categories) <= 8 else 30,
            height=max(300, 28 * bars + 160) if horizontal else 380,
        )
    )
    chart.x_labels = categories
    for s in series:
        _add(chart, s)
    return _finish(chart, chart_id)


def line_chart(
    chart_id: str,
    title: str,
    x_labels: list[str],
    series: list[Series],
    *,
    x_title: str,
    y_title: str,
    height: int = 340,
) -> Markup:
    """Lines over ordered categories (turns); dashed series for baselines."""
    if not x_labels or not any(v is not None for s in series for v in s.values):
        return empty(title, "no measurements yet")
    chart = pygal.Line(
        **_common(chart_id, title, x_title, y_title, series, height=height, value_formatter=_fmt, allow_interruptions=True, dots_size=3)
    )
    chart.x_labels = x_labels
    for s in series:
        _add(chart, s)
    return _finish(chart, chart_id)


def xy_chart(
    chart_id: str,
    title: str,
    series: list[tuple[str, list[tuple[float, float]], int]],
    *,
    x_title: str,
    y_title: str,
    height: int = 260,
) -> Markup:
    """Time series as (x, y) points, drawn as steps (a sampled gauge holds its value)."""
    if not any(points for _, points, _ in series):
        return empty(title, "no samples")
    styles = [Series(name, [], color=color) for name, _, color in series]
    chart = pygal.XY(
        **_common(
            chart_id, title, x_title, y_title, styles, height=height, value_formatter=_fmt,
            x_value_formatter=lambda v: f"{v:g}", interpolate=None, show_dots=False, fill=False, stroke_style={"width": 2},
        )
    )
    for name, points, _ in series:
        chart.add(name, _steps(points))
    return _finish(chart, chart_id)


def _steps(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if out:
            out.append((x, out[-1][1]))
        out.append((x, y))
    return out
