"""What a worker rank tells its controller: one JSON line per message, ``{"type", "time", ...}``.

Standard library only (see `contract`). A rank writes them through its `worker_context.Channel`
(`encode`); the controller's launch driver reads them back (`decode`) and handles each by its
class, never by looking up keys. The body's keys are the camelCase form of the field names, as in
every contract document.

A rank's life, in order: `Ready` (imports done) -> `Loaded` (model built, integration applied) ->
per phase `PhaseStarted`, `Step`*, then `PhaseDone` (rank 0's record) or `RankFailed` (this rank
failed inside a collective phase) -> `Done`. `Fatal` at any point before the phases: the rank
stops.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .codec import ContractError, from_json, to_json
from .results import ErrorInfo


@dataclass
class Ready:
    """Imports done: how long they took, the library versions (None: not installed)."""

    TYPE: ClassVar[str] = "ready"
    rank: int
    import_s: float
    versions: dict[str, str | None] = field(default_factory=dict)
    device_names: list[str] = field(default_factory=list)


@dataclass
class LoadedIntegration:
    transformer_class: str | None = None
    error: ErrorInfo | None = None


@dataclass
class Loaded:
    """The model is built; rank 0's `model` describes it (its components, sizes)."""

    TYPE: ClassVar[str] = "loaded"
    rank: int
    load_s: float
    model: dict[str, Any] = field(default_factory=dict)
    integration: LoadedIntegration = field(default_factory=LoadedIntegration)


@dataclass
class Fatal:
    """The rank cannot go on: joining the nodes, initializing or loading failed."""

    TYPE: ClassVar[str] = "fatal"
    rank: int
    stage: Literal["nodes", "init", "load"]
    error: ErrorInfo


@dataclass
class PhaseStarted:
    TYPE: ClassVar[str] = "phase_started"
    phase: str


@dataclass
class Step:
    """A denoising step of a phase's timed run ended (`label`: which run of the phase)."""

    TYPE: ClassVar[str] = "step"
    phase: str
    step: int
    total: int
    label: str | None = None


@dataclass
class RankFailed:
    """This rank failed inside a collective phase (the others may be stuck in a collective)."""

    TYPE: ClassVar[str] = "rank_failed"
    phase: str
    rank: int
    error: ErrorInfo


@dataclass
class PhaseDone:
    """A phase's record (`controller._phase_done` reads it): measurements, output, verdict parts."""

    TYPE: ClassVar[str] = "phase_done"
    phase: str
    record: dict[str, Any]


@dataclass
class Done:
    TYPE: ClassVar[str] = "done"
    rank: int


WorkerMessage = Ready | Loaded | Fatal | PhaseStarted | Step | RankFailed | PhaseDone | Done

_BY_TYPE: dict[str, type] = {
    cls.TYPE: cls for cls in (Ready, Loaded, Fatal, PhaseStarted, Step, RankFailed, PhaseDone, Done)
}


def encode(message: WorkerMessage, now: float) -> bytes:
    """One line: ``{"type", "time", <the message's fields>}``."""
    return (json.dumps({"type": message.TYPE, "time": now, **to_json(message)}) + "\n").encode()


def decode(data: Any) -> WorkerMessage | None:
    """The message a decoded JSON line holds; None for anything else (not an object, an unknown
    type, or fields that do not match it): the controller skips such lines."""
    if not isinstance(data, Mapping):
        return None
    cls = _BY_TYPE.get(str(data.get("type")))
    if cls is None:
        return None
    body = {k: v for k, v in data.items() if k not in ("type", "time")}
    try:
        return from_json(cls, body)
    except ContractError:
        return None
