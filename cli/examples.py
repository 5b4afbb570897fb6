"""`campaign examples`: the example campaign files, listed or written out to run, with the
files they name beside themselves (a replayed trace)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import UsageError, app, console


def _examples() -> dict[str, Any]:
    """Example campaign files by name: shipped in the wheel as `campaign.examples`, the
    repository's examples/ folder in a checkout (the same files)."""
    from importlib import resources

    try:
        folder: Any = resources.files("campaign.examples")
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parent.parent / "examples"
    return {
        f.name.removesuffix(".toml"): f
        for f in sorted(folder.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".toml")
    }


def _first_comment(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""


@app.command()
def examples(
    name: Annotated[str | None, typer.Argument(help="example to write (default: list them)")] = None,
    out: Annotated[Path, typer.Option("--out", help="folder to write it into")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """List the example campaigns, or write one out to run it: campaign examples demo."""
    found = _examples()
    if name is None:
        for key, file in found.items():
            console.print(f"[bold]{key}[/bold]  {_first_comment(file.read_text(encoding='utf-8'))}", highlight=False)
        console.print("write one with: campaign examples NAME [--out DIR], then: campaign run NAME.toml")
        return
    key = name.removesuffix(".toml")
    if key not in found:
        raise UsageError(f"no example {name!r}; examples: {', '.join(found)}")
    target = out / f"{key}.toml"
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to overwrite it")
    out.mkdir(parents=True, exist_ok=True)
    text = found[key].read_text(encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    # the files it names beside itself (a replayed trace) come with it
    folder = found[key].parent if hasattr(found[key], "parent") else None
    for name in sorted(set(re.findall(r'^trace\s*=\s*"(traces/[\w.-]+)"', text, re.MULTILINE))):
        source = folder / name if folder is not None else None
        if source is not None and source.is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(source.read_bytes())
            console.print(f"written: {out / name}", highlight=False)
    console.print(f"written: {target}\nrun it: campaign run {target}", highlight=False)
