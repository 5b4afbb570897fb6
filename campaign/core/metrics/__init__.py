"""The catalogue of metrics: every number a probe stores, its unit, which way is better,
which probes and scenarios produce it, and what it means.

Why one table in the core: a gate names a metric by a bare string, and before this table
a typo (`tfft_s`) or a metric its probe never writes ran a whole campaign and left the
gate pending for good, and a gate on seconds defaulted to "higher is better". The loader
checks every gate's metric against this table and against the probes of the items that
feed it, gates take their direction from it unless they set one, and the docs and pages
print it. How each number is computed is `arms.measures` (the definitions); a test runs
every probe on the simulator and fails when a probe writes a metric, or a unit, this
table does not list, so the table cannot drift from what is stored.

Why a constant per entry (`TTFT_S`, `REUSE`, ...): the code names a metric through this
module, never by a bare string, so a misspelled name is an AttributeError or an
ImportError where it is written, not a row no gate ever reads, and a unit is stated once,
here. A probe hands the entry to its sink (`Sink.measurement(metric=TTFT_S, ...)`) and
the sink stores its name and unit (`stored`); code that reads rows compares with
`TTFT_S.name`. The strings stay where a person writes them: a campaign file's gate
parameters, the docs, this table. `tests/unit/test_metric_names.py` keeps it so.

The entries are written in `entry` (the value), `single` (one request and its run) and
`load` (agent-load and the load probe); this module is the one name the code reads them
through (`metrics.TTFT_S`), with the lookups over them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import replace

from campaign.core.metrics.energy import *  # noqa: F403

# the entries, re-exported: every constant is read as `metrics.<NAME>`
from campaign.core.metrics.entry import *  # noqa: F403
from campaign.core.metrics.entry import ENTRIES, Metric
from campaign.core.metrics.load import *  # noqa: F403
from campaign.core.metrics.single import *  # noqa: F403

METRICS: dict[str, Metric] = {m.name: m for m in ENTRIES}


# -- rows stored beside the catalogue
# A failed request's own row and the failed requests of each error kind
# (`arms.probes.failures`): the gates and the pages read them by name or by pattern, a
# campaign file's gate never names one, so they are not in METRICS (nor in
# docs/metrics.md). They are named here all the same, so no probe writes them by a string.

ERRORS = Metric("errors", "count", "a request that failed (value 1); its source is the error kind", ALL_PROBES)
NOT_RUN = Metric("not_run", "count", "a request the stall guard kept from being sent (value 1)", ALL_PROBES)
REQUESTS_NOT_RUN = Metric(
    "requests_not_run",
    "requests",
    "requests the stall guard never sent (neither requests nor failures)",
    TALLYING,
    "per scenario or summary",
)
FAILED_KIND_PREFIX = f"{REQUESTS_FAILED.name}_"


def requests_failed_of(slug: str) -> Metric:
    """`requests_failed_<kind>`: the requests that failed with one error kind (its slug,
    `arms.probes.failures.kind_slug`)."""
    return Metric(
        f"{FAILED_KIND_PREFIX}{slug}",
        REQUESTS_FAILED.unit,
        f"requests that failed with {slug}",
        TALLYING,
        "per scenario or summary",
        False,
    )


def baseline(metric: Metric) -> Metric:
    """The copy of `metric` that agent-load's baseline pass writes (`baseline_<name>`): the
    catalogue's entry, a KeyError when it has none; for a row beside the catalogue (a
    failure count by kind), one named the same way."""
    name = f"baseline_{metric.name}"
    if metric.name in METRICS:
        return METRICS[name]
    return replace(
        metric,
        name=name,
        meaning=f"{metric.meaning}, in the baseline pass (one conversation alone)",
        probes=(AGENT_LOAD,),
        scenarios="summary",
    )


def stored(metric: Metric | str, unit: str | None = None) -> tuple[str, str]:
    """The (name, unit) a measurement row keeps: the one place both probe sinks turn what
    a probe wrote into the plain strings the store holds.

    The unit is the catalogue's: a probe states one only where it is the runtime's (a
    metric with `also_units`: the cache counters, in the runtime's `counter_unit`), and it
    must be one of the metric's units. A name is taken in place of the entry only where
    it comes as data (the server counters, named by the runtime's telemetry), and must be
    in the catalogue. Anything else is a ValueError at the call, where it was written.
    """
    if isinstance(metric, str):
        entry = METRICS.get(metric)
        if entry is None:
            raise ValueError(
                f"measurement {metric!r}: not a metric of the catalogue (campaign.core.metrics){suggest(metric)}"
            )
        metric = entry
    if unit is None or unit == metric.unit:
        return metric.name, metric.unit
    if unit not in metric.also_units:
        raise ValueError(
            f"measurement {metric.name!r} in {unit!r}: the catalogue stores it in {' or '.join(metric.units)}"
        )
    return metric.name, unit


def get(name: str) -> Metric | None:
    return METRICS.get(name)


def direction(name: str) -> bool | None:
    """True if higher is better, False if lower is, None if the catalogue does not say."""
    metric = METRICS.get(name)
    return metric.higher_is_better if metric else None


def suggest(name: str) -> str:
    """' (did you mean ttft_s?)' for a misspelled name, '' when nothing is close."""
    close = difflib.get_close_matches(name, list(METRICS), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def markdown() -> str:
    """docs/metrics.md: the catalogue as a table per probe (a test keeps the file current;
    write it with `python -m campaign.core.metrics > docs/metrics.md`)."""
    lines = [
        "# Metrics",
        "",
        "Every metric a probe stores, from the catalogue in `campaign/core/metrics/` (this file is",
        "generated from it: `python -m campaign.core.metrics > docs/metrics.md`). A gate names one by",
        "`metric` (and `also_metric`, `guard_metric`, ...); `campaign check` refuses a name that is",
        "not here or that no probe of the gate's items stores. A comparative gate reads the",
        "direction given here unless it sets `higher_is_better`; how each number is computed is",
        'in `docs/measurement.md` ("Measurement definitions"). "Each load run" is one row per run',
        "of the load probe, its scenario the run's: `synchronous`, `concurrency=N`, `poisson=R`,",
        "`constant=R` or `trace=<name>`.",
    ]
    for probe in ALL_PROBES:
        lines += ["", f"## {probe}", "", *probe_table(probe)]
    lines += [
        "",
        "## telemetry (every probe)",
        "",
        "One row each per probe run ([energy.md](energy.md)); none where no device can be read.",
        "",
        *_table(m for m in METRICS.values() if m.scenarios == TELEMETRY),
    ]
    return "\n".join(lines) + "\n"


def probe_table(probe: str) -> list[str]:
    """The metrics `probe` stores, as a markdown table (metrics.md and probes.md); the
    telemetry every probe run stores is one table of its own, not repeated per probe."""
    return _table((m for m in METRICS.values() if probe in m.probes and m.scenarios != TELEMETRY), probe)


def scenarios_of(metric: Metric, probe: str) -> str:
    """The scenarios `metric` is stored under by `probe`: where its text names them per
    probe ("cache-probe: cold, ...; decode: decode; ..."), that probe's part, else all."""
    parts = re.split(rf"; (?=(?:{'|'.join(map(re.escape, ALL_PROBES))}): )", metric.scenarios)
    mine = [p.split(": ", 1)[1] for p in parts if p.startswith(f"{probe}: ")]
    return mine[0] if mine else metric.scenarios


def _table(entries: Iterable[Metric], probe: str = "") -> list[str]:
    rows = ["| metric | unit | direction | scenarios | meaning |", "| --- | --- | --- | --- | --- |"]
    for m in sorted(entries, key=lambda m: m.name):
        where = scenarios_of(m, probe) if probe else m.scenarios
        rows.append(f"| `{m.name}` | {m.unit} | {m.direction} | {where} | {m.meaning} |")
    return rows
