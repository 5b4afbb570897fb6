"""`campaign export --format benchmark-report`: one llm-d Benchmark Report v0.2.1 (JSON) per
server run, i.e. per (arm, block) of the attempts the verdicts read.

Why this format: llm-d-benchmark's analysis and comparison tools read it, so a campaign's
runs can sit beside runs made by other harnesses. Its JSON Schema is vendored unchanged in
`reports/schemas/` (NOTICE.md there says where from) and every report is validated against
it before it is returned or written: a report the schema refuses is a bug here, raised as
`ReportInvalid` with the validator's message.

What maps to what, and what is left out and why, is docs/benchmark-report.md. In short:
only what was stored is written (a statistic with no values is left out, never written as
0), latencies come from the stored request records, and our own ids, verdicts and
intervals sit in `results.observability.llm_campaign`, the schema's free-form object that
fits best (the report has no free-form metadata at its top level or in `run`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from arms.measures import (
    SOURCE_SERVER,
    RequestRecord,
    completion_tokens,
    e2e_s,
    itl_s,
    percentile,
    prompt_tokens,
    record_payload,
    tpot_s,
    ttft_s,
)
from campaign.core import metrics
from campaign.core.states import SampleKind
from campaign.store.tables import ArmRow, AttemptRow, CampaignRow, RequestRow, VerdictRow, aware

SCHEMA_PATH = Path(__file__).parent / "schemas" / "br_v0_2_1_json_schema.json"
REPORT_VERSION = "0.2.1"
METADATA_KEY = "llm_campaign"  # our key inside results.observability
TOOL = "llm-campaign"  # the load generator, as the report names it
UNKNOWN = "unknown"  # a required text field the store has no value for
# the percentiles written for every statistic: the ones the load probe stores as summaries, so both agree
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))
# stored summary rows written as throughput: our metric -> (report field, its unit as stored, the report's unit)
THROUGHPUT = {
    metrics.OUTPUT_TPS.name: ("output_token_rate", metrics.OUTPUT_TPS.unit, "tokens/s"),
    metrics.REQUEST_THROUGHPUT_RPS.name: ("request_rate", metrics.REQUEST_THROUGHPUT_RPS.unit, "queries/s"),
}
# per-request sample rows, read for latency only when a run stored no request records
SAMPLE_LATENCY = {
    metrics.TTFT_S.name: "time_to_first_token",
    metrics.TPOT_S.name: "time_per_output_token",
    metrics.E2E_S.name: "request_latency",
}
# what a workload override says about where the prompts came from (the schema's LoadSource)
PROMPT_SOURCE = {"synthetic": "random", "dataset": "sampled"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ReportInvalid(Exception):
    """A report the vendored schema refuses: a bug in the mapping, never the user's."""


class ReportStore(Protocol):
    """What the reports read from the store (`campaign.store.store.Store` has it all)."""

    def campaigns(self) -> list[CampaignRow]: ...

    def measurements_frame(self, campaign_id: int) -> pd.DataFrame: ...

    def attempts(self, campaign_id: int) -> list[AttemptRow]: ...

    def arms(self, campaign_id: int) -> list[ArmRow]: ...

    def requests(self, probe_run_ids: Iterable[int]) -> list[RequestRow]: ...

    def latest_verdicts(self, campaign_id: int) -> dict[str, VerdictRow]: ...


# -- the schema -----------------------------------------------------------------------------


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.cache
def _validator() -> Validator:
    """The validator the schema's `$schema` names; Draft 2020-12 when it names none (the
    vendored file names none, and its `$defs` are 2020-12's)."""
    cls = validator_for(schema(), default=Draft202012Validator)
    cls.check_schema(schema())
    return cls(schema(), format_checker=cls.FORMAT_CHECKER)


def validate(report: Mapping[str, Any]) -> None:
    """Raise `ReportInvalid` with the most relevant error (and how many there are) when the
    schema refuses `report`."""
    errors = list(_validator().iter_errors(report))
    if not errors:
        return
    worst = best_match(errors)
    where = "/".join(str(p) for p in worst.absolute_path) or "(the report)"
    run = report.get("run")
    uid = run.get("uid", "?") if isinstance(run, Mapping) else "?"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise ReportInvalid(f"benchmark report {uid} fails its schema at {where}: {worst.message}{more}")


# -- statistics ------------------------------------------------------------------------------


