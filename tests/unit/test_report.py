"""The static report, on a store built by hand (tests.synthetic): pages for every gate
and arm, escaping of hostile text everywhere, the coverage matrix, agent-load charts, raw
records, self-contained charts, export and the `ui` command's server handling."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from markupsafe import escape

from campaign.store.store import Store
from campaign.store.tables import MeasurementRow
from cli import ui_server as prefect_ui
from reports import charts, coverage
from reports.data import load, page_names
from reports.site import write_site
from tests import synthetic

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Path, synthetic.Options]:
    root = tmp_path_factory.mktemp("report")
    store = Store(f"sqlite:///{root / 'c.db'}")
    opts = synthetic.Options(hostile=HOSTILE, answer=f"{HOSTILE} the answer", served_suffix=HOSTILE)
    cid = synthetic.build(store, opts)
    # a scenario name from the store ends up as a chart category and a coverage column
    att = store.attempts(cid, "cache", "A0")[-1]
    run = store.probe_runs(att.id)[0]
    store.add(
        MeasurementRow(
            campaign_id=cid,
            attempt_id=att.id,
            probe_run_id=run.id,
            item_key="cache",
            arm_id="A0",
            probe="cache-probe",
            scenario=HOSTILE,
            mode="canonical",
            context=32768,
            metric="reuse",
            value=0.5,
            unit="ratio",
            simulated=True,
        )
    )
    index = write_site(store, None, root / "site")
    return store, index.parent, opts


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_a_page_for_every_gate_and_arm(built: tuple[Store, Path, synthetic.Options]) -> None:
    store, site, _ = built
    data = load(store)
    index = (site / "index.html").read_text()
    for gate in data.summary.gates:
        page = site / "gates" / f"{data.gate_pages[gate.id]}.html"
        assert page.exists(), gate.id
        assert f'href="gates/{data.gate_pages[gate.id]}.html"' in index
    for arm in data.arms:
        assert (site / "arms" / f"{data.arm_pages[arm.arm_id]}.html").exists(), arm.arm_id
        assert (site / "history" / f"{data.arm_pages[arm.arm_id]}.html").exists(), arm.arm_id
    # "spec" and "Spec" are different gates: neither page overwrites the other
    assert {"spec.html", "spec-2.html"} <= {p.name for p in (site / "gates").iterdir()}
    assert len(_pages(site)) == 1 + len(data.summary.gates) + 2 * len(data.arms)  # an arm page and its history


def test_hostile_text_is_escaped_in_every_page(built: tuple[Store, Path, synthetic.Options]) -> None:
    _, site, _ = built
    for page in _pages(site):
        html = page.read_text()
        assert HOSTILE not in html, page
        assert "<script" not in html.lower(), page  # the report runs no script at all
        assert ESCAPED in html, f"{page}: the campaign title should appear, escaped"
    arm = (site / "arms" / "a0.html").read_text()
    assert f"{ESCAPED} the answer" in arm  # a model's answer
    assert f"m-q4{ESCAPED}" in arm  # the served model name the server reported
    index = (site / "index.html").read_text()
    assert f"<title>Synthetic campaign{ESCAPED}</title>" in index
    # inside the SVG: the scenario from the store is an escaped chart label
    svg = re.search(r'<svg[^>]*id="chart-reuse-scenario".*?</svg>', index, re.S)
    assert svg and ESCAPED in svg.group(0)


def test_pages_reference_nothing_outside(built: tuple[Store, Path, synthetic.Options]) -> None:
    _, site, _ = built
    for page in _pages(site):
        html = page.read_text()
        for ref in re.findall(r'(?:href|src)\s*=\s*"([^"]*)"', html):
            assert "//" not in ref and not ref.startswith(("data:", "javascript:")), (page, ref)
            if not ref.startswith("#"):
                assert (page.parent / ref).resolve().exists(), (page, ref)
        assert "@import" not in html and "url(" not in html, page
        assert "Content-Security-Policy" in html


def test_charts_are_inline_svg_without_external_references() -> None:
    svg = charts.bar_chart(
        "t",
        HOSTILE,
        ["a", HOSTILE],
        [charts.Series("canonical", [1.0, 2.0]), charts.Series("greedy", [1.5, None], mode="greedy")],
        x_title="arm",
        y_title="decode (tok/s)",
    )
    assert str(svg).startswith("<svg") and charts.external_references(str(svg)) == []
    assert HOSTILE not in svg and ESCAPED in svg
    assert "decode (tok/s)" in svg and "rgba(47,111,176,0.35)" in svg  # unit on the axis; greedy dimmed
    assert 'id="chart-t"' in svg  # fixed ids: two renders of one store are equal
    assert charts.bar_chart("e", "nothing", [], [], x_title="x", y_title="y").startswith('<p class="empty">')


def test_coverage_matrix_cells(built: tuple[Store, Path, synthetic.Options]) -> None:
    store, _, _ = built
    cov = coverage.build(load(store))
    keys = [c.key for c in cov.columns]
    rows = {r.arm_id: dict(zip(keys, r.cells, strict=True)) for r in cov.rows}
    assert rows["A0"]["scenario:identical"].state == "canonical"
    assert (
        rows["A0"]["scenario:identical"].text == "0.996"
    )  # was "1.00": two decimals rounded the 0.996 up; green says canonical
    assert rows["A2"]["scenario:append"].state == "greedy"  # greedy-only cache probing
    assert rows["A2"]["scenario:append"].text.startswith("greedy only")
    assert rows["A4"]["scenario:cold"].state == "none"  # blocked: not run, and says why
    assert "blocked" in rows["A4"]["scenario:cold"].title
    assert rows["A4"]["context:4096"].state == "none"
    assert rows["A0"]["probe:cache-ceiling"].state == "planned"  # a pending item will measure it
    assert rows["A2"]["probe:cache-ceiling"].state == "none"
    assert rows["A0"]["probe:decode"].state == "canonical"
    assert rows["A0"]["spec"].state == "off"
    assert rows["A1"]["spec"].state == "canonical" and "accept 0.80" in rows["A1"]["spec"].text
    assert rows["A0"]["context:32768"].state == "canonical"
    assert rows["A0"]["probe:agent-load"].state == "canonical"


def test_coverage_marks_what_a_failed_item_did_not_measure_as_failed(tmp_path: Path) -> None:
    """An arm whose every request failed must never read as measured, nor as merely not run."""
    from campaign.core.states import ItemState
    from campaign.store.tables import QueueItemRow

    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    cid = synthetic.build(store, synthetic.Options())
    (later,) = [i for i in store.items(cid) if i.key == "later"]
    store.update(QueueItemRow, later.id, state=ItemState.FAILED, reason="A0: 3/3 requests failed, HTTP 400")
    cov = coverage.build(load(store))
    keys = [c.key for c in cov.columns]
    rows = {r.arm_id: dict(zip(keys, r.cells, strict=True)) for r in cov.rows}
    cell = rows["A0"]["probe:cache-ceiling"]
    assert cell.state == "failed" and cell.text == "failed" and "3/3 requests failed" in cell.title
    assert rows["A0"]["probe:decode"].state == "canonical"  # what the arm did measure stays measured
    assert rows["A2"]["probe:cache-ceiling"].state == "none"  # not in the failed item
    page = write_site(store, None, tmp_path / "site").read_text()
    assert 'class="c-failed"' in page or "c-failed" in page


def test_fast_loader_agrees_with_the_store(built: tuple[Store, Path, synthetic.Options]) -> None:
    store, _, _ = built
    cid = store.campaign().id
    for latest in (True, False):
        mine = store.measurements_frame(cid, latest_only=latest).sort_values("id").reset_index(drop=True)
        theirs = store.measurements_frame(cid, latest_only=latest).sort_values("id").reset_index(drop=True)
        assert len(mine) == len(theirs) > 0
        pd.testing.assert_frame_equal(mine[list(theirs.columns)], theirs, check_dtype=False)


def test_agent_load_charts_and_their_absence(built: tuple[Store, Path, synthetic.Options]) -> None:
    _, site, _ = built
    a0 = (site / "arms" / "a0.html").read_text()
    assert "TTFT per turn, per conversation" in a0 and "Queue depth during the load" in a0
    assert "conversation 3" in a0 and "single stream (baseline)" in a0
    assert "TTFT (s)" in a0 and "requests" in a0
    assert "no agent-load measured" in (site / "arms" / "a1.html").read_text()


def test_raw_records_beside_the_arm_page(built: tuple[Store, Path, synthetic.Options]) -> None:
    _, site, opts = built
    a0 = (site / "arms" / "a0.html").read_text()
    assert 'href="a0.requests.jsonl"' in a0
    lines = (site / "arms" / "a0.requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert records and all(r["arm"] == "A0" for r in records)
    assert records[0]["record"]["text"] == opts.answer  # the same JSON, "<" written as \u003c
    assert "<" not in "".join(lines)
    assert {r["probe"] for r in records} == {"cache-probe", "decode", "agent-load"}


def test_gate_page_shows_reason_evidence_arms_chart_history(built: tuple[Store, Path, synthetic.Options]) -> None:
    _, site, _ = built
    spec = (site / "gates" / "spec.html").read_text()
    # the gain with its interval, over the server runs of the shared blocks
    assert re.search(
        r"decode_tps: (at \d+K: )?A1 [\d.]+ \(\+\d+% \[\+\d+%, \+\d+%\] 95% CI, paired over 3 blocks, 3 runs x 3 requests\) vs A0",
        spec,
    )
    assert "comparisons[0].gain" in spec and "cells[0].median" in spec  # evidence, flattened
    assert 'id="chart-gate-spec"' in spec and "decode_tps (tok/s)" in spec
    # what the gate read: each cell with n, its interval and error rate, drawn with whiskers
    read = spec[spec.index('id="read-cells"') : spec.index("</table>", spec.index('id="read-cells"'))]
    assert "A1" in read and "A0" in read and "decode/decode@" in read and "not recorded" in read
    assert 'id="read-comparisons"' in spec and "paired over 3 blocks" in spec
    # the view that decided: block by block, both arms' run values and their ratio
    paired = spec[spec.index('id="paired-1"') : spec.index("</table>", spec.index('id="paired-1"'))]
    assert "What decided A1 vs A0" in paired and paired.count("<tr>") == 1 + 3 and "decode/b0/5e771165" in paired
    assert 'class="ci"' in spec  # pygal's whisker for each bar's interval
    assert "baseline" in spec and "subject" in spec
    cache = (site / "gates" / "cache.html").read_text()
    assert cache.count('class="v-pending"') >= 1 and cache.count('class="v-pass"') >= 2  # history kept
    assert "server exited before healthy" in cache  # the failed attempt of its arm
    assert "span workload classes" in spec  # A0 batch vs A1 agent


def test_export_csv_round_trip(built: tuple[Store, Path, synthetic.Options], tmp_path: Path) -> None:
    from reports.export import export

    store, _, opts = built
    cid = store.campaign().id
    paths = export(store, cid, tmp_path, "csv")
    assert sorted(p.name for p in paths) == ["cells.csv", "measurements.csv", "samples.csv", "verdicts.csv"]
    back = pd.read_csv(tmp_path / "measurements.csv", keep_default_na=False)
    frame = store.measurements_frame(cid, latest_only=False)
    assert len(back) == len(frame)
    assert back.sort_values("id")["value"].tolist() == pytest.approx(frame.sort_values("id")["value"].tolist())
    counted = set(store.measurements_frame(cid)["id"])
    assert set(back.loc[back["counts"], "id"]) == counted
    samples = pd.read_csv(tmp_path / "samples.csv")
    assert len(samples) == opts.counts["samples"] and set(samples["series"]) == {"queue_depth", "slots_busy"}
    assert set(samples["arm_id"]) == {"A0"}
    verdicts = pd.read_csv(tmp_path / "verdicts.csv")
    assert list(verdicts["gate_id"]).count("cache") == 2


def test_one_cell_reads_one_number_on_the_gate_the_chart_the_coverage_and_the_export(
    built: tuple[Store, Path, synthetic.Options],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user read decode at 8K as 13.7 in the gate (geometric mean of run medians), 13.0 in
    the chart (a median) and 13.4 in the coverage matrix. Now each cell has one estimator,
    the gate's: the chart's bar and whisker, the coverage matrix and the export's cells
    table read the value and interval the gate's evidence holds."""
    from campaign.core.schema import GateEntry
    from campaign.core.units import num
    from gates.engine import evaluate
    from reports import coverage, index_page
    from reports.export import export

    store, _, _ = built
    data = load(store)
    gate = GateEntry(
        id="g",
        predicate="relative_improvement",
        subjects=["A1"],
        baseline=["A0"],
        params={"metric": "decode_tps", "probe": "decode", "min_gain": 0.1},
    )
    read = [c for c in evaluate(gate, store.measurements_frame(data.campaign_id)).evidence["cells"] if c["arm"] == "A1"]
    assert read and all(c["runs"] == 3 for c in read)
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(
        charts,
        "bar_chart",
        lambda chart_id, title, categories, series, **kw: drawn.setdefault(chart_id, (categories, series)),
    )
    index_page.decode_per_context(data)
    categories, series = drawn["decode-context"]
    bars = next(x for x in series if x.name.startswith("A1"))
    export(store, data.campaign_id, tmp_path, "csv")
    exported = pd.read_csv(tmp_path / "cells.csv")
    for cell in read:
        bar = categories.index(f"{cell['context'] // 1024}K")
        assert bars.values[bar] == pytest.approx(cell["median"])
        assert bars.intervals[bar] == pytest.approx((cell["low"], cell["high"]))
        row = exported[
            (exported["arm_id"] == "A1")
            & (exported["metric"] == "decode_tps")
            & (exported["context"] == cell["context"])
            & (exported["mode"] == "canonical")
        ]
        assert row["value"].tolist() == pytest.approx([cell["median"]]) and row["runs"].tolist() == [3]
    matrix = coverage.build(data)
    a1 = next(r for r in matrix.rows if r.arm_id == "A1")
    decode = a1.cells[[c.key for c in matrix.columns].index("probe:decode")]
    assert decode.text.startswith(num(max(c["median"] for c in read)))  # the best context's value, the gate's number


