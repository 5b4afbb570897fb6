"""The constant text of docs/gates.md: how a verdict is reached (`INTRO`) and what each
verdict word means (`VERDICTS`), taken from `gates.compare`, `gates.blockstats` and
`gates.family`. `gates.doc` puts the generated list of predicates between them.
"""

from __future__ import annotations

from campaign.core.states import Verdict

VERDICTS: dict[Verdict, str] = {
    Verdict.PASS: "The claim holds at the stated error rate: every comparison's CI lies wholly on the "
    "passing side, and a comparative gate's pass survives the family's Holm adjustment.",
    Verdict.FAIL: "The claim is refuted: the CI lies wholly on the failing side (surviving Holm), or a "
    "rule failed it: a subject surely over `max_error_rate`, or one that failed every request in a cell. "
    "A failed gate leaves its queue item `done`.",
    Verdict.INCONCLUSIVE: "The numbers cannot decide, and the reason says why and what is needed: the CI "
    "straddles the threshold, every block exactly on it, fewer than `min_runs` server runs, a subject "
    "over `max_error_rate` but not surely, a baseline or control over it, an arm whose cell mixes "
    "recipes, a rerun one arm has not finished, or a decision that does not survive Holm over the family.",
    Verdict.PENDING: "Nothing to judge yet: no canonical rows of the metric for an arm, no cell the arms "
    "share, or a predicate that needs a baseline arm has none.",
    Verdict.BLOCKED: "An arm of the gate could not be measured for an external reason (a missing build "
    "component, model file or hardware), quoted word for word; items that depend on it wait, "
    "and `campaign resume` re-checks it first.",
    Verdict.CONTROL: 'A `control` gate with `role = "control"`: it characterises its arms against '
    "each other and claims nothing.",
}

