"""A runtime's `options` table is typed by its adapter's `options_model`: a value of the
wrong type is refused when the file is loaded (naming the runtime, the key, what was
expected and what was given) instead of crashing a launch; launches read the validated
values, defaults included; docs/runtimes.md's table is generated from the same fields."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from arms.runtimes import catalog
from arms.runtimes.hf_model import HfFolderOptions
from arms.runtimes.launching import LaunchContext, LaunchError, LaunchFacts, RuntimeOptions
from arms.runtimes.llamacpp_options import DEFAULT_CACHE_REUSE, DEFAULT_LOG_VERBOSITY
from arms.runtimes.mlx_model import MlxFolderOptions
from arms.runtimes.options import option_problems
from arms.runtimes.simulator import SimulatorAdapter, profile_for
from campaign.core.loader import read_toml
from campaign.core.schema import CampaignFileError, CampaignSpec
from flows.resolve import load_campaign
from tests.campaigns import arm, campaign_file, item, sim
from tests.launches import argv_of, value_after
from tests.paths import DOCS, EXAMPLES


def load_with_runtime(tmp_path: Path, runtime: dict[str, Any]) -> CampaignSpec:
    """Load (through the resolve step) a file with one arm on `runtime`."""
    path = tmp_path / "c.toml"
    path.write_text(
        campaign_file(
            "opts",
            runtimes=[runtime],
            arms=[arm("A", runtime=runtime["name"], context=4096)],
            queue=[item("q", ["A"], ["decode"])],
        )
    )
    return load_campaign(path)


def refusal(tmp_path: Path, runtime: dict[str, Any]) -> str:
    with pytest.raises(CampaignFileError) as info:
        load_with_runtime(tmp_path, runtime)
    return info.value.render()


def llama(**options: Any) -> dict[str, Any]:
    return {"name": "llama", "adapter": "llamacpp", "argv": ["/opt/llama/llama-server"], "options": options}


def launch_ctx(tmp_path: Path, runtime: dict[str, Any], recipe: dict[str, Any] | None = None) -> LaunchContext:
    """A launch context built without the resolve step, as a test or a script would."""
    spec = CampaignSpec.model_validate(
        {
            "campaign": {"name": "opts"},
            "models": [{"name": "m", "quant": "q4", "bits_per_weight": 4.5, "path": "/models/m.gguf"}],
            "runtimes": [runtime],
            "arms": [{"id": "A", "model": "m", "runtime": runtime["name"], "context": 4096, "recipe": recipe or {}}],
            "queue": [{"title": "q", "arms": ["A"], "probes": ["decode"]}],
        }
    )
    found = spec.arm("A")
    return LaunchContext(
        arm=found, model=spec.model_for(found), runtime=spec.runtime(runtime["name"]), port=9, workdir=tmp_path
    )


def runtime_argv(tmp_path: Path, runtime: dict[str, Any], recipe: dict[str, Any] | None = None) -> list[str]:
    return argv_of(launch_ctx(tmp_path, runtime, recipe))


# -- refused at load time --------------------------------------------------------------------------


def test_a_value_of_the_wrong_type_is_refused_at_load_naming_runtime_and_key(tmp_path: Path) -> None:
    text = refusal(tmp_path, llama(threads="four"))
    assert "runtimes[0] (name 'llama').options.threads: adapter 'llamacpp' expects an integer, got 'four'" in text
    # a number written as a string is a mistake to report, not a value to convert
    assert "options.threads: adapter 'llamacpp' expects an integer, got '4'" in refusal(tmp_path, llama(threads="4"))
    # every problem of the table, each on its own line, bounds included
    text = refusal(tmp_path, llama(ubatch=2.5, cache_reuse=-1, log_verbosity=True, binary=3))
    for line in (
        "runtimes[0] (name 'llama').options.ubatch: adapter 'llamacpp' expects an integer >= 1, got 2.5",
        "runtimes[0] (name 'llama').options.cache_reuse: adapter 'llamacpp' expects an integer >= 0, got -1",
        "runtimes[0] (name 'llama').options.log_verbosity: adapter 'llamacpp' expects an integer >= 0, got true",
        "runtimes[0] (name 'llama').options.binary: adapter 'llamacpp' expects a non-empty string, got 3",
    ):
        assert line in text, text
    assert load_with_runtime(tmp_path, llama(threads=4)).runtimes[0].options == {"threads": 4}


def test_an_unknown_key_keeps_its_hint_and_the_keys_the_adapter_reads(tmp_path: Path) -> None:
    text = refusal(tmp_path, llama(threds=2))
    assert (
        "runtimes[0] (name 'llama').options.threds: adapter 'llamacpp' reads no such option; did you mean 'threads'? "
        "it reads: binary, cache_reuse, chat_template_file, log_verbosity, model_package, spec_type, threads, ubatch"
    ) in text
    text = refusal(
        tmp_path, {"name": "far", "adapter": "external", "url": "http://127.0.0.1:9", "options": {"threads": 2}}
    )
    assert (
        "runtimes[0] (name 'far').options.threads: adapter 'external' reads no such option; it reads: no options at all"
        in text
    )
    # inside the simulator's profile the profile's own fields are the ones offered
    text = refusal(tmp_path, sim(profile={"decod_tps": 50.0}))
    assert (
        "runtimes[0] (name 'sim').options.profile.decod_tps: adapter 'simulator' reads no such profile field; did you mean 'decode_tps'?"
        in text
    )


def test_numbers_take_integers_and_tables_are_checked_as_their_model(tmp_path: Path) -> None:
    spec = load_with_runtime(tmp_path, sim(options={"reference_bits": 4, "session_cap_bounds_reuse": True}))
    assert spec.runtimes[0].options["reference_bits"] == 4
    text = refusal(
        tmp_path, sim(options={"reference_bits": True, "session_cap_bounds_reuse": "yes"}, profile={"run_sd": 5})
    )
    assert "runtimes[0] (name 'sim').options.reference_bits: adapter 'simulator' expects a number > 0, got true" in text
    assert (
        "runtimes[0] (name 'sim').options.session_cap_bounds_reuse: adapter 'simulator' expects true or false, got 'yes'"
        in text
    )
    assert (
        "runtimes[0] (name 'sim').options.profile.run_sd: adapter 'simulator' expects a number from 0 to 2, got 5"
        in text
    )


EXAMPLE_RUNTIMES = [
    pytest.param(path.name, index, runtime, id=f"{path.stem}-{runtime['name']}")
    for path in sorted(EXAMPLES.glob("*.toml"))
    for index, runtime in enumerate(read_toml(path).get("runtimes", []))
]


def test_the_examples_set_options_for_many_adapters() -> None:
    """The next test means something only if the examples use options of several adapters."""
    used = {runtime["adapter"] for _, _, runtime in (p.values for p in EXAMPLE_RUNTIMES) if runtime.get("options")}
    assert {"llamacpp", "simulator", "vllm", "mlx-lm", "mlx-dspark"} <= used, used


@pytest.mark.parametrize(("example", "index", "runtime"), EXAMPLE_RUNTIMES)
def test_every_adapters_model_accepts_the_options_of_the_examples(
    example: str, index: int, runtime: dict[str, Any]
) -> None:
    model = catalog.get(runtime["adapter"]).options_model
    assert option_problems(runtime["adapter"], model, runtime.get("options", {})) == [], f"{example} runtimes[{index}]"
    model.model_validate(runtime.get("options", {}))


# -- read at launch ---------------------------------------------------------------------------------


def test_defaults_reach_the_argv(tmp_path: Path) -> None:
    cached = {"prefix_cache": "64M"}
    argv = runtime_argv(tmp_path, llama(), cached)
    assert value_after(argv, "--cache-reuse") == str(DEFAULT_CACHE_REUSE) == "256"
    assert value_after(argv, "-lv") == str(DEFAULT_LOG_VERBOSITY)
    assert "-t" not in argv and value_after(argv, "-ub") == value_after(argv, "-b")  # unset: no flag, the prefill chunk
    argv = runtime_argv(tmp_path, llama(cache_reuse=128, log_verbosity=3, threads=2, ubatch=64), cached)
    assert (
        value_after(argv, "--cache-reuse"),
        value_after(argv, "-lv"),
        value_after(argv, "-t"),
        value_after(argv, "-ub"),
    ) == ("128", "3", "2", "64")
    vllm = {"name": "v", "adapter": "vllm", "options": {}}
    argv = runtime_argv(tmp_path, vllm, {"speculative": True, "draft_k": 3})
    assert value_after(argv, "--tool-call-parser") == "hermes"
    assert json.loads(value_after(argv, "--speculative-config")) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
    }
    assert "--block-size" not in argv


def test_options_as_facts_are_the_validated_values(tmp_path: Path) -> None:
    """`"options.NAME"` in a flag table: the field's value, None when unset and the field
    has no default; a name the model does not have is a mistake in the table."""
    adapter = catalog.get("llamacpp")
    ctx = launch_ctx(tmp_path, llama(threads=2))
    facts = LaunchFacts(ctx, {}, adapter.read_options(ctx.runtime))
    assert facts["options.threads"] == 2 and facts["options.ubatch"] is None
    assert facts["options.cache_reuse"] == DEFAULT_CACHE_REUSE
    with pytest.raises(KeyError, match="options.thread: not a field of LlamaCppOptions"):
        facts["options.thread"]
    with pytest.raises(TypeError, match="the options are LlamaCppOptions, not HfFolderOptions"):
        facts.opts_as(HfFolderOptions)


def test_a_runtime_that_skipped_the_resolve_step_fails_its_launch_with_the_same_words(tmp_path: Path) -> None:
    ctx = launch_ctx(tmp_path, llama(threads="four", threds=2))
    with pytest.raises(LaunchError) as info:
        catalog.get("llamacpp").launch(ctx)
    assert str(info.value).startswith(
        "runtime 'llama': options.threads: adapter 'llamacpp' expects an integer, got 'four'; "
        "options.threds: adapter 'llamacpp' reads no such option; did you mean 'threads'?"
    )


def test_the_simulator_profile_holds_only_what_the_file_set(tmp_path: Path) -> None:
    """The profile is validated as SimProfile, but handed on as written: the simulator fills
    the rest from its own defaults, and a runtime's profile does not pin every knob."""
    ctx = launch_ctx(
        tmp_path, sim(decode_tps=80, options={"reference_bits": 9}, profile={"faults": {"stall_every": 2}})
    )
    profile = profile_for(ctx, SimulatorAdapter().read_options(ctx.runtime))
    assert profile["decode_tps"] == 80 * 9 / 4.5 and profile["faults"] == {"stall_every": 2}
    assert "batch_penalty" not in profile and "run_sd" not in profile


