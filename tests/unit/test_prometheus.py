"""Prometheus text is read with prometheus_client's parser: label values holding `}`,
commas or escaped quotes keep their samples (the former regular expression dropped them)."""

from __future__ import annotations

from arms.runtimes.prometheus import parse
from tests.paths import FIXTURES_DIR

FIXTURES = FIXTURES_DIR / "runtimes"


def test_label_values_with_braces_commas_and_quotes_are_kept() -> None:
    text = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="/models/{qwen}/8b"} 2\n'
        'vllm:num_requests_waiting{model_name="a,b"} 1\n'
        "# TYPE http_requests counter\n"
        'http_requests_total{route="/v1/{id}",note="say \\"hi\\" }"} 3\n'
        'http_requests_total{route="/health"} 4\n'
    )
    assert parse(text) == {"vllm:num_requests_waiting": 3.0, "http_requests_total": 7.0}


def test_histograms_nan_and_a_broken_line() -> None:
    text = 'lat_bucket{le="0.1"} 1\nlat_bucket{le="+Inf"} 4\nlat_count 4\nidle NaN\nthis is { not a sample\nok 2\n'
    assert parse(text) == {
        "lat_bucket": 5.0,
        "lat_count": 4.0,
        "ok": 2.0,
    }  # NaN and the broken line skipped, not the rest


def test_a_real_llamacpp_exposition() -> None:
    values = parse((FIXTURES / "llamacpp_metrics.txt").read_text())
    assert values["llamacpp:prompt_tokens_total"] == 51
    assert values["llamacpp:prompt_tokens_cached_total"] == 41