def test_the_mechanisms_table_shows_each_arms_counters_per_block(built: tuple[Store, Path, synthetic.Options]) -> None:
    """ "Did the cache get any hits?" is answered by a table on the front page: each arm's
    counters in total and per block (canonical rows), drafted and accepted tokens where a
    server counted them, resident memory where it was read."""
    from reports import mechanisms

    store, site, _ = built
    data = load(store)
    table = mechanisms.build(data)
    assert {"drafted tokens", "accepted tokens"} <= set(table.labels)
    rows = {r.arm_id: r for r in table.rows}
    frame = data.frame[(data.frame["mode"] == "canonical") & (data.frame["arm_id"] == "A1")]
    drafted = rows["A1"].cells[table.labels.index("drafted tokens")]
    assert drafted.total == f"{frame.loc[frame['metric'] == 'draft_tokens', 'value'].sum():,.0f}" != "0"
    accepted = rows["A1"].cells[table.labels.index("accepted tokens")]
    assert accepted.total == f"{frame.loc[frame['metric'] == 'accepted_tokens', 'value'].sum():,.0f}"
    assert all(len(c.blocks.split(" · ")) == rows["A1"].blocks for c in rows["A1"].cells if c.blocks)
    index = (site / "index.html").read_text()
    assert index.index('id="mechanisms"') < index.index('id="gate-verdicts"')  # on the first screen, after the answer


