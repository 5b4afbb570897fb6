"""Inline-SVG charts drawn by pygal, made safe to paste into a page that opens offline.

Why pygal: it renders finished SVG on the server (no JavaScript needed to draw), builds
the document with ElementTree (so every label and title is XML-escaped), and embeds its
CSS in the SVG. Two things it does by default are removed here: it links a tooltip script
from a CDN (turned off with ``js=[]``) and writes an inline ``<script>`` holding its
config (stripped below, since nothing reads it and a report page runs no script at all).
Its chart ids are random; they are fixed per chart so two renders of one store are equal.

Conventions every chart follows: canonical series solid, greedy series the same hue at
a third of the opacity, both axes titled with their unit, and an arm drawn in its own
colour on every page that compares arms (`ReportData.arm_color`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pygal
from markupsafe import Markup
from pygal.style import Style

from campaign.core.units import num, plain

PALETTE = ["#2f6fb0", "#d9822b", "#3a9a5b", "#b04a4a", "#7b5ea7", "#5b8a8a", "#a0892c", "#c2577f", "#3d4f63", "#8c6d46"]
# Colours for series that are not arms (kinds of recipe: with and without speculation),
# outside the arms' palette so that no bar of a kind looks like an arm; index -1, -2, ...
NEUTRAL = ["#4d5866", "#a7b0bb", "#7d8793"]
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
    intervals: list[tuple[float, float] | None] = field(default_factory=list)  # per value: error bar (low, high)
    colors: list[int | None] = field(
        default_factory=list
    )  # per value: a palette index (an arm's colour), else the series'


def color_of(index: int, mode: str = "canonical") -> str:
    """An arm's colour for index >= 0 (`ReportData.arm_color`), a neutral one for -1, -2."""
    hexa = PALETTE[index % len(PALETTE)] if index >= 0 else NEUTRAL[(-index - 1) % len(NEUTRAL)]
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


LEGEND_MAX_COLUMNS = 6
_CHAR_PX = 6.5  # legend_font_size 12: an average character, with some room


