"""The generated code that lets cache-dit's ring attention attend under the model's mask.

cache-dit's ring attention rotates the key/value shards between ranks (P2P: at step `s` a rank
holds the shard of rank `rank - s`) and merges the partial attentions by their log-sum-exp. It
hands the same `attn_mask` to every step, and its native step op refuses a mask with an LSE, so a
model whose attention gets a mask could not run under ring. The mask such a model builds covers
every key (and every query when it is square) in the order the ranks hold the shards: the order
Ulysses needs too (a mask over separately split streams is permuted into it first, see
`render_mask_reorder`). The generated module replaces the ring entry point cache-dit's attention
dispatch calls with one that hands each step the mask columns of the shard it holds and this
rank's rows, and computes that step's attention and LSE under them. Calls without a mask, or with
a mask that broadcasts over the keys, go to cache-dit unchanged.

A query whose keys in one shard are all masked gets a zero output and a floor LSE for that shard,
so the merge gives the shard no weight (an LSE of minus infinity would turn the merge into NaN).
"""

from __future__ import annotations

from .layout import INDENT, docstring, raise_lines
from .render_key_masks import MASK_FOR_KEYS_FUNCTION, ULYSSES_MASKS_FUNCTION, key_masks_code

RING_MASKS_FUNCTION = "_ring_attention_masks"
_USP = (
    "ring and Ulysses together (USP) are not part of this integration: the attention receives "
    "a mask, which this module's ring steps serve under ring attention alone"
)


def ring_masks_enable_lines(config: str, indent: str, width: int) -> list[str]:
    """Lines that install the masked ring steps when `config` (a ParallelismConfig) asks for
    ring attention, and stop USP (ring and Ulysses at once), which they do not serve."""
    b = INDENT
    return [
        f"{indent}if ({config}.ring_size or 1) > 1:",
        f"{indent}{b}if ({config}.ulysses_size or 1) > 1:",
        *raise_lines("NotImplementedError", _USP, indent=indent + 2 * b, width=width),
        f"{indent}{b}{RING_MASKS_FUNCTION}()",
        f"{indent}if ({config}.ulysses_size or 1) > 1:",
        f"{indent}{b}{ULYSSES_MASKS_FUNCTION}()",
    ]


def ring_masks_code(width: int) -> str:
    """`_RING_MASK_FLOOR`, the masked step `_masked_attention_lse` and `_ring_attention_masks`,
    which installs it into cache-dit's ring attention, after the code that makes a mask's
    columns follow the keys (`render_key_masks`, which Ulysses uses too)."""
    lines = [
        key_masks_code(width).rstrip("\n"),
        "",
        "",
        "_RING_MASK_FLOOR = -200.0  # the LSE of a shard whose keys are all masked",
        "",
        "",
        *_masked_attention_lse_lines(width),
        "",
        "",
        *_install_lines(width),
    ]
    return "\n".join(lines) + "\n"


def _masked_attention_lse_lines(width: int) -> list[str]:
    """`_masked_attention_lse`: one ring step's attention and LSE under the shard's mask."""
    b = INDENT
    step_doc = (
        "Attention of `query` over one key/value shard under `mask`, and its log-sum-exp, in "
        "cache-dit's ring layout: tensors `(batch, tokens, heads, dim)`, LSE `(batch, tokens, "
        "heads, 1)`. A query whose keys in this shard are all masked gets 0 and "
        "`_RING_MASK_FLOOR`, so the ring's merge gives the shard no weight."
    )
    return [
        "def _masked_attention_lse(",
        f"{b}query: torch.Tensor,",
        f"{b}key: torch.Tensor,",
        f"{b}value: torch.Tensor,",
        f"{b}mask: torch.Tensor,",
        f"{b}scale: float | None,",
        ") -> tuple[torch.Tensor, torch.Tensor]:",
        *docstring(step_doc, indent=b, width=width),
        f"{b}q, k, v = (t.transpose(1, 2) for t in (query, key, value))",
        f"{b}if mask.dtype == torch.bool:",
        f"{2 * b}bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)",
        f"{2 * b}bias = bias.masked_fill(~mask, float('-inf'))",
        f"{b}else:",
        f"{2 * b}bias = mask.to(q.dtype)",
        f"{b}out = lse = None",
        f"{b}if q.is_cuda:  # memory-efficient kernel: takes a bias and returns the LSE",
        f"{2 * b}try:",
        f"{3 * b}full = bias.expand(*q.shape[:3], k.shape[2]).contiguous()",
        f"{3 * b}out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(",
        f"{4 * b}q, k, v, full, True, scale=scale",
        f"{3 * b})[:2]",
        f"{3 * b}lse = lse[..., : q.shape[2]]",
        f"{2 * b}except RuntimeError:  # unsupported shape or dtype: the exact math below",
        f"{3 * b}out = lse = None",
        f"{b}if out is None or lse is None:",
        f"{2 * b}factor = scale if scale is not None else q.shape[-1] ** -0.5",
        f"{2 * b}scores = (q.float() @ k.float().transpose(-2, -1)) * factor + bias.float()",
        f"{2 * b}lse = torch.logsumexp(scores, dim=-1)",
        f"{2 * b}out = (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)",
        f"{b}# every key of the shard masked: no bias above the floor (the CUDA kernel then",
        f"{b}# reports an LSE of 0), or an LSE at -inf / NaN",
        f"{b}hidden = ~(bias > _RING_MASK_FLOOR).any(dim=-1)",
        f"{b}empty = hidden | ~(lse > _RING_MASK_FLOOR)",
        f"{b}out = out.masked_fill(empty.unsqueeze(-1), 0.0)",
        f"{b}lse = lse.float().masked_fill(empty, _RING_MASK_FLOOR)",
        f"{b}return out.transpose(1, 2), lse.transpose(1, 2).unsqueeze(-1)",
    ]