def stats(values: Iterable[float | None], units: str) -> dict[str, Any] | None:
    """A `Statistics` object of the finite values: mean, min, max, p50, p90, p99, and the
    standard deviation from two values on; None when there is no value (never zeros)."""
    data = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    if not data:
        return None
    out: dict[str, Any] = {"units": units, "mean": statistics.fmean(data)}
    if len(data) > 1:
        out["stddev"] = statistics.stdev(data)
    out["min"] = data[0]
    for name, q in PERCENTILES:
        out[name] = percentile(data, q)
    out["max"] = data[-1]
    return out


def sequence_length(values: Sequence[int]) -> dict[str, Any] | None:
    """A `SequenceLength` of measured token counts: fixed when they are all equal, else
    'other' with their mean, spread and range; None without counts."""
    if not values:
        return None
    low, high = min(values), max(values)
    if low == high:
        return {"distribution": "fixed", "value": low}
    out: dict[str, Any] = {"distribution": "other", "value": statistics.fmean(values)}
    out["std_dev"] = statistics.stdev(values)
    out["min"] = low
    if high >= 1:
        out["max"] = high
    return out


@dataclass
class RequestFacts:
    """What a run's request records say, per request (failed requests carry no times)."""

    total: int = 0
    failed: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)  # every gap of every request, pooled
    e2e: list[float] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)  # server-reported prompt tokens
    output: list[int] = field(default_factory=list)  # server-reported completion tokens


def request_facts(rows: Iterable[RequestRow]) -> RequestFacts:
    """Times and token counts of stored request records, by the project's own formulas
    (`arms.measures`), so a report says what the gates and pages say."""
    facts = RequestFacts()
    for row in rows:
        facts.total += 1
        if not row.ok:
            facts.failed += 1
            continue
        record = RequestRecord.from_dict(json.loads(row.raw_json or "{}"))
        for values, value in (
            (facts.ttft, ttft_s(record)),
            (facts.e2e, e2e_s(record)),
            (facts.tpot, tpot_s(record)[0]),
        ):
            if value is not None:
                values.append(value)
        facts.itl.extend(itl_s(record))
        prompt = prompt_tokens(record_payload(record))
        if prompt is not None:
            facts.prompt.append(prompt)
        tokens, source = completion_tokens(record)
        if tokens is not None and source == SOURCE_SERVER:  # a client estimate is not a token count
            facts.output.append(tokens)
    return facts


# -- one run ---------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """`value` with every non-finite float as None: JSON has no NaN (evidence may hold one)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _iso(moment: datetime | None) -> str | None:
    return aware(moment).isoformat() if moment is not None else None


def _duration(start: datetime | None, end: datetime | None) -> str | None:
    if start is None or end is None:
        return None
    return f"PT{max(0.0, (aware(end) - aware(start)).total_seconds()):.3f}S"


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}


def _version() -> str:
    try:
        return importlib.metadata.version("llm-campaign")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def _single(rows: pd.DataFrame, metric: str, unit: str | None = None) -> float | None:
    """The value of `metric` when the run stored exactly one summary row of it (two rows are
    two cells, whose rates or percentiles cannot be pooled)."""
    hit = rows[(rows["kind"] == SampleKind.SUMMARY.value) & (rows["metric"] == metric)]
    if unit is not None:
        hit = hit[hit["unit"] == unit]
    return float(hit["value"].iloc[0]) if len(hit) == 1 else None


def _tally(rows: pd.DataFrame) -> tuple[int, int] | None:
    """(requests, failed) from the probes' summary tallies, phase prefixes included, as
    `Store.request_outcome` counts them; None when no probe wrote one."""
    summary = rows[rows["kind"] == SampleKind.SUMMARY.value]
    sent = summary[summary["metric"].str.endswith(metrics.REQUESTS.name)]
    if sent.empty:
        return None
    failed = summary[summary["metric"].str.endswith(metrics.REQUESTS_FAILED.name)]
    return int(sent["value"].sum()), int(failed["value"].sum())


def accelerator(rows: pd.DataFrame) -> dict[str, Any] | None:
    """The devices the run's telemetry read, from the label stored as the source of its power
    limit row ('NAME (SOURCE, N W limit); ...'); None when no device was read."""
    hit = rows[(rows["scenario"] == metrics.TELEMETRY) & (rows["metric"] == metrics.ACCEL_POWER_LIMIT_W.name)]
    labels = [s for s in hit["source"] if s]
    if labels:
        names = [part.rsplit(" (", 1)[0].strip() for part in labels[0].split("; ") if part.strip()]
        if names:
            return {"model": " + ".join(sorted(set(names))), "count": len(names), "parallelism": {}}
    return None


