"""The registry of gate predicates: campaign files name a predicate, this finds it.

A predicate is registered by name with a pydantic params model, so a campaign file's
`params` are validated when the file is loaded, not when the gate first runs. Built-in
predicates register themselves on import (`gates.catalog` imports them all); a user's
own come from the campaign's `plugins` and call `register` the same way. The registry
is the one generic kind runtimes and probes use too (`campaign.core.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from campaign.core.registry import Registry
from campaign.core.schema import GateEntry
from gates.result import GateResult

Predicate = Callable[[pd.DataFrame, GateEntry, Any], GateResult]

PREDICATES: Registry[tuple[Predicate, type[BaseModel]]] = Registry("predicate")


class Params(BaseModel):
    """Base of every predicate's params: unknown keys are a user's mistake, refused."""

    model_config = ConfigDict(extra="forbid")


def register(name: str, params: type[BaseModel]) -> Callable[[Predicate], Predicate]:
    """Register a predicate (built-in or a user's own) under a name campaign files use."""

    def deco(fn: Predicate) -> Predicate:
        PREDICATES.add(name, (fn, params))
        return fn

    return deco


def names() -> list[str]:
    return PREDICATES.names()


def get(name: str) -> Predicate:
    return PREDICATES.get(name)[0]


def params_model(name: str) -> type[BaseModel]:
    return PREDICATES.get(name)[1]
