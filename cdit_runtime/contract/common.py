"""What every contract document shares: the schema version, the literal types and `doc_field`.

Standard library only (see `contract`).
"""

from __future__ import annotations

import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("verification.schema.json")

PhaseKind = Literal[
    "baseline", "kernels", "cache", "ulysses", "ring", "uaa", "tp", "tp_tep", "vae_p", "hybrid"
]
PHASE_KINDS: tuple[str, ...] = typing.get_args(PhaseKind)
PARALLEL_KINDS = frozenset({"ulysses", "ring", "uaa", "tp", "tp_tep", "vae_p", "hybrid"})

PhaseStatus = Literal["pending", "running", "ok", "failed", "skipped", "timeout", "cancelled"]
Verdict = Literal["reference", "pass", "warn", "fail", "garbled", "not_exercised"]
# Phases that run the pipeline on one process (the baseline's launch carries them).
SINGLE_KINDS = frozenset({"baseline", "kernels", "cache"})
OutputKind = Literal["image", "video", "audio", "latents"]
RunStatus = Literal["running", "completed", "failed", "cancelled"]
EventKind = Literal[
    "run_started",
    "launch_started",
    "phase_started",
    "step",
    "phase_finished",
    "error",
    "run_finished",
]
DType = Literal["float32", "bfloat16", "float16"]
DeviceKind = Literal["auto", "cuda", "cpu"]


def doc_field(
    text: str, *, schema: dict[str, Any] | None = None, omit_empty: bool = False, **kwargs: Any
) -> Any:
    """A dataclass field with a description that ends up in the JSON schema. `schema`: keywords
    added to the field's generated schema (a pattern, a minimum); `omit_empty`: `to_json` leaves
    the field out while it is None or empty (it is never required)."""
    metadata: dict[str, Any] = {"doc": text}
    if schema:
        metadata["schema"] = schema
    if omit_empty:
        metadata["omit_empty"] = True
    return field(metadata=metadata, **kwargs)
