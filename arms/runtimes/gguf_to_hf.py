"""Write a Hugging Face model folder from a GGUF: `python gguf_to_hf.py MODEL.gguf OUT`.

Run by the interpreter of the environment a runtime is installed in (vLLM's, say), not by
the campaign's: it needs transformers, torch, gguf and accelerate, which that environment
has and the campaign's need not. It imports nothing of the project, so it runs there as a
plain file.

transformers dequantizes the GGUF's tensors (Q4_1 and the like) into bfloat16: the folder
holds the numbers a llama.cpp arm computes with, in a dtype every runtime on a CPU loads.
transformers marks a model read from a GGUF as quantized and then refuses to save it; the
mark is cleared, since the weights in memory are already plain tensors.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: gguf_to_hf.py MODEL.gguf OUT_FOLDER", file=sys.stderr)
        return 2
    gguf, out = Path(argv[0]), Path(argv[1])
    missing = []
    for module in ("torch", "transformers", "gguf", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(
            f"missing package(s) in {sys.executable}'s environment: {', '.join(missing)} "
            f"(pip install {' '.join(missing)})",
            file=sys.stderr,
        )
        return 3
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
