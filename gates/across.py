"""The same arms across two sides -- two databases, two campaigns, or one campaign before
and after a date -- with the rigour of a verdict: did the new runtime build (or model,
or quant) make a recipe slower?

Each side's arm is one subject; its cells (probe, scenario, context, mode, settings hash)
are matched by their settings, so runs at other parameters are never compared. Blocks
are never shared across sides, so every comparison is unpaired over server runs
(`gates.compare`'s Welch on the log scale of each run's median), and the cells compared
are one Holm family:

- each change is labelled "regression" or "improvement" only when its two-sided test
  rejects "no change" after Holm over every change compared, else "no change
  established", with the runs a side that would settle it;
- `fail_on` (a regression threshold, e.g. 0.05) raises an alarm only where a regression
  of at least that much is established: the one-sided test of "worse by less than the
  threshold" rejected after Holm, i.e. the interval lies wholly beyond it. Identical
  builds raise it at most (1 - confidence) / 2 of the time, whatever the number of cells
  (`tests/unit/test_across.py` holds that on generated runs).

An arm whose model changed between the sides is not compared when the question is the
runtime (`allow_model_change` False), and the reason says what changed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from campaign.core import metrics
from campaign.core.units import pct
from campaign.store.sides import Side
from gates.blockstats import MOST_BLOCKS, t_quantile
from gates.cells import Cell, Selector
from gates.compare import Comparison, compare
from gates.holm import holm
from gates.rigor import Rigor

# compared when none is named: the headline number of each probe, where both sides have it
DEFAULT_METRICS = (
    metrics.DECODE_TPS.name,
    metrics.TTFT_S.name,
    metrics.TPOT_S.name,
    metrics.OUTPUT_TPS.name,
    metrics.GOODPUT_RPS.name,
    metrics.ENERGY_PER_OUTPUT_TOKEN_J.name,
)
REGRESSION, IMPROVEMENT, UNSETTLED = "regression", "improvement", "no change established"
MANY = f"more than {MOST_BLOCKS} runs a side would be needed"


@dataclass(frozen=True)
class Change:
    """One arm's one metric in one cell, after against before."""

    metric: str
    arm: str
    cell: Cell
    change: float  # after / before - 1 (nan: not estimated)
    low: float
    high: float
    before_runs: int
    after_runs: int
    label: str
    higher_is_better: bool = True
    alarm: bool = False
    note: str = ""

    @property
    def worst_gain(self) -> float:
        """The interval's worst end as a gain (negative: worse), whichever way is better."""
        return self.low if self.higher_is_better else -self.high

    def text(self, confidence: float) -> str:
        """'decode_tps L decode@8K: -7% [-11%, -3%] 95% CI over 5 vs 5 runs: regression'."""
        where = f" {self.cell.key()}" if self.cell.key() else ""
        runs = f"over {self.before_runs} vs {self.after_runs} runs"
        if math.isnan(self.change):
            return f"{self.metric} {self.arm}{where}: not estimated ({runs}): {self.note}"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):  # too few runs for an interval
            body = f"{pct(self.change)}, no CI {runs}: {self.label}"
        else:
            body = f"{pct(self.change)} [{pct(self.low)}, {pct(self.high)}] {confidence:.0%} CI {runs}: {self.label}"
        return f"{self.metric} {self.arm}{where}: {body}{f' ({self.note})' if self.note else ''}"


@dataclass(frozen=True)
class Across:
    before: Side
    after: Side
    changes: list[Change]
    refused: list[str] = field(default_factory=list)  # arms not compared, and why
    fail_on: float | None = None
    confidence: float = 0.95

    @property
    def alarms(self) -> list[Change]:
        return [c for c in self.changes if c.alarm]

    @property
    def unsettled(self) -> list[Change]:
        """Changes that could still be a regression of `fail_on` or more (the interval
        reaches past it) without establishing one."""
        if self.fail_on is None:
            return []
        return [c for c in self.changes if not c.alarm and not math.isnan(c.low) and c.worst_gain < -self.fail_on]


def _side_rows(side: Side, tag: str, arms: Sequence[str]) -> pd.DataFrame:
    """The side's rows of `arms`, each arm renamed `arm@tag` and every block id tagged, so
    no block is shared with the other side (the comparison is unpaired)."""
    rows = side.frame[side.frame["arm_id"].isin(arms)].copy()
    rows["arm_id"] = rows["arm_id"].astype(str) + f"@{tag}"
    for col in ("block_id", "server_block", "item_key"):
        if col in rows:
            text = rows[col].astype(str)
            rows[col] = text.where(text.isin(("", "nan", "None", "<NA>")), f"{tag}:" + text)
    return rows


def model_refusal(before: Side, after: Side, arm: str) -> str:
    """Why an arm's sides do not compare as the same model ("" when they do)."""
    a, b = before.arms[arm], after.arms[arm]
    if a.model != b.model:
        return f"{arm}: the model changed ({a.model} -> {b.model}); the question is the runtime: not compared"
    if a.served and b.served and set(a.served) != set(b.served):
        return (
            f"{arm}: the servers served other models ({', '.join(a.served)} -> {', '.join(b.served)}); "
            "the question is the runtime: not compared"
        )
    return ""


