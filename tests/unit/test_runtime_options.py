"""A runtime's `options` are what its adapter reads: a misspelt key is refused at load
time, naming the runtime and the key, and docs/runtimes.md lists every key."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from arms.runtimes import catalog
from campaign.schema import CampaignFileError
from flows.resolve import load_campaign
from tests.paths import DOCS, ROOT

CAMPAIGN = textwrap.dedent(
    """
    [campaign]
    name = "opts"

    [[models]]
    name = "m"
    quant = "q4"
    bits_per_weight = 4.5

    [[runtimes]]
    name = "cpp"
    adapter = "llamacpp"
    [runtimes.options]
    {options}

    [[arms]]
    id = "A"
    model = "m"
    runtime = "cpp"
    context = 4096

    [[queue]]
    id = "q"
    title = "decode"
    arms = ["A"]
    probes = ["decode"]
    """
)


def test_a_misspelt_option_is_refused_with_the_key_it_meant(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.format(options="threds = 2"))
    with pytest.raises(CampaignFileError) as info:
        load_campaign(path)
    text = info.value.render()
    assert "runtimes[0] (name 'cpp').options.threds: adapter 'llamacpp' reads no such option; did you mean 'threads'?" in text
    path.write_text(CAMPAIGN.format(options="threads = 2"))
    assert load_campaign(path).runtimes[0].options == {"threads": 2}


def test_every_option_an_adapter_reads_is_declared() -> None:
    """The keys each adapter's module reads (`options.get("k")`, `options["k"]`,
    `"options.k"` in its flag table) are all in its `option_keys`, so none is refused
    while being used, and none is read undeclared."""
    read = re.compile(r"""options(?:\.get\(|\[)"([a-z_]+)"|"options\.([a-z_]+)\"""")
    for name in catalog.names():
        adapter = catalog.get(name)
        module = ROOT / "arms" / "runtimes" / f"{type(adapter).__module__.rsplit('.', 1)[-1]}.py"
        found = {a or b for a, b in read.findall(module.read_text())}
        assert found <= set(adapter.option_keys), f"{name} reads undeclared options: {sorted(found - set(adapter.option_keys))}"


def test_docs_runtimes_md_lists_every_option() -> None:
    text = (DOCS / "runtimes.md").read_text()
    assert catalog.options_markdown() in text, "docs/runtimes.md is stale: python -m arms.runtimes.catalog"
