"""One server start is one run, however many queue items measured on it.

With `campaign.keep_servers`, consecutive items that run the same arms share one server
start per arm and block: the first item's attempt starts it, the others' attempts are
chained onto it (`flows.groups.server_group`). Each chained attempt records the
block of the start it ran on (`server_block`), and a gate reading several of those items
counts each start once (`gates.runs.block_of`): three starts read through two items are
three blocks, not six. A kept server is reused only where everything that reaches its
launch matches (`sim.*` overrides included), and a gate that reads every item's rows
pools no unlike recipes of one arm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import AttemptState, ProbeRunState, Verdict
from campaign.store.store import Store
from campaign.store.tables import AttemptRow, CampaignRow, MeasurementRow, ProbeRunRow
from gates.engine import evaluate
from tests.campaigns import arm, campaign_file, gate, item, problems, sim, write_campaign

# -- generated kept-server blocks ------------------------------------------------------------

ITEMS = ("decode", "again")  # two items with the same probe settings, the second chained onto the first's servers
SAME = GateEntry(
    id="same",
    predicate="relative_improvement",
    params={"metric": "decode_tps", "probe": "decode", "min_gain": 0.0},
    subjects=["B"],
    baseline=["A"],
    reads="all",
)


def kept_frame(
    rng: np.random.Generator,
    campaigns: int = 1,
    blocks: int = 3,
    requests: int = 30,
    run_sd: float = 0.05,
    request_sd: float = 0.01,
    gain: float = 1.0,
) -> pd.DataFrame:
    """Canonical rows of arms A and B (B `gain` times A) over `blocks` blocks, each arm's
    start of a block serving both `ITEMS`: one run effect per start, shared by both items'
    requests; each item's attempt has its own block id, and both carry the lead's start.
    Each of `campaigns` independent campaigns is a context of its own (a cell: never pooled)."""
    shape = (campaigns, blocks, 2, len(ITEMS))
    c, k, a, i = (x.ravel() for x in np.indices(shape))
    effect = rng.normal(0, run_sd, shape[:3])[c, k, a]  # one draw per start, whichever item reads it
    first = rng.integers(0, 2, shape[:2])[c, k]  # which arm starts first in the block
    arm_ids = np.array(["A", "B"])[a]
    keys = np.array(ITEMS)[i]
    values = (
        50.0
        * np.where(a == 1, gain, 1.0)[:, None]
        * np.exp(effect[:, None] + rng.normal(0, request_sd, (len(c), requests)))
    )
    attempt = np.arange(len(c)) + 1
    starts = pd.DataFrame(
        {
            "arm_id": arm_ids,
            "context": 1024 + c,
            "item_key": keys,
            "repeat": k,
            "block_id": [f"{key}/b{b}/s0" for key, b in zip(keys, k)],
            "server_block": [f"{ITEMS[0]}/b{b}/s0" for b in k],
            "block_order": (a != first).astype(int),
            "attempt_id": attempt,
            "recipe_hash": [f"r-{x}" for x in arm_ids],
        }
    )
    samples = starts.loc[starts.index.repeat(requests)].assign(
        kind="sample", trial=np.tile(np.arange(requests), len(c)), metric="decode_tps", value=values.ravel()
    )
    summaries = [
        starts.assign(kind="summary", trial=0, metric=metric, value=value)
        for metric, value in (("requests", float(requests)), ("requests_failed", 0.0))
    ]
    rows = pd.concat([samples, *summaries], ignore_index=True)
    return rows.assign(probe="decode", scenario="decode", mode="canonical", unit="", settings_hash="s0", source="")


def test_a_gate_reading_two_items_on_one_start_counts_the_start_once() -> None:
    """Three blocks measured through two items are three paired runs of 60 requests each
    (the median of the start's requests in the cell), not six runs of 30."""
    result = evaluate(SAME, kept_frame(np.random.default_rng(7), gain=1.3))
    assert result.verdict == Verdict.PASS, result.reason
    assert "paired over 3 blocks" in result.reason and "3 runs x 60 requests" in result.reason, result.reason
    (comparison,) = result.evidence["comparisons"]
    assert comparison["pairs"] == 3


def test_identical_arms_on_kept_servers_pass_and_fail_at_their_error_rate() -> None:
    """Identical arms at the boundary of "B gains at least 0%", 400 campaigns (one cell
    each): a pass and a fail are both false, each allowed 2.5%. Counting a start once per
    item that read it (six pseudo-blocks of three starts, each pair twice) passes about
    12% and fails about 12%."""
    from gates.cells import Selector
    from gates.compare import compare
    from gates.rigor import Rigor

    campaigns = 400
    rows = kept_frame(np.random.default_rng(2024), campaigns=campaigns)
    out = compare(
        rows,
        ["B"],
        ["A"],
        Selector(metric="decode_tps", probe="decode"),
        higher_is_better=True,
        threshold=0.0,
        rigor=Rigor(),
    )
    verdicts = [c.verdict for c in out.comparisons]
    passed, failed = verdicts.count(Verdict.PASS), verdicts.count(Verdict.FAIL)
    assert passed / campaigns <= 0.06, f"false pass {passed}/{campaigns}"
    assert failed / campaigns <= 0.06, f"false fail {failed}/{campaigns}"
    assert len(verdicts) == campaigns and {c.pairs for c in out.comparisons} == {3}


def test_block_of_is_the_start_a_row_was_measured_on() -> None:
    """A chained attempt's rows: the lead's block; an attempt on its own server (no
    start recorded, or a frame without the column): its own block id, else item and repeat."""
    from gates.runs import block_of

    rows = pd.DataFrame(
        {
            "block_id": ["b/b0/x", "b/b0/x", "a/b0/x", "", ""],
            "server_block": ["a/b0/x", None, "a/b0/x", "", float("nan")],
            "item_key": ["b", "b", "a", "c", "c"],
            "repeat": [0, 0, 0, 2, 2],
        }
    )
    assert list(block_of(rows)) == ["a/b0/x", "b/b0/x", "a/b0/x", "c/b2", "c/b2"]
    assert list(block_of(rows.astype({"server_block": "category", "block_id": "category"}))) == list(block_of(rows))
    assert list(block_of(rows.drop(columns="server_block"))) == ["b/b0/x", "b/b0/x", "a/b0/x", "c/b2", "c/b2"]


# -- what the store keeps of the start -----------------------------------------------------------


def _measured(store: Store, cid: int, key: str, block: dict[str, Any], value: float) -> AttemptRow:
    att = store.new_attempt(cid, key, "A", {}, 0, block=block)
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.DONE))
    store.add(
        MeasurementRow(
            campaign_id=cid,
            attempt_id=att.id,
            probe_run_id=run.id,
            item_key=key,
            arm_id="A",
            repeat=0,
            probe="decode",
            mode="canonical",
            metric="decode_tps",
            value=value,
        )
    )
    store.update(AttemptRow, att.id, state=AttemptState.DONE)
    return att


