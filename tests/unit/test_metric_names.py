"""The code names metrics through the catalogue (`campaign.core.metrics`), never by a bare
string: a probe hands its sink the entry (`metric=metrics.TTFT_S`), which stores its name
in the catalogue's unit; code that reads rows compares with `metrics.TTFT_S.name`. Read
with `ast` from the source tree, so a literal that slips back in fails here, not in a
campaign whose gate stays pending on a name no probe wrote."""

from __future__ import annotations

import ast
import typing

import pytest

from arms.probes.base import MemorySink
from campaign.core import metrics
from campaign.core.metrics import Metric
from tests.paths import ROOT

PACKAGES = ("arms", "campaign", "gates", "flows", "reports", "cli")


def _sources() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(ROOT)): ast.parse(path.read_text(encoding="utf-8"))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _is_text(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr)


def _is_metric_column(node: ast.AST) -> bool:
    """`row["metric"]`, `frame["metric"]`: a stored row's metric name."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "metric"


def _literal_names(tree: ast.AST, path: str = "") -> list[str]:
    """Where `tree` names a metric by a literal: `metric="..."` in a call, or
    `row["metric"]` compared with a string (or a tuple, list or set holding one)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found += [
                f"{path}:{kw.value.lineno}: metric={ast.unparse(kw.value)}"
                for kw in node.keywords
                if kw.arg == "metric" and _is_text(kw.value)
            ]
        elif isinstance(node, ast.Compare) and _is_metric_column(node.left):
            found += [
                f"{path}:{node.lineno}: {ast.unparse(node)}"
                for right in node.comparators
                if _is_text(right)
                or (isinstance(right, (ast.Tuple, ast.List, ast.Set)) and any(map(_is_text, right.elts)))
            ]
    return found


def test_no_source_names_a_metric_by_a_literal() -> None:
    """`metric="ttft_s"` (a sink's row, a Selector) and `row["metric"] == "ttft_s"` are
    written with the catalogue's entry instead; a campaign file's gate parameters, the
    docs and the catalogue itself keep their strings (none of them is such a call)."""
    found = [hit for path, tree in _sources().items() for hit in _literal_names(tree, path)]
    assert not found, "name these through campaign.core.metrics (metrics.TTFT_S, or .name for a string):\n" + "\n".join(
        found
    )


def test_the_rule_catches_what_it_is_for() -> None:
    """The check above, on the shapes it forbids and the ones it allows."""

    def hits(source: str) -> bool:
        return bool(_literal_names(ast.parse(source)))

    assert hits('sink.measurement(metric="ttft_s", value=1)')
    assert hits('sink.measurement(metric=f"{prefix}ttft_s", value=1)')
    assert hits('Selector(metric="requests_met")')
    assert hits('m["metric"] == "ttft_s"')
    assert hits('m["metric"] in ("ttft_s", "e2e_s")')
    assert not hits("sink.measurement(metric=metrics.TTFT_S, value=1)")
    assert not hits("Selector(metric=metrics.REQUESTS_MET.name)")
    assert not hits("text = 'params = { metric = \"decode_tps\" }'")


