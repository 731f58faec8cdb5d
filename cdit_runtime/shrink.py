"""Shrink a transformer config for smoke runs: fewer layers and heads, same interfaces.

Works on any ``config.json`` (diffusers or third-party) by key names, without importing the class:

* layer counts (``num_layers``, ``num_single_layers``, ``depth``, ``num_*_blocks``...) are capped;
* head counts (``num_attention_heads``, ``num_heads``, ``heads``) are capped, key/value head counts
  keep their grouping ratio, and ``attention_head_dim`` stays (RoPE axes sum to it);
* inner widths given in absolute numbers (``ffn_dim``, ``intermediate_size``, ``mlp_dim``...) and
  model widths derived from heads (``hidden_size``/``dim`` when no head dim is configured) shrink
  by the same ratio as the heads, rounded up to a multiple of 16;
* interface widths (``in_channels``, ``joint_attention_dim``, ``text_dim``, ``patch_size``...) are
  kept so the shrunk transformer still fits the real text encoders and VAE.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["shrink_config"]

_LAYER_KEY = re.compile(r"^(num_)?(\w+_)?(layers|blocks)$|^depth$|^n_layers$")
_HEAD_KEYS = ("num_attention_heads", "num_heads", "heads", "n_heads", "attention_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads")
_INNER_KEYS = (
    "ffn_dim",
    "ff_dim",
    "intermediate_size",
    "mlp_dim",
    "ff_inner_dim",
    "ffn_hidden_dim",
)
_WIDTH_KEYS = ("hidden_size", "dim", "inner_dim", "model_dim", "d_model")
_HEAD_DIM_KEYS = ("attention_head_dim", "head_dim", "dim_head", "attention_head_size")
# Block counts that describe something else than stacked transformer blocks.
_NOT_LAYERS = ("num_res_blocks", "layers_per_block", "num_refiner_blocks_keep")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _round16(value: float) -> int:
    return max(16, math.ceil(value / 16.0) * 16)


def shrink_config(config: dict[str, Any], *, layers: int = 2, heads: int = 4) -> dict[str, Any]:
    """A copy of ``config`` with at most ``layers`` blocks per list and ``heads`` heads."""
    out = dict(config)
    for key, value in config.items():
        if key.startswith("_") or key in _NOT_LAYERS or not _is_int(value):
            continue
        if _LAYER_KEY.match(key) and value > layers:
            out[key] = layers

    head_key = next((k for k in _HEAD_KEYS if _is_int(config.get(k))), None)
    if head_key is None or config[head_key] <= heads:
        return out
    old_heads = config[head_key]
    ratio = heads / old_heads
    out[head_key] = heads
    for key in _KV_KEYS:
        kv = config.get(key)
        if _is_int(kv) and kv > 0:
            out[key] = max(1, heads * kv // old_heads) if kv < old_heads else heads
    for key in _INNER_KEYS:
        if _is_int(config.get(key)):
            out[key] = _round16(config[key] * ratio)
    if not any(_is_int(config.get(k)) for k in _HEAD_DIM_KEYS):
        # Widths are heads x head_dim here: shrink them with the heads (head_dim stays).
        for key in _WIDTH_KEYS:
            if _is_int(config.get(key)):
                out[key] = max(heads, config[key] * heads // old_heads)
    return out