def test_the_frame_carries_the_start_each_row_ran_on(db_url: str) -> None:
    """A chained attempt stores the lead's block as its start; an attempt with a server of
    its own stores none and its rows read their own block id."""
    store = Store(db_url)
    cid = store.add(CampaignRow(name="c")).id
    _measured(store, cid, "decode", {"block_id": "decode/b0/s", "block_order": 0}, 10.0)
    _measured(store, cid, "again", {"block_id": "again/b0/s", "block_order": 0, "server_block": "decode/b0/s"}, 11.0)
    for categorical in (False, True):
        frame = store.measurements_frame(cid, categorical=categorical).sort_values("value")
        assert list(frame["server_block"].astype(str)) == ["decode/b0/s", "decode/b0/s"]
        assert list(frame["block_id"].astype(str)) == ["decode/b0/s", "again/b0/s"]


def test_attempts_chained_before_the_column_get_their_start_from_the_server_log(db_url: str) -> None:
    """A database at revision 0006: attempts chained onto a kept server copied its
    `server_log` from the attempt that started it. Upgraded, each chained attempt names
    that attempt's block as its start; a server of its own (another log, or none) names none."""
    import sqlalchemy as sa

    from tests.unit.test_store import _old_database, _row_values

    raw = sa.create_engine(db_url)
    with raw.begin() as conn:
        t, cid, lead, _ = _old_database(conn, "0006")
        conn.execute(
            t["attempt"]
            .update()
            .where(t["attempt"].c.id == lead)
            .values(block_id="k/b0/s", server_log="w/k-A-r0-attempt1.log")
        )
        made = {}
        for key, log in (("kept", "w/k-A-r0-attempt1.log"), ("alone", "w/alone-A-r0-attempt3.log"), ("nolog", "")):
            made[key] = conn.execute(
                t["attempt"]
                .insert()
                .values(
                    **_row_values(
                        t["attempt"],
                        campaign_id=cid,
                        item_key=key,
                        arm_id="A",
                        repeat=0,
                        number=1,
                        state="done",
                        block_id=f"{key}/b0/s",
                        server_log=log,
                    )
                )
            ).inserted_primary_key[0]
    raw.dispose()
    store = Store(db_url)
    starts = {a.id: a.server_block for a in store.attempts(cid)}
    assert starts == {lead: "", made["kept"]: "k/b0/s", made["alone"]: "", made["nolog"]: ""}