def compare_sides(
    before: Side,
    after: Side,
    *,
    arms: Sequence[str] | None = None,
    metric_names: Sequence[str] | None = None,
    rigor: Rigor | None = None,
    fail_on: float | None = None,
    allow_model_change: bool = False,
) -> Across:
    """Every arm on both sides (or `arms`), on every metric named (or the defaults both
    sides have), in every cell both sides share; see the module doc."""
    rigor = rigor or Rigor()
    refused: list[str] = []
    wanted = list(arms) if arms else sorted(set(before.arms) & set(after.arms))
    for arm in list(wanted):
        missing = [s.label for s in (before, after) if arm not in s.arms]
        if missing:
            refused.append(f"{arm}: no finished run on {' and '.join(missing)}")
            wanted.remove(arm)
        elif not allow_model_change and (why := model_refusal(before, after, arm)):
            refused.append(why)
            wanted.remove(arm)
    rows = pd.concat([_side_rows(before, "before", wanted), _side_rows(after, "after", wanted)], ignore_index=True)
    names = list(metric_names) if metric_names else [m for m in DEFAULT_METRICS if (rows["metric"] == m).any()]
    found: list[tuple[str, str, Comparison, Comparison | None]] = []
    for name in names:
        entry = metrics.METRICS.get(name)
        hib = entry.higher_is_better if entry is not None else None
        if hib is None:
            refused.append(f"{name}: no direction in the catalogue, so no regression can be named")
            continue
        sel = Selector(metric=name)
        for arm in wanted:
            a, b = f"{arm}@after", f"{arm}@before"
            if not ((rows["arm_id"] == a) & (rows["metric"] == name)).any():
                continue
            if not ((rows["arm_id"] == b) & (rows["metric"] == name)).any():
                continue
            change = compare(rows, [a], [b], sel, higher_is_better=hib, threshold=0.0, rigor=rigor, holm=False)
            beyond = (
                compare(rows, [a], [b], sel, higher_is_better=hib, threshold=-fail_on, rigor=rigor, holm=False)
                if fail_on is not None
                else None
            )
            for i, cmp in enumerate(change.comparisons):
                found.append((name, arm, cmp, beyond.comparisons[i] if beyond is not None else None))
    two_sided = [min(1.0, 2 * min(c.p_pass, c.p_fail)) if c.statistical else 1.0 for _, _, c, _ in found]
    changed = holm(two_sided, 1.0 - rigor.confidence) if found else []
    alarms = (
        holm([b.p_fail if b is not None and b.statistical else 1.0 for _, _, _, b in found], rigor.alpha)
        if fail_on is not None and found
        else [(False, 1.0)] * len(found)
    )
    out = []
    for (name, arm, cmp, wide), (moved, _), (alarm, _) in zip(found, changed, alarms, strict=True):
        c, lo, hi = cmp.change
        if not cmp.statistical:  # a rule decided (too few runs, errors): no interval to show
            lo = hi = math.nan
        label = (REGRESSION if cmp.gain < 0 else IMPROVEMENT) if moved else UNSETTLED
        note = "" if cmp.statistical else "; ".join(cmp.notes)
        note = note.replace(f"{arm}@after", f"{arm} on {after.label}").replace(
            f"{arm}@before", f"{arm} on {before.label}"
        )
        worst = lo if cmp.higher_is_better else -hi
        if cmp.statistical and fail_on is not None and not alarm and worst < -fail_on:
            if wide is not None and wide.p_fail <= rigor.alpha:
                note = f"past {fail_on:.0%} in its own CI, not after Holm over {len(found)} cells"
            else:  # what it would take to rule the regression out (or establish it)
                bound = math.log(1 - fail_on) if cmp.higher_is_better else math.log(1 + fail_on)
                need = runs_to_settle(cmp, rigor, bound)
                note = f"about {need} runs a side would settle a {fail_on:.0%} regression" if need else MANY
        elif cmp.statistical and not moved:
            need = runs_to_settle(cmp, rigor, 0.0)
            note = f"about {need} runs a side would settle it" if need else MANY
        out.append(
            Change(
                name,
                arm,
                cmp.subject.cell,
                c,
                lo,
                hi,
                cmp.baseline.n,
                cmp.subject.n,
                label,
                cmp.higher_is_better,
                alarm,
                note,
            )
        )
    return Across(before, after, out, refused, fail_on, rigor.confidence)


def runs_to_settle(cmp: Comparison, rigor: Rigor, bound: float) -> int | None:
    """Runs a side that would make the interval of log(after / before) exclude `bound` (0:
    any change), if its estimate and the spread of each side's runs stayed as they are
    (None past MOST_BLOCKS, or when the estimate sits on the bound)."""
    logs = [[math.log(r.value) for r in stat.runs if r.value > 0] for stat in (cmp.subject, cmp.baseline)]
    if any(len(v) < 2 for v in logs):
        return None
    gap = abs(statistics.fmean(logs[0]) - statistics.fmean(logs[1]) - bound)
    spread = statistics.variance(logs[0]) + statistics.variance(logs[1])
    if gap <= 0 or spread <= 0:
        return None
    for n in range(max(len(v) for v in logs) + 1, MOST_BLOCKS + 1):
        if t_quantile(1.0 - (1.0 - rigor.confidence) / 2, 2 * n - 2) * math.sqrt(spread / n) < gap:
            return n
    return None