def test_every_catalogue_attribute_the_code_reads_exists() -> None:
    """`metrics.TFFT_S` would be an AttributeError only when its line runs; here it fails
    for every module that imports the catalogue as `metrics` (or names from it)."""
    wrong = []
    for path, tree in _sources().items():
        aliases = {
            a.asname or a.name
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module == "campaign"
            for a in n.names
            if a.name == "metrics"
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if not hasattr(metrics, node.attr):
                    wrong.append(f"{path}:{node.lineno}: metrics.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "campaign.core.metrics":
                wrong += [f"{path}:{node.lineno}: {a.name}" for a in node.names if not hasattr(metrics, a.name)]
    assert not wrong, "\n".join(wrong)


# -- the catalogue's constants ---------------------------------------------------------------------


def test_every_entry_has_its_constant_and_the_constants_are_the_catalogue() -> None:
    for entry in metrics.METRICS.values():
        assert getattr(metrics, entry.name.upper(), None) is entry, f"{entry.name}: no constant {entry.name.upper()}"
    constants = [v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, Metric)]
    outside = {m.name for m in constants} - set(metrics.METRICS)
    assert outside == {"errors", "not_run", "requests_not_run"}  # the failure rows, stored beside the catalogue


def test_every_agent_load_summary_metric_has_its_baseline_copy() -> None:
    """The baseline pass writes each summary row under `baseline_<name>` (`metrics.baseline`)."""
    summary = [
        m
        for m in metrics.METRICS.values()
        if m.probes == (metrics.AGENT_LOAD,) and m.scenarios == "summary" and not m.name.startswith("baseline_")
    ]
    for m in [*summary, metrics.REQUESTS, metrics.REQUESTS_FAILED, metrics.REQUESTS_RETRIED, metrics.ERROR_RATE]:
        copy = metrics.baseline(m)
        assert copy is metrics.METRICS[f"baseline_{m.name}"]
        assert (copy.unit, copy.higher_is_better) == (m.unit, m.higher_is_better)
    with pytest.raises(KeyError):
        metrics.baseline(metrics.TTFT_S)  # no baseline copy: a name no gate could read
    kind = metrics.baseline(metrics.requests_failed_of("http_503"))
    assert (kind.name, kind.unit) == ("baseline_requests_failed_http_503", "requests")


def test_the_load_targets_are_the_latencies_meets_reads() -> None:
    from arms.probes.load_params import TargetName
    from arms.workloads import load_stats as load

    assert (
        set(typing.get_args(TargetName))
        == set(load._TARGET_FNS)
        == {metrics.TTFT_S.name, metrics.TPOT_S.name, metrics.E2E_S.name}
    )


# -- what a sink stores ------------------------------------------------------------------------------


def test_a_row_takes_the_catalogues_name_and_unit() -> None:
    assert metrics.stored(metrics.TTFT_S) == ("ttft_s", "s")
    assert metrics.stored(metrics.DECODE_TPS, "tok/s") == ("decode_tps", "tok/s")  # the same unit, stated: allowed


def test_only_a_metric_whose_unit_is_the_runtimes_takes_another() -> None:
    """vLLM counts prefix-cache lookups and hits in tokens, the others in requests."""
    assert metrics.stored(metrics.CACHE_HITS, "tokens") == ("cache_hits", "tokens")
    assert metrics.stored("cache_lookups", "tokens") == ("cache_lookups", "tokens")
    with pytest.raises(ValueError, match="'ttft_s' in 'ms': the catalogue stores it in s"):
        metrics.stored(metrics.TTFT_S, "ms")
    with pytest.raises(ValueError, match="stores it in requests or tokens"):
        metrics.stored(metrics.CACHE_HITS, "bytes")


def test_a_name_is_taken_only_when_it_is_catalogued() -> None:
    """The server counters arrive as names (the runtime's telemetry names them)."""
    assert metrics.stored("draft_tokens", "tokens") == ("draft_tokens", "tokens")
    with pytest.raises(ValueError, match="'tfft_s': not a metric of the catalogue.*did you mean ttft_s"):
        metrics.stored("tfft_s")


def test_a_plugins_own_metric_is_stored_as_it_says() -> None:
    own = Metric("echo_words", "words", "words echoed", ("echo",))
    assert metrics.stored(own) == ("echo_words", "words")


def test_the_memory_sink_stores_plain_strings() -> None:
    sink = MemorySink()
    sink.measurement(metric=metrics.REUSE, value=0.5, mode="canonical", scenario="identical")
    sink.measurement(metric="cache_hits", value=3, unit="tokens", mode="canonical")
    (reuse, hits) = sink.measurements
    assert (reuse["metric"], reuse["unit"], reuse["scenario"]) == ("reuse", "ratio", "identical")
    assert (hits["metric"], hits["unit"]) == ("cache_hits", "tokens")
    assert sink.values(metrics.REUSE) == sink.values("reuse") == [0.5]
    with pytest.raises(ValueError):
        sink.measurement(metric="reuse_rate", value=1, mode="canonical")
    assert len(sink.measurements) == 2  # the refused row is not kept


def test_failures_are_named_through_the_catalogue_and_the_baseline_pass_gets_its_copies() -> None:
    from arms.measures import RequestRecord
    from arms.probes.failures import record_errors, record_failure

    sink = MemorySink()
    records = [
        RequestRecord(send_ns=0, end_ns=1),
        RequestRecord(send_ns=0, end_ns=1, error="HTTP 503: busy"),
        RequestRecord(send_ns=0, end_ns=1, error="not run: stopped"),
    ]
    assert record_failure(sink, records[1], mode="canonical", scenario="s") == "HTTP 503"
    record_errors(sink, records, mode="canonical", scenario="summary", baseline=True)
    stored = {m["metric"]: (m["value"], m["unit"]) for m in sink.measurements}
    assert stored == {
        "errors": (1, "count"),
        "baseline_requests": (2, "requests"),
        "baseline_requests_failed": (1, "requests"),
        "baseline_requests_retried": (0, "requests"),
        "baseline_requests_failed_http_503": (1, "requests"),
        "baseline_requests_not_run": (1, "requests"),
        "baseline_error_rate": (0.5, "ratio"),
    }
