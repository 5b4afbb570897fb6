"""Looks at a gate: when its verdict may still use a fixed-design test, and when every
look so far forces a confidence sequence.

Why: a campaign asks a gate's question more than once. A user reruns an item after an
inconclusive verdict, raises its `repeats` after the status said "about 7 blocks would
decide it", or resumes with more blocks. Each of those adds blocks *after a look*, and a
fixed-design t interval re-tested on the grown sample is optional stopping: with identical
arms, rerunning until the gate passes passes about 11% of the time within 5 tries instead
of 2.5%. The rule here keeps every path to a verdict at its error rate:

- **A question** is a gate with the settings its rows were measured under: the probe
  settings and server recipes of every cell it reads (`question_of`). A rerun with other
  settings (`--set`) is a new question and never pools with the old one (the store reads
  only the newest settings of an item); a rerun with the same settings adds blocks to the
  same question.
- **A look** is a verdict computed once every item the gate reads had finished
  (`Look.complete`): a verdict a user could act on. Verdicts computed while an item of the
  plan is still to run are shown, but the plan's size was fixed before them.
- **The fixed-design t** is used only while no earlier complete look at the same question
  read fewer blocks than the gate reads now, i.e. while the number of blocks was fixed
  before the first look. Otherwise the gate reads the confidence sequence over *all* its
  blocks (`gates.blockstats`, the one adaptive items use), whose error holds at every
  block count at once.

The price is bounded and paid once: the first complete look errs at most alpha, every later
look together at most alpha more (Ville's inequality on the sequence), so a question asked
any number of times errs at most 2 alpha per side (5% at 95% confidence) against at most
alpha for one fixed design. `benchmarks/verdict_calibration.py` measures both user paths
("rerun until pass", "blocks added after a look").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from campaign.core.states import Verdict
from gates.blockstats import sequential_t, t_quantile
from gates.runs import block_of

# verdicts a user could act on: a pending or blocked gate decided nothing
DECIDING = (Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.CONTROL)


@dataclass(frozen=True)
class Look:
    """One look at a gate: which question, how many blocks it read, whether every item the
    gate reads had finished, the attempts read, and what it said."""

    question: str
    blocks: int
    complete: bool
    verdict: str = ""
    attempts: tuple[int, ...] = ()

    def evidence(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "blocks": self.blocks,
            "complete": self.complete,
            "attempts": list(self.attempts),
        }

    @classmethod
    def from_evidence(cls, evidence: dict[str, Any], verdict: str) -> Look | None:
        """The look a stored verdict's evidence records (None for verdicts stored without one)."""
        raw = evidence.get("look")
        if not isinstance(raw, dict) or "question" not in raw:
            return None
        return cls(
            question=str(raw["question"]),
            blocks=int(raw.get("blocks", 0)),
            complete=bool(raw.get("complete", False)),
            verdict=verdict,
            attempts=tuple(int(a) for a in raw.get("attempts", ())),
        )


def question_of(gate_id: str, rows: pd.DataFrame) -> str:
    """A short hash naming the question a gate's rows answer: the gate and the (settings,
    recipe) of every cell it reads. The same rows measured again under the same settings
    are the same question; other settings are another."""
    parts: Iterable[tuple[str, str, str]] = ()
    if not rows.empty:
        settings = rows["settings_hash"].astype(str) if "settings_hash" in rows else pd.Series("", index=rows.index)
        recipes = rows["recipe_hash"].astype(str) if "recipe_hash" in rows else pd.Series("", index=rows.index)
        arms = rows["arm_id"].astype(str)
        parts = sorted(set(zip(arms, settings, recipes)))
    text = gate_id + "|" + ";".join("/".join(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def look_at(gate_id: str, rows: pd.DataFrame, complete: bool) -> Look:
    """The look a verdict from `rows` (what the gate reads, its own arms only) would be."""
    if rows.empty:
        return Look(question_of(gate_id, rows), 0, complete)
    attempts = tuple(sorted({int(a) for a in rows["attempt_id"]})) if "attempt_id" in rows else ()
    return Look(question_of(gate_id, rows), int(block_of(rows).nunique()), complete, attempts=attempts)


def added_after_look(now: Look, earlier: Sequence[Look]) -> Look | None:
    """The earlier complete look at the same question that read fewer blocks than `now`
    (the first such), or None: then the number of blocks was fixed before the first look
    and a fixed-design test is valid."""
    for look in earlier:
        if look.question == now.question and look.complete and look.verdict in DECIDING and look.blocks < now.blocks:
            return look
    return None


def sequence_reason(earlier: Look, now: Look) -> str:
    """Why a gate reads a confidence sequence although no item of it is adaptive."""
    return (
        f"blocks added after a look ({earlier.blocks} blocks, {earlier.verdict or 'looked at'}; now {now.blocks}): "
        "a confidence sequence over all of them"
    )


def planned_looks(least: int, most: int, alpha: float) -> int:
    """How an item that adds blocks until its gate is settled, from `least` to `most`, is
    judged: the number of its planned looks when testing each at alpha / looks
    (Bonferroni) is the sharper test at the budget, else 1 (then the confidence sequence).

    Why both: the sequence holds however many looks are taken, which blocks added after a
    look need; an adaptive item's looks are planned before the first (one after each block
    from `least` to `most`), and over such a handful the union bound is the narrower
    interval: at 3..8 blocks the per-look t needs 3.64 standard errors at the last block
    against the sequence's 4.17, and a +15% gain against a +10% gate at 3% restart noise
    passes 43% of the time instead of 31%. Each claim errs at most alpha either way."""
    looks = most - least + 1
    if looks <= 1:
        return 1
    bonferroni = t_quantile(1.0 - alpha / looks, most - 1)
    sequence = sequential_t(most, most - 1, alpha)
    return looks if bonferroni <= sequence else 1


def looks_for(plans: Sequence[tuple[int, int]], alpha: float) -> int:
    """The planned looks of a gate whose rows come from adaptive items with budgets
    `plans` ((least, most) each; every item looks after each of its blocks): their total
    when Bonferroni is the sharper test for every one of them (`planned_looks`), else 1,
    and the gate reads the confidence sequence."""
    if plans and all(planned_looks(least, most, alpha) > 1 for least, most in plans):
        return sum(most - least + 1 for least, most in plans)
    return 1
