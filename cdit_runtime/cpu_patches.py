"""Runtime-internal patches that let cache-dit's parallel paths run on a CPU-only host (gloo).

Applied once per worker process, after ``import cache_dit`` and before any phase, only when the
worker runs on CPU (`worker._init`). They change cache-dit's module attributes in this process
only: never the user's code, never a file on disk. Each one replaces an accelerator-only step by
its CPU equivalent and leaves the math cache-dit does around it untouched:

* ``ring_lse``: Ring attention merges the partial attention of each key/value shard with its
  log-sum-exp. cache-dit's native backend gets the LSE from
  ``aten._scaled_dot_product_flash_attention``, which has no CPU kernel. On CPU tensors the
  forward op now calls ``aten._scaled_dot_product_flash_attention_for_cpu`` (same
  ``(B, H, S, D)`` layout, returns the output and the natural-log LSE of shape ``(B, H, S)``,
  exactly what the ring merge expects). Everything else (masks, which cache-dit refuses with an
  LSE; non-CPU tensors) goes to cache-dit's own op unchanged.
* ``ring_merge``: the ring step merges (out, lse) pairs with a Triton or CuTe DSL kernel when
  cache-dit's kernels package imports; neither runs on CPU, so this process uses cache-dit's own
  PyTorch fallback formula (``_templated_ring.fused_merge_attn_states = None``).
* ``cpu_mesh``: the TP, text-encoder TP and VAE planners build their device mesh with
  ``torch.accelerator.current_accelerator().type``, which is ``None`` without an accelerator
  (``AttributeError``). Their ``mesh`` methods now use ``"cpu"`` in that case (DTensor and
  ``parallelize_module`` run on CPU over gloo); with an accelerator the original runs. Hybrid
  CP + TP needs no patch: ``ParallelismConfig`` builds its 3-D mesh with
  ``torch._C._get_accelerator()``, which already answers ``cpu``.
* ``tp_rmsnorm``: the TP planners of Wan (also ChronoEdit), Helios and LTX-Video swap the per-head
  RMSNorms for a ``DistributedRMSNorm`` whose ``forward`` ends with
  ``assert x_normed.device.type != "cpu"``, a guard for GPU deployments (its weight shard is a
  plain attribute that ``.to()`` does not move). On a CPU-only host that guard is all that stands
  in the way, so this process runs cache-dit's own ``forward`` source with that one line replaced
  by ``pass`` (same file, same line numbers, same globals); a ``forward`` without exactly that
  line is left alone. Planner modules load lazily, so this happens when a TP planner is applied.

torch and cache-dit are imported inside the functions (no work at import time).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["PATCHES", "apply_cpu_patches"]

PATCHES = ("ring_lse", "ring_merge", "cpu_mesh", "tp_rmsnorm")
_CPU_GUARD = 'assert x_normed.device.type != "cpu"'
_TP_MODULES = "cache_dit.distributed.transformers."  # Wan, Helios, LTX-Video: DistributedRMSNorm
_MARK = "_cdit_cpu_patch"


def _patch_ring_lse() -> bool:
    from cache_dit.attention.backends import native

    original = native._native_attention_forward_op
    if getattr(original, _MARK, False):
        return False

    @functools.wraps(original)  # keeps __name__: cache-dit allow-lists masks by the op's name
    def forward_op(
        ctx: Any,
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
        return_lse: bool = False,
        _save_ctx: bool = True,
        _cp_config: Any = None,
    ) -> Any:
        if not return_lse or attn_mask is not None or query.device.type != "cpu":
            return original(
                ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                return_lse, _save_ctx=_save_ctx, _cp_config=_cp_config,
            )  # fmt: skip
        import torch

        if _save_ctx:  # as cache-dit's op does (the ring calls it with _save_ctx=False)
            ctx.save_for_backward(query, key, value)
            ctx.attn_mask = attn_mask
            ctx.dropout_p = dropout_p
            ctx.is_causal = is_causal
            ctx.scale = scale
            ctx.enable_gqa = enable_gqa
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query.transpose(1, 2),
            key.transpose(1, 2),
            value.transpose(1, 2),
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
        )[:2]
        out = out.transpose(1, 2)
        lse = lse.transpose(1, 2)
        if lse.dim() == 3:
            lse = lse.unsqueeze(-1)
        return out, lse

    setattr(forward_op, _MARK, True)
    native._native_attention_forward_op = forward_op
    return True


def _patch_ring_merge() -> bool:
    from cache_dit.distributed.core import _templated_ring

    if _templated_ring.fused_merge_attn_states is None:
        return False
    _templated_ring.fused_merge_attn_states = None  # cache-dit's own PyTorch merge
    return True


def _cpu_mesh(original: Callable[..., Any], size_of: Callable[[Any], int]) -> Callable[..., Any]:
    @functools.wraps(original)
    def mesh(self: Any, parallelism_config: Any, **kwargs: Any) -> Any:
        import torch
        from torch.distributed import init_device_mesh

        if torch.accelerator.current_accelerator() is not None:
            return original(self, parallelism_config, **kwargs)
        return init_device_mesh(device_type="cpu", mesh_shape=[size_of(parallelism_config)])

    setattr(mesh, _MARK, True)
    return mesh


def _transformer_tp_size(config: Any) -> int:
    assert config.tp_enabled(), "tp_size must be set and greater than 1 for tensor parallelism"
    return int(config.tp_size)


def _patch_cpu_mesh() -> bool:
    from cache_dit.distributed.autoencoders.register import AutoEncoderDataParallelismPlanner
    from cache_dit.distributed.text_encoders.register import TextEncoderTensorParallelismPlanner
    from cache_dit.distributed.transformers.register import TensorParallelismPlanner

    if getattr(TensorParallelismPlanner.mesh, _MARK, False):
        return False
    original_tp = TensorParallelismPlanner.mesh

    @functools.wraps(original_tp)
    def transformer_mesh(self: Any, parallelism_config: Any, **kwargs: Any) -> Any:
        # Hybrid CP + TP: cache-dit returns the TP slice of its own 3-D mesh (already on CPU).
        if parallelism_config.hybrid_enabled() and parallelism_config._tp_mesh is not None:
            return original_tp(self, parallelism_config, **kwargs)
        return cpu_tp(self, parallelism_config, **kwargs)

    cpu_tp = _cpu_mesh(original_tp, _transformer_tp_size)
    setattr(transformer_mesh, _MARK, True)
    TensorParallelismPlanner.mesh = transformer_mesh
    TextEncoderTensorParallelismPlanner.mesh = _cpu_mesh(
        TextEncoderTensorParallelismPlanner.mesh, lambda c: int(c.text_encoder_world_size)
    )
    AutoEncoderDataParallelismPlanner.mesh = _cpu_mesh(
        AutoEncoderDataParallelismPlanner.mesh, lambda c: int(c.auto_encoder_world_size)
    )
    return True


def _without_cpu_guard(function: Callable[..., Any]) -> Callable[..., Any] | None:
    """``function`` recompiled from its source with the one CPU guard line made ``pass``."""
    import inspect
    import textwrap

    lines, first = inspect.getsourcelines(function)
    hits = [i for i, line in enumerate(lines) if line.strip() == _CPU_GUARD]
    if len(hits) != 1:
        return None
    line = lines[hits[0]]
    lines[hits[0]] = line[: len(line) - len(line.lstrip())] + "pass\n"
    source = "\n" * (first - 1) + textwrap.dedent("".join(lines))
    code = compile(source, inspect.getsourcefile(function) or "<cache_dit>", "exec")
    namespace: dict[str, Any] = {}
    exec(code, function.__globals__, namespace)  # the module's globals: torch, ...
    patched = namespace[function.__name__]
    patched.__qualname__ = function.__qualname__
    setattr(patched, _MARK, True)
    return patched


def _patch_loaded_rmsnorms() -> list[str]:
    """Patch ``DistributedRMSNorm.forward`` in the TP planner modules imported so far.

    Returns the modules whose ``forward`` checks the device otherwise (left alone).
    """
    import inspect

    left = []
    for name, module in list(sys.modules.items()):
        cls = getattr(module, "DistributedRMSNorm", None) if name.startswith(_TP_MODULES) else None
        if cls is None or getattr(cls.forward, _MARK, False):
            continue
        forward = _without_cpu_guard(cls.forward)
        if forward is None:  # no guard (nothing to do) or not exactly one guard line
            if "device.type" in inspect.getsource(cls.forward):
                left.append(name)
            setattr(cls.forward, _MARK, True)  # looked at once
            continue
        cls.forward = forward
    return left


def _patch_tp_rmsnorm() -> bool:
    """Patch the norms whenever a TP planner is applied (planner modules load lazily).

    Importing a planner module here would register its planners early, and cache-dit only
    imports the full set when its registry is empty: patching at ``apply`` keeps that intact.
    """
    from cache_dit.distributed.transformers.register import TensorParallelismPlanner

    if getattr(TensorParallelismPlanner.apply, _MARK, False):
        return False
    original = TensorParallelismPlanner.apply

    @functools.wraps(original)
    def apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            left = _patch_loaded_rmsnorms()
        except Exception as exc:  # never in the way of cache-dit's own apply
            left = [f"({type(exc).__name__}: {exc})"]
        for name in left:
            print(
                f"cdit_runtime CPU patches: tp_rmsnorm not applied to {name}: its "
                f"DistributedRMSNorm.forward has no single {_CPU_GUARD!r} line",
                file=sys.stderr,
            )
        return original(self, *args, **kwargs)

    setattr(apply, _MARK, True)
    TensorParallelismPlanner.apply = apply
    return True


def apply_cpu_patches() -> dict[str, str]:
    """Apply every CPU patch once; ``{name: "applied" | "in place" | "unavailable: why"}``.

    Never raises: a patch whose target this cache-dit version lacks is reported as unavailable
    (on stderr, i.e. the rank log) and the phases that need it fail with cache-dit's own error,
    which `errors.classify` labels ``NEEDS_ACCELERATOR``; the other phases run as usual.
    """
    steps: dict[str, Callable[[], bool]] = {
        "ring_lse": _patch_ring_lse,
        "ring_merge": _patch_ring_merge,
        "cpu_mesh": _patch_cpu_mesh,
        "tp_rmsnorm": _patch_tp_rmsnorm,
    }
    status: dict[str, str] = {}
    for name in PATCHES:
        try:
            status[name] = "applied" if steps[name]() else "in place"
        except Exception as exc:  # a patch must never stop the worker
            status[name] = f"unavailable: {type(exc).__name__}: {exc}"
    print(
        "cdit_runtime CPU patches: " + ", ".join(f"{k} {v}" for k, v in status.items()),
        file=sys.stderr,
    )
    return status