def _role(arm_id: str, gate: Mapping[str, Any], evidence: Mapping[str, Any]) -> str | None:
    if arm_id in (gate.get("subjects") or []):
        return "subject"
    if arm_id in (gate.get("baseline") or []):
        return "baseline"
    for cell in evidence.get("cells") or []:
        if isinstance(cell, Mapping) and cell.get("arm") == arm_id and cell.get("role"):
            return str(cell["role"])
    return None


# what a verdict's evidence says of an arm: its cells' intervals, and the comparisons it is in
_CELL_KEYS = (
    "metric",
    "probe",
    "scenario",
    "mode",
    "context",
    "unit",
    "n",
    "median",
    "low",
    "high",
    "confidence",
    "method",
)
_COMPARISON_KEYS = (
    "subject",
    "baseline",
    "cell",
    "change",
    "change_low",
    "change_high",
    "threshold",
    "verdict",
    "pairs",
    "method",
)


def verdict_entries(
    arm_id: str, verdicts: Mapping[str, VerdictRow], gates: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every gate's latest verdict, with this arm's role in it (None when the gate does not
    name or read the arm) and the intervals its evidence holds for the arm."""
    out = []
    for gate_id in sorted(verdicts):
        row = verdicts[gate_id]
        evidence = _json(row.evidence_json)
        evidence = evidence if isinstance(evidence, Mapping) else {}
        cells = [c for c in evidence.get("cells") or [] if isinstance(c, Mapping) and c.get("arm") == arm_id]
        comparisons = [
            c
            for c in evidence.get("comparisons") or []
            if isinstance(c, Mapping) and arm_id in (c.get("subject"), c.get("baseline"))
        ]
        out.append(
            {
                "gate": gate_id,
                "verdict": row.verdict,
                "reason": row.reason,
                "role": _role(arm_id, gates.get(gate_id, {}), evidence),
                "computed_at": _iso(row.computed_at),
                "intervals": [{k: c[k] for k in _CELL_KEYS if k in c} for c in cells],
                "comparisons": [{k: c[k] for k in _COMPARISON_KEYS if k in c} for c in comparisons],
            }
        )
    return out


@dataclass
class Run:
    """One server run: an arm's rows of one block, with the attempts that measured them."""

    campaign: CampaignRow
    arm: ArmRow | None
    arm_id: str
    block: str
    rows: pd.DataFrame
    attempts: list[AttemptRow]
    requests: list[RequestRow] = field(default_factory=list)

    @property
    def uid(self) -> str:
        return f"{self.campaign.name}/{self.arm_id}/{self.block}"

    @property
    def identity(self) -> dict[str, Any]:
        for attempt in self.attempts:
            ident = _json(attempt.identity_json)
            if isinstance(ident, dict) and ident:
                return ident
        return {}


def _component(run: Run) -> dict[str, Any]:
    """The server as one inference engine: one run is one server process (a replica, one of
    it), its adapter and the version it reported, the arm's model; the recipe it was started
    with is its native args, and what the schema has no field for is its native config."""
    arm, ident = run.arm, run.identity
    recipe = _json(arm.recipe_json) if arm else {}
    recipe = recipe if isinstance(recipe, dict) else {"recipe": recipe}
    hashes = sorted({a.recipe_hash for a in run.attempts if a.recipe_hash})
    cfg_id = (
        hashes[0] if len(hashes) == 1 else hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    )
    device = accelerator(run.rows)
    model = arm.model if arm else ", ".join(ident.get("served_models") or []) or UNKNOWN
    described = f"arm {run.arm_id}" + (f": {arm.model} {arm.quant} on {arm.runtime} ({arm.adapter})" if arm else "")
    config: dict[str, Any] = {
        "served_models": list(ident.get("served_models") or []),
        "fingerprint": ident.get("fingerprint") or None,
        "runtime_version": ident.get("runtime_version") or None,
    }
    if arm:
        config |= {
            "runtime": arm.runtime,
            "adapter": arm.adapter,
            "model": arm.model,
            "quant": arm.quant,
            "bits_per_weight": arm.bits_per_weight,
            "context": arm.context,
            "simulated": arm.simulated,
        }
    return {
        "metadata": {
            "schema_version": "0.0.1",
            "label": f"arm-{run.arm_id}",
            "cfg_id": cfg_id,
            "description": described,
        },
        "standardized": _standardized(
            arm.adapter if arm else UNKNOWN, str(ident.get("runtime_version") or UNKNOWN), model, device
        ),
        "native": {"args": recipe, "config": config},
    }


def _standardized(tool: str, version: str, model: str, device: dict[str, Any] | None) -> dict[str, Any]:
    """An `inference_engine` where the devices were read. The schema requires its
    accelerator's model and count, so a run whose devices no one read is a `generic`
    component (which takes free fields) saying so, rather than a made-up model and a 0."""
    if device is None:
        return {
            "kind": "generic",
            "tool": tool,
            "tool_version": version,
            "role": "replica",
            "model": {"name": model},
            "accelerator": "not measured on this machine",
        }
    return {
        "kind": "inference_engine",
        "tool": tool,
        "tool_version": version,
        "role": "replica",
        "replicas": 1,
        "model": {"name": model},
        "accelerator": device,
    }


def _cells(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The (probe, scenario, mode, context) cells the run measured, telemetry left out."""
    measured = rows[rows["scenario"] != metrics.TELEMETRY]
    keys = ["probe", "scenario", "mode", "context", "settings_hash"]
    cells = measured[keys].drop_duplicates().sort_values(keys)
    return [
        {
            "probe": r.probe,
            "scenario": r.scenario,
            "mode": r.mode,
            "context": int(r.context),
            "settings": r.settings_hash,
        }
        for r in cells.itertuples()
    ]


def _load(run: Run, facts: RequestFacts) -> dict[str, Any] | None:
    """The workload: standardized where the schema has a field for what we stored (the
    input length is required, so a run without server-reported prompt tokens has no load),
    the overrides it ran with and its cells in native form."""
    input_len = sequence_length(facts.prompt)
    if input_len is None:
        return None
    overrides = _json(run.attempts[0].overrides_json) if run.attempts else {}
    overrides = overrides if isinstance(overrides, dict) else {}
    cells = _cells(run.rows)
    standardized: dict[str, Any] = {
        "tool": TOOL,
        "tool_version": _version(),
        "source": PROMPT_SOURCE.get(str(overrides.get("workload")), UNKNOWN),
        "input_seq_len": input_len,
    }
    clients = _single(run.rows, metrics.CONCURRENCY.name)
    if clients is None and isinstance(overrides.get("concurrency"), int):
        clients = overrides["concurrency"]
    if clients is not None and clients >= 1:
        standardized["concurrency"] = int(clients) if float(clients).is_integer() else clients
    rate = overrides.get("rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
        standardized["rate_qps"] = float(rate)
    procs = overrides.get("client_procs")
    if isinstance(procs, int) and not isinstance(procs, bool) and procs >= 1:
        standardized["parallelism"] = procs
    settings = sorted({c["settings"] for c in cells if c["settings"]})
    probes = sorted({c["probe"] for c in cells})
    scenarios = sorted({c["scenario"] for c in cells})
    return {
        "metadata": {
            "schema_version": "0.0.1",
            "cfg_id": settings[0] if len(settings) == 1 else None,
            "description": f"probe {', '.join(probes)}; scenario {', '.join(scenarios)}",
        },
        "standardized": standardized,
        "native": {"args": overrides, "config": {"cells": cells, "items": sorted(set(run.rows["item_key"]))}},
    }


def _aggregate(run: Run, facts: RequestFacts) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    tally = (facts.total, facts.failed) if facts.total else _tally(run.rows)
    if tally is not None:
        requests: dict[str, Any] = {"total": tally[0], "failures": tally[1]}
        for name, counts in (("input_length", facts.prompt), ("output_length", facts.output)):
            stat = stats(counts, "count")
            if stat:
                requests[name] = stat
        out["requests"] = requests
    latency: dict[str, Any] = {}
    if facts.total:
        for name, values in (
            ("time_to_first_token", facts.ttft),
            ("time_per_output_token", facts.tpot),
            ("inter_token_latency", facts.itl),
            ("request_latency", facts.e2e),
        ):
            stat = stats(values, "s")
            if stat:
                latency[name] = stat
    else:  # no request records: the per-request sample rows, where the probe wrote them
        samples = run.rows[(run.rows["kind"] == SampleKind.SAMPLE.value) & (run.rows["unit"] == "s")]
        for metric, name in SAMPLE_LATENCY.items():
            stat = stats(samples.loc[samples["metric"] == metric, "value"], "s")
            if stat:
                latency[name] = stat
    if latency:
        out["latency"] = latency
    throughput: dict[str, Any] = {}
    for metric, (name, stored_unit, unit) in THROUGHPUT.items():
        value = _single(run.rows, metric, stored_unit)
        if value is not None and math.isfinite(value):
            throughput[name] = {"units": unit, "mean": value}
    if throughput:
        out["throughput"] = throughput
    return out or None


def build(run: Run, verdicts: Mapping[str, VerdictRow], gates: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The report of one run, not yet validated."""
    probe_runs = sorted({int(r) for r in run.rows["probe_run_id"]})
    facts = request_facts(run.requests)
    starts = [a.started_at for a in run.attempts if a.started_at is not None]
    ends = [a.ended_at for a in run.attempts if a.ended_at is not None]
    start = min(starts, key=aware) if starts else None
    end = max(ends, key=aware) if ends else None
    simulated = bool(run.arm.simulated) if run.arm else bool(run.rows["simulated"].any())
    time = {k: v for k, v in (("start", _iso(start)), ("end", _iso(end)), ("duration", _duration(start, end))) if v}
    report_run: dict[str, Any] = {"uid": run.uid, "eid": run.campaign.name}
    if time:
        report_run["time"] = time
    report_run["description"] = run.campaign.title or run.campaign.name
    report_run["keywords"] = [TOOL, *(["simulated"] if simulated else [])]
    scenario: dict[str, Any] = {"stack": [_component(run)]}
    load = _load(run, facts)
    if load is not None:
        scenario["load"] = load
    ours = {
        "campaign": run.campaign.name,
        "campaign_id": run.campaign.id,
        "arm": run.arm_id,
        "group": run.arm.group if run.arm else None,
        "block": run.block,
        "block_number": int(run.rows["repeat"].iloc[0]),
        "items": sorted(set(run.rows["item_key"])),
        "attempts": sorted(a.id for a in run.attempts if a.id is not None),
        "probe_runs": probe_runs,
        "hosts": sorted({a.host for a in run.attempts if a.host}),
        "simulated": simulated,
        "verdicts": verdict_entries(run.arm_id, verdicts, gates),
    }
    results: dict[str, Any] = {}
    aggregate = _aggregate(run, facts)
    if aggregate is not None:
        results["request_performance"] = {"aggregate": aggregate}
    results["observability"] = {METADATA_KEY: ours}
    return _finite({"version": REPORT_VERSION, "run": report_run, "scenario": scenario, "results": results})


def stem(arm_id: str, block: str) -> str:
    """A file name for the run, safe on every file system."""
    return _UNSAFE.sub("_", f"{arm_id}__{block}").strip("._") or "run"


def _run_key(rows: pd.DataFrame) -> pd.Series:
    """A run's block id; rows of attempts made before blocks fall back to item and repeat."""
    fallback = rows["item_key"].astype(str) + "/b" + rows["repeat"].astype(str)
    return rows["block_id"].astype(str).where(rows["block_id"].astype(str) != "", fallback)


def reports(store: ReportStore, campaign_id: int) -> list[tuple[str, dict[str, Any]]]:
    """(file stem, report) per server run of the campaign, each valid against the schema:
    the rows verdicts read (newest finished attempts, finished probe runs), grouped by arm
    and block, in arm order then the order the runs were made."""
    campaign = next((c for c in store.campaigns() if c.id == campaign_id), None)
    if campaign is None:
        raise KeyError(f"no campaign with id {campaign_id}")
    frame = store.measurements_frame(campaign_id)
    if frame.empty:
        return []
    frame = frame.assign(run_key=_run_key(frame))
    arms = {a.arm_id: a for a in store.arms(campaign_id)}
    attempts = {a.id: a for a in store.attempts(campaign_id)}
    verdicts = store.latest_verdicts(campaign_id)
    spec = _json(campaign.spec_json)
    gates = {
        str(g["id"]): g
        for g in (spec.get("gates") or [] if isinstance(spec, dict) else [])
        if isinstance(g, Mapping) and "id" in g
    }
    groups = sorted(
        frame.groupby(["arm_id", "run_key"], sort=False), key=lambda kv: (str(kv[0][0]), int(kv[1]["attempt_id"].min()))
    )
    out: list[tuple[str, dict[str, Any]]] = []
    taken: set[str] = set()
    for (arm_id, block), rows in groups:
        ran = [attempts[i] for i in sorted({int(i) for i in rows["attempt_id"]}) if i in attempts]
        probe_runs = sorted({int(r) for r in rows["probe_run_id"]})
        run = Run(campaign, arms.get(str(arm_id)), str(arm_id), str(block), rows, ran, store.requests(probe_runs))
        report = build(run, verdicts, gates)
        validate(report)
        name, n = stem(run.arm_id, run.block), 1
        while name in taken:
            n += 1
            name = f"{stem(run.arm_id, run.block)}-{n}"
        taken.add(name)
        out.append((name, report))
    return out


def write_reports(store: ReportStore, campaign_id: int, out: Path | str) -> list[Path]:
    """Write each run's report as `<stem>.json` into `out`; return their paths. Every report
    is validated before any file is written, so a failing one leaves no partial export."""
    built = reports(store, campaign_id)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, report in built:
        path = folder / f"{name}.json"
        path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        paths.append(path)
    return paths
