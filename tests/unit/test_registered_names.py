"""Names a campaign file uses are checked against what is registered: a runtime's
`options` against what its adapter reads (a misspelt key is refused at load time, naming
the runtime and the key; docs/runtimes.md lists every key), and a queue item's probes
against the probe registry, which a plugin can add to."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from arms.runtimes import catalog
from campaign.core.schema import CampaignFileError
from flows.resolve import load_campaign
from tests.campaigns import arm, campaign_file, inline, item
from tests.paths import DOCS, ROOT


def cpp_campaign(options: str, probe: str = "decode", **campaign: object) -> str:
    """One llama.cpp arm decoding, with the runtime's `options` as written."""
    return campaign_file(
        "opts",
        **campaign,
        runtimes=[{"name": "cpp", "adapter": "llamacpp", "options": inline(options)}],
        arms=[arm("A", runtime="cpp", context=4096)],
        queue=[item("q", ["A"], [probe], title="decode")],
    )


def test_a_misspelt_option_is_refused_with_the_key_it_meant(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(cpp_campaign("threds = 2"))
    with pytest.raises(CampaignFileError) as info:
        load_campaign(path)
    text = info.value.render()
    assert (
        "runtimes[0] (name 'cpp').options.threds: adapter 'llamacpp' reads no such option; did you mean 'threads'?"
        in text
    )
    path.write_text(cpp_campaign("threads = 2"))
    assert load_campaign(path).runtimes[0].options == {"threads": 2}


def test_every_option_an_adapter_reads_is_declared() -> None:
    """Flag tables name options as facts (`"options.k"`), looked up by name at launch: each
    is a field of the adapter's options model. And no runtime module reads the raw table
    (`options.get("k")`, `options["k"]`, `runtime.options`): values come typed from the
    model, checked when the file is loaded, not converted where they are used."""
    fact = re.compile(r"""["']options\.([a-z_]+)["']""")
    raw = re.compile(r"""options(?:\.get\(|\[)|runtime\.options\b""")
    for name in catalog.names():
        adapter = catalog.get(name)
        module = ROOT / "arms" / "runtimes" / f"{type(adapter).__module__.rsplit('.', 1)[-1]}.py"
        found = set(fact.findall(module.read_text()))
        fields = set(adapter.options_model.model_fields)
        assert found <= fields, f"{name} reads undeclared options: {sorted(found - fields)}"
    for module in sorted((ROOT / "arms" / "runtimes").glob("*.py")):
        if module.name not in ("base.py", "options.py"):  # where the table is validated
            assert not raw.search(module.read_text()), f"{module.name} reads the raw options table"


def test_docs_runtimes_md_lists_every_option() -> None:
    text = (DOCS / "runtimes.md").read_text()
    assert catalog.options_markdown() in text, "docs/runtimes.md is stale: python -m arms.runtimes.catalog"


def test_a_probe_a_plugin_registers_can_be_named_in_a_queue_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe set is open: a campaign's plugin registers a probe, and a queue item names
    it; an unregistered name is still refused, with the registered ones listed."""
    from arms.probes import registry

    monkeypatch.setattr(registry.PROBES, "_items", dict(registry.PROBES._items))  # this test's registration stays here
    (tmp_path / "echo_probe.py").write_text(
        textwrap.dedent(
            """
        from pydantic import BaseModel, ConfigDict
        from arms.probes.registry import ProbeSpec, register

        class EchoParams(BaseModel):
            model_config = ConfigDict(extra="forbid")
            words: int = 3

        async def run(target, sink, params):
            return None

        register(ProbeSpec("echo", run, EchoParams, per_context=False))
        """
        )
    )
    path = tmp_path / "c.toml"
    path.write_text(cpp_campaign("threads = 2", "echo", plugins=["echo_probe.py"]))
    monkeypatch.delitem(__import__("sys").modules, "campaign_plugin_echo_probe", raising=False)
    assert load_campaign(path).queue[0].probes == ["echo"]
    path.write_text(cpp_campaign("threads = 2", "echoo", plugins=["echo_probe.py"]))
    with pytest.raises(CampaignFileError) as info:
        load_campaign(path)
    assert (
        "queue[0] (id 'q').probes[0]: found 'echoo', expected one of: agent-load, cache-ceiling, cache-probe, decode, echo, load, tool-loop"
        in info.value.render()
    )


def test_what_a_plugin_probe_needs_is_read_from_its_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flows ask a probe's spec, not its name: a plugin probe that sends tools starts
    its server with tool calling on and never shares a server with one that does not, and
    the values it takes from its queue item reach its parameters (under the item's
    overrides, which win)."""
    from pydantic import BaseModel, ConfigDict

    from arms.probes import registry
    from flows.overrides import probe_params

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        words: int = 3
        modes: list[str] = ["canonical"]

    async def run(target: object, sink: object, params: object) -> None:
        return None

    monkeypatch.setattr(registry.PROBES, "_items", dict(registry.PROBES._items))
    registry.register(
        registry.ProbeSpec(
            "chatty",
            run,
            Params,
            per_context=True,
            needs_tools=True,
            item_values=lambda spec, item, context: {"words": context // 1024},
        )
    )
    assert registry.needs_tools(["decode", "chatty"]) and not registry.needs_tools(["decode"])
    path = tmp_path / "c.toml"
    path.write_text(cpp_campaign("threads = 2", "decode"))
    spec = load_campaign(path)
    item_ = spec.queue[0]
    assert probe_params(spec, item_, "chatty", 8192, {}).words == 8
    assert probe_params(spec, item_, "chatty", 8192, {"words": 5}).words == 5
