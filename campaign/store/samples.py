"""The one filter on a measurement's kind (`campaign.core.states.SampleKind`): every reader of
samples, summaries or warm-ups goes through here, so what counts as a sample is decided
once. A frame or row without a `kind` (one built by hand, a probe's memory sink before it
is stored) holds samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from campaign.core.states import SampleKind


def kinds(frame: pd.DataFrame) -> pd.Series:
    """Each row's kind, `sample` where the frame has no kind column."""
    if "kind" in frame:
        col = frame["kind"]
        # rows concatenated from a frame without kinds: theirs are samples
        return col.astype(object).where(col.notna(), SampleKind.SAMPLE.value) if col.isna().any() else col
    return pd.Series(SampleKind.SAMPLE.value, index=frame.index, dtype=object)


def samples(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows medians, intervals, charts and gates read."""
    return frame[kinds(frame) == SampleKind.SAMPLE.value]


def summaries(frame: pd.DataFrame) -> pd.DataFrame:
    """The numbers probes derived from their samples."""
    return frame[kinds(frame) == SampleKind.SUMMARY.value]


def without_warmups(frame: pd.DataFrame) -> pd.DataFrame:
    """Everything but warm-up rows: what a verdict or a report may ever look at."""
    return frame[kinds(frame) != SampleKind.WARMUP.value]


def kind_of(row: Mapping[str, Any]) -> SampleKind:
    """A single row's kind (a probe's dict rows)."""
    return SampleKind(row.get("kind") or SampleKind.SAMPLE)
