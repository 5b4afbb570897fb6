"""Every built-in runtime adapter, registered: look adapters up here.

The one place that lists the built-in modules; each registers itself on import. A
campaign's own adapter registers through `arms.runtimes.registry.register` the same way.
"""

from __future__ import annotations

from arms.runtimes import (  # noqa: F401  (each registers itself on import)
    external,
    llamacpp,
    mlx_dspark,
    mlx_lm,
    mtplx,
    omlx,
    sglang,
    simulator,
    vllm,
)
from arms.runtimes.options import default_text, expectation
from arms.runtimes.registry import ADAPTERS, get, names, register

__all__ = ["ADAPTERS", "get", "names", "register"]


OPTIONS_BEGIN = "<!-- options: generated from each adapter's options_model by `python -m arms.runtimes.catalog` -->"
OPTIONS_END = "<!-- end of options -->"


def options_markdown() -> str:
    """The `options` keys each adapter reads, from its options model, for docs/runtimes.md
    (a test keeps it current)."""
    lines = [
        OPTIONS_BEGIN,
        "",
        "| adapter | `options` key | value | default | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in sorted(names()):
        fields = get(name).options_model.model_fields
        if not fields:
            lines.append(f"| `{name}` | (none) | | | reads no options: any key is refused when the file is loaded |")
        for key, info in sorted(fields.items()):
            lines.append(
                f"| `{name}` | `{key}` | {expectation(info)} | {default_text(info)} | {info.description or ''} |"
            )
    return "\n".join([*lines, "", OPTIONS_END])


if __name__ == "__main__":  # rewrite the section in docs/runtimes.md
    import re
    import sys
    from pathlib import Path

    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/runtimes.md")
    text = path.read_text()
    # from any "<!-- options:" line, so a marker whose wording changed is still found
    pattern = re.compile(re.escape("<!-- options:") + ".*?" + re.escape(OPTIONS_END), re.DOTALL)
    if not pattern.search(text):
        sys.exit(f"{path}: no section from '<!-- options:' to {OPTIONS_END!r} to rewrite")
    path.write_text(pattern.sub(lambda _m: options_markdown(), text))