INTRO = """\
# Gates

A gate is a claim about arms (`subjects`, and `baseline` arms to compare with), decided
by a **predicate** from the numbers the gate's queue items measured. This page is
generated from the predicate registry (`python -m gates.doc > docs/gates.md`); the gate
table's own keys are in [campaign-file.md](campaign-file.md#gates), the metrics a gate
can name in [metrics.md](metrics.md).

```toml
[[gates]]
id = "faster"
predicate = "relative_improvement"
params = { metric = "decode_tps", probe = "decode", min_gain = 0.10 }
subjects = ["B"]
baseline = ["A"]
```

A gate's verdict comes with a one-line reason that quotes its numbers, e.g. `decode_tps >=
20.0 holds: A decode_tps 53.0 [51.7, 54.3] 95% CI, 3 runs x 3 requests`. `params` are
checked when the file loads: unknown keys, missing required ones, a metric that is not
in the catalogue or that no probe of the gate's items stores, and an attribution
ablation that is not the subject with one mechanism switched off are refused (exit 2).

## What a gate reads

- Only **canonical** rows (the model's own sampling); greedy rows and warm-up trials
  never reach a predicate. With `reads = "own-items"` (the default) only the rows of the
  queue items that feed the gate (every item's when none does); with `reads = "all"`,
  every item's.
- A **cell** is (probe, scenario, context, mode, settings), the settings being a hash of
  the probe's resolved parameters at that context (a sample size such as decode's
  `repeats` aside: more requests per run are the same cell). Cells are never pooled: a gate that names no
  context compares each context on its own, and every one must pass. An arm whose cell
  mixes two recipes is not compared.
- **The server run is the unit.** A queue item's `blocks` are server runs; in each block every
  arm of the item gets its own server start, in an order drawn at random from
  `campaign.seed`. Each (arm, block, cell) is one number, the median of that run's
  requests: the requests of one run share its start's speed, so they are not
  independent evidence. Request-level spreads are shown in the report, never decide.
  (`majority` counts trials instead, each its own draw of the model's sampling, with
  exact binomial intervals; `goodput` takes one share of requests met per run.)

## Direction

A predicate that compares reads its metric's direction from the catalogue
([metrics.md](metrics.md): "higher is better", "lower is better") unless the gate sets
`higher_is_better` (for `also_metric`, `also_higher_is_better`). Setting it against the
catalogue loads, but `campaign check` and `campaign run` print a warning. On a metric
with no direction (a count), nothing is filled in and the param's own default below
applies: set it. `threshold` says its direction with `op`; `attribution` and `goodput`
take `lower_is_better` (default true), which the catalogue does not fill in;
`load_goodput` reads higher as better and `load_latency` lower, always; `equivalence` has
no direction.

## The interval

Every interval is a CI at `campaign.confidence` (95% by default; a gate's `confidence`
param overrides it) over server runs:

- **one arm**: the t interval of the mean log run value; the arm's value is the geometric
  mean of its run medians.
- **two arms, paired**: when they share at least `min_runs` blocks (default 3), the t
  interval of the mean per-block log ratio, n - 1 degrees of freedom. Drift and load
  within a block hit both sides of a pair alike and cancel.
- **two arms, unpaired**: when they shared fewer blocks, Welch's t interval of the
  difference of the mean log values. The reason names the method ("paired over 5
  blocks").
- Values at or below 0 are compared as raw differences instead of log ratios.
- Fewer than `min_runs` runs on either side is `inconclusive` ("B has 1 run; needs 3
  (blocks, each its own server start)").

A comparison passes when its CI lies wholly beyond the threshold and fails when it lies
wholly short of it: a one-sided test at (1 - confidence) / 2, 2.5% each way at 95%. A
bound on one arm (`threshold`, a guard, ...) is tested the same way against its value.
With no spread between runs (every block the same value) the values decide by
themselves, and a value exactly on the threshold in every block decides nothing: two arms
that gave identical values in every block are no evidence of a gain, nor of its absence.
`equivalence` is two one-sided tests. A gate passes only when every one of its claims
(every subject, baseline arm and cell, and any guard or bound it also rests on) passes;
it fails when any fails, so its fails are Holm-adjusted over all of them, and many cells
do not make identical arms fail more often than one.

**Errors.** An arm's error rate covers every request it made in the rows the gate
reads, with its exact (Clopper-Pearson) interval. A subject surely over
`max_error_rate` (default 0.05; the interval's lower end above it) fails. One over it at
its point but not surely cannot pass and is not failed either: `inconclusive` ("B failed
2/30 requests (0.0667 [0.00818, 0.221] 95% CI): over 0.05, but not surely"). At 30
requests the point rate alone failed a subject with a true 4% a third of the time. The
pass side still reads the point rate: showing a rate surely within 5% takes at least 72
requests without a failure, more than most items make. A baseline or control over the
limit makes the gate `inconclusive`, never a fail for the subject.

**The family.** A campaign's gates (the "in the family" column below: the comparative
ones, and the bounds on one arm with the p-values of their own tests) are one family,
unless a gate sets `exploratory = true`. Their pass claims and their fail claims are each
adjusted by Holm's step-down method at (1 - confidence) / 2, which holds the family-wise
error at that level without assuming the gates independent. Each gate's p-values are
those of the claims that decide it: a guard broken beyond doubt fails its gate by the
guard's own test, whatever the gain's. A verdict that does not survive becomes
`inconclusive` ("passes alone, but not over the family of 4 gates, Holm"); adjustment
never turns an inconclusive verdict into a decision. In a family of more than one gate
each member's reason says its size. An exploratory gate stands outside, and its reason
says "exploratory: outside the family, no multiplicity control".

**Enough blocks to pass.** Holm's strictest level is alpha / (family size), and a paired
test over n blocks has n - 1 degrees of freedom, so few blocks in a large family can pass
only a gain far past its threshold: it must clear the threshold by t(1 - alpha/m, n - 1) /
sqrt(n) times the spread (standard deviation) of the per-block log ratios. Three blocks
in a family of four need 5.1 spreads, five blocks 1.9. `campaign check` and `campaign run`
warn, before anything starts, of a comparative gate whose planned blocks need more than
3 spreads (or are fewer than the gate's `min_runs`, so it can only be inconclusive), and
name the blocks (the items' `blocks`) that bring it to 2.

**Adding blocks until settled.** An item with `max_blocks` (or a campaign's
`max_blocks`, for every item with a gate and no `blocks` above 1) runs `min_blocks`
blocks (default 3), then evaluates its gate after each block and stops as soon as the
gate is `pass` or `fail` with its deciding p within alpha / (the family's planned size),
so that no gate joining the family later can undo it; at `max_blocks` it stops anyway,
and a gate still open says `inconclusive at budget`. Looking after every block and
stopping when a fixed-design interval excludes the threshold makes it wrong far more
often than it says (re-testing after each of blocks 3 to 10 passes a true +10% against a
+10% gate about 9% of the time, at a nominal 2.5%), so every gate whose rows include
such an item's is tested in a way that stays valid. The item's looks are planned (one
after each block from `min_blocks` to `max_blocks`), so where that is the sharper test
each look tests each claim at alpha / (the number of looks), Bonferroni over the planned
looks (`gates.looks.planned_looks`; its p-values are multiplied by the looks for the
family, and the reason says "6 planned looks"): at 3 to 8 blocks a +15% gain against a
+10% gate passes 43% of the time, against 31% for the sequence below, each claim still
erring at most alpha. Where it is not (a budget of one look), and wherever blocks are
added after a look (below), the gate reads **confidence sequences** (CS). Each claim is one-sided: a pass is made when
a lower bound of the half-normal mixture Bayes factor on the t statistic (a normal prior
of variance 3 on the standardised effect and the scale-invariant prior on the spread:
the safe t-test, after Lai 1976) reaches 1/alpha. Under the null that factor is a
nonnegative martingale in the number of blocks, so by Ville's inequality it ever reaches
1/alpha with probability at most alpha: the sequence holds at every block count at once,
and each claim's error stays within (1 - confidence) / 2 however the stopping goes (the
derivation is in `gates/blockstats.py`). Measured on generated blocks at the boundary
(3 to 10 blocks, 2,000 campaigns, a tested claim): false pass 1.0%, false fail 0.75%;
naive re-testing on the same draws 9.2% and 8.6%. The price is width: a sequence decides
at 3 blocks only a very large effect of a lone gate, and a gain just past its threshold
needs more blocks than a fixed design; `benchmarks/verdict_calibration.py` (part 3)
prints, per true effect, how often and after how many blocks each design decides. Its
p-values are anytime-valid, so Holm over the family still holds. Reasons say "95% CS"
and the gate page names the method. Two arms that shared no block are compared by the
pooled two-sample t, which assumes their run spreads alike. Setting `sequential = true`
on a gate does the same for a gate you intend to watch while adding blocks by hand.

**Looking again: reruns, added blocks, kept servers.** A campaign asks a gate's question
more than once: a user reruns an item after "inconclusive", raises its `blocks`, or
resumes with more blocks. Each of those adds blocks after a look, and a fixed-design t
interval re-tested on the grown sample is optional stopping (identical arms rerun until
the gate passes pass about 11% of the time within 5 tries). So every look is recorded:
each verdict row carries its look (`evidence.look`: the question, the blocks read, the
attempts read, whether every item the gate reads had finished), and the gate page lists
them. A *question* is the gate with the settings and recipes of the cells it reads.

- `campaign rerun ITEM` with the settings the item ran under adds its blocks after those
  already run: the same question, more blocks. With `--set` it asks a new question, which
  verdicts read instead of the old one and never pool with it.
- A gate reads the fixed-design t only while no earlier complete look at the same
  question read fewer blocks than it reads now (the number of blocks was fixed before the
  first look). Otherwise it reads the confidence sequence over all its blocks, and its
  reason says "blocks added after a look (3 blocks, inconclusive; now 6)". The first look
  errs at most alpha, all later looks together at most alpha more, so a question asked any
  number of times errs at most 2 alpha per side (5% at 95%).
- A gate that reads an adaptive item's rows reads confidence sequences, fed by it or not.
- A block is a server start: items that ran on one kept server (`campaign.keep_servers`)
  record the start (`server_block`), and a gate reading several of them takes the start's
  requests in a cell as one run and pairs arms by start. A kept server serves only items
  launched alike (recipe, tool flags, `sim.*`); another item gets servers of its own.

`benchmarks/verdict_calibration.py` (part 4) measures the two user paths on identical
arms: "rerun until pass" (up to 3 tries of 3 blocks) and "blocks added after a look" (3
then 6 blocks).
"""
