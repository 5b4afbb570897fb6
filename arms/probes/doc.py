"""The probe pages, generated from the probe registry: what each probe sends, its
parameters with their defaults (the keys a queue item's `overrides` may set), and the
metrics it stores with their units, from the metric catalogue. docs/probes.md lists
every probe and holds most; a probe whose reference would crowd it has a page of its
own (`OWN_PAGES`).

Generated so that it cannot drift from the code: a test compares each file with
`pages()`; write one with `python -m arms.probes.doc --page NAME > docs/NAME`
(probes.md without `--page`).
"""

from __future__ import annotations

import importlib
import inspect

from arms.probes import registry
from campaign.core import metrics
from campaign.core.schema_doc import cell, default_text, key_of, limits, type_words

INTRO = """# Probes

A queue item names the probes that run on each of its arms (`probes = ["decode"]`), in
order, in every block. This page is generated from the probe registry
(`python -m arms.probes.doc > docs/probes.md`): for each probe, what it sends and why
(its module's own account), the parameters a queue item's `overrides` may set with
their defaults, and every metric it stores, with its unit and direction from the metric
catalogue ([metrics.md](metrics.md)). A probe marked *per context* runs once at each of
the item's `contexts` (or the arm's own context); the others run once per arm and block.
Keys marked *sample size* only say how many requests a run times: runs that differ in
them are still one cell for the gates."""


def _params(spec: registry.ProbeSpec) -> list[str]:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, info in spec.params.model_fields.items():
        if name in registry.ITEM_FIELDS or name == "modes":
            continue  # the queue item's own `contexts` and `modes` set these
        key = key_of(name, info)
        kind = ", ".join([type_words(info.annotation), *limits(info)])
        meaning = info.description or ""
        if name in spec.sample_fields:
            meaning = (meaning + "; " if meaning else "") + "*sample size*"
        if name in spec.draw_fields:
            meaning = (
                meaning + "; " if meaning else ""
            ) + "*a draw*: in a campaign, set per block from the campaign's seed"
        rows.append(f"| `{key}` | {cell(kind)} | {cell(default_text(info))} | {cell(meaning)} |")
    return rows


INDEX = "probes.md"

# Probes whose reference (long module account, many parameters and metrics) has a page of
# its own, linked from the index's table; every other probe's section is on the index.
OWN_PAGES: dict[str, str] = {"agent-load": "probes-agent-load.md", "load": "probes-load.md"}

PAGES = (INDEX, *OWN_PAGES.values())


def _own_intro(name: str, page: str) -> str:
    return f"""# Probe: {name}

The `{name}` probe's reference, generated from the probe registry
(`python -m arms.probes.doc --page {page}`): what it sends and why, the parameters a queue
item's `overrides` may set with their defaults, and every metric it stores, with its unit
and direction from the metric catalogue ([metrics.md](metrics.md)). [probes.md](probes.md)
lists every probe and says what *per context* and *sample size* mean."""


def _section(name: str, doc: str) -> list[str]:
    spec = registry.get(name)
    return [
        "",
        f"## {name}",
        "",
        doc,
        "",
        "### Parameters",
        "",
        *_params(spec),
        "",
        "### Metrics",
        "",
        *metrics.probe_table(name),
    ]


def pages() -> dict[str, str]:
    """Every probe page by file name (a test keeps each file in docs/ current)."""
    own = ", ".join(f"`{name}` ([{page}]({page}))" for name, page in OWN_PAGES.items())
    lines = [
        INTRO,
        "",
        f"Every probe's section is below, except those with a page of their own: {own}.",
        "",
        "| probe | per context | what it asks |",
        "| --- | --- | --- |",
    ]
    names = registry.names()
    docs = {}
    for name in names:
        spec = registry.get(name)
        module = importlib.import_module(spec.run.__module__)
        doc = inspect.cleandoc(module.__doc__ or "")
        docs[name] = doc
        first = doc.split("\n\n")[0].replace("\n", " ")
        link = f"{OWN_PAGES[name]}#{name}" if name in OWN_PAGES else f"#{name}"
        lines.append(
            f"| [`{name}`]({link}) | {'yes' if spec.per_context else 'no'} | {cell(first.split(': ', 1)[-1])} |"
        )
    out = {}
    for name in names:
        if name in OWN_PAGES:
            out[OWN_PAGES[name]] = "\n".join([_own_intro(name, OWN_PAGES[name]), *_section(name, docs[name])]) + "\n"
        else:
            lines += _section(name, docs[name])
    return {INDEX: "\n".join(lines) + "\n", **out}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m arms.probes.doc", description="Print one probe page.")
    parser.add_argument("--page", choices=PAGES, default=INDEX, help="the page to print (default: %(default)s)")
    print(pages()[parser.parse_args().page], end="")
