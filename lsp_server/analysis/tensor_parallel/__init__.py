"""Tensor-parallel plan inference (being written)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Diagnostic
from ..parallel_input import ParallelContext


@dataclass
class TensorParallelResult:
    attention_strategy: str | None = None
    layers: dict[str, str] = field(default_factory=dict)
    shard_div_attrs: list[str] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "attentionStrategy": self.attention_strategy,
            "layers": self.layers,
            "shardDivAttrs": self.shard_div_attrs,
            "warnings": [w.to_json() for w in self.warnings],
        }


def infer_tensor_parallel(ctx: ParallelContext) -> TensorParallelResult:
    return TensorParallelResult()