# -- a kept server runs only what it was launched with --------------------------------------------

DECODE = item("decode", ["A", "B"], ["decode"], contexts=[1024], gate="speed", repeats=3)
CACHE = item("cache", ["A", "B"], ["cache-probe"], gate="reuse", repeats=3, overrides={"prompt_tokens": 512})
GATES = [
    gate("speed", "relative_improvement", {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1}, ["B"], ["A"]),
    gate("reuse", "threshold", {"metric": "reuse", "probe": "cache-probe", "op": ">=", "value": 0.5}, ["A", "B"]),
]


def _spec(tmp_path: Path, queue: list[dict[str, Any]], **kw: Any) -> Any:
    from flows.resolve import load_campaign

    arms = [arm("A", context=4096, recipe={"slots": 1}), arm("B", context=4096, recipe={"slots": 2})]
    return load_campaign(write_campaign(tmp_path, campaign_file("starts", arms=arms, gates=GATES, queue=queue, **kw)))


@pytest.mark.parametrize("overrides", [{"sim.decode_tps": 80.0}, {"sim.run_sd": 0.2}])
def test_an_item_with_other_simulator_overrides_gets_servers_of_its_own(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    """`sim.*` reaches the simulator's launch, as a recipe does: a kept server launched
    without it would run the item on the first item's profile, stored under the item's."""
    from flows.groups import planned_groups

    cache = {**CACHE, "overrides": {**CACHE["overrides"], **overrides}}
    assert [[q.key for q in g] for g in planned_groups(_spec(tmp_path, [DECODE, cache]))] == [["decode"], ["cache"]]
    same = {**CACHE, "overrides": {**CACHE["overrides"], **overrides}}
    first = {**DECODE, "overrides": dict(overrides)}
    assert [[q.key for q in g] for g in planned_groups(_spec(tmp_path, [first, same]))] == [["decode", "cache"]]


def test_why_an_item_is_not_on_the_kept_servers_is_said(tmp_path: Path) -> None:
    """The launch settings that differ, with both values; an unset one says so."""
    from flows.groups import _apart

    fast = {**CACHE, "overrides": {**CACHE["overrides"], "sim.decode_tps": 80, "recipe.slots": 4}}
    spec = _spec(tmp_path, [{**DECODE, "overrides": {"sim.decode_tps": 40}}, fast])
    assert _apart(spec, [spec.item("decode")], spec.item("cache")) == (
        "recipe.slots differs (A: 1 vs 4, B: 2 vs 4); sim.decode_tps differs (40 vs 80)"
    )
    spec = _spec(tmp_path, [DECODE, {**CACHE, "overrides": {**CACHE["overrides"], "sim.decode_tps": 80}}])
    assert _apart(spec, [spec.item("decode")], spec.item("cache")) == "sim.decode_tps differs (unset vs 80)"
    spec = _spec(tmp_path, [DECODE, CACHE])
    assert _apart(spec, [spec.item("decode")], spec.item("cache")) == ""


def test_the_run_records_why_an_item_gets_its_own_servers(tmp_path: Path, db_url: str) -> None:
    """`server_group` leaves the item out and logs an event naming the setting."""
    from campaign.store import queue
    from flows.arm_flow import SERVER_NOT_KEPT
    from flows.groups import server_group
    from flows.resolve import simulated_adapters

    spec = _spec(tmp_path, [DECODE, {**CACHE, "overrides": {**CACHE["overrides"], "sim.decode_tps": 80}}])
    store = Store(db_url)
    cid = queue.register(store, spec, "", simulated_adapters()).id
    assert [q.key for q in server_group(store, spec, cid, spec.item("decode"))] == ["decode"]
    (event,) = [e for e in store.events(cid) if e.kind == SERVER_NOT_KEPT]
    assert (event.item_key, event.message) == (
        "cache",
        "not on decode's kept servers: sim.decode_tps differs (unset vs 80)",
    )


def test_a_chained_attempt_whose_stored_settings_differ_is_not_run_on_the_kept_server(
    tmp_path: Path, db_url: str
) -> None:
    """At run time too: an interrupted attempt continues with the overrides stored on it
    (a rerun's `--set sim.*`), so it joins a kept server only when they launch the same."""
    from flows.contracts import Block, Link
    from flows.launch import launch_refusal

    spec = _spec(tmp_path, [DECODE, CACHE])
    store = Store(db_url)
    cid = store.add(CampaignRow(name="starts")).id
    link = Link(item=spec.item("cache"), block=Block(index=0, id="cache/b0/s"))
    lead = spec.item("decode")
    assert launch_refusal(spec, store, cid, link, "A", lead, fresh=False) == ""
    att = store.new_attempt(cid, "cache", "A", {**link.item.overrides, "sim.decode_tps": 80}, 0)
    store.update(AttemptRow, att.id, state=AttemptState.INTERRUPTED)
    assert launch_refusal(spec, store, cid, link, "A", lead, fresh=False) == "sim.decode_tps differs (unset vs 80)"
    assert launch_refusal(spec, store, cid, link, "A", lead, fresh=True) == ""  # a fresh attempt takes the link's


# -- what a gate reading every item pools ------------------------------------------------------------


def _pooling(
    reads: str | None,
    gate_arms: tuple[list[str], list[str]] = (["B"], ["A"]),
    feed: bool = False,
    probes: tuple[str, ...] = ("decode",),
) -> str:
    fields = {"reads": reads} if reads else {}
    gates = [
        gate(
            "win",
            "relative_improvement",
            {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1},
            *gate_arms,
            **fields,
        )
    ]
    first = item("first", ["A", "B"], ["decode", "cache-probe"], **({"gate": "win"} if feed else {}))
    second = item("second", ["B"], list(probes), overrides={"recipe.slots": 2})
    return campaign_file(
        "pool",
        runtimes=[sim()],
        arms=[arm("A", recipe={"slots": 1}), arm("B", recipe={"slots": 4})],
        gates=gates,
        queue=[first, second],
    )


def test_a_gate_no_item_feeds_must_not_pool_unlike_recipes(tmp_path: Path) -> None:
    """It reads every item's rows, so B at 4 slots (first) and at 2 (second) would be one cell."""
    (msg,) = problems(tmp_path, _pooling(None))
    assert msg == (
        "queue[1] (id 'second').overrides: gate 'win' reads every item (no item feeds it), queue[0] (id 'first') "
        "included, which runs arm 'B' with another recipe: slots (first: 4, second: 2); one verdict must not pool "
        "unlike settings (give that recipe its own arm, or feed 'win' from the items it compares)"
    )


def test_a_gate_reading_all_must_not_pool_unlike_recipes(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, _pooling("all", feed=True, probes=("cache-probe", "decode")))
    assert "gate 'win' reads every item (its reads = 'all'), queue[0] (id 'first') included" in msg and "arm 'B'" in msg


def test_a_gate_reading_every_item_pools_only_the_arms_it_compares(tmp_path: Path) -> None:
    """B's two recipes are read by no gate that compares B: loads. Fed by the first item
    only, the gate reads only that item's rows: loads too."""
    from flows.resolve import load_campaign

    load_campaign(write_campaign(tmp_path, _pooling(None, gate_arms=(["A"], []))))
    load_campaign(write_campaign(tmp_path, _pooling(None, feed=True)))


def test_a_gate_reading_every_item_pools_only_the_cells_it_reads(tmp_path: Path) -> None:
    """B at two recipes in cache-probe rows, which a decode gate never reads: loads (as
    examples/qwen38.toml's gate-10 reads every item, and a cache item there sets its own
    session_cache_cap)."""
    from flows.resolve import load_campaign

    load_campaign(write_campaign(tmp_path, _pooling(None, probes=("cache-probe",))))


def test_the_items_a_gate_reads_are_one_definition() -> None:
    """The pooling check's and the engine's reading of `reads` are the same function."""
    from campaign.core import pooling
    from gates import engine

    assert engine.read_items is pooling.read_items
