"""A CPU stand-in for FlashAttention-2's `flash_attn_func` (the real package needs CUDA): the same
signature and `(batch, tokens, heads, dim)` layout, computed with SDPA. Tests put `tests/fakes` on
`sys.path` to run models written against flash-attn on gloo ranks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# torch's own kernel, as a compiled one would be: a process-wide SDPA route (installed earlier in
# the same process by another model) does not reach it
_kernel = getattr(F.scaled_dot_product_attention, "_cdit_original", F.scaled_dot_product_attention)


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
) -> torch.Tensor:
    out = _kernel(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        dropout_p=dropout_p,
        is_causal=causal,
        scale=softmax_scale,
    )
    return out.transpose(1, 2)
