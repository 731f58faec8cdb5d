"""The generated code that lets a mask's columns follow the keys inside cache-dit's CP attention.

Context parallelism joins every rank's key shard inside the attention (Ulysses: all-to-all, in
rank order; ring: one shard per step). A mask the attention gets must cover the joined keys.
Two shapes a model hands its attention do not, as cache-dit reads them:

- a 2-D `(batch, keys)` mask: diffusers' native kernel views it as `(batch, 1, 1, keys)`,
  cache-dit's CP kernels pass it to SDPA as is, which reads the batch axis as queries;
- a mask over this rank's keys only: a per-token mask split with the tokens (its blocks also
  apply it to this rank's tokens), or the mask of keys that are whole on every rank. Its columns
  are gathered from every rank in rank order, the order the keys are joined, so they follow the
  keys exactly (for keys whole on every rank the all-to-all joins `world` copies of them, and the
  mask then holds `world` copies of its columns).

A mask with one entry per head (diffusers' `prepare_attention_mask` repeats it over the heads)
follows the heads too under Ulysses: the all-to-all hands rank r the r-th block of heads. A mask
over this rank's queries as well as its keys lacks the entries between ranks' tokens: such a call
stops with the reason. The generated module wraps cache-dit's Ulysses entry point with
this (`_ulysses_attention_masks`), and its masked ring steps (`render_ring_masks`) apply it first.
"""

from __future__ import annotations

from .layout import INDENT, docstring, raise_lines

ULYSSES_MASKS_FUNCTION = "_ulysses_attention_masks"
MASK_FOR_KEYS_FUNCTION = "_mask_for_keys"
_HEADS = (
    "Ulysses attention: the attention mask has one entry per head and the heads do not divide "
    "by the Ulysses size"
)
_QUERY_AND_KEYS = (
    "context parallelism: the attention mask covers this rank's queries and keys only; the "
    "entries between different ranks' tokens are not in it"
)


def key_masks_code(width: int) -> str:
    """`_gather_key_mask`, `_mask_for_keys` and `_ulysses_attention_masks`."""
    lines = [
        *_gather_lines(width),
        "",
        "",
        *_mask_for_keys_lines(width),
        "",
        "",
        *_install_lines(width),
    ]
    return "\n".join(lines) + "\n"


def _gather_lines(width: int) -> list[str]:
    b = INDENT
    doc = (
        "The mask columns of every rank's keys, in rank order (the order cache-dit joins the "
        "key shards), from this rank's columns. Ranks may hold different numbers of keys "
        "(uneven splits)."
    )
    return [
        "def _gather_key_mask(mask: torch.Tensor, group: Any) -> torch.Tensor:",
        *docstring(doc, indent=b, width=width),
        f"{b}world = torch.distributed.get_world_size(group)",
        f"{b}data = mask.to(torch.uint8) if mask.dtype == torch.bool else mask",
        f"{b}size = torch.tensor([data.shape[-1]], device=data.device)",
        f"{b}sizes = [torch.zeros_like(size) for _ in range(world)]",
        f"{b}torch.distributed.all_gather(sizes, size, group=group)",
        f"{b}counts = [int(s.item()) for s in sizes]",
        f"{b}pad = max(counts) - data.shape[-1]",
        f"{b}padded = torch.nn.functional.pad(data, (0, pad)).contiguous()",
        f"{b}parts = [torch.empty_like(padded) for _ in range(world)]",
        f"{b}torch.distributed.all_gather(parts, padded, group=group)",
        f"{b}whole = torch.cat([p[..., :n] for p, n in zip(parts, counts)], dim=-1)",
        f"{b}return whole.bool() if mask.dtype == torch.bool else whole",
    ]


def _mask_for_keys_lines(width: int) -> list[str]:
    b = INDENT
    doc = (
        "The attention mask as cache-dit's context-parallel attention needs it: a 2-D "
        "`(batch, keys)` mask as `(batch, 1, 1, keys)`, and a mask over this rank's keys with "
        "the columns of every rank's keys."
    )
    return [
        f"def {MASK_FOR_KEYS_FUNCTION}(",
        f"{b}mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor, group: Any",
        ") -> torch.Tensor:",
        *docstring(doc, indent=b, width=width),
        f"{b}s_q, s_k = query.shape[1], key.shape[1]",
        f"{b}if mask.dim() == 2 and mask.shape[0] == query.shape[0]:",
        f"{2 * b}mask = mask[:, None, None, :]",
        f"{b}if torch.distributed.get_world_size(group) < 2 or s_k < 2 or mask.shape[-1] != s_k:",
        f"{2 * b}return mask",
        f"{b}if mask.dim() >= 2 and s_q > 1 and mask.shape[-2] == s_q:",
        *raise_lines("ValueError", _QUERY_AND_KEYS, indent=2 * b, width=width),
        f"{b}return _gather_key_mask(mask, group)",
    ]


def _install_lines(width: int) -> list[str]:
    b = INDENT
    doc = (
        "Let cache-dit's Ulysses attention take the masks this model's attention gets: each "
        "call's mask goes through `_mask_for_keys` first. Calls without a mask run as before. "
        "Process-wide: the module enabled last serves every model of the process."
    )
    return [
        f"def {ULYSSES_MASKS_FUNCTION}() -> None:",
        *docstring(doc, indent=b, width=width),
        f"{b}from cache_dit.attention.backends import register",
        "",
        f"{b}current = register.UlyssesAttention",
        f"{b}if getattr(current, '_cdit_masks', None) is {MASK_FOR_KEYS_FUNCTION}:",
        f"{2 * b}return",
        f"{b}ulysses = getattr(current, '_cdit_original', current)  # cache-dit's own",
        "",
        f"{b}class MaskedUlyssesAttention:",
        f"{2 * b}_cdit_original = ulysses",
        f"{2 * b}_cdit_masks = {MASK_FOR_KEYS_FUNCTION}",
        "",
        f"{2 * b}@staticmethod",
        f"{2 * b}def apply(*args: Any) -> Any:",
        f"{3 * b}query, key, _, attn_mask = args[:4]",
        f"{3 * b}if attn_mask is None:",
        f"{4 * b}return ulysses.apply(*args)",
        f"{3 * b}group = args[-1]._ulysses_mesh.get_group()",
        f"{3 * b}mask = {MASK_FOR_KEYS_FUNCTION}(attn_mask, query, key, group)",
        f"{3 * b}heads, world = query.shape[2], torch.distributed.get_world_size(group)",
        f"{3 * b}if mask.dim() == 4 and heads > 1 and mask.shape[1] == heads:",
        f"{4 * b}# a mask per head: the all-to-all hands rank r the r-th block of heads",
        f"{4 * b}if heads % world:",
        *raise_lines("ValueError", _HEADS, indent=5 * b, width=width),
        f"{4 * b}mask = mask.chunk(world, dim=1)[torch.distributed.get_rank(group)]",
        f"{3 * b}return ulysses.apply(*args[:3], mask, *args[4:])",
        "",
        f"{b}register.UlyssesAttention = MaskedUlyssesAttention",
    ]
