"""`campaign probe`'s options come from the probes' parameter models: every field is an
option, and the flags people already type keep working."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

runner = CliRunner()

PUBLISHED = (
    "--probe --model --runtime --mode --temperature --top-p --json --conversations --turns --system-tokens "
    "--task-tokens --turn-tokens --max-tokens --prompt-tokens --context --repeats --trials --no-baseline --warmup "
    "--read-timeout --profile --rate --concurrency --duration --requests --target --workload --rates "
    "--max-concurrency --seed --trace --block-tokens --time-scale --dataset"
).split()


def _specs() -> list[Any]:
    from arms.probes import registry

    return [registry.get(name) for name in registry.names()]


def _flags() -> set[str]:
    from cli.probe import command

    return {decl for param in command().params for decl in (*param.opts, *param.secondary_opts)}


def test_every_parameter_of_every_probe_is_an_option() -> None:
    from cli.probe_options import NOT_OPTIONS, flag

    flags = _flags()
    missing = [
        f"{spec.name}.{key}"
        for spec in _specs()
        for key in spec.keys
        if key not in NOT_OPTIONS and flag(key) not in flags
    ]
    assert missing == []


def test_the_published_flags_keep_working() -> None:
    assert sorted(set(PUBLISHED) - _flags()) == []


def test_an_option_takes_the_field_type_default_and_description() -> None:
    from cli.probe_options import probe_options

    by_key = {o.key: o for o in probe_options(_specs())}
    warmup = by_key["warmup"]
    assert warmup.panel == "decode" and warmup.kind is int
    assert (
        warmup.help == "untimed trials before the timed ones, stored but never read by medians or gates (default `1`)"
    )
    assert by_key["contexts"].flag == "--context" and by_key["contexts"].help.endswith(
        "contexts (default `[2048]`) (repeatable)"
    )
    assert by_key["conversations"].panel == "agent workload (agent-load, load)"
    assert "agent-load: " in by_key["conversations"].help and "; load: " in by_key["conversations"].help
    assert by_key["max_tokens"].panel is None  # every probe reads it: beside the command's own options
    assert by_key["duration_s"].flag == "--duration" and by_key["duration_s"].metavar == "SECONDS"


def test_values_reach_the_probe_by_their_file_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    import cli.probe as probe_cli
    from cli.app import BUILT_WHEN_RUN
    from cli.main import app

    seen: dict[str, Any] = {}
    command = probe_cli.command()
    monkeypatch.setattr(probe_cli, "_run", lambda **values: seen.update(values))
    monkeypatch.setitem(BUILT_WHEN_RUN, "probe", lambda: command)
    args = ["probe", "http://x", "--probe", "decode", "--context", "512", "--context", "1024", "--mode", "greedy"]
    args += ["--repeats", "2", "--no-baseline", "--profile", "constant", "--duration", "1.5"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen["contexts"] == [512, 1024] and seen["modes"] == ["greedy"] and seen["repeats"] == 2
    assert seen["baseline"] is False and seen["profile"] == "constant" and seen["duration_s"] == 1.5
    assert seen["probe_name"] == "decode" and seen["warmup"] is None  # not given: the probe's default


def test_a_flag_the_probe_does_not_read_is_refused_by_name() -> None:
    from arms.probes import registry
    from cli.app import UsageError
    from cli.probe import _params

    with pytest.raises(UsageError, match="--conversations"):
        _params(registry.get("decode"), {"conversations": 3})
    assert _params(registry.get("decode"), {"repeats": 2}).trials == 2
