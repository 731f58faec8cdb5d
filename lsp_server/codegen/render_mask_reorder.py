"""The generated code that permutes an attention mask into Ulysses' all-to-all order.

Ulysses splits two token streams (image, text) as separate tensors; the attention joins each
rank's slices (`[i_r, t_r]`) and the all-to-all concatenates them in rank order
(`[i_0, t_0, i_1, t_1, ...]`). A mask forward built over the joint `[image, text]` sequence is
permuted into that order at every block of the split list (its key axis, and its query axis when
it is square); the blocks after the gather get the mask as forward built it. The slices are the
ones cache-dit's sharders cut (`tensor_split`: equal for Ulysses, uneven for UAA).
"""

from __future__ import annotations

from .layout import INDENT, docstring, quote
from .plan import MaskReorder

REORDER_FUNCTION = "_reorder_masks"


def mask_reorder_code(reorder: MaskReorder, width: int) -> str:
    b = INDENT
    first, second = reorder.streams
    doc = (
        f"Permute the `{reorder.mask}` argument of every `{reorder.list_attr}` block into the "
        f"all-to-all order of `{first}` and `{second}` split across `world` ranks (the order "
        "the attention joins them). The full lengths are read where the first block is called "
        "(before its split hook); later blocks get this rank's slices."
    )
    lines = [
        f"_MASK_REORDER_LIST = {quote(reorder.list_attr)}",
        f"_MASK_REORDER_MASK = {quote(reorder.mask)}",
        f"_MASK_REORDER_STREAMS = ({quote(first)}, {quote(second)})",
        "",
        "",
        f"def {REORDER_FUNCTION}(transformer: torch.nn.Module, world: int) -> None:",
        *docstring(doc, indent=b, width=width),
        f"{b}import inspect",
        "",
        f"{b}blocks = getattr(transformer, _MASK_REORDER_LIST)",
        f"{b}if world < 2 or len(blocks) == 0:",
        f"{2 * b}return",
        f"{b}names = list(inspect.signature(type(blocks[0]).forward).parameters)[1:]",
        f"{b}lengths: dict[str, int] = {{}}",
        "",
        f"{b}def find(args: tuple, kwargs: dict, name: str) -> tuple[Any, int | None]:",
        f"{2 * b}if name in kwargs:",
        f"{3 * b}return kwargs[name], None",
        f"{2 * b}index = names.index(name) if name in names else len(args)",
        f"{2 * b}return (args[index], index) if index < len(args) else (None, None)",
        "",
        f"{b}def order(total: int, device: Any) -> torch.Tensor:",
        f"{2 * b}ids = torch.arange(total, device=device)",
        f"{2 * b}first = ids[: lengths['first']].tensor_split(world)",
        f"{2 * b}second = ids[lengths['first'] :].tensor_split(world)",
        f"{2 * b}return torch.cat([torch.cat(pair) for pair in zip(first, second)])",
        "",
        f"{b}def hook(module: Any, args: tuple, kwargs: dict) -> Any:",
        f"{2 * b}mask, index = find(args, kwargs, _MASK_REORDER_MASK)",
        f"{2 * b}if not isinstance(mask, torch.Tensor):",
        f"{3 * b}return None",
        f"{2 * b}a, _ = find(args, kwargs, _MASK_REORDER_STREAMS[0])",
        f"{2 * b}c, _ = find(args, kwargs, _MASK_REORDER_STREAMS[1])",
        f"{2 * b}total = mask.shape[-1]",
        f"{2 * b}if a.shape[1] + c.shape[1] == total:  # whole: the first block, before its split",
        f"{3 * b}lengths['first'] = a.shape[1]",
        f"{2 * b}elif 'first' not in lengths:",
        f"{3 * b}lengths['first'] = a.shape[1] * world",
        f"{2 * b}perm = order(total, mask.device)",
        f"{2 * b}mask = mask.index_select(-1, perm)",
        f"{2 * b}if mask.dim() >= 2 and mask.shape[-2] == total:",
        f"{3 * b}mask = mask.index_select(-2, perm)",
        f"{2 * b}if index is None:",
        f"{3 * b}kwargs = {{**kwargs, _MASK_REORDER_MASK: mask}}",
        f"{2 * b}else:",
        f"{3 * b}args = (*args[:index], mask, *args[index + 1 :])",
        f"{2 * b}return args, kwargs",
        "",
        f"{b}for block in blocks:",
        f"{2 * b}if not getattr(block, '_cdit_mask_reorder', False):",
        f"{3 * b}block.register_forward_pre_hook(hook, with_kwargs=True)",
        f"{3 * b}block._cdit_mask_reorder = True",
    ]
    return "\n".join(lines) + "\n"
