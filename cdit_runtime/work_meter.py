"""What a phase's transformer computed on this rank: evidence that its parallelism engaged.

A context-parallel plan whose splits never fire (module keys that match nothing, an
``expected_dims`` the tensors never have) leaves every rank computing the whole model, and the
output then equals the baseline: a "pass" for an integration that parallelizes nothing. Two
measurements tell it apart from a working one, compared with the baseline phase's by `scoring`:

* ``medianRows``: the median number of rows (tokens x batch) the transformers' ``nn.Linear``
  layers take per call during the phase's first transformer call. Split tokens halve it on two
  ranks; caching skips calls but leaves each call's rows alone.
* ``paramElements``: the elements of the transformers' parameters held by this rank (a sharded
  DTensor counts its local shard). Tensor parallelism lowers it; ``textEncoderElements`` is the
  same for the text encoders (TE-P).

torch is imported inside the functions; nothing runs at import time.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["local_elements", "measured_rows", "text_encoders_of", "transformers_of"]


def transformers_of(pipe: Any, names: list[str]) -> list[Any]:
    """The phase's transformer components (``transformer``, ``transformer_2``, ...)."""
    components = getattr(pipe, "components", {}) or {}
    return [components[n] for n in names if n.startswith("transformer") and components.get(n)]


def text_encoders_of(pipe: Any) -> list[Any]:
    """The pipeline's text encoders (``text_encoder``, ``text_encoder_2``, ...)."""
    components = getattr(pipe, "components", {}) or {}
    return [c for n, c in components.items() if n.startswith("text_encoder") and c is not None]


def local_elements(modules: list[Any]) -> int:
    """Parameter elements this rank holds (a DTensor's local shard)."""
    total = 0
    for module in modules:
        for param in module.parameters():
            local = param.to_local() if hasattr(param, "to_local") else param
            total += local.numel()
    return total


@contextmanager
def measured_rows(modules: list[Any], out: dict[str, Any]) -> Iterator[None]:
    """Count the rows every ``nn.Linear`` of ``modules`` takes per call during the first
    transformer call inside the block (one denoising step: the hooks then remove themselves);
    ``out["medianRows"]`` gets their median (absent when no Linear ran)."""
    import torch

    rows: list[int] = []
    handles: list[Any] = []

    def count(_module: Any, args: Any) -> None:
        if args and isinstance(args[0], torch.Tensor) and args[0].dim() >= 1:
            width = args[0].shape[-1] or 1
            rows.append(args[0].numel() // width)

    def done(_module: Any, _args: Any, _output: Any) -> None:
        for handle in handles:
            handle.remove()
        handles.clear()

    for module in modules:
        handles += [
            sub.register_forward_pre_hook(count)
            for sub in module.modules()
            if isinstance(sub, torch.nn.Linear)
        ]
        handles.append(module.register_forward_hook(done))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        if rows:
            out["medianRows"] = statistics.median(rows)