def legend_columns(names: list[str], width: int) -> int:
    """Columns of a bottom legend: as many as the longest name allows (up to
    `LEGEND_MAX_COLUMNS`), and a divisor of the number of series.

    Why a divisor: pygal reserves `len(series) // columns` legend rows under the plot,
    rounding down, so a partly filled last row is drawn below the picture's edge (the
    demo's cache-probe chart lost arm C that way). With whole rows, every entry shows."""
    n = max(1, len(names))
    longest = max((len(name) for name in names), default=1)
    fit = max(1, int((width - 40) // (longest * _CHAR_PX + 30)))
    limit = min(n, LEGEND_MAX_COLUMNS, fit)
    return max(c for c in range(1, limit + 1) if n % c == 0)


def _common(
    chart_id: str, title: str, x_title: str, y_title: str, series: list[Series], **extra: Any
) -> dict[str, Any]:
    width = extra.pop("width", 820)
    columns = legend_columns([s.name for s in series], width)
    rows = -(-max(1, len(series)) // columns)
    return dict(
        js=[],
        disable_xml_declaration=True,
        no_prefix=False,
        title=title,
        x_title=x_title,
        y_title=y_title,
        style=_style(series),
        legend_at_bottom=True,
        legend_at_bottom_columns=columns,
        truncate_legend=-1,
        truncate_label=-1,
        width=width,
        height=extra.pop("height", 380) + 27 * (rows - 1),  # the plot keeps its size beside a taller legend
        margin=12,
        **extra,
    )


def _value(value: Any) -> str:
    """A drawn value (tooltip, printed value) reads as in the tables; an (x, y) point of an
    XY chart as "x: y", as pygal writes it; a gap as nothing."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        x, y = value
        return f"{plain(x)}: {_value(y)}"
    return num(value)


def _values(s: Series) -> list[Any]:
    """pygal values: plain numbers, or dicts carrying a label and an error bar (pygal draws
    `ci` low/high as a whisker on the bar: the interval a gate read)."""
    out: list[Any] = []
    for i, v in enumerate(s.values):
        label = s.labels[i] if i < len(s.labels) else None
        interval = s.intervals[i] if i < len(s.intervals) else None
        color = s.colors[i] if i < len(s.colors) else None
        if v is None or (label is None and interval is None and color is None):
            out.append(v)
            continue
        value: dict[str, Any] = {"value": v}
        if color is not None:
            value["color"] = color_of(color, s.mode)
        if label is not None:
            value["label"] = label
        if interval is not None:
            value["ci"] = {"low": interval[0], "high": interval[1]}  # pygal: type "manual" by default
        out.append(value)
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
    print_labels: bool = False,
    legend: bool = True,
) -> Markup:
    """Bars per category, one bar per series (canonical solid, greedy dimmed); `legend`
    False where the categories already name what each bar is (bars in their arms' colours).
    `print_labels` writes each bar's label with its value ("B @ 4096 · 69") above the bar,
    visibly: which arm a 'best' bar is, not only in the SVG's hidden description."""
    if not categories or not any(v is not None for s in series for v in s.values):
        return empty(title, "no measurements yet")
    bars = len(categories) * len(series)
    if print_values is None:
        print_values = bars <= 24
    css: dict[str, Any] = {}
    if print_labels:  # one centred text per bar; pygal would print the value apart, overlapping
        series = [_with_values_in_labels(s) for s in series]
        print_values = False
        scope = re.sub(r"[^A-Za-z0-9_-]", "-", chart_id)
        css["css"] = [
            "file://style.css",
            "file://graph.css",
            f"inline:#chart-{scope} .text-overlay text.label{{text-anchor:middle}}",
        ]
    cls = pygal.HorizontalBar if horizontal else pygal.Bar
    extra: dict[str, Any] = {}
    highs = [iv[1] for s in series for iv in s.intervals if iv is not None]
    if highs:  # pygal scales to the values only: make room for the whiskers
        lows = [iv[0] for s in series for iv in s.intervals if iv is not None]
        top = max([*highs, *(v for s in series for v in s.values if v is not None)])
        extra["range"] = (min([0.0, *lows]), top * 1.08)
    chart = cls(
        **_common(
            chart_id,
            title,
            x_title,
            y_title,
            series,
            print_values=print_values,
            print_labels=print_labels,
            print_values_position="top",
            formatter=_value,
            value_formatter=plain,
            x_label_rotation=0 if len(categories) <= 8 else 30,
            height=max(300, 28 * bars + 160) if horizontal else 380,
            show_legend=legend,
            **extra,
            **css,
        )
    )
    chart.x_labels = categories
    for s in series:
        _add(chart, s)
    return _finish(chart, chart_id)


def _with_values_in_labels(s: Series) -> Series:
    from dataclasses import replace

    labels = [s.labels[i] if i < len(s.labels) else None for i in range(len(s.values))]
    return replace(
        s,
        labels=[
            f"{label} · {num(v)}" if label is not None and v is not None else label
            for label, v in zip(labels, s.values)
        ],
    )


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
        **_common(
            chart_id,
            title,
            x_title,
            y_title,
            series,
            height=height,
            formatter=_value,
            value_formatter=plain,
            allow_interruptions=True,
            dots_size=3,
        )
    )
    chart.x_labels = x_labels
    for s in series:
        _add(chart, s)
    return _finish(chart, chart_id)


def xy_chart(
    chart_id: str,
    title: str,
    series: list[tuple[str, list[tuple[float, float | None]], int]],
    *,
    x_title: str,
    y_title: str,
    height: int = 260,
) -> Markup:
    """Time series as (x, y) points, drawn as steps (a sampled gauge holds its value); a
    point with y None is a gap (a failed sample): the line stops there and resumes at the
    next value."""
    if not any(points for _, points, _ in series):
        return empty(title, "no samples")
    chart = _xy(
        chart_id,
        title,
        series,
        x_title,
        y_title,
        height,
        interpolate=None,
        show_dots=False,
        fill=False,
        stroke_style={"width": 2},
        allow_interruptions=True,
    )
    for name, points, _ in series:
        chart.add(name, _steps(points))
    return _finish(chart, chart_id)


def _xy(chart_id: str, title: str, series: list[Any], x_title: str, y_title: str, height: int, **style: Any) -> Any:
    """A pygal XY chart in the series' colours, values written plainly."""
    styles = [Series(name, [], color=color) for name, _, color in series]
    return pygal.XY(
        **_common(
            chart_id,
            title,
            x_title,
            y_title,
            styles,
            height=height,
            formatter=_value,
            value_formatter=plain,
            x_value_formatter=plain,
            **style,
        )
    )


def _steps(points: list[tuple[float, float | None]]) -> list[tuple[float, float | None]]:
    out: list[tuple[float, float | None]] = []
    for x, y in sorted(points, key=lambda p: p[0]):
        if out and out[-1][1] is not None:
            out.append((x, out[-1][1]))  # held until this point (or until the gap)
        out.append((x, y))
    return out


@dataclass
class Curve:
    """A line through measured (x, y) points, e.g. a latency against the offered rate."""

    name: str
    points: list[tuple[float, float]]
    color: int = 0
    mode: str = "canonical"
    dashed: bool = False


def curve_chart(
    chart_id: str, title: str, curves: list[Curve], *, x_title: str, y_title: str, height: int = 320
) -> Markup:
    """Curves through their points with dots (measured runs), sorted by x; dashed curves
    (markers, references) without dots' meaning, drawn the same way."""
    if not any(c.points for c in curves):
        return empty(title, "no runs")
    styles = [Series(c.name, [], mode=c.mode, color=c.color) for c in curves]
    chart = pygal.XY(
        **_common(
            chart_id,
            title,
            x_title,
            y_title,
            styles,
            height=height,
            formatter=_value,
            value_formatter=plain,
            x_value_formatter=plain,
            show_dots=True,
            dots_size=3,
            fill=False,
            stroke_style={"width": 2},
        )
    )
    for c in curves:
        kwargs: dict[str, Any] = (
            {"stroke_style": {"dasharray": "6,4", "width": 2}, "show_dots": False} if c.dashed else {}
        )
        chart.add(c.name, sorted(c.points), **kwargs)
    return _finish(chart, chart_id)


def scatter_chart(
    chart_id: str,
    title: str,
    series: list[tuple[str, list[tuple[float, float]], int]],
    *,
    x_title: str,
    y_title: str,
    height: int = 300,
) -> Markup:
    """Points without lines, one series a colour: trials of a search, a Pareto front."""
    if not any(points for _, points, _ in series):
        return empty(title, "no points yet")
    xs = [x for _, points, _ in series for x, _ in points]
    ys = [y for _, points, _ in series for _, y in points]
    chart = _xy(
        chart_id,
        title,
        series,
        x_title,
        y_title,
        height,
        stroke=False,
        show_dots=True,
        dots_size=4,
        xrange=_padded(xs),  # a point on the frame's edge is half hidden: leave a margin
        range=_padded(ys),
    )
    for name, points, _ in series:
        chart.add(name, points)
    return _finish(chart, chart_id)


def _padded(values: list[float], share: float = 0.1) -> tuple[float, float]:
    """The values' range widened by `share` of its span each way (of the value, when all
    are equal), not below 0 when none is negative."""
    low, high = min(values), max(values)
    pad = (high - low) * share or abs(high) * share or 1.0
    bottom = low - pad
    return (max(0.0, bottom) if low >= 0 else bottom, high + pad)
