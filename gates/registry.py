"""The registry of gate predicates: campaign files name a predicate, this finds it.

A predicate is registered as a `PredicateSpec`: its name, the function that judges, and
a pydantic params model, so a campaign file's `params` are validated when the file is
loaded, not when the gate first runs. Built-in predicates register themselves on import
(`gates.catalog` imports them all); a user's own come from the campaign's `plugins` and
call `register` the same way. It is the one registration call runtimes and probes use
too (`campaign.core.registry`):

    from gates.registry import Params, PredicateSpec, register

    class MineParams(Params):
        metric: str

    def mine(rows, gate, params) -> GateResult: ...

    register(PredicateSpec("mine", mine, MineParams))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from campaign.core.registry import Registry
from campaign.core.schema import GateEntry
from gates.result import GateResult

Predicate = Callable[[pd.DataFrame, GateEntry, Any], GateResult]


@dataclass(frozen=True)
class PredicateSpec:
    """A predicate as the registry holds it: the name campaign files use, the function
    that judges (canonical rows, the gate, its validated params), and the params model."""

    name: str
    judge: Predicate
    params: type[BaseModel]


PREDICATES: Registry[PredicateSpec] = Registry("predicate", lambda spec: spec.name)


class Params(BaseModel):
    """Base of every predicate's params: unknown keys are a user's mistake, refused."""

    model_config = ConfigDict(extra="forbid")


def register(spec: PredicateSpec) -> PredicateSpec:
    """Register a predicate (built-in or a user's own) under the name campaign files use."""
    return PREDICATES.register(spec)


def names() -> list[str]:
    return PREDICATES.names()


def get(name: str) -> Predicate:
    return PREDICATES.get(name).judge


def params_model(name: str) -> type[BaseModel]:
    return PREDICATES.get(name).params
