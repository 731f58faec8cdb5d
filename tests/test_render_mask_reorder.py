"""`render_mask_reorder`: the mask permuted into Ulysses' all-to-all order, one test per rule."""

from __future__ import annotations

from render_cases import WIDTH, assert_code, code, top_level, top_level_names

from lsp_server.codegen.plan import MaskReorder
from lsp_server.codegen.render_mask_reorder import REORDER_FUNCTION, mask_reorder_code

REORDER = MaskReorder("blocks", "attention_mask", ("hidden_states", "encoder_hidden_states"))


def test_the_list_mask_and_streams_are_module_constants() -> None:
    text = mask_reorder_code(REORDER, WIDTH)
    assert top_level_names(text) == [
        "_MASK_REORDER_LIST",
        "_MASK_REORDER_MASK",
        "_MASK_REORDER_STREAMS",
        REORDER_FUNCTION,
    ]
    assert text.startswith(
        code(
            """
            _MASK_REORDER_LIST = "blocks"
            _MASK_REORDER_MASK = "attention_mask"
            _MASK_REORDER_STREAMS = ("hidden_states", "encoder_hidden_states")


            def _reorder_masks(transformer: torch.nn.Module, world: int) -> None:
            """
        )
    )


def test_reorder_function_hooks_every_block_of_the_list_once() -> None:
    assert_code(
        top_level(mask_reorder_code(REORDER, WIDTH), REORDER_FUNCTION),
        code(
            '''
            def _reorder_masks(transformer: torch.nn.Module, world: int) -> None:
                """Permute the `attention_mask` argument of every `blocks` block into the
                all-to-all order of `hidden_states` and `encoder_hidden_states` split
                across `world` ranks (the order the attention joins them). The full
                lengths are read where the first block is called (before its split
                hook); later blocks get this rank's slices.
                """
                import inspect

                blocks = getattr(transformer, _MASK_REORDER_LIST)
                if world < 2 or len(blocks) == 0:
                    return
                names = list(inspect.signature(type(blocks[0]).forward).parameters)[1:]
                lengths: dict[str, int] = {}

                def find(args: tuple, kwargs: dict, name: str) -> tuple[Any, int | None]:
                    if name in kwargs:
                        return kwargs[name], None
                    index = names.index(name) if name in names else len(args)
                    return (args[index], index) if index < len(args) else (None, None)

                def order(total: int, device: Any) -> torch.Tensor:
                    ids = torch.arange(total, device=device)
                    first = ids[: lengths['first']].tensor_split(world)
                    second = ids[lengths['first'] :].tensor_split(world)
                    return torch.cat([torch.cat(pair) for pair in zip(first, second)])

                def hook(module: Any, args: tuple, kwargs: dict) -> Any:
                    mask, index = find(args, kwargs, _MASK_REORDER_MASK)
                    if not isinstance(mask, torch.Tensor):
                        return None
                    a, _ = find(args, kwargs, _MASK_REORDER_STREAMS[0])
                    c, _ = find(args, kwargs, _MASK_REORDER_STREAMS[1])
                    total = mask.shape[-1]
                    if a.shape[1] + c.shape[1] == total:  # whole: the first block, before its split
                        lengths['first'] = a.shape[1]
                    elif 'first' not in lengths:
                        lengths['first'] = a.shape[1] * world
                    perm = order(total, mask.device)
                    mask = mask.index_select(-1, perm)
                    if mask.dim() >= 2 and mask.shape[-2] == total:
                        mask = mask.index_select(-2, perm)
                    if index is None:
                        kwargs = {**kwargs, _MASK_REORDER_MASK: mask}
                    else:
                        args = (*args[:index], mask, *args[index + 1 :])
                    return args, kwargs

                for block in blocks:
                    if not getattr(block, '_cdit_mask_reorder', False):
                        block.register_forward_pre_hook(hook, with_kwargs=True)
                        block._cdit_mask_reorder = True
            '''
        ),
    )


def test_the_docstring_names_the_plan_and_follows_the_width() -> None:
    text = mask_reorder_code(MaskReorder("layers", "mask", ("x", "ctx")), 60)
    assert top_level(text, REORDER_FUNCTION).splitlines()[1:8] == [
        '    """Permute the `mask` argument of every `layers` block',
        "    into the all-to-all order of `x` and `ctx` split",
        "    across `world` ranks (the order the attention joins",
        "    them). The full lengths are read where the first",
        "    block is called (before its split hook); later blocks",
        "    get this rank's slices.",
        '    """',
    ]
