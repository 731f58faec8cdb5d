"""FIXTURE: hand-written standalone integration for the third-party DemoMMDiT test model.

Stands in for `lsp_server/codegen`'s output (same interface as ``flux_standalone.py``) for
``tests/fixtures/models/demo_mmdit.py``, a model diffusers and cache-dit do not know: block lists
and patterns as the analysis labels them (``transformer_blocks`` Pattern_1,
``single_transformer_blocks`` Pattern_3, no PatchFunctor). CP is not exercised with it.
"""

from __future__ import annotations

from typing import Any

TRANSFORMER_CLASS = "DemoMMDiTTransformer2DModel"


def block_adapter(pipe: Any, **kwargs: Any) -> Any:
    from cache_dit import BlockAdapter, ForwardPattern

    transformer = kwargs.pop("transformer", None) or pipe.transformer
    return BlockAdapter(
        pipe=pipe,
        transformer=transformer,
        blocks=[transformer.transformer_blocks, transformer.single_transformer_blocks],
        forward_pattern=[ForwardPattern.Pattern_1, ForwardPattern.Pattern_3],
        check_forward_pattern=True,
        has_separate_cfg=True,
        **kwargs,
    )


def cp_plan(transformer: Any) -> dict[str, Any]:
    raise NotImplementedError("the DemoMMDiT fixture does not carry a CP plan")


def enable(
    pipe: Any,
    *,
    cache_config: Any = None,
    parallelism_config: Any = None,
    transformer: Any = None,
) -> Any:
    import cache_dit

    if cache_config is None and parallelism_config is None:
        return pipe
    cache_dit.enable_cache(
        block_adapter(pipe, transformer=transformer or pipe.transformer),
        cache_config=cache_config,
        parallelism_config=parallelism_config,
    )
    return pipe
