"""Tensor-parallel plan inference: which Linear layers of each block list are sharded and how,
which module attributes `shard_div_attr` must divide, the attention strategy (MHA, GQA sharded /
FFN-only / replicate), fused weights that need rearranging, DTensor-unsafe kernels, divisibility
pre-flight checks for the TP sizes, and TE-P / VAE-P support of the pipeline's components.

Everything is inferred from the model's source (module constructors and the data flow of the
block `forward`s and attention processors), never from cache-dit's registries or model names.

Public API: `infer_tensor_parallel(ctx) -> TensorParallelResult` (`.warnings`, `.to_json()`).
"""

from __future__ import annotations

from ..parallel_input import ParallelContext
from .assemble import assemble
from .result import TensorParallelResult


def infer_tensor_parallel(ctx: ParallelContext) -> TensorParallelResult:
    """The tensor-parallel plan of the transformer in `ctx` (never raises for odd model code: a
    block whose flow cannot be followed is reported with CDIT312 and a partial plan)."""
    return assemble(ctx)


__all__ = ["TensorParallelResult", "infer_tensor_parallel"]
