"""Pre-flight checks for the requested context-parallel sizes, before any GPU is used.

Codes: CDIT201-209 are registry notes; context parallelism uses CDIT2xx from 210:
- CDIT210 (error): plain Ulysses cannot pad the heads for this size (`H_pad >= H_local`).
- CDIT211 (info): heads not divisible; Ulysses pads them (works, some waste).
- CDIT212 (warning): sequence length not guaranteed divisible: use UAA (`ulysses_anything`).
- CDIT213 (warning): GQA under CP: repeat K/V heads or set a `cp_gqa_strategy`.
- CDIT214 (warning): DBCache with a split at a block can crash (cache-dit 1.5.x); prefer a root
  split when cache and CP must coexist, or check with a 2-process CPU run.
- CDIT215 (warning): the attention processor needs a patch (direct SDPA) or a third-party attention
  class needs `_parallel_config` set by the planner.
- CDIT216 (warning): an input the plan splits is optional in forward: the caller must pass it.
- CDIT217 (warning): attention mask over separately split streams: reorder it into all-to-all order.
- CDIT218 (info): differences from the `_cp_plan` diffusers ships for this class.
- CDIT219 (warning): the attention processor builds or pads a mask from local lengths: patch it.
- CDIT220 (warning): a full-length position tensor's sequence axis could not be inferred from
  how it is built: no plan (the approach is "none"), never a guessed axis.
"""

from __future__ import annotations

import ast
import math

from ..astutil import param_defaults
from ..model import Diagnostic, Evidence
from ..parallel_input import ParallelContext

_HEAD_KEYS = ("num_attention_heads", "num_heads", "heads", "n_heads", "attention_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "kv_heads", "n_kv_heads")


def config_value(ctx: ParallelContext, keys: tuple[str, ...]) -> tuple[str, int] | None:
    """A config value from config.json, else the transformer's `__init__` default."""
    for key in keys:
        if ctx.config and isinstance(ctx.config.get(key), int):
            return key, ctx.config[key]
    if ctx.init is not None:
        defaults = param_defaults(ctx.init)
        for key in keys:
            if key in defaults:
                try:
                    value = ast.literal_eval(defaults[key])
                except (ValueError, SyntaxError):
                    continue
                if isinstance(value, int) and not isinstance(value, bool):
                    return key, value
    return None


def head_checks(ctx: ParallelContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    heads = config_value(ctx, _HEAD_KEYS)
    line = ctx.init.lineno if ctx.init else 1
    if heads is None:
        return out
    key, h = heads
    for size in ctx.cp_sizes:
        if size <= 1 or h % size == 0:
            continue
        local = math.ceil(h / size)
        pad = local * size - h
        if pad >= local:
            valid = [
                s
                for s in range(2, h + 1)
                if h % s == 0 or (math.ceil(h / s) * s - h) < math.ceil(h / s)
            ]
            out.append(
                Diagnostic(
                    "error",
                    "CDIT210",
                    f"{key}={h} on {size} ranks: Ulysses would pad {pad} heads, more "
                    f"than the {local} each rank holds; use one of {valid[:8]}",
                    ctx.path,
                    line,
                    fix={"setting": "cpSizes", "drop": [size], "fits": valid[:8]},
                )
            )
        else:
            out.append(
                Diagnostic(
                    "info",
                    "CDIT211",
                    f"{key}={h} is not divisible by {size}: Ulysses pads to "
                    f"{local * size} heads ({pad} padded)",
                    ctx.path,
                    line,
                )
            )
    kv = config_value(ctx, _KV_KEYS)
    if kv is not None and kv[1] < h:
        out.append(
            Diagnostic(
                "warning",
                "CDIT213",
                f"GQA ({key}={h}, {kv[0]}={kv[1]}): under Ulysses repeat K/V to "
                "all heads before attention or set a cp_gqa_strategy "
                "(replicate_kv_sequence)",
                ctx.path,
                line,
            )
        )
    return out


def evidence_diagnostics(code: str, severity: str, items: list[Evidence]) -> list[Diagnostic]:
    return [Diagnostic(severity, code, e.message, e.path, e.line) for e in items]  # type: ignore[arg-type]