# -- the models themselves, and the docs -------------------------------------------------------------


def test_every_options_model_is_frozen_strict_and_described() -> None:
    for name in catalog.names():
        model = catalog.get(name).options_model
        assert issubclass(model, RuntimeOptions), name
        assert (
            model.model_config.get("extra"),
            model.model_config.get("frozen"),
            model.model_config.get("strict"),
        ) == ("forbid", True, True), name
        for key, info in model.model_fields.items():
            assert info.description, f"{name}.options.{key} has no description"
    # the model-folder options are one field each, shared by the adapters that write such a folder
    assert (
        catalog.get("vllm").options_model.model_fields["gguf"].description
        == HfFolderOptions.model_fields["gguf"].description
    )
    for name in ("mlx-lm", "mlx-dspark"):
        assert issubclass(catalog.get(name).options_model, MlxFolderOptions), name


def test_the_docs_table_lists_every_field_of_every_model() -> None:
    text = (DOCS / "runtimes.md").read_text()
    assert catalog.options_markdown() in text, "docs/runtimes.md is stale: python -m arms.runtimes.catalog"
    rows = set(re.findall(r"^\| `([a-z-]+)` \| `([a-z_]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", text, re.MULTILINE))
    listed = {(adapter, key): description.strip() for adapter, key, _, _, description in rows}
    for name in catalog.names():
        for key, info in catalog.get(name).options_model.model_fields.items():
            assert listed.get((name, key)) == info.description, f"docs/runtimes.md: {name} options.{key}"
    assert len(listed) == sum(len(catalog.get(name).options_model.model_fields) for name in catalog.names())