def test_agent_load_turns_show_the_first_turn_apart_with_the_gates_value(
    built: tuple[Store, Path, synthetic.Options],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TTFT by turn per arm on the front page: each turn's bar is that turn's cell value as a
    gate reads it (each run's median over its conversations, then over runs), the first
    turn named apart."""
    import statistics

    from reports import agent_load

    store, site, opts = built
    data = load(store)
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(
        charts,
        "bar_chart",
        lambda chart_id, title, categories, series, **kw: drawn.setdefault(chart_id, (categories, series)),
    )
    agent_load.turns(data)
    categories, series = drawn["agent-turns"]
    assert categories[0] == "turn 1 (first)" and len(categories) == opts.agent_turns
    (a0,) = [x for x in series if x.name.startswith("A0")]
    ttft = data.agent_ttft
    for turn in range(opts.agent_turns):
        conversations = ttft[
            (ttft["arm_id"] == "A0")
            & (ttft["scenario"].astype(str).str.fullmatch(rf"c\d+-t{turn}"))
            & (ttft["mode"] == "canonical")
        ]
        assert a0.values[turn] == pytest.approx(statistics.median(conversations["value"]))  # one run: its median
        assert a0.intervals[turn] is None  # one run draws no whisker
    assert 'id="chart-agent-turns-box"' in (site / "index.html").read_text()


def test_export_parquet_round_trip(built: tuple[Store, Path, synthetic.Options], tmp_path: Path) -> None:
    pytest.importorskip(
        "pyarrow", reason="parquet export needs the optional pyarrow (pip install 'llm-campaign[parquet]')"
    )
    from reports.export import export

    store, _, _ = built
    cid = store.campaign().id
    export(store, cid, tmp_path, "parquet")
    back = pd.read_parquet(tmp_path / "measurements.parquet")
    frame = store.measurements_frame(cid, latest_only=False)
    assert len(back) == len(frame) and set(back.loc[back["counts"], "id"]) == set(store.measurements_frame(cid)["id"])
    assert len(pd.read_parquet(tmp_path / "samples.parquet")) > 0


def _cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    from cli import main as cli

    monkeypatch.setattr(sys, "argv", ["campaign", *argv])
    try:
        cli.main()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_export_command(
    built: tuple[Store, Path, synthetic.Options],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _, _ = built
    db = store.url.removeprefix("sqlite:///")
    assert (
        _cli(
            monkeypatch,
            "export",
            "--format",
            "csv",
            "--out",
            str(tmp_path / "x"),
            "--db",
            db,
            "--campaign",
            "synthetic",
        )
        == 0
    )
    assert (tmp_path / "x" / "measurements.csv").exists()
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    assert _cli(monkeypatch, "export", "--format", "parquet", "--out", str(tmp_path / "y"), "--db", db) == 2
    assert "needs pyarrow" in capsys.readouterr().err
    assert not (tmp_path / "y" / "measurements.parquet").exists()
    assert _cli(monkeypatch, "export", "--format", "xlsx", "--db", db) == 2


def test_page_names_never_collide() -> None:
    names = page_names(["A", "a", "a.b", "a-b", "Z"])
    assert names == {"A": "a", "a": "a-2", "a.b": "a-b", "a-b": "a-b-2", "Z": "z"}


# -- campaign ui: find or start a server -----------------------------------------------


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()
    server.server_close()


def test_ui_uses_a_configured_server(health_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", health_server)
    result = prefect_ui.ensure_ui(tmp_path, write_config=False)
    assert (result.started, result.api_url) == (False, health_server)
    assert result.ui_url == health_server.removesuffix("/api") + "/"
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    with pytest.raises(prefect_ui.UiError, match="no Prefect server answers"):
        prefect_ui.ensure_ui(tmp_path, write_config=False)


def test_queue_chart_splits_phases_and_breaks_at_gaps() -> None:
    """Samples of the load and the single-stream baseline (two modes, each phase's clock
    starting at 0) land in their own mode and series; a failed read breaks the line."""
    from campaign.store.tables import SampleRow
    from reports.agent_load import _segments

    def rows(phase: str, points: list[tuple[float, float | None]]) -> list[SampleRow]:
        return [
            SampleRow(
                probe_run_id=1,
                series="sample_gap" if v is None else "queue_depth",
                t_s=t,
                value=1.0 if v is None else v,
                label=phase,
            )
            for t, v in points
        ]

    samples = (
        rows("load", [(0.0, 2.0), (0.5, 2.0), (1.0, None), (1.5, 1.0), (2.0, 1.0)])
        + rows("baseline", [(0.0, 0.0), (0.5, 0.0)])
        + rows("load", [(0.0, 1.0), (0.5, 0.0)])
        + rows("baseline", [(0.0, 0.0)])
    )
    for n, row in enumerate(samples):
        row.id = n + 1
    first, second = _segments(samples, 2)
    assert first["queue_depth"] == [(0.0, 2.0), (0.5, 2.0), (1.0, None), (1.5, 1.0), (2.0, 1.0)]
    assert first["queue_depth (single stream)"] == [(0.0, 0.0), (0.5, 0.0)]
    assert second == {"queue_depth": [(0.0, 1.0), (0.5, 0.0)], "queue_depth (single stream)": [(0.0, 0.0)]}
    svg = str(charts.xy_chart("q", "queue", [("queue_depth", first["queue_depth"], 0)], x_title="s", y_title="n"))
    assert len(re.findall(r'<path d="M[^"]*" class="line reactive', svg)) == 2  # two pieces, nothing across the gap


def test_the_index_answers_the_campaign_question_first(built: tuple[Store, Path, synthetic.Options]) -> None:
    from reports import index_page

    store, site, _ = built
    data = load(store)
    index = (site / "index.html").read_text()
    answer = index[index.index('<section id="answer">') : index.index("</section>")]
    assert index.index('<section id="answer">') < index.index("<table")  # before any table
    groups = {key: findings for key, _, findings in index_page.answer(data)}
    assert [f.title for f in groups["won"]] == [g.title or g.id for g in data.summary.gates if g.verdict == "pass"]
    assert {"won", "blocked", "control"} <= set(groups)
    for findings in groups.values():
        for f in findings:
            assert f'href="{f.href}"' in answer
            assert (site / f.href).exists(), f.href  # every finding links to its evidence
    (blocked_gate,) = [f for f in groups["blocked"] if f.href.startswith("gates/")]
    assert blocked_gate.reason.startswith("Blocked: 'Private compiler is unavailable'")
    for key, label, findings in index_page.answer(data):
        assert f"{label} ({len(findings)})" in answer
        assert answer.index(f'id="answer-{key}"') < answer.index("</ul>", answer.index(f'id="answer-{key}"'))
    # each gate opens with its answer line (`reports.answer`), its full reason folded below
    for f in (f for findings in groups.values() for f in findings if f.href.startswith("gates/")):
        assert f.found, f.title
        shown = f'<span class="found">{escape(f.found)}</span>\n<details class="reason"><summary>reason</summary>{escape(f.reason)}</details>'
        assert shown in answer, f.title


def test_best_decode_charts_compare_like_with_like_and_name_their_arms(
    built: tuple[Store, Path, synthetic.Options],
) -> None:
    from reports import index_page

    store, _, _ = built
    data = load(store)
    spec_arms = {a.arm_id for a in data.arms if index_page.speculates(a)}
    assert spec_arms == {"A1"}
    best = index_page._best(data.values, data, lambda arm: arm.quant)
    # a speculative arm only ever stands against speculative arms
    assert {k[2] for k in best if k[0] == "q8"} == {False}
    assert {(k[0], k[2]) for k in best} >= {("q4", True), ("q4", False), ("q8", False)}
    for k, (_, note) in best.items():
        assert (note.split(" @ ")[0] in spec_arms) == k[2]
    svg = str(index_page.decode_per_quant(data))
    assert "speculative and plain recipes apart" in svg
    assert ">without speculation<" in svg and ">with speculation<" in svg
    visible = re.findall(r'<text[^>]*class="label"[^>]*>([^<]*)</text>', svg)  # drawn on the bars, not in <desc>
    assert {label.split(" @ ")[0] for label in visible} >= {"A1", "A3"}


def test_no_legend_is_clipped() -> None:
    for n in range(1, 11):
        names = [f"arm{i} (sim) · canonical" for i in range(n)]
        series = [charts.Series(name, [0.5, 0.7, 0.9], color=i) for i, name in enumerate(names)]
        svg = str(charts.bar_chart(f"t{n}", "legend", ["a", "b", "c"], series, x_title="x", y_title="y"))
        height = float(re.search(r'viewBox="0 0 [\d.]+ ([\d.]+)"', svg).group(1))
        legends = re.search(
            r'<g transform="translate\(([\d.]+), ([\d.]+)\)" class="legends">(.*?)</g>\s*</g>', svg, re.S
        )
        top = float(legends.group(2))
        ys = [float(y) for y in re.findall(r'<text[^>]*y="([\d.]+)"[^>]*>arm\d+ ', legends.group(0))]
        assert len(ys) == n
        assert top + max(ys) < height, f"{n} series: legend row at {top + max(ys):.0f} below the picture's {height:.0f}"


def test_a_share_reads_to_the_thousandth() -> None:
    """A cold request's reuse of 0.000489 is not shown to more places than a warm 0.996,
    and 0.996 is not rounded up to a perfect 1.00."""
    from campaign.core.units import ratio

    assert [ratio(v) for v in (0.000489, 0.996, 0.98, 1.0)] == ["0.000", "0.996", "0.980", "1.000"]