def _install_lines(width: int) -> list[str]:
    """`_ring_attention_masks`: swaps cache-dit's ring entry point for one that hands each step
    its shard's mask columns (idempotent: the original stays reachable)."""
    b = INDENT
    install_doc = (
        "Let cache-dit's ring attention take the mask this model's attention gets.\n\n"
        "cache-dit's ring steps hand the same `attn_mask` to every key/value shard. The mask "
        "this model's attention gets covers every key (and every query when square) in the "
        "order the ranks hold them, so each step now attends with the columns of the shard it "
        "holds (rank `rank - step`, as cache-dit's P2P ring passes them) and this rank's rows. "
        "Calls without a mask, or with one that broadcasts over the keys, run as before. "
        "Process-wide: the module enabled last serves every model of the process."
    )
    return [
        f"def {RING_MASKS_FUNCTION}() -> None:",
        *docstring(install_doc, indent=b, width=width),
        f"{b}from cache_dit.attention.backends import register",
        "",
        f"{b}current = register.RingAttention",
        f"{b}if getattr(current, '_cdit_step', None) is _masked_attention_lse:",
        f"{2 * b}return",
        f"{b}ring = getattr(current, '_cdit_original', current)  # cache-dit's own",
        "",
        f"{b}class MaskedRingAttention:",
        f"{2 * b}_cdit_original = ring",
        f"{2 * b}_cdit_step = _masked_attention_lse",
        "",
        f"{2 * b}@staticmethod",
        f"{2 * b}def apply(*args: Any) -> Any:",
        f"{3 * b}query, key, _, attn_mask = args[:4]",
        f"{3 * b}if attn_mask is None or attn_mask.shape[-1] == 1:",
        f"{4 * b}return ring.apply(*args)",
        f"{3 * b}scale, config = args[6], args[-1]",
        f"{3 * b}group = config._ring_mesh.get_group()",
        f"{3 * b}world = torch.distributed.get_world_size(group)",
        f"{3 * b}rank = torch.distributed.get_rank(group)",
        f"{3 * b}s_q, s_k = query.shape[1], key.shape[1]",
        f"{3 * b}attn_mask = {MASK_FOR_KEYS_FUNCTION}(attn_mask, query, key, group)",
        f"{3 * b}if attn_mask.shape[-1] != s_k * world:",
        f"{4 * b}raise ValueError(",
        f'{5 * b}f"ring attention: the attention mask covers {{attn_mask.shape[-1]}} keys, "',
        f'{5 * b}f"not {{world}} equal shards of {{s_k}}: ring attention needs sequence "',
        f'{5 * b}"lengths that divide by the ring size"',
        f"{4 * b})",
        f"{3 * b}mask = attn_mask",
        f"{3 * b}if mask.dim() >= 2 and mask.shape[-2] == s_q * world:",
        f"{4 * b}mask = mask[..., rank * s_q : (rank + 1) * s_q, :]",
        f"{3 * b}steps = iter(range(world))",
        "",
        f"{3 * b}def step(_ctx: Any, q: Any, k: Any, v: Any, *_: Any, **__: Any) -> Any:",
        f"{4 * b}source = (rank - next(steps)) % world",
        f"{4 * b}shard = mask[..., source * s_k : (source + 1) * s_k]",
        f"{4 * b}return _masked_attention_lse(q, k, v, shard, scale)",
        "",
        f"{3 * b}return ring.apply(*args[:9], step, *args[10:])",
        "",
        f"{b}register.RingAttention = MaskedRingAttention",
    ]
