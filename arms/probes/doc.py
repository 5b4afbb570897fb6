"""docs/probes.md, generated from the probe registry: what each probe sends, its
parameters with their defaults (the keys a queue item's `overrides` may set), and the
metrics it stores with their units, from the metric catalogue.

Generated so that it cannot drift from the code: a test compares the file with
`markdown()`; write it with `python -m arms.probes.doc > docs/probes.md`.
"""

from __future__ import annotations

import importlib
import inspect

from arms.probes import registry
from campaign import metrics
from campaign.schema_doc import cell, default_text, key_of, limits, type_words

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
            meaning = (meaning + "; " if meaning else "") + "*a draw*: in a campaign, set per block from the campaign's seed"
        rows.append(f"| `{key}` | {cell(kind)} | {cell(default_text(info))} | {cell(meaning)} |")
    return rows


def markdown() -> str:
    lines = [INTRO, "", "| probe | per context | what it asks |", "| --- | --- | --- |"]
    names = registry.names()
    docs = {}
    for name in names:
        spec = registry.get(name)
        module = importlib.import_module(spec.run.__module__)
        doc = inspect.cleandoc(module.__doc__ or "")
        docs[name] = doc
        first = doc.split("\n\n")[0].replace("\n", " ")
        lines.append(f"| [`{name}`](#{name}) | {'yes' if spec.per_context else 'no'} | {cell(first.split(': ', 1)[-1])} |")
    for name in names:
        spec = registry.get(name)
        lines += ["", f"## {name}", "", docs[name], "", "### Parameters", "", *_params(spec), "", "### Metrics", "", *metrics.probe_table(name)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
