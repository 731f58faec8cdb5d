"""The generated code that splits a stream's mask with the stream where every block receives it.

When the plan splits a stream at every block (`<list>.*`: the text, so that the
cross-attention's keys run context-parallel), the attention processor sees this rank's share of
that stream. Its mask must be this rank's share too: a processor that pads or builds the mask
from the key length (diffusers' `prepare_attention_mask`) would otherwise pad a whole mask to the
wrong length. The generated module registers a forward pre-hook on every block of the list; it
runs before cache-dit's split hook of the block, so it sees the stream whole, and splits the mask
on its last axis of the stream's full length into this rank's share (`tensor_split` over the CP
mesh, as cache-dit shards). The CP attention then gathers the mask's columns with the keys
(`render_key_masks`).
"""

from __future__ import annotations

from .layout import INDENT, docstring
from .plan_model import StreamMask

STREAM_MASKS_FUNCTION = "_split_stream_masks"


def stream_masks_code(masks: tuple[StreamMask, ...], width: int) -> str:
    """`_STREAM_MASKS` and `_split_stream_masks(transformer)`."""
    b = INDENT
    doc = (
        "Split each listed block argument, a mask of a stream cache-dit splits where every "
        "block receives it, into this rank's share of that stream: on the mask's last axis "
        "of the stream's full length, as cache-dit shards the stream. The hooks run before "
        "cache-dit's split hooks (they see the stream whole)."
    )
    entries = [f"{b}({m.list_attr!r}, {m.mask!r}, {m.stream!r})," for m in masks]
    lines = [
        "_STREAM_MASKS = (  # (block list, mask parameter, stream parameter)",
        *entries,
        ")",
        "",
        "",
        f"def {STREAM_MASKS_FUNCTION}(transformer: torch.nn.Module) -> None:",
        *docstring(doc, indent=b, width=width),
        f"{b}import inspect",
        "",
        f"{b}def find(names: list, args: tuple, kwargs: dict, name: str) -> tuple[Any, Any]:",
        f"{2 * b}if name in kwargs:",
        f"{3 * b}return kwargs[name], name",
        f"{2 * b}index = names.index(name) if name in names else len(args)",
        f"{2 * b}return (args[index], index) if index < len(args) else (None, None)",
        "",
        f"{b}def hook_for(names: list, mask_name: str, stream_name: str) -> Any:",
        f"{2 * b}def hook(module: Any, args: tuple, kwargs: dict) -> Any:",
        f"{3 * b}mask, where = find(names, args, kwargs, mask_name)",
        f"{3 * b}stream, _ = find(names, args, kwargs, stream_name)",
        f"{3 * b}config = getattr(transformer, '_cp_config', None)",
        f"{3 * b}mesh = getattr(config, '_flattened_mesh', None)",
        f"{3 * b}if mesh is None or not isinstance(mask, torch.Tensor) or stream is None:",
        f"{4 * b}return None",
        f"{3 * b}group = mesh.get_group()",
        f"{3 * b}world = torch.distributed.get_world_size(group)",
        f"{3 * b}axes = [d for d in range(mask.dim()) if mask.shape[d] == stream.shape[1]]",
        f"{3 * b}if world < 2 or not axes:",
        f"{4 * b}return None",
        f"{3 * b}rank = torch.distributed.get_rank(group)",
        f"{3 * b}mask = mask.tensor_split(world, dim=axes[-1])[rank]",
        f"{3 * b}if isinstance(where, str):",
        f"{4 * b}return args, {{**kwargs, where: mask}}",
        f"{3 * b}return (*args[:where], mask, *args[where + 1 :]), kwargs",
        "",
        f"{2 * b}return hook",
        "",
        f"{b}for list_attr, mask_name, stream_name in _STREAM_MASKS:",
        f"{2 * b}blocks = getattr(transformer, list_attr)",
        f"{2 * b}if len(blocks) == 0:",
        f"{3 * b}continue",
        f"{2 * b}names = list(inspect.signature(type(blocks[0]).forward).parameters)[1:]",
        f"{2 * b}hook = hook_for(names, mask_name, stream_name)",
        f"{2 * b}for block in blocks:",
        f"{3 * b}done = getattr(block, '_cdit_stream_masks', set())",
        f"{3 * b}if mask_name not in done:",
        f"{4 * b}block.register_forward_pre_hook(hook, with_kwargs=True)",
        f"{4 * b}block._cdit_stream_masks = done | {{mask_name}}",
    ]
    return "\n".join(lines) + "\n"
