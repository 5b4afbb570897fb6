"""State, verdict and mode names: the one place each vocabulary word is defined.

Every other module compares against these enums, never against bare strings, so that a
renamed state cannot silently split the queue into two spellings.
"""

from __future__ import annotations

from enum import StrEnum


class ItemState(StrEnum):
    """Where a queue item stands. A failed *gate* still leaves its item `done`;
    `failed` means the measurement itself broke."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    BLOCKED = "blocked"


# How a done item that adds blocks until its gate is settled (`max_blocks`) ended: the
# start of its reason. A settled item is finished whatever the file's budget says now;
# one that spent its budget goes on when the budget is raised.
SETTLED = "settled after"
BUDGET_SPENT = "budget spent"


class AttemptState(StrEnum):
    """One run of one arm of one queue item. `interrupted` is what a crash leaves
    behind (found `running` with no live owner); resume continues it."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    BLOCKED = "blocked"
    INTERRUPTED = "interrupted"


class AttemptClaim(StrEnum):
    """What claiming an attempt found (`Store.claim_attempt`): a `new` attempt made, an
    interrupted one `resumed`, the newest one `done` already (nothing to run), or `busy`
    (another live holder runs it now)."""

    NEW = "new"
    RESUMED = "resumed"
    DONE = "done"
    BUSY = "busy"


class ProbeRunState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    BLOCKED = "blocked"
    CONTROL = "control"
    PENDING = "pending"
    INCONCLUSIVE = "inconclusive"


class Mode(StrEnum):
    """`canonical` uses the vendor's sampling and is the only mode a gate may read;
    `greedy` (temperature 0) is diagnostic and shown dimmed."""

    CANONICAL = "canonical"
    GREEDY = "greedy"


class ProbeName(StrEnum):
    CACHE_PROBE = "cache-probe"
    DECODE = "decode"
    TOOL_LOOP = "tool-loop"
    AGENT_LOAD = "agent-load"
    CACHE_CEILING = "cache-ceiling"
    LOAD = "load"


TERMINAL_ITEM_STATES = frozenset({ItemState.DONE, ItemState.FAILED, ItemState.BLOCKED})


class SampleKind(StrEnum):
    """What a measurement row is. Only samples are read by medians, intervals, charts
    and gates; summaries are numbers a probe derived from its samples (a median, a
    count, a run's throughput), read by the checks that ask for them by name; warm-ups
    are stored for the record and read by nothing. `campaign.store.samples` is the one filter."""

    SAMPLE = "sample"
    SUMMARY = "summary"
    WARMUP = "warmup"


# A load run's scenario names its profile; open-loop ones (a schedule fixed before the run)
# are `rate=<r>` (constant) and `poisson=<r>`. Here, in the core, because the load probe
# writes them and the load gates read them.
CONSTANT_SCENARIO_PREFIX = "rate="
POISSON_SCENARIO_PREFIX = "poisson="
TRACE_SCENARIO_PREFIX = "trace="


def is_open_loop(scenario: str) -> bool:
    """Whether a load run's scenario is an open-loop one (it had a schedule to keep)."""
    return scenario.startswith((CONSTANT_SCENARIO_PREFIX, POISSON_SCENARIO_PREFIX, TRACE_SCENARIO_PREFIX))
